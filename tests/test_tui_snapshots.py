"""Snapshots of whole screens, live and replay, at 80x24 and 120x40 (a run over two GPUs at
100x30), against committed files.

Each snapshot is the screen as text (tests/snapshots/NAME.txt: compared always) and as Textual's
SVG screenshot (NAME.svg: compared when the installed Textual and Rich are the versions that
recorded it, since another version may draw the same screen with other bytes). The scenes are
deterministic: fixed recorded sessions, event timestamps for every figure, no clock on screen.

To record them again after a deliberate change of the screen:
    KERNTUNE_UPDATE_SNAPSHOTS=1 python -m pytest tests/test_tui_snapshots.py
"""

from __future__ import annotations

import asyncio
import json
import os
from importlib.metadata import version
from pathlib import Path

import pytest

from kerntune.engine.session import load_session
from kerntune.tui.app import replay_app
from tui_support import HOSTILE, WIDE, scripted_live, two_device_session, until

SNAPSHOTS = Path(__file__).resolve().parent / "snapshots"
UPDATE = os.environ.get("KERNTUNE_UPDATE_SNAPSHOTS") == "1"
VERSIONS = {"textual": version("textual"), "rich": version("rich")}
SIZES = [(80, 24), (120, 40)]


def check(name: str, text: str, svg: str, tmp_path: Path) -> None:
    txt_path, svg_path, versions_path = SNAPSHOTS / f"{name}.txt", SNAPSHOTS / f"{name}.svg", SNAPSHOTS / "versions.json"
    if UPDATE:
        SNAPSHOTS.mkdir(exist_ok=True)
        txt_path.write_text(text, encoding="utf-8")
        svg_path.write_text(svg, encoding="utf-8")
        versions_path.write_text(json.dumps(VERSIONS, indent=2) + "\n")
        return
    if not txt_path.exists():
        pytest.fail(f"no snapshot {txt_path.name}: record it with KERNTUNE_UPDATE_SNAPSHOTS=1")
    (tmp_path / f"{name}.txt").write_text(text, encoding="utf-8")
    (tmp_path / f"{name}.svg").write_text(svg, encoding="utf-8")
    expected = txt_path.read_text(encoding="utf-8")
    assert text == expected, f"{name}: the screen changed; this run's screen is in {tmp_path}"
    recorded = json.loads(versions_path.read_text())
    if recorded == VERSIONS:
        assert svg == svg_path.read_text(encoding="utf-8"), (
            f"{name}: the colours or styles changed; this run's screenshot is in {tmp_path}")


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_live_dashboard_snapshot(size, tmp_path):
    async def go():
        # Twenty events in: a run under way, with results, notes and a best so far.
        app, engine, _ = scripted_live(tmp_path, hold_after=20)
        async with app.run_test(size=size) as pilot:
            await until(pilot, lambda: engine.held.is_set() and app.state.events == 20)
            await pilot.pause(0.1)
            out = app.screen_text(), app.export_screenshot(title="kerntune live")
            engine.release.set()
            await until(pilot, lambda: app.engine_done)
            return out

    text, svg = asyncio.run(go())
    assert "● tuning" in text
    check(f"live-{size[0]}x{size[1]}", text, svg, tmp_path)


def replayed(session, size: tuple[int, int], *keys: str) -> tuple[str, str]:
    """A session's replay after `keys`, as text and as a screenshot."""
    async def go():
        app = replay_app(session, paused=True)
        async with app.run_test(size=size) as pilot:
            await pilot.press(*keys)
            await pilot.pause(0.1)
            return app.screen_text(), app.export_screenshot(title="kerntune replay")

    return asyncio.run(go())


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_replay_dashboard_snapshot(size, tmp_path):
    # The hostile session played to its end, failed configurations shown with their messages.
    text, svg = replayed(load_session(HOSTILE), size, "greater_than_sign", "f", "down", "down")
    assert "■ replay ended" in text and "compile_error" in text
    check(f"replay-{size[0]}x{size[1]}", text, svg, tmp_path)


def test_a_nine_parameter_template_keeps_the_columns_that_matter_at_80x24(tmp_path):
    # Nine parameters, long names, recorded on PoCL: the parameters that differ from the
    # default share one column; rank, median, % SOL, speedup and status stay on screen.
    text, svg = replayed(load_session(WIDE), (80, 24), "greater_than_sign")
    header = next(line for line in text.splitlines() if "median µs" in line)
    for label in ("# ↑", "config", "median µs", "% SOL", "speedup", "status"):
        assert label in header
    assert "default" in text and "IPT=2" in text  # only what differs from the default is named
    check("wide-80x24", text, svg, tmp_path)


def test_a_run_over_two_gpus_shows_each_result_s_device_and_each_device_s_progress_at_100x30(tmp_path):
    # Two H200s measuring at once, played to the end: the board has a device column, the device
    # panel a row per GPU (its results, rate, failures and fastest).
    text, svg = replayed(two_device_session(tmp_path / "two.toml"), (100, 30), "greater_than_sign")
    header = next(line for line in text.splitlines() if "median µs" in line)
    assert "device" in header and "on 2 devices" in text
    assert "cuda:0       12  56.4/min       0     4.31" in text  # 12 results in 12.8 s, the fastest 4.31 µs
    assert "cuda:1       12  56.4/min       1     4.21" in text
    check("devices-100x30", text, svg, tmp_path)
