"""The one search loop: propose, measure, observe, keep the best, stop by the rules.

A live run (engine/tune.py) and a simulation on a recorded session (engine/simulate.py) drive
the same loop; what differs is where a configuration is measured. That is an `Evaluations`:
configurations go in with `submit`, results come out with `collect` in the order they finish,
and `capacity` says how many may be out at once. One worker with compilation ahead
(engine/workers.py), a worker per GPU, a Dask cluster (engine/cluster.py) and a recording
(`Calls`, a plain callable `Config -> Result`) all look the same to the strategy.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Callable, Protocol

from .result import Result
from .search import StopRules
from .space import Config


class Evaluations(Protocol):
    """Where configurations are measured."""

    capacity: int  # configurations that may be submitted and not yet collected
    # (optionally) devices measuring side by side: a strategy's lookahead is per device

    def submit(self, config: Config) -> None:
        """Start measuring a configuration."""

    def collect(self) -> tuple[Config, Result]:
        """The next configuration to finish, with its result (blocks until one does)."""


class Calls:
    """Evaluations by a plain callable, one at a time: a recording, a test's fake device."""

    capacity = 1

    def __init__(self, evaluate: Callable[[Config], Result]):
        self.evaluate = evaluate
        self._queue: deque[Config] = deque()

    def submit(self, config: Config) -> None:
        self._queue.append(config)

    def collect(self) -> tuple[Config, Result]:
        config = self._queue.popleft()
        return config, self.evaluate(config)


@dataclass
class Progress:
    """Where a search stands: what it has measured, its best, how long since it improved."""

    evaluated: int = 0
    best: Result | None = None
    since_improvement: int = 0
    in_flight: int = 0

    def record(self, result: Result) -> bool:
        """Count a result; whether it is the new best."""
        self.evaluated += 1
        self.since_improvement += 1
        if result.ranked and (self.best is None or result.median_us < self.best.median_us):
            self.best = result
            self.since_improvement = 0
            return True
        return False


def _limit(strategy, evaluations: Evaluations) -> int:
    """How many configurations may be out at once now: the evaluations' capacity, or fewer when
    the strategy's `lookahead` (None: no limit; per device, `devices` of the evaluations' own)
    asks for fewer."""
    ahead = getattr(strategy, "lookahead", None)
    if ahead is None:
        return evaluations.capacity
    return max(1, min(evaluations.capacity, int(ahead) * max(1, int(getattr(evaluations, "devices", 1)))))


def enough(rules: StopRules, evaluated: int, since_improvement: int) -> bool:
    """Whether results already coming would reach the budget or the patience."""
    return bool((rules.budget and evaluated >= rules.budget)
                or (rules.patience and since_improvement >= rules.patience))


def search(strategy, evaluations: Evaluations, rules: StopRules, progress: Progress,
           on_result: Callable[[Config, Result, bool], str | None],
           clock: Callable[[], float] = lambda: 0.0,
           interrupted: Callable[[], str | None] = lambda: None) -> str:
    """Run the strategy until a stop rule, the strategy's end, `interrupted` (a reason to stop
    now: a user's stop) or `on_result` (called with each result and whether it is the new best;
    a reason to stop, or None) ends it; the reason.

    Up to `evaluations.capacity` configurations are out at once (fewer while the strategy's
    `lookahead` says so: one that learns from each result asks to be asked late), never more than
    the budget or the patience could still use; once a rule says stop, those already out are still
    collected and recorded (an interruption drops them)."""
    while True:
        why = interrupted()
        if why:
            return why
        best = progress.best
        why = rules.reason(progress.evaluated, clock(), best.sol_fraction if best is not None else None,
                           progress.since_improvement)
        if why and not progress.in_flight:
            return why
        while not why and progress.in_flight < _limit(strategy, evaluations) and not enough(
                rules, progress.evaluated + progress.in_flight, progress.since_improvement + progress.in_flight):
            config = strategy.propose()
            if config is None:
                break
            evaluations.submit(config)
            progress.in_flight += 1
        if not progress.in_flight:
            return "space exhausted"
        config, result = evaluations.collect()
        progress.in_flight -= 1
        strategy.observe(config, result)
        improved = progress.record(result)
        why = on_result(config, result, improved)
        if why:
            return why
