"""`kerntune verify`: a recorded winner, checked again on this machine, as a CI gate.

What a session or an export ships (engine/export.py `Shipped`: a configuration per size with
the figures it was chosen on) is measured again: the configuration and the original (the
template's default configuration) in one tuning run each size, through the whole verification
protocol, then timed together in paired rounds (engine/retime.py). A configuration passes when
it verifies, its paired speedup over the original reaches the recorded 95% interval or is within
the tolerance of the recorded speedup, and, on a device of the same name, its time is within
the tolerance of the recorded time (a kernel made slower everywhere keeps its speedup over an
original that was made slower too, but not its time).
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from .export import EXPORT_FORMAT, ExportError, Shipped, paired_figures, shipped_of, shipped_of_folder
from .result import Result, config_key
from .session import Session, SessionError, load_session
from .space import build_space
from .summary import is_summary
from .template import Template
from .tune import Sink, TuneOptions, TuneRun, resolve_device

TOLERANCE = 0.05


class VerifyError(ValueError):
    """A session or export that cannot be verified; the message is one line."""


@dataclass(frozen=True)
class Recorded:
    """What verify checks again: the template it came from, the device it was measured on, and
    each configuration shipped."""

    source: str
    template: Mapping[str, Any]  # name, path, fingerprint, backend
    device: str
    shipped: tuple[Shipped, ...]


@dataclass(frozen=True)
class Check:
    """One shipped configuration measured again: its verdict and the figures behind it."""

    size: str
    config: Mapping[str, Any]
    verdict: str  # passed, wrong, slower, infeasible
    reasons: tuple[str, ...] = ()
    status: str = ""
    median_us: float | None = None
    recorded_us: float | None = None
    speedup: float | None = None
    interval: tuple[float, float] | None = None
    recorded_speedup: float | None = None
    recorded_interval: tuple[float, float] | None = None
    session: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"size": self.size, "config": dict(self.config), "verdict": self.verdict,
                "reasons": list(self.reasons), "status": self.status, "median_us": self.median_us,
                "recorded_us": self.recorded_us, "speedup": self.speedup,
                "speedup_interval": list(self.interval) if self.interval else None,
                "recorded_speedup": self.recorded_speedup,
                "recorded_interval": list(self.recorded_interval) if self.recorded_interval else None,
                "session": self.session}


@dataclass
class Report:
    recorded: Recorded
    checks: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(c.verdict == "passed" for c in self.checks)

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.recorded.source, "template": dict(self.recorded.template),
                "recorded_device": self.recorded.device, "passed": self.passed, "notes": list(self.notes),
                "checks": [c.to_dict() for c in self.checks]}


def read_recorded(path: Path) -> Recorded:
    """What a session, a `kerntune export --format json` file, or a served-size run's folder ships."""
    p = Path(path)
    if p.suffix == ".json":
        return _from_export(p)
    if p.is_dir() or is_summary(p):  # a served-size run: its dispatch set
        try:
            shipped, sessions = shipped_of_folder(p)
        except ExportError as e:
            raise VerifyError(str(e)) from None
        first = next(iter(sessions.values()))
        return replace(from_session(first), source=str(p), shipped=tuple(shipped))
    try:
        session = load_session(p)
    except SessionError as e:
        raise VerifyError(str(e)) from None
    return from_session(session)


def from_session(session: Session) -> Recorded:
    try:
        shipped = (shipped_of(session),)
    except ExportError as e:
        raise VerifyError(str(e)) from None
    t = session.template
    return Recorded(str(session.path), {k: t.get(k) for k in ("name", "path", "fingerprint", "backend")},
                    str(session.device.get("name", "")), shipped)


def _from_export(p: Path) -> Recorded:
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise VerifyError(f"{p}: no such file") from None
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise VerifyError(f"{p}: not a JSON export: {e}") from None
    if not isinstance(data, dict) or data.get("format") != EXPORT_FORMAT:
        raise VerifyError(f"{p}: not a kerntune export (no \"format\": \"{EXPORT_FORMAT}\"; "
                          "`kerntune export SESSION --format json` writes one)")
    template = data.get("template")
    if not isinstance(template, dict) or not isinstance(template.get("name"), str):
        raise VerifyError(f"{p}: [template] must name the template")
    rows = data.get("shipped")
    if not isinstance(rows, list) or not rows:
        raise VerifyError(f"{p}: [shipped] must list at least one configuration")
    shipped = []
    for i, row in enumerate(rows):
        try:
            shipped.append(_shipped(row))
        except (TypeError, ValueError, KeyError) as e:
            raise VerifyError(f"{p}: shipped[{i}]: {e}") from None
    device = data.get("device")
    return Recorded(str(p), {k: v for k, v in template.items() if isinstance(v, str)},
                    str(device.get("name", "")) if isinstance(device, dict) else "", tuple(shipped))


def _number(row: Mapping[str, Any], key: str) -> float | None:
    v = row.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v == v or v in (float("inf"), float("-inf")):
        raise ValueError(f"{key} must be a finite number")
    return float(v)


def _shipped(row: Any) -> Shipped:
    if not isinstance(row, dict):
        raise ValueError("expected an object")
    problem, config = row.get("problem"), row.get("config")
    if not isinstance(problem, dict) or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                                                for v in problem.values()):
        raise ValueError("problem must map sizes to whole numbers")
    if not isinstance(config, dict) or not all(isinstance(v, (int, float, bool, str)) for v in config.values()):
        raise ValueError("config must map parameters to values")
    interval = row.get("speedup_interval")
    if interval is not None:
        if not (isinstance(interval, list) and len(interval) == 2):
            raise ValueError("speedup_interval must be [low, high]")
        interval = (_number({"v": interval[0]}, "v"), _number({"v": interval[1]}, "v"))
    return Shipped(str(row.get("size", "")), problem, config, _number(row, "median_us"), _number(row, "original_us"),
                   _number(row, "speedup"), interval)


def verify(recorded: Recorded, template: Template, options: TuneOptions, tolerance: float = TOLERANCE,
           folder: Path | None = None, sinks_for: Callable[[Shipped], Sequence[Sink]] = lambda s: ()) -> Report:
    """Measure every shipped configuration again beside the original; the report of each."""
    report = Report(recorded)
    fingerprint = recorded.template.get("fingerprint")
    if fingerprint and fingerprint != template.fingerprint():
        report.notes.append(f"the template at {template.spec_path} is not the one recorded (its fingerprint "
                            f"differs): its kernel as it is now is measured")
    backend = str(recorded.template.get("backend") or "auto")
    if options.backend == "auto" and backend in ("cuda", "opencl"):
        options = replace(options, backend=backend)
    _, limits = resolve_device(options.backend, options.device)
    same_device = limits.name == recorded.device
    if not same_device:
        report.notes.append(f"measured on {limits.name}, recorded on {recorded.device or 'an unnamed device'}: "
                            "times are not compared, only speedups over the original")
    # the configurations shipped for one problem are measured in one run, beside one original
    groups: dict[tuple, list[int]] = {}
    for i, s in enumerate(recorded.shipped):
        groups.setdefault(tuple(sorted(s.problem.items())), []).append(i)
    checks: dict[int, Check] = {}
    with tempfile.TemporaryDirectory(prefix="kerntune-verify-") as tmp:
        where = Path(folder) if folder is not None else Path(tmp)
        where.mkdir(parents=True, exist_ok=True)
        for n, members in enumerate(groups.values()):
            entries = [recorded.shipped[i] for i in members]
            sinks = [sink for s in entries for sink in sinks_for(s)]
            path = where / f"verify-{n}-{_slug(entries[0].size)}.toml"
            checks.update(zip(members, _check(entries, template, options, limits, path, tolerance, same_device, sinks,
                                              keep=folder is not None)))
    report.checks = [checks[i] for i in range(len(recorded.shipped))]
    return report


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)[:60] or "size"


def _check(entries: Sequence[Shipped], template: Template, options: TuneOptions, limits: Any, path: Path,
           tolerance: float, same_device: bool, sinks: Sequence[Sink], keep: bool) -> list[Check]:
    """Entries shipped for one problem, measured in one run with the original; a check of each."""
    problem = template.problem(None, dict(entries[0].problem))
    default = template.default_config()
    feasible = {c.key for c in build_space(template, problem, limits).configs}
    configs = {config_key({**default, **dict(s.config)}): {**default, **dict(s.config)} for s in entries}
    todo = [c for k, c in configs.items() if k in feasible and k != config_key(default)]
    session = None
    if any(k in feasible for k in configs):
        opts = replace(options, problem=None, overrides=dict(entries[0].problem), session_path=path, resume=False,
                       start_from=tuple(todo), budget=1 + len(todo), strategy="grid", time_limit=0.0, patience=0,
                       sol_target=0.0, profile_top=0)
        TuneRun(template, opts, sinks).run()
        session = load_session(path)
    where = str(path) if keep else ""
    out = []
    for s in entries:
        key = config_key({**default, **dict(s.config)})
        if key not in feasible or session is None:
            out.append(Check(s.size, s.config, "infeasible", ("the configuration is not feasible here (the template's "
                                                              "constraints or this device's limits rule it out)",)))
            continue
        mine = next((r for r in reversed(session.results()) if config_key(r.config) == key), None)
        if mine is None or not mine.verified:
            status = mine.status if mine is not None else "not measured"
            why = f"{status}: {mine.message}" if mine is not None and mine.message else status
            out.append(Check(s.size, s.config, "wrong", (why,), status=status, session=where))
            continue
        out.append(_judge(s, mine, session, key == config_key(default), tolerance, same_device, where))
    return out


def _judge(s: Shipped, mine: Result, session: Session, original: bool, tolerance: float, same_device: bool,
           where: str) -> Check:
    median, speedup, interval = mine.median_us, None, None
    paired = paired_figures(session, mine.config)
    if paired is not None:
        median, speedup, interval = paired
    if original:
        speedup, interval = 1.0, (1.0, 1.0)
    reasons = []
    if mine.status != "ok":
        reasons.append(f"{mine.status}: {mine.message}".rstrip(": "))
    if s.speedup and speedup is not None:
        within = interval is not None and s.speedup_interval is not None and interval[1] >= s.speedup_interval[0]
        if not within and speedup < s.speedup * (1 - tolerance):
            recorded = (f" (95% interval {s.speedup_interval[0]:.2f}-{s.speedup_interval[1]:.2f})"
                        if s.speedup_interval else "")
            reasons.append(f"{speedup:.2f}x the original against {s.speedup:.2f}x recorded{recorded}: slower than "
                           f"the recorded interval and the tolerance ({tolerance:.0%})")
    elif s.speedup and speedup is None:
        reasons.append("the original could not be timed beside it: no speedup to compare")
    if same_device and s.median_us and median and median > s.median_us * (1 + tolerance):
        reasons.append(f"{median:.4g} us against {s.median_us:.4g} us recorded: more than {tolerance:.0%} slower")
    return Check(s.size, s.config, "slower" if reasons else "passed", tuple(reasons), mine.status, median,
                 s.median_us, speedup, interval, s.speedup, s.speedup_interval, where)


def report_lines(report: Report) -> list[str]:
    """The report in words: a line per configuration, then the notes."""
    lines = []
    for c in report.checks:
        config = " ".join(f"{k}={int(v) if isinstance(v, bool) else v}" for k, v in c.config.items()) or "the original"
        figures = []
        if c.median_us is not None:
            figures.append(f"{c.median_us:.4g} us" + (f" (recorded {c.recorded_us:.4g})" if c.recorded_us else ""))
        if c.speedup is not None:
            figures.append(f"{c.speedup:.2f}x the original"
                           + (f" [{c.interval[0]:.2f}-{c.interval[1]:.2f}]" if c.interval else "")
                           + (f" (recorded {c.recorded_speedup:.2f}x)" if c.recorded_speedup else ""))
        head = c.verdict if c.verdict == "passed" else c.verdict.upper()
        lines.append(f"{head}: {c.size} {config}" + (f": {', '.join(figures)}" if figures else ""))
        lines += [f"    {r}" for r in c.reasons]
    lines += [f"note: {n}" for n in report.notes]
    return lines

