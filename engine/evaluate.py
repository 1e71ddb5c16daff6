"""Evaluate one configuration: compile -> resource check -> verify -> time -> Result.

This module is the protocol; the input sets it draws are engine/inputs.py's, and outputs are
compared with their reference by engine/compare.py.

The protocol (DESIGN.md): random inputs (never zeros) from fresh seeds, at least two of them, at
every verification size; tolerance by dtype; NaN or Inf where the reference has none fails; timing
with device events after warm-up, many repetitions, the cache flushed between them, median and
spread, every raw time kept; a result faster than its speed-of-light bound is flagged, not ranked.

A check must look to the kernel exactly like a timing run, or a kernel can tell them apart:

- before every launch, checked or timed, the outputs are poisoned with values chosen at random
  from the run's entropy: all-ones bytes (NaN), random bit patterns, or another input set's
  correct outputs (finite and plausible), and read-write buffers are restored; so no launch finds
  its own earlier result in place, and no cheap test inside a kernel says which launch is checked;
- timed launches are checked too: one at a random place in the first half of the repetitions and
  the last one, in the same loaded module, so a kernel that counts its launches is caught;
- after every checked launch the inputs must be byte for byte what they were (`wrote_input`), and
  the guard regions around every buffer must hold their random pattern (`out_of_bounds`).
Poisoning and checking happen outside the timed region: between the end event of one launch and
the cache flush before the next.
"""

from __future__ import annotations

import math
import random
import threading
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping

import numpy as np

from .backends import GUARD_BYTES, Backend, CompileError, LaunchError
from .buffers import GuardedBuffers, Outputs, out_of_bounds
from .compare import TOLERANCE, Expected, compare, ratios
from .energy import NoEnergyCounter, counter_reader
from .expressions import ExpressionError
from .input_sets import InputSets, checksum, threads
from .inputs import HARD_KINDS, InputPool, Inputs, hard_kinds, make_hard_inputs, make_inputs, random_change
from .messages import Checked
from .result import Rejected, Resources, Result  # noqa: F401  (Rejected: callers take it from here too)
from .sol import SUSPECT_MARGIN, sol_time_us
from .space import Geometry, compiler_defines, geometry, launch_geometry
from .template import Argument, ParamValue, Problem, Template

# Output types the device checks against the tolerance itself (backends whose capabilities have
# `compare_close`); others (float64, integers) are read back and compared by the host.
DEVICE_CLOSE_DTYPES = ("float32", "float16", "bfloat16")
POISONS = ("nan", "bits", "plausible")
# Timed launches checked per configuration: as many as TIMING_CHECK_BYTES of outputs read back
# allow, at most MAX_TIMED_CHECKS, never fewer than two (the last, and one in the first half).
TIMING_CHECK_BYTES = 16 * 2**20
MAX_TIMED_CHECKS = 16


# A candidate may miss the reference by at most this many times the original kernel's own worst
# error, where the original misses the dtype's default tolerance; beyond CALIBRATION_LIMIT times
# the default the original and the reference disagree and the run stops.
CALIBRATION_FACTOR = 2.0
CALIBRATION_LIMIT = 1e4
# The share of the original's elements whose error the calibration's widening is taken from: a
# high quantile, so that one bad element of the original never opens every element's tolerance
CALIBRATION_QUANTILE = 0.999


# Leaders (within LEADER_MARGIN of the fastest median the worker has seen) are launched again on
# one input set up to RACE_LAUNCHES times, or RACE_SECONDS of launches: a race that shows once in
# 300 launches is seen with 95% probability at 900
RACE_LAUNCHES = 900
RACE_SECONDS = 0.5
LEADER_MARGIN = 0.05
# A new leader found while the search goes on gets as many as RACE_FIRST launches or
# RACE_FIRST_SECONDS; the full count is for the final check of the winner (verify_again)
RACE_FIRST = 100
RACE_FIRST_SECONDS = 0.05
# The energy counter moves in steps of milliseconds of power: each configuration's energy is
# read over at least this much time of back-to-back launches (and at most ENERGY_LAUNCHES).
ENERGY_S = 0.1
ENERGY_LAUNCHES = 20_000
MIN_ENERGY_LAUNCHES = 10


class CalibrationError(RuntimeError):
    """The original kernel and the reference disagree: nothing can be verified against them."""


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


@dataclass(frozen=True)
class VerifyPolicy:
    """How each configuration is checked."""

    seeds: int = 2  # input sets per verification size for each configuration
    pool: int = 4  # input sets drawn per size for the run; configurations rotate through them


class Evaluator:
    """Runs the protocol for one template and problem on an open backend."""

    def __init__(self, backend: Backend, template: Template, problem: Problem, *,
                 seed: int = 0, timing: TimingPolicy = TimingPolicy(),
                 verify: VerifyPolicy = VerifyPolicy(),
                 reference: Callable[..., Mapping[str, np.ndarray]] | None = None,
                 extra_problems: tuple[Problem, ...] = ()):
        self.backend = backend
        self.template = template
        self.problem = problem
        self.timing = timing
        self.verify_policy = verify
        self.seed = seed
        self.source = template.source_for(backend.name)
        self.options = template.options_for(backend.name)
        self.reference = reference if reference is not None else template.load_reference()
        self.problems = (problem,) + tuple(template.verify_problems) + tuple(extra_problems)
        self._default_kernel: Any = None
        # Without a numpy reference an input set's outputs come from running the default on the
        # device, in the buffers of that size, and reading them back: the threads that draw sets
        # side by side (prepare, verify_again) take turns
        self._default_lock = threading.Lock()
        self.last_kernel: Any = None  # the loaded kernel `evaluate` last ran
        # Poison, guard patterns and which timed launches are checked come from the system's
        # entropy, never from the run's seed: nothing a kernel could be written against.
        self._rng = np.random.default_rng(random.SystemRandom().randrange(1 << 63))
        # the working buffers of every size, their guards and poisons (engine/buffers.py)
        self.buffers = GuardedBuffers(backend, template, self.problems, self._rng)
        self._kinds: list[str] = []  # poisons still to use in this configuration's checked runs
        self.scale: dict[str, float] = {}  # outputs whose default tolerance the calibration widened
        # outputs where the original has a few elements beyond the calibrated tolerance: (their
        # share, how far beyond the worst of them is)
        self.spare: dict[str, tuple[float, float]] = {}
        self._last_checks: dict[tuple[int, str], Expected] = {}  # the reference a failed output missed
        self.hard_note = ""  # what the calibration found about the hard kinds
        # the input sets of every size, the timed launches' changed sets and the hard set
        # (make_hard_inputs) every configuration is checked on (engine/input_sets.py)
        self.sets = InputSets(template, self.problems, seed, verify.pool, self.reference, self._default_outputs,
                              self.scale, self.spare)
        # timed launches: what the working buffers hold now (base set, its change)
        self._used_variants: set[int] = set()
        self._staged: tuple[Inputs | None, dict[str, tuple[int, int, int]]] = (None, {})
        self._best_us = math.inf  # the fastest median this evaluator has measured
        self._energy_read: Callable[[], float | None] | None = None  # the energy counter, once opened
        self._roles = {a.name: a.role for a in template.arguments}
        self._calibration_build: Any = None  # the original's build for calibrate(), under way
        # Tolerance checks on the device where the backend has them: only a failure is read back
        # (and described by the host's `compare`, which stays the authority).
        self._device_close = backend.compare_close if backend.capabilities.compare_close else None
        env = problem.values
        self.bytes_moved = float(template.cost_bytes.evaluate(env))
        self.flops = float(template.cost_flops.evaluate(env))
        self.sol_us = sol_time_us(self.bytes_moved, self.flops, backend.limits)
        cache = backend.limits.l2_bytes
        # The bound is only a fair test when no part of the working set can still be cached.
        self.cold_cache = timing.flush and (backend.flush_bytes() >= cache or self.bytes_moved >= 2 * cache)

    # inputs and references -------------------------------------------------------------------
    def _default_outputs(self, inputs: Inputs, which: int) -> dict[str, np.ndarray]:
        """Without a numpy reference, the default configuration's outputs are the reference."""
        default = self.template.default_config()
        with self._default_lock:
            if self._default_kernel is None:
                self._default_kernel = self.backend.compile(self.source, self.template.entry,
                                                             compiler_defines(default), self.options)
            geo = geometry(self.template, default, self.problems[which], self.backend.limits)
            outs = self._run_checked(self._default_kernel, geo, inputs, which, poison="nan")
            return {k: v.copy() for k, v in outs.items()}  # read before another thread's launch

    # device buffers: each between two guard regions --------------------------------------------
    def _arm_guards(self) -> None:
        """Write the guard pattern around every buffer, at every verification size."""
        self.buffers.arm()
        self._staged = (None, {})

    def _restore(self, which: int, inputs: Inputs, wait: bool = True) -> None:
        """Copy the pristine inputs (uploaded once per input set) into the working buffers."""
        if which == 0:
            self._staged = (None, {})  # the timed launches' next one copies its whole set again
        self.buffers.restore(which, inputs, wait)

    def _poison(self, which: int, inputs: Inputs, kind: str | None = None) -> None:
        """Overwrite every output with one of the poisons, chosen at random unless `kind` says."""
        self.buffers.poison(
            which, lambda: kind or (self._kinds.pop() if self._kinds else POISONS[int(self._rng.integers(len(POISONS)))]),
            lambda name: self.sets.plausible(which, name, inputs))

    def _failing(self, a: Argument, out: np.ndarray, which: int) -> int:
        """How many elements of a failed output are outside the tolerance (NaN counts)."""
        exp = self._last_checks.get((which, a.name))
        if exp is None or exp.exact:
            return out.size
        o = out.ravel().astype(exp.values.dtype)
        with np.errstate(invalid="ignore", over="ignore"):
            ok = np.abs(o - exp.values) <= exp.tol
        if exp.nan is not None:
            ok |= exp.nan
        return int(out.size - np.count_nonzero(ok))

    def _run_checked(self, kernel: Any, geo: Geometry, inputs: Inputs, which: int,
                     poison: str | None = None) -> Outputs:
        """Restore the inputs, poison the outputs, launch once; the outputs are read back when
        (and only if) something asks for them."""
        self._restore(which, inputs)
        self._poison(which, inputs, poison)
        self.buffers.launched()
        self.backend.launch(kernel, geo, self.buffers.args(which, inputs))
        return self.buffers.outputs(which)

    def _passes_on_device(self, which: int, a: Argument, exp: Expected) -> float | None:
        """The worst error over the tolerance when the device finds the output right; None when
        it finds something wrong or cannot check this output (the host then compares)."""
        if self._device_close is None or exp.exact or a.dtype not in DEVICE_CLOSE_DTYPES:
            return None
        if exp.device is None:
            exp.device = self.backend.alloc(max(exp.values.nbytes, 4))
            self.backend.upload(exp.device, exp.values.astype(np.float32, copy=False))
        nan, inf, sign, bad, _, _, worst = self._device_close(
            self.buffers.of(which)[a.name].raw, GUARD_BYTES, exp.device, exp.values.size, a.dtype,
            exp.rtol, exp.atol)
        return None if nan or inf or sign or bad else worst

    def _inspect(self, which: int, inputs: Inputs, outs: Mapping[str, np.ndarray], where: str,
                 full: bool = True, label: bool = False) -> float:
        """After a checked launch: guards intact, inputs unchanged (unless not `full`), outputs
        right. Returns the worst error as a fraction of the tolerance; raises Rejected with the
        first finding."""
        problem = self.problems[which]
        at = "" if which == 0 and not label else f" at {problem.label()}"
        suffix = f"{at} ({where})"
        bufs = self.buffers.of(which)
        seen = np.empty(GUARD_BYTES, dtype=np.uint8)
        # every guard and every input compared on the device at once: one wait, not one a range
        guards = [(a, side, offset) for a in self.template.arguments if a.is_buffer and full
                  for side, offset in (("before its start", 0), ("after its end", GUARD_BYTES + bufs[a.name].nbytes))]
        kept = [a for a in self.template.arguments
                if full and a.is_buffer and a.role == "input" and a.name in inputs.host and a.name in inputs.device]
        found = _first_differences(
            self.backend, [(bufs[a.name].raw, offset, self.buffers.resident(self.buffers.guard(a)), 0, GUARD_BYTES)
                           for a, _, offset in guards]
            + [(bufs[a.name].raw, GUARD_BYTES, inputs.device[a.name], 0, bufs[a.name].nbytes) for a in kept])
        unchanged = {a.name for a, f in zip(kept, found[len(guards):]) if f < 0}
        for (a, side, offset), f in zip(guards, found):
            if f < 0:
                continue
            g = bufs[a.name]
            self.backend.download(g.raw, seen, offset)
            changed = np.flatnonzero(seen != self.buffers.guard(a))
            if changed.size:
                raise Rejected("out_of_bounds", out_of_bounds(a, g.nbytes, side, changed) + suffix)
        for a in self.template.arguments:
            if full and a.is_buffer and a.role == "input" and a.name in inputs.host:
                if a.name in unchanged:
                    continue
                now = np.empty_like(inputs.host[a.name])
                self.backend.download(bufs[a.name].raw, now, GUARD_BYTES)
                differ = _elements_differ(now, inputs.host[a.name])
                if differ.any():
                    raise Rejected("wrote_input", f"the kernel changed its input `{a.name}`: "
                                   f"{int(np.count_nonzero(differ))} of {now.size} elements differ, first at "
                                   f"{int(np.argmax(differ))}{suffix}")
        worst = 0.0
        for a in self.template.arguments:
            if not a.is_output:
                continue
            on_device = self._passes_on_device(which, a, inputs.checks[a.name])
            if on_device is not None:
                worst = max(worst, on_device)
                continue
            out = outs[a.name]
            err, msg = compare(a.name, out, inputs.checks[a.name])
            worst = max(worst, err)
            if msg:
                self._last_checks[(which, a.name)] = inputs.checks[a.name]
                raise Rejected("wrong_result", f"{self.buffers.unwritten(which, a, out, lambda: self._failing(a, out, which)) or msg}"
                                               f"{suffix}")
        return worst

    def intact(self) -> bool:
        """Whether everything the checks compare with still holds what it held when it was made:
        each drawn set's inputs and references on the host (their checksums) and their copies on
        the device, the guard patterns and poisons. A stray write of a configuration can reach
        them (on a CPU device the kernel's buffers share the worker's memory)."""
        sets = self.sets.drawn()
        if any(checksum(x) != x.checksum for x in sets if x.checksum is not None):
            return False
        pairs, scratch = [], []
        for host, buf in self.buffers.residents():  # guard patterns, poisons
            scratch.append(self.backend.alloc(host.nbytes))
            self.backend.upload(scratch[-1], host)
            pairs.append((buf, 0, scratch[-1], 0, host.nbytes))
        for inputs in sets:
            for name, buf in inputs.device.items() if inputs.base is None else ():
                scratch.append(self.backend.alloc(inputs.host[name].nbytes))
                self.backend.upload(scratch[-1], inputs.host[name])
                pairs.append((buf, 0, scratch[-1], 0, inputs.host[name].nbytes))
            for check in inputs.checks.values():
                if check.device is not None:
                    values = check.values.astype(np.float32, copy=False)
                    scratch.append(self.backend.alloc(values.nbytes))
                    self.backend.upload(scratch[-1], values)
                    pairs.append((check.device, 0, scratch[-1], 0, values.nbytes))
        return all(f < 0 for f in _first_differences(self.backend, pairs))

    def prepare(self) -> None:
        """Draw the input sets (and their references) the first configuration needs at every
        verification size now, in threads (numpy lets go of the interpreter in its large
        operations), while the original compiles for the calibration where the backend can build
        apart from its context; the rest of each pool is drawn when first used."""
        build = self.backend.build if self.backend.capabilities.build else None
        if build is not None and self.reference is not None:
            _config, args = self._calibration_build_args()
            self._calibration_build = threads().submit(build, *args)
        pools = [self.sets.pool(which) for which in range(len(self.problems))]
        n = max(2, self.verify_policy.seeds)
        list(self.sets.side_by_side(lambda job: pools[job[0]][job[1]], [(w, k) for w in range(len(pools)) for k in range(n)]))
        for which in range(len(self.problems)):
            self.buffers.of(which)

    def _calibration_build_args(self) -> tuple[dict | None, tuple]:
        """The calibration's build: (the configuration, None for the original's own source; the
        backend's compile arguments). A build of its own (one define more), so that no state it
        keeps is shared with a candidate's build of the same source (PoCL loads identical builds
        once)."""
        source = self.template.original_sources.get(self.backend.name)
        own = {"KERNTUNE_CALIBRATION": "1"}
        if source is not None:
            return None, (source, self.template.entry, own, self.options)
        config = self.template.default_config()
        return config, (self.source, self.template.entry, {**compiler_defines(config), **own}, self.options)

    def calibrate(self) -> dict[str, float]:
        """Measure the original kernel's own error against the reference, before tuning.

        Per output, from the distribution of the original's errors (each element's error over its
        tolerance): where its CALIBRATION_QUANTILE quantile misses the dtype's default (fast-math,
        a different order of summation), that output's tolerance widens to CALIBRATION_FACTOR
        times that quantile; the few elements beyond it (the original's share) may be beyond it
        in a candidate too, SPARE_FACTOR times as many, none further out than CALIBRATION_FACTOR
        times the original's worst. One bad element of the original never widens every element's
        tolerance. An output with an explicit rtol/atol keeps it. Then the hard kinds of input
        (engine/inputs.py) the reference computes and the original passes are kept for every
        configuration's checks. Returns {output: worst error of the original / default
        tolerance}; raises CalibrationError, one line naming the output and its worst element,
        when the original fails an explicit tolerance or disagrees with the reference beyond
        CALIBRATION_LIMIT times the default (a wrong reference, or a wrong kernel)."""
        if self.reference is None:
            self._hard_inputs(None)
            return {}
        config, args = self._calibration_build_args()
        built, self._calibration_build = self._calibration_build, None
        try:
            kernel = self.backend.load(*built.result()) if built is not None else self.backend.compile(*args)
        except CompileError as e:
            raise CalibrationError(f"the original kernel does not compile: {e}") from None
        outputs = [a for a in self.template.arguments if a.is_output]
        worst: dict[str, tuple[float, str]] = {a.name: (0.0, "") for a in outputs}
        errors: dict[str, list[np.ndarray]] = {a.name: [] for a in outputs}
        self._arm_guards()
        for which, problem in enumerate(self.problems):
            geo = self._geometry(config, problem)
            for inputs in self.sets.pool(which)[:2]:
                outs = self._run_checked(kernel, geo, inputs, which, poison="nan")
                for a in outputs:
                    default = inputs.checks[a.name].rescaled(a, 1.0)
                    err, msg = compare(a.name, outs[a.name], default)
                    if not default.exact:
                        errors[a.name].append(ratios(outs[a.name], default))
                    if err > worst[a.name][0]:
                        at = "" if which == 0 else f" at {problem.label()}"
                        worst[a.name] = (err, f"{msg}{at}")
        for a in outputs:
            err, msg = worst[a.name]
            if err <= 1.0:
                continue
            explicit = a.rtol is not None or a.atol is not None
            if explicit or not math.isfinite(err) or err > CALIBRATION_LIMIT:
                why = "its explicit tolerance" if explicit else "the reference"
                raise CalibrationError(f"the original kernel disagrees with {why}: {msg}")
            scale, spare = _widening(np.concatenate(errors[a.name]), err)
            if scale > 1.0:
                self.scale[a.name] = scale
            if spare[0]:
                self.spare[a.name] = spare
        if self.scale or self.spare:
            self.sets.recalibrated()
        self._hard_inputs(kernel, config)
        return {name: round(err, 4) for name, (err, _) in worst.items()}

    def _hard_inputs(self, original: Any, config: Mapping[str, ParamValue] | None = None) -> None:
        """The hard input set every configuration is checked on, at the smallest verification
        size: rows of every hard kind the reference computes (finite where the inputs are) and
        the original kernel passes (`original`: the calibration's build, at `config`'s launch); without a numpy reference,
        of every kind, the default configuration's outputs the reference."""
        kinds = [k for k in HARD_KINDS if any(k in hard_kinds(a) for a in self.template.arguments
                                               if a.role in ("input", "inout"))]
        if not kinds:
            return
        which = min(range(len(self.problems)),
                    key=lambda w: sum(self.buffers.nbytes(a, w) for a in self.template.arguments if a.is_buffer))
        problem = self.problems[which]
        seed = (self.seed * 1_000_003 + which * 7919 + 0x4A2D) & 0x7FFFFFFF
        left: list[str] = []

        def passes(kinds_now: tuple[str, ...]) -> tuple[Inputs | None, str]:
            """The hard set of `kinds_now` with its tolerance calibrated on the original's errors
            there, as calibrate() does on the usual sets; None and why where the reference cannot
            compute it or the original disagrees beyond calibration."""
            try:
                inputs = self.sets.with_reference(make_hard_inputs(self.template, problem, seed, kinds_now), which)
            except RuntimeError as e:
                return None, str(e)
            if original is None:
                return inputs, ""
            try:
                outs = self._run_checked(original, self._geometry(config, problem), inputs, which, poison="nan")
                for a in self.template.arguments:
                    if not a.is_output:
                        continue
                    default = inputs.checks[a.name].rescaled(a, 1.0)
                    err, msg = compare(a.name, outs[a.name], default)
                    if not msg or default.exact:
                        if msg:
                            return None, f"the original kernel: {msg}"
                        continue
                    if a.rtol is not None or a.atol is not None or not math.isfinite(err) or err > CALIBRATION_LIMIT:
                        return None, f"the original kernel: {msg}"
                    scale, spare = _widening(ratios(outs[a.name], default), err)
                    scale = max(scale, self.scale.get(a.name, 1.0))
                    inputs.checks[a.name] = default.rescaled(a, scale, max(spare, self.spare.get(a.name, (0.0, 1.0))))
            except LaunchError as e:
                return None, f"the original kernel: {e}"
            return inputs, ""

        if original is not None:
            self._arm_guards()
            for kind in kinds:
                found, why = passes((kind,))
                if found is None:
                    left.append(f"{kind} ({why})")
            kinds = [k for k in kinds if not any(x.startswith(k + " ") for x in left)]
        if kinds:
            found, why = passes(tuple(kinds))
            if found is not None:
                self.sets.hard = (which, found)
            else:
                left.append(f"{', '.join(kinds)} together ({why})")
                kinds = []
        if left:
            self.hard_note = (f"inputs of hard kinds left out of the checks: {'; '.join(left)}"
                              + (f"; checked: {', '.join(kinds)}" if kinds else ""))

    # the protocol ------------------------------------------------------------------------------
    def compile(self, config: Mapping[str, ParamValue]) -> Any:
        return self.backend.compile(self.source, self.template.entry, compiler_defines(config), self.options)

    def check(self, kernel: Any, config: Mapping[str, ParamValue] | None,
              inputs_for: Callable[[int], list[Inputs]]) -> tuple[bool, float, str, tuple[int, ...]]:
        """Verify on every verification size; (ok, worst error / tolerance, message, seeds).
        A config of None checks the original kernel, at its own launch geometry."""
        try:
            worst, seeds = self._check(kernel, config, inputs_for)
        except Rejected as e:
            return False, math.inf, e.message, ()
        return True, worst, "", seeds

    def _check(self, kernel: Any, config: Mapping[str, ParamValue] | None,
               inputs_for: Callable[[int], list[Inputs]]) -> tuple[float, tuple[int, ...]]:
        """Every verification size and input set; raises Rejected with the first finding."""
        self._arm_guards()
        self._used_variants = set()
        runs = [(which, inputs) for which in range(len(self.problems)) for inputs in inputs_for(which)]
        if self.sets.hard is not None:  # and the hard kinds of input the original passes
            runs.append(self.sets.hard)
        # At least one run with each poison, in a random order: a kernel that computes only when
        # it finds one kind of poison (or skips when it finds one) fails here, every time.
        while runs and len(runs) < len(POISONS):
            runs.append(runs[len(runs) % len(runs)])
        kinds = list(POISONS) * (len(runs) // len(POISONS) + 1)
        self._kinds = [kinds[i] for i in self._rng.permutation(len(runs))]
        worst = 0.0
        seeds: list[int] = []
        try:
            for which, inputs in runs:
                geo = self._geometry(config, self.problems[which])
                if inputs.seed not in seeds:
                    seeds.append(inputs.seed)
                outs = self._run_checked(kernel, geo, inputs, which)
                where = f"inputs with {', '.join(inputs.kinds)} rows" if inputs.kinds else f"seed {inputs.seed}"
                worst = max(worst, self._inspect(which, inputs, outs, where))
        finally:
            self._kinds = []
        return worst, tuple(seeds)

    def _geometry(self, config: Mapping[str, ParamValue] | None, problem: Problem) -> Geometry:
        return launch_geometry(self.template, config, problem, self.backend.limits)

    def evaluate_original(self) -> Result:
        """The protocol for the original, untemplated kernel (the template's baseline source)."""
        source = self.template.original_sources.get(self.backend.name)
        if source is None:
            return Result(config={}, status="compile_error",
                          message=f"the template has no original {self.backend.name} source")
        t0 = time.perf_counter()
        try:
            kernel = self.backend.compile(source, self.template.entry, {}, self.options)
        except CompileError as e:
            return Result(config={}, status="compile_error", message=str(e))
        return self.evaluate({}, kernel=kernel, compile_s=time.perf_counter() - t0, original=True)

    def reproduces_original(self, config: Mapping[str, ParamValue],
                            seeds: tuple[int, ...]) -> tuple[bool, float, str]:
        """Whether `config` gives the original kernel's outputs on fresh inputs (the templating gate).

        On every input set the original (the template's baseline source, at its own launch) runs
        first and its outputs become the reference that `config` must match within the dtype's
        tolerance; a numpy reference plays no part. Returns (ok, worst error / tolerance, message)."""
        source = self.template.original_sources.get(self.backend.name)
        if source is None:
            return False, math.inf, f"the template has no original {self.backend.name} source to compare with"
        try:
            original = self.backend.compile(source, self.template.entry, {}, self.options)
        except CompileError as e:
            return False, math.inf, f"the original kernel does not compile: {e}"
        try:
            kernel = self.compile(config)
        except CompileError as e:
            return False, math.inf, f"the default configuration does not compile: {e}"
        worst = 0.0
        outputs = [a for a in self.template.arguments if a.is_output]
        self._arm_guards()
        for which, problem in enumerate(self.problems):
            try:
                mine = self._geometry(config, problem)
                theirs = self._geometry(None, problem)
            except ExpressionError as e:
                return False, math.inf, f"launch geometry at {problem.label()}: {e}"
            for seed in seeds:
                inputs = make_inputs(self.template, problem, seed)
                try:
                    expected = self._run_checked(original, theirs, inputs, which, poison="nan")
                    for a in outputs:
                        ref = expected[a.name].copy()
                        # outputs start as NaN: an original that leaves them all NaN proves nothing
                        if a.dtype in TOLERANCE and ref.size and np.isnan(ref).all():
                            return False, math.inf, (f"the original kernel wrote none of `{a.name}` at "
                                                     f"{problem.label()}: nothing to compare with")
                        inputs.expected[a.name] = ref
                        inputs.checks[a.name] = Expected(ref, a.dtype, a)
                    got = self._run_checked(kernel, mine, inputs, which)
                    worst = max(worst, self._inspect(which, inputs, got, f"seed {seed}", label=True))
                except LaunchError as e:
                    return False, math.inf, f"launch failed at {problem.label()} (seed {seed}): {e}"
                except Rejected as e:
                    return False, math.inf, f"{e.status.replace('_', ' ')}: {e.message}"
        return True, worst, ""

    def evaluate(self, config: Mapping[str, ParamValue], kernel: Any = None, compile_s: float = 0.0,
                 resources: Resources | None = None, cached: bool = False, original: bool = False) -> Result:
        """The whole protocol for one configuration. Failures become statuses, never exceptions."""
        config = dict(config)
        base = Result(config=config, status="ok", compile_s=compile_s, cached=cached)
        which_config = None if original else config
        try:
            geo = self._geometry(which_config, self.problem)
        except ExpressionError as e:
            return replace(base, status="pruned", message=f"launch geometry: {e}")
        base = replace(base, grid=geo.grid, block=geo.block)
        if kernel is None:
            t0 = time.perf_counter()
            try:
                kernel = self.compile(config)
            except CompileError as e:
                return replace(base, status="compile_error", message=str(e),
                               compile_s=time.perf_counter() - t0)
            base = replace(base, compile_s=time.perf_counter() - t0)
        self.last_kernel = kernel
        if resources is None:
            resources = self.backend.resources(kernel)
        base = replace(base, resources=resources, occupancy=self.occupancy(geo, resources))
        reason = self.resource_violation(kernel, geo, resources)
        if reason:
            return replace(base, status="pruned", message=reason)

        t0 = time.perf_counter()
        try:
            worst, seeds = self._check(kernel, which_config,
                                        lambda which: self.sets.rotating(which, self.verify_policy.seeds))
        except LaunchError as e:
            return replace(base, status="launch_error", message=str(e), verify_s=time.perf_counter() - t0)
        except Rejected as e:
            return replace(base, status=e.status, message=e.message, verify_s=time.perf_counter() - t0)
        finally:
            self.sets.next += self.verify_policy.seeds
        base = replace(base, verify_s=time.perf_counter() - t0, max_error=worst, seeds=seeds)

        t0 = time.perf_counter()
        try:
            times = self.measure(kernel, geo)
        except LaunchError as e:
            return replace(base, status="launch_error", message=f"while timing: {e}",
                           time_s=time.perf_counter() - t0)
        except Rejected as e:
            return replace(base, status=e.status, message=e.message, time_s=time.perf_counter() - t0)
        result = self._timed(replace(base, time_s=time.perf_counter() - t0), times)
        if result.status == "ok" and result.median_us is not None:
            # a leader so far (the winner, and any configuration near it, is one when measured)
            # is launched again and again: a race shows as launches that disagree
            if result.median_us <= self._best_us * (1 + LEADER_MARGIN):
                try:
                    self.agrees_with_itself(kernel, geo, result.median_us, RACE_FIRST, RACE_FIRST_SECONDS)
                except LaunchError as e:
                    return replace(result, status="launch_error", message=f"while launching it again: {e}")
                except Rejected as e:
                    return replace(result, status=e.status,
                                   message=f"launched again and again on one input set: {e.message}")
            self._best_us = min(self._best_us, result.median_us)
            if self.timing.energy:
                result = self._with_energy(result, kernel, geo)
        return result

    def _with_energy(self, result: Result, kernel: Any, geo: Geometry) -> Result:
        """The result with its joules per launch: the device's total-energy counter (read only)
        around ENERGY_S of back-to-back launches on the tuning size's inputs (no flush between
        them: a flush's own energy would swamp a small kernel's). A batch whose launches ran in
        under a quarter of the configuration's fastest timed launch did less work than a timed
        launch, more than a warm cache explains (a kernel that skips repeated work): its energy
        is not recorded."""
        if self._energy_read is None:
            try:
                self._energy_read = counter_reader(self.backend.name, 0, str(self.backend.limits.extra.get(
                    "pci_bus_id", "")))
            except NoEnergyCounter:
                self._energy_read = _no_energy
        n = int(min(ENERGY_LAUNCHES, max(MIN_ENERGY_LAUNCHES, math.ceil(ENERGY_S * 1e6 / result.median_us))))
        base = self._staged[0]
        args = self.buffers.args(0, base if base is not None else self.sets.pool(0)[0])
        try:
            self.backend.launch(kernel, geo, args)  # everything queued before has finished
            for _ in range(3):  # a counter that did not move over the batch: a batch four times as long
                before = self._energy_read()
                times = self.backend.time(kernel, geo, args, n, False)
                after = self._energy_read()
                if before is None or after is None or after > before:
                    break
                n *= 4
        except LaunchError as e:
            return replace(result, status="launch_error", message=f"while measuring its energy: {e}")
        finally:
            self._staged = (None, {})  # the next timed launch copies its whole set again
        if before is None or after is None or after <= before or not times \
                or sum(times) / len(times) < 0.25 * (result.min_us or result.median_us):
            return result
        return replace(result, energy_j=(after - before) / n)

    def measure_again(self, result: Result, kernel: Any) -> Result:
        """Time again a configuration `evaluate` has just verified and timed, in its loaded
        module (its timed launches checked as always): the result with the new times."""
        t0 = time.perf_counter()
        try:
            times = self.measure(kernel, self._geometry(result.config, self.problem))
        except LaunchError as e:
            return replace(result, status="launch_error", message=f"while timing again: {e}")
        except Rejected as e:
            return replace(result, status=e.status, message=e.message)
        return self._timed(replace(result, time_s=result.time_s + time.perf_counter() - t0), times)

    def measure(self, kernel: Any, geo: Geometry) -> list[float]:
        """Warm up, size the repetition count from the warm-up, then time with flushes.

        Every launch finds its outputs poisoned and runs on inputs no earlier launch of the
        configuration saw: one of the tuning size's input sets, switched at random, with a few
        elements changed at a random place (`_stage`). One launch at a random place in the first
        half of the repetitions and the last one are checked like a verification run (raises
        Rejected), on changed sets whose references were computed ahead. Call it after a check
        (which arms the guards)."""
        p = self.timing
        variants = self._variants()
        for k in range(len(variants)):  # drawn before the first timed launch: none during them
            variants[k]
        warm = self._timed_launches(kernel, geo, max(p.warmup, 1), ())
        est_us = max(float(np.median(warm)), 1e-3)
        repeats = int(min(p.max_repeats, max(p.min_repeats, math.ceil(p.target_s * 1e6 / est_us))))
        step = max(p.batch, p.min_repeats)
        if p.precision <= 0 or repeats <= step:
            return self._timed_launches(kernel, geo, repeats, self._checked_launches(repeats))
        # In batches, each checked like a whole measurement (its last launch in full, one at
        # random in its first half, ...): wherever the timing stops, its last launch was checked.
        times: list[float] = []
        while len(times) < repeats:
            n = min(step, repeats - len(times))
            times += self._timed_launches(kernel, geo, n, self._checked_launches(n, MAX_TIMED_CHECKS // 4))
            if len(times) >= p.min_repeats and median_known(times, p.precision):
                break
        return times

    def _checked_launches(self, repeats: int, most: int = MAX_TIMED_CHECKS) -> tuple[int, ...]:
        """Which timed launches are checked: the last, one at random in the first half, and as
        many more at random as TIMING_CHECK_BYTES of outputs read back allow, up to
        MAX_TIMED_CHECKS."""
        lo, hi = max(1, repeats // 4), max(2, repeats // 2)
        chosen = {repeats - 1, int(self._rng.integers(lo, hi)) if hi > lo else 0}
        # outputs the device compares are not read back: only a failure costs a transfer
        per_check = sum(self.buffers.nbytes(a, 0) for a in self.template.arguments
                        if a.is_output and not (self._device_close is not None and a.dtype in DEVICE_CLOSE_DTYPES)) or 1
        extra = min(repeats, most, TIMING_CHECK_BYTES // per_check) - len(chosen)
        rest = [k for k in range(repeats) if k not in chosen]
        if extra > 0 and rest:
            chosen.update(int(k) for k in self._rng.choice(rest, size=min(extra, len(rest)), replace=False))
        return tuple(sorted(k for k in chosen if 0 <= k < repeats))

    # inputs of the timed launches ----------------------------------------------------------------
    def _variants(self) -> InputPool:
        """The timed launches' changed sets (engine/input_sets.py), within its bytes of references."""
        return self.sets.variants(sum(self.buffers.nbytes(a, 0) for a in self.template.arguments if a.is_output))

    def _stage(self, base: Inputs, change: Mapping[str, tuple[int, int, int]]) -> None:
        """Queue, without waiting, what makes the working buffers at the tuning size hold `base`
        with `change` made: the whole set copied where another set (or a read-write buffer) is
        there, else the last change undone; then the change."""
        now, last = self._staged
        inout = any(a.role == "inout" for a in self.template.arguments)
        if now is not base or inout:
            self._restore(0, base, wait=False)
        else:
            self.buffers.copy_runs(base.device, last, 0)
        values = self.sets.change_values()
        self.buffers.copy_runs({n: self.buffers.resident(v) for n, v in values.items() if n in change}, change, 1)
        self._staged = (base, dict(change))

    def _timed_launches(self, kernel: Any, geo: Geometry, count: int, checked: tuple[int, ...]) -> list[float]:
        """`count` timed launches, those in `checked` checked; their times in order. A checked
        launch on a changed set this configuration has seen already (more checks than changed
        sets) is not counted: an unchecked launch on a new change is timed in its place."""
        pool, variants = self.sets.pool(0), self._variants()
        bases = [pool[i] for i in range(len(pool)) if pool.ready(i)] or [pool[0]]
        poisons = self.buffers.timing_poisons(lambda name: self.sets.plausible(0, name, bases[0]))
        times: list[float] = []
        tokens: list[tuple[Any, bool]] = []  # (the launch's token, whether its time counts)
        checked_set = set(checked)
        fresh = [int(k) for k in self._rng.permutation(len(variants)) if int(k) not in self._used_variants]

        def launch(variant: Inputs | None, counts: bool = True) -> None:
            if variant is not None:
                self._stage(variant.base, variant.change)
            else:
                now = self._staged[0]
                base = now if now in bases and self._rng.random() < 0.5 else bases[int(self._rng.integers(len(bases)))]
                self._stage(base, random_change(base, self.sets.change_values(), self._rng))
            args = self.buffers.args(0, self._staged[0])
            self.buffers.repoison(poisons)
            self.buffers.launched()
            tokens.append((self.backend.timed(kernel, geo, args, self.timing.flush), counts))

        for k in range(count):
            if k not in checked_set:
                launch(None)
                continue
            pick = fresh.pop() if fresh else int(self._rng.integers(len(variants)))
            seen = pick in self._used_variants
            if seen:
                launch(None)  # timed in place of the repeat
            self._used_variants.add(pick)
            variant = variants[pick]
            launch(variant, counts=not seen)
            elapsed = self.backend.elapsed([t for t, _ in tokens])
            times += [t for t, (_, counts) in zip(elapsed, tokens) if counts]
            tokens = []
            full = k == count - 1
            if full:  # undo the change of the inputs: they are then compared with the pristine set
                base, change = self._staged
                mine = {n: c for n, c in change.items() if self._roles[n] == "input"}
                self.buffers.copy_runs(base.device, mine, 0)
                self._staged = (base, {n: c for n, c in change.items() if n not in mine})
            # inputs are never restored while timing, and guards never rewritten: the last
            # check sees what any timed launch did to them
            self._inspect(0, variant, self.buffers.outputs(0), f"timed launch {k + 1} of {count}", full=full)
        elapsed = self.backend.elapsed([t for t, _ in tokens])
        return times + [t for t, (_, counts) in zip(elapsed, tokens) if counts]

    def agrees_with_itself(self, kernel: Any, geo: Geometry, median_us: float, launches: int = RACE_LAUNCHES,
                           seconds: float = RACE_SECONDS) -> None:
        """Launch the configuration again and again on one input set (its outputs poisoned before
        each launch): every output must be byte for byte the first launch's, or, where the order
        of its operations is not fixed (atomics), within the tolerance of the reference. As many
        launches as `launches`, or `seconds` of them; raises Rejected on a difference."""
        inputs = self.sets.pool(0)[0]
        count = int(max(30, min(launches, seconds * 1e6 / max(median_us * 1.5 + 20.0, 1.0))))
        self._arm_guards()
        bufs = self.buffers.of(0)
        first: dict[str, Any] = {}
        outputs = [a for a in self.template.arguments if a.is_output]
        for k in range(count):
            outs = self._run_checked(kernel, geo, inputs, 0, poison="nan" if k % 2 else "bits")
            if not first:
                self._inspect(0, inputs, outs, f"launch 1 of {count}")
                for a in outputs:
                    first[a.name] = self.backend.alloc(max(bufs[a.name].nbytes, 1))
                    self.backend.copy(first[a.name], bufs[a.name].raw, bufs[a.name].nbytes, src_offset=GUARD_BYTES)
                continue
            found = _first_differences(self.backend, [(bufs[a.name].raw, GUARD_BYTES, first[a.name], 0, bufs[a.name].nbytes)
                                                      for a in outputs])
            if any(f >= 0 for f in found):  # a race, or an order of operations that is not fixed
                self._inspect(0, inputs, outs, f"launch {k + 1} of {count}, which differs from the first", full=False)
            if k == count - 1:
                self._inspect(0, inputs, outs, f"launch {k + 1} of {count}")

    def _timed(self, base: Result, times: list[float]) -> Result:
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

    def resource_violation(self, kernel: Any, geo: Geometry, res: Resources) -> str | None:
        """A limit known only after compiling that this configuration breaks."""
        limits = self.backend.limits
        allowed = self.backend.launch_limit(kernel)
        if geo.threads_per_block > allowed:
            regs = f" with {res.registers} registers per thread" if res.registers else ""
            return f"{geo.threads_per_block} threads per block, but the compiled kernel allows {allowed}{regs}"
        if limits.max_regs_per_block and res.registers * geo.threads_per_block > limits.max_regs_per_block:
            return (f"{res.registers} registers x {geo.threads_per_block} threads exceeds "
                    f"{limits.max_regs_per_block} registers per block")
        shared_limit = max(limits.max_shared_per_block, limits.max_shared_per_block_optin)
        if res.shared_static + geo.shared_bytes > shared_limit:
            return f"{res.shared_static + geo.shared_bytes} bytes of shared memory exceeds {shared_limit}"
        if self.template.forbid_spills and res.spills > 0:
            return f"{res.spills} bytes spilled to local memory, and the template forbids spills"
        return None

    def occupancy(self, geo: Geometry, res: Resources) -> float | None:
        limits = self.backend.limits
        if not (limits.max_threads_per_sm and limits.max_regs_per_sm and res.registers):
            return None
        try:
            from .occupancy import occupancy
        except ImportError:
            return None
        occ = occupancy(limits, geo.threads_per_block, res.registers, res.shared_static + geo.shared_bytes)
        return occ.fraction

    def verify_again(self, config: Mapping[str, ParamValue], seeds: tuple[int, ...],
                     kernel: Any = None) -> tuple[bool, str]:
        """`check_again` as (passed, "" or `status: why`)."""
        checked = self.check_again(config, seeds, kernel)
        return checked.ok, checked.message

    def check_again(self, config: Mapping[str, ParamValue], seeds: tuple[int, ...], kernel: Any = None) -> Checked:
        """Check a configuration on brand-new inputs (the winner, before it is reported).

        `kernel` is the module the configuration was timed in, so that state a kernel keeps
        across launches is still there; without it the configuration is compiled and timed
        again first (its timed launches checked as always), then checked."""
        try:
            geo = self._geometry(config, self.problem)
            if kernel is None:
                kernel = self.compile(config)
                self._arm_guards()
                self.measure(kernel, geo)
            # every size's new sets drawn at once, in threads, as prepare() draws the first ones
            jobs = [(which, s) for which in range(len(self.problems)) for s in seeds]
            fresh: dict[int, list[Inputs]] = {}
            for (which, _), inputs in zip(jobs, self.sets.side_by_side(lambda job: self.sets.fresh(*job), jobs)):
                fresh.setdefault(which, []).append(inputs)
            self._check(kernel, config, lambda which: fresh[which])
            # and launched again and again on one input set: a race that shows once in 300
            # launches is seen with 95% probability
            est = float(np.median(self._timed_launches(kernel, geo, 3, ())))
            try:
                self.agrees_with_itself(kernel, geo, est)
            except Rejected as e:
                raise Rejected(e.status, f"launched again and again on one input set: {e.message}") from None
            return Checked(True)
        except Rejected as e:
            return Checked(False, e.status, e.message)
        except CompileError as e:
            return Checked(False, "compile_error", str(e))
        except LaunchError as e:
            return Checked(False, "launch_error", str(e))
        except ExpressionError as e:
            return Checked(False, "wrong_result", str(e))


def _no_energy() -> None:
    """The energy counter of a device that has none: no reading."""
    return None


def _widening(r: np.ndarray, worst: float) -> tuple[float, tuple[float, float]]:
    """From the original's errors over the default tolerance (`r`, its worst `worst`): the
    widening of the tolerance (CALIBRATION_FACTOR times the CALIBRATION_QUANTILE quantile, where
    that misses the default) and the spare elements beyond it (their share, how far beyond)."""
    high = float(np.quantile(r, CALIBRATION_QUANTILE)) if r.size else 0.0
    scale = CALIBRATION_FACTOR * high if high > 1.0 else 1.0
    beyond = int(np.count_nonzero(r > scale))
    return scale, ((beyond / r.size, CALIBRATION_FACTOR * worst / scale) if beyond else (0.0, 1.0))


def _elements_differ(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Which elements of two arrays of one dtype differ in any byte, one flag an element: their
    bits compared as whole words where the element is one (NaN payloads and -0.0 count), one
    pass over the bytes. (Byte positions, sorted to elements, took a minute at 64M elements.)"""
    item = a.dtype.itemsize
    word = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}.get(item)
    x, y = np.ascontiguousarray(a).reshape(-1), np.ascontiguousarray(b).reshape(-1)
    if word is not None:
        return x.view(word) != y.view(word)
    return (x.view(np.uint8).reshape(-1, item) != y.view(np.uint8).reshape(-1, item)).any(axis=1)


def _first_differences(backend: Backend, pairs: list[tuple[Any, int, Any, int, int]]) -> list[int]:
    """The backend's first_difference of each pair, all at once where it can."""
    if backend.capabilities.first_differences:
        return backend.first_differences(pairs)
    return [backend.first_difference(*p) for p in pairs]


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
