"""Bring your own kernel: seven CUDA C++ kernels written as published code looks (tests/data/byo/),
each with the kernel.toml `kerntune init` wrote and its TODOs filled in (sizes, shapes, launch),
a numpy reference, and an OpenCL twin where OpenCL has the types."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from kerntune.tui.cli import main

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

BYO = Path(__file__).resolve().parent / "data" / "byo"
KERNELS = sorted(d.name for d in BYO.iterdir() if (d / "kernel.toml").is_file())
TWINS = [k for k in KERNELS if (BYO / k / "kernel.toml").read_text().count("opencl = \"") >= 1]
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


def _spec(kernel: str) -> dict:
    return tomllib.loads((BYO / kernel / "kernel.toml").read_text())


def test_there_are_seven_kernels_and_six_opencl_twins():
    assert KERNELS == ["adamw", "embedding", "gelu", "layernorm", "silu_mul_bf16", "softmax", "transpose"]
    assert TWINS == ["adamw", "embedding", "gelu", "layernorm", "softmax", "transpose"]


@pytest.mark.parametrize("kernel", KERNELS)
def test_init_writes_the_arguments_the_spec_has(kernel, tmp_path, capsys):
    spec = _spec(kernel)
    sources = spec["kernel"]["sources"]
    argv = ["init", str(BYO / kernel / sources["cuda"]), "-o", str(tmp_path / "kernel.toml")]
    if "opencl" in sources:
        argv += ["--opencl", str(BYO / kernel / sources["opencl"])]
    assert main(argv) == 0
    assert "could not read" not in capsys.readouterr().out
    written = tomllib.loads((tmp_path / "kernel.toml").read_text())
    assert written["kernel"]["entry"] == spec["kernel"]["entry"]
    assert [(a["name"], a["dtype"], a["role"]) for a in written["arg"]] == \
        [(a["name"], a["dtype"], a["role"]) for a in spec["arg"]]


@needs_nvcc
@pytest.mark.parametrize("kernel", KERNELS)
def test_init_check_compiles_the_cuda_kernel_and_runs_the_reference(kernel, capsys):
    assert main(["init", "--check", str(BYO / kernel / "kernel.toml")]) == 0, capsys.readouterr().out
    assert ": complete:" in capsys.readouterr().out


def _tunes(kernel: str, backend: str, rounds: int, budget: int, session: Path, capsys) -> None:
    """`kerntune tune SPEC --agent rules`, headless, ends with a winner re-verified on new inputs."""
    rc = main(["tune", str(BYO / kernel / "kernel.toml"), "--agent", "rules", "--rounds", str(rounds),
               "--budget", str(budget), "--backend", backend, "--headless", "--session", str(session)])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "re-verified on new inputs" in out, out
    assert main(["show", str(session), "--json"]) == 0


@pytest.mark.slow
@pytest.mark.parametrize("kernel", TWINS)
def test_the_opencl_twin_tunes_on_pocl_with_a_reverified_winner(kernel, tmp_path, capsys, opencl_backend):
    _tunes(kernel, "opencl", 1, 3, tmp_path / "s.toml", capsys)


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", KERNELS)
def test_every_kernel_tunes_on_cuda_with_a_reverified_winner(kernel, tmp_path, capsys):
    _tunes(kernel, "cuda", 2, 16, tmp_path / "s.toml", capsys)
