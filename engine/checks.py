"""The checks of the protocol: a launch of a kernel on an input set, its buffers between guard
regions and its outputs poisoned, and what is inspected after it; the calibration of the
tolerances on the original kernel, the hard input set, the templating gate's reproduction of the
original and the launches again and again for races.

engine/evaluate.py's Evaluator runs a configuration through these checks and engine/timing.py's
timed launches (which check some of their own launches here too); the working buffers are
engine/buffers.py's, the input sets with their references engine/input_sets.py's, and the
comparison with a reference engine/compare.py's.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping

import numpy as np

from .backends import GUARD_BYTES, Backend, LaunchError
from .buffers import GuardedBuffers, Outputs, out_of_bounds
from .compare import TOLERANCE, Expected, compare, ratios
from .expressions import ExpressionError
from .input_sets import InputSets, checksum
from .inputs import HARD_KINDS, Inputs, hard_kinds, make_hard_inputs, make_inputs
from .result import Rejected
from .space import Geometry, launch_geometry
from .template import Argument, ParamValue, Problem, Template

# Output types the device checks against the tolerance itself (backends whose capabilities have
# `compare_close`); others (float64, integers) are read back and compared by the host.
DEVICE_CLOSE_DTYPES = ("float32", "float16", "bfloat16")
POISONS = ("nan", "bits", "plausible")

# A candidate may miss the reference by at most this many times the original kernel's own worst
# error, where the original misses the dtype's default tolerance; beyond CALIBRATION_LIMIT times
# the default the original and the reference disagree and the run stops.
CALIBRATION_FACTOR = 2.0
CALIBRATION_LIMIT = 1e4
# The share of the original's elements whose error the calibration's widening is taken from: a
# high quantile, so that one bad element of the original never opens every element's tolerance
CALIBRATION_QUANTILE = 0.999

# Leaders are launched again on one input set up to RACE_LAUNCHES times, or RACE_SECONDS of
# launches: a race that shows once in 300 launches is seen with 95% probability at 900
RACE_LAUNCHES = 900
RACE_SECONDS = 0.5


class CalibrationError(RuntimeError):
    """The original kernel disagrees with the reference (or does not compile)."""


class Checks:
    """Checked launches of one template's kernels at every verification size: what a kernel is
    launched on (inputs restored, outputs poisoned, guards armed) and what must hold after it
    (guards intact, inputs unchanged, outputs within the calibrated tolerance)."""

    def __init__(self, backend: Backend, template: Template, problems: tuple[Problem, ...],
                 buffers: GuardedBuffers, rng: np.random.Generator, seed: int = 0):
        self.backend = backend
        self.template = template
        self.problems = problems
        self.buffers = buffers
        self.rng = rng  # the system's entropy, never the run's seed
        self.seed = seed
        self.sets: InputSets | None = None  # the evaluator's input sets, given once they exist
        self.kinds: list[str] = []  # poisons still to use in this configuration's checked runs
        self.scale: dict[str, float] = {}  # outputs whose default tolerance the calibration widened
        # outputs where the original has a few elements beyond the calibrated tolerance: (their
        # share, how far beyond the worst of them is)
        self.spare: dict[str, tuple[float, float]] = {}
        self.last_checks: dict[tuple[int, str], Expected] = {}  # the reference a failed output missed
        self.hard_note = ""  # what the calibration found about the hard kinds
        # Tolerance checks on the device where the backend has them: only a failure is read back
        # (and described by the host's `compare`, which stays the authority).
        self.device_close = backend.compare_close if backend.capabilities.compare_close else None

    def arm(self) -> None:
        """Write the guard pattern around every buffer, at every verification size."""
        self.buffers.arm()

    def geometry(self, config: Mapping[str, ParamValue] | None, problem: Problem) -> Geometry:
        """The launch of a configuration (None: the original kernel, at its own launch) at a size."""
        return launch_geometry(self.template, config, problem, self.backend.limits)

    def poison(self, which: int, inputs: Inputs, kind: str | None = None) -> None:
        """Overwrite every output with one of the poisons, chosen at random unless `kind` says."""
        self.buffers.poison(
            which, lambda: kind or (self.kinds.pop() if self.kinds else POISONS[int(self.rng.integers(len(POISONS)))]),
            lambda name: self.sets.plausible(which, name, inputs))

    def failing(self, a: Argument, out: np.ndarray, which: int) -> int:
        """How many elements of a failed output are outside the tolerance (NaN counts)."""
        exp = self.last_checks.get((which, a.name))
        if exp is None or exp.exact:
            return out.size
        o = out.ravel().astype(exp.values.dtype)
        with np.errstate(invalid="ignore", over="ignore"):
            ok = np.abs(o - exp.values) <= exp.tol
        if exp.nan is not None:
            ok |= exp.nan
        return int(out.size - np.count_nonzero(ok))

    def run(self, kernel: Any, geo: Geometry, inputs: Inputs, which: int, poison: str | None = None) -> Outputs:
        """Restore the inputs, poison the outputs, launch once; the outputs are read back when
        (and only if) something asks for them."""
        self.buffers.restore(which, inputs)
        self.poison(which, inputs, poison)
        self.buffers.launched()
        self.backend.launch(kernel, geo, self.buffers.args(which, inputs))
        return self.buffers.outputs(which)

    def passes_on_device(self, which: int, a: Argument, exp: Expected) -> float | None:
        """The worst error over the tolerance when the device finds the output right; None when
        it finds something wrong or cannot check this output (the host then compares)."""
        if self.device_close is None or exp.exact or a.dtype not in DEVICE_CLOSE_DTYPES:
            return None
        if exp.device is None:
            exp.device = self.backend.alloc(max(exp.values.nbytes, 4))
            self.backend.upload(exp.device, exp.values.astype(np.float32, copy=False))
        nan, inf, sign, bad, _, _, worst = self.device_close(
            self.buffers.of(which)[a.name].raw, GUARD_BYTES, exp.device, exp.values.size, a.dtype,
            exp.rtol, exp.atol)
        return None if nan or inf or sign or bad else worst

    def inspect(self, which: int, inputs: Inputs, outs: Mapping[str, np.ndarray], where: str,
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
        found = first_differences(
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
                differ = elements_differ(now, inputs.host[a.name])
                if differ.any():
                    raise Rejected("wrote_input", f"the kernel changed its input `{a.name}`: "
                                   f"{int(np.count_nonzero(differ))} of {now.size} elements differ, first at "
                                   f"{int(np.argmax(differ))}{suffix}")
        worst = 0.0
        for a in self.template.arguments:
            if not a.is_output:
                continue
            on_device = self.passes_on_device(which, a, inputs.checks[a.name])
            if on_device is not None:
                worst = max(worst, on_device)
                continue
            out = outs[a.name]
            err, msg = compare(a.name, out, inputs.checks[a.name])
            worst = max(worst, err)
            if msg:
                self.last_checks[(which, a.name)] = inputs.checks[a.name]
                why = self.buffers.unwritten(which, a, out, lambda: self.failing(a, out, which)) or msg
                raise Rejected("wrong_result", f"{why}{suffix}")
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
        return all(f < 0 for f in first_differences(self.backend, pairs))

    def check(self, kernel: Any, config: Mapping[str, ParamValue] | None,
              inputs_for: Callable[[int], list[Inputs]]) -> tuple[float, tuple[int, ...]]:
        """Every verification size and input set; raises Rejected with the first finding."""
        self.arm()
        runs = [(which, inputs) for which in range(len(self.problems)) for inputs in inputs_for(which)]
        if self.sets.hard is not None:  # and the hard kinds of input the original passes
            runs.append(self.sets.hard)
        # At least one run with each poison, in a random order: a kernel that computes only when
        # it finds one kind of poison (or skips when it finds one) fails here, every time.
        while runs and len(runs) < len(POISONS):
            runs.append(runs[len(runs) % len(runs)])
        kinds = list(POISONS) * (len(runs) // len(POISONS) + 1)
        self.kinds = [kinds[i] for i in self.rng.permutation(len(runs))]
        worst = 0.0
        seeds: list[int] = []
        try:
            for which, inputs in runs:
                geo = self.geometry(config, self.problems[which])
                if inputs.seed not in seeds:
                    seeds.append(inputs.seed)
                outs = self.run(kernel, geo, inputs, which)
                where = f"inputs with {', '.join(inputs.kinds)} rows" if inputs.kinds else f"seed {inputs.seed}"
                worst = max(worst, self.inspect(which, inputs, outs, where))
        finally:
            self.kinds = []
        return worst, tuple(seeds)

    def reproduces(self, original: Any, kernel: Any, config: Mapping[str, ParamValue],
                   seeds: tuple[int, ...]) -> tuple[bool, float, str]:
        """Whether `kernel` (at `config`) gives the `original` kernel's outputs on fresh inputs
        (the templating gate).

        On every input set the original (at its own launch) runs first and its outputs become the
        reference that the configuration must match within the dtype's tolerance; a numpy
        reference plays no part. Returns (ok, worst error / tolerance, message)."""
        worst = 0.0
        outputs = [a for a in self.template.arguments if a.is_output]
        self.arm()
        for which, problem in enumerate(self.problems):
            try:
                mine = self.geometry(config, problem)
                theirs = self.geometry(None, problem)
            except ExpressionError as e:
                return False, math.inf, f"launch geometry at {problem.label()}: {e}"
            for seed in seeds:
                inputs = make_inputs(self.template, problem, seed)
                try:
                    expected = self.run(original, theirs, inputs, which, poison="nan")
                    for a in outputs:
                        ref = expected[a.name].copy()
                        # outputs start as NaN: an original that leaves them all NaN proves nothing
                        if a.dtype in TOLERANCE and ref.size and np.isnan(ref).all():
                            return False, math.inf, (f"the original kernel wrote none of `{a.name}` at "
                                                     f"{problem.label()}: nothing to compare with")
                        inputs.expected[a.name] = ref
                        inputs.checks[a.name] = Expected(ref, a.dtype, a)
                    got = self.run(kernel, mine, inputs, which)
                    worst = max(worst, self.inspect(which, inputs, got, f"seed {seed}", label=True))
                except LaunchError as e:
                    return False, math.inf, f"launch failed at {problem.label()} (seed {seed}): {e}"
                except Rejected as e:
                    return False, math.inf, f"{e.status.replace('_', ' ')}: {e.message}"
        return True, worst, ""

    def agrees_with_itself(self, kernel: Any, geo: Geometry, median_us: float, launches: int = RACE_LAUNCHES,
                           seconds: float = RACE_SECONDS) -> None:
        """Launch the configuration again and again on one input set (its outputs poisoned before
        each launch): every output must be byte for byte the first launch's, or, where the order
        of its operations is not fixed (atomics), within the tolerance of the reference. As many
        launches as `launches`, or `seconds` of them; raises Rejected on a difference."""
        inputs = self.sets.pool(0)[0]
        count = int(max(30, min(launches, seconds * 1e6 / max(median_us * 1.5 + 20.0, 1.0))))
        self.arm()
        bufs = self.buffers.of(0)
        first: dict[str, Any] = {}
        outputs = [a for a in self.template.arguments if a.is_output]
        for k in range(count):
            outs = self.run(kernel, geo, inputs, 0, poison="nan" if k % 2 else "bits")
            if not first:
                self.inspect(0, inputs, outs, f"launch 1 of {count}")
                for a in outputs:
                    first[a.name] = self.backend.alloc(max(bufs[a.name].nbytes, 1))
                    self.backend.copy(first[a.name], bufs[a.name].raw, bufs[a.name].nbytes, src_offset=GUARD_BYTES)
                continue
            found = first_differences(self.backend, [(bufs[a.name].raw, GUARD_BYTES, first[a.name], 0,
                                                      bufs[a.name].nbytes) for a in outputs])
            if any(f >= 0 for f in found):  # a race, or an order of operations that is not fixed
                self.inspect(0, inputs, outs, f"launch {k + 1} of {count}, which differs from the first", full=False)
            if k == count - 1:
                self.inspect(0, inputs, outs, f"launch {k + 1} of {count}")

    def calibrate(self, kernel: Any, config: Mapping[str, ParamValue] | None) -> dict[str, float]:
        """Measure the original kernel's own error against the reference, before tuning (`kernel`:
        its build, launched at `config`'s launch, or at its own where `config` is None).

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
        outputs = [a for a in self.template.arguments if a.is_output]
        worst: dict[str, tuple[float, str]] = {a.name: (0.0, "") for a in outputs}
        errors: dict[str, list[np.ndarray]] = {a.name: [] for a in outputs}
        self.arm()
        for which, problem in enumerate(self.problems):
            geo = self.geometry(config, problem)
            for inputs in self.sets.pool(which)[:2]:
                outs = self.run(kernel, geo, inputs, which, poison="nan")
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
            scale, spare = widening(np.concatenate(errors[a.name]), err)
            if scale > 1.0:
                self.scale[a.name] = scale
            if spare[0]:
                self.spare[a.name] = spare
        if self.scale or self.spare:
            self.sets.recalibrated()
        self.hard_inputs(kernel, config)
        return {name: round(err, 4) for name, (err, _) in worst.items()}

    def hard_inputs(self, original: Any, config: Mapping[str, ParamValue] | None = None) -> None:
        """The hard input set every configuration is checked on, at the smallest verification
        size: rows of every hard kind the reference computes (finite where the inputs are) and
        the original kernel passes (`original`: the calibration's build, at `config`'s launch);
        without a numpy reference, of every kind, the default configuration's outputs the reference."""
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
                outs = self.run(original, self.geometry(config, problem), inputs, which, poison="nan")
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
                    scale, spare = widening(ratios(outs[a.name], default), err)
                    scale = max(scale, self.scale.get(a.name, 1.0))
                    inputs.checks[a.name] = default.rescaled(a, scale, max(spare, self.spare.get(a.name, (0.0, 1.0))))
            except LaunchError as e:
                return None, f"the original kernel: {e}"
            return inputs, ""

        if original is not None:
            self.arm()
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


def widening(r: np.ndarray, worst: float) -> tuple[float, tuple[float, float]]:
    """From the original's errors over the default tolerance (`r`, its worst `worst`): the
    widening of the tolerance (CALIBRATION_FACTOR times the CALIBRATION_QUANTILE quantile, where
    that misses the default) and the spare elements beyond it (their share, how far beyond)."""
    high = float(np.quantile(r, CALIBRATION_QUANTILE)) if r.size else 0.0
    scale = CALIBRATION_FACTOR * high if high > 1.0 else 1.0
    beyond = int(np.count_nonzero(r > scale))
    return scale, ((beyond / r.size, CALIBRATION_FACTOR * worst / scale) if beyond else (0.0, 1.0))


def elements_differ(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Which elements of two arrays of one dtype differ in any byte, one flag an element: their
    bits compared as whole words where the element is one (NaN payloads and -0.0 count), one
    pass over the bytes. (Byte positions, sorted to elements, took a minute at 64M elements.)"""
    item = a.dtype.itemsize
    word = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}.get(item)
    x, y = np.ascontiguousarray(a).reshape(-1), np.ascontiguousarray(b).reshape(-1)
    if word is not None:
        return x.view(word) != y.view(word)
    return (x.view(np.uint8).reshape(-1, item) != y.view(np.uint8).reshape(-1, item)).any(axis=1)


def first_differences(backend: Backend, pairs: list[tuple[Any, int, Any, int, int]]) -> list[int]:
    """The backend's first_difference of each pair, all at once where it can."""
    if backend.capabilities.first_differences:
        return backend.first_differences(pairs)
    return [backend.first_difference(*p) for p in pairs]
