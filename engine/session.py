"""Sessions: a header and the run's events, as TOML, appended and flushed as events happen.

    [session] [device] [template] [space] [tuning]   the header (engine/header.py)
    [[event]]   one table per event, in order

A run killed at any point leaves a file that loads: a partial last event is dropped with a
warning. Loading never evaluates anything it reads; a session never holds secrets.
"""

from __future__ import annotations

import fcntl
import gc
import json
import math
import os
import re
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Iterator, Mapping

import tomli_w

from .events import (ConfigEvaluated, Event, EventFormatError, LeadersRetimed, LoopFinished, LoopStarted, Note,
                     RunFinished, RunStarted, event_from_dict, event_to_dict)
from .certificate import checked as checked_certificate
from .header import FORMAT, HEADER_TABLES, VERSION, SessionHeader, new_header, tool_version  # noqa: F401
from .energy import summary as energy_summary
from .result import FAILED, Result, config_key, fastest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

_EVENT_HEADER = re.compile(r"^\[\[event\]\]\s*$", re.MULTILINE)
# Each event ends with this comment line: an event without it was cut off mid-write.
END_MARK = "# end\n"


# a session whose run (or agent loop) started and never finished: its process was killed
CUT = "cut: the session ends before its run finished (the process was killed)"


class SessionError(ValueError):
    """A session file that cannot be read; the message is one line naming the file."""


class SessionBusy(SessionError):
    """A session file another process is writing: a session has one writer at a time."""


def lock_session(path: Path) -> int:
    """Take the one-writer lock of a session file; the descriptor that holds it is returned.

    The lock is the operating system's (flock) on the session file itself: it goes when the
    descriptor is closed or the process ends, however it ends, so there is never a lock file to
    clean up. The file is created empty when missing. A file another process holds is refused at
    once with one line naming that process."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = _lock_holder(fd)
        os.close(fd)
        raise SessionBusy(f"{path}: another run is writing this session ({holder}); wait for it to end, "
                          "or choose another --session") from None
    return fd


def _lock_holder(fd: int) -> str:
    """The process holding the flock on fd's file, as `pid N: its command line` (read from /proc)."""
    st = os.fstat(fd)
    try:
        table = Path("/proc/locks").read_text()
    except OSError:
        return "another process"
    for line in table.splitlines():
        # "3: FLOCK  ADVISORY  WRITE 4242 00:2e:1234567 0 EOF"; waiters have "->" after the number
        parts = line.split()
        if len(parts) < 6 or parts[1] != "FLOCK" or "->" in parts:
            continue
        pid, ident = parts[4], parts[5].rsplit(":", 1)
        if pid.isdigit() and len(ident) == 2 and ident[1] == str(st.st_ino):
            return f"pid {pid}: {_command_of(int(pid))}"
    return "another process"


def _command_of(pid: int) -> str:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode("utf-8", "replace").split("\0")
    except OSError:
        return "its command line is not readable"
    argv = [a for a in argv if a]
    # `python /venv/bin/kerntune tune ...` reads as `kerntune tune ...`
    while len(argv) > 1 and (os.path.basename(argv[0]).startswith("python") or argv[0] == "-m"):
        argv = argv[1:]
    if argv:
        argv[0] = os.path.basename(argv[0])
    text = " ".join(argv) or "?"
    return text if len(text) <= 200 else text[:197] + "..."


class SessionWriter:
    """Appends events to a session file, flushing each one so that a crash loses at most one.

    The writer holds the file's one-writer lock (see `lock_session`; `lock` hands in one taken
    already) until it is closed. Appending to an existing file first drops a last event that was
    cut off mid-write, so that what follows lands after a complete event; `repaired` then says so
    in one line."""

    def __init__(self, path: Path, header: Mapping[str, Any] | None = None, *, lock: int | None = None):
        self.path = Path(path)
        self.repaired: str | None = None
        if header is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        elif lock is None and not self.path.exists():
            raise SessionError(f"{self.path}: no such session to append to")
        self._lock = lock_session(self.path) if lock is None else lock
        try:
            if header is not None:
                text = tomli_w.dumps(_clean(dict(header)))
                with open(self.path, "w", encoding="utf-8") as f:
                    f.write(text)
                    f.flush()
                    os.fsync(f.fileno())
            else:
                self.repaired = repair_tail(self.path)
            self._f = open(self.path, "a", encoding="utf-8")
        except BaseException:
            os.close(self._lock)
            raise

    def write(self, ev: Event) -> None:
        self._f.write("\n" + event_toml(ev))
        self._f.flush()

    def close(self) -> None:
        if not self._f.closed:
            self._f.flush()
            os.fsync(self._f.fileno())
            self._f.close()
            os.close(self._lock)

    def __enter__(self) -> "SessionWriter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def repair_tail(path: Path) -> str | None:
    """Cut a session file back to its last complete event (call it holding the file's lock).

    Returns one line saying what was dropped, or None when the file ends with a complete event."""
    raw = Path(path).read_bytes()
    text = raw.decode("utf-8", "surrogateescape")  # a cut may split a character: keep bytes as bytes
    keep = len(_complete_prefix(text).encode("utf-8", "surrogateescape"))
    if keep == len(raw):
        return None
    with open(path, "r+b") as f:
        f.truncate(keep)
        f.flush()
        os.fsync(f.fileno())
    return (f"{path}: its last event was cut off mid-write: dropped ({len(raw) - keep} bytes); "
            "every complete event is kept")


def event_toml(ev: Event) -> str:
    """One event as an `[[event]]` table; its sub-tables follow as `[event.name]`, which TOML
    attaches to the last element of the array, so events can be appended one by one."""
    text = tomli_w.dumps({"event": _clean(event_to_dict(ev))})
    assert text.startswith("[event]\n")
    return "[[event]]\n" + text[len("[event]\n"):] + END_MARK


def _clean(v: Any) -> Any:
    """TOML has no null and no NaN-safe floats everywhere: drop None, keep the rest."""
    if isinstance(v, Mapping):
        return {str(k): _clean(x) for k, x in v.items() if x is not None}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v if x is not None]
    return v


@dataclass
class Session:
    """A loaded session: its header, its events, and what loading had to say."""

    path: Path
    header: SessionHeader
    events: list[Event]
    warnings: list[str] = field(default_factory=list)

    @property
    def info(self) -> dict[str, Any]:
        return self.header.get("session", {})

    @property
    def template(self) -> dict[str, Any]:
        return self.header.get("template", {})

    @property
    def device(self) -> dict[str, Any]:
        return self.header.get("device", {})

    @property
    def space(self) -> dict[str, Any]:
        return self.header.get("space", {})

    def results(self) -> list[Result]:
        """Every configuration's result in order, with demotions applied: an event that
        `replaces` takes the place of the latest result of the same index and configuration."""
        cached = getattr(self, "_results", None)
        if cached is not None and cached[0] == len(self.events):
            return list(cached[1])
        evaluated = [e for e in self.events if isinstance(e, ConfigEvaluated)]
        out: list[Result] = [e.result for e in evaluated]
        if any(e.replaces for e in evaluated):  # (most sessions demote nothing: no keys to make)
            out = []
            at: dict[tuple[int, str], int] = {}
            for e in evaluated:
                key = (e.index, config_key(e.result.config))
                if e.replaces and key in at:
                    out[at[key]] = e.result
                else:
                    at[key] = len(out)
                    out.append(e.result)
        self._results = (len(self.events), tuple(out))  # a loaded session's events do not change
        return out

    def evaluated_keys(self) -> set[str]:
        return {config_key(r.config) for r in self.results()}

    def default_result(self) -> Result | None:
        default = self.template.get("default_config")
        if not isinstance(default, Mapping):
            return None
        key = config_key(default)
        for r in self.results():
            if config_key(r.config) == key:
                return r
        return None

    def best(self) -> Result | None:
        """The reported best: the configuration the leaders' paired re-timing chose (the original
        or the simplest among those tied with the fastest), else the fastest."""
        lead = self.leaders()
        if lead is not None:
            key = config_key(lead.configs[lead.chosen])
            chosen = next((r for r in reversed(self.results()) if config_key(r.config) == key), None)
            if chosen is not None and chosen.ranked:
                return chosen
        return fastest(self.results())

    def leaders(self) -> LeadersRetimed | None:
        """The last paired re-timing of the leaders, when the session has one that holds together."""
        for e in reversed(self.events):
            if isinstance(e, LeadersRetimed):
                return e if e.valid else None
        return None

    def finished(self) -> RunFinished | None:
        """How the session's run ended: its last RunFinished; a run (or agent loop) that started
        and never finished was cut (its process killed): a RunFinished saying so; None before any."""
        started = [i for i, e in enumerate(self.events) if isinstance(e, (RunStarted, LoopStarted))]
        done = [i for i, e in enumerate(self.events) if isinstance(e, RunFinished)]
        loop_open = any(isinstance(e, LoopStarted) for e in self.events) and \
            not any(isinstance(e, LoopFinished) for e in self.events)
        last = self.events[done[-1]] if done else None
        if started and (not done or done[-1] < started[-1] or loop_open):
            if isinstance(last, RunFinished) and last.reason.startswith(("cut:", "interrupted")):
                return last
            results = self.results()
            return RunFinished(self.events[-1].t, CUT, len(results), sum(1 for r in results if r.verified))
        return last

    def summary(self) -> dict[str, Any]:
        """The facts `kerntune show --json` prints."""
        results = self.results()
        failed: dict[str, int] = {}
        for r in results:
            if r.status in FAILED:
                failed[r.status] = failed.get(r.status, 0) + 1
        best, base = self.best(), self.default_result()
        out: dict[str, Any] = {
            "path": str(self.path),
            "id": self.info.get("id", ""),
            "created": self.info.get("created", ""),
            "template": self.template.get("name", ""),
            "backend": self.template.get("backend", ""),
            "device": self.device.get("name", ""),
            "problem": self.space.get("problem", {}),
            "feasible": self.space.get("feasible", 0),
            "evaluated": len(results),
            "verified": sum(1 for r in results if r.verified),
            "suspect": sum(1 for r in results if r.status == "suspect"),
            "failed": failed,
            "best": None,
            "default": None,
            "speedup": None,
            "finished": None,
            "warnings": list(self.warnings),
            # each run of a session (an agent loop's original and rounds) calibrates: a line once
            "calibration": list(dict.fromkeys(e.text for e in self.events
                                              if isinstance(e, Note) and e.source == "calibration")),
            # `kerntune selftest` on the device and driver, as the header recorded it (None: never run)
            "selftest": checked_certificate(self.device.get("selftest")),
        }
        if best is not None:
            out["best"] = {"config": dict(best.config), "median_us": best.median_us,
                           "sol_fraction": best.sol_fraction, "spread": best.spread,
                           "tied": [], "speedup_interval": None}
            if best.disturbed:
                out["best"]["disturbed"] = best.disturbed
        if base is not None and base.median_us is not None:
            out["default"] = {"config": dict(base.config), "median_us": base.median_us, "status": base.status}
            if best is not None and best.median_us:
                out["speedup"] = base.median_us / best.median_us
        lead = self.leaders()
        if best is not None and lead is not None and config_key(lead.configs[lead.chosen]) == config_key(best.config):
            c = lead.chosen
            out["best"].update(tied=[dict(x) for x in lead.tied_with_chosen()], paired_us=lead.median_us[c],
                               chosen_because=lead.reason, paired_rounds=lead.rounds)
            if lead.original >= 0:
                out["best"]["speedup_interval"] = [lead.low[c], lead.high[c]]
                out["speedup"] = lead.speedup[c]
            if lead.disturbances:
                out["best"]["disturbances"] = lead.disturbances
        fin = self.finished()
        if fin is not None:
            out["finished"] = {"reason": fin.reason}
        # joules per launch, the Pareto front of time against energy (`--objective energy|edp`)
        out["energy"] = energy_summary(results, str(self.header.get("tuning", {}).get("objective", "time")))
        return out


def load_session(path: str | Path) -> Session:
    """Read and validate a session file; a partial last event is dropped with a warning."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise SessionError(f"{p}: no such file") from None
    except OSError as e:
        raise SessionError(f"{p}: cannot read: {e.strerror or e}") from None
    except ValueError:  # a NUL byte in the path
        raise SessionError(f"{str(p)!r}: not a usable file name") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        if e.reason != "unexpected end of data":  # (that one is a write cut inside a character)
            raise SessionError(f"{p}: not a text file (byte {e.start} is not UTF-8)") from None
        text = raw[: e.start].decode("utf-8")
    check_line_sizes(p, text, SessionError)
    warnings: list[str] = []
    complete = _complete_prefix(text)
    if complete != text:
        warnings.append(f"{p}: the last event was cut off and has been dropped")
    with collector_paused(settle=True):
        return _read(p, complete, warnings)


def _read(p: Path, text: str, warnings: list[str]) -> Session:
    # (a function of its own: the parsed tables are freed when it returns, before the collector
    # runs again and would go over them)
    try:
        data = parse_session_text(text)
    except tomllib.TOMLDecodeError as e:
        raise SessionError(f"{p}: not a valid session file: {e}") from None
    except RecursionError:
        raise SessionError(f"{p}: not a valid session file: nested too deeply") from None
    if '"""' in text or "'''" in text:  # multi-line strings (kerntune writes none): their lines are short
        check_string_sizes(p, data, SessionError)
    return _validate(p, data, warnings)


# The most a string of a session may hold: a kernel's source (or the spec, or the original's
# source) as much as a spec may name, escaped; any other string (a message, a name) 256 KiB. A
# session is written by kerntune, one string a line: a longer one was put there by hand, and
# would cost seconds and gigabytes to show.
STRING_BYTES = 256 << 10
# (twice what engine/template.py lets a spec and a source hold, SPEC_BYTES and SOURCE_BYTES: escapes)
SOURCE_KEYS = {"source": 16 << 20, "original_source": 16 << 20, "spec": 2 << 20}


def check_line_sizes(p: Path, text: str, error: type[Exception]) -> None:
    """`error` (one line) for a line of the file longer than its key allows (STRING_BYTES, or
    SOURCE_KEYS'). Only windows of the text are searched for a line end: a file of ordinary lines
    costs a few hundred finds, whatever its size."""
    window = STRING_BYTES // 2
    pos, end = 0, len(text)
    while pos + window < end:
        if text.find("\n", pos, pos + window) >= 0:
            pos += window
            continue
        start = text.rfind("\n", 0, pos) + 1  # a line of at least `window` characters: measured whole
        stop = text.find("\n", pos)
        stop = end if stop < 0 else stop
        key = text[start:min(stop, start + 64)].split("=", 1)[0].strip()
        limit = SOURCE_KEYS.get(key, STRING_BYTES)
        if stop - start > limit:
            raise error(f"{p}: line {text.count(chr(10), 0, start) + 1} holds {stop - start} characters; "
                        f"{'`' + key + '`' if key in SOURCE_KEYS else 'a string'} of a session may hold {limit}")
        pos = stop + 1


def check_string_sizes(p: Path, data: Any, error: type[Exception]) -> None:
    """`error` (one line) for a string anywhere in `data` longer than its key allows."""
    stack: list[tuple[str, Any]] = [("", data)]
    while stack:
        key, v = stack.pop()
        if isinstance(v, str):
            limit = SOURCE_KEYS.get(key, STRING_BYTES)
            if len(v) > limit:
                raise error(f"{p}: `{key}` holds {len(v)} characters; a session's may hold {limit}")
        elif isinstance(v, dict):
            stack.extend(v.items())
        elif isinstance(v, list):
            stack.extend((key, x) for x in v)


@contextmanager
def collector_paused(settle: bool = False) -> Iterator[None]:
    """Python's cycle collector paused: reading a large session builds hundreds of thousands of
    objects that all stay alive, and the collector's passes over them (each full pass over all of
    them) would take a fifth of the time. Nothing a session builds holds a reference cycle.

    What is built while it is paused is young for the collector, and its next pass would go over
    all of it (15 ms on matmul-2048's session), then the next generation's pass again. With
    `settle`, it goes straight to the oldest generation as the collector resumes (gc.freeze then
    gc.unfreeze: no pass over it): for objects that live as long as the session."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
        if settle:
            gc.freeze()
            gc.unfreeze()
    finally:
        gc.enable()


def _complete_prefix(text: str) -> str:
    """The text up to the end of the last complete event (all of it when nothing was cut)."""
    first = _EVENT_HEADER.search(text)
    if first is None or text.endswith("\n" + END_MARK):
        marker = text.rfind("\n" + END_MARK)
        if first is None and marker < 0:
            # no events; a partial first event header ("[[ev") is cut off here too
            partial = re.search(r"^\[\[e?v?e?n?t?\]?$", text.rstrip("\n"), re.MULTILINE)
            return text[: partial.start()] if partial and text.rstrip("\n").endswith(partial.group(0)) else text
        return text
    marker = text.rfind("\n" + END_MARK)
    if marker < first.start():
        return text[: first.start()]
    return text[: marker + 1 + len(END_MARK)]


def _is_number(v: Any) -> bool:
    return isinstance(v, int) or (isinstance(v, float) and math.isfinite(v))


def _is_value(v: Any) -> bool:  # a parameter's value: a number, a flag or a word
    return _is_number(v) or isinstance(v, str)


# The header's fields that the commands read, with what each must be: a session edited by hand
# (a date for a string, a table for a number) is one line, never a traceback further on.
HEADER_FIELDS: dict[tuple[str, str], tuple[str, Any]] = {
    ("session", "id"): ("a string", lambda v: isinstance(v, str)),
    ("session", "created"): ("a string", lambda v: isinstance(v, str)),
    ("template", "parameters"): ("an array of names", lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v)),
    ("template", "default_config"): ("a table of parameter values",
                                     lambda v: isinstance(v, dict) and all(_is_value(x) for x in v.values())),
    ("space", "problem"): ("a table of sizes", lambda v: isinstance(v, dict) and all(
        _is_number(x) and not isinstance(x, bool) for x in v.values())),
    ("space", "problem_name"): ("a string", lambda v: isinstance(v, str)),
    ("space", "total"): ("a count", lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0),
    ("space", "feasible"): ("a count", lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0),
}


def _validate(p: Path, data: dict, warnings: list[str]) -> Session:
    info = data.get("session")
    if not isinstance(info, dict):
        raise SessionError(f"{p}: [session] table missing: not a kerntune session file")
    if info.get("format") != FORMAT:
        raise SessionError(f"{p}: [session] format is {info.get('format')!r}, expected {FORMAT!r}")
    version = info.get("version")
    if isinstance(version, bool) or not isinstance(version, int):
        raise SessionError(f"{p}: [session] version must be an integer, got {version!r}")
    if version > VERSION:
        raise SessionError(
            f"{p}: session format version {version} is newer than this kerntune reads ({VERSION}); upgrade kerntune"
        )
    if version < 1:
        raise SessionError(f"{p}: [session] version {version} is not a known format version")
    header: dict[str, Any] = {}
    for key in HEADER_TABLES:
        v = data.get(key, {})
        if not isinstance(v, dict):
            raise SessionError(f"{p}: [{key}] must be a table")
        header[key] = v
    template = header["template"]
    for key in ("name", "backend"):
        if not isinstance(template.get(key), str):
            raise SessionError(f"{p}: [template] {key} must be a string")
    for (table, key), (what, fits) in HEADER_FIELDS.items():
        if key in header[table] and not fits(header[table][key]):
            raise SessionError(f"{p}: [{table}] {key} must be {what}")
    raw_events = data.get("event", [])
    if not isinstance(raw_events, list):
        raise SessionError(f"{p}: `event` must be an array of tables ([[event]])")
    events: list[Event] = []
    for i, item in enumerate(raw_events):
        try:
            if not isinstance(item, dict):
                raise EventFormatError("not a table")
            events.append(event_from_dict(item))
        except (EventFormatError, ValueError, TypeError) as e:
            if i == len(raw_events) - 1:
                warnings.append(f"{p}: the last event is incomplete ({e}) and has been dropped")
                break
            raise SessionError(f"{p}: event {i + 1}: {e}") from None
    return Session(p, SessionHeader(**header), events, warnings)


def file_stem(text: str, fallback: str = "kernel") -> str:
    """A name read from a file made into a plain file name: letters, digits, `_`, `-` and `.`
    kept (anything else `_`), no leading dot, at most 80 characters. A name from a session or a
    spec never picks a folder (`../..`, `/etc`): a file written under it stays where it is put."""
    stem = "".join(c if c.isascii() and (c.isalnum() or c in "_-.") else "_" for c in str(text)[:80]).lstrip(".")
    return stem or fallback


def default_path(template: str, directory: Path | None = None) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    base = directory if directory is not None else Path("sessions")
    template = file_stem(template)
    path = base / f"{template}-{stamp}.toml"
    n = 2
    while path.exists():
        path = base / f"{template}-{stamp}-{n}.toml"
        n += 1
    return path


def started_events(session: Session) -> list[RunStarted]:
    return [e for e in session.events if isinstance(e, RunStarted)]


# Loading a large session fast ------------------------------------------------------------------
#
# tomllib reads a 6 MB session (4,000 results with their raw times) in about 2 s. The events are
# written by tomli_w in a small, regular subset of TOML, so `parse_session_text` reads that subset
# itself and hands the whole text to tomllib whenever it meets anything else (a literal or
# multi-line string, a dotted key, an inline table, a table it does not expect, a key defined
# twice, ...). Whatever it accepts, it reads exactly as tomllib does. Its values are numbers,
# true, false, strings and arrays of them; without escapes, infinities and NaN, each is written
# the same in JSON. So a run of `key = value` lines with bare keys becomes one JSON object (the
# `=` to a `:`, each line end to a comma), and the json module decodes every object at once,
# refusing what is not a number in plain decimal (JSON's numbers are all valid TOML numbers of
# the same value). Lines with quoted keys, escapes, infinities or NaN are checked against TOML's
# grammar and read one by one.
#
# Most of a large session is its raw times, arrays of numbers one item a line. The pattern takes
# such an array as a block of number characters, commas, spaces and line ends (one character
# class, not one step per item), and its layout is checked when its lines are joined: the array
# "[\n    1,\n    2,\n]" becomes "[ 1, 2]", any other layout keeps a line end, and a run that
# keeps one is checked against the strict grammar instead (one item a line, each a TOML number).
# JSON then refuses what is not a list of numbers ("[ 1, ]", "[ 1 2]").

_FAST_KEY = r'[A-Za-z0-9_-]+|"[^"\\\x00-\x1f\x7f]*"'
_FAST_STRING = r'"(?:[^"\\\x00-\x1f\x7f]|\\[^\x00-\x1f\x7f])*"'
_FAST_NUMBER = r'-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?'
_FAST_NUMBERISH = r'[-+.0-9eE]+'  # checked later: by JSON, or against _FAST_NUMBER
# an array of numbers, one a line, as a block; it starts with an item: "[\n    ,\n]" is no array
_FAST_NUMBER_LINES = r'\[\n    [-+.0-9eE][-+.0-9eE ,\n]*\]'


def _fast_pairs_pattern(number: str, number_lines: bool) -> str:
    """`key = value` lines, one after another (the last one without its line end)."""
    scalar = rf'{number}|{_FAST_STRING}|true|false|[+-]?(?:inf|nan)'
    value = (rf'{scalar}|\[(?:(?:{scalar})(?:, (?:{scalar}))*)?\]'  # an inline array
             rf'|\[\n(?:    (?:{scalar}),\n)*\]')  # an array of one item a line
    if number_lines:
        value = rf'{_FAST_NUMBER_LINES}|{value}'
    pair = rf'(?:{_FAST_KEY}) = (?:{value})'
    return rf'{pair}(?:\n{pair})*'


# One step of the reader: a header, a comment or a blank line, then the `key = value` lines that
# follow it (either may be missing; a step that reads nothing is text the reader does not know).
_FAST_LINE = re.compile(
    r'(?:(?P<aot>(?:#[^\x00-\x08\x0a-\x1f\x7f]*\n|\n)*\[\[event\]\]\n)'  # with the comments and blank lines before it
    r'|\[event(?P<table>(?:\.[A-Za-z0-9_-]+)+)\]\n'
    r'|#[^\x00-\x08\x0a-\x1f\x7f]*\n|\n)?'
    rf'(?:(?P<run>{_fast_pairs_pattern(_FAST_NUMBERISH, True)})\n+)?')
_FAST_STRICT_RUN = re.compile(_fast_pairs_pattern(_FAST_NUMBER, False))
# one `key = value` line of a matched run, its key bare or quoted (a key holds no quote)
_FAST_PAIR = re.compile(r'^("?)(.*?)\1 = (.*)$', re.MULTILINE)
_FAST_ITEM = re.compile(rf'{_FAST_NUMBER}|{_FAST_STRING}|true|false|[+-]?(?:inf|nan)')


class _NotFast(Exception):
    """The text leaves the subset the fast reader knows: tomllib reads it instead."""


def parse_session_text(text: str) -> dict[str, Any]:
    """The session's text as tomllib reads it (and tomllib's error for a bad file)."""
    start = _EVENT_HEADER.search(text)
    if start is None:
        return tomllib.loads(text)
    try:
        data = tomllib.loads(text[: start.start()])
        if "event" in data:
            raise _NotFast()
        data["event"] = _fast_events(text if text.endswith("\n") else text + "\n", start.start())
        return data
    except (_NotFast, tomllib.TOMLDecodeError):
        return tomllib.loads(text)


def _json_safe(text: str) -> bool:
    """Text whose TOML scalars mean the same in JSON: no escapes, no infinity or NaN."""
    return "\\" not in text and "inf" not in text and "nan" not in text


def _fast_scalar(token: str) -> Any:
    if token[0] == '"':
        return tomllib.loads("v = " + token)["v"] if "\\" in token else token[1:-1]
    if token == "true" or token == "false":
        return token == "true"
    if token[-1] in "fn" or "." in token or "e" in token or "E" in token:
        return float(token)
    return int(token)


def _fast_array(items: str) -> list[Any]:
    """The items of an array, "1.5, 2, \"a\"", each already matched as a scalar."""
    if _json_safe(items):
        return json.loads("[" + items + "]")
    return [_fast_scalar(t) for t in _FAST_ITEM.findall(items)]


def _fast_events(text: str, pos: int) -> list[dict[str, Any]]:
    match = _FAST_LINE.match
    events: list[dict[str, Any]] = []
    headers: dict[str, dict[str, Any]] = {}  # the current event's tables, by their path below it
    table: dict[str, Any] | None = None  # where the next keys go
    # What the text builds, in its order, done at the end so that every table holds its keys in
    # tomllib's order: (table, keys, n) puts n keys into a table, a table into its parent among
    # them. The keys are a dict, or the place of a JSON object in `objects`: a run of `key = value`
    # lines in the JSON subset is one object, and all of them are decoded at once.
    steps: list[tuple[dict[str, Any], dict[str, Any] | int, int]] = []
    objects: list[str] = []  # each object's lines, as in the text (made JSON all at once)
    end = len(text)
    while pos < end:
        m = match(text, pos)
        if m.end() == pos:
            raise _NotFast()
        pos = m.end()
        if m["aot"] is not None:
            table = {}
            headers = {"": table}
            events.append(table)
        elif m["table"] is not None:
            if not events:
                raise _NotFast()
            path = m["table"][1:]
            parent = headers.get(path.rpartition(".")[0])
            if parent is None or path in headers:  # a table implied by a deeper one, or defined twice
                raise _NotFast()
            table = headers[path] = {}
            steps.append((parent, {path.rpartition(".")[2]: table}, 1))
        run = m["run"]
        if run is None:
            continue
        if table is None:
            raise _NotFast()
        body = run
        if "[\n" in body:  # arrays one item a line: "[\n    1,\n    2,\n]" -> "[ 1, 2]" (no value holds a newline)
            body = body.replace("\n    ", " ").replace(",\n]", "]")
        lines = body.count("\n") + 1
        if (_json_safe(body) and body[0] != '"' and '\n"' not in body
                and body.count(" = ") == lines):
            # bare keys, every " = " separates a key from its value and every line end ends a
            # value: `k = v` lines are `"k": v` pairs, and JSON reads the values as TOML does
            steps.append((table, len(objects), lines))
            objects.append(body)
        else:
            if _FAST_STRICT_RUN.fullmatch(run) is None:
                raise _NotFast()
            if "[\n" in run:  # each array on one line: "[\n    1,\n    2,\n]" -> "[1, 2]"
                run = run.replace(",\n    ", ", ").replace("[\n    ", "[").replace(",\n]", "]").replace("[\n]", "[]")
            pairs = _FAST_PAIR.findall(run)
            keys = {k: _fast_array(v[1:-1]) if v[0] == "[" else _fast_scalar(v) for _, k, v in pairs}
            steps.append((table, keys, len(pairs)))
    try:
        # the separators between objects hold no " = " and no line end
        decoded = json.loads('[{"' + '}, {"'.join(objects).replace(" = ", '": ').replace("\n", ', "') + "}]"
                             if objects else "[]")
    except ValueError:  # something that is no number
        raise _NotFast() from None
    for table, keys, n in steps:
        size = len(table)
        table.update(decoded[keys] if type(keys) is int else keys)
        if len(table) != size + n:  # a key defined twice
            raise _NotFast()
    return events
