"""Include paths survive the loop: a header beside the source is found with no option, a relative
`-I` inside the spec's folder works through every template the agent loop writes elsewhere, and
`init` reads a type from a header the source includes."""

import shutil
from pathlib import Path

import pytest

from cli_support import rules_round

from kerntune.engine.template import load_template
from kerntune.tui.cli import main

DATA = Path(__file__).resolve().parent / "data" / "includes"


def tune_scale(backend: str, tmp_path: Path, capsys):
    _, gates = rules_round(DATA / "kernel.toml", backend, tmp_path, capsys)
    return load_template(gates[0].directory)


def test_every_template_of_the_loop_builds_with_the_headers_beside_and_below_the_spec(tmp_path, capsys):
    template = tune_scale("opencl", tmp_path, capsys)
    # written elsewhere, the template takes the original's folders as absolute include folders
    opts = template.options_for("opencl")
    assert f"-I{DATA.resolve()}" in opts and f"-I{(DATA / 'inc').resolve()}" in opts
    assert opts[0] == f"-I{template.directory.resolve()}"


def test_the_source_folder_is_searched_first_and_the_spec_check_compiles_with_it(capsys):
    t = load_template(DATA / "kernel.toml")
    assert t.options_for("cuda") == (f"-I{DATA.resolve()}", f"-I{(DATA / 'inc').resolve()}")
    assert main(["init", "--check", str(DATA / "kernel.toml")]) == 0  # nvcc, when installed, and PoCL
    assert ": complete: scale" in capsys.readouterr().out


def test_init_reads_a_type_from_a_header_the_source_includes(tmp_path, capsys):
    for name in ("scale.cu", "common.h"):
        shutil.copyfile(DATA / name, tmp_path / name)
    assert main(["init", str(tmp_path / "scale.cu")]) == 0
    capsys.readouterr()
    text = (tmp_path / "kernel.toml").read_text()
    assert text.count('dtype = "float32"') == 2 and "floatX` has no dtype" not in text


@pytest.mark.gpu
def test_every_template_of_the_loop_builds_with_its_headers_on_cuda(tmp_path, capsys):
    tune_scale("cuda", tmp_path, capsys)
