"""On a CUDA GPU: energy per launch recorded, an exported header that reproduces the measured
program, and verify passing a fresh run and failing one whose kernel was made slower."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kerntune import templates
from kerntune.engine.session import load_session
from kerntune.tui.cli import main

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parent.parent
QUICK = ["--headless", "--no-probe", "--backend", "cuda", "--seed", "3", "--shape", "tokens=64"]


def test_energy_per_launch_is_recorded_and_its_pareto_front_shown(tmp_path, capsys):
    session = tmp_path / "energy.toml"
    assert main(["tune", "silu_and_mul", "--objective", "energy", "--budget", "6", "--session", str(session),
                 *QUICK]) == 0
    s = load_session(session)
    ok = [r for r in s.results() if r.ranked]
    assert ok and all(r.energy_j is not None and 0 < r.energy_j < 1.0 for r in ok)
    assert s.summary()["energy"]["pareto"] and s.header["tuning"]["objective"] == "energy"
    capsys.readouterr()
    assert main(["show", str(session)]) == 0
    out = capsys.readouterr().out
    assert "Pareto front of time against energy" in out and "the most frugal" in out and "uJ" in out


def test_an_exported_header_compiles_and_reproduces_the_sessions_outputs(tmp_path, capsys):
    session = tmp_path / "silu.toml"
    assert main(["tune", "silu_and_mul", "--budget", "8", "--session", str(session), *QUICK]) == 0
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "ship.py"), str(session), "--keep",
                          str(tmp_path / "ship")], capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "| ok |" in run.stdout


def test_verify_passes_a_fresh_session_and_fails_once_the_kernel_is_made_slower(tmp_path, capsys):
    spec_dir = tmp_path / "silu"
    shutil.copytree(templates.path("silu_and_mul").parent, spec_dir)
    session = tmp_path / "fresh.toml"
    assert main(["tune", str(spec_dir / "kernel.toml"), "--budget", "6", "--session", str(session), *QUICK]) == 0
    capsys.readouterr()
    assert main(["verify", str(session), "--json", "--no-probe"]) == 0, capsys.readouterr().out
    # every configuration (the original too) now waits 200,000 clocks before its work (a clock the
    # compiler cannot drop, as it drops an empty loop): speedups may hold, times do not
    source = spec_dir / "kernel.cu"
    text = source.read_text()
    anchor = "const int nvec = d / VEC;"
    assert anchor in text
    source.write_text(text.replace(anchor, anchor + " { const long long t0 = clock64(); while (clock64() - t0 < 200000) {} }", 1))
    capsys.readouterr()
    assert main(["verify", str(session), "--json", "--no-probe"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["checks"][0]["verdict"] == "slower"
    assert any("fingerprint differs" in n for n in report["notes"])
