"""End to end: `kerntune replay` in a real terminal (tmux) at 80x24, read back with capture-pane."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kerntune.engine.session import load_session
from tui_support import HOSTILE, VECTOR_ADD

TMUX = shutil.which("tmux")
pytestmark = pytest.mark.skipif(TMUX is None, reason="needs tmux (apt-get install tmux)")


class Tmux:
    """A private tmux server (its own socket and configuration) with one 80x24 pane and no status line."""

    def __init__(self, command: str, config_dir: Path, width: int = 80, height: int = 24):
        self.socket = f"kerntune-test-{os.getpid()}-{time.monotonic_ns()}"
        self.config = config_dir / "tmux.conf"
        self.config.write_text("set -g status off\n")
        self.height = height
        env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "NO_COLOR", "KERNTUNE_HEADLESS")}
        self.tmux(["new-session", "-d", "-s", "kt", "-x", str(width), "-y", str(height), command], env=env)

    def tmux(self, args: list[str], env=None) -> str:
        out = subprocess.run([TMUX, "-L", self.socket, "-f", str(self.config), *args], env=env, check=True,
                             capture_output=True, text=True, timeout=30)
        return out.stdout

    def screen(self) -> str:
        return self.tmux(["capture-pane", "-p", "-t", "kt"])

    def wait_for(self, text: str, timeout: float = 30.0, full: bool = False) -> str:
        """The screen once `text` is on it (and, with `full`, once the app fills every row: tmux may
        apply its configuration after the pane opened one row shorter, and the app redraws)."""
        end = time.monotonic() + timeout
        screen = ""
        while time.monotonic() < end:
            screen = self.screen()
            if text in screen and (not full or len(screen.rstrip("\n").split("\n")) == self.height):
                return screen
            time.sleep(0.2)
        raise AssertionError(f"{text!r} never appeared; the screen was:\n{screen}")

    def keys(self, *keys: str) -> None:
        self.tmux(["send-keys", "-t", "kt", *keys])

    def wait_gone(self, text: str, timeout: float = 30.0) -> str:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            screen = self.screen()
            if text not in screen:
                return screen
            time.sleep(0.2)
        raise AssertionError(f"{text!r} stayed on the screen")

    def close(self) -> None:
        subprocess.run([TMUX, "-L", self.socket, "-f", str(self.config), "kill-server"], capture_output=True,
                       timeout=30)


@pytest.mark.parametrize("term", ["xterm-256color", "tmux-256color"])
def test_replay_in_tmux_at_80x24_shows_the_leaderboard_and_the_device(term, tmp_path):
    session = load_session(VECTOR_ADD)
    command = (f"env TERM={term} {shlex.quote(sys.executable)} -m kerntune.tui.cli replay "
               f"{shlex.quote(str(VECTOR_ADD))} --speed max; echo KERNTUNE-EXIT=$?; sleep 60")
    t = Tmux(command, tmp_path)
    try:
        screen = t.wait_for("replay ended", full=True)
        lines = screen.rstrip("\n").split("\n")
        assert len(lines) == 24 and max(len(line) for line in lines) <= 80
        assert "Leaderboard · 24 ranked" in screen
        assert "median µs" in screen and "speedup" in screen
        assert session.device["name"] in screen and "Device" in screen
        assert "24/24 evaluated" in screen
        assert "Traceback" not in screen and "Error" not in screen
        t.keys("f")  # a key reaches the app through the terminal
        t.keys("?")
        assert "Keys" in t.wait_for("Step one event")
        t.keys("Escape")
        # A terminal cannot tell escape-then-q from alt+q when they come together: wait, as a person would.
        t.wait_gone("Step one event")
        t.keys("q")
        after = t.wait_for("KERNTUNE-EXIT=")
        assert "KERNTUNE-EXIT=0" in after and "Traceback" not in after
    finally:
        t.close()


def test_replay_in_tmux_shows_failed_configurations_on_demand(tmp_path):
    command = (f"{shlex.quote(sys.executable)} -m kerntune.tui.cli replay {shlex.quote(str(HOSTILE))} --paused; "
               f"echo KERNTUNE-EXIT=$?; sleep 60")
    t = Tmux(command, tmp_path)
    try:
        t.wait_for("replay paused")
        t.keys(">")
        t.wait_for("replay ended")
        assert "compile_error" not in t.screen()
        t.keys("f")
        screen = t.wait_for("compile_error")
        assert "wrong_result" in screen and "crashed" in screen and "timeout" in screen
        t.keys("q")
        assert "KERNTUNE-EXIT=0" in t.wait_for("KERNTUNE-EXIT=")
    finally:
        t.close()
