"""The timing of the protocol: warm-up, repetitions sized from it, every launch on inputs no
earlier launch of the configuration saw, its outputs poisoned, the cache flushed between launches,
some launches checked like a verification run (engine/checks.py); the times' median, spread and
speed-of-light bound, and the energy per launch where the device counts it.

engine/evaluate.py's Evaluator times a configuration here once its checks have passed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping

import numpy as np

from .backends import Backend, LaunchError
from .buffers import GuardedBuffers
from .checks import DEVICE_CLOSE_DTYPES, Checks
from .energy import NoEnergyCounter, counter_reader
from .input_sets import InputSets
from .inputs import InputPool, Inputs, random_change
from .result import Result
from .sol import SUSPECT_MARGIN, sol_time_us, tensor_bound
from .space import Geometry
from .template import Problem, Template

# Timed launches checked per configuration: as many as TIMING_CHECK_BYTES of outputs read back
# allow, at most MAX_TIMED_CHECKS, never fewer than two (the last, and one in the first half).
TIMING_CHECK_BYTES = 16 * 2**20
MAX_TIMED_CHECKS = 16
# The energy counter moves in steps of milliseconds of power: each configuration's energy is
# read over at least this much time of back-to-back launches (and at most ENERGY_LAUNCHES).
ENERGY_S = 0.1
ENERGY_LAUNCHES = 20_000
MIN_ENERGY_LAUNCHES = 10


@dataclass(frozen=True)
class TimingPolicy:
    """How each configuration is timed."""

    warmup: int = 3
    min_repeats: int = 10
    max_repeats: int = 200
    target_s: float = 0.05  # device time spent timing one configuration, at most
    flush: bool = True
    # Repetitions stop early, in batches of `batch`, once the median is known to within this
    # fraction of itself (95% confidence, from the spread of the times so far); 0 always runs
    # the full count. A steady kernel is timed in 25-50 launches, a noisy one up to the cap.
    precision: float = 0.01
    batch: int = 25
    # Read the device's energy counter around ENERGY_S of back-to-back launches of each verified
    # configuration (`--objective energy|edp`): joules per launch in its result.
    energy: bool = False


class Timing:
    """Timed launches of one template's kernels at the tuning size, and what their times say."""

    def __init__(self, backend: Backend, template: Template, problem: Problem, policy: TimingPolicy,
                 buffers: GuardedBuffers, sets: InputSets, checks: Checks, rng: np.random.Generator):
        self.backend = backend
        self.template = template
        self.policy = policy
        self.buffers = buffers
        self.sets = sets
        self.checks = checks
        self.rng = rng  # the system's entropy, never the run's seed
        self.used_variants: set[int] = set()  # the changed sets this configuration's checked launches saw
        self.energy_read: Callable[[], float | None] | None = None  # the energy counter, once opened
        self.roles = {a.name: a.role for a in template.arguments}
        env = problem.values
        self.bytes_moved = float(template.cost_bytes.evaluate(env))
        self.flops = float(template.cost_flops.evaluate(env))
        self.sol_us = sol_time_us(self.bytes_moved, self.flops, backend.limits,
                                  tensor=tensor_bound(template, backend.name))
        cache = backend.limits.l2_bytes
        # The bound is only a fair test when no part of the working set can still be cached.
        self.cold_cache = policy.flush and (backend.flush_bytes() >= cache or self.bytes_moved >= 2 * cache)

    def measure(self, kernel: Any, geo: Geometry) -> list[float]:
        """Warm up, size the repetition count from the warm-up, then time with flushes.

        Every launch finds its outputs poisoned and runs on inputs no earlier launch of the
        configuration saw: one of the tuning size's input sets, switched at random, with a few
        elements changed at a random place (`stage`). One launch at a random place in the first
        half of the repetitions and the last one are checked like a verification run (raises
        Rejected), on changed sets whose references were computed ahead. Call it after a check
        (which arms the guards)."""
        p = self.policy
        variants = self.variants()
        for k in range(len(variants)):  # drawn before the first timed launch: none during them
            variants[k]
        warm = self.launches(kernel, geo, max(p.warmup, 1), ())
        est_us = max(float(np.median(warm)), 1e-3)
        repeats = int(min(p.max_repeats, max(p.min_repeats, math.ceil(p.target_s * 1e6 / est_us))))
        step = max(p.batch, p.min_repeats)
        if p.precision <= 0 or repeats <= step:
            return self.launches(kernel, geo, repeats, self.checked_launches(repeats))
        # In batches, each checked like a whole measurement (its last launch in full, one at
        # random in its first half, ...): wherever the timing stops, its last launch was checked.
        times: list[float] = []
        while len(times) < repeats:
            n = min(step, repeats - len(times))
            times += self.launches(kernel, geo, n, self.checked_launches(n, MAX_TIMED_CHECKS // 4))
            if len(times) >= p.min_repeats and median_known(times, p.precision):
                break
        return times

    def checked_launches(self, repeats: int, most: int = MAX_TIMED_CHECKS) -> tuple[int, ...]:
        """Which timed launches are checked: the last, one at random in the first half, and as
        many more at random as TIMING_CHECK_BYTES of outputs read back allow, up to
        MAX_TIMED_CHECKS."""
        lo, hi = max(1, repeats // 4), max(2, repeats // 2)
        chosen = {repeats - 1, int(self.rng.integers(lo, hi)) if hi > lo else 0}
        # outputs the device compares are not read back: only a failure costs a transfer
        on_device = self.checks.device_close is not None
        per_check = sum(self.buffers.nbytes(a, 0) for a in self.template.arguments
                        if a.is_output and not (on_device and a.dtype in DEVICE_CLOSE_DTYPES)) or 1
        extra = min(repeats, most, TIMING_CHECK_BYTES // per_check) - len(chosen)
        rest = [k for k in range(repeats) if k not in chosen]
        if extra > 0 and rest:
            chosen.update(int(k) for k in self.rng.choice(rest, size=min(extra, len(rest)), replace=False))
        return tuple(sorted(k for k in chosen if 0 <= k < repeats))

    def variants(self) -> InputPool:
        """The timed launches' changed sets (engine/input_sets.py), within its bytes of references."""
        return self.sets.variants(sum(self.buffers.nbytes(a, 0) for a in self.template.arguments if a.is_output))

    def stage(self, base: Inputs, change: Mapping[str, tuple[int, int, int]]) -> None:
        """Queue, without waiting, what makes the working buffers at the tuning size hold `base`
        with `change` made: the whole set copied where another set (or a read-write buffer) is
        there, else the last change undone; then the change."""
        now, last = self.buffers.staged
        inout = any(a.role == "inout" for a in self.template.arguments)
        if now is not base or inout:
            self.buffers.restore(0, base, wait=False)
        else:
            self.buffers.copy_runs(base.device, last, 0)
        values = self.sets.change_values()
        self.buffers.copy_runs({n: self.buffers.resident(v) for n, v in values.items() if n in change}, change, 1)
        self.buffers.staged = (base, dict(change))

    def launches(self, kernel: Any, geo: Geometry, count: int, checked: tuple[int, ...]) -> list[float]:
        """`count` timed launches, those in `checked` checked; their times in order. A checked
        launch on a changed set this configuration has seen already (more checks than changed
        sets) is not counted: an unchecked launch on a new change is timed in its place."""
        pool, variants = self.sets.pool(0), self.variants()
        bases = [pool[i] for i in range(len(pool)) if pool.ready(i)] or [pool[0]]
        poisons = self.buffers.timing_poisons(lambda name: self.sets.plausible(0, name, bases[0]))
        times: list[float] = []
        tokens: list[tuple[Any, bool]] = []  # (the launch's token, whether its time counts)
        checked_set = set(checked)
        fresh = [int(k) for k in self.rng.permutation(len(variants)) if int(k) not in self.used_variants]

        def launch(variant: Inputs | None, counts: bool = True) -> None:
            if variant is not None:
                self.stage(variant.base, variant.change)
            else:
                now = self.buffers.staged[0]
                base = now if now in bases and self.rng.random() < 0.5 else bases[int(self.rng.integers(len(bases)))]
                self.stage(base, random_change(base, self.sets.change_values(), self.rng))
            args = self.buffers.args(0, self.buffers.staged[0])
            self.buffers.repoison(poisons)
            self.buffers.launched()
            tokens.append((self.backend.timed(kernel, geo, args, self.policy.flush), counts))

        for k in range(count):
            if k not in checked_set:
                launch(None)
                continue
            pick = fresh.pop() if fresh else int(self.rng.integers(len(variants)))
            seen = pick in self.used_variants
            if seen:
                launch(None)  # timed in place of the repeat
            self.used_variants.add(pick)
            variant = variants[pick]
            launch(variant, counts=not seen)
            elapsed = self.backend.elapsed([t for t, _ in tokens])
            times += [t for t, (_, counts) in zip(elapsed, tokens) if counts]
            tokens = []
            full = k == count - 1
            if full:  # undo the change of the inputs: they are then compared with the pristine set
                base, change = self.buffers.staged
                mine = {n: c for n, c in change.items() if self.roles[n] == "input"}
                self.buffers.copy_runs(base.device, mine, 0)
                self.buffers.staged = (base, {n: c for n, c in change.items() if n not in mine})
            # inputs are never restored while timing, and guards never rewritten: the last
            # check sees what any timed launch did to them
            self.checks.inspect(0, variant, self.buffers.outputs(0), f"timed launch {k + 1} of {count}", full=full)
        elapsed = self.backend.elapsed([t for t, _ in tokens])
        return times + [t for t, (_, counts) in zip(elapsed, tokens) if counts]

    def result(self, base: Result, times: list[float]) -> Result:
        arr = np.asarray(times, dtype=np.float64)
        median = float(np.median(arr))
        q25, q75 = np.percentile(arr, [25, 75])
        r = replace(
            base,
            times_us=tuple(round(t, 4) for t in times),
            median_us=median,
            min_us=float(arr.min()),
            spread=float((q75 - q25) / median) if median > 0 else 0.0,
            bandwidth_gbs=self.bytes_moved / (median * 1e3) if median > 0 else None,
            gflops=self.flops / (median * 1e3) if median > 0 and self.flops else None,
        )
        if self.sol_us is not None and median > 0:
            r = replace(r, sol_us=self.sol_us, sol_fraction=self.sol_us / median)
            margin = suspect_margin(self.backend.limits)
            if self.cold_cache and median < self.sol_us * (1 - margin):
                r = replace(r, status="suspect",
                            message=(f"measured {median:.2f} us, faster than the speed-of-light bound "
                                     f"{self.sol_us:.2f} us by more than the probe's uncertainty "
                                     f"({margin:.0%}): the measurement or the cost model is wrong"))
        return r

    def with_energy(self, result: Result, kernel: Any, geo: Geometry) -> Result:
        """The result with its joules per launch: the device's total-energy counter (read only)
        around ENERGY_S of back-to-back launches on the tuning size's inputs (no flush between
        them: a flush's own energy would swamp a small kernel's). A batch whose launches ran in
        under a quarter of the configuration's fastest timed launch did less work than a timed
        launch, more than a warm cache explains (a kernel that skips repeated work): its energy
        is not recorded."""
        if self.energy_read is None:
            try:
                self.energy_read = counter_reader(self.backend.name, 0, str(self.backend.limits.extra.get(
                    "pci_bus_id", "")))
            except NoEnergyCounter:
                self.energy_read = _no_energy
        n = int(min(ENERGY_LAUNCHES, max(MIN_ENERGY_LAUNCHES, math.ceil(ENERGY_S * 1e6 / result.median_us))))
        base = self.buffers.staged[0]
        args = self.buffers.args(0, base if base is not None else self.sets.pool(0)[0])
        try:
            self.backend.launch(kernel, geo, args)  # everything queued before has finished
            for _ in range(3):  # a counter that did not move over the batch: a batch four times as long
                before = self.energy_read()
                times = self.backend.time(kernel, geo, args, n, False)
                after = self.energy_read()
                if before is None or after is None or after > before:
                    break
                n *= 4
        except LaunchError as e:
            return replace(result, status="launch_error", message=f"while measuring its energy: {e}")
        finally:
            self.buffers.staged = (None, {})  # the next timed launch copies its whole set again
        if before is None or after is None or after <= before or not times \
                or sum(times) / len(times) < 0.25 * (result.min_us or result.median_us):
            return result
        return replace(result, energy_j=(after - before) / n)


def _no_energy() -> None:
    """The energy counter of a device that has none: no reading."""
    return None


def median_known(times: list[float], precision: float) -> bool:
    """Whether the median of `times` is known to within `precision` of itself at 95% confidence:
    the binomial interval of order statistics around the median (no assumption about the shape
    of the distribution) is no wider than that."""
    n = len(times)
    if n < 8:
        return False
    ordered = sorted(times)
    half = 0.98 * math.sqrt(n)  # 1.96 * sqrt(n) / 2: ranks either side of the middle
    lo = ordered[max(0, int(math.floor(n / 2 - half)))]
    hi = ordered[min(n - 1, int(math.ceil(n / 2 + half)))]
    mid = ordered[n // 2] if n % 2 else 0.5 * (ordered[n // 2 - 1] + ordered[n // 2])
    return mid > 0 and (hi - lo) / 2 <= precision * mid


def suspect_margin(limits: Any) -> float:
    """How far below its bound a time may fall before it is suspect: the probe's own spread
    (three times its relative spread), never less than SUSPECT_MARGIN."""
    spread = float(getattr(limits, "peaks_spread", 0.0) or 0.0)
    return max(SUSPECT_MARGIN, 3.0 * spread)
