"""The one search loop (engine/driver.py) that a live run and a simulation share, and the pool of
workers over several devices (engine/workers.py), on the OpenCL CPU device."""

from __future__ import annotations

import random
from collections import deque
from pathlib import Path

import pytest

from kerntune import templates
from kerntune.engine.driver import Calls, Progress, search
from kerntune.engine.evaluate import TimingPolicy
from kerntune.engine.events import Note
from kerntune.engine.result import Result
from kerntune.engine.search import StopRules, make_strategy
from kerntune.engine.session import load_session
from kerntune.engine.space import Config, Space
from kerntune.engine.template import Problem, load_template
from kerntune.engine.tune import TuneOptions, TuneRun
from kerntune.engine.workers import _labels
from kerntune.engine.worker import WorkerSpec


def _space(n: int) -> tuple[Space, dict[Config, Result]]:
    configs = tuple(Config.of({"X": i}) for i in range(n))
    rng = random.Random(3)
    times = {c: Result(config=c.as_dict(), status="ok", median_us=float(rng.randrange(10, 1000))) for c in configs}
    return Space("t", Problem("p", {}), configs, n), times


class OutOfOrder:
    """Evaluations that finish in a scrambled order, several at once (as devices or a cluster do)."""

    def __init__(self, times: dict[Config, Result], capacity: int, seed: int = 0):
        self.times, self.capacity = times, capacity
        self.out: list[Config] = []
        self.most_out = 0
        self.counts: list[int] = []  # how many were out after each submission
        self.rng = random.Random(seed)

    def submit(self, config: Config) -> None:
        self.out.append(config)
        self.most_out = max(self.most_out, len(self.out))
        self.counts.append(len(self.out))

    def collect(self) -> tuple[Config, Result]:
        config = self.out.pop(self.rng.randrange(len(self.out)))
        return config, self.times[config]


def test_a_plain_callable_is_an_evaluation_and_the_budget_stops_the_search():
    space, times = _space(20)
    seen: list[Config] = []
    progress = Progress()
    reason = search(make_strategy("grid", space), Calls(lambda c: (seen.append(c), times[c])[1]),
                    StopRules(budget=7), progress, lambda c, r, improved: None)
    assert reason == "budget of 7 evaluations reached"
    assert len(seen) == 7 == progress.evaluated
    assert progress.best.median_us == min(times[c].median_us for c in seen)


@pytest.mark.parametrize("capacity", [1, 3, 8])
def test_results_in_any_order_are_each_recorded_once_and_the_budget_is_never_exceeded(capacity):
    space, times = _space(30)
    evaluations = OutOfOrder(times, capacity, seed=capacity)
    recorded: list[Config] = []
    reason = search(make_strategy("random", space, seed=1), evaluations, StopRules(budget=13), Progress(),
                    lambda c, r, improved: recorded.append(c))
    assert "budget" in reason
    assert len(recorded) == 13 == len(set(recorded))
    assert evaluations.most_out == min(capacity, 13)


def test_the_model_guided_search_is_asked_for_its_design_at_once_then_late():
    space, times = _space(600)
    evaluations = OutOfOrder(times, capacity=28, seed=2)
    strategy = make_strategy("model", space, seed=1)
    search(strategy, evaluations, StopRules(budget=40), Progress(), lambda c, r, improved: None)
    assert len(evaluations.counts) == 40
    # its start (the baseline and a space-filling design) needs no result: all out at once
    assert evaluations.counts[:strategy.initial] == list(range(1, strategy.initial + 1))
    # then at most its window: each proposal is made from every result but the last few
    assert max(evaluations.counts[strategy.initial:]) <= strategy.window < evaluations.capacity


def test_the_space_ends_the_search_after_every_configuration_out_is_collected():
    space, times = _space(10)
    recorded: list[Config] = []
    reason = search(make_strategy("grid", space), OutOfOrder(times, 4), StopRules(), Progress(),
                    lambda c, r, improved: recorded.append(c))
    assert reason == "space exhausted" and sorted(c.key for c in recorded) == sorted(c.key for c in space.configs)


def test_patience_counts_results_still_out_and_a_callback_can_stop_the_search():
    space, times = _space(40)
    progress = Progress()
    recorded: list[Config] = []
    search(make_strategy("grid", space), OutOfOrder(times, 6), StopRules(patience=5), progress,
           lambda c, r, improved: recorded.append(c))
    assert progress.since_improvement >= 5 and len(recorded) < 40
    stopped = search(make_strategy("grid", space), Calls(times.__getitem__), StopRules(), Progress(),
                     lambda c, r, improved: "enough" if c.as_dict()["X"] == 4 else None)
    assert stopped == "enough"


def test_an_interruption_ends_the_search_at_once():
    space, times = _space(10)
    calls = deque([None, None, "stopped"])
    progress = Progress()
    reason = search(make_strategy("grid", space), Calls(times.__getitem__), StopRules(), progress,
                    lambda c, r, improved: None, interrupted=lambda: calls.popleft() if calls else "stopped")
    assert reason == "stopped" and progress.evaluated == 2


def test_devices_listed_again_are_told_apart():
    spec = WorkerSpec("opencl", 0, "", "", {}, "p", {})
    assert _labels([spec]) == [""]
    assert _labels([spec, spec, spec]) == ["opencl:0", "opencl:0#2", "opencl:0#3"]


def test_a_run_over_two_workers_marks_each_result_with_its_device_and_times_the_winner_on_both(
        tmp_path, opencl_backend):
    """Two workers (both on the one CPU device here; on a GPU host, a GPU each): every result says
    which measured it, none is measured twice, and the winner is timed again on each."""
    t = load_template(templates.path("vector_add"))
    notes: list[str] = []
    opts = TuneOptions(backend="opencl", budget=8, devices=(0, 0), seed=2, probe=False,
                       session_path=tmp_path / "s.toml", timing=TimingPolicy(min_repeats=3, max_repeats=3))
    out = TuneRun(t, opts, [lambda ev: notes.append(ev.text) if isinstance(ev, Note) else None]).run()
    assert len(out.results) == 8 and len({r.config.items().__repr__() for r in out.results}) == 8
    assert {r.device for r in out.results} <= {"opencl:0", "opencl:0#2"}
    assert out.winner_ok
    assert any(n.startswith("evaluating on 2 devices at once") for n in notes)
    assert any(n.startswith("the winner on every device: opencl:0 ") and "opencl:0#2" in n for n in notes)
    session = load_session(tmp_path / "s.toml")
    assert [r.device for r in session.results()] == [r.device for r in out.results]


def test_a_device_that_does_not_exist_is_one_line(tmp_path, opencl_backend):
    from kerntune.tui.cli import main

    assert main(["tune", "vector_add", "--backend", "opencl", "--devices", "0,7", "--headless",
                 "--session", str(tmp_path / "s.toml")]) != 0
    assert not Path(tmp_path / "s.toml").exists()
