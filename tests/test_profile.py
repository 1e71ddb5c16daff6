"""Profiler evidence: recorded Nsight Compute output parsed exactly, and profiling's plumbing
(sessions, the dashboard, the command, the planners) without a GPU through a stand-in ncu that
prints a recorded H100 report."""

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from kerntune.agents.claude import profiles_text
from kerntune.agents.rules import param_kind, profile_evidence, refinement
from kerntune.engine.agent_api import LoopState, RoundRecord
from kerntune.engine.device import DeviceLimits
from kerntune.engine.events import ConfigProfiled
from kerntune.engine.ncu import ProfileError, ProfileMetrics, bound_of, find_ncu, ncu_command, ncu_failure
from kerntune.engine.ncu import parse_ncu_output, parse_raw_csv, unknown_metrics
from kerntune.engine.profile import consistency, profile_session, template_from_session
from kerntune.engine.session import load_session
from kerntune.engine.template import load_template
from kerntune.tui.state import DashboardState
from kerntune.tui.widgets.details import details_renderable

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
NCU = HERE / "data" / "ncu"
SILU_SESSION = ROOT / "sessions" / "silu_and_mul-llama7b-t2048.toml"


def test_the_silu_and_mul_report_parses_exactly():
    m = parse_ncu_output((NCU / "silu_and_mul-h100.txt").read_text(), "silu_and_mul")
    assert m.kernel == "silu_and_mul"
    assert m.duration_us == pytest.approx(43.616)
    assert m.dram_bytes == 90_189_056 + 29_689_600
    assert m.dram_gbs == pytest.approx(119_878_656 / 43_616)
    assert (m.dram_pct, m.memory_pct, m.sm_pct) == (82.08, 82.08, 59.94)
    assert (m.achieved_occupancy_pct, m.theoretical_occupancy_pct) == (82.93, 100.0)
    assert (m.l1_hit_pct, m.l2_hit_pct) == (0.0, 34.14)
    assert (m.registers, m.shared_bytes, m.block_size, m.grid_size) == (26, 0, 128, 45_056)
    assert m.cycles_per_issue == 20.57
    assert m.stalls == (("long_scoreboard", 12.76), ("wait", 2.13), ("not_selected", 1.81))
    assert m.bound == "memory"


def test_the_fused_add_rmsnorm_report_parses_exactly():
    m = parse_ncu_output((NCU / "fused_add_rmsnorm-h100.txt").read_text(), "fused_add_rmsnorm")
    assert m.duration_us == pytest.approx(44.352)
    assert m.dram_bytes == 67_143_424 + 45_442_048
    assert (m.dram_pct, m.sm_pct, m.achieved_occupancy_pct) == (75.76, 27.55, 92.63)
    assert (m.l1_hit_pct, m.l2_hit_pct) == (63.67, 50.83)
    assert (m.registers, m.shared_bytes, m.block_size, m.grid_size) == (31, 132, 1024, 2048)
    assert m.stalls == (("long_scoreboard", 25.98), ("barrier", 12.28), ("not_selected", 2.49))
    assert m.bound == "memory"


def test_metrics_survive_the_session_round_trip():
    m = parse_ncu_output((NCU / "silu_and_mul-h100.txt").read_text())
    assert ProfileMetrics.from_dict(json.loads(json.dumps(m.to_dict()))) == m
    assert "memory-bound" in m.summary() and "long scoreboard 12.8" in m.summary()


def test_the_raw_page_keeps_units_and_skips_ncus_own_lines():
    rows = parse_raw_csv((NCU / "silu_and_mul-h100.txt").read_text())
    assert len(rows) == 1
    assert rows[0]["gpu__time_duration.sum"] == ("43,616", "ns")
    assert rows[0]["Grid Size"][0] == "(22, 2048, 1)"
    assert parse_raw_csv("==PROF== Disconnected from process 1\n") == []


def test_bound_follows_ncus_speed_of_light_rule():
    assert bound_of(82.0, 60.0) == "memory"
    assert bound_of(30.0, 75.0) == "compute"
    assert bound_of(59.9, 40.0) == "latency"
    assert bound_of(60.0, 60.0) == "memory"


def test_ncus_failures_are_one_line():
    perm = "==PROF== Connected\n==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters\n"
    assert "performance counters" in ncu_failure(perm) and "\n" not in ncu_failure(perm)
    assert ncu_failure("==WARNING== No kernels were profiled.\n").startswith("ncu profiled no kernel")
    with pytest.raises(ProfileError, match="profiled no kernel"):
        parse_ncu_output("==WARNING== No kernels were profiled.\n")
    assert unknown_metrics("==ERROR== Failed to find metric sm__bogus.sum\n") == ["sm__bogus.sum"]


def test_the_command_leaves_clocks_alone_and_profiles_one_warm_launch():
    cmd = ncu_command("ncu", "k", ["a.sum", "b.pct"], ["python", "x.py"])
    assert cmd[cmd.index("--clock-control") + 1] == "none"
    assert cmd[cmd.index("--launch-skip") + 1] == "1" and cmd[cmd.index("--launch-count") + 1] == "1"
    assert cmd[cmd.index("--metrics") + 1] == "a.sum,b.pct" and cmd[-2:] == ["python", "x.py"]


def fake_ncu(tmp_path: Path, report: Path) -> Path:
    """A stand-in for ncu that answers --version and prints a recorded report for anything else."""
    script = tmp_path / "ncu"
    script.write_text(f"#!{sys.executable}\n"
                      "import sys\n"
                      "if '--version' in sys.argv:\n"
                      "    print('NVIDIA (R) Nsight Compute Command Line Profiler\\nVersion 2025.3.1.0 (build 1)')\n"
                      "    sys.exit(0)\n"
                      f"print(open({str(report)!r}).read())\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def test_find_ncu_honours_the_environment(tmp_path, monkeypatch):
    ncu = fake_ncu(tmp_path, NCU / "silu_and_mul-h100.txt")
    monkeypatch.setenv("KERNTUNE_NCU", str(ncu))
    assert find_ncu() == str(ncu)
    monkeypatch.setenv("KERNTUNE_NCU", str(tmp_path / "missing"))
    assert find_ncu() is None


def test_profiling_a_session_appends_events_that_replay_in_the_dashboard(tmp_path, monkeypatch):
    session = tmp_path / "silu.toml"
    shutil.copyfile(SILU_SESSION, session)
    before = len(load_session(session).events)
    monkeypatch.setenv("KERNTUNE_NCU", str(fake_ncu(tmp_path, NCU / "silu_and_mul-h100.txt")))
    events = profile_session(session, [1])
    assert len(events) == 1 and events[0].ok and events[0].rank == 1 and events[0].tool.startswith("2025.3")

    s = load_session(session)
    assert s.warnings == [] and len(s.events) == before + 1
    ev = s.events[-1]
    assert isinstance(ev, ConfigProfiled) and ev == events[0]
    best = min((r for r in s.results() if r.ranked), key=lambda r: r.median_us)
    assert dict(ev.config) == dict(best.config) and ev.measured_us == best.median_us
    assert ev.bytes_moved == pytest.approx(2048 * 11008 * 3 * 2)
    assert "GB/s" in consistency(ev) and "ncu 119.9 MB DRAM" in consistency(ev)

    state = DashboardState(s.header)
    for e in s.events:
        state.apply(e)
    key = next(k for k in state.entries if dict(state.entries[k].result.config) == dict(ev.config))
    assert key in state.profiles
    assert any(line.source == "profiler" and "memory-bound" in line.text for line in state.log)
    from rich.console import Console

    console = Console(width=120, record=True)
    console.print(details_renderable(state, key))
    text = console.export_text()
    assert "profiler (Nsight Compute" in text and "82.1% of peak" in text and "long scoreboard" in text


def test_the_profile_command_without_ncu_says_so_in_one_line(tmp_path):
    session = tmp_path / "silu.toml"
    shutil.copyfile(SILU_SESSION, session)
    env = {**os.environ, "KERNTUNE_NCU": str(tmp_path / "no-ncu"), "PATH": "/usr/bin:/bin"}
    r = subprocess.run([sys.executable, "-m", "kerntune.tui.cli", "profile", str(session), "--config", "1"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.strip().count("\n") == 0 and "ncu (Nsight Compute) was not found" in r.stderr
    assert load_session(session).events == load_session(SILU_SESSION).events  # nothing appended


def test_the_profile_command_prints_and_records(tmp_path):
    session = tmp_path / "silu.toml"
    shutil.copyfile(SILU_SESSION, session)
    env = {**os.environ, "KERNTUNE_NCU": str(fake_ncu(tmp_path, NCU / "silu_and_mul-h100.txt"))}
    r = subprocess.run([sys.executable, "-m", "kerntune.tui.cli", "profile", str(session), "--config", "1",
                        "--config", "2"], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "#1 BLOCK=128" in r.stdout and "memory-bound" in r.stdout and "appended to" in r.stdout
    assert [e.rank for e in load_session(session).events[-2:] if isinstance(e, ConfigProfiled)] == [1, 2]
    bad = subprocess.run([sys.executable, "-m", "kerntune.tui.cli", "profile", str(session), "--config", "5000"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert bad.returncode == 1 and "no configuration ranked 5000" in bad.stderr


def test_a_report_without_the_kernel_is_an_event_with_the_reason(tmp_path, monkeypatch):
    session = tmp_path / "silu.toml"
    shutil.copyfile(SILU_SESSION, session)
    empty = tmp_path / "empty.txt"
    empty.write_text("==PROF== Connected to process 1\n==WARNING== No kernels were profiled.\n")
    monkeypatch.setenv("KERNTUNE_NCU", str(fake_ncu(tmp_path, empty)))
    (ev,) = profile_session(session, [1])
    assert not ev.ok and "profiled no kernel" in ev.message
    assert load_session(session).events[-1] == ev


def test_a_session_from_elsewhere_rebuilds_its_template(tmp_path):
    header = dict(load_session(SILU_SESSION).header)
    header["template"] = {**header["template"], "path": "/nowhere/kernel.toml", "name": "not_built_in"}
    t = template_from_session(header, tmp_path)
    assert t.source_for("cuda") == header["template"]["source"]
    assert t.original_sources["cuda"] == header["template"]["original_source"]
    assert [p.name for p in t.parameters] == header["template"]["parameters"]


def _state_with_profile(metrics: dict) -> LoopState:
    lib = load_template(ROOT / "templates" / "silu_and_mul")
    s = load_session(SILU_SESSION)
    best = min((r for r in s.results() if r.ranked), key=lambda r: r.median_us)
    prof = ConfigProfiled(1.0, dict(best.config), True, metrics, rank=1, measured_us=best.median_us)
    rec = RoundRecord(1, "rules", "", lib.spec_path.parent, None, tuple(s.results()), best, True, "",
                      profiles=(prof,))
    return LoopState(round=2, rounds=3, backend="cuda", limits=DeviceLimits("cuda", "H100"), problem=lib.problem(),
                     original=lib, original_result=None, template=lib, template_dir=lib.spec_path.parent,
                     history=(rec,), best=best, best_round=1, sol_us=None, sol_target=0.9, budget=0,
                     last_verdict=None, say=lambda *a: None, record=lambda e: None, now=lambda: 0.0)


def test_the_rules_planner_varies_what_the_bound_points_to_first():
    silu = parse_ncu_output((NCU / "silu_and_mul-h100.txt").read_text()).to_dict()
    state = _state_with_profile(silu)
    text, first = profile_evidence(state)
    assert "memory-bound" in text and "DRAM 82% of peak" in text
    assert first[:2] == ["VEC", "UNROLL"] and "BLOCK" not in first
    latency = {**silu, "bound": "latency", "dram_pct": 20.0, "sm_pct": 20.0}
    _, first_latency = profile_evidence(_state_with_profile(latency))
    assert first_latency[0] == "BLOCK"
    values, order = refinement(state.template, dict(state.best.config), list(state.history[0].results), 24, first)
    assert order and order[0].startswith(first[0])
    assert param_kind("BLOCK") == "threads" and param_kind("FAST_EXP") == "flag"


def test_the_claude_planner_reads_the_profiles_through_a_tool():
    silu = parse_ncu_output((NCU / "silu_and_mul-h100.txt").read_text()).to_dict()
    text = profiles_text(_state_with_profile(silu))
    assert "Round 1, #1 BLOCK=128" in text and "memory-bound" in text and "GB/s" in text


@pytest.mark.parametrize("name,kernel", [("silu_and_mul-llama7b-t2048", "silu_and_mul"),
                                         ("fused_add_rmsnorm-llama70b-t2048", "fused_add_rmsnorm")])
def test_the_recorded_h100_sessions_carry_their_profiles_into_replay(name, kernel):
    s = load_session(ROOT / "sessions" / f"{name}.toml")
    profiles = [e for e in s.events if isinstance(e, ConfigProfiled)]
    assert [p.rank for p in profiles] == [1, 2] and all(p.ok for p in profiles)
    best = min((r for r in s.results() if r.ranked), key=lambda r: r.median_us)
    first = profiles[0]
    assert dict(first.config) == dict(best.config) and first.tool.startswith("2025.")
    m = ProfileMetrics.from_dict(first.metrics)
    assert m.kernel == kernel and m.bound == "memory"
    # DRAM traffic fits the cost model: every input byte read, writes at most what the model counts
    assert 0.8 * first.bytes_moved <= m.dram_bytes <= 1.02 * first.bytes_moved
    state = DashboardState(s.header)
    for e in s.events:
        state.apply(e)
    assert sum(1 for line in state.log if line.source == "profiler") == 2
