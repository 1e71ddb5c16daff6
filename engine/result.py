"""The outcome of evaluating one configuration.

A failing configuration is a Result with a status and a message, never an exception that ends a
run. Results are plain data: they travel from the worker process, into sessions and onto screens.
"""

from __future__ import annotations

from dataclasses import MISSING, asdict, dataclass, fields
from typing import Any, Callable, Iterable, Mapping

STATUSES = (
    "ok",  # compiled, verified and timed
    "suspect",  # verified, but measured faster than its speed-of-light bound: not ranked
    "compile_error",
    "pruned",  # broke a limit known only after compiling (registers, shared memory, spills)
    "launch_error",
    "wrong_result",
    "wrote_input",  # changed an input buffer
    "out_of_bounds",  # wrote into the guard region before or after a buffer
    "timeout",
    "crashed",
)
FAILED = tuple(s for s in STATUSES if s not in ("ok", "suspect"))


class Rejected(Exception):
    """A check found the configuration wrong: the status its result gets, and why."""

    def __init__(self, status: str, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Resources:
    """What a compiled kernel uses, as reported by the backend."""

    registers: int = 0
    shared_static: int = 0
    local_bytes: int = 0
    max_threads: int = 0
    spills: int = 0


@dataclass(frozen=True)
class Result:
    """One configuration's compile, verification and timing record."""

    config: Mapping[str, Any]
    status: str
    message: str = ""
    times_us: tuple[float, ...] = ()
    median_us: float | None = None
    spread: float | None = None  # (p75 - p25) / median, a fraction
    min_us: float | None = None
    compile_s: float = 0.0
    verify_s: float = 0.0
    time_s: float = 0.0
    resources: Resources | None = None
    occupancy: float | None = None
    bandwidth_gbs: float | None = None
    gflops: float | None = None
    sol_us: float | None = None
    sol_fraction: float | None = None  # sol_us / median_us: 1.0 is the hardware's limit
    max_error: float | None = None  # largest error seen in verification, relative to tolerance
    seeds: tuple[int, ...] = ()
    grid: tuple[int, ...] = ()
    block: tuple[int, ...] = ()
    cached: bool = False  # the binary came from the compile cache
    # The device that measured it, in runs over several ("cuda:1", "host/cuda:0"); "" with one.
    device: str = ""
    # What disturbed its measurement even after it was measured again (other processes, a clock
    # that dropped, above its speed of light, a large spread: engine/disturb.py); "" when quiet.
    disturbed: str = ""
    # Joules per launch from the device's energy counter (`--objective energy|edp`: engine/energy.py).
    energy_j: float | None = None

    @property
    def ranked(self) -> bool:
        return self.status == "ok" and self.median_us is not None

    @property
    def verified(self) -> bool:
        return self.status in ("ok", "suspect")

    def to_dict(self) -> dict[str, Any]:
        """A TOML-ready dict (TOML has no null: absent fields are left out)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if v is None or (f.name in ("device", "disturbed") and not v):  # nothing to say
                continue
            if f.name == "resources":
                v = asdict(v)
            elif f.name == "config":
                v = dict(v)
            elif isinstance(v, tuple):
                v = list(v)
            out[f.name] = v
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Result":
        """Rebuild a result, checking the type of every field (it may come from a file)."""
        kw: dict[str, Any] = {}
        for k, v in d.items():
            check = _CHECKS.get(k)
            if check is not None:  # a field this kerntune does not know is left out
                kw[k] = check(k, v)
        if "config" not in kw or "status" not in kw:
            raise ValueError("a result needs config and status")
        if kw["status"] not in STATUSES:
            raise ValueError(f"unknown status {kw['status']!r}")
        return _built(cls, _DEFAULTS, kw)


def _built(cls: type, defaults: dict[str, Any], values: dict[str, Any]) -> Any:
    """A frozen dataclass instance from values already checked, without its generated __init__:
    a session holds thousands of results, and calling __init__ with twenty-odd keywords (each set
    through object.__setattr__, as frozen classes must) was most of the cost of building one.
    The classes built this way have no __post_init__ and no mutable defaults."""
    obj = object.__new__(cls)
    state = obj.__dict__
    state.update(defaults)
    state.update(values)
    return obj


def ranked(results: Iterable[Result]) -> list[Result]:
    """The verified, timed results, fastest first, equal times in the order given: the
    leaderboard's order (rank 1 is the best)."""
    return sorted((r for r in results if r.ranked), key=_median)


def fastest(results: Iterable[Result]) -> Result | None:
    """The first of `ranked(results)`, found without sorting them all; None when none is ranked."""
    return min((r for r in results if r.ranked), key=_median, default=None)


def _median(r: Result) -> float:
    return r.median_us  # type: ignore[return-value]  # ranked: never None


_NUMBER_TYPES = frozenset((int, float))  # exact types: a bool is not a number here


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


# The checks of a result read from a file, one per field: each returns the value to keep, or raises
# ValueError with one line. Exact types are tried first (all a file holds), the isinstance tests
# after, so that a number of a subclass (numpy's float64) passes as before.

_VALUE_TYPES = frozenset((int, float, bool, str))


def is_table(v: Any) -> bool:
    """Whether a value read from a file is a table: a dict, or any Mapping (tried second, as the
    isinstance test of typing's Mapping is slow)."""
    return type(v) is dict or isinstance(v, Mapping)


def _check_config(k: str, v: Any) -> dict[str, Any]:
    if not is_table(v) or not (_VALUE_TYPES.issuperset(map(type, v.values())) or all(
            isinstance(x, (int, float, bool, str)) for x in v.values())):
        raise ValueError("config must be a table of values")
    return dict(v)


def _check_resources(k: str, v: Any) -> Resources:
    if not is_table(v) or not (_NUMBER_TYPES.issuperset(map(type, v.values())) or all(
            _is_number(x) for x in v.values())):
        raise ValueError("resources must be a table of numbers")
    try:
        counts = {a: int(b) for a, b in v.items() if a in _RESOURCE_DEFAULTS}
    except (OverflowError, ValueError):  # infinity or NaN
        raise ValueError("resources must be finite numbers") from None
    return _built(Resources, _RESOURCE_DEFAULTS, counts)


def _check_numbers(k: str, v: Any) -> tuple:
    # the types of every element at C speed: sessions hold hundreds of thousands
    if not isinstance(v, list) or not _NUMBER_TYPES.issuperset(map(type, v)):
        raise ValueError(f"{k} must be a list of numbers")
    return tuple(v)


def _check_number(k: str, v: Any) -> Any:
    if type(v) not in _NUMBER_TYPES and not _is_number(v):
        raise ValueError(f"{k} must be a number, got {v!r}")
    return v


def _check_string(k: str, v: Any) -> str:
    if not isinstance(v, str):
        raise ValueError(f"{k} must be a string")
    return v


def _check_flag(k: str, v: Any) -> bool:
    if not isinstance(v, bool):
        raise ValueError(f"{k} must be true or false")
    return v


def _check_for(name: str, kind: str) -> Callable[[str, Any], Any]:
    """The check of a Result field, from its name and its annotation's text."""
    if name == "resources":
        return _check_resources
    if name == "config":
        return _check_config
    if kind.startswith("tuple"):
        return _check_numbers
    if kind.startswith("float"):
        return _check_number
    if kind == "str":
        return _check_string
    if kind == "bool":
        return _check_flag
    raise TypeError(f"Result.{name}: no check for a field of type {kind}")


_CHECKS: dict[str, Callable[[str, Any], Any]] = {f.name: _check_for(f.name, str(f.type)) for f in fields(Result)}
_DEFAULTS = {f.name: f.default for f in fields(Result) if f.default is not MISSING}
_RESOURCE_DEFAULTS = {f.name: f.default for f in fields(Resources)}


# The words for the two configurations every run has: the original kernel (no parameters, the
# spec's own source and launch) and the template's default configuration (every parameter at its
# default, which reproduces the original).
ORIGINAL = "original"
DEFAULT = "default"


def value_text(v: Any) -> str:
    """A parameter's value as a configuration writes it: flags as 0 and 1."""
    return str(int(v)) if isinstance(v, bool) else str(v)


def config_text(config: Mapping[str, Any], sep: str = " ", names: Mapping[str, str] | None = None,
                text: Callable[[Any], str] = str) -> str:
    """A configuration as NAME=value pairs joined by `sep` (flags as 0 and 1); `names` shortens
    names, `text` writes each name and value (the UI makes them printable). The original's is ""."""
    names = names or {}
    return sep.join(f"{text(names.get(k, k))}={text(value_text(v))}" for k, v in config.items())


def config_label(config: Mapping[str, Any]) -> str:
    """A configuration as NAME=value words; the original kernel's (no parameters) is `original`."""
    return config_text(config) or ORIGINAL


def config_key(config: Mapping[str, Any]) -> str:
    """The canonical text of a configuration, used to recognise it again (resume, replay)."""
    return config_text(config, ",")
