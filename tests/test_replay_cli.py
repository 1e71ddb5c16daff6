"""`kerntune replay` without a terminal, and its one-line errors."""

from __future__ import annotations

import os
import subprocess
import sys

from tui_support import HOSTILE


def kerntune(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "KERNTUNE_HEADLESS"}
    return subprocess.run([sys.executable, "-m", "kerntune.tui.cli", *args], capture_output=True, text=True,
                          timeout=120, env=env, stdin=subprocess.DEVNULL)


def test_replay_without_a_terminal_prints_the_session_as_text():
    r = kerntune("replay", str(HOSTILE))
    assert r.returncode == 0, r.stderr
    assert "[   1/7] MODE=0 THREADS=64: ok" in r.stdout
    assert "compile_error" in r.stdout and "winner re-verified" in r.stdout
    assert "median us" in r.stdout  # the final leaderboard, failures included
    assert "\x1b[" not in r.stdout  # no escape sequences in a pipe


def test_replay_of_a_missing_or_foreign_file_is_one_line(tmp_path):
    r = kerntune("replay", str(tmp_path / "nope.toml"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "no such file" in r.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text('[session]\nformat = "something-else"\n')
    r = kerntune("replay", str(bad))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "format" in r.stderr


def test_replay_speed_must_be_a_positive_number_or_max():
    r = kerntune("replay", str(HOSTILE), "--speed", "0")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "positive" in r.stderr
    r = kerntune("replay", str(HOSTILE), "--speed", "warp")
    assert r.returncode == 2 and "--speed expects a number" in r.stderr
