"""C++ as code bases publish it: a kernel template in a header with no instantiation (init writes
it from the entry), an instantiation qualified by its namespace and written outside it, a
template's entry written as its instantiation, a type from an included header, and an index
array read through a local pointer."""

import shutil
from pathlib import Path

import pytest

from kerntune.engine.signature import parse_kernel
from kerntune.tui.cli import main

DATA = Path(__file__).resolve().parent / "data" / "cpp"
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


def filled(text: str, **values: str) -> str:
    for old, new in values.items():
        text = text.replace(old, new)
    return text


def test_init_writes_the_instantiation_the_entry_names_for_a_template_in_a_header(tmp_path, capsys):
    shutil.copyfile(DATA / "ops.cuh", tmp_path / "ops.cuh")
    assert main(["init", str(tmp_path / "ops.cuh"), "--entry", "ops::scale_rows<float, 256>"]) == 0
    assert "wrote ops_scale_rows.cu beside it with the instantiation scale_rows<float, 256>" in capsys.readouterr().out
    source = (tmp_path / "ops_scale_rows.cu").read_text()
    assert source.startswith((DATA / "ops.cuh").read_text())
    assert source.rstrip().endswith("template __global__ void ops::scale_rows<float, 256>(float* __restrict__ out, "
                                    "const float* __restrict__ x, float factor, int n);")
    text = (tmp_path / "kernel.toml").read_text()
    assert 'entry = "scale_rows"' in text and 'sources = { cuda = "ops_scale_rows.cu" }' in text
    assert 'name = "out"\ndtype = "float32"' in text and 'name = "x"\ndtype = "float32"' in text
    # with the wrong number of template arguments: one line naming what the kernel takes
    assert main(["init", str(tmp_path / "ops.cuh"), "--entry", "ops::scale_rows<float>", "-o",
                 str(tmp_path / "other.toml")]) != 0
    assert "takes 2 (T, BLOCK)" in capsys.readouterr().err


@needs_nvcc
def test_the_written_instantiation_compiles_and_the_spec_checks_complete(tmp_path, capsys):
    for name in ("reduce.cu", "ops.cuh"):
        shutil.copyfile(DATA / name, tmp_path / name)
    assert main(["init", str(tmp_path / "ops.cuh"), "--entry", "ops::scale_rows<float, 256>"]) == 0
    capsys.readouterr()
    spec = tmp_path / "kernel.toml"
    spec.write_text(filled(spec.read_text(), **{
        'grid = ["TODO"]': 'grid = ["ceil_div(n, 256)"]', 'block = ["TODO"]': "block = [256]",
        'name = "TODO"': 'name = "small"', 'n = "TODO"': "n = 1001", 'shape = ["TODO"]': 'shape = ["n"]',
        'bytes = "TODO"': 'bytes = "8 * n"', 'value = "TODO"': 'value = "2.0"'}))
    assert main(["init", "--check", str(spec)]) == 0  # compiled by nvcc, the kernel found by its entry
    assert ": complete: scale_rows" in capsys.readouterr().out


def test_a_namespace_qualified_instantiation_outside_the_namespace_is_read_and_is_the_entry():
    source = (DATA / "reduce.cu").read_text()
    sig = parse_kernel(source)
    # host code launches it: the name alone may name several kernels, the entry is the instantiation
    assert sig.entry == "reduce0<float>" and [a.ctype for a in sig.args] == ["float", "float", "int"]
    assert sig.dynamic_shared == "extern __shared__ float partial[];"
    alone = parse_kernel(source[:source.index("// its launcher")])
    assert alone.entry == "reduce0"  # one instantiation and no launch: its arguments can become parameters


def test_a_type_from_an_included_header_and_an_index_array_through_a_local_pointer(tmp_path, capsys):
    for name in ("embed.cu", "types.h"):
        shutil.copyfile(DATA / name, tmp_path / name)
    assert main(["init", str(tmp_path / "embed.cu")]) == 0
    capsys.readouterr()
    text = (tmp_path / "kernel.toml").read_text()
    assert "has no dtype" not in text
    ids = text[text.index('name = "ids"'):].split("[[arg]]")[0]
    assert 'init = "randint"' in ids and 'range = [0, "V"]' in ids, ids
