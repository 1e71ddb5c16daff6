"""A run's clock, the way out for its events, and its controls (stop, pause, resume).

Both drivers, a tuning run (engine/tune.py) and the agent loop (engine/loop.py), send every
event through an `Emitter`: the session file first, then each sink (the dashboard's feed, the
text renderer). The agent loop hands its own emitter to each round's tuning run, so one clock,
one open file and one stop button serve the whole loop.
"""

from __future__ import annotations

import threading
import time
import weakref
from typing import Callable, Iterable, Mapping, Protocol, Sequence, runtime_checkable

from .events import Event, Note
from .session import SessionWriter

Sink = Callable[[Event], None]

_EMITTERS: "weakref.WeakSet[Emitter]" = weakref.WeakSet()  # the runs of this process, for `cut`


class RunCut(KeyboardInterrupt):
    """The run was cut from outside (SIGTERM, SIGHUP): raised in the main thread like Ctrl-C's
    KeyboardInterrupt, so that every child ends with the run; its text is the reason the session
    records."""


def cut(reason: str) -> None:
    """Stop every run of this process (the agent loop's next round does not start), then raise
    RunCut in the caller (a signal handler, in the main thread)."""
    for em in list(_EMITTERS):
        em.stop(reason)
    raise RunCut(reason)


@runtime_checkable
class HeaderSink(Protocol):
    """A sink that also wants the session's header (and, on a resumed run, the events recorded
    before), handed over in memory before the first event."""

    def session_opened(self, header: Mapping, earlier: Sequence[Event]) -> None: ...


class Emitter:
    """Sends events out with the run's clock; `stop`, `pause` and `resume` may come from other threads."""

    def __init__(self, sinks: Iterable[Sink] = (), started: float | None = None):
        self.sinks = list(sinks)
        self.writer: SessionWriter | None = None
        self.offset = 0.0  # seconds already on the clock of a resumed session
        self._t0 = time.monotonic() if started is None else started
        self._stop = threading.Event()
        self._running = threading.Event()
        self._running.set()
        self.stop_reason = "stopped"
        self._said: set[tuple[str, str]] = set()
        _EMITTERS.add(self)

    # the clock and the events ------------------------------------------------------------------
    def now(self) -> float:
        """Seconds since the run started (and, resumed, since the session's first run started)."""
        return round(self.offset + time.monotonic() - self._t0, 4)

    def open(self, writer: SessionWriter, header: Mapping, earlier: Sequence[Event] = ()) -> None:
        """Write to `writer` from now on, and hand its header to the sinks that want it."""
        self.writer = writer
        for sink in self.sinks:
            if isinstance(sink, HeaderSink):
                sink.session_opened(header, tuple(earlier))

    def emit(self, ev: Event) -> None:
        if self.writer is not None:
            self.writer.write(ev)
        for sink in self.sinks:
            sink(ev)

    def note(self, text: str, source: str = "engine", once: bool = False) -> None:
        """A line of the run's own; with `once`, a line said before (by an earlier run of the same
        agent loop, which calibrates again) is not said again."""
        if once:
            if (source, text) in self._said:
                return
            self._said.add((source, text))
        self.emit(Note(self.now(), text, source))

    # the controls ------------------------------------------------------------------------------
    def stop(self, reason: str = "stopped") -> None:
        self.stop_reason = reason
        self._stop.set()
        self._running.set()

    def pause(self) -> None:
        self._running.clear()

    def resume(self) -> None:
        self._running.set()

    @property
    def paused(self) -> bool:
        return not self._running.is_set()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def wait_running(self) -> None:
        """Block while paused."""
        self._running.wait()


class Controlled:
    """The controls of a driver that sends its events through `self.events` (an Emitter)."""

    events: Emitter

    def stop(self, reason: str = "stopped") -> None:
        """End after the configuration in flight; the session keeps everything."""
        self.events.stop(reason)

    def pause(self) -> None:
        self.events.pause()

    def resume(self) -> None:
        self.events.resume()

    @property
    def paused(self) -> bool:
        return self.events.paused

    @property
    def stop_reason(self) -> str:
        return self.events.stop_reason

    @property
    def sinks(self) -> list[Sink]:
        return self.events.sinks
