"""The engine's events: everything a run does, as a stream of small frozen records.

The session file is the list of these events after a header; the dashboard and the text mode
render them and do not know whether they come live or from a file.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Callable, ClassVar, Mapping

from .result import Result, is_table


@dataclass(frozen=True)
class Event:
    """Base of all events; `t` is seconds since the run started."""

    kind: ClassVar[str] = ""
    t: float


@dataclass(frozen=True)
class RunStarted(Event):
    kind: ClassVar[str] = "run_started"
    template: str
    problem: Mapping[str, int]
    problem_name: str
    backend: str
    device: str
    strategy: str
    budget: int = 0
    time_limit: float = 0.0
    seed: int = 0
    resumed: int = 0  # results carried over from an earlier run of this session


@dataclass(frozen=True)
class SpaceBuilt(Event):
    kind: ClassVar[str] = "space_built"
    total: int
    feasible: int
    pruned: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Note(Event):
    """A line of plan or commentary, from the engine or an agent."""

    kind: ClassVar[str] = "note"
    text: str
    source: str = "engine"


@dataclass(frozen=True)
class ConfigEvaluated(Event):
    """One configuration's result. With `replaces`, it takes the place of the result recorded
    earlier for the same index and configuration: a result demoted by a later check (a winner
    that failed its re-check on new inputs), not a new measurement."""

    kind: ClassVar[str] = "config_evaluated"
    index: int
    result: Result
    replaces: bool = False


@dataclass(frozen=True)
class BestImproved(Event):
    kind: ClassVar[str] = "best_improved"
    index: int
    config: Mapping[str, Any]
    median_us: float
    sol_fraction: float = 0.0
    speedup: float = 0.0  # over the template's default configuration


@dataclass(frozen=True)
class WinnerVerified(Event):
    """The winner checked again on inputs it has never seen."""

    kind: ClassVar[str] = "winner_verified"
    config: Mapping[str, Any]
    ok: bool
    message: str = ""
    seeds: tuple[int, ...] = ()


@dataclass(frozen=True)
class ConfigSanitized(Event):
    """A compute-sanitizer tool's verdict on a configuration (CUDA; the message names the tool:
    memcheck, racecheck or synccheck); a finding demotes it."""

    kind: ClassVar[str] = "config_sanitized"
    config: Mapping[str, Any]
    ok: bool
    message: str = ""


@dataclass(frozen=True)
class RunFinished(Event):
    kind: ClassVar[str] = "run_finished"
    reason: str
    evaluated: int
    verified: int
    best: Mapping[str, Any] = field(default_factory=dict)
    best_us: float = 0.0


@dataclass(frozen=True)
class LeadersRetimed(Event):
    """The leaders and the original timed together at the end of a run, interleaved round by
    round (engine/retime.py): per configuration its paired median time, its speedup over the
    original (the median of per-round ratios) with a 95% interval, and whether it is tied with
    the fastest; `chosen` is the one reported, `reason` why. Indices point into `configs`; -1
    where there is none."""

    kind: ClassVar[str] = "leaders_retimed"
    configs: tuple[Mapping[str, Any], ...] = ()
    median_us: tuple[float, ...] = ()
    speedup: tuple[float, ...] = ()
    low: tuple[float, ...] = ()
    high: tuple[float, ...] = ()
    tied: tuple[bool, ...] = ()
    same_program: tuple[float, ...] = ()  # a group number per configuration (0: none): same binary
    fastest: int = -1
    chosen: int = -1
    original: int = -1
    reason: str = ""
    rounds: int = 0
    quiet_rounds: int = 0
    launches: int = 0
    disturbances: str = ""  # what disturbed the rounds, "" when they were quiet

    @property
    def valid(self) -> bool:
        """Whether the lists agree and the indices point into them (a file may hold anything)."""
        n = len(self.configs)
        lists = (self.median_us, self.speedup, self.low, self.high, self.tied)
        return (n > 0 and all(len(x) == n for x in lists) and 0 <= self.chosen < n and 0 <= self.fastest < n
                and -1 <= self.original < n)

    def tied_with_chosen(self) -> list[Mapping[str, Any]]:
        """The configurations reported tied with the chosen one (the chosen one left out)."""
        if not self.valid or not self.tied[self.chosen]:
            return []
        return [c for i, c in enumerate(self.configs) if self.tied[i] and i != self.chosen]


# The agent loop's events (engine/loop.py): rounds of plan -> template -> tune -> test -> analyse.
# A loop session holds these around the tuning runs' own events, one RunStarted ... RunFinished
# per round.


@dataclass(frozen=True)
class LoopStarted(Event):
    """The agent loop begins: which provider plans, and the rules it stops by."""

    kind: ClassVar[str] = "loop_started"
    agent: str
    rounds: int
    sol_target: float = 0.0
    model: str = ""
    budget: int = 0  # evaluations per round; 0 = the tuner chooses


@dataclass(frozen=True)
class RoundStarted(Event):
    kind: ClassVar[str] = "round_started"
    round: int
    agent: str


@dataclass(frozen=True)
class PlanMade(Event):
    """The planner's plan for a round (its text also streams as `Note`s with source "planner")."""

    kind: ClassVar[str] = "plan_made"
    round: int
    agent: str
    text: str
    retemplate: bool = False
    stop: bool = False


@dataclass(frozen=True)
class TemplateProposed(Event):
    """A template the generator proposed, with its diff against the original kernel."""

    kind: ClassVar[str] = "template_proposed"
    round: int
    attempt: int
    agent: str
    backend: str
    parameters: tuple[str, ...] = ()
    default_config: Mapping[str, Any] = field(default_factory=dict)
    spec: str = ""
    source: str = ""
    diff: str = ""
    summary: str = ""


@dataclass(frozen=True)
class GateChecked(Event):
    """The gate's verdict on a proposed template; a rejected one goes back to the generator."""

    kind: ClassVar[str] = "gate_checked"
    round: int
    attempt: int
    ok: bool
    reason: str = ""
    checks: tuple[str, ...] = ()
    seeds: tuple[int, ...] = ()
    directory: str = ""  # where the template's files were written


@dataclass(frozen=True)
class SearchPlanned(Event):
    """The tuner's choice for a round: the value lists searched, the strategy and the budget."""

    kind: ClassVar[str] = "search_planned"
    round: int
    agent: str
    strategy: str
    budget: int = 0
    values: Mapping[str, Any] = field(default_factory=dict)
    reason: str = ""


@dataclass(frozen=True)
class Analysis(Event):
    """The tester's analysis of a round: its verified best against the original and SOL."""

    kind: ClassVar[str] = "analysis"
    round: int
    agent: str
    text: str
    best: Mapping[str, Any] = field(default_factory=dict)
    best_us: float = 0.0
    original_us: float = 0.0
    sol_fraction: float = 0.0
    verified: bool = False


@dataclass(frozen=True)
class AgentCall(Event):
    """One call to a model: tokens (cache reads and writes apart) and what it cost."""

    kind: ClassVar[str] = "agent_call"
    agent: str
    role: str
    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float = 0.0
    seconds: float = 0.0
    stop_reason: str = ""


@dataclass(frozen=True)
class LoopFinished(Event):
    """The loop's end: why, and its verified best against the original kernel."""

    kind: ClassVar[str] = "loop_finished"
    reason: str
    rounds: int
    best: Mapping[str, Any] = field(default_factory=dict)
    best_us: float = 0.0
    original_us: float = 0.0
    speedup: float = 0.0
    sol_fraction: float = 0.0
    template_dir: str = ""
    cost_usd: float = 0.0
    kept_original: bool = False  # nothing beat the original kernel: `best` is the original's


@dataclass(frozen=True)
class ConfigProfiled(Event):
    """Nsight Compute's reading of one configuration (engine/profile.py): the metrics, or why none.

    `measured_us` is the run's own timed median for the configuration and `bytes_moved` the cost
    model's bytes, so the profiler's DRAM figures can be read against them."""

    kind: ClassVar[str] = "config_profiled"
    config: Mapping[str, Any]
    ok: bool
    metrics: Mapping[str, Any] = field(default_factory=dict)
    message: str = ""
    rank: int = 0
    measured_us: float = 0.0
    bytes_moved: float = 0.0
    tool: str = ""


EVENT_TYPES: dict[str, type[Event]] = {
    cls.kind: cls
    for cls in (RunStarted, SpaceBuilt, Note, ConfigEvaluated, BestImproved, WinnerVerified, ConfigSanitized,
                LeadersRetimed, RunFinished,
                LoopStarted, RoundStarted, PlanMade, TemplateProposed, GateChecked, SearchPlanned,
                Analysis, AgentCall, LoopFinished, ConfigProfiled)
}


class EventFormatError(ValueError):
    """An event table that does not match its kind."""


def event_to_dict(ev: Event) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": ev.kind}
    for f in fields(ev):
        v = getattr(ev, f.name)
        if isinstance(v, Result):
            v = v.to_dict()
        elif isinstance(v, Mapping):
            v = dict(v)
        elif isinstance(v, tuple):
            v = list(v)
        out[f.name] = v
    return out


_NUMBER = (int, float)


def event_from_dict(d: Mapping[str, Any]) -> Event:
    """Rebuild an event, checking its kind and the types of its fields."""
    kind = d.get("kind")
    cls = EVENT_TYPES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise EventFormatError(f"unknown event kind {kind!r}")
    kw: dict[str, Any] = {}
    for name, required, coerce in _FIELDS[cls]:
        if name not in d:
            if required:
                raise EventFormatError(f"{kind} event lacks `{name}`")
            continue
        try:
            kw[name] = coerce(d[name])
        except (TypeError, ValueError) as e:
            raise EventFormatError(f"{kind} event field `{name}`: {e}") from None
    return cls(**kw)


def _as_result(v: Any) -> Result:
    if not is_table(v):
        raise TypeError("expected a table")
    return Result.from_dict(v)


def _as_table(v: Any) -> dict:
    if not is_table(v):
        raise TypeError("expected a table")
    return dict(v)


def _as_list(v: Any) -> tuple:
    if not isinstance(v, list):
        raise TypeError("expected a list")
    return tuple(v)


def _as_tables(v: Any) -> tuple:
    """A list of configurations: tables of numbers, flags and strings."""
    items = _as_list(v)
    for t in items:
        if not is_table(t) or not all(isinstance(x, (int, float, bool, str)) for x in t.values()):
            raise TypeError("expected a list of tables of values")
    return tuple(dict(t) for t in items)


def _as_numbers(v: Any) -> tuple:
    items = _as_list(v)
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in items):
        raise TypeError("expected a list of numbers")
    return items


def _as_flags(v: Any) -> tuple:
    items = _as_list(v)
    if not all(isinstance(x, bool) for x in items):
        raise TypeError("expected a list of true or false")
    return items


def _as_string(v: Any) -> str:
    if not isinstance(v, str):
        raise TypeError("expected a string")
    return v


def _as_flag(v: Any) -> bool:
    if not isinstance(v, bool):
        raise TypeError("expected true or false")
    return v


def _as_number(v: Any) -> Any:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError("expected a number")
    return v


def _coercion(expected: str) -> Callable[[Any], Any]:
    """How a field read from a file is checked, by its annotation's text."""
    if expected == "Result":
        return _as_result
    if expected.startswith("Mapping"):
        return _as_table
    if expected.startswith("tuple[Mapping"):
        return _as_tables
    if expected.startswith("tuple[float"):
        return _as_numbers
    if expected.startswith("tuple[bool"):
        return _as_flags
    if expected.startswith("tuple"):
        return _as_list
    if expected == "str":
        return _as_string
    if expected == "bool":
        return _as_flag
    if expected in ("int", "float"):
        return _as_number
    raise TypeError(f"no check for an event field of type {expected}")


# Each event class's fields, worked out once: (name, required, its check).
_FIELDS: dict[type[Event], tuple[tuple[str, bool, Callable[[Any], Any]], ...]] = {
    cls: tuple((f.name, f.default is MISSING and f.default_factory is MISSING,
                _coercion(f.type if isinstance(f.type, str) else getattr(f.type, "__name__", "")))
               for f in fields(cls))
    for cls in EVENT_TYPES.values()
}
