"""What the dashboard knows: a session header and every event so far, folded into plain data.

Nothing here imports Textual. The model absorbs events at any rate (each costs a dictionary
update and a binary insertion), and the widgets read from it once per frame, so a burst of
ten thousand events costs one repaint, not ten thousand. Live runs and replays feed it alike.
"""

from __future__ import annotations

import bisect
import math
import operator
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from kerntune.engine.events import (
    AgentCall,
    ConfigEvaluated,
    ConfigProfiled,
    Event,
    GateChecked,
    LeadersRetimed,
    LoopFinished,
    RunFinished,
    RunStarted,
    SpaceBuilt,
    TemplateProposed,
    WinnerVerified,
)
from kerntune.engine.result import Result, config_key

from .columns import COLUMN, FILTER_NAMES, speedup_over
from .words import Words, describe, fmt_config, fmt_value, tie_marks

# Parts of the screen that an update can touch; widgets repaint only what is dirty.
PANELS = ("title", "device", "plan", "diff", "board", "progress")


@dataclass(frozen=True)
class HeaderRead:
    """The session header, handed over by a live run before its first event (engine/emitter.py)."""

    header: Mapping[str, Any]


@dataclass(frozen=True)
class LogLine(Words):
    """One line of the plan panel: an event's words (tui/words.py) at the event's time."""

    t: float = 0.0


@dataclass
class Entry:
    """A configuration's latest result and what the leaderboard needs to find it again."""

    key: str
    seq: int  # order of arrival: ties in median time keep it
    index: int
    result: Result
    text: str  # lower-case text that filters match against
    # the template it was measured with, in an agent loop's session (source, spec, backend of the
    # proposal the gate passed); None: the session's own template (the original row: its original)
    template: Mapping[str, Any] | None = None


@dataclass
class DeviceProgress:
    """What one device of a run over several has measured: the configurations whose latest result
    it gave, how many of them failed, its fastest, and its pace in the current run."""

    label: str  # as results name it: `cuda:1`, or `host:port/cuda:0` for a cluster's worker
    results: int = 0
    failed: int = 0
    run_measured: int = 0  # measured since the current run started, for the rate
    ranked: list[tuple[float, int, str]] = field(default_factory=list)  # (median, seq, key), fastest first

    @property
    def remote(self) -> bool:
        """A cluster's worker, on another host: no NVML reading of it here."""
        return "/" in self.label

    @property
    def nvml_index(self) -> int | None:
        """The index of a device of this host (`cuda:1`, `cuda:1#2` for one listed twice)."""
        m = _LOCAL_DEVICE.match(self.label)
        return int(m.group(1)) if m else None


# A device of this host as the workers name it: backend, index, and `#n` when listed again.
_LOCAL_DEVICE = re.compile(r"^[a-z]+:(\d+)(?:#\d+)?$")


@dataclass(frozen=True)
class BoardView:
    """How the leaderboard is asked to show the results."""

    show_failed: bool = False
    filter: str = ""
    sort: str = "rank"  # a column key: rank, param:NAME, median, spread, gbs, sol, speedup, occ, status
    reverse: bool = False


class FilterError(ValueError):
    """A filter term that compares something the leaderboard does not have."""


class _HeaderTable:
    """A table of the session header as a read-only attribute of the state: {} where the header
    has no such table (a live run's header may come late) or holds something else there."""

    def __init__(self, key: str):
        self.key = key

    def __get__(self, state: "DashboardState | None", owner: type | None = None) -> Any:
        return self if state is None else _table(state.header.get(self.key))

    def __set__(self, state: "DashboardState", value: Any) -> None:
        raise AttributeError(f"the header's {self.key} table is read from the header")


def contrast_of(state: "DashboardState", a: str, b: str) -> Any:
    """Rows `a` and `b` compared (engine/contrast.py), with their profiles and the paired re-timing."""
    from kerntune.engine.contrast import contrast

    ra, rb = state.entries[a].result, state.entries[b].result
    metrics = []
    for r in (ra, rb):
        ev = state.profiles.get(config_key(r.config))
        metrics.append(ev.metrics if ev is not None and ev.ok else None)
    return contrast(ra, rb, metrics[0], metrics[1], state.leaders)


class DashboardState:
    """The session header and the events applied so far, with the figures the panels show."""

    def __init__(self, header: Mapping[str, Any] | None = None):
        self.header: dict[str, Any] = {}
        self.parameters: list[str] = []
        self.default_key: str | None = None
        self.default_config: dict[str, Any] = {}
        self.cost_usd = 0.0  # spent on model calls in an agent loop
        self.entries: dict[str, Entry] = {}
        self._proposals: dict[tuple[int, int], Mapping[str, Any]] = {}  # an agent loop's, by (round, attempt)
        self._measuring: Mapping[str, Any] | None = None  # the proposal the gate passed last
        self._ranked: list[tuple[float, int, str]] = []  # (median, seq, key), fastest first
        self.suspect: list[str] = []
        self.failed: list[str] = []
        self.failed_by_status: Counter[str] = Counter()
        self.log: list[LogLine] = []
        self.best_history: list[float] = []  # the best median after each evaluation
        self.runs: list[RunStarted] = []
        self.feasible = 0
        self.total = 0
        self.pruned: dict[str, int] = {}
        self.run_evaluated = 0  # evaluations since the last RunStarted, for the rate
        self.last_t = 0.0
        self.events = 0
        self.finished: RunFinished | None = None
        self.winner: WinnerVerified | None = None
        self.leaders: LeadersRetimed | None = None  # the paired re-timing's verdict, once there is one
        self.marks: dict[str, str] = {}  # config key -> "*" (reported) or "=" (tied with it)
        self.profiles: dict[str, ConfigProfiled] = {}  # Nsight Compute readings, by config key
        self.energy = False  # a result has its energy per launch: the board shows the energy column
        self.devices: dict[str, DeviceProgress] = {}  # by label, in runs over several devices
        self.error: str | None = None
        self._seq = 0
        self._param_widths: dict[str, int] = {}
        self.dirty: set[str] = set(PANELS)
        if header is not None:
            self.set_header(header)

    # header ------------------------------------------------------------------------------------
    template = _HeaderTable("template")
    device = _HeaderTable("device")
    space = _HeaderTable("space")
    tuning = _HeaderTable("tuning")
    session_info = _HeaderTable("session")

    def set_header(self, header: Mapping[str, Any]) -> None:
        """Take the session's header: template, device, space; it may come late in a live run."""
        self.header = {k: v for k, v in header.items()}
        names = self.template.get("parameters")
        if isinstance(names, list) and all(isinstance(n, str) for n in names):
            self._set_parameters(names)
        default = self.template.get("default_config")
        if isinstance(default, Mapping):
            self.default_key = config_key(default)
            self.default_config = dict(default)
            if not self.parameters:
                self._set_parameters([str(k) for k in default])
        space = self.space
        self.feasible = _int(space.get("feasible"), self.feasible)
        self.total = _int(space.get("total"), self.total)
        if isinstance(space.get("pruned"), Mapping):
            self.pruned = {str(k): _int(v, 0) for k, v in space["pruned"].items()}
        self.dirty.update(PANELS)

    def _set_parameters(self, names: list[str]) -> None:
        self.parameters = list(names)
        for n in names:
            self._param_widths.setdefault(n, 0)

    # events ------------------------------------------------------------------------------------
    def apply_all(self, items: Iterable[Event | HeaderRead]) -> None:
        for item in items:
            self.apply(item)

    def apply(self, item: Event | HeaderRead) -> None:
        """Fold one event (or the session header) into the state."""
        if isinstance(item, HeaderRead):
            self.set_header(item.header)
            return
        self.events += 1
        self.last_t = max(self.last_t, float(item.t))
        if isinstance(item, ConfigEvaluated):
            self._evaluated(item)
        elif isinstance(item, RunStarted):
            self.runs.append(item)
            self.run_evaluated = 0
            for d in self.devices.values():
                d.run_measured = 0
            self.finished = None
            self.dirty.update(("title", "progress", "device"))
        elif isinstance(item, SpaceBuilt):
            self.feasible, self.total, self.pruned = item.feasible, item.total, dict(item.pruned)
            self.dirty.add("progress")
        elif isinstance(item, WinnerVerified):
            self.winner = item
            self.dirty.update(("board", "progress"))
        elif isinstance(item, LeadersRetimed):
            self.leaders, self.marks = item, tie_marks(item)
            self.dirty.update(("board", "progress"))
        elif isinstance(item, RunFinished):
            self.finished = item
            self.dirty.update(("title", "progress"))
        elif isinstance(item, LoopFinished):
            self.dirty.update(("title", "progress"))
        elif isinstance(item, TemplateProposed):
            # the diff panel shows the newest proposal against the original kernel
            template = dict(self.template)
            original = template.get("original_source", template.get("source", ""))
            template.update(source=item.source, original_source=original, backend=item.backend)
            self.header = {**self.header, "template": template}
            self._proposals[(item.round, item.attempt)] = {
                "name": template.get("name", ""), "entry": template.get("entry", ""), "source": item.source,
                "spec": item.spec, "backend": item.backend, "original_source": original}
            self.dirty.add("diff")
        elif isinstance(item, GateChecked):
            if item.ok and (item.round, item.attempt) in self._proposals:
                self._measuring = self._proposals[(item.round, item.attempt)]
        elif isinstance(item, AgentCall):
            self.cost_usd += item.cost_usd
        elif isinstance(item, ConfigProfiled):
            self.profiles[config_key(item.config)] = item
            self.dirty.add("board")
        words = describe(item)
        if words is not None:
            self._log(item.t, words)

    def _log(self, t: float, words: Words) -> None:
        self.log.append(LogLine(words.source, words.text, words.kind, float(t)))
        self.dirty.add("plan")

    def warn(self, message: str) -> None:
        """A line of the dashboard's own (a session that loaded with a warning)."""
        self._log(self.last_t, Words("kerntune", message, "warn"))

    def fail(self, message: str) -> None:
        """Record that the run itself failed (not one configuration: the whole run)."""
        self.error = message
        self._log(self.last_t, Words("kerntune", message, "error"))
        self.dirty.update(("title", "progress"))

    def _evaluated(self, ev: ConfigEvaluated) -> None:
        r = ev.result
        key = config_key(r.config)
        old = self.entries.get(key)
        if old is not None:  # the same configuration again (a resumed run's retry): the newer one counts
            self._forget(old)
        self._seq += 1
        text = " ".join((fmt_config(r.config), r.status, r.message, r.device)).lower()
        measured_with = old.template if ev.replaces and old is not None else \
            (self._measuring if r.config else None)
        entry = Entry(key, self._seq, ev.index, r, text, measured_with)
        self.entries[key] = entry
        if r.energy_j is not None and not self.energy:
            self.energy = True
            self.dirty.add("board")
        if r.ranked:
            bisect.insort(self._ranked, (float(r.median_us), entry.seq, key))
        elif r.status == "suspect":
            self.suspect.append(key)
        else:
            self.failed.append(key)
            self.failed_by_status[r.status] += 1
        if r.device:
            self._on_device(entry, not ev.replaces)
        for name, value in r.config.items():
            width = len(fmt_value(value))
            if width > self._param_widths.get(name, -1):
                self._param_widths[name] = width
                if name not in self.parameters:
                    self.parameters.append(name)
        if not ev.replaces:  # a demotion by a later check is not a new measurement
            self.run_evaluated += 1
        best = self.best
        if best is not None:
            self.best_history.append(float(best.median_us))
        self.dirty.update(("board", "progress"))

    def _on_device(self, entry: Entry, measured: bool) -> None:
        r = entry.result
        d = self.devices.get(r.device)
        if d is None:
            d = self.devices[r.device] = DeviceProgress(r.device)
        d.results += 1
        if r.ranked:
            bisect.insort(d.ranked, (float(r.median_us), entry.seq, entry.key))
        elif not r.verified:
            d.failed += 1
        if measured:  # a demotion by a later check is not a new measurement
            d.run_measured += 1
        self.dirty.add("device")

    def _forget(self, entry: Entry) -> None:
        r = entry.result
        d = self.devices.get(r.device) if r.device else None
        if d is not None:
            d.results -= 1
            if r.ranked:
                _remove(d.ranked, (float(r.median_us), entry.seq, entry.key))
            elif not r.verified:
                d.failed -= 1
        if r.ranked:
            _remove(self._ranked, (float(r.median_us), entry.seq, entry.key))
        elif r.status == "suspect":
            self.suspect.remove(entry.key)
        else:
            self.failed.remove(entry.key)
            self.failed_by_status[r.status] -= 1
            if not self.failed_by_status[r.status]:
                del self.failed_by_status[r.status]

    # figures -----------------------------------------------------------------------------------
    @property
    def several_devices(self) -> bool:
        """Whether the results come from more than one device (the device column, the table of devices)."""
        return len(self.devices) > 1

    def device_list(self) -> list[DeviceProgress]:
        """The devices that have measured, in their natural order (cuda:2 before cuda:10)."""
        return sorted(self.devices.values(), key=lambda d: _natural(d.label))

    def device_best(self, d: DeviceProgress) -> Result | None:
        """The fastest verified configuration a device measured."""
        return self.entries[d.ranked[0][2]].result if d.ranked else None

    def device_rate(self, d: DeviceProgress) -> float | None:
        """A device's configurations per second in the current run, by the events' timestamps."""
        elapsed = self.elapsed()
        return d.run_measured / elapsed if d.run_measured and elapsed > 0 else None

    @property
    def evaluated(self) -> int:
        return len(self.entries)

    @property
    def ranked_count(self) -> int:
        return len(self._ranked)

    @property
    def failed_count(self) -> int:
        return len(self.failed)

    @property
    def best(self) -> Result | None:
        """The fastest verified configuration (suspect ones are never ranked)."""
        return self.entries[self._ranked[0][2]].result if self._ranked else None

    @property
    def default_result(self) -> Result | None:
        """The template's default configuration, once it has been evaluated."""
        # a template with no parameters has the empty key: the original kernel is its default configuration
        e = self.entries.get(self.default_key) if self.default_key is not None else None
        return e.result if e is not None else None

    @property
    def default_us(self) -> float | None:
        b = self.default_result
        return float(b.median_us) if b is not None and b.ranked else None

    def speedup(self, r: Result) -> float | None:
        return speedup_over(self.default_us, r)

    def template_of(self, key: str) -> Mapping[str, Any]:
        """The template a configuration was measured with, as the session header names a template
        (name, entry, backend, spec, source, original_source): in an agent loop's session the
        proposal the gate passed before it; else the session's own."""
        e = self.entries.get(key)
        own = self.header.get("template") if isinstance(self.header.get("template"), Mapping) else {}
        if e is None or e.template is None:
            return {**own, "source": self._first_source(own)}
        return {**own, **e.template}

    def _first_source(self, own: Mapping[str, Any]) -> Any:
        """The session's own template source (a loop's proposals replace it in the header for the
        diff panel; the first proposal kept it as the original)."""
        first = next(iter(self._proposals.values()), None)
        return first["original_source"] if first is not None else own.get("source")

    def ranked_key(self, rank: int) -> str | None:
        """The configuration ranked `rank` (1: the fastest verified), or None past the last."""
        return self._ranked[rank - 1][2] if 1 <= rank <= len(self._ranked) else None

    def rank(self, key: str) -> int | None:
        """1 for the fastest verified configuration; None for suspect and failed ones."""
        e = self.entries.get(key)
        if e is None or not e.result.ranked:
            return None
        return bisect.bisect_left(self._ranked, (float(e.result.median_us), e.seq, key)) + 1

    @property
    def started(self) -> RunStarted | None:
        return self.runs[-1] if self.runs else None

    @property
    def running(self) -> bool:
        return bool(self.runs) and self.finished is None and self.error is None

    def elapsed(self) -> float:
        """Session seconds since the current run started (event time, not the wall clock)."""
        return max(0.0, self.last_t - self.runs[-1].t) if self.runs else 0.0

    def rate(self) -> float | None:
        """Configurations per second in the current run, by the events' own timestamps."""
        elapsed = self.elapsed()
        if self.run_evaluated == 0 or elapsed <= 0:
            return None
        return self.run_evaluated / elapsed

    def target(self) -> int:
        """How many evaluations the run will make at most: the feasible space, or the budget."""
        budget = self.started.budget if self.started else _int(self.tuning.get("budget"), 0)
        return min(self.feasible, budget) if budget and self.feasible else (budget or self.feasible)

    def time_left(self) -> float | None:
        """Seconds until the space or the budget is used up at the current rate, or the time limit."""
        if not self.running:
            return None
        rate = self.rate()
        left = None
        remaining = max(0, self.target() - self.evaluated)
        if rate:
            left = remaining / rate
        limit = self.started.time_limit if self.started else 0.0
        if limit:
            by_limit = max(0.0, limit - self.elapsed())
            left = by_limit if left is None else min(left, by_limit)
        return left

    def param_width(self, name: str) -> int:
        return max(len(name), self._param_widths.get(name, 0))

    # leaderboard -------------------------------------------------------------------------------
    def board(self, view: BoardView) -> tuple[list[str], int]:
        """The keys the leaderboard shows, in order, and how many results matched the filter."""
        match = compile_filter(view.filter, self) if view.filter.strip() else None
        if match is None:
            ranked = [k for _, _, k in self._ranked]
            matched = len(self.entries) if view.show_failed else len(self._ranked) + len(self.suspect)
            suspect = list(self.suspect)
            failed = list(self.failed) if view.show_failed else []
        else:
            ranked = [k for _, _, k in self._ranked if match(self.entries[k])]
            suspect = [k for k in self.suspect if match(self.entries[k])]
            failed = [k for k in self.failed if match(self.entries[k])] if view.show_failed else []
            matched = len(ranked) + len(suspect) + len(failed)
        keys = ranked + suspect + failed
        if view.sort != "rank":
            value = self.column_value
            known = [k for k in keys if value(view.sort, k) is not None]
            unknown = [k for k in keys if value(view.sort, k) is None]
            known.sort(key=lambda k: value(view.sort, k), reverse=view.reverse)
            keys = known + unknown
        elif view.reverse:
            keys = ranked[::-1] + suspect + failed
        return keys, matched

    def differs(self, config: Mapping[str, Any]) -> list[tuple[str, Any]]:
        """The parameters of `config` whose value is not the default configuration's, in order."""
        default = self.default_config
        return [(name, config[name]) for name in self.parameters
                if name in config and (name not in default or fmt_value(default[name]) != fmt_value(config[name]))]

    def column_value(self, column: str, key: str) -> Any:
        """The raw value a column sorts by (None when the result has none)."""
        e = self.entries[key]
        r = e.result
        if column == "rank":
            return self.rank(key)
        if column.startswith("param:"):
            v = r.config.get(column[6:])
            return _sortable(v)
        return COLUMN[column].value(r, self.default_us)  # KeyError for a column there is not


def _remove(ranked: list[tuple[float, int, str]], item: tuple[float, int, str]) -> None:
    i = bisect.bisect_left(ranked, item)
    if i < len(ranked) and ranked[i][2] == item[2]:
        del ranked[i]


def _natural(label: str) -> list[Any]:
    """A label's sort key with its numbers as numbers: cuda:2 before cuda:10."""
    return [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"(\d+)", label)]


def _table(v: Any) -> Mapping[str, Any]:
    return v if isinstance(v, Mapping) else {}


def _int(v: Any, default: int) -> int:
    ok = isinstance(v, int) or (isinstance(v, float) and math.isfinite(v))
    return int(v) if ok and not isinstance(v, bool) else default


def _sortable(v: Any) -> Any:
    # Mixed value types in one parameter would not compare; numbers first, then text.
    if isinstance(v, bool):
        return (0, int(v), "")
    if isinstance(v, (int, float)):
        return (0, v, "")
    return None if v is None else (1, 0, str(v))


# Filter terms: NAME<op>VALUE compares a parameter or a column; anything else matches text.
_COMPARISON = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(<=|>=|!=|==|=|<|>)(.+)$")
_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "<=": operator.le, ">=": operator.ge, "!=": operator.ne, "==": operator.eq, "=": operator.eq,
    "<": operator.lt, ">": operator.gt,
}


def compile_filter(text: str, state: DashboardState) -> Callable[[Entry], bool]:
    """A predicate for a filter line: every term must hold. Terms are parsed, never evaluated.

    `BLOCK=256`, `VEC>=4`, `sol>50`, `status=wrong_result` compare; any other word matches
    the configuration's text, status or message, ignoring case.
    """
    tests: list[Callable[[Entry], bool]] = []
    for term in text.split():
        m = _COMPARISON.match(term)
        if m is None:
            word = term.lower()
            tests.append(lambda e, w=word: w in e.text)
            continue
        name, op, raw = m.group(1), _OPS[m.group(2)], m.group(3)
        param = next((p for p in state.parameters if p.lower() == name.lower()), None)
        if param is not None:
            tests.append(_param_test(param, op, raw))
        elif name.lower() in FILTER_NAMES:
            tests.append(_column_test(state, FILTER_NAMES[name.lower()], op, raw))
        else:
            known = ", ".join(state.parameters + sorted(set(FILTER_NAMES.values())))
            raise FilterError(f"unknown name {name!r} in the filter (known: {known})")
    return lambda e: all(t(e) for t in tests)


def _number(raw: str) -> float | None:
    try:
        v = float(raw.rstrip("%x"))
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def _param_test(param: str, op: Callable[[Any, Any], bool], raw: str) -> Callable[[Entry], bool]:
    want = _number(raw)

    def test(e: Entry) -> bool:
        v = e.result.config.get(param)
        if want is not None and isinstance(v, (int, float)):
            return op(float(v), want)
        if op in (operator.eq, operator.ne):
            return op(fmt_value(v).lower(), raw.lower())
        return False

    return test


def _column_test(state: DashboardState, column: str, op: Callable[[Any, Any], bool],
                 raw: str) -> Callable[[Entry], bool]:
    if not COLUMN[column].numeric:  # status=wrong_result, device=cuda:1
        if op not in (operator.eq, operator.ne):
            return lambda e: False
        want = raw.lower()
        return lambda e: op(str(state.column_value(column, e.key) or "").lower(), want)
    want = _number(raw)
    if want is None:
        raise FilterError(f"{column}: expected a number, got {raw!r}")
    # columns that show percentages compare against percentages: `sol>50` is more than 50 % of SOL
    scale = 100.0 if COLUMN[column].percent else 1.0

    def test(e: Entry) -> bool:
        v = state.column_value(column, e.key)
        return v is not None and op(float(v) * scale, want)

    return test
