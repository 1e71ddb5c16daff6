"""Helpers for the dashboard's tests: a scripted engine and a way to wait for the screen.

The scripted engine plays a recorded session the way TuneRun emits events, through the engine's
own emitter: the header is written to the session file and handed to the sinks first, then each
event is appended to the file and handed to the sinks, on the engine's thread. Nothing of the
product is replaced: the dashboard, its feed and its worker are the real ones.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Sequence

from kerntune.engine.emitter import Emitter
from kerntune.engine.events import Event, RunStarted
from kerntune.engine.session import Session, SessionWriter, load_session
from kerntune.engine.template import load_template
from kerntune.engine.tune import TuneOptions, TuneRun
from kerntune.tui.app import LiveDashboard
from kerntune.tui.feeds import LiveFeed

HERE = Path(__file__).resolve().parent
SESSIONS = HERE / "data" / "sessions"
VECTOR_ADD = SESSIONS / "vector_add.toml"
HOSTILE = SESSIONS / "hostile.toml"
WIDE = SESSIONS / "wide.toml"  # nine parameters, recorded on PoCL from tests/data/wide


class ScriptedEngine:
    """Emits a recorded session's events like a run; can hold after `hold_after` events."""

    def __init__(self, header: dict, events: Sequence[Event], path: Path, sink: Callable[[Event], None],
                 hold_after: int | None = None):
        self.header, self.events, self.path, self.sink = header, list(events), path, sink
        self.hold_after = hold_after
        self.held = threading.Event()
        self.release = threading.Event()

    def __call__(self) -> Any:
        emitter = Emitter([self.sink])
        emitter.open(SessionWriter(self.path, self.header), self.header)
        try:
            for i, ev in enumerate(self.events):
                if i == self.hold_after:
                    self.held.set()
                    self.release.wait(30)
                emitter.emit(ev)
        finally:
            emitter.writer.close()
        return SimpleNamespace(reason="scripted")


def scripted_live(tmp_path: Path, recorded: Session | Path = VECTOR_ADD, hold_after: int | None = None,
                  telemetry=None, nvml_index: int | None = None, cuda: bool = False) -> tuple[LiveDashboard, ScriptedEngine, TuneRun]:
    """A live dashboard fed by a scripted engine; its run control is a real (idle) TuneRun."""
    session = load_session(recorded) if isinstance(recorded, Path) else recorded
    header, events = dict(session.header), list(session.events)
    if cuda:
        # The same events, as if recorded on an NVIDIA GPU through CUDA (for the telemetry path).
        header["device"] = {**header["device"], "backend": "cuda", "vendor": "NVIDIA", "name": "NVIDIA H100"}
        events = [replace(e, backend="cuda", device="NVIDIA H100") if isinstance(e, RunStarted) else e
                  for e in events]
    path = tmp_path / "live.toml"
    feed = LiveFeed(path)
    engine = ScriptedEngine(header, events, path, feed, hold_after)
    template = load_template(HERE.parent / "templates" / "vector_add")
    run = TuneRun(template, TuneOptions(session_path=path))
    app = LiveDashboard(feed=feed, run=run, engine=engine, session_path=path, nvml_index=nvml_index,
                        telemetry=telemetry)
    return app, engine, run


async def until(pilot, condition: Callable[[], bool], timeout: float = 10.0) -> None:
    """Let the app run frames until `condition()` holds (or fail after `timeout` seconds)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not condition():
        if loop.time() > end:
            raise AssertionError(f"timed out after {timeout} s waiting for {condition}")
        await pilot.pause(0.02)
    await pilot.pause()
