"""Kernel times on an OpenCL CPU device with the buffers kerntune gives it (host memory of their
own inside unmapped address space, engine/backends/host_memory.py) against the runtime's own
buffers, in one process, in alternating rounds: does the protection change what is timed?

    python bench/fenced_buffers.py [--rounds 8] [--repeats 25] [--device 0]

Prints one row per kernel: the median of each kind's launches, and their ratio.
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np

from kerntune.engine.backends import open_backend
from kerntune.engine.space import Geometry

# (name, source, entry, elements, block): a stream, and a reduction over rows in local memory
KERNELS = (
    ("vector_add 1M", """
__kernel void add(__global const float *a, __global const float *b, __global float *c, int n) {
    int i = get_global_id(0);
    if (i < n) c[i] = a[i] + b[i];
}""", "add", 1 << 20, 256),
    ("row sums 1024x1024", """
__kernel void sums(__global const float *x, __global float *s, int cols) {
    __local float p[64];
    int r = get_group_id(0), t = get_local_id(0);
    float acc = 0.0f;
    for (int i = t; i < cols; i += 64) acc += x[(size_t)r * cols + i];
    p[t] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int k = 32; k > 0; k /= 2) {
        if (t < k) p[t] += p[t + k];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (t == 0) s[r] = p[0];
}""", "sums", 1 << 20, 64),
)


def buffers(backend, name: str, n: int, fenced: bool) -> list:
    """The kernel's arguments, in buffers of the kind asked for."""
    saved, backend.fenced = backend.fenced, fenced
    try:
        rng = np.random.default_rng(1)
        if name == "add":
            a, b = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
            bufs = [backend.alloc(4 * n) for _ in range(3)]
            backend.upload(bufs[0], a)
            backend.upload(bufs[1], b)
            return [*bufs, np.int32(n)]
        x = rng.standard_normal(n).astype(np.float32)
        bufs = [backend.alloc(4 * n), backend.alloc(4 * 1024)]
        backend.upload(bufs[0], x)
        return [*bufs, np.int32(1024)]
    finally:
        backend.fenced = saved


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=25)
    ap.add_argument("--device", type=int, default=0)
    args = ap.parse_args()
    backend = open_backend("opencl", args.device)
    print(f"{backend.limits.name} ({backend.limits.driver}); kerntune's buffers "
          + ("fenced" if backend.fenced else f"NOT fenced: {backend.unfenced}"))
    print(f"{'kernel':<22}{'runtime us':>12}{'fenced us':>12}{'ratio':>8}")
    for label, source, entry, n, block in KERNELS:
        kernel = backend.compile(source, entry, {})
        groups = n // block if entry == "add" else 1024
        geo = Geometry((groups, 1, 1), (block, 1, 1), 0)
        kinds = {False: buffers(backend, entry, n, False), True: buffers(backend, entry, n, True)}
        times: dict[bool, list[float]] = {False: [], True: []}
        for r in range(args.rounds):  # alternating, each round's first kind alternating too
            for fenced in ((False, True) if r % 2 == 0 else (True, False)):
                times[fenced] += backend.time(kernel, geo, kinds[fenced], args.repeats, flush=True)
        plain, fenced = statistics.median(times[False]), statistics.median(times[True])
        print(f"{label:<22}{plain:>12.1f}{fenced:>12.1f}{fenced / plain:>8.3f}")
    backend.close()


if __name__ == "__main__":
    main()
