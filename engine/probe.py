"""Measure a device's copy bandwidth and arithmetic peak, for the speed-of-light bound.

Bandwidth is a large device-to-device copy counting bytes read plus bytes written; the arithmetic
peak is a kernel of independent fused multiply-adds (on a CPU, on the widest float vectors, with
enough iterations per work-item that a launch's overhead does not count). Both use the backend's
own compile and timing path, so they are measured the way kernels are.

Each figure is measured in rounds, each the median of many timed launches, until the last rounds
agree within a few percent (or a cap): the figure is the median of the rounds and its spread their
interquartile range over the median. `check` then holds each figure against the bound the device
reports (compute units, clock, vector width; SM count and clock; memory clock and bus width) and
refuses one above it or absurdly below it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from .backends import Backend
from .device import DeviceLimits
from .sol import Peaks, load_peaks, save_peaks
from .space import Geometry

# Rounds of timed launches: at least MIN_ROUNDS, at most MAX_ROUNDS, stopping once the last
# STABLE_ROUNDS round medians lie within STABLE_TOLERANCE of their median.
MIN_ROUNDS = 3
MAX_ROUNDS = 8
STABLE_ROUNDS = 3
STABLE_TOLERANCE = 0.03
# A launch of the FMA kernel lasts about this long, so that launch overhead is negligible.
FMA_LAUNCH_S = {"cpu": 0.01, "gpu": 0.004}

# Plausibility: a figure more than ABOVE_BOUND over the device's bound, or under 1/BELOW_BOUND of
# it, is refused.
ABOVE_BOUND = 0.10
BELOW_BOUND = 50.0
# FP32 lanes of one NVIDIA SM, FMA pipes of one CPU core.
GPU_LANES_PER_SM = 128
CPU_FMA_PORTS = 2
# CPUs report their base clock (OpenCL max_clock_frequency); turbo runs above it.
CPU_TURBO_HEADROOM = 2.0

_CUDA = r"""
extern "C" __global__ void kt_copy(const float4 *__restrict__ src, float4 *__restrict__ dst, long n) {
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = src[i];
}
extern "C" __global__ void kt_fma(float *out, float seed, int iters) {
    float a0 = seed + threadIdx.x, a1 = a0 + 1.f, a2 = a0 + 2.f, a3 = a0 + 3.f;
    float a4 = a0 + 4.f, a5 = a0 + 5.f, a6 = a0 + 6.f, a7 = a0 + 7.f;
    const float m = 0.9999f, c = 0.0001f;
    for (int i = 0; i < iters; ++i) {
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            a0 = fmaf(a0, m, c); a1 = fmaf(a1, m, c); a2 = fmaf(a2, m, c); a3 = fmaf(a3, m, c);
            a4 = fmaf(a4, m, c); a5 = fmaf(a5, m, c); a6 = fmaf(a6, m, c); a7 = fmaf(a7, m, c);
        }
    }
    out[(long)blockIdx.x * blockDim.x + threadIdx.x] = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7;
}
"""

# KT_CT is the copy's vector type; KT_VT, the FMAs', float or floatN; KT_LANES a KT_VT whose lanes
# differ. `a * m + c` contracts to an FMA instruction (PoCL calls a function for fma() and mad() on
# float16, at a tenth of the rate).
_OPENCL = r"""
#pragma OPENCL FP_CONTRACT ON
__kernel void kt_copy(__global const KT_CT *restrict src, __global KT_CT *restrict dst, long n) {
    const long i = get_global_id(0);
    if (i < n) dst[i] = src[i];
}
__kernel void kt_fma(__global KT_VT *out, float seed, int iters) {
    KT_VT a0 = KT_LANES * seed + (float)get_global_id(0), a1 = a0 + 1.f, a2 = a0 + 2.f, a3 = a0 + 3.f;
    KT_VT a4 = a0 + 4.f, a5 = a0 + 5.f, a6 = a0 + 6.f, a7 = a0 + 7.f;
    const KT_VT m = (KT_VT)(0.9999f), c = (KT_VT)(0.0001f);
    for (int i = 0; i < iters; ++i) {
        a0 = a0 * m + c; a1 = a1 * m + c; a2 = a2 * m + c; a3 = a3 * m + c;
        a4 = a4 * m + c; a5 = a5 * m + c; a6 = a6 * m + c; a7 = a7 * m + c;
        a0 = a0 * m + c; a1 = a1 * m + c; a2 = a2 * m + c; a3 = a3 * m + c;
        a4 = a4 * m + c; a5 = a5 * m + c; a6 = a6 * m + c; a7 = a7 * m + c;
        a0 = a0 * m + c; a1 = a1 * m + c; a2 = a2 * m + c; a3 = a3 * m + c;
        a4 = a4 * m + c; a5 = a5 * m + c; a6 = a6 * m + c; a7 = a7 * m + c;
        a0 = a0 * m + c; a1 = a1 * m + c; a2 = a2 * m + c; a3 = a3 * m + c;
        a4 = a4 * m + c; a5 = a5 * m + c; a6 = a6 * m + c; a7 = a7 * m + c;
    }
    out[get_global_id(0)] = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7;
}
"""
FMAS_PER_ITER = 32  # of VT, in both kernels' loop bodies


@dataclass(frozen=True)
class Measurement:
    value: float  # the median of the rounds' medians
    spread: float  # the rounds' interquartile range over their median
    rounds: tuple[float, ...]
    stable: bool  # the last rounds agreed within STABLE_TOLERANCE


@dataclass(frozen=True)
class ProbeResult:
    bandwidth_gbs: float
    gflops: float
    copy_bytes: int
    bandwidth_spread: float
    gflops_spread: float
    bandwidth_rounds: int = 0
    gflops_rounds: int = 0
    stable: bool = True


@dataclass(frozen=True)
class Bounds:
    """What the device's own figures allow; None where they say nothing."""

    gflops: float | None
    bandwidth_gbs: float | None
    gflops_how: str = ""
    bandwidth_how: str = ""


def _spread(values: list[float] | tuple[float, ...]) -> float:
    q25, q50, q75 = np.percentile(values, [25, 50, 75])
    return float((q75 - q25) / q50) if q50 > 0 else 0.0


def until_stable(one_round: Callable[[], float], min_rounds: int = MIN_ROUNDS, max_rounds: int = MAX_ROUNDS,
                 tolerance: float = STABLE_TOLERANCE) -> Measurement:
    """Call `one_round` (a rate: the median of a round of timed launches) until the last
    STABLE_ROUNDS agree within `tolerance` of their median, at least `min_rounds` times and at
    most `max_rounds`."""
    rates: list[float] = []
    stable = False
    while len(rates) < max_rounds:
        rates.append(float(one_round()))
        if len(rates) >= max(min_rounds, STABLE_ROUNDS):
            last = rates[-STABLE_ROUNDS:]
            mid = float(np.median(last))
            if mid > 0 and (max(last) - min(last)) / mid <= tolerance:
                stable = True
                break
    return Measurement(float(np.median(rates)), _spread(rates), tuple(rates), stable)


def _is_cpu(limits: DeviceLimits) -> bool:
    return limits.extra.get("device_type") == "cpu"


def vector_width(backend: Any) -> int | None:
    """The device's native float vector width (OpenCL); None where it reports none."""
    try:
        return int(backend.device.native_vector_width_float) or None
    except (AttributeError, TypeError, ValueError):
        return None


def bounds(limits: DeviceLimits, width: int | None = None) -> Bounds:
    """Upper bounds on the fp32 rate and the memory bandwidth from what the device reports.

    CPU (OpenCL): compute units x clock x native float vector width x 2 (FMA) x CPU_FMA_PORTS,
    times CPU_TURBO_HEADROOM for a clock reported below turbo; GPU: SMs x clock x 128 lanes x 2;
    bandwidth (CUDA): memory clock x bus width x 2 (double data rate) / 8."""
    gflops = bw = None
    g_how = b_how = ""
    if limits.clock_mhz > 0 and limits.sm_count > 0:
        if _is_cpu(limits):
            w = width or 16  # unknown: AVX-512's 16 floats, the widest
            gflops = limits.sm_count * limits.clock_mhz * w * 2 * CPU_FMA_PORTS * CPU_TURBO_HEADROOM / 1e3
            g_how = (f"{limits.sm_count} compute units x {limits.clock_mhz} MHz x {w} lanes x 2 (FMA) "
                     f"x {CPU_FMA_PORTS} FMA ports x {CPU_TURBO_HEADROOM:g} (turbo)")
        else:
            gflops = limits.sm_count * limits.clock_mhz * GPU_LANES_PER_SM * 2 / 1e3
            g_how = f"{limits.sm_count} SMs x {limits.clock_mhz} MHz x {GPU_LANES_PER_SM} lanes x 2 (FMA)"
    if limits.memory_clock_mhz > 0 and limits.memory_bus_width > 0:
        bw = limits.memory_clock_mhz * limits.memory_bus_width * 2 / 8 / 1e3
        b_how = f"{limits.memory_clock_mhz} MHz x {limits.memory_bus_width} bits x 2 / 8"
    return Bounds(gflops, bw, g_how, b_how)


def _num(v: float) -> str:
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.3g}"


def refusal(what: str, value: float, unit: str, bound: float | None, how: str = "") -> str | None:
    """Why a measured figure is implausible against its bound, in one line; None when it is not
    (or when there is no bound)."""
    if not math.isfinite(value) or value <= 0:
        return f"{what} measured {value!r} {unit}: not a rate"
    if bound is None or bound <= 0:
        return None
    why = f" ({how})" if how else ""
    if value > bound * (1 + ABOVE_BOUND):
        return f"{what} measured {_num(value)} {unit} is above the {_num(bound)} {unit} the device allows{why}"
    if value < bound / BELOW_BOUND:
        return (f"{what} measured {_num(value)} {unit} is under 1/{BELOW_BOUND:g} of the {_num(bound)} {unit} "
                f"the device allows{why}")
    return None


def check(limits: DeviceLimits, result: ProbeResult, width: int | None = None) -> tuple[str | None, str | None]:
    """(why the bandwidth is refused, why the arithmetic peak is refused); None where plausible."""
    b = bounds(limits, width)
    return (refusal("copy bandwidth", result.bandwidth_gbs, "GB/s", b.bandwidth_gbs, b.bandwidth_how),
            refusal("fp32 peak", result.gflops, "GFLOP/s", b.gflops, b.gflops_how))


def probe(backend: Backend, launches: int = 10, min_rounds: int = MIN_ROUNDS,
          max_rounds: int = MAX_ROUNDS) -> ProbeResult:
    """Median copy bandwidth (GB/s, read + write) and FMA rate (GFLOP/s) of the backend's device,
    each repeated in rounds of `launches` timed launches until stable."""
    limits = backend.limits
    is_cpu = _is_cpu(limits)
    if backend.name == "cuda":
        src, width = _CUDA, 1
    else:
        width = 16 if is_cpu else 1  # on a CPU, the widest vectors: more independent FMAs in flight
        vt = "float" if width == 1 else f"float{width}"
        lanes = "0.f" if width == 1 else f"(({vt})({', '.join(f'{i}.f' for i in range(width))}))"
        ct = "float16" if is_cpu else "float4"
        src = _OPENCL.replace("KT_LANES", lanes).replace("KT_VT", vt).replace("KT_CT", ct)
    elem = 64 if is_cpu else 16  # bytes a work-item copies
    # Large enough that neither buffer fits in the last-level cache.
    nbytes = min(max(4 * limits.l2_bytes, 256 * 2**20), (256 if is_cpu else 2048) * 2**20)
    if limits.global_mem_bytes:
        nbytes = min(nbytes, limits.global_mem_bytes // 8)
    nbytes -= nbytes % 64
    n = nbytes // elem
    copy = backend.compile(src, "kt_copy", {})
    a, b = backend.alloc(nbytes), backend.alloc(nbytes)
    backend.upload(a, np.ones(nbytes // 4, dtype=np.float32))
    threads = min(256, limits.max_threads_per_block)
    geo = Geometry((-(-n // threads), 1, 1), (threads, 1, 1))
    args = [a, b, np.int64(n)]
    backend.time(copy, geo, args, 3, False)

    def copy_round() -> float:
        return 2 * nbytes / (float(np.median(backend.time(copy, geo, args, launches, False))) * 1e3)

    bw = until_stable(copy_round, min_rounds, max_rounds)

    fma = backend.compile(src, "kt_fma", {})
    if is_cpu:
        fblocks, fthreads = 4 * limits.sm_count, 1
    else:
        fblocks, fthreads = 8 * limits.sm_count, min(256, limits.max_threads_per_block)
    out = backend.alloc(fblocks * fthreads * 4 * width)
    fgeo = Geometry((fblocks, 1, 1), (fthreads, 1, 1))
    # Calibrate: enough iterations that one launch lasts about FMA_LAUNCH_S.
    target_us = FMA_LAUNCH_S["cpu" if is_cpu else "gpu"] * 1e6
    iters = 64
    for _ in range(6):
        t = float(np.median(backend.time(fma, fgeo, [out, np.float32(1.0), np.int32(iters)], 2, False)))
        if t >= target_us / 2 or iters >= 2**24:
            break
        iters = int(min(2**24, max(2 * iters, iters * target_us / max(t, 1.0))))
    fargs = [out, np.float32(1.0), np.int32(iters)]
    flops = fblocks * fthreads * iters * FMAS_PER_ITER * width * 2

    def fma_round() -> float:
        return flops / (float(np.median(backend.time(fma, fgeo, fargs, launches, False))) * 1e3)

    fl = until_stable(fma_round, min_rounds, max_rounds)
    return ProbeResult(bw.value, fl.value, nbytes, bw.spread, fl.spread, len(bw.rounds), len(fl.rounds),
                       bw.stable and fl.stable)


def measure_peaks(backend: Backend, note: Callable[[str], None]) -> tuple[ProbeResult, Peaks | None]:
    """Probe the device, refuse an implausible figure (one line to `note`; not cached) and cache
    the rest for this device and driver. Returns the probe's result and the peaks to use (a
    refused figure from the datasheet when it has one, else 0: unknown), None when both figures
    were refused."""
    limits = backend.limits
    r = probe(backend)
    bw_why, fl_why = check(limits, r, vector_width(backend))
    for why in (bw_why, fl_why):
        if why:
            note(f"refused: {why}; not cached, the speed of light goes without it")
    if bw_why and fl_why:
        return r, None
    spread = max(s for s, why in ((r.bandwidth_spread, bw_why), (r.gflops_spread, fl_why)) if not why)
    if not r.stable:
        note(f"the rounds did not settle within {STABLE_TOLERANCE:.0%} (spread {spread:.1%}; a busy machine?): "
             "the figures serve this run only and are not cached")
        return r, Peaks(0.0 if bw_why else r.bandwidth_gbs, 0.0 if fl_why else r.gflops, "measured, not settled",
                        spread)
    save_peaks(limits, 0.0 if bw_why else r.bandwidth_gbs, 0.0 if fl_why else r.gflops, spread,
               None if bw_why else r.bandwidth_spread, None if fl_why else r.gflops_spread)
    return r, load_peaks(limits)
