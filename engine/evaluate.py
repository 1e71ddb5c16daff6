"""Evaluate one configuration: compile -> resource check -> verify -> time -> Result.

This module runs the protocol; its parts are their own modules: the checks (engine/checks.py: a
checked launch and what is inspected after it, the calibration, the gate's reproduction, races),
the timing (engine/timing.py: timed launches, some of them checked, and what their times say),
the working buffers between guard regions (engine/buffers.py) and the input sets with their
references (engine/input_sets.py, drawn by engine/inputs.py, compared by engine/compare.py).

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

from .backends import Backend, CompileError, LaunchError
from .buffers import GuardedBuffers
from .checks import POISONS, CalibrationError, Checks  # noqa: F401  (callers take them from here too)
from .expressions import ExpressionError
from .input_sets import InputSets, threads
from .inputs import Inputs
from .messages import Checked
from .result import Rejected, Resources, Result  # noqa: F401  (Rejected: callers take it from here too)
from .space import Geometry, compiler_defines, geometry, launch_geometry  # noqa: F401  (launch_geometry: too)
from .template import ParamValue, Problem, Template
from .timing import Timing, TimingPolicy, median_known, suspect_margin  # noqa: F401  (callers take them from here)

# Leaders (within LEADER_MARGIN of the fastest median the worker has seen) are launched again on
# one input set (engine/checks.py's RACE_LAUNCHES, or RACE_SECONDS of launches): a new leader found
# while the search goes on gets as many as RACE_FIRST launches or RACE_FIRST_SECONDS; the full count
# is for the final check of the winner (verify_again)
LEADER_MARGIN = 0.05
RACE_FIRST = 100
RACE_FIRST_SECONDS = 0.05


@dataclass(frozen=True)
class VerifyPolicy:
    """How each configuration is checked."""

    seeds: int = 2  # input sets per verification size for each configuration
    pool: int = 4  # input sets drawn per size for the run; configurations rotate through them


class Evaluator:
    """Runs the protocol for one template and problem on an open backend: its checks
    (`checks`, engine/checks.py) and its timing (`timer`, engine/timing.py) over one set of
    working buffers and input sets."""

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
        rng = np.random.default_rng(random.SystemRandom().randrange(1 << 63))
        # the working buffers of every size, their guards and poisons (engine/buffers.py)
        self.buffers = GuardedBuffers(backend, template, self.problems, rng)
        self.checks = Checks(backend, template, self.problems, self.buffers, rng, seed)
        # the input sets of every size, the timed launches' changed sets and the hard set
        # (make_hard_inputs) every configuration is checked on (engine/input_sets.py)
        self.sets = InputSets(template, self.problems, seed, verify.pool, self.reference, self._default_outputs,
                              self.checks.scale, self.checks.spare)
        self.checks.sets = self.sets
        self.timer = Timing(backend, template, problem, timing, self.buffers, self.sets, self.checks, rng)
        self._best_us = math.inf  # the fastest median this evaluator has measured
        self._calibration_build: Any = None  # the original's build for calibrate(), under way

    # what the run reads of the parts ---------------------------------------------------------------
    @property
    def scale(self) -> dict[str, float]:
        """Outputs whose default tolerance the calibration widened."""
        return self.checks.scale

    @property
    def spare(self) -> dict[str, tuple[float, float]]:
        """Outputs where the original has a few elements beyond the calibrated tolerance."""
        return self.checks.spare

    @property
    def hard_note(self) -> str:
        return self.checks.hard_note

    @property
    def bytes_moved(self) -> float:
        return self.timer.bytes_moved

    @property
    def flops(self) -> float:
        return self.timer.flops

    @property
    def sol_us(self) -> float | None:
        return self.timer.sol_us

    @property
    def cold_cache(self) -> bool:
        return self.timer.cold_cache

    # inputs and references -------------------------------------------------------------------
    def _default_outputs(self, inputs: Inputs, which: int) -> dict[str, np.ndarray]:
        """Without a numpy reference, the default configuration's outputs are the reference."""
        default = self.template.default_config()
        with self._default_lock:
            if self._default_kernel is None:
                self._default_kernel = self.backend.compile(self.source, self.template.entry,
                                                             compiler_defines(default), self.options)
            geo = geometry(self.template, default, self.problems[which], self.backend.limits)
            outs = self.checks.run(self._default_kernel, geo, inputs, which, poison="nan")
            return {k: v.copy() for k, v in outs.items()}  # read before another thread's launch

    def intact(self) -> bool:
        """Whether everything the checks compare with still holds what it held when it was made:
        each drawn set's inputs and references on the host (their checksums) and their copies on
        the device, the guard patterns and poisons. A stray write of a configuration can reach
        them (on a CPU device the kernel's buffers share the worker's memory)."""
        return self.checks.intact()

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
        jobs = [(w, k) for w in range(len(pools)) for k in range(n)]
        list(self.sets.side_by_side(lambda job: pools[job[0]][job[1]], jobs))
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
        """Measure the original kernel's own error against the reference, before tuning, and
        widen the tolerances where it misses them (engine/checks.py's `calibrate`); raises
        CalibrationError, one line, when it does not compile or disagrees with the reference."""
        if self.reference is None:
            self.checks.hard_inputs(None)
            return {}
        config, args = self._calibration_build_args()
        built, self._calibration_build = self._calibration_build, None
        try:
            kernel = self.backend.load(*built.result()) if built is not None else self.backend.compile(*args)
        except CompileError as e:
            raise CalibrationError(f"the original kernel does not compile: {e}") from None
        return self.checks.calibrate(kernel, config)

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
        """Every verification size and input set (engine/checks.py); raises Rejected with the
        first finding. The timed launches after it start on changed sets none of its own saw."""
        self.timer.used_variants = set()
        return self.checks.check(kernel, config, inputs_for)

    def _geometry(self, config: Mapping[str, ParamValue] | None, problem: Problem) -> Geometry:
        return self.checks.geometry(config, problem)

    def evaluate_original(self) -> Result:
        """The protocol for the original, untemplated kernel (the template's own copy of it)."""
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
        """Whether `config` gives the original kernel's outputs on fresh inputs (the templating
        gate, engine/checks.py's `reproduces`): (ok, worst error / tolerance, message)."""
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
        return self.checks.reproduces(original, kernel, config, seeds)

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
        result = self.timer.result(replace(base, time_s=time.perf_counter() - t0), times)
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
                result = self.timer.with_energy(result, kernel, geo)
        return result

    def measure_again(self, result: Result, kernel: Any) -> Result:
        """Time again a configuration `evaluate` has just verified and timed, in its loaded
        module (its timed launches checked as always): the result with the new times."""
        t0 = time.perf_counter()
        try:
            times = self.timer.measure(kernel, self._geometry(result.config, self.problem))
        except LaunchError as e:
            return replace(result, status="launch_error", message=f"while timing again: {e}")
        except Rejected as e:
            return replace(result, status=e.status, message=e.message)
        return self.timer.result(replace(result, time_s=result.time_s + time.perf_counter() - t0), times)

    def measure(self, kernel: Any, geo: Geometry) -> list[float]:
        """The timed launches of a configuration just checked (engine/timing.py's `measure`)."""
        return self.timer.measure(kernel, geo)

    def agrees_with_itself(self, kernel: Any, geo: Geometry, median_us: float, *args) -> None:
        """Launched again and again on one input set (engine/checks.py); raises Rejected."""
        self.checks.agrees_with_itself(kernel, geo, median_us, *args)

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
                self.checks.arm()
                self.measure(kernel, geo)
            # every size's new sets drawn at once, in threads, as prepare() draws the first ones
            jobs = [(which, s) for which in range(len(self.problems)) for s in seeds]
            fresh: dict[int, list[Inputs]] = {}
            for (which, _), inputs in zip(jobs, self.sets.side_by_side(lambda job: self.sets.fresh(*job), jobs)):
                fresh.setdefault(which, []).append(inputs)
            self._check(kernel, config, lambda which: fresh[which])
            # and launched again and again on one input set: a race that shows once in 300
            # launches is seen with 95% probability
            est = float(np.median(self.timer.launches(kernel, geo, 3, ())))
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
