"""The leaders' paired re-timing: its statistics, the tie verdict and the choice among tied
configurations, the record in the session, and identical programs tuned under load."""

import json
import random
from dataclasses import replace
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kerntune.engine.events import ConfigEvaluated, EventFormatError, LeadersRetimed, event_from_dict, event_to_dict
from kerntune.engine.retime import (MARGIN, affordable, leaders, launches_per_round, median_interval, simplicity,
                                    verdict)
from kerntune.engine.result import Result, config_key
from kerntune.engine.session import load_session
from kerntune.engine.selftest import SPEC

from test_cli import QUICK, kerntune

DEFAULT = {"B": 64, "V": 1}
VALUES = {"B": [32, 64, 128, 256], "V": [1, 2, 4]}


def _noisy(base: float, n: int, rng: random.Random, noise: float = 0.05) -> list[float]:
    return [base * (1 + rng.uniform(-noise, noise)) for _ in range(n)]


def test_the_median_interval_takes_the_order_statistics_that_hold_95_percent():
    xs = list(range(1, 11))  # 10 rounds: x(2) and x(9) hold the median with 97.9%
    assert median_interval(xs) == (2, 5.5, 9)
    assert median_interval([3, 1, 2, 6, 5, 4]) == (1, 3.5, 6)  # 6 rounds: min and max (96.9%)
    low, mid, high = median_interval(list(range(100)))
    assert 38 <= low < mid < high <= 61


def test_a_real_speedup_is_told_apart_and_its_interval_holds_it():
    rng = random.Random(1)
    fast, orig = {"B": 256, "V": 4}, DEFAULT
    times = {config_key(fast): _noisy(100.0, 10, rng), config_key(orig): _noisy(150.0, 10, rng)}
    v = verdict([fast, orig], times, config_key(orig), DEFAULT, VALUES, [True] * 10)
    assert v.configs[v.chosen] == fast and v.tied == (True, False)
    assert v.low[v.chosen] <= 1.5 <= v.high[v.chosen] and v.low[v.chosen] > 1.3


def test_configurations_that_cannot_be_told_apart_are_tied_and_the_original_is_reported():
    rng = random.Random(2)
    configs = [{"B": 256, "V": 4}, {"B": 128, "V": 2}, DEFAULT]
    times = {config_key(c): _noisy(100.0, 20, rng, 0.3) for c in configs}
    v = verdict(configs, times, config_key(DEFAULT), DEFAULT, VALUES, [False] * 20)
    assert all(v.tied) and v.configs[v.chosen] == DEFAULT
    assert (v.low[v.chosen], v.high[v.chosen]) == (1.0, 1.0) and "original" in v.reason
    assert v.quiet_rounds == 0 and v.rounds == 20  # no quiet rounds: judged on them all


def test_among_tied_configurations_the_simplest_is_reported_whatever_their_order():
    rng = random.Random(3)
    near, far, orig = {"B": 128, "V": 1}, {"B": 256, "V": 4}, DEFAULT
    times = {config_key(near): _noisy(100.0, 10, rng, 0.01), config_key(far): _noisy(100.0, 10, rng, 0.01),
             config_key(orig): _noisy(200.0, 10, rng, 0.01)}
    chosen = set()
    for configs in ([near, far, orig], [far, orig, near], [orig, far, near]):
        v = verdict(configs, times, config_key(orig), DEFAULT, VALUES, [True] * 10)
        assert sorted(map(config_key, (c for c, t in zip(v.configs, v.tied) if t))) == sorted(
            [config_key(near), config_key(far)])
        chosen.add(config_key(v.configs[v.chosen]))
    assert chosen == {config_key(near)}
    assert simplicity(near, DEFAULT, VALUES) < simplicity(far, DEFAULT, VALUES)


def test_a_difference_beyond_the_margin_with_a_tight_interval_is_not_a_tie():
    rng = random.Random(4)
    a, b, orig = {"B": 128, "V": 1}, {"B": 256, "V": 4}, DEFAULT
    slower = 1 + 3 * MARGIN
    times = {config_key(a): _noisy(100.0, 10, rng, 0.005), config_key(b): _noisy(100.0 * slower, 10, rng, 0.005),
             config_key(orig): _noisy(200.0, 10, rng, 0.005)}
    v = verdict([a, b, orig], times, config_key(orig), DEFAULT, VALUES, [True] * 10)
    assert v.tied == (True, False, False) and v.configs[v.chosen] == a


def test_programs_built_to_the_same_binary_are_tied_whatever_their_times():
    a, b = {"B": 128, "V": 1}, {"B": 256, "V": 1}
    times = {config_key(a): [100.0] * 8, config_key(b): [130.0] * 8}
    v = verdict([a, b], times, None, DEFAULT, VALUES, [True] * 8, digests={config_key(a): "x", config_key(b): "x"})
    assert v.tied == (True, True) and v.identical == ((0, 1),) and v.original == -1


def test_the_leaders_are_the_fastest_every_overlapping_one_and_the_original():
    def r(config, times):
        return Result(config=config, status="ok", times_us=tuple(times), median_us=sorted(times)[len(times) // 2])
    best = r({"B": 1}, [10, 10.1, 10.2, 10.3, 10.4, 10.5, 10.6, 10.7, 10.8, 10.9])
    close = r({"B": 2}, [10.8, 10.9, 11.0, 11.1, 11.2, 11.3, 11.4, 11.5, 11.6, 11.7])
    far = [r({"B": k}, [20 + k] * 10) for k in range(3, 10)]
    orig = r({"B": 0}, [50] * 10)
    # timed during a disturbance: slow in median, but its fastest launch reaches the fastest's interval
    spiky = Result(config={"B": 10}, status="ok", times_us=(10.2,) + (31.0,) * 9, median_us=31.0, min_us=10.2)
    chosen = leaders([best, close] + far + [spiky], orig)
    assert [c.config["B"] for c in chosen] == [1, 2, 3, 10, 0]  # the top 3, the spiky one, the original
    # measured during a disturbance: one run's order says little, the eight fastest are re-timed
    noisy = [replace(x, disturbed="other processes used up to 1.1 cores") for x in [best, close] + far]
    assert [c.config["B"] for c in leaders(noisy, orig)] == [1, 2, 3, 4, 5, 6, 7, 8, 0]
    assert launches_per_round([10.0, 10.0], rounds=10, budget_s=0.5) == 25
    assert launches_per_round([1e5], rounds=10, budget_s=0.5) == 3


def test_a_leaders_record_reads_back_and_one_that_does_not_hold_together_is_refused():
    ev = LeadersRetimed(1.0, ({"B": 1}, {"B": 2}), (10.0, 11.0), (1.1, 1.0), (1.0, 1.0), (1.2, 1.0), (True, True),
                        (0.0, 0.0), 0, 1, 1, "tied", 10, 10, 5, "")
    back = event_from_dict(event_to_dict(ev))
    assert back == ev and back.valid and back.tied_with_chosen() == [{"B": 1}]
    broken = event_to_dict(ev) | {"chosen": 7}
    assert not event_from_dict(broken).valid
    with pytest.raises(EventFormatError):
        event_from_dict(event_to_dict(ev) | {"tied": ["yes", True]})
    with pytest.raises(EventFormatError):
        event_from_dict(event_to_dict(ev) | {"configs": [{"B": [1]}]})


@pytest.fixture
def twins(tmp_path):
    """The selftest's honest kernel alone: TWIN, which the source never reads, builds three
    identical programs."""
    d = tmp_path / "twins"
    shutil.copytree(SPEC.parent, d)
    spec = d / "kernel.toml"
    text = spec.read_text().replace("values = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]", "values = [0]")
    spec.write_text(text)
    return d


def test_identical_programs_tuned_while_another_process_loads_a_core_are_all_tied(twins, tmp_path):
    session = tmp_path / "twins.toml"
    load = subprocess.Popen([sys.executable, "-c", "while 1: pass"])
    try:
        r = kerntune("tune", str(twins), "--session", str(session), *QUICK)
    finally:
        load.kill()
        load.wait()
    assert r.returncode == 0, r.stderr
    s = load_session(session)
    lead = s.leaders()
    assert lead is not None and all(lead.tied) and len(lead.configs) == 3
    summary = json.loads(kerntune("show", str(session), "--json").stdout)
    best = summary["best"]
    assert best["config"] == {"MODE": 0, "TWIN": 0}  # the original, among the tied
    assert sorted(t["TWIN"] for t in best["tied"]) == [1, 2]
    low, high = best["speedup_interval"]
    assert low <= 1.0 <= high
    marks = {line.split()[1] for line in r.stdout.splitlines() if line.startswith("│")}
    assert {m[-1] for m in marks if m[0].isdigit()} == {"*", "="}  # the reported row and the two tied
    shown = kerntune("show", str(session)).stdout
    assert "* reported; = tied with it" in shown and "tied with" in shown


def test_the_dashboard_marks_the_reported_configuration_and_those_tied_with_it():
    from kerntune.tui.state import DashboardState
    from kerntune.tui.widgets.leaderboard import abbreviations, all_cells

    state = DashboardState({"template": {"parameters": ["B"], "default_config": {"B": 1}}})
    configs = ({"B": 1}, {"B": 2}, {"B": 3})
    for i, (c, us) in enumerate(zip(configs, (12.0, 10.0, 30.0))):
        state.apply(ConfigEvaluated(0.1 * (i + 1), i, Result(config=c, status="ok", median_us=us, disturbed="" if i < 2
                                                             else "other processes used up to 1.2 cores")))
    state.apply(LeadersRetimed(1.0, configs, (10.0, 10.1, 30.0), (1.0, 0.99, 0.4), (1.0, 0.95, 0.3),
                               (1.0, 1.03, 0.5), (True, True, False), (0.0, 0.0, 0.0), 0, 0, 0, "tied", 10, 10, 5))
    cells = {k: all_cells(state, k, abbreviations(state.parameters)) for k in state.entries}
    assert cells[config_key({"B": 1})]["rank"][0] == "2*"  # the original, reported
    assert cells[config_key({"B": 2})]["rank"][0] == "1="  # the fastest, tied with it
    assert cells[config_key({"B": 3})]["rank"][0] == "3" and cells[config_key({"B": 3})]["status"][0] == "ok ~"


def test_the_leaders_the_rounds_cannot_afford_are_left_out_but_never_the_top_three_or_the_original():
    def r(b, time_s):
        return Result(config={"B": b}, status="ok", times_us=(1.0,) * 9, median_us=float(b), time_s=time_s)
    lead = [r(1, 1.0), r(2, 1.0), r(3, 1.0), r(4, 1.0), r(5, 0.01), r(0, 5.0)]
    kept = affordable(lead, wall_s=8.0, original=lead[-1])
    assert [x.config["B"] for x in kept] == [1, 2, 3, 5, 0]  # B=4 would cost 6 rounds x 0.4 s more than 8 s allows


def test_a_candidate_within_the_margin_of_the_original_is_not_reported_over_it():
    # The fastest is told apart from the original, the simplest of those tied with it is not:
    # ties do not chain, so the original is reported, whichever near-equal one ran fastest.
    rng = random.Random(6)
    fast, near, orig = {"B": 256, "V": 4}, {"B": 64, "V": 2}, DEFAULT
    times = {config_key(fast): _noisy(100.0, 10, rng, 0.002), config_key(near): _noisy(101.5, 10, rng, 0.002),
             config_key(orig): _noisy(103.0, 10, rng, 0.002)}
    v = verdict([fast, near, orig], times, config_key(orig), DEFAULT, VALUES, [True] * 10)
    assert v.tied[:2] == (True, True) and not v.tied[2]  # near is tied with fast, orig is not
    assert v.configs[v.chosen] == DEFAULT and "original is reported" in v.reason
    # A gain told apart by more than the margin is reported as before.
    times[config_key(orig)] = _noisy(110.0, 10, rng, 0.002)
    v = verdict([fast, near, orig], times, config_key(orig), DEFAULT, VALUES, [True] * 10)
    assert v.configs[v.chosen] == near and v.low[v.chosen] > 1 + MARGIN


def test_two_runs_of_one_command_examine_the_same_configurations_on_new_inputs(tmp_path):
    # without --seed: the inputs are drawn anew, the search's order is the same (both recorded)
    quick = ["--headless", "--no-probe", "--repeats", "3", "--backend", "opencl", "--shape", "n=4096",
             "--strategy", "random", "--budget", "4"]
    runs = []
    for i in range(2):
        path = tmp_path / f"run{i}.toml"
        r = kerntune("tune", "vector_add", "--session", str(path), *quick)
        assert r.returncode == 0, r.stderr
        runs.append(load_session(path))
    orders = [[config_key(x.config) for x in s.results()] for s in runs]
    assert orders[0] == orders[1] and len(orders[0]) == 4
    tunings = [s.header.tuning for s in runs]
    assert tunings[0]["search_seed"] == tunings[1]["search_seed"]
    assert tunings[0]["seed"] != tunings[1]["seed"]  # new inputs on every run


def test_when_more_configurations_tie_than_are_re_timed_the_simplest_of_them_are_kept():
    # a memory-bound kernel: a dozen configurations that their own timing cannot tell apart,
    # the simplest measured a little slower than the others by chance
    def r(config, base):
        times = tuple(base + 0.1 * i for i in range(10))
        return Result(config=config, status="ok", times_us=times, median_us=times[5])
    near = [r({"B": 256, "V": v, "U": u}, 100.0 + 0.01 * (v + u)) for v in (2, 4, 8) for u in (1, 2, 4, 8)]
    simple = r({"B": 64, "V": 2, "U": 1}, 100.3)
    orig = r(dict(DEFAULT, U=1), 150.0)
    values = dict(VALUES, V=[1, 2, 4, 8], U=[1, 2, 4, 8])
    key = lambda c: simplicity(c, dict(DEFAULT, U=1), values)  # noqa: E731
    chosen = leaders(near + [simple], orig, key)
    assert len(chosen) == 9 and chosen[-1] is orig and simple in chosen
    assert chosen[:3] == near[:3]  # the three fastest always
    assert simple not in leaders(near + [simple], orig)  # without the key: the fastest eight
