"""The agent interface: what a provider (agents/) is given and what it answers, and nothing else.

A provider plays the four roles of the loop (planner, generator, tuner, tester): it is handed a
`LoopState`, a snapshot of the loop, and answers with a `Plan`, a `TemplateProposal`
(engine/proposal.py), a `SearchPlan` or a `Report`. Providers import this module, never the loop
driver (engine/loop.py), which imports it too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol

from .device import DeviceLimits
from .events import Event
from .gate import GateVerdict
from .proposal import TemplateProposal
from .result import Result, config_key
from .template import ParamValue, Problem, Template


class ProviderError(RuntimeError):
    """A provider that cannot go on (its API unreachable after its retries, a broken exchange)."""


@dataclass(frozen=True)
class Plan:
    """The planner's plan for a round; `retemplate` asks the generator for a new template."""

    text: str
    retemplate: bool = False
    stop: bool = False


@dataclass(frozen=True)
class SearchPlan:
    """The tuner's choice: value lists to search (the default is always kept), strategy, budget."""

    strategy: str = "grid"
    budget: int = 0
    values: Mapping[str, tuple[ParamValue, ...]] = field(default_factory=dict)
    reason: str = ""


@dataclass(frozen=True)
class Report:
    """The tester's analysis of a round; `stop` when it sees nothing more to gain."""

    text: str
    stop: bool = False


@dataclass(frozen=True)
class RoundRecord:
    """What one round did and found. `best` is set only when the winner passed its re-check."""

    round: int
    agent: str
    plan: str
    template_dir: Path | None
    search: SearchPlan | None
    results: tuple[Result, ...] = ()
    best: Result | None = None
    winner_ok: bool | None = None
    reason: str = ""
    error: str = ""
    profiles: tuple = ()  # ConfigProfiled events of the round's leading configurations


@dataclass(frozen=True)
class LoopState:
    """What a provider sees when it acts: a snapshot of the loop, and two ways to speak.

    `say(text, role)` streams a line into the plan (a Note with the role as its source);
    `record(event)` adds an event of the provider's own (an AgentCall) to the session, stamped
    with `now()`, the session's clock."""

    round: int
    rounds: int
    backend: str
    limits: DeviceLimits
    problem: Problem
    original: Template
    original_result: Result | None
    template: Template | None
    template_dir: Path | None
    history: tuple[RoundRecord, ...]
    best: Result | None
    best_round: int
    sol_us: float | None
    sol_target: float
    budget: int
    last_verdict: GateVerdict | None
    say: Callable[[str, str], None]
    record: Callable[[Event], None]
    now: Callable[[], float]

    @property
    def original_us(self) -> float | None:
        r = self.original_result
        return r.median_us if r is not None and r.verified else None

    @property
    def profiles(self) -> list:
        """Every successful profile of the loop so far, newest last."""
        return [p for rec in self.history for p in rec.profiles if p.ok]

    @property
    def best_profile(self) -> Any:
        """The newest profile of the best configuration so far, or None."""
        if self.best is None:
            return None
        key = config_key(self.best.config)
        found = [p for p in self.profiles if config_key(p.config) == key]
        return found[-1] if found else None


class Provider(Protocol):
    """The four roles of the seed paper, as one agent provider."""

    name: str
    model: str

    def plan(self, state: LoopState) -> Plan:
        """Planner: what to try this round, from the results and the speed-of-light headroom."""

    def generate(self, state: LoopState, rejection: str | None) -> TemplateProposal:
        """Generator: a template of the original kernel; `rejection` is why the last one failed."""

    def tune(self, state: LoopState) -> SearchPlan:
        """Tuner: the space, strategy and budget for `state.template`."""

    def test(self, state: LoopState, record: RoundRecord) -> Report:
        """Tester: a short analysis of the round's verified results."""
