"""Measure a device's copy bandwidth and arithmetic peak, for the speed-of-light bound.

Bandwidth is a large device-to-device copy counting bytes read plus bytes written; the arithmetic
peak is a kernel of independent fused multiply-adds. Both use the backend's own compile and
timing path, so they are measured the way kernels are.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .backends import Backend
from .space import Geometry

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
        for (int k = 0; k < 16; ++k) {
            a0 = fmaf(a0, m, c); a1 = fmaf(a1, m, c); a2 = fmaf(a2, m, c); a3 = fmaf(a3, m, c);
            a4 = fmaf(a4, m, c); a5 = fmaf(a5, m, c); a6 = fmaf(a6, m, c); a7 = fmaf(a7, m, c);
        }
    }
    out[(long)blockIdx.x * blockDim.x + threadIdx.x] = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7;
}
"""

_OPENCL = r"""
__kernel void kt_copy(__global const float4 *restrict src, __global float4 *restrict dst, long n) {
    const long i = get_global_id(0);
    if (i < n) dst[i] = src[i];
}
__kernel void kt_fma(__global float *out, float seed, int iters) {
    float a0 = seed + get_local_id(0), a1 = a0 + 1.f, a2 = a0 + 2.f, a3 = a0 + 3.f;
    float a4 = a0 + 4.f, a5 = a0 + 5.f, a6 = a0 + 6.f, a7 = a0 + 7.f;
    const float m = 0.9999f, c = 0.0001f;
    for (int i = 0; i < iters; ++i) {
        for (int k = 0; k < 16; ++k) {
            a0 = mad(a0, m, c); a1 = mad(a1, m, c); a2 = mad(a2, m, c); a3 = mad(a3, m, c);
            a4 = mad(a4, m, c); a5 = mad(a5, m, c); a6 = mad(a6, m, c); a7 = mad(a7, m, c);
        }
    }
    out[get_global_id(0)] = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7;
}
"""


@dataclass(frozen=True)
class ProbeResult:
    bandwidth_gbs: float
    gflops: float
    copy_bytes: int
    bandwidth_spread: float
    gflops_spread: float


def _spread(times: list[float]) -> float:
    q25, q50, q75 = np.percentile(times, [25, 50, 75])
    return float((q75 - q25) / q50) if q50 > 0 else 0.0


def probe(backend: Backend, repeats: int = 20) -> ProbeResult:
    """Median copy bandwidth (GB/s, read + write) and FMA rate (GFLOP/s) of the backend's device."""
    limits = backend.limits
    is_cpu = limits.extra.get("device_type") == "cpu"
    src = _CUDA if backend.name == "cuda" else _OPENCL
    # Large enough that neither buffer fits in the last-level cache.
    nbytes = min(max(4 * limits.l2_bytes, 256 * 2**20), (256 if is_cpu else 2048) * 2**20)
    if limits.global_mem_bytes:
        nbytes = min(nbytes, limits.global_mem_bytes // 8)
    nbytes -= nbytes % 16
    n = nbytes // 16
    copy = backend.compile(src, "kt_copy", {})
    a, b = backend.alloc(nbytes), backend.alloc(nbytes)
    backend.upload(a, np.ones(nbytes // 4, dtype=np.float32))
    threads = min(256, limits.max_threads_per_block)
    blocks = -(-n // threads)
    geo = Geometry((blocks, 1, 1), (threads, 1, 1))
    args = [a, b, np.int64(n)]
    backend.time(copy, geo, args, 3, False)
    copy_times = backend.time(copy, geo, args, repeats, False)
    bw = 2 * nbytes / (float(np.median(copy_times)) * 1e3)

    fma = backend.compile(src, "kt_fma", {})
    iters = 16 if is_cpu else 4096
    fblocks = limits.sm_count * (64 if is_cpu else 8)
    fthreads = min(256, limits.max_threads_per_block)
    out = backend.alloc(fblocks * fthreads * 4)
    fgeo = Geometry((fblocks, 1, 1), (fthreads, 1, 1))
    fargs = [out, np.float32(1.0), np.int32(iters)]
    backend.time(fma, fgeo, fargs, 3, False)
    fma_times = backend.time(fma, fgeo, fargs, repeats, False)
    flops = fblocks * fthreads * iters * 16 * 8 * 2
    gflops = flops / (float(np.median(fma_times)) * 1e3)
    return ProbeResult(bw, gflops, nbytes, _spread(copy_times), _spread(fma_times))
