"""Dynamic shared memory on every launch: the original's, the gate's, the search's and the final
check's carry the bytes the spec (or the template) declares, on CUDA (`extern __shared__`) and on
OpenCL (a `__local` pointer argument, wherever the kernel declares it); `init` writes them or a
TODO, and `init --check` refuses a spec that needs them and lacks them."""

import shutil
from pathlib import Path

import pytest
from cli_support import rules_round

from kerntune.engine.backends.opencl import local_arguments
from kerntune.engine.evaluate import launch_geometry
from kerntune.engine.events import GateChecked
from kerntune.engine.session import load_session
from kerntune.engine.signature import parse_kernel
from kerntune.engine.template import load_template
from kerntune.tui.cli import main

HERE = Path(__file__).resolve().parent
DATA = HERE / "data" / "dynshared"


def test_the_kernels_declare_their_dynamic_shared_memory_and_the_local_pointer_is_placed_where_declared():
    cu, cl = (DATA / "row_sum.cu").read_text(), (DATA / "row_sum.cl").read_text()
    assert parse_kernel(cu, "row_sum").dynamic_shared == "extern __shared__ float partial[];"
    assert parse_kernel(cl, "row_sum").dynamic_shared == "__local float *partial"
    assert local_arguments(cl, "row_sum") == (1,) and local_arguments(cu, "row_sum") == ()


def test_the_original_launch_of_a_template_carries_its_shared_bytes(tmp_path):
    d = tmp_path / "t"
    shutil.copytree(DATA, d)
    for name in ("row_sum.cu", "row_sum.cl"):
        (d / name).write_text("#ifndef BLOCK\n#define BLOCK 256\n#endif\n" + (d / name).read_text())
    spec = d / "kernel.toml"
    text = spec.read_text().replace("block = [256]", 'block = ["BLOCK"]\nbaseline_grid = ["N"]\nbaseline_block = [256]')
    text = text.replace('shared_bytes = "256 * 4"', 'shared_bytes = "BLOCK * 4"')
    spec.write_text(text + '\n[[param]]\nname = "BLOCK"\nvalues = [64, 256]\ndefault = 256\n')
    t = load_template(spec)
    geo = launch_geometry(t, None, t.problems[0])
    assert geo.block == (256, 1, 1) and geo.shared_bytes == 1024 and geo.dynamic_shared


def tune_row_sum(backend: str, tmp_path: Path, capsys):
    s, gates = rules_round(DATA / "kernel.toml", backend, tmp_path, capsys)
    assert any(r.verified and r.config and r.config["BLOCK"] != 256 for r in s.results())
    return s, gates[0]


def test_the_rules_loop_runs_a_dynamic_local_memory_kernel_through_the_gate_on_opencl(tmp_path, capsys):
    _, gate = tune_row_sum("opencl", tmp_path, capsys)
    template = load_template(gate.directory)
    assert template.shared_bytes is not None and template.shared_bytes.source == "BLOCK * 4"


KERNEL = DATA / "row_sum.cu"


@pytest.mark.parametrize("launcher, want", [
    ("row_sum<<<N, 256, 256 * sizeof(float)>>>(out, inp, C);", 'shared_bytes = "256 * 4"   # from the file'),
    ("row_sum<<<N, pick(N), bytes_for(C)>>>(out, inp, C);",
     'shared_bytes = "TODO"   # dynamic shared memory: the file\'s launch <<<N, pick(N), bytes_for(C)>>>'),
    ("", 'shared_bytes = "TODO"   # bytes of dynamic shared memory a block gets: the kernel declares '
         "`extern __shared__ float partial[];`"),
])
def test_init_writes_the_shared_bytes_of_the_launch_or_a_todo_naming_it(launcher, want, tmp_path, capsys):
    host = f"void run(float* out, const float* inp, int N, int C) {{ {launcher} }}\n" if launcher else ""
    (tmp_path / "k.cu").write_text(KERNEL.read_text() + host)
    assert main(["init", str(tmp_path / "k.cu"), "-o", str(tmp_path / "kernel.toml")]) == 0
    out = capsys.readouterr().out
    assert want in (tmp_path / "kernel.toml").read_text()
    assert ("launch.shared_bytes" in out) == ("TODO" in want), out


def test_init_leaves_the_local_pointer_to_the_engine_and_check_refuses_a_spec_without_shared_bytes(tmp_path, capsys):
    shutil.copyfile(DATA / "row_sum.cl", tmp_path / "row_sum.cl")
    assert main(["init", str(tmp_path / "row_sum.cl"), "-o", str(tmp_path / "kernel.toml")]) == 0
    capsys.readouterr()
    text = (tmp_path / "kernel.toml").read_text()
    assert 'name = "partial"' not in text and "`__local float *partial` is workspace" in text
    assert 'shared_bytes = "TODO"' in text
    d = tmp_path / "spec"
    shutil.copytree(DATA, d)
    spec = d / "kernel.toml"
    spec.write_text(spec.read_text().replace('shared_bytes = "256 * 4"\n', ""))
    main(["init", "--check", str(spec)])
    out = capsys.readouterr().out
    assert "declares dynamic shared memory (`__local float *partial`)" in out
    assert "launch.shared_bytes must say" in out and "complete" not in out


def test_the_spec_compiles_and_checks_complete(capsys):
    """With nvcc installed the CUDA source is compiled too (init --check uses it when it is there)."""
    assert main(["init", "--check", str(DATA / "kernel.toml")]) == 0
    assert ": complete: row_sum" in capsys.readouterr().out


@pytest.mark.gpu
def test_the_rules_loop_runs_an_extern_shared_kernel_through_the_gate_on_cuda(tmp_path, capsys):
    tune_row_sum("cuda", tmp_path, capsys)
