"""The dashboard's model, its event feeds and its exports, without a screen: real recorded sessions in."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from kerntune.engine.emitter import Emitter
from kerntune.engine.events import ConfigEvaluated, LoopStarted, Note, RunStarted
from kerntune.engine.result import Result, config_key
from kerntune.engine.session import SessionWriter, load_session, new_header
from kerntune.tui.export import ExportError, best_header, best_json, save_copy
from kerntune.tui.feeds import LiveFeed, ReplayFeed, parse_speed
from kerntune.tui.state import BoardView, DashboardState, FilterError, HeaderRead

DATA = Path(__file__).resolve().parent / "data" / "sessions"
VECTOR_ADD = DATA / "vector_add.toml"
HOSTILE = DATA / "hostile.toml"


def folded(path: Path) -> DashboardState:
    s = load_session(path)
    state = DashboardState(s.header)
    state.apply_all(s.events)
    return state


def test_the_board_ranks_verified_results_fastest_first_and_keeps_failures_for_when_asked():
    state = folded(HOSTILE)
    keys, matched = state.board(BoardView())
    assert [state.entries[k].result.config["MODE"] for k in keys] == [7, 0]
    assert matched == 2
    keys, matched = state.board(BoardView(show_failed=True))
    modes = [state.entries[k].result.config["MODE"] for k in keys]
    assert modes[:2] == [7, 0] and sorted(modes[2:]) == [1, 2, 3, 5, 6]
    assert matched == 7
    assert dict(state.failed_by_status) == {"compile_error": 1, "wrong_result": 2, "timeout": 1, "crashed": 1}
    assert state.rank(keys[0]) == 1 and state.rank(keys[2]) is None


def test_the_rank_and_speedup_agree_with_the_recorded_session():
    s = load_session(VECTOR_ADD)
    state = folded(VECTOR_ADD)
    best = s.best()
    assert state.best == best
    summary = s.summary()
    assert state.speedup(best) == pytest.approx(summary["speedup"])
    assert state.default_result.config == s.template["default_config"]
    assert state.evaluated == 24 and state.ranked_count == 24
    assert state.finished is not None and state.winner is not None and state.winner.ok


def test_a_filter_compares_parameters_and_columns_and_matches_words():
    state = folded(VECTOR_ADD)

    def configs(text):
        keys, _ = state.board(BoardView(filter=text))
        return {(state.entries[k].result.config["BLOCK"], state.entries[k].result.config["ITEMS"]) for k in keys}

    assert configs("ITEMS=1") == {(b, 1) for b in (32, 64, 128, 256, 512, 1024)}
    assert configs("block>=512 items<2") == {(512, 1), (1024, 1)}
    assert configs("BLOCK=25") == set()  # a comparison is exact, not a substring
    fast = configs("speedup>1")
    assert fast == {(32, 1)}  # only one configuration beat the default in this session
    assert configs("sol>60") == {c for c in configs("") if c in {(32, 1), (256, 1)}}
    hostile = folded(HOSTILE)
    keys, _ = hostile.board(BoardView(show_failed=True, filter="nan"))
    assert {hostile.entries[k].result.config["MODE"] for k in keys} == {2, 3}  # their messages say NaN
    keys, _ = hostile.board(BoardView(show_failed=True, filter="status=timeout"))
    assert [hostile.entries[k].result.status for k in keys] == ["timeout"]


def test_a_filter_naming_nothing_known_is_one_clear_error():
    state = folded(VECTOR_ADD)
    with pytest.raises(FilterError, match="unknown name 'WARPS'.*BLOCK, ITEMS"):
        state.board(BoardView(filter="WARPS=4"))
    with pytest.raises(FilterError, match="expected a number"):
        state.board(BoardView(filter="sol>lots"))


def test_sorting_by_a_column_orders_by_its_values_and_puts_missing_ones_last():
    state = folded(HOSTILE)
    keys, _ = state.board(BoardView(show_failed=True, sort="speedup", reverse=True))
    speedups = [state.column_value("speedup", k) for k in keys]
    assert speedups[:2] == sorted(speedups[:2], reverse=True) and speedups[0] > 1
    assert speedups[2:] == [None] * 5
    keys, _ = state.board(BoardView(show_failed=True, sort="param:MODE"))
    assert [state.entries[k].result.config["MODE"] for k in keys] == [0, 1, 2, 3, 5, 6, 7]


def test_the_rate_and_time_left_come_from_the_events_timestamps():
    s = load_session(VECTOR_ADD)
    state = DashboardState(s.header)
    events = s.events
    evaluated = [i for i, e in enumerate(events) if isinstance(e, ConfigEvaluated)]
    state.apply_all(events[: evaluated[11] + 1])  # twelve of 24
    started = state.started.t
    last = events[evaluated[11]].t
    assert state.rate() == pytest.approx(12 / (last - started))
    assert state.time_left() == pytest.approx(12 / state.rate())
    state.apply_all(events[evaluated[11] + 1:])
    assert state.time_left() is None  # finished


def test_a_result_for_a_configuration_seen_before_replaces_it():
    state = DashboardState({"template": {"parameters": ["B"], "default_config": {"B": 1}}})
    state.apply(ConfigEvaluated(1.0, 0, Result({"B": 1}, "wrong_result", message="bad")))
    state.apply(ConfigEvaluated(2.0, 1, Result({"B": 1}, "ok", median_us=5.0)))
    assert state.evaluated == 1 and state.failed_count == 0 and state.ranked_count == 1
    assert state.best.median_us == 5.0


def test_replay_releases_events_as_its_clock_passes_their_timestamps():
    events = load_session(VECTOR_ADD).events
    now = [100.0]
    feed = ReplayFeed(events, speed=1.0, clock=lambda: now[0])
    first = feed.poll().items
    assert first and all(e.t <= events[0].t for e in first)
    now[0] += 2.0  # two seconds of the session at 1x
    due = feed.poll().items
    assert due and all(e.t <= events[0].t + 2.0 for e in due)
    assert feed.position < feed.total
    feed.set_speed(10.0)
    now[0] += 1.0  # ten more seconds of the session
    feed.poll()
    assert feed.session_t <= events[0].t + 12.0 + 1e-9
    assert all(e.t > events[0].t + 12.0 for e in events[feed.position:])


def test_replay_pause_step_and_end():
    events = load_session(HOSTILE).events
    now = [0.0]
    feed = ReplayFeed(events, speed=1.0, paused=True, clock=lambda: now[0])
    now[0] += 1000
    assert feed.poll().items == []  # paused: the clock does not move
    assert feed.step() == [events[0]] and feed.step() == [events[1]]
    assert not feed.playing
    rest = feed.to_end()
    assert rest == events[2:] and feed.done
    feed.restart()
    assert feed.position == 0 and feed.step() == [events[0]]


def test_replay_at_max_speed_takes_a_bounded_batch_per_frame():
    events = load_session(VECTOR_ADD).events
    feed = ReplayFeed(events, speed=math.inf, max_batch=10)
    sizes = []
    while not feed.done:
        sizes.append(len(feed.poll().items))
    assert sizes == [10, 10, 10, len(events) - 30]


def test_speeds_from_the_command_line():
    assert parse_speed("1") == 1.0 and parse_speed("10x") == 10.0 and math.isinf(parse_speed("max"))
    with pytest.raises(ValueError, match="positive"):
        parse_speed("0")
    with pytest.raises(ValueError, match="a number"):
        parse_speed("fast")


def test_the_live_feed_takes_the_header_and_a_resumed_run_s_earlier_events_in_memory(tmp_path):
    recorded = load_session(VECTOR_ADD)
    path = tmp_path / "live.toml"
    earlier = recorded.events[:8]
    feed = LiveFeed()
    emitter = Emitter([feed])
    emitter.open(SessionWriter(path, recorded.header), recorded.header, earlier)
    path.unlink()  # the feed never reads the session file back
    again = RunStarted(20.0, "vector_add", {"n": 1}, "x", "opencl", "cpu", "grid", resumed=3)
    emitter.emit(again)
    emitter.emit(Note(20.5, "after"))
    emitter.writer.close()
    items = feed.poll().items
    assert isinstance(items[0], HeaderRead) and items[0].header is recorded.header
    assert items[0].header["template"]["name"] == "vector_add"
    assert items[1:9] == earlier and items[9] == again and items[10] == Note(20.5, "after")


def test_the_header_export_defines_the_best_configuration():
    state = folded(VECTOR_ADD)
    text = best_header(state, VECTOR_ADD)
    best = state.best.config
    assert f"#define BLOCK {best['BLOCK']}\n" in text and f"#define ITEMS {best['ITEMS']}\n" in text
    assert "#ifndef KERNTUNE_VECTOR_ADD_BEST_H" in text and text.rstrip().endswith("*/")
    data = json.loads(best_json(state, VECTOR_ADD))
    assert data["config"] == dict(best) and data["median_us"] == state.best.median_us
    assert data["speedup"] == pytest.approx(state.speedup(state.best))
    assert data["winner_verified"] is True


def test_the_header_export_of_a_cuda_session_is_the_shipped_header_and_an_opencl_one_says_why_not():
    from kerntune.engine.export import export_header

    recorded = Path(__file__).resolve().parent.parent / "sessions" / "silu_and_mul-llama7b-t2048.toml"
    text = best_header(folded(recorded), recorded)
    assert text == export_header(load_session(recorded))  # what `kerntune export --format header` writes
    assert "__global__" in text
    text = best_header(folded(VECTOR_ADD), VECTOR_ADD)  # recorded on OpenCL
    assert "only the configuration's #define lines: " in text and "a header is CUDA source" in text


def test_the_header_export_refuses_what_is_not_a_c_token():
    state = DashboardState({"template": {"name": "x */ evil", "parameters": ["A"]}})
    state.apply(ConfigEvaluated(1.0, 0, Result({"A": "1; exit(1)"}, "ok", median_us=1.0)))
    with pytest.raises(ExportError, match="not a C token"):
        best_header(state)
    state = DashboardState({"template": {"name": "x */ evil"}})
    state.apply(ConfigEvaluated(1.0, 0, Result({"A B": 1}, "ok", median_us=1.0)))
    with pytest.raises(ExportError, match="not a C identifier"):
        best_header(state)
    state = DashboardState({"template": {"name": "x */ evil"}})
    state.apply(ConfigEvaluated(1.0, 0, Result({"A": True}, "ok", median_us=1.0)))
    text = best_header(state)
    assert "#define A 1" in text and "*/ evil" not in text  # a comment cannot be closed from a session
    with pytest.raises(ExportError, match="nothing to export"):
        best_header(DashboardState())


def test_save_copy_never_overwrites_the_session_itself(tmp_path):
    src = tmp_path / "s.toml"
    src.write_bytes(HOSTILE.read_bytes())
    copy = save_copy(src, tmp_path / "out" / "copy.toml")
    assert copy.read_bytes() == src.read_bytes()
    with pytest.raises(ExportError, match="the session itself"):
        save_copy(src, src)
    assert config_key({"A": 1}) == "A=1"


def test_the_live_feed_shows_the_agent_loop_from_its_first_event_and_plain_sinks_get_events_only(tmp_path):
    header = new_header(command=["kerntune", "tune", "--agent", "rules"], device={"name": "cpu"},
                        template={"name": "x", "backend": "opencl"}, space={}, tuning={"strategy": "agent loop"})
    feed, text = LiveFeed(), []
    emitter = Emitter([feed, text.append])
    emitter.open(SessionWriter(tmp_path / "loop.toml", header), header)
    events = [LoopStarted(0.0, "rules", 3, 0.9), Note(0.1, "measuring the original kernel", "loop"),
              RunStarted(0.5, "x", {"n": 1}, "small", "opencl", "cpu", "grid")]
    for ev in events:
        emitter.emit(ev)
    emitter.writer.close()
    assert feed.poll().items == [HeaderRead(header), *events]  # before the first run starts, too
    assert text == events
    assert load_session(tmp_path / "loop.toml").header == header  # what the file holds, the sinks had


def test_the_original_kernel_with_no_parameters_is_the_default_configuration():
    from kerntune.engine.events import ConfigEvaluated
    from kerntune.engine.result import Result
    from kerntune.tui.state import DashboardState

    state = DashboardState()
    state.set_header({"template": {"name": "x", "backend": "opencl", "parameters": [], "default_config": {}}})
    state.apply(ConfigEvaluated(0.1, 0, Result(config={}, status="ok", median_us=10.0)))
    state.apply(ConfigEvaluated(0.2, 1, Result(config={"B": 2}, status="ok", median_us=5.0)))
    assert state.default_us == 10.0
    assert state.speedup(Result(config={"B": 2}, status="ok", median_us=5.0)) == 2.0


def test_loop_events_reach_the_plan_and_the_diff():
    from kerntune.engine.events import GateChecked, LoopStarted, PlanMade, TemplateProposed
    from kerntune.tui.state import DashboardState

    state = DashboardState()
    state.set_header({"template": {"name": "x", "backend": "opencl", "source": "int a = 256;",
                                   "original_source": "int a = 256;", "default_config": {}}})
    state.dirty.clear()
    state.apply(LoopStarted(0.0, "rules", 3, 0.9))
    state.apply(PlanMade(0.1, 1, "rules", "lift the block size, then a grid"))
    state.apply(TemplateProposed(0.2, 1, 1, "rules", "opencl", ("BLOCK",), {"BLOCK": 256}, "",
                                 "#ifndef BLOCK\\n#define BLOCK 256\\n#endif\\nint a = BLOCK;"))
    state.apply(GateChecked(0.3, 1, 1, False, "BLOCK is never used"))
    texts = [line.text for line in state.log]
    assert any("lift the block size" in t for t in texts)
    assert any("template proposed (attempt 1): BLOCK" in t for t in texts)
    assert any("template rejected: BLOCK is never used" in t for t in texts)
    assert "diff" in state.dirty
    assert "int a = BLOCK;" in state.template["source"] and state.template["original_source"] == "int a = 256;"


def test_a_configuration_s_source_has_its_defines_launch_and_options_and_show_prints_the_same(capsys):
    from kerntune.tui.cli import main
    from kerntune.tui.export import config_source
    from tui_support import WIDE

    session = load_session(WIDE)
    state = DashboardState(session.header)
    state.apply_all(session.events)
    key = state.ranked_key(2)
    r = state.entries[key].result
    text = config_source(session.header, r, rank=2, ranked=state.ranked_count, default_us=state.default_us)
    assert text.startswith("/* kerntune: wide, the configuration ranked 2 of 30 (median ")
    assert f" * launch: grid {r.grid[0]} x 1 x 1 work-groups, block {r.block[0]} x 1 x 1 work-items" in text
    assert " * compile: clBuildProgram" in text
    defines = "".join(f"#define {k} {v}\n" for k, v in r.config.items())
    # the defines come before the template's own #ifndef defaults, which they override
    assert text.index(defines) < text.index("#ifndef BLOCK") and session.template["source"] in text
    assert state.differs(r.config) and all(r.config[n] == v for n, v in state.differs(r.config))
    assert main(["show", str(WIDE), "--config", "2", "--source"]) == 0
    printed = capsys.readouterr().out
    assert printed.replace(f" * session {WIDE}\n", "") == text
    assert main(["show", str(WIDE), "--config", "31", "--source"]) == 2
    assert "ranks 30 configurations" in capsys.readouterr().err


def test_long_parameter_names_abbreviate_without_clashes():
    from kerntune.tui.widgets.leaderboard import abbreviations

    names = abbreviations(["BLOCK", "ITEMS_PER_THREAD", "INNER_PASS_TILE", "VECTOR_WIDTH", "UNROLLFACTORS"])
    assert names["BLOCK"] == "BLOCK" and names["VECTOR_WIDTH"] == "VW" and names["UNROLLFACTORS"] == "UNROLLF…"
    assert names["ITEMS_PER_THREAD"] != names["INNER_PASS_TILE"]  # both would be IPT


def test_the_dashboard_and_the_text_mode_say_the_same_model_call_in_the_same_words(monkeypatch):
    import io

    from kerntune.engine.events import AgentCall
    from kerntune.tui.loop_cli import LoopText
    from kerntune.tui.text import TextRenderer
    from kerntune.tui.widgets.plan import log_text

    # the model's input_tokens leaves out the prompt cache: 40 new, 1200 read from it, 300 written
    call = AgentCall(1.5, "claude", "planner", "claude-sonnet-5", input_tokens=40, output_tokens=80,
                     cache_read_tokens=1200, cache_write_tokens=300, cost_usd=0.0123, seconds=2.5)
    state = DashboardState()
    state.apply(call)
    on_screen = log_text(state.log[-1]).plain
    monkeypatch.setenv("COLUMNS", "200")  # text output wraps at the terminal's width: one line here
    printed = []
    for sink in (LoopText, TextRenderer):
        out = io.StringIO()
        sink(out)(call)
        printed.append(out.getvalue().strip())
    assert printed == [on_screen, on_screen]
    assert on_screen == ("claude: planner: 1540 tokens in (1200 read from cache, 300 written to cache), "
                         "80 out, $0.0123, 2.5 s")


def test_a_result_s_figures_read_the_same_on_the_dashboard_in_the_text_table_and_in_the_csv():
    import csv
    import io

    from kerntune.tui.text import HEADERS, leaderboard_csv, leaderboard_rows
    from kerntune.tui.widgets.leaderboard import all_cells, column_label

    s = load_session(VECTOR_ADD)
    state = folded(VECTOR_ADD)
    results = s.results()
    rows = leaderboard_rows(results, state.default_result, limit=len(results))
    table = list(csv.DictReader(io.StringIO(leaderboard_csv(results, state.default_result))))
    assert len(rows) == len(table) == state.ranked_count == 24
    for rank, (row, line) in enumerate(zip(rows, table), start=1):
        key = state.ranked_key(rank)
        cells = all_cells(state, key, {})
        text = dict(zip(HEADERS, row))
        # one speedup over the default configuration, however it is written
        assert cells["speedup"][0] == text["speedup"] == f"{float(line['speedup']):.2f}x"
        assert cells["sol"][0] == text["% SOL"] == f"{100 * float(line['sol_fraction']):.1f}%"
        assert float(line["median_us"]) == state.column_value("median", key)
        assert (cells["speedup"][1] == "green") == (float(line["speedup"]) > 1.0)
    # the text table's headers are the dashboard's, in ASCII, with the rank and the parameters first
    assert HEADERS[2:] == [column_label(k).replace("µ", "u") for k in ("median", "spread", "gbs", "sol", "speedup",
                                                                       "status")]
