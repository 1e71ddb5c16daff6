"""Inputs in constant memory (`constant = true`): a CUDA `__constant__` array the host fills is
filled before each launch; an OpenCL `__constant` pointer is passed as the argument it is."""

from pathlib import Path

import pytest

from kerntune.engine.session import load_session
from kerntune.engine.template import TemplateError, load_template
from kerntune.tui.cli import main

DATA = Path(__file__).resolve().parent / "data" / "constant"
QUICK = ["--headless", "--no-probe", "--repeats", "5", "--seed", "3"]


def tune_poly(backend: str, tmp_path: Path, capsys):
    session = tmp_path / "s.toml"
    assert main(["tune", str(DATA / "kernel.toml"), "--backend", backend, "--session", str(session), *QUICK]) == 0
    out = capsys.readouterr().out
    results = load_session(session).results()
    assert len(results) == 2 and all(r.status == "ok" for r in results), (out, [r.message for r in results])


def test_a_constant_input_is_declared_and_verified_on_opencl(tmp_path, capsys):
    t = load_template(DATA / "kernel.toml")
    assert [a.name for a in t.arguments if a.constant] == ["coeffs"]
    tune_poly("opencl", tmp_path, capsys)


def test_init_declares_the_constant_array_a_kernel_reads(tmp_path, capsys):
    (tmp_path / "poly.cu").write_text((DATA / "poly.cu").read_text())
    assert main(["init", str(tmp_path / "poly.cu")]) == 0
    capsys.readouterr()
    text = (tmp_path / "kernel.toml").read_text()
    assert 'name = "coeffs"\ndtype = "float32"\nrole = "input"\nshape = [8]\nconstant = true' in text


def test_only_an_input_can_be_constant(tmp_path):
    for name in ("kernel.toml", "poly.cu", "poly.cl", "reference.py"):
        (tmp_path / name).write_text((DATA / name).read_text())
    spec = tmp_path / "kernel.toml"
    spec.write_text(spec.read_text().replace('shape = ["n"]\nrtol', 'shape = ["n"]\nconstant = true\nrtol'))
    with pytest.raises(TemplateError, match="constant"):
        load_template(spec)


@pytest.mark.gpu
def test_a_constant_array_of_the_file_is_filled_before_each_launch_on_cuda(tmp_path, capsys):
    tune_poly("cuda", tmp_path, capsys)
