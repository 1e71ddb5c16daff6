"""Run a search strategy against the results recorded in a session instead of a device.

A full-grid session holds every feasible configuration's result, so any strategy can be replayed
against it, as Kernel Tuner replays its cache files: how close did it get to the recorded best,
and after how many evaluations.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .driver import Calls, Progress, search
from .result import Result
from .search import StopRules, make_strategy
from .session import Session, collector_paused
from .space import Config, Space
from .template import Problem


class SimulationError(ValueError):
    """A session that cannot be simulated (no results, no verified result)."""


@dataclass(frozen=True)
class Simulation:
    strategy: str
    seed: int
    budget: int
    evaluations: int
    best: Result | None
    recorded_best: Result
    space_size: int
    trace: tuple[float, ...] = ()  # best-so-far median after each evaluation (inf before any)
    within: dict = field(default_factory=dict)  # fraction -> evaluations needed, or None
    reason: str = ""

    @property
    def ratio(self) -> float:
        """Best found / recorded best (1.0 = found it)."""
        if self.best is None:
            return float("inf")
        return self.best.median_us / self.recorded_best.median_us

    def to_dict(self) -> dict:
        return {
            "strategy": self.strategy, "seed": self.seed, "budget": self.budget,
            "evaluations": self.evaluations, "space_size": self.space_size, "reason": self.reason,
            "best": None if self.best is None else {"config": dict(self.best.config), "median_us": self.best.median_us},
            "recorded_best": {"config": dict(self.recorded_best.config), "median_us": self.recorded_best.median_us},
            "ratio": self.ratio,
            "within": {f"{k:g}": v for k, v in self.within.items()},
        }


def recorded_space(session: Session) -> tuple[Space, dict[Config, Result]]:
    """The configurations a session evaluated, in order, and their first results. Keyed by the
    configuration itself (a tuple's hash), not its text: the replay looks one up per step."""
    results = session.results()
    if not results:
        raise SimulationError(f"{session.path}: the session holds no results")
    recorded: dict[Config, Result] = {}
    for r in results:
        recorded.setdefault(Config.of(r.config), r)
    problem = Problem(str(session.space.get("problem_name", "")), dict(session.space.get("problem", {})))
    return Space(session.template.get("name", ""), problem, tuple(recorded), len(recorded)), recorded


def _after_the_best(rules: StopRules, best: Result, trace: list[float], since: int, size: int) -> str | None:
    """The rest of a run that has found the recorded best, without asking the strategy: nothing
    can beat that best, and every strategy proposes each configuration once until the space is
    exhausted, so only the stop rules decide when it ends. Extends `trace`; the rule's reason, or
    None for an exhausted space."""
    while len(trace) < size:
        why = rules.reason(len(trace), 0.0, best.sol_fraction, since)
        if why:
            return why
        since += 1
        trace.append(best.median_us)
    return None


def simulate(session: Session, strategy: str, budget: int = 0, seed: int = 0,
             within: tuple[float, ...] = (0.03,), stop: StopRules | None = None,
             stop_within: float | None = None) -> Simulation:
    """Replay `strategy` on the session's recorded results; with `stop_within`, stop as soon as
    the best is within that fraction of the recorded best."""
    with collector_paused():  # (a replay builds no reference cycles, and its objects are short-lived)
        return _simulate(session, strategy, budget, seed, within, stop, stop_within)


def _simulate(session: Session, strategy: str, budget: int, seed: int, within: tuple[float, ...],
              stop: StopRules | None, stop_within: float | None) -> Simulation:
    space, by_config = recorded_space(session)
    recorded = session.best()
    if recorded is None:
        raise SimulationError(f"{session.path}: the session has no verified result to compare with")
    default = session.template.get("default_config")
    first = Config.of(default) if isinstance(default, dict) and Config.of(default) in by_config else None
    strat = make_strategy(strategy, space, seed=seed, first=first)
    rules = stop or StopRules(budget=budget)
    progress = Progress()
    trace: list[float] = []
    needed: dict[float, int | None] = {w: None for w in within}

    def on_result(config: Config, r: Result, improved: bool) -> str | None:
        best = progress.best
        trace.append(best.median_us if best else float("inf"))
        for w in within:
            if needed[w] is None and best is not None and best.median_us <= recorded.median_us * (1 + w):
                needed[w] = len(trace)
        if stop_within is not None and best is not None and best.median_us <= recorded.median_us * (1 + stop_within):
            return f"within {100 * stop_within:g}% of the recorded best"
        if best is not None and best.median_us <= recorded.median_us:
            return _after_the_best(rules, best, trace, progress.since_improvement, space.feasible) or "space exhausted"
        return None

    reason = search(strat, Calls(by_config.__getitem__), rules, progress, on_result)
    best = progress.best
    return Simulation(strategy, seed, budget, len(trace), best, recorded, space.feasible, tuple(trace),
                      needed, reason)
