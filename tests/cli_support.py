"""Shared steps of the command-line tests: a run's progress seen through its session file, and a
command that must fail with one line."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from kerntune.tui.cli import main


def wait_for_evaluations(session: Path, count: int, timeout: float = 300) -> None:
    """Wait until a running tune has written `count` evaluated configurations to `session`; the
    test fails when it has not within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if session.exists() and session.read_text().count('kind = "config_evaluated"') >= count:
            return
        time.sleep(0.05)
    pytest.fail(f"the run never got going ({session} has fewer than {count} results)")


def one_line_error(capsys, argv: list[str], code: int = 2) -> str:
    """`kerntune ARGV`'s error, which must end it with `code` and be a single line."""
    assert main(argv) == code
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err


QUICK = ["--headless", "--no-probe", "--repeats", "5", "--seed", "11"]


def rules_round(spec: Path, backend: str, tmp_path: Path, capsys, budget: int = 3):
    """One round of the rules loop on `spec`: its session and its gate verdicts, every one of which
    must have passed, with a configuration of the template verified."""
    from kerntune.engine.events import GateChecked
    from kerntune.engine.session import load_session

    session = tmp_path / "s.toml"
    assert main(["tune", str(spec), "--agent", "rules", "--rounds", "1", "--budget", str(budget),
                 "--backend", backend, "--session", str(session), *QUICK]) == 0
    out = capsys.readouterr().out
    s = load_session(session)
    gates = [e for e in s.events if isinstance(e, GateChecked)]
    assert gates and all(g.ok for g in gates), out
    assert any(r.verified and r.config for r in s.results()), out
    return s, gates
