"""Where the dashboard's events come from: a live run, or a session file played back.

Both feeds answer `poll()` with the events that are due now, and the dashboard drains them on a
timer, a batch per frame. The engine thread never touches the UI: it only puts events on a
queue. A replay is paced by the events' own timestamps (`t`), scaled by the chosen speed.
"""

from __future__ import annotations

import math
import queue
import time
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from kerntune.engine.events import Event

from .state import HeaderRead

# Replay speeds, slowest first: multiples of the recorded pace, then as fast as the screen can go.
SPEEDS: tuple[float, ...] = (1.0, 2.0, 5.0, 10.0, 30.0, 100.0, 1000.0, math.inf)
# The most events one frame takes in. A frame stays short (the screen keeps up with keys) and
# the rest waits for the next frame, 50 ms later.
MAX_BATCH = 1000


def speed_label(speed: float) -> str:
    """`10x`, or `max` for as fast as the screen goes."""
    return "max" if math.isinf(speed) else f"{speed:g}x"


def parse_speed(text: str) -> float:
    """A speed from the command line: a multiple such as `10`, `10x` or `0.5`, or `max`."""
    t = text.strip().lower()
    if t in ("max", "inf", "fastest"):
        return math.inf
    t = t.removesuffix("x")
    try:
        v = float(t)
    except ValueError:
        raise ValueError(f"--speed expects a number such as 1, 10 or max, got {text!r}") from None
    if not v > 0 or math.isnan(v):
        raise ValueError(f"--speed must be positive, got {text!r}")
    return v


@dataclass
class Batch:
    """What one poll returned, and when its oldest item became available (for latency figures)."""

    items: list
    since: float  # time.monotonic() when the oldest item was queued or became due


class LiveFeed:
    """An event sink for a driver (called on the engine thread) and the queue the UI drains.

    Before its first event the driver hands over the session's header (the device's limits and
    the template's sources live there, not in the events) and, on a resumed run, the events
    recorded before, so the dashboard shows the whole session without reading the file back.
    """

    def __init__(self, max_batch: int = MAX_BATCH):
        self.max_batch = max_batch
        self._queue: queue.SimpleQueue = queue.SimpleQueue()

    def session_opened(self, header: Mapping, earlier: Sequence[Event] = ()) -> None:
        now = time.monotonic()
        self._queue.put((now, HeaderRead(header)))
        for old in earlier:
            self._queue.put((now, old))

    def __call__(self, ev: Event) -> None:
        self._queue.put((time.monotonic(), ev))

    def poll(self) -> Batch:
        items, since = [], math.inf
        for _ in range(self.max_batch):
            try:
                at, item = self._queue.get_nowait()
            except queue.Empty:
                break
            since = min(since, at)
            items.append(item)
        return Batch(items, since if items else time.monotonic())

    @property
    def done(self) -> bool:
        return False


class ReplayFeed:
    """A recorded session's events, released as the replay clock passes their timestamps.

    The clock runs at `speed` times the recorded pace while playing; at `math.inf` every frame
    takes the next `max_batch` events. `step()` releases exactly one event and pauses;
    `to_end()` releases everything left.
    """

    def __init__(self, events: Sequence[Event], speed: float = 1.0, paused: bool = False,
                 clock: Callable[[], float] = time.monotonic, max_batch: int = MAX_BATCH):
        self.events = list(events)
        self.speed = speed
        self.playing = not paused
        self.clock = clock
        self.max_batch = max_batch
        self.position = 0  # events released so far
        # Recorded timestamps can repeat or (across a resume) restart; the replay never runs backwards.
        self._times: list[float] = []
        last = 0.0
        for ev in self.events:
            last = max(last, float(ev.t))
            self._times.append(last)
        self._session_t = self._times[0] if self._times else 0.0  # the replay clock, in session seconds
        self._anchor = clock()

    # the clock ---------------------------------------------------------------------------------
    @property
    def total(self) -> int:
        return len(self.events)

    @property
    def done(self) -> bool:
        return self.position >= len(self.events)

    @property
    def session_t(self) -> float:
        """Session seconds of the last event shown (the clock as the screen shows it)."""
        return self._times[self.position - 1] if self.position else 0.0

    def _now(self) -> float:
        if not self.playing or math.isinf(self.speed):
            return self._session_t
        return self._session_t + (self.clock() - self._anchor) * self.speed

    def _reanchor(self) -> None:
        self._session_t = self._now()
        self._anchor = self.clock()

    # controls ----------------------------------------------------------------------------------
    def play(self) -> None:
        if not self.playing:
            self._anchor = self.clock()
            self.playing = True

    def pause(self) -> None:
        if self.playing:
            self._reanchor()
            self.playing = False

    def toggle(self) -> None:
        self.pause() if self.playing else self.play()

    def set_speed(self, speed: float) -> None:
        self._reanchor()
        self.speed = speed

    def faster(self) -> float:
        self.set_speed(next((s for s in SPEEDS if s > self.speed), SPEEDS[-1]))
        return self.speed

    def slower(self) -> float:
        self.set_speed(next((s for s in reversed(SPEEDS) if s < self.speed), SPEEDS[0]))
        return self.speed

    def restart(self) -> None:
        """Back to before the first event, keeping the speed and whether it plays."""
        self.position = 0
        self._session_t = self._times[0] if self._times else 0.0
        self._anchor = self.clock()

    def step(self) -> list[Event]:
        """Pause, and release the next event alone."""
        self.pause()
        if self.done:
            return []
        ev = self.events[self.position]
        self.position += 1
        self._session_t = self._times[self.position - 1]
        return [ev]

    def to_end(self) -> list[Event]:
        """Release every event left; the replay stays where it is (playing or paused)."""
        out = self.events[self.position:]
        self.position = len(self.events)
        if self._times:
            self._session_t = self._times[-1]
        return out

    def poll(self) -> Batch:
        now_wall = time.monotonic()
        if not self.playing or self.done:
            return Batch([], now_wall)
        end = self.position
        if math.isinf(self.speed):
            end = min(len(self.events), self.position + self.max_batch)
        else:
            now = self._now()
            limit = min(len(self.events), self.position + self.max_batch)
            while end < limit and self._times[end] <= now:
                end += 1
        out = self.events[self.position:end]
        self.position = end
        if math.isinf(self.speed) and out:
            self._session_t = self._times[end - 1]
        return Batch(out, now_wall)
