"""The dashboard and the text mode in runs over several devices: a device column on the board, a
table of the devices' progress, NVML read on each local GPU, a cluster's devices shown without it.

One-device sessions must read exactly as before (the snapshots say so); these tests use synthetic
results from two devices and the two-GPU session of tests/tui_support.py.
"""

from __future__ import annotations

import asyncio
import csv
import io
from dataclasses import replace

from kerntune.engine.events import ConfigEvaluated, RunStarted
from kerntune.engine.nvml import NVMLUnavailable, Telemetry
from kerntune.engine.result import Result, config_key
from kerntune.engine.session import load_session
from kerntune.engine.template import load_template
from kerntune.engine.tune import TuneOptions, TuneRun
from kerntune.tui.app import LiveDashboard
from kerntune.tui.feeds import LiveFeed
from kerntune.tui.state import BoardView, DashboardState, DeviceProgress
from kerntune.tui.text import HEADERS, TextRenderer, leaderboard_csv, leaderboard_table
from kerntune.tui.widgets.device import REMOTE_NOTE
from kerntune.tui.widgets.leaderboard import all_cells, fit_columns
from tui_support import HERE, VECTOR_ADD, ScriptedEngine, two_device_session, until

START = RunStarted(0.0, "vector_add", {"n": 1024}, "", "cuda", "NVIDIA H200", "grid")


def result(block: int, device: str, us: float | None = None, status: str = "ok") -> Result:
    return Result(config={"BLOCK": block}, status=status, median_us=us, device=device,
                  message="" if status == "ok" else "too many resources requested for launch")


def evaluated(t: float, i: int, r: Result, replaces: bool = False) -> ConfigEvaluated:
    return ConfigEvaluated(t, i, r, replaces)


def two_devices(a: str = "cuda:0", b: str = "cuda:1") -> DashboardState:
    """Four seconds of a run: cuda:0 measured three configurations, cuda:1 two, one of which failed."""
    state = DashboardState({"template": {"parameters": ["BLOCK"], "default_config": {"BLOCK": 256}}})
    state.apply_all([START,
                     evaluated(1.0, 0, result(256, a, 10.0)),
                     evaluated(1.5, 1, result(128, b, 9.0)),
                     evaluated(2.0, 2, result(64, a, 12.0)),
                     evaluated(3.0, 3, result(1024, b, status="launch_error")),
                     evaluated(4.0, 4, result(512, a, 8.0))])
    return state


def test_each_device_counts_its_results_failures_rate_and_fastest():
    state = two_devices()
    assert state.several_devices
    cuda0, cuda1 = state.device_list()
    assert (cuda0.label, cuda0.results, cuda0.failed) == ("cuda:0", 3, 0)
    assert (cuda1.label, cuda1.results, cuda1.failed) == ("cuda:1", 2, 1)
    assert state.device_best(cuda0).median_us == 8.0 and state.device_best(cuda1).median_us == 9.0
    assert state.device_rate(cuda0) == 3 / 4.0 and state.device_rate(cuda1) == 2 / 4.0
    # a new run (the agent loop's next round) starts the rates again, not the counts
    state.apply(replace(START, t=5.0))
    assert state.device_rate(cuda0) is None and cuda0.results == 3


def test_a_result_measured_again_or_demoted_moves_between_the_devices_counts():
    state = two_devices()
    # the best, measured on cuda:0, fails its re-check: demoted, not measured again
    state.apply(evaluated(5.0, 4, result(512, "cuda:0", status="wrong_result"), replaces=True))
    cuda0, cuda1 = state.device_list()
    assert (cuda0.results, cuda0.failed, cuda0.run_measured) == (3, 1, 3)
    assert state.device_best(cuda0).median_us == 10.0
    # a configuration measured again elsewhere (a lost worker's, run again) counts where it was measured last
    state.apply(evaluated(6.0, 5, result(64, "cuda:1", 11.5)))
    assert (cuda0.results, cuda1.results) == (2, 3)
    assert state.evaluated == sum(d.results for d in state.devices.values())


def test_devices_sort_by_their_numbers_and_tell_a_cluster_s_from_this_host_s():
    state = DashboardState()
    for i, label in enumerate(("cuda:10", "cuda:2", "cuda:2#2")):
        state.apply(evaluated(1.0, i, result(32 * (i + 1), label, 5.0)))
    assert [d.label for d in state.device_list()] == ["cuda:2", "cuda:2#2", "cuda:10"]
    assert [d.nvml_index for d in state.device_list()] == [2, 2, 10]
    far = DeviceProgress("10.0.0.5:40123/cuda:0")
    assert far.remote and far.nvml_index is None
    assert not DeviceProgress("cuda:1").remote


def test_the_board_filters_and_sorts_by_device():
    state = two_devices()
    keys, matched = state.board(BoardView(filter="device=cuda:1", show_failed=True))
    assert matched == 2 and {state.entries[k].result.device for k in keys} == {"cuda:1"}
    keys, _ = state.board(BoardView(filter="cuda:0"))  # a word matches the device too
    assert len(keys) == 3
    keys, _ = state.board(BoardView(sort="device"))
    assert [state.entries[k].result.device for k in keys] == ["cuda:0"] * 3 + ["cuda:1"]
    cells = all_cells(state, config_key({"BLOCK": 128}), {})
    assert cells["device"][0] == "cuda:1"


def test_the_device_column_is_shown_with_several_devices_and_dropped_first_when_narrow():
    state = two_devices()
    widths = {"rank": 1, "param:BLOCK": 4, "median": 5, "spread": 6, "gbs": 6, "sol": 6, "speedup": 5,
              "occ": 3, "device": 6, "status": 12}
    labels = {"rank": "#", "param:BLOCK": "BLOCK", "config": "config", "message": "message", "median": "median µs",
              "spread": "spread", "gbs": "GB/s", "sol": "% SOL", "speedup": "speedup", "occ": "occ",
              "device": "device", "status": "status"}

    def keys(room: int, s: DashboardState = state) -> list[str]:
        return [k for k, _, _ in fit_columns(s, widths, room, False, labels)]

    assert keys(90)[-2:] == ["device", "status"]  # 81 cells with every column
    narrower = keys(80)
    assert "device" not in narrower and "occ" in narrower  # the device goes before occupancy
    assert "device" not in keys(200, two_devices("", ""))  # one device: no column, whatever the room


def folded_one_device() -> DashboardState:
    s = load_session(VECTOR_ADD)
    state = DashboardState(s.header)
    state.apply_all(s.events)
    return state


def test_a_one_device_session_has_no_devices_and_its_text_and_csv_are_as_before():
    state = folded_one_device()
    assert state.devices == {} and not state.several_devices
    results = [e.result for e in state.entries.values()]
    assert "device" not in leaderboard_csv(results, state.default_result).splitlines()[0].split(",")
    out = io.StringIO()
    TextRenderer(out)(ConfigEvaluated(1.0, 0, results[0]))
    assert out.getvalue().startswith("[   1/0] BLOCK=256 ITEMS=1: ok")
    assert "device" not in HEADERS


def test_the_text_mode_names_the_device_of_each_result_and_the_board_has_a_device_column(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    state = two_devices()
    out = io.StringIO()
    renderer = TextRenderer(out)
    for e in sorted(state.entries.values(), key=lambda e: e.seq):
        renderer(ConfigEvaluated(float(e.seq), e.index, e.result))
    lines = out.getvalue().splitlines()
    assert lines[0] == "[   1/0 cuda:0] BLOCK=256: ok 10.0 us"
    assert lines[3] == "[   4/0 cuda:1] BLOCK=1024: launch_error - us too many resources requested for launch"
    results = renderer.results
    rows = list(csv.DictReader(io.StringIO(leaderboard_csv(results, results[0], failed=True))))
    assert [(r["BLOCK"], r["device"]) for r in rows] == [("512", "cuda:0"), ("128", "cuda:1"), ("256", "cuda:0"),
                                                         ("64", "cuda:0"), ("1024", "cuda:1")]
    table = leaderboard_table(results, results[0])
    assert [c.header for c in table.columns][-2:] == ["device", "status"]
    assert [str(c) for c in table.columns[-2].cells] == ["cuda:0", "cuda:1", "cuda:0", "cuda:0"]  # (cells: Text, never markup)


# the live dashboard ---------------------------------------------------------------------------------

def reading(power: float) -> Telemetry:
    return Telemetry(1980, 2619, power, 700.0, 61, 87, 30 * 2**30, 141 * 2**30, 97, (), 5, 16)


def live_two_devices(tmp_path, telemetry, devices=(0, 1), cluster=False, labels=("cuda:0", "cuda:1"),
                     hold_after=None):
    """A live dashboard fed the two-GPU session's events (their devices relabelled to `labels`)."""
    session = two_device_session(tmp_path / "recorded.toml")
    events = [replace(e, result=replace(e.result, device=labels[e.index % 2])) if isinstance(e, ConfigEvaluated)
              else e for e in session.events]
    path = tmp_path / "live.toml"
    feed = LiveFeed()
    engine = ScriptedEngine(dict(session.header), events, path, feed, hold_after)
    run = TuneRun(load_template(HERE.parent / "templates" / "vector_add"), TuneOptions(session_path=path))
    app = LiveDashboard(feed=feed, run=run, engine=engine, session_path=path, telemetry=telemetry,
                        nvml_index=devices[0] if devices else 0, devices=devices, cluster=cluster)
    return app, engine


def test_a_run_over_two_gpus_reads_nvml_on_each_and_shows_them_side_by_side(tmp_path):
    calls = []

    def read(index: int) -> Telemetry:
        calls.append(index)
        return reading(412.0 if index == 0 else 688.0)

    async def go():
        app, engine = live_two_devices(tmp_path, read, hold_after=12)
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: engine.held.is_set() and {0, 1} <= set(calls))
            await pilot.pause(0.2)
            text = app.screen_text()
            engine.release.set()
            await until(pilot, lambda: app.engine_done)
            return text

    text = asyncio.run(go())
    assert set(calls) == {0, 1}
    rows = [line for line in text.splitlines() if "MHz" in line]
    assert len(rows) == 2 and "cuda:0" in rows[0] and "412 W" in rows[0] and "cuda:1" in rows[1]
    assert "688 W" in rows[1]
    assert "on 2 devices" in text


def test_a_gpu_nvml_cannot_read_is_named_and_the_others_are_still_read(tmp_path):
    calls = []

    def read(index: int) -> Telemetry:
        calls.append(index)
        if index == 1:
            raise NVMLUnavailable("NVML: no device 1 (Not Found)")
        return reading(300.0)

    async def go():
        app, engine = live_two_devices(tmp_path, read, hold_after=12)
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: engine.held.is_set() and 1 in app.reading_errors and 0 in app.readings)
            await pilot.pause(1.2)
            text = app.screen_text()
            assert app._telemetry_timer is not None  # still reading cuda:0
            engine.release.set()
            await until(pilot, lambda: app.engine_done)
            return text

    text = asyncio.run(go())
    assert calls.count(1) == 1 and calls.count(0) >= 2
    assert "NVML: no device 1" in text and "300 W" in text


def test_a_cluster_s_devices_show_their_progress_and_no_local_telemetry(tmp_path):
    calls = []
    far = ("10.0.0.5:40123/cuda:0", "10.0.0.6:40123/cuda:0")

    async def go(cluster: bool):
        # held before the first result: the run has started, no device is named yet
        app, engine = live_two_devices(tmp_path, lambda i: calls.append(i) or reading(100.0), devices=(),
                                       cluster=cluster, labels=far, hold_after=3)
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: engine.held.is_set() and app.state.started is not None)
            await pilot.pause(0.2)
            engine.release.set()
            await until(pilot, lambda: app.engine_done)
            await pilot.pause(0.1)
            return app, app.screen_text()

    app, text = asyncio.run(go(True))
    assert calls == []  # told it is a cluster: this host's GPU is not the one measuring
    assert app.telemetry_note == REMOTE_NOTE and "no NVML telemetry" in text
    assert "10.0.0.5:40123/cuda:0" in text and "10.0.0.6:40123/cuda:0" in text
    assert [d.results for d in app.state.device_list()] == [12, 12]
    # not told (the agent loop's dashboard): it reads this host's GPU until results name a cluster's
    app, text = asyncio.run(go(False))
    assert calls and set(calls) == {0}
    assert app._telemetry_timer is None and app.telemetry_note == REMOTE_NOTE and "no NVML telemetry" in text
