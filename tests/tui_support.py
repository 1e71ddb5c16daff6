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
from kerntune.engine.events import BestImproved, ConfigEvaluated, Event, Note, RunFinished, RunStarted, WinnerVerified
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
    feed = LiveFeed()
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


# A run over two GPUs ------------------------------------------------------------------------------
H200 = {
    "backend": "cuda", "name": "NVIDIA H200", "vendor": "NVIDIA", "compute_capability": "9.0",
    "driver": "CUDA 13.0", "max_threads_per_block": 1024, "max_block_dims": [1024, 1024, 64],
    "max_grid_dims": [2147483647, 65535, 65535], "max_shared_per_block": 49152,
    "max_shared_per_block_optin": 232448, "max_shared_per_sm": 233472, "max_threads_per_sm": 2048,
    "max_blocks_per_sm": 32, "max_regs_per_block": 65536, "max_regs_per_sm": 65536, "sm_count": 132,
    "warp_size": 32, "l2_bytes": 52428800, "global_mem_bytes": 150754820096, "clock_mhz": 1980,
    "memory_clock_mhz": 2619, "memory_bus_width": 6144, "peak_bandwidth_gbs": 4800.0, "peak_gflops": 66900.0,
    "peaks_source": "datasheet",
}
GPU_SCALE = 250.0  # the recorded CPU times over what a GPU of this class takes


def two_device_session(path: Path) -> Session:
    """vector_add's recorded run as if measured on two H200s at once (`--devices 0,1`): the results
    alternate between cuda:0 and cuda:1 (the second 1% slower), the last fails to launch on cuda:1,
    and the winner is timed again on both. Written to `path` and loaded back, as a replay reads it."""
    recorded = load_session(VECTOR_ADD)
    header = {**recorded.header, "device": H200}
    events: list[Event] = []
    for ev in recorded.events:
        if isinstance(ev, RunStarted):
            events.append(replace(ev, backend="cuda", device=H200["name"]))
            events.append(Note(ev.t + 0.01, "evaluating on 2 devices at once: cuda:0, cuda:1", source="engine"))
        elif isinstance(ev, ConfigEvaluated):
            label = f"cuda:{ev.index % 2}"
            k = (1.0 if label == "cuda:0" else 1.01) / GPU_SCALE
            r = ev.result
            if ev.index == 23:
                r = replace(r, status="launch_error", message="too many resources requested for launch",
                            times_us=(), median_us=None, spread=None, min_us=None, bandwidth_gbs=None,
                            gflops=None, sol_fraction=None)
            else:  # 12 bytes and one flop an element, against the H200's peak bandwidth
                n, us = recorded.space["problem"]["n"], r.median_us * k
                sol_us = 12 * n / (H200["peak_bandwidth_gbs"] * 1e3)
                r = replace(r, times_us=tuple(t * k for t in r.times_us), median_us=us, min_us=r.min_us * k,
                            bandwidth_gbs=12 * n / us / 1e3, gflops=n / us / 1e3, sol_us=sol_us,
                            sol_fraction=sol_us / us)
            events.append(replace(ev, result=replace(r, device=label)))
        elif isinstance(ev, BestImproved):
            measured = next(e.result for e in reversed(events) if isinstance(e, ConfigEvaluated))
            events.append(replace(ev, median_us=measured.median_us))
        elif isinstance(ev, Note):
            continue  # the CPU's cache note
        elif isinstance(ev, RunFinished):
            best = next(e.result for e in events if isinstance(e, ConfigEvaluated) and e.result.config == ev.best)
            events.append(replace(ev, verified=ev.verified - 1, best_us=best.median_us))
        else:
            events.append(ev)
            if isinstance(ev, WinnerVerified):
                us = next(r.median_us for r in recorded.results() if r.config == ev.config) / GPU_SCALE
                events.append(Note(ev.t + 0.05, f"the winner on every device: cuda:0 {us:.4g} us, cuda:1 "
                                   f"{us * 1.01:.4g} us; spread 1.0%, within the timing noise (9%)",
                                   source="devices"))
    with SessionWriter(path, header) as writer:
        for ev in events:
            writer.write(ev)
    return load_session(path)
