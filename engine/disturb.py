"""What disturbs a measurement while it runs, and measuring again when something did.

On a CPU device (OpenCL on the host's cores) the disturbances are other processes' CPU time and a
clock that dropped: read from /proc/stat, /proc/PID/stat, /proc/loadavg and cpufreq (or
/proc/cpuinfo), the standard library only. On CUDA they are the GPU's clock event ("throttle")
reasons that slow it (thermal, hardware slowdown, power brake) and other processes with a context
on the GPU, from NVML. A thread of the evaluation worker samples them every PERIOD seconds, so a
configuration's evaluation costs nothing more to watch; `Watch.during(t0, t1)` says what disturbed
the device between two moments.

A configuration measured during a disturbance is timed again (its timed launches checked as
always), as is one above 100% of its speed-of-light bound or with a spread over SPREAD_LIMIT; the
quiet measurement is kept, else the steadier one, marked with what disturbed it (Result.disturbed).
A host that stays busy is not measured again forever: after BUSY_STREAK configurations in a row
stayed disturbed, only every BUSY_PROBE-th is, and the run says in one line that no quiet
measurement could be had.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from .result import Result

PERIOD = 0.1
OTHERS_CORES = 0.5  # other processes using this many cores disturb a measurement on the CPU
CLOCK_DROP = 0.85  # a clock below this fraction of the highest seen in the run
SPREAD_LIMIT = 0.25  # (p75 - p25) / median: a timing this spread out is measured again
AGAIN = 1  # measurements more, at most, of a configuration measured during a disturbance
BUSY_STREAK = 3
BUSY_PROBE = 10
# NVML clock event reasons that slow the GPU for reasons outside the kernel
GPU_REASONS = ("hardware slowdown", "software thermal", "hardware thermal", "power brake")


@dataclass(frozen=True)
class Sample:
    """What was seen over one sampling period, [t0, t1] (time.monotonic())."""

    t0: float
    t1: float
    others_cores: float | None = None
    load: float | None = None
    clock_mhz: float | None = None
    reasons: tuple[str, ...] = ()
    gpu_others: int | None = None


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def cpu_ticks() -> tuple[int, int] | None:
    """(busy, total) clock ticks of all CPUs since boot, from /proc/stat."""
    line = _read("/proc/stat").split("\n", 1)[0].split()
    if len(line) < 5 or line[0] != "cpu":
        return None
    values = [int(x) for x in line[1:] if x.isdigit()]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle and iowait
    return sum(values) - idle, sum(values)


def process_ticks(pid: int) -> int:
    """User and system clock ticks a process (all its threads) has used, from /proc/PID/stat."""
    text = _read(f"/proc/{pid}/stat")
    fields = text.rpartition(")")[2].split()
    if len(fields) < 13:
        return 0
    return int(fields[11]) + int(fields[12])


def load_average() -> float | None:
    first = _read("/proc/loadavg").split()
    try:
        return float(first[0])
    except (IndexError, ValueError):
        return None


def cpu_clock_mhz() -> float | None:
    """The mean current clock of the host's CPUs: cpufreq where the kernel exposes it, else
    /proc/cpuinfo's `cpu MHz`."""
    found = []
    for d in sorted(Path("/sys/devices/system/cpu").glob("cpu[0-9]*/cpufreq/scaling_cur_freq")):
        try:
            found.append(int(d.read_text()) / 1000.0)
        except (OSError, ValueError):
            pass
    if not found:
        for line in _read("/proc/cpuinfo").splitlines():
            name, sep, value = line.partition(":")
            if sep and name.strip() == "cpu MHz":
                try:
                    found.append(float(value))
                except ValueError:
                    pass
    return sum(found) / len(found) if found else None


def _ours(pid: int, root: int) -> bool:
    """Whether `pid` is `root` or descends from it (a spare worker, memcheck's child, ...)."""
    for _ in range(16):
        if pid == root:
            return True
        fields = _read(f"/proc/{pid}/stat").rpartition(")")[2].split()
        if len(fields) < 2:
            return False
        pid = int(fields[1])
        if pid <= 1:
            return False
    return False


class Watch:
    """Samples what disturbs a device in a thread of its own; `during(t0, t1)` reads them."""

    def __init__(self, kind: str, device: int = 0, root: int | None = None):
        self.kind = kind  # "cpu" or "cuda"
        self.device = device
        self.root = root if root is not None else os.getppid()  # the run's own process tree
        self.samples: deque[Sample] = deque(maxlen=600)
        self.top_clock = 0.0
        self._stop = threading.Event()
        self._nvml: Any = None
        self._cpu = cpu_ticks() if kind == "cpu" else None
        self._own = self._own_ticks() if kind == "cpu" else 0
        self._t = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="kerntune-watch", daemon=True)

    def start(self) -> "Watch":
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()

    def _own_ticks(self) -> int:
        return process_ticks(os.getpid()) + (process_ticks(self.root) if self.root > 1 else 0)

    def _run(self) -> None:
        while not self._stop.wait(PERIOD):
            try:
                s = self.sample()
            except Exception:  # a reading that fails says nothing; the run goes on
                continue
            if s is not None:
                self.samples.append(s)

    def sample(self) -> Sample | None:
        """One reading since the last one."""
        now = time.monotonic()
        t0, self._t = self._t, now
        if self.kind == "cpu":
            return self._cpu_sample(t0, now)
        if self.kind == "cuda":
            return self._gpu_sample(t0, now)
        return None

    def _cpu_sample(self, t0: float, t1: float) -> Sample | None:
        ticks, own = cpu_ticks(), self._own_ticks()
        before, before_own = self._cpu, self._own
        self._cpu, self._own = ticks, own
        if ticks is None or before is None:
            return None
        cores = os.cpu_count() or 1
        span = (ticks[1] - before[1]) / cores  # ticks of one CPU over the period
        others = None
        if span >= 5:  # fewer ticks than that say little (a tick is 10 ms)
            others = max(0.0, (ticks[0] - before[0]) - (own - before_own)) / span
        clock = cpu_clock_mhz()
        if clock:
            self.top_clock = max(self.top_clock, clock)
        return Sample(t0, t1, others_cores=others, load=load_average(), clock_mhz=clock)

    def _gpu_sample(self, t0: float, t1: float) -> Sample | None:
        from . import nvml

        if self._nvml is None:
            try:
                self._nvml = nvml.telemetry_reader(self.device)
            except nvml.NVMLUnavailable:
                self._stop.set()
                return None
        reading = self._nvml()
        clock = float(reading.sm_clock_mhz) or None
        if clock:
            self.top_clock = max(self.top_clock, clock)
        others = None
        if reading.pids is not None and os.getpid() in reading.pids:  # the pids are this host's
            others = sum(1 for p in reading.pids if not _ours(p, self.root))
        return Sample(t0, t1, clock_mhz=clock, reasons=tuple(r for r in reading.reasons if r in GPU_REASONS),
                      gpu_others=others)

    def during(self, t0: float, t1: float) -> str:
        """What disturbed the device between t0 and t1 (time.monotonic()), in one phrase: ""
        when nothing did, or nothing was sampled then."""
        seen = [s for s in list(self.samples) if s.t1 >= t0 and s.t0 <= t1 + PERIOD]
        return self.why(seen)

    def why(self, seen: list[Sample]) -> str:
        """The disturbances of some samples, each kind once at its worst."""
        out = []
        busy = [s for s in seen if s.others_cores is not None and s.others_cores >= OTHERS_CORES]
        if busy:
            worst = max(busy, key=lambda s: s.others_cores or 0.0)
            load = f", load average {worst.load:.1f}" if worst.load is not None else ""
            out.append(f"other processes used up to {worst.others_cores:.1f} cores{load}")
        clocks = [s.clock_mhz for s in seen if s.clock_mhz]
        if clocks and self.top_clock and min(clocks) < CLOCK_DROP * self.top_clock:
            low = min(clocks)
            out.append(f"clock down to {low:.0f} MHz, {low / self.top_clock:.0%} of the highest seen")
        reasons = list(dict.fromkeys(r for s in seen for r in s.reasons))
        if reasons:
            out.append("clock slowed: " + ", ".join(reasons))
        others = max((s.gpu_others or 0 for s in seen), default=0)
        if others:
            out.append(f"{others} other process{'es' if others > 1 else ''} on the GPU")
        return "; ".join(out)


def watch_for(backend: Any, device: int) -> Watch | None:
    """A started Watch for the device a backend measures on: its host's CPUs for an OpenCL CPU
    device, NVML for CUDA; None for others (an OpenCL GPU: nothing here reads it)."""
    if os.environ.get("KERNTUNE_WATCH") == "off":
        return None
    if backend.name == "cuda":
        return Watch("cuda", device).start()
    if backend.name == "opencl" and backend.limits.extra.get("device_type") == "cpu" and cpu_ticks() is not None:
        return Watch("cpu", device).start()
    return None


class Steadier:
    """Measures a configuration again when its measurement was disturbed, above its speed of
    light or too spread out; keeps the quiet one, else the steadier. One per worker."""

    def __init__(self, watch: Watch | None):
        self.watch = watch
        self.streak = 0  # configurations in a row that stayed disturbed after measuring again
        self.skipped = 0

    def reasons(self, r: Result, t0: float) -> str:
        found = []
        if self.watch is not None:
            seen = self.watch.during(t0, time.monotonic())
            if seen:
                found.append(seen)
        if r.sol_fraction is not None and r.sol_fraction > 1.0:
            found.append(f"{100 * r.sol_fraction:.0f}% of the speed of light")
        if r.spread is not None and r.spread > SPREAD_LIMIT:
            found.append(f"spread {100 * r.spread:.0f}%")
        return "; ".join(found)

    def settle(self, r: Result, t0: float, again: Callable[[Result], Result]) -> Result:
        """`r` as measured from t0, or measured again by `again` (Evaluator.measure_again) when
        something disturbed it; the result kept says what disturbed it, if anything still did."""
        if r.status not in ("ok", "suspect") or r.median_us is None:
            return r
        why = self.reasons(r, t0)
        if not why:
            return r
        above = r.sol_fraction is not None and r.sol_fraction > 1.0
        busy = self.streak >= BUSY_STREAK
        if busy and not above:
            self.skipped += 1
            if self.skipped % BUSY_PROBE:
                return replace(r, disturbed=why)
        kept, kept_why = r, why
        for _ in range(AGAIN if not busy else 1):
            t1 = time.monotonic()
            redo = again(replace(r, status="ok", message=""))
            if redo.status not in ("ok", "suspect"):
                return redo  # a check of its timed launches failed: that is its result
            redo_why = self.reasons(redo, t1)
            if not redo_why:
                kept, kept_why = redo, ""
                break
            # a ranked measurement before a suspect one, then the steadier
            if (redo.status == "ok", -(redo.spread or 0.0)) > (kept.status == "ok", -(kept.spread or 0.0)):
                kept, kept_why = redo, redo_why
        self.streak = 0 if not kept_why else self.streak + 1
        return replace(kept, disturbed=kept_why)
