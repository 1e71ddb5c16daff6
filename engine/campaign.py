"""Campaigns: many (template, problem size) pairs, one session each, and per template one
general configuration chosen across its sizes.

Every pair is a `Job` of plain data (file paths, names, sizes): `run_job` loads the template
itself and runs one tuning run into the pair's own session, so that a job can later be handed to
another process, another device or a cluster's worker unchanged. `Campaign.run` hands the jobs
out one after another in this process. A campaign's folder is its state: a rerun skips the pairs
whose session finished and resumes the ones that were cut.

The general configuration of a template: each size's fastest configurations (its leaders) are
measured at every other size, into that size's session, and the one with the best geometric mean
of speedups over the original is chosen among those at least as fast as the original at every
size (the original itself always is). A served-size run of `kerntune tune` (a spec's `serves`) is
a campaign of one template.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import tomli_w

from .backends import BackendError
from .dispatch import TOLERANCE, DispatchSet, choose_dispatch, geomean
from .result import Result, config_key, config_label, ranked
from .session import Session, SessionError, load_session, tool_version
from .space import build_space
from .summary import SUMMARY_FILE, SUMMARY_FORMAT, SUMMARY_VERSION, CampaignError, is_summary, load_summary  # noqa: F401
from .template import NAME_RE, Template, TemplateError, load_template, read_toml_file
from .tune import Sink, TuneError, TuneOptions, TuneRun, resolve_device
from .worker import WorkerError

# Leaders of each size measured at every other size when the general configuration is chosen.
DEFAULT_TOP = 3
# Reasons a run ends that leave it cut: a rerun resumes it.
CUT = ("interrupted", "stopped")
# Options a campaign file's [campaign] table may set for every pair (the command line's win).
FILE_OPTIONS = {"strategy": str, "budget": int, "time_limit": (int, float), "patience": int, "seed": int}


@dataclass(frozen=True)
class Job:
    """One (template, problem size) pair: plain, picklable data, so that it can run anywhere.

    `configs` makes it a measuring job: those configurations only, appended to the pair's
    existing session (a general configuration's candidates)."""

    spec: str  # the template's kernel.toml
    size: str  # the size's name in reports
    problem: str | None  # a [[problem]] name of the spec; None: its first
    overrides: Mapping[str, int]
    session: str
    start_from: tuple[Mapping[str, Any], ...] = ()
    configs: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True)
class PairResult:
    """What a pair's session holds after its job: its best, the original, every result."""

    template: str
    size: str
    problem: Mapping[str, int]
    session: str
    status: str  # tuned, resumed, skipped (finished before), measured, failed
    results: tuple[Result, ...] = ()
    best: Result | None = None
    original: Result | None = None
    default_key: str = ""
    error: str = ""

    def time_of(self, key: str) -> float | None:
        """The verified median of a configuration at this size, or None."""
        for r in self.results:
            if r.ranked and config_key(r.config) == key:
                return float(r.median_us)
        return None


@dataclass(frozen=True)
class SizeFigures:
    """One size of a general configuration's report."""

    size: str
    original_us: float | None
    best_us: float | None
    best_config: Mapping[str, Any]
    general_us: float | None


@dataclass(frozen=True)
class General:
    """A template's general configuration across its sizes, with the figures it was chosen on."""

    template: str
    config: Mapping[str, Any] | None  # None: no configuration was verified at every size
    geomean: float | None  # of its speedups over the original
    sizes: tuple[SizeFigures, ...]
    notes: tuple[str, ...] = ()


def run_job(job: Job, options: TuneOptions, sinks: Sequence[Sink] = ()) -> PairResult:
    """Run one pair: a fresh tuning run, the rest of a cut one, nothing for a finished one, or
    (with `job.configs`) the given configurations. A pair that cannot run is a failed result."""
    path = Path(job.session)
    name = Path(job.spec).parent.name
    try:
        template = load_template(job.spec)
        name = template.name
        template.problem(job.problem, job.overrides)  # a size the spec lacks fails here, in one line
        previous = load_session(path) if path.exists() and path.stat().st_size else None
        if job.configs:
            status = _measure(template, job, options, previous, sinks)
        elif previous is not None and _finished(previous):
            status = "skipped"
        else:
            opts = replace(options, problem=job.problem, overrides=dict(job.overrides), session_path=path,
                           resume=previous is not None, start_from=tuple(job.start_from))
            _stop_if_interrupted(TuneRun(template, opts, sinks).run())
            status = "resumed" if previous is not None else "tuned"
        return pair_result(load_session(path), job.size, status)
    except (TemplateError, SessionError, TuneError, BackendError, WorkerError, OSError) as e:
        return PairResult(name, job.size, dict(job.overrides), str(path), "failed", error=_one_line(e))


def _finished(session: Session) -> bool:
    done = session.finished()
    return done is not None and done.reason not in CUT and not done.reason.startswith("cut:")


def _measure(template: Template, job: Job, options: TuneOptions, previous: Session | None,
             sinks: Sequence[Sink]) -> str:
    """Measure `job.configs` that the pair's session lacks, appending to it; "measured" or "skipped"."""
    if previous is None:
        raise SessionError(f"{job.session}: no session to measure the candidates in")
    done = previous.evaluated_keys()
    todo = [dict(c) for c in job.configs if config_key(c) not in done]
    if todo:
        _, limits = resolve_device(options.backend, options.device)
        space = build_space(template, template.problem(job.problem, job.overrides), limits)
        feasible = {c.key for c in space.configs}
        todo = [c for c in todo if config_key(c) in feasible]
    if not todo:
        return "skipped"
    # exactly these: the strategy proposes them first and the budget ends the run after them
    opts = replace(options, problem=job.problem, overrides=dict(job.overrides), session_path=Path(job.session),
                   resume=True, start_from=tuple(todo), budget=len(previous.results()) + len(todo),
                   time_limit=0.0, patience=0, sol_target=0.0, profile_top=0)
    _stop_if_interrupted(TuneRun(template, opts, sinks).run())
    return "measured"


def _stop_if_interrupted(outcome: Any) -> None:
    """A run ended by Ctrl-C ends the campaign too (its session is resumed by the next rerun)."""
    if outcome.reason == "interrupted":
        raise KeyboardInterrupt


def pair_result(session: Session, size: str, status: str) -> PairResult:
    """A pair's figures from its session."""
    default = session.template.get("default_config")
    return PairResult(
        template=str(session.template.get("name", "")), size=size,
        problem=dict(session.space.get("problem", {})), session=str(session.path), status=status,
        results=tuple(session.results()), best=session.best(), original=session.default_result(),
        default_key=config_key(default) if isinstance(default, Mapping) else "")


def choose_general(pairs: Sequence[PairResult], top: int = DEFAULT_TOP) -> General:
    """The general configuration of one template's pairs (one per size), from what their
    sessions hold: the best geometric mean of speedups over the original among the leaders
    verified at every size and at least as fast as the original at each. Every size's best that
    is slower than the original at another size is named in `notes`, in plain words."""
    name = next((p.template for p in pairs if p.status != "failed"), pairs[0].template if pairs else "")
    live = [p for p in pairs if p.status != "failed"]
    notes = [f"{p.size}: not tuned ({p.error})" for p in pairs if p.status == "failed"]
    configs = dict(_candidates(live, top))
    times = {key: [p.time_of(key) for p in live] for key in configs}
    originals = [p.original.median_us if p.original is not None and p.original.ranked else None for p in live]

    def speedups(key: str) -> list[float]:
        # over the original; over the size's best where the original was not verified
        out = []
        for p, t, o in zip(live, times[key], originals):
            ref = o or (p.best.median_us if p.best is not None else None)
            out.append(ref / t if ref and t else 0.0)
        return out

    def slower(key: str) -> list[int]:
        return [i for i, (t, o) in enumerate(zip(times[key], originals)) if t and o and t > o]

    for p, o in zip(live, originals):
        if o is None:
            why = p.original.status if p.original is not None else "infeasible or not measured"
            notes.append(f"the original (the default configuration) has no time at {p.size} ({why}): "
                         "speedups there are over the size's best")
    for p in live:  # each size's best, at the other sizes
        if p.best is None:
            notes.append(f"{p.size}: no configuration was verified")
            continue
        key = config_key(p.best.config)
        missing = [q.size for q, t in zip(live, times[key]) if t is None]
        if missing:
            notes.append(f"the best at {p.size} ({config_label(p.best.config)}) was not verified at {', '.join(missing)} "
                         "(infeasible or failed there)")
        for i in slower(key):
            notes.append(f"the best at {p.size} ({config_label(p.best.config)}) is slower than the original at "
                         f"{live[i].size}: {_us(times[key][i])} against {_us(originals[i])} "
                         f"({originals[i] / times[key][i]:.2f}x)")
    everywhere = [k for k in configs if live and all(t is not None for t in times[k])]
    safe = [k for k in everywhere if not slower(k)]
    pool = safe or everywhere
    chosen = max(pool, key=lambda k: (geomean(speedups(k)), -sum(times[k]))) if pool else None
    if chosen is None and live:
        notes.append("no configuration was verified at every size: there is no general configuration")
    elif chosen is not None and not safe:
        for i in slower(chosen):
            notes.append(f"the general configuration is slower than the original at {live[i].size}: "
                         f"{_us(times[chosen][i])} against {_us(originals[i])}")
    sizes = tuple(SizeFigures(p.size, originals[i], p.best.median_us if p.best is not None else None,
                              dict(p.best.config) if p.best is not None else {},
                              times[chosen][i] if chosen is not None else None)
                  for i, p in enumerate(live))
    return General(name, dict(configs[chosen]) if chosen is not None else None,
                   geomean(speedups(chosen)) if chosen is not None else None, sizes, tuple(notes))


def dispatch_of(pairs: Sequence[PairResult], general: General, top: int = DEFAULT_TOP,
                tolerance: float = TOLERANCE) -> DispatchSet | None:
    """One template's dispatch set (engine/dispatch.py) from what its sizes' sessions hold: among
    each size's `top` fastest and the original, measured at every size."""
    live = [p for p in pairs if p.status != "failed"]
    if len(live) < 1:
        return None
    configs = dict(_candidates(live, top))
    times = {key: [p.time_of(key) for p in live] for key in configs}
    best = [min((float(r.median_us) for r in p.results if r.ranked), default=None) for p in live]
    originals = [float(p.original.median_us) if p.original is not None and p.original.ranked else None for p in live]
    general_key = config_key(general.config) if general.config is not None else None
    return choose_dispatch([p.size for p in live], configs, times, best, originals,
                           general_key if general_key in configs else None, tolerance)


def _candidates(pairs: Sequence[PairResult], top: int) -> list[tuple[str, Mapping[str, Any]]]:
    """Each size's `top` fastest verified configurations, its reported best (the paired verdict's
    choice, which may be a simpler one tied with the fastest) and the original (the default
    configuration)."""
    out: dict[str, Mapping[str, Any]] = {}
    for p in pairs:
        if p.original is not None:
            out.setdefault(config_key(p.original.config), p.original.config)
        if p.best is not None:
            out.setdefault(config_key(p.best.config), p.best.config)
        for r in ranked(p.results)[:top]:
            out.setdefault(config_key(r.config), r.config)
    return list(out.items())


def _us(v: float | None) -> str:
    """Microseconds as text output writes them: three significant digits, whole units kept."""
    if v is None:
        return "-"
    return f"{v:.0f} us" if v >= 100 else f"{v:.3g} us"


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())


# a campaign: its pairs, its folder, its runner --------------------------------------------------

@dataclass(frozen=True)
class Kernel:
    """One template of a campaign and the sizes it is tuned at: (size name, problem, overrides)."""

    spec: Path
    name: str
    sizes: tuple[tuple[str, str | None, Mapping[str, int]], ...]


@dataclass
class Campaign:
    """Templates x sizes, the folder their sessions go to, and the options every pair runs with."""

    kernels: list[Kernel]
    folder: Path
    options: TuneOptions = field(default_factory=TuneOptions)
    top: int = DEFAULT_TOP
    name: str = ""
    # A dispatch set keeps every size within this fraction of its own best (engine/dispatch.py).
    tolerance: float = TOLERANCE
    # Configurations each kernel's sizes try first (the agent loop's fastest, say), by kernel name.
    start_from: Mapping[str, tuple[Mapping[str, Any], ...]] = field(default_factory=dict)

    def jobs(self) -> list[Job]:
        """One job per pair, in the file's order."""
        return [Job(str(k.spec), size, problem, dict(overrides), str(self.folder / session_name(k.name, size)),
                    start_from=tuple(self.start_from.get(k.name, ())))
                for k in self.kernels for size, problem, overrides in k.sizes]

    def run(self, sinks_for: Callable[[Job], Sequence[Sink]] = lambda job: (),
            on_pair: Callable[[PairResult], None] = lambda pair: None) -> "CampaignOutcome":
        """Every pair, then every kernel's general configuration. The summary is written after
        each pair too, so that a cut campaign's folder says how far it got."""
        self.folder.mkdir(parents=True, exist_ok=True)
        jobs = self.jobs()
        pairs: list[PairResult] = []
        for job in jobs:  # independent jobs: any order, any device
            pairs.append(run_job(job, self.options, sinks_for(job)))
            on_pair(pairs[-1])
            self.write_summary(pairs, [])
        generals, dispatches = [], []
        start = 0
        for k in self.kernels:
            mine = range(start, start + len(k.sizes))
            start += len(k.sizes)
            if len(mine) > 1:
                candidates = tuple(dict(c) for _, c in
                                   _candidates([pairs[i] for i in mine if pairs[i].status != "failed"], self.top))
                for i in mine:  # each size's leaders measured at every other size: again one job per pair
                    held = {config_key(r.config) for r in pairs[i].results}
                    if pairs[i].status == "failed" or all(config_key(c) in held for c in candidates):
                        continue
                    job = replace(jobs[i], configs=candidates, start_from=())
                    measured = run_job(job, self.options, sinks_for(job))
                    if measured.status == "measured":
                        on_pair(measured)
                    pairs[i] = measured if measured.status == "failed" else replace(measured, status=pairs[i].status)
            generals.append(choose_general([pairs[i] for i in mine], self.top))
            dispatches.append(dispatch_of([pairs[i] for i in mine], generals[-1], self.top, self.tolerance))
        return CampaignOutcome(pairs, generals, self.write_summary(pairs, generals, dispatches), dispatches)

    def write_summary(self, pairs: Sequence[PairResult], generals: Sequence[General],
                      dispatches: Sequence[DispatchSet | None] = ()) -> Path:
        path = self.folder / SUMMARY_FILE
        data = summary_data(self.name, pairs, generals, self.folder, list(self.options.command), dispatches)
        tmp = path.with_suffix(".toml.tmp")
        tmp.write_text(tomli_w.dumps(data), encoding="utf-8")
        tmp.replace(path)  # a reader never sees half a summary
        return path


@dataclass
class CampaignOutcome:
    pairs: list[PairResult]
    generals: list[General]
    summary_path: Path
    dispatches: list[DispatchSet | None] = field(default_factory=list)


def session_name(template: str, size: str) -> str:
    """A pair's session file name in the campaign's folder: `template@size.toml`."""
    return f"{template}@{re.sub(r'[^A-Za-z0-9_.=,-]', '_', size)}.toml"


def served_kernel(template: Template) -> Kernel:
    """The pairs of a spec's `serves`: one per size it lists."""
    return Kernel(template.spec_path, template.name, tuple((name, name, {}) for name in template.serves))


def load_campaign(path: Path, builtin: Callable[[str], Path | None] = lambda name: None) -> tuple[str, list[Kernel], dict]:
    """Read a campaign file: its name, its kernels with their sizes, and its [campaign] options.

    A kernel's `template` is a path relative to the file (a kernel.toml or its folder) or a
    built-in template's name (`builtin` finds it); its sizes are `problems` (names of its
    [[problem]] entries), `sizes` (tables of sizes that replace the first problem's), or, with
    neither, the spec's `serves` (else every [[problem]])."""
    where = str(path)
    data = read_toml_file(path, CampaignError)

    def fail(key: str, expected: str, got: Any = None) -> CampaignError:
        tail = "" if got is None else f", got {got!r}"[:80]
        return CampaignError(f"{where}: [{key}] expected {expected}{tail}")

    unknown = set(data) - {"campaign", "kernel"}
    if unknown:
        raise fail(sorted(unknown)[0], "only [campaign] and [[kernel]] tables")
    head = data.get("campaign", {})
    if not isinstance(head, dict):
        raise fail("campaign", "a table", head)
    options: dict[str, Any] = {}
    for key, value in head.items():
        if key == "name":
            if not isinstance(value, str) or not NAME_RE.match(value.replace("-", "_")):
                raise fail("campaign.name", "a name of letters, digits, - and _", value)
        elif key == "top":
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise fail("campaign.top", "a whole number of at least 1", value)
            options[key] = value
        elif key in FILE_OPTIONS:
            kind = FILE_OPTIONS[key]
            if isinstance(value, bool) or not isinstance(value, kind) or (not isinstance(value, str) and value < 0):
                raise fail(f"campaign.{key}", "a non-negative number" if kind is not str else "a string", value)
            options[key] = value
        else:
            raise fail(f"campaign.{key}", f"one of name, top, {', '.join(FILE_OPTIONS)}", key)
    raw = data.get("kernel")
    if not isinstance(raw, list) or not raw or not all(isinstance(k, dict) for k in raw):
        raise fail("kernel", "at least one [[kernel]] table with a template")
    kernels: list[Kernel] = []
    for i, item in enumerate(raw):
        at = f"kernel[{i}]"
        extra = set(item) - {"template", "problems", "sizes"}
        if extra:
            raise fail(f"{at}.{sorted(extra)[0]}", "one of template, problems, sizes")
        name = item.get("template")
        if not isinstance(name, str) or not name or "\0" in name:
            raise fail(f"{at}.template", "a built-in template's name or a path to a kernel.toml", name)
        spec = _spec_path(Path(path).parent, name, builtin)
        if spec is None:
            raise fail(f"{at}.template", "a built-in template's name or a kernel.toml beside the campaign file", name)
        try:
            template = load_template(spec)
        except TemplateError as e:
            raise CampaignError(f"{where}: [{at}.template] {e}") from None
        if any(k.name == template.name for k in kernels):
            raise fail(f"{at}.template", f"each template once ({template.name} is listed twice)")
        kernels.append(Kernel(spec, template.name, _sizes(template, item, at, fail)))
    return str(head.get("name", Path(path).stem)), kernels, options


def _spec_path(base: Path, name: str, builtin: Callable[[str], Path | None]) -> Path | None:
    local = base / name
    if local.is_dir():
        local = local / "kernel.toml"
    if local.is_file():
        return local
    found = builtin(name)
    return Path(found) if found is not None else None


def _sizes(template: Template, item: Mapping, at: str, fail: Callable) -> tuple:
    if "problems" in item and "sizes" in item:
        raise fail(at, "problems or sizes, not both")
    if "problems" in item:
        names = item["problems"]
        if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
            raise fail(f"{at}.problems", "a list of the template's [[problem]] names", names)
        if len(set(names)) != len(names):
            raise fail(f"{at}.problems", "each problem once", names)
        for n in names:
            try:
                template.problem(n)
            except TemplateError as e:
                raise CampaignError(f"{e} ([{at}.problems] of the campaign)") from None
        return tuple((n, n, {}) for n in names)
    if "sizes" in item:
        tables = item["sizes"]
        if not isinstance(tables, list) or not tables or not all(isinstance(t, dict) for t in tables):
            raise fail(f"{at}.sizes", "a list of tables of sizes, such as [{ tokens = 64 }]", tables)
        out = []
        for j, sizes in enumerate(tables):
            if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in sizes.values()) or not sizes:
                raise fail(f"{at}.sizes[{j}]", "non-negative whole numbers for the template's sizes", sizes)
            try:
                problem = template.problem(None, sizes)
            except TemplateError as e:
                raise CampaignError(f"{e} ([{at}.sizes] of the campaign)") from None
            label = ",".join(f"{k}={v}" for k, v in sizes.items())
            if any(label == o[0] for o in out):
                raise fail(f"{at}.sizes", "each size once", sizes)
            out.append((label, None, dict(problem.values)))
        return tuple(out)
    if template.serves:
        return tuple((n, n, {}) for n in template.serves)
    return tuple((p.name or p.label(), p.name or None, {} if p.name else dict(p.values))
                 for p in template.problems)


# the summary: written with tomli-w, read with tomllib (read_toml_file) ------------------------------------------

def summary_data(name: str, pairs: Sequence[PairResult], generals: Sequence[General], folder: Path,
                 command: Sequence[str], dispatches: Sequence[DispatchSet | None] = ()) -> dict[str, Any]:
    """The campaign's summary as TOML data: one [[pair]] per pair, one [[general]] per template,
    and one [[dispatch]] per template whose dispatch set was chosen."""

    def rel(p: str) -> str:
        try:
            return str(Path(p).resolve().relative_to(folder.resolve()))
        except ValueError:
            return p

    out: dict[str, Any] = {"summary": {
        "format": SUMMARY_FORMAT, "version": SUMMARY_VERSION, "name": name,
        "created": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "tool_version": tool_version(), "command": [str(c) for c in command]}}
    rows = []
    for p in pairs:
        row: dict[str, Any] = {"template": p.template, "size": p.size, "problem": dict(p.problem),
                               "session": rel(p.session), "status": p.status}
        if p.best is not None:
            row["best_config"] = dict(p.best.config)
            row["best_us"] = float(p.best.median_us)
        if p.original is not None and p.original.ranked:
            row["original_us"] = float(p.original.median_us)
        if p.error:
            row["error"] = p.error
        rows.append(row)
    out["pair"] = rows
    gens = []
    for g in generals:
        entry: dict[str, Any] = {"template": g.template, "notes": list(g.notes)}
        if g.config is not None:
            entry["config"] = dict(g.config)
        entry["size"] = [_numbers({"size": s.size, "best_config": dict(s.best_config)}, original_us=s.original_us,
                                  best_us=s.best_us, general_us=s.general_us) for s in g.sizes]
        _numbers(entry, geomean_speedup=g.geomean)
        gens.append(entry)
    out["general"] = gens
    out["dispatch"] = [dispatch_data(g.template, d) for g, d in zip(generals, dispatches) if d is not None]
    return out


def dispatch_data(template: str, d: DispatchSet) -> dict[str, Any]:
    """A dispatch set as a summary's [[dispatch]] table."""
    entry: dict[str, Any] = {"template": template, "tolerance": d.tolerance, "notes": list(d.notes),
                             "configs": [{"config": dict(c), "covers": d.covered_by(i)} for i, c in enumerate(d.configs)]}
    _numbers(entry, geomean_speedup=d.geomean, general_geomean_speedup=d.general_geomean)
    entry["size"] = [_numbers({"size": c.size, "config": dict(c.config)}, time_us=c.time_us, best_us=c.best_us,
                              original_us=c.original_us, general_us=c.general_us) for c in d.covers]
    return entry


def _numbers(row: dict[str, Any], **figures: float | None) -> dict[str, Any]:
    """`row` with each figure that is known, as a float (TOML has no null)."""
    row.update({k: float(v) for k, v in figures.items() if v is not None})
    return row
