"""The dashboard's comparison of two marked rows (`m`, `c`), and `p` without energy measured."""

from __future__ import annotations

import asyncio

from kerntune.engine.session import load_session
from kerntune.tui.app import replay_app
from kerntune.tui.cli import main
from kerntune.tui.widgets.lines import LinesScreen

from cli_support import one_line_error
from tui_support import VECTOR_ADD


def test_two_marked_rows_open_their_comparison():
    async def go():
        app = replay_app(load_session(VECTOR_ADD), paused=True)
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.press("greater_than_sign")
            await pilot.press("c")  # nothing marked yet: nothing opens
            assert not isinstance(app.screen, LinesScreen)
            await pilot.press("m", "down", "m", "c")
            assert isinstance(app.screen, LinesScreen)
            text = app.screen_text()
            assert "median us (95% interval)" in text and "registers per thread" in text
            assert ("faster" in text or "not told apart" in text) and "A: " in text and "B: " in text
            await pilot.press("escape")
            await pilot.press("p")  # no energy in this session: a notice, no screen
            assert not isinstance(app.screen, LinesScreen)

    asyncio.run(go())


def test_show_compare_prints_the_same_side_by_side(capsys):
    assert main(["show", str(VECTOR_ADD), "--compare", "1", "2"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(" ") and "A (rank 1)" in out and "B (rank 2)" in out and "median us (95% interval)" in out
    assert "ranks" in one_line_error(capsys, ["show", str(VECTOR_ADD), "--compare", "1", "999"])
