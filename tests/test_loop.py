"""The gate, the loop's stop rules and events, and the dependency direction of the agent loop."""

import itertools
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kerntune.agents.rules import RulesProvider
from kerntune.engine.backends import list_devices
from kerntune.engine.device import DeviceLimits
from kerntune.engine.evaluate import TimingPolicy
from kerntune.engine.events import AgentCall, Analysis, ConfigEvaluated, GateChecked, LoopFinished
from kerntune.engine.events import LoopStarted, PlanMade, RoundStarted, SearchPlanned, TemplateProposed
from kerntune.engine.gate import check_proposal, guard_free
from kerntune.engine.loop import LoopOptions, TuningLoop
from kerntune.engine.proposal import ParamProposal, TemplateProposal
from kerntune.engine.result import config_key
from kerntune.engine.session import SessionWriter, load_session, new_header
from kerntune.engine.sol import save_peaks
from kerntune.engine.template import load_template
from kerntune.engine.tune import TuneOptions
from kerntune.tui.feeds import LiveFeed
from kerntune.tui.state import HeaderRead

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CPU = DeviceLimits("opencl", "cpu", max_threads_per_block=4096, warp_size=1)


@pytest.fixture
def original(tmp_path):
    d = tmp_path / "silu_original"
    shutil.copytree(HERE / "data" / "originals" / "silu_and_mul", d)
    shutil.copyfile(ROOT / "templates" / "silu_and_mul" / "baseline.cu", d / "baseline.cu")
    return load_template(d)


def block_template(t, guard_only=False, extra="", constraints=(), default=256) -> TemplateProposal:
    src = t.source_for("opencl")
    src = src.replace("#define VEC 8", f"#ifndef BLOCK\n#define BLOCK {default}\n#endif\n#define VEC 8{extra}")
    if not guard_only:
        src = src.replace("reqd_work_group_size(256, 1, 1)", "reqd_work_group_size(BLOCK, 1, 1)")
    return TemplateProposal({"opencl": src}, (ParamProposal("BLOCK", (64, 128, 256), default),),
                            tuple(constraints), block=None if guard_only else ("BLOCK",))


def gate(t, proposal, tmp_path):
    return check_proposal(t, proposal, tmp_path / "tpl", backend="opencl", device=0, problem=t.problem(),
                          limits=CPU, timeout=120)


def test_the_gate_refuses_before_the_device_what_it_can_see_in_the_text(tmp_path, original):
    # a parameter that only sets its own default is not used
    v = gate(original, block_template(original, guard_only=True), tmp_path)
    assert not v.ok and v.reason.startswith("parameter(s) BLOCK are declared but never used")
    # a constraint that does not parse
    v = gate(original, block_template(original, constraints=("BLOCK >> ",)), tmp_path)
    assert not v.ok and v.reason.startswith("the spec does not load: kernel.toml: [constraints[0]]")
    # a default that its own constraints forbid
    v = gate(original, block_template(original, constraints=("BLOCK < 128",)), tmp_path)
    assert not v.ok and v.reason == "the default configuration is infeasible at small: BLOCK < 128"
    # no parameters at all
    v = gate(original, TemplateProposal({"opencl": original.source_for("opencl")}, ()), tmp_path)
    assert not v.ok and "no parameters" in v.reason
    # a source for another backend only
    cuda_only = TemplateProposal({"cuda": original.source_for("cuda")}, (ParamProposal("B", (1,), 1),))
    v = gate(original, cuda_only, tmp_path)
    assert not v.ok and "no opencl source" in v.reason


def test_guard_free_removes_only_the_default_block():
    src = "#ifndef VEC\n#define VEC 8\n#endif\nint x = VEC;\n"
    assert guard_free(src, "VEC") == "int x = VEC;\n"
    assert guard_free(src, "BLOCK") == src


def test_the_gate_compiles_and_compares_on_the_device(tmp_path, original, opencl_backend):
    v = gate(original, block_template(original, extra="\n#error not a kernel"), tmp_path)
    assert not v.ok and "does not compile" in v.reason
    v = gate(original, block_template(original, default=128), tmp_path)  # any work-group size gives the same outputs
    assert v.ok and len(v.seeds) == 2 and v.template.default_config() == {"BLOCK": 128}
    wrong = block_template(original)
    wrong = TemplateProposal({"opencl": wrong.sources["opencl"].replace("* vload_half(j, up)", "")},
                             wrong.parameters, block=("BLOCK",))
    v = gate(original, wrong, tmp_path)
    assert not v.ok and "out:" in v.reason and "outside tolerance" in v.reason and "at small" in v.reason


# (the crash has a limit it never reaches: a loaded host's check may take longer than 4 s to get there)
@pytest.mark.parametrize("body, words, timeout", [
    ("volatile int spin = 1;\n    while (spin) {}", "timeout: the check did not end within 4 s", 4),
    ("((__global volatile int *)0)[get_global_id(0) * 4096] = 1;", "crashed: the worker died (signal", 60),
], ids=["hangs", "crashes"])
def test_a_proposal_that_hangs_or_crashes_its_check_costs_a_rejection(
        tmp_path, original, opencl_backend, body, words, timeout):
    p = block_template(original)
    source = p.sources["opencl"].replace("const long t = get_group_id(0);", "const long t = get_group_id(0);\n    " + body)
    bad = TemplateProposal({"opencl": source}, p.parameters, block=("BLOCK",))
    v = check_proposal(original, bad, tmp_path / "bad", backend="opencl", device=0, problem=original.problem(),
                       limits=CPU, timeout=timeout)
    assert not v.ok and v.reason.startswith(words), v.reason
    assert v.checks[-1] == "the default configuration is feasible"  # it failed on the device, nowhere else


def test_the_loop_stops_when_the_best_is_within_the_sol_target_and_the_planner_sees_sol(
        tmp_path, original, opencl_backend, monkeypatch):
    # peaks so low that this CPU reaches the speed of light at once, and so uncertain (a spread of
    # 100%) that a time beating them is not flagged suspect: with a precise probe, every result here
    # would beat its bound, be suspect and go unranked wherever the cache flush covers the CPU's
    # cache (a cold cache), and the loop would have no best to stop on
    monkeypatch.setenv("KERNTUNE_CACHE_DIR", str(tmp_path / "cache"))
    limits = list_devices("opencl")[0].limits
    save_peaks(limits, 0.01, 0.01, spread=1.0)
    tune = TuneOptions(backend="opencl", probe=False, seed=3, session_path=tmp_path / "sol.toml",
                       timing=TimingPolicy(min_repeats=5, max_repeats=5))
    events = []
    out = TuningLoop(original, [RulesProvider()], LoopOptions(tune=tune, rounds=3, budget=3, sol_target=0.9),
                     [events.append]).run()
    assert out.reason.startswith("the best is") and "of the speed of light (target 90%)" in out.reason
    assert len(out.rounds) == 1 and out.best.sol_fraction >= 0.9
    plan = next(e for e in events if isinstance(e, PlanMade))
    assert re.search(r"Speed of light at small: [\d.]+ us; the original runs at \d+% of it", plan.text)
    assert re.search(r"Speed of light per problem size: small [\d.]+ us \(tuned here\), llama7b-t128 [\d.]+ us",
                     plan.text)
    analysis = next(e for e in events if isinstance(e, Analysis))
    assert "% of SOL" in analysis.text and analysis.sol_fraction >= 0.9


def test_loop_events_round_trip_through_a_session(tmp_path):
    evs = [
        LoopStarted(0.0, "claude", 3, 0.9, "claude-sonnet-5", 24),
        RoundStarted(0.1, 1, "claude"),
        PlanMade(0.2, 1, "claude", "lift BLOCK\nthen search", True, False),
        TemplateProposed(0.3, 1, 1, "claude", "opencl", ("BLOCK", "VEC"), {"BLOCK": 256, "VEC": 8},
                         "[kernel]\nname = \"x\"\n", "#ifndef BLOCK\n", "--- a\n+++ b\n", "two knobs"),
        GateChecked(0.4, 1, 1, False, "out: 3 of 10 elements outside tolerance", ("the spec loads",), (5, 6), "/t/r1"),
        SearchPlanned(0.5, 1, "rules", "grid", 12, {"BLOCK": [64, 256], "VEC": [8]}, "coarse"),
        Analysis(0.6, 1, "rules", "Round 1: ...", {"BLOCK": 64}, 10.5, 20.0, 0.5, True),
        AgentCall(0.7, "claude", "planner", "claude-sonnet-5", 1200, 80, 1000, 200, 0.0123, 1.5, "end_turn"),
        LoopFinished(0.8, "plateau", 2, {"BLOCK": 64}, 10.5, 20.0, 1.9, 0.5, "/t/r1", 0.0123),
    ]
    header = new_header(command=["kerntune"], device={"name": "d"}, template={"name": "x", "backend": "opencl"},
                        space={}, tuning={})
    with SessionWriter(tmp_path / "s.toml", header) as w:
        for ev in evs:
            w.write(ev)
    s = load_session(tmp_path / "s.toml")
    assert s.events == evs and s.warnings == []


def test_the_engine_never_imports_the_agents_and_nothing_needs_the_sdk_to_load():
    for f in (ROOT / "engine").rglob("*.py"):
        text = f.read_text()
        assert not re.search(r"\bkerntune\.agents\b|from \.\.agents|import agents\b", text), f
        assert "anthropic" not in re.sub(r"#[^\n]*|\"\"\"[\s\S]*?\"\"\"", "", text), f
    code = ("import sys; import kerntune.tui.cli, kerntune.agents.rules, kerntune.agents.providers, "
            "kerntune.engine.loop; assert 'anthropic' not in sys.modules, 'anthropic imported'")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_the_agents_import_the_agent_interface_and_never_the_loop_driver():
    for f in (ROOT / "agents").rglob("*.py"):
        text = f.read_text()
        assert not re.search(r"\bengine\.(loop|tune)\b|\bengine import (loop|tune)\b", text), f
    names = sorted(f"kerntune.agents.{f.stem}" for f in (ROOT / "agents").glob("*.py") if f.stem != "__init__")
    code = (f"import sys; import {', '.join(names)}; "
            "found = [m for m in ('kerntune.engine.loop', 'kerntune.engine.tune') if m in sys.modules]; "
            "assert not found, f'the agents load {found}'")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_the_loop_measures_each_configuration_of_a_template_once(tmp_path, original, opencl_backend):
    tune = TuneOptions(backend="opencl", probe=False, seed=5, session_path=tmp_path / "once.toml",
                       timing=TimingPolicy(min_repeats=3, max_repeats=3))
    events, feed = [], LiveFeed(max_batch=100_000)
    out = TuningLoop(original, [RulesProvider()], LoopOptions(tune=tune, rounds=2, budget=4, sol_target=0.99,
                                                              plateau=-1.0), [events.append, feed]).run()
    assert len(out.rounds) == 2 and all(len(r.results) > 0 for r in out.rounds)
    # the dashboard gets the session's header in memory first, then every event of every round
    assert feed.poll().items == [HeaderRead(load_session(out.session_path).header), *events]
    # a result demoted by the winner's re-check on new inputs replaces its own record: no measurement
    evaluated = [e for e in events if isinstance(e, ConfigEvaluated) and e.result.config]
    measured = [config_key(e.result.config) for e in evaluated if not e.replaces]
    assert len(measured) == len(set(measured)), "a configuration was measured twice"
    assert {config_key(e.result.config) for e in evaluated if e.replaces} <= set(measured)
    # round 2 refines around round 1's best: its grid holds configurations round 1 measured, skipped
    planned = [e for e in events if isinstance(e, SearchPlanned)]
    round1 = {config_key(r.config) for r in out.rounds[0].results}
    grid2 = {config_key(dict(zip(planned[1].values, c))) for c in itertools.product(*planned[1].values.values())}
    assert len(planned) == 2 and round1 & grid2  # the best, at least
    assert not round1 & {config_key(r.config) for r in out.rounds[1].results}
    # FAST_MATH is held at its default in round 1 and tried on round 1's best in round 2
    leader = dict(out.rounds[0].best.config)
    assert planned[0].values["FAST_MATH"] == [0] and planned[1].values["FAST_MATH"] == [0, 1]
    assert {**leader, "FAST_MATH": 1} in [dict(r.config) for r in out.rounds[1].results]
    default = config_key(out.template.default_config())
    assert default in measured  # the default, measured in round 1, is round 2's baseline too
    assert [e.rounds for e in events if isinstance(e, LoopFinished)] == [2]
    assert any("the template's default" in e.text for e in events if isinstance(e, Analysis) and e.round == 2)
