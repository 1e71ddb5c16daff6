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
    # written elsewhere, the template carries the headers the original includes, laid out as the
    # compiler finds them: beside its source, and under a relative include folder of its own
    here = template.directory.resolve()
    assert template.options_for("opencl") == (f"-I{here}", f"-I{here / 'include' / '1'}")
    assert (here / "common.h").read_text() == (DATA / "common.h").read_text()
    assert (here / "include" / "1" / "scale.h").read_text() == (DATA / "inc" / "scale.h").read_text()
    # so the include check applies to it as to any spec: nothing lets its includes out
    assert "absolute_includes" not in template.spec_text


def test_a_template_the_loop_writes_cannot_include_what_is_outside_its_folder(tmp_path):
    from kerntune.engine.proposal import TemplateProposal, write_template
    from kerntune.engine.template import TemplateError

    original = load_template(DATA / "kernel.toml")
    (tmp_path / "secret.h").write_text("#define SECRET 1\n")
    for include in ('"/etc/hostname"', '"../secret.h"'):
        source = f"#include {include}\n" + original.source_for("opencl")
        with pytest.raises(TemplateError, match="includes inside the spec's folder"):
            write_template(original, TemplateProposal({"opencl": source}, ()), tmp_path / "t")


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
