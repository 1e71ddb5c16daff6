"""Pilot tests that drive the real dashboard: events fill every panel, keys reach their actions,
replay controls change what is shown. Sessions are real runs recorded on PoCL (tests/data/sessions).
"""

from __future__ import annotations

import asyncio
import io
import json
import re

import pytest
from textual.command import CommandPalette
from textual.widgets import DataTable, Input

from kerntune.engine.events import ConfigEvaluated
from kerntune.engine.nvml import NVMLUnavailable, Telemetry
from kerntune.engine.session import load_session
from kerntune.engine.tune import TuneError, TuneOptions
from kerntune.engine.evaluate import TimingPolicy
from kerntune.engine.template import load_template
from kerntune.tui import app as dashboard
from kerntune.tui.app import ACTIONS, live_app, replay_app
from kerntune.tui.widgets.details import DetailsScreen
from kerntune.tui.widgets.help import HelpScreen
from kerntune.tui.widgets.prompt import PathPrompt
from tui_support import HOSTILE, VECTOR_ADD, WIDE, scripted_live, until


def run(coro):
    return asyncio.run(coro)


def table(app) -> DataTable:
    return app.query_one("#board-table", DataTable)


def first_column(app, name: str) -> list[str]:
    t = table(app)
    return [str(t.get_cell(row.key, name)) for row in t.ordered_rows]


def test_a_scripted_event_stream_fills_every_panel(tmp_path):
    recorded = load_session(VECTOR_ADD)

    async def go():
        app, engine, _ = scripted_live(tmp_path)
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: app.engine_done and app.state.finished is not None)
            screen = app.screen_text()
            device = recorded.device["name"]
            assert screen.splitlines()[0].startswith(" kerntune vector_add · n=1048576 · " + device[:20])
            assert "■ finished" in screen
            assert "24/24 evaluated" in screen and "finished: space exhausted" in screen
            best = recorded.best()
            assert f"best {best.median_us:.1f} µs" in screen
            assert table(app).row_count == 24
            assert first_column(app, "param:BLOCK")[0] == str(best.config["BLOCK"])
            assert "Leaderboard · 24 ranked" in screen
            assert device in screen and "NVML: none (not an NVIDIA GPU)" in screen
            assert "threads / block" in screen  # a limit that bounds configurations
            assert "new best 1041.3 us: BLOCK=32" in screen and "winner BLOCK=32 ITEMS=1 passed" in screen
            assert "+++ template" in screen and re.search(r"│ - .*naive|│ - // c = a \+ b, one element", screen)
            assert re.search(r"│ \+ #ifndef BLOCK", screen)
            assert app.query_one("#best-spark").data  # the best-so-far sparkline has points
            assert app.query_one("#diff").border_subtitle.startswith("+")

    run(go())


def test_live_keys_pause_resume_and_stop_the_run(tmp_path):
    async def go():
        app, engine, tune = scripted_live(tmp_path, hold_after=12)
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: engine.held.is_set() and app.state.events == 12)
            assert "● tuning" in app.screen_text()
            await pilot.press("space")
            assert tune.paused and "❚❚ paused" in app.screen_text()
            await pilot.press("space")
            assert not tune.paused
            await pilot.press("s")
            assert tune.stop_reason == "stopped"  # the first press only asks
            await pilot.press("s")
            assert tune.stop_reason == "stopped from the dashboard"
            await pilot.pause()
            assert "■ stopping" in app.screen_text()
            engine.release.set()
            await until(pilot, lambda: app.engine_done)
            assert "■ finished" in app.screen_text()

    run(go())


def test_quit_stops_a_live_run_and_exits_when_it_has_ended(tmp_path):
    async def go():
        app, engine, tune = scripted_live(tmp_path, hold_after=5)
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: engine.held.is_set())
            await pilot.press("q")
            assert tune.stop_reason == "quit from the dashboard" and app.is_running
            engine.release.set()
            await until(pilot, lambda: not app.is_running)
        return app

    app = run(go())
    assert app.return_code == 0  # the recorded run found a verified best


def test_failed_rows_details_filter_and_sort_keys(tmp_path):
    async def go():
        app = replay_app(load_session(HOSTILE), paused=True)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("greater_than_sign")
            assert table(app).row_count == 2
            await pilot.press("f")
            assert table(app).row_count == 7
            # at 80 columns the messages have no room of their own: the line under the table has it
            assert "compile_error" in app.screen_text() and "message" not in first_columns_labels(app)
            await pilot.press("down", "down")  # the MODE=1 row: it does not compile
            assert "compile_error: error: source:15:5: use of undeclared identifier" in app.screen_text()
            await pilot.press("enter")
            assert isinstance(app.screen, DetailsScreen)
            assert "undeclared identifier 'this'" in app.screen_text()
            await pilot.press("escape")
            await pilot.press("up", "up", "enter")  # the winner: raw times and resources
            assert isinstance(app.screen, DetailsScreen)
            text = app.screen_text()
            assert "raw times, µs" in text and "re-verified on new inputs" in text and "compile" in text
            await pilot.press("escape")
            await pilot.press("slash")
            assert isinstance(app.focused, Input)
            await pilot.press(*"MODE>=5")
            assert sorted(first_column(app, "param:MODE")) == ["5", "6", "7"]
            assert "filter: MODE>=5 (3 match)" in app.screen_text()
            await pilot.press("enter")
            assert isinstance(app.focused, DataTable) and not app.query_one("#board-filter").display
            await pilot.press("o")  # sort by the next column after rank: MODE
            assert first_column(app, "param:MODE") == ["5", "6", "7"]
            await pilot.press("r")
            assert first_column(app, "param:MODE") == ["7", "6", "5"]
            assert "sort: MODE ↓" in app.screen_text()

    run(go())


def first_columns_labels(app) -> list[str]:
    return [str(c.label) for c in table(app).ordered_columns]


def test_panel_keys_switch_the_side_panel_and_d_toggles_the_diff():
    async def go():
        app = replay_app(load_session(VECTOR_ADD), paused=True)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("greater_than_sign")
            shown = lambda: [p for p in ("device", "plan", "diff") if app.query_one(f"#{p}").display]
            assert shown() == ["device"]
            await pilot.press("3")
            assert shown() == ["plan"] and app.focused.id == "plan"
            await pilot.press("4")
            assert shown() == ["diff"] and "+++ template" in app.screen_text()
            await pilot.press("d")
            text = app.screen_text()
            assert "original kernel" in text and "template" in text and "+++" not in text  # side by side
            await pilot.press("tab")
            assert app.focused is table(app)
            await pilot.press("tab")
            assert shown() == ["device"]
            await pilot.press("1")
            assert app.focused is table(app)

    run(go())


def test_replay_controls_change_what_is_shown():
    session = load_session(VECTOR_ADD)
    first_result = next(i for i, e in enumerate(session.events) if isinstance(e, ConfigEvaluated))

    async def go():
        app = replay_app(session, paused=True)
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause(0.2)
            assert table(app).row_count == 0 and f"0/{len(session.events)} events" in app.screen_text()
            for _ in range(first_result + 1):
                await pilot.press("n")
            assert table(app).row_count == 1
            assert f"{first_result + 1}/{len(session.events)} events" in app.screen_text()
            assert "❚❚ replay paused 1x" in app.screen_text()
            await pilot.press("plus", "plus")
            assert "replay paused 5x" in app.screen_text()
            await pilot.press("minus")
            assert "replay paused 2x" in app.screen_text()
            await pilot.press("greater_than_sign")
            assert table(app).row_count == 24 and "■ replay ended" in app.screen_text()
            await pilot.press("less_than_sign")
            assert table(app).row_count == 0 and "0/24 evaluated" in app.screen_text()
            for _ in range(7):
                await pilot.press("plus")
            assert "max" in app.screen_text()
            await pilot.press("space")
            await until(pilot, lambda: app.feed.done)
            assert table(app).row_count == 24

    run(go())


def test_replay_at_the_recorded_pace_follows_the_timestamps():
    session = load_session(VECTOR_ADD)
    now = [0.0]

    async def go():
        app = replay_app(session, speed=1.0, clock=lambda: now[0])
        t0 = session.events[0].t
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause(0.2)
            now[0] = 3.0
            await pilot.pause(0.2)
            due = [e for e in session.events if e.t <= t0 + 3.0]
            assert app.feed.position == len(due)
            results = sum(1 for e in due if isinstance(e, ConfigEvaluated))
            assert table(app).row_count == results > 0
            assert f"{results}/24 evaluated" in app.screen_text()

    run(go())


def test_help_lists_the_keys_and_the_palette_offers_every_action():
    async def go():
        app = replay_app(load_session(VECTOR_ADD), paused=True)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("question_mark")
            assert isinstance(app.screen, HelpScreen)
            text = app.screen_text()
            assert "Play or pause the replay" in text and "Step one event" in text
            assert "Pause or resume the run" not in text  # a live key has no place in a replay
            await pilot.press("escape")
            titles = {c.title for c in app.get_system_commands(app.screen)}
            for a in ACTIONS:
                if "replay" in a.modes and a.action != "command_palette":
                    assert a.description in titles
            assert "Sort the leaderboard by median µs" in titles
            await pilot.press("ctrl+p")
            assert isinstance(app.screen, CommandPalette)

    run(go())


def test_export_and_save_write_files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    session = load_session(HOSTILE)

    async def go():
        app = replay_app(session, paused=True)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("e")  # nothing verified yet
            assert not isinstance(app.screen, PathPrompt)
            await pilot.press("greater_than_sign", "e")
            assert isinstance(app.screen, PathPrompt)
            await pilot.press("enter")
            await pilot.press("j")
            await pilot.press("enter")
            await pilot.press("ctrl+s")
            await pilot.press("ctrl+a", "ctrl+k", *"saved/copy.toml", "enter")
            await pilot.pause()

    run(go())
    header = (tmp_path / "hostile-best.h").read_text()
    assert "#define MODE 7\n#define THREADS 1024\n" in header
    data = json.loads((tmp_path / "hostile-best.json").read_text())
    assert data["config"] == {"MODE": 7, "THREADS": 1024} and data["winner_verified"] is True
    assert (tmp_path / "saved" / "copy.toml").read_bytes() == HOSTILE.read_bytes()


def test_the_layout_fits_80x24_and_uses_a_large_terminal():
    async def go():
        app = replay_app(load_session(VECTOR_ADD), paused=True)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("greater_than_sign")
            await pilot.pause()
            text = app.screen_text()
            lines = text.splitlines()
            assert len(lines) == 24 and max(len(line) for line in lines) <= 80
            assert "median µs" in text and "% SOL" in text and "speedup" in text and "status" in text
            assert "? Help" in lines[-1] and "q Quit" in lines[-1]
            assert app.has_class("-compact")
            await pilot.resize_terminal(160, 50)
            await pilot.pause(0.2)
            assert app.has_class("-wide")
            for panel in ("device", "plan", "diff", "board"):
                region = app.query_one(f"#{panel}").region
                assert region.width > 30 and region.height > 8
            ranks = re.findall(r"^│ +(\d+) ", app.screen_text(), re.MULTILINE)
            assert sorted(map(int, ranks)) == list(range(1, 25))  # every row on screen

    run(go())


def test_no_color_gives_no_colour_at_all():
    def colours(svg: str) -> set[str]:
        return set(re.findall(r"fill: ?#([0-9a-f]{6})", svg)) | set(re.findall(r'fill="#([0-9a-f]{6})"', svg))

    def grey(c: str) -> bool:
        r, g, b = (int(c[i:i + 2], 16) for i in (0, 2, 4))
        return max(r, g, b) - min(r, g, b) <= 8  # the export's default text colour is c5c8c6

    window = {"ff5f57", "febc2e", "28c840"}  # the screenshot's window buttons, not the app

    async def shot():
        app = replay_app(load_session(HOSTILE), paused=True)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("greater_than_sign", "f")
            return app.export_screenshot()

    coloured = run(shot())
    assert not all(grey(c) for c in colours(coloured))
    mp = pytest.MonkeyPatch()
    mp.setenv("NO_COLOR", "1")
    try:
        plain = run(shot())
    finally:
        mp.undo()
    # No colour at all: the terminal's own foreground and background only (the export draws them
    # as its default c5c8c6 on 292929), the cursor row in reverse.
    assert colours(plain) - window <= {"c5c8c6", "292929"}, colours(plain) - window


def test_telemetry_is_read_about_once_a_second_while_tuning(tmp_path):
    calls = []

    def reading(index: int) -> Telemetry:
        calls.append(index)
        return Telemetry(1980, 2619, 412.0, 700.0, 61, 87, 30 * 2**30, 80 * 2**30, 97, ("software power cap",), 5, 16)

    async def go():
        app, engine, _ = scripted_live(tmp_path, hold_after=10, telemetry=reading, nvml_index=0, cuda=True)
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: engine.held.is_set() and calls)
            await pilot.pause(1.3)
            assert len(calls) >= 2 and set(calls) == {0}
            text = app.screen_text()
            assert "SM clock" in text and "1980 MHz" in text and "412 W of 700 W" in text
            assert "software power cap" in text
            engine.release.set()
            await until(pilot, lambda: app.engine_done)
            n = len(calls)
            await pilot.pause(1.2)
            assert len(calls) == n  # no readings once the run has ended

    run(go())


def test_without_nvml_the_device_panel_says_so_in_one_line(tmp_path):
    def missing(index: int) -> Telemetry:
        raise NVMLUnavailable("NVML: not available here (no driver)")

    async def go():
        app, engine, _ = scripted_live(tmp_path, telemetry=missing, nvml_index=0, cuda=True)
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: app.engine_done)
            await pilot.pause(0.1)
            assert "NVML: not available here (no driver)" in app.screen_text()
            assert app._telemetry_timer is None  # it stopped asking

    run(go())


def test_a_live_run_on_the_opencl_device_streams_into_the_dashboard(tmp_path):
    pytest.importorskip("pyopencl")
    template = load_template(dashboard.Path(__file__).resolve().parent.parent / "templates" / "vector_add")
    options = TuneOptions(backend="opencl", budget=4, overrides={"n": 4096}, session_path=tmp_path / "s.toml",
                          probe=False, seed=5, timing=TimingPolicy(min_repeats=5, max_repeats=5))

    async def go():
        app = live_app(template, options)
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: app.engine_done, timeout=120)
            assert app.run_error is None
            assert table(app).row_count == 4
            assert "4/24 evaluated (budget 4)" in app.screen_text()
            assert "■ finished" in app.screen_text()
        return app

    app = run(go())
    assert len(load_session(tmp_path / "s.toml").results()) == 4
    assert app.outcome.reason == "budget of 4 evaluations reached"


def test_a_run_that_cannot_start_closes_the_dashboard_with_its_error(tmp_path, hostile_dir):
    spec = hostile_dir / "kernel.toml"
    spec.write_text(spec.read_text().replace('"MODE != 4",', '"MODE > 100",'))
    options = TuneOptions(backend="opencl", session_path=tmp_path / "x.toml", probe=False)

    async def go():
        app = live_app(load_template(hostile_dir), options)
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: not app.is_running, timeout=60)
        return app

    app = run(go())
    assert isinstance(app.run_error, TuneError) and "no feasible configuration" in str(app.run_error)
    assert app.return_code == 1


def test_replay_of_a_profiled_h100_session_shows_the_profiler_and_its_details():
    from pathlib import Path

    session = load_session(Path(__file__).resolve().parent.parent / "sessions" / "fused_add_rmsnorm-llama70b-t2048.toml")

    async def go():
        app = replay_app(session, paused=True)
        async with app.run_test(size=(160, 50)) as pilot:
            await pilot.pause(0.2)
            await pilot.press("greater_than_sign")
            await until(pilot, lambda: "■ replay ended" in app.screen_text())
            text = app.screen_text()
            assert "profiler" in text and "memory-bound" in text
            table(app).move_cursor(row=0)
            await pilot.press("enter")
            await until(pilot, lambda: isinstance(app.screen, DetailsScreen))
            await pilot.pause(0.2)
            body = app.screen_text()
            assert "profiler (Nsight Compute" in body and "long scoreboard" in body and "% of peak" in body

    run(go())


def test_v_shows_a_configuration_s_source_and_s_saves_it_without_overwriting(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "wide-1.cl").write_text("mine\n")  # a file of the default name is never replaced

    async def go():
        from kerntune.tui.widgets.source import SourceScreen

        app = replay_app(load_session(WIDE), paused=True)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("greater_than_sign", "v")
            assert isinstance(app.screen, SourceScreen)
            text = app.screen_text()
            assert "ranked 1 of 30" in text and "#define BLOCK 64" in text and "launch: grid" in text
            await pilot.press("s")
            assert isinstance(app.screen, PathPrompt)
            assert app.screen.query_one(Input).value == "wide-1-2.cl"
            await pilot.press("ctrl+a", "ctrl+k", *"wide-1.cl", "enter")
            assert isinstance(app.screen, PathPrompt) and "exists" in app.screen_text()
            assert (tmp_path / "wide-1.cl").read_text() == "mine\n"
            await pilot.press("enter")  # the second enter on the same name overwrites
            await pilot.pause()
            assert isinstance(app.screen, SourceScreen)
            await pilot.press("escape")
            assert not isinstance(app.screen, SourceScreen)

    run(go())
    source = (tmp_path / "wide-1.cl").read_text()
    best = load_session(WIDE).best()
    assert all(f"#define {k} {int(v)}\n" in source for k, v in best.config.items())
    assert "__kernel" in source and "void wide(" in source


def test_a_compile_error_s_details_show_the_compiler_s_log():
    async def go():
        app = replay_app(load_session(WIDE), paused=True)
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.press("greater_than_sign", "f")
            await pilot.press("slash", *"status=compile_error", "enter", "enter")
            assert isinstance(app.screen, DetailsScreen)
            text = app.screen_text()
            assert "compiler log:" in text and "failed to build the program" in text

    run(go())


def test_escape_clears_the_filter_and_the_footer_shows_the_filter_s_keys():
    async def go():
        app = replay_app(load_session(HOSTILE), paused=True)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("greater_than_sign", "slash", *"MODE>=5")
            footer = app.screen_text().splitlines()[-1]
            assert "Keep the filter" in footer and "Clear the filter" in footer and "Play" not in footer
            assert table(app).row_count == 1
            await pilot.press(*" nonsense=1")
            text = app.screen_text()
            assert "filter error: unknown name 'nonsense'" in text
            assert "(known: MODE, THREADS," in text and "speedup, spread, status)" in text  # wrapped, not cut
            await pilot.press("escape")
            assert isinstance(app.focused, DataTable) and table(app).row_count == 2
            assert "filter" not in app.screen_text().splitlines()[13]
            assert "Play" in app.screen_text().splitlines()[-1]

    run(go())


def test_f_with_no_failures_says_so():
    async def go():
        app = replay_app(load_session(VECTOR_ADD), paused=True)
        said = []
        app.notify = lambda message, **kw: said.append(message)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("greater_than_sign", "f")
            await pilot.pause()
            assert said == ["No configuration has failed."]
            assert not app.query_one("#board").view.show_failed

    run(go())


def test_every_result_of_a_large_session_has_a_row():
    from pathlib import Path

    from kerntune.tui.widgets.leaderboard import Leaderboard

    session = load_session(Path(__file__).resolve().parent.parent / "sessions" / "matmul-2048.toml")
    shown = [r for r in session.results() if r.verified]

    async def go():
        app = replay_app(session, paused=True)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("greater_than_sign")
            assert table(app).row_count == len(shown) > 1000  # no cap: the table draws what is on screen
            for _ in range(3):
                await pilot.press("pagedown")
            assert table(app).cursor_row >= 20
            board = app.query_one(Leaderboard)
            key = board.selected_key()
            assert app.state.rank(key) == table(app).cursor_row + 1

    run(go())


def test_without_a_terminal_or_with_term_dumb_there_is_no_dashboard(monkeypatch):
    from kerntune.tui.terminal import dashboard_possible

    class Tty:
        def isatty(self):
            return True

    monkeypatch.delenv("KERNTUNE_HEADLESS", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    assert dashboard_possible(Tty())
    monkeypatch.setenv("TERM", "dumb")
    assert not dashboard_possible(Tty())
    monkeypatch.setenv("TERM", "xterm-256color")
    assert not dashboard_possible(io.StringIO())
    monkeypatch.setenv("KERNTUNE_HEADLESS", "1")
    assert not dashboard_possible(Tty())
