"""Evaluate one configuration: compile -> resource check -> verify -> time -> Result.

The protocol (DESIGN.md): random inputs (never zeros) from fresh seeds, at least two of them, at
every verification size; outputs poisoned with NaN before each run so an unwritten element fails;
tolerance by dtype; NaN or Inf where the reference has none fails; timing with device events after
warm-up, many repetitions, the cache flushed between them, median and spread, every raw time kept;
a result faster than its speed-of-light bound is flagged, not ranked.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping

import numpy as np

from .backends import Backend, CompileError, LaunchError
from .expressions import ExpressionError
from .result import Resources, Result
from .sol import SUSPECT_MARGIN, sol_time_us
from .space import Geometry, geometry
from .template import Argument, ParamValue, Problem, Template, np_dtype

# Tolerances by dtype: (relative, absolute). Outputs are compared as
# |out - ref| <= atol + rtol * |ref| elementwise.
TOLERANCE = {
    "float16": (1e-2, 1e-3),
    # 8 significant bits: 1.6e-2 is two units in the last place, as in torch.testing's default
    "bfloat16": (1.6e-2, 1e-3),
    "float32": (1e-5, 1e-6),
    "float64": (1e-10, 1e-12),
}
INT_POISON = -0x5A5A5A5A


@dataclass(frozen=True)
class TimingPolicy:
    """How each configuration is timed."""

    warmup: int = 3
    min_repeats: int = 10
    max_repeats: int = 200
    target_s: float = 0.05  # device time spent timing one configuration
    flush: bool = True


@dataclass(frozen=True)
class VerifyPolicy:
    """How each configuration is checked."""

    seeds: int = 2  # input sets per verification size for each configuration
    pool: int = 4  # input sets drawn per size for the run; configurations rotate through them


class Expected:
    """A reference output prepared once for fast comparisons: values in the working precision,
    the tolerance of each element, and where the reference itself is NaN or infinite."""

    def __init__(self, ref: np.ndarray, dtype: str, arg: Argument):
        self.shape = ref.shape
        self.dtype = dtype
        self.exact = dtype not in TOLERANCE
        if self.exact:
            self.values = np.ascontiguousarray(ref).ravel()
            return
        rtol, atol = TOLERANCE[dtype]
        self.rtol = arg.rtol if arg.rtol is not None else rtol
        self.atol = arg.atol if arg.atol is not None else atol
        work = np.float64 if dtype == "float64" else np.float32
        self.values = ref.astype(work).ravel()
        nan, inf = np.isnan(self.values), np.isinf(self.values)
        self.nan = nan if nan.any() else None
        self.inf = inf if inf.any() else None
        with np.errstate(invalid="ignore"):
            self.tol = (self.atol + self.rtol * np.abs(self.values)).astype(work)
        if self.nan is not None or self.inf is not None:
            special = (nan | inf)
            self.tol[special] = np.inf


class Inputs:
    """One random input set for a problem, with its reference outputs."""

    def __init__(self, seed: int, host: dict[str, np.ndarray], scalars: dict[str, Any]):
        self.seed = seed
        self.host = host
        self.scalars = scalars
        self.expected: dict[str, np.ndarray] = {}
        self.checks: dict[str, Expected] = {}
        self.device: dict[str, Any] = {}  # pristine copies on the device, uploaded once


def arg_shape(arg: Argument, problem: Problem) -> tuple[int, ...]:
    shape = []
    for e in arg.shape:
        v = e.evaluate(problem.values)
        if isinstance(v, float):
            if not v.is_integer():
                raise ExpressionError(f"shape of {arg.name} is not whole: {v}")
            v = int(v)
        if v < 0:
            raise ExpressionError(f"shape of {arg.name} is negative: {v}")
        shape.append(int(v))
    return tuple(shape)


def scalar_value(arg: Argument, problem: Problem) -> Any:
    assert arg.value is not None
    return np_dtype(arg.dtype).type(arg.value.evaluate(problem.values))


def make_inputs(template: Template, problem: Problem, seed: int) -> Inputs:
    """Random inputs for every input and inout buffer; never zeros."""
    rng = np.random.default_rng(seed)
    host: dict[str, np.ndarray] = {}
    scalars: dict[str, Any] = {}
    for arg in template.arguments:
        if arg.role == "scalar":
            scalars[arg.name] = scalar_value(arg, problem)
            continue
        if arg.role == "output":
            continue
        shape = arg_shape(arg, problem)
        if arg.init == "randint":
            data = rng.integers(int(arg.low), int(arg.high), size=shape)
        elif arg.init == "uniform":
            data = rng.uniform(arg.low, arg.high, size=shape)
        else:
            data = rng.standard_normal(size=shape, dtype=np.float32)
        data = data.astype(np_dtype(arg.dtype))
        if arg.inf_fraction:
            data[rng.random(size=shape) < arg.inf_fraction] = -np.inf
        host[arg.name] = np.ascontiguousarray(data)
    return Inputs(seed, host, scalars)


CHUNK = 1 << 22  # elements compared per task; large outputs are compared on every core


@dataclass
class _Stats:
    nan: int = 0
    first_nan: int = -1
    inf: int = 0
    first_inf: int = -1
    sign: int = 0  # infinities of the wrong sign, or finite where the reference is infinite
    bad: int = 0  # elements outside the tolerance
    worst: float = 0.0
    worst_at: int = 0


def _chunk_stats(out: np.ndarray, exp: Expected, lo: int, hi: int) -> _Stats:
    st = _Stats()
    o = out[lo:hi].astype(exp.values.dtype, copy=False)
    r = exp.values[lo:hi]
    ref_nan = exp.nan[lo:hi] if exp.nan is not None else None
    ref_inf = exp.inf[lo:hi] if exp.inf is not None else None
    o_nan = np.isnan(o)
    bad_nan = o_nan if ref_nan is None else (o_nan & ~ref_nan)
    if bad_nan.any():
        idx = np.flatnonzero(bad_nan)
        st.nan, st.first_nan = idx.size, lo + int(idx[0])
    o_inf = np.isinf(o)
    if o_inf.any() or ref_inf is not None:
        rinf = ref_inf if ref_inf is not None else np.zeros_like(o_inf)
        wrong = o_inf & ~rinf
        if ref_nan is not None:
            wrong &= ~ref_nan
        if wrong.any():
            idx = np.flatnonzero(wrong)
            st.inf, st.first_inf = idx.size, lo + int(idx[0])
        both = o_inf & rinf
        st.sign = int(np.count_nonzero(np.signbit(o[both]) != np.signbit(r[both])))
        st.sign += int(np.count_nonzero(~o_inf & rinf & ~o_nan))
    with np.errstate(invalid="ignore"):
        ratio = np.abs(o - r) / exp.tol[lo:hi]
    if ref_nan is not None or ref_inf is not None or st.nan or st.inf:
        ratio[~np.isfinite(ratio)] = 0.0
    if ratio.size:
        i = int(np.argmax(ratio))
        st.worst, st.worst_at = float(ratio[i]), lo + i
        if st.worst > 1.0:
            st.bad = int(np.count_nonzero(ratio > 1.0))
    return st


def _first(values: list[int]) -> int:
    found = [v for v in values if v >= 0]
    return min(found) if found else -1


def compare(name: str, out: np.ndarray, exp: Expected) -> tuple[float, str]:
    """(worst error as a fraction of the tolerance, message); a fraction above 1 fails."""
    if out.shape != exp.shape:
        return math.inf, f"{name}: shape {out.shape} but the reference has {exp.shape}"
    o = np.ascontiguousarray(out).ravel()
    if exp.exact:
        bad = np.flatnonzero(o != exp.values)
        if bad.size:
            i = int(bad[0])
            return math.inf, (f"{name}: {bad.size} of {o.size} elements differ; "
                              f"first at {i}: {o[i]} != {exp.values[i]}")
        return 0.0, ""
    bounds = [(lo, min(lo + CHUNK, o.size)) for lo in range(0, o.size, CHUNK)] or [(0, 0)]
    if len(bounds) > 1:
        stats = list(_pool().map(lambda b: _chunk_stats(o, exp, *b), bounds))
    else:
        stats = [_chunk_stats(o, exp, *bounds[0])]
    nan = sum(s.nan for s in stats)
    if nan:
        return math.inf, (f"{name}: {nan} of {o.size} elements are NaN (unwritten or invalid); "
                          f"first at {_first([s.first_nan for s in stats])}")
    inf = sum(s.inf for s in stats)
    if inf:
        return math.inf, (f"{name}: {inf} elements are Inf where the reference is finite; "
                          f"first at {_first([s.first_inf for s in stats])}")
    if sum(s.sign for s in stats):
        return math.inf, f"{name}: an infinity of the reference is not reproduced"
    top = max(stats, key=lambda s: s.worst)
    if top.worst > 1.0:
        nbad = sum(s.bad for s in stats)
        i = top.worst_at
        return top.worst, (f"{name}: {nbad} of {o.size} elements outside tolerance (rtol {exp.rtol:g}, "
                           f"atol {exp.atol:g}); worst at {i}: {float(o[i]):.6g} vs {float(exp.values[i]):.6g}")
    return top.worst, ""


_POOL = None


def _pool():
    global _POOL
    if _POOL is None:
        from concurrent.futures import ThreadPoolExecutor

        _POOL = ThreadPoolExecutor(max_workers=min(16, os.cpu_count() or 1), thread_name_prefix="kerntune-compare")
    return _POOL


class Evaluator:
    """Runs the protocol for one template and problem on an open backend."""

    def __init__(self, backend: Backend, template: Template, problem: Problem, *,
                 seed: int = 0, timing: TimingPolicy = TimingPolicy(),
                 verify: VerifyPolicy = VerifyPolicy(),
                 reference: Callable[..., Mapping[str, np.ndarray]] | None = None):
        self.backend = backend
        self.template = template
        self.problem = problem
        self.timing = timing
        self.verify_policy = verify
        self.seed = seed
        self.source = template.source_for(backend.name)
        self.options = template.compile_options.get(backend.name, ())
        self.reference = reference if reference is not None else template.load_reference()
        self.problems = (problem,) + tuple(template.verify_problems)
        self._buffers: dict[int, dict[str, Any]] = {}
        self._host_out: dict[tuple[int, str], np.ndarray] = {}
        self._pools: dict[int, list[Inputs]] = {}
        self._next = 0
        self._baseline_kernel: Any = None
        env = problem.values
        self.bytes_moved = float(template.cost_bytes.evaluate(env))
        self.flops = float(template.cost_flops.evaluate(env))
        self.sol_us = sol_time_us(self.bytes_moved, self.flops, backend.limits)
        cache = backend.limits.l2_bytes
        # The bound is only a fair test when no part of the working set can still be cached.
        self.cold_cache = timing.flush and (backend.flush_bytes() >= cache or self.bytes_moved >= 2 * cache)

    # inputs and references -------------------------------------------------------------------
    def _pool(self, which: int) -> list[Inputs]:
        if which not in self._pools:
            problem = self.problems[which]
            base = (self.seed * 1_000_003 + which * 7919) & 0x7FFFFFFF
            self._pools[which] = [self._with_reference(make_inputs(self.template, problem, base + k), which)
                                  for k in range(self.verify_policy.pool)]
        return self._pools[which]

    def _with_reference(self, inputs: Inputs, which: int) -> Inputs:
        problem = self.problems[which]
        outputs = [a for a in self.template.arguments if a.is_output]
        if self.reference is not None:
            given = {**{k: v.copy() for k, v in inputs.host.items()}, **inputs.scalars}
            try:
                expected = self.reference(given, dict(problem.values))
            except Exception as e:  # the reference is the template author's code
                raise RuntimeError(f"the template's reference failed: {type(e).__name__}: {e}") from None
            for a in outputs:
                if a.name not in expected:
                    raise RuntimeError(f"the template's reference returned no `{a.name}`")
                inputs.expected[a.name] = np.asarray(expected[a.name]).astype(np_dtype(a.dtype)).reshape(arg_shape(a, problem))
        else:
            inputs.expected = {k: v.copy() for k, v in self._baseline_outputs(inputs, which).items()}
        for a in outputs:
            inputs.checks[a.name] = Expected(inputs.expected[a.name], a.dtype, a)
        return inputs

    def _baseline_outputs(self, inputs: Inputs, which: int) -> dict[str, np.ndarray]:
        """Without a numpy reference, the default configuration's outputs are the reference."""
        default = self.template.default_config()
        if self._baseline_kernel is None:
            self._baseline_kernel = self.backend.compile(self.source, self.template.entry,
                                                         _defines(default), self.options)
        geo = geometry(self.template, default, self.problems[which], self.backend.limits)
        return self._run_checked(self._baseline_kernel, geo, inputs, which)

    def fresh_inputs(self, which: int, seed: int) -> Inputs:
        return self._with_reference(make_inputs(self.template, self.problems[which], seed), which)

    def _device_buffers(self, which: int) -> dict[str, Any]:
        if which not in self._buffers:
            bufs = {}
            for a in self.template.arguments:
                if a.is_buffer:
                    bufs[a.name] = self.backend.alloc(self._nbytes(a, which))
            self._buffers[which] = bufs
        return self._buffers[which]

    def _args(self, which: int, inputs: Inputs) -> list[Any]:
        bufs = self._device_buffers(which)
        return [bufs[a.name] if a.is_buffer else inputs.scalars[a.name] for a in self.template.arguments]

    def _run_checked(self, kernel: Any, geo: Geometry, inputs: Inputs, which: int) -> dict[str, np.ndarray]:
        """Restore the inputs, poison the outputs, launch once, and read the outputs back.

        Inputs live on the device in pristine copies, uploaded once per input set and copied
        into the working buffers before every run (a kernel that writes its inputs cannot
        change what later configurations see). Float outputs are poisoned with all-ones bytes,
        a NaN in every float format."""
        problem = self.problems[which]
        bufs = self._device_buffers(which)
        for a in self.template.arguments:
            if not a.is_buffer:
                continue
            nbytes = self._nbytes(a, which)
            if a.name in inputs.host:
                if a.name not in inputs.device:
                    inputs.device[a.name] = self.backend.alloc(nbytes)
                    self.backend.upload(inputs.device[a.name], inputs.host[a.name])
                self.backend.copy(bufs[a.name], inputs.device[a.name], nbytes)
            elif a.dtype in TOLERANCE:
                self.backend.fill(bufs[a.name], 0xFF, nbytes)
            else:
                self.backend.upload(bufs[a.name], np.full(arg_shape(a, problem), INT_POISON, dtype=a.dtype))
        self.backend.launch(kernel, geo, self._args(which, inputs))
        outs = {}
        for a in self.template.arguments:
            if a.is_output:
                key = (which, a.name)
                if key not in self._host_out:
                    self._host_out[key] = np.empty(arg_shape(a, problem), dtype=np_dtype(a.dtype))
                self.backend.download(bufs[a.name], self._host_out[key])
                outs[a.name] = self._host_out[key]
        return outs

    def _nbytes(self, a: Argument, which: int) -> int:
        return math.prod(arg_shape(a, self.problems[which])) * np_dtype(a.dtype).itemsize

    def prepare(self) -> None:
        """Draw the input pools and their references for every verification size now."""
        for which in range(len(self.problems)):
            self._pool(which)
            self._device_buffers(which)

    # the protocol ------------------------------------------------------------------------------
    def compile(self, config: Mapping[str, ParamValue]) -> Any:
        return self.backend.compile(self.source, self.template.entry, _defines(config), self.options)

    def check(self, kernel: Any, config: Mapping[str, ParamValue] | None,
              inputs_for: Callable[[int], list[Inputs]]) -> tuple[bool, float, str, tuple[int, ...]]:
        """Verify on every verification size; (ok, worst error / tolerance, message, seeds).
        A config of None checks the original kernel, at its own launch geometry."""
        worst = 0.0
        seeds: list[int] = []
        for which, problem in enumerate(self.problems):
            geo = self._geometry(config, problem)
            for inputs in inputs_for(which):
                seeds.append(inputs.seed)
                outs = self._run_checked(kernel, geo, inputs, which)
                for a in self.template.arguments:
                    if not a.is_output:
                        continue
                    err, msg = compare(a.name, outs[a.name], inputs.checks[a.name])
                    worst = max(worst, err)
                    if msg:
                        where = "" if which == 0 else f" at {problem.label()}"
                        return False, worst, f"{msg}{where} (seed {inputs.seed})", tuple(seeds)
        return True, worst, "", tuple(seeds)

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
        for which, problem in enumerate(self.problems):
            try:
                mine = self._geometry(config, problem)
                theirs = self._geometry(None, problem)
            except ExpressionError as e:
                return False, math.inf, f"launch geometry at {problem.label()}: {e}"
            for seed in seeds:
                inputs = make_inputs(self.template, problem, seed)
                try:
                    expected = self._run_checked(original, theirs, inputs, which)
                    for a in outputs:
                        ref = expected[a.name].copy()
                        # outputs start as NaN: an original that leaves them all NaN proves nothing
                        if a.dtype in TOLERANCE and ref.size and np.isnan(ref).all():
                            return False, math.inf, (f"the original kernel wrote none of `{a.name}` at "
                                                     f"{problem.label()}: nothing to compare with")
                        inputs.checks[a.name] = Expected(ref, a.dtype, a)
                    got = self._run_checked(kernel, mine, inputs, which)
                except LaunchError as e:
                    return False, math.inf, f"launch failed at {problem.label()} (seed {seed}): {e}"
                for a in outputs:
                    err, msg = compare(a.name, got[a.name], inputs.checks[a.name])
                    worst = max(worst, err)
                    if msg:
                        return False, worst, f"{msg} at {problem.label()} (seed {seed})"
        return True, worst, ""

    def _rotating(self, which: int) -> list[Inputs]:
        pool = self._pool(which)
        n = min(self.verify_policy.seeds, len(pool))
        start = self._next % len(pool)
        return [pool[(start + k) % len(pool)] for k in range(n)]

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
        if resources is None:
            resources = self.backend.resources(kernel)
        base = replace(base, resources=resources, occupancy=self.occupancy(geo, resources))
        reason = self.resource_violation(kernel, geo, resources)
        if reason:
            return replace(base, status="pruned", message=reason)

        t0 = time.perf_counter()
        try:
            ok, worst, msg, seeds = self.check(kernel, which_config, self._rotating)
        except LaunchError as e:
            return replace(base, status="launch_error", message=str(e), verify_s=time.perf_counter() - t0)
        finally:
            self._next += self.verify_policy.seeds
        base = replace(base, verify_s=time.perf_counter() - t0, max_error=worst, seeds=seeds)
        if not ok:
            return replace(base, status="wrong_result", message=msg)

        t0 = time.perf_counter()
        try:
            times = self.measure(kernel, geo)
        except LaunchError as e:
            return replace(base, status="launch_error", message=f"while timing: {e}",
                           time_s=time.perf_counter() - t0)
        return self._timed(replace(base, time_s=time.perf_counter() - t0), times)

    def measure(self, kernel: Any, geo: Geometry) -> list[float]:
        """Warm up, size the repetition count from the warm-up, then time with flushes."""
        p = self.timing
        args = self._args(0, self._pool(0)[0])
        warm = self.backend.time(kernel, geo, args, max(p.warmup, 1), p.flush)
        est_us = max(float(np.median(warm)), 1e-3)
        repeats = int(min(p.max_repeats, max(p.min_repeats, math.ceil(p.target_s * 1e6 / est_us))))
        return self.backend.time(kernel, geo, args, repeats, p.flush)

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
            if self.cold_cache and median < self.sol_us * (1 - SUSPECT_MARGIN):
                r = replace(r, status="suspect",
                            message=(f"measured {median:.2f} us, faster than the speed-of-light bound "
                                     f"{self.sol_us:.2f} us: the measurement or the cost model is wrong"))
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

    def verify_again(self, config: Mapping[str, ParamValue], seeds: tuple[int, ...]) -> tuple[bool, str]:
        """Check a configuration on brand-new inputs (the winner, before it is reported)."""
        try:
            kernel = self.compile(config)
            fresh: dict[int, list[Inputs]] = {}

            def inputs_for(which: int) -> list[Inputs]:
                if which not in fresh:
                    fresh[which] = [self.fresh_inputs(which, s) for s in seeds]
                return fresh[which]

            ok, _, msg, _ = self.check(kernel, config, inputs_for)
            return ok, msg
        except (CompileError, LaunchError) as e:
            return False, str(e)


def launch_geometry(template: Template, config: Mapping[str, ParamValue] | None, problem: Problem,
                    limits: Any = None) -> Geometry:
    """A configuration's launch; None is the original kernel at its own launch (the default
    configuration's when the template gives none)."""
    if config is not None:
        return geometry(template, config, problem, limits)
    t = template
    if not t.baseline_block:
        return geometry(t, t.default_config(), problem, limits)
    dims = [[int(e.evaluate(problem.values)) for e in exprs] for exprs in (t.baseline_grid, t.baseline_block)]
    pad = [tuple((d + [1, 1, 1])[:3]) for d in dims]
    return Geometry(pad[0], pad[1])


def _defines(config: Mapping[str, ParamValue]) -> dict[str, str]:
    return {k: ("1" if v is True else "0" if v is False else str(v)) for k, v in config.items()}
