"""The messages between a run and its worker process (engine/worker.py, engine/standby.py), as
typed records: what the run asks, and what the worker answers. Plain data, pickled through the
pipe; a reply names its fields, never a position in a tuple or a status inside a string."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

# what the run asks --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Evaluate:
    """Measure one configuration; `built` is (binary, info, cached, seconds) from the compile pool,
    or None for the worker to compile it."""

    config: Mapping[str, Any]
    built: tuple | None = None


@dataclass(frozen=True)
class VerifyAgain:
    """Check a configuration on new inputs drawn from `seeds` (the winner's final check)."""

    config: Mapping[str, Any]
    seeds: tuple[int, ...]


@dataclass(frozen=True)
class Reproduce:
    """Whether a configuration gives the original's outputs on new inputs (the gate's check)."""

    config: Mapping[str, Any]
    seeds: tuple[int, ...]


@dataclass(frozen=True)
class Pair:
    """Time the leaders and the original together, round by round (engine/retime.py's request)."""

    request: Any


@dataclass(frozen=True)
class Stop:
    """End the worker."""


# what the worker answers ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Ready:
    """The worker stands ready for the run: what it found (limits, calibration, startup, ...)."""

    info: Mapping[str, Any]


@dataclass(frozen=True)
class Standing:
    """A spare worker opened its device and waits for a run (engine/standby.py)."""

    info: Mapping[str, Any]


@dataclass(frozen=True)
class Failed:
    """The worker could not start, in one line."""

    text: str


@dataclass(frozen=True)
class Evaluated:
    """A configuration's result (Result.to_dict()); `ending`: the worker ends after this one (what
    was sent after goes to a new one); `again`: its references were found changed, so the failure
    is measured again in a fresh worker."""

    result: Mapping[str, Any]
    ending: bool = False
    again: bool = False


@dataclass(frozen=True)
class Checked:
    """A check's outcome: passed, or the status it failed with (a Result status) and why. Failed
    with no status: the check itself could not run (the template's reference failed or ran past
    its time limit on the new inputs), which says nothing of the configuration. `ending`: the
    worker ends after this answer (a reference call it gave up on still runs there)."""

    ok: bool
    status: str = ""
    text: str = ""
    ending: bool = False

    @property
    def message(self) -> str:
        """The outcome in one line: "" when it passed, else `status: why`."""
        return "" if self.ok else f"{self.status}: {self.text}" if self.status else self.text


@dataclass(frozen=True)
class Reproduced:
    """The gate's check: passed or not, the worst error over its tolerance, and why not."""

    ok: bool
    worst: float
    text: str
    ending: bool = False  # as Checked's


@dataclass(frozen=True)
class Paired:
    """The paired rounds' plain-data answer (engine/retime.py), or {"error": text}."""

    answer: Mapping[str, Any] = field(default_factory=dict)
