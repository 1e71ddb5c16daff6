"""What a new process costs before it can evaluate anything: the floor under a tuning run's start.

    python bench/startup.py [--backend cuda|opencl] [--repeats 5]

Each step runs in a new Python process (as kerntune's evaluation worker and compile processes are
started) and is timed from outside, median of the repeats: the interpreter alone, numpy, the
modules the evaluation worker imports, those and the device opened by kerntune's backend, and
(CUDA) the driver's own start and a first NVRTC compile. The differences between rows are what
each step adds. The last row starts --together processes importing the worker's modules at once,
as a run starts its compile processes and its worker.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

CUDA_KERNEL = 'extern "C" __global__ void k(float* x) { x[threadIdx.x] *= 2.0f; }'

STEPS = {
    "interpreter": "pass",
    "numpy": "import numpy",
    "numpy, one BLAS thread": "import os\nos.environ['OPENBLAS_NUM_THREADS'] = '1'\nimport numpy",
    "the worker's modules": "import kerntune.engine.worker",
    "the worker's modules, device opened": (
        "import kerntune.engine.worker\n"
        "from kerntune.engine.backends import open_backend\n"
        "open_backend({backend!r}, 0).close()"),
}
CUDA_STEPS = {
    "CUDA driver: cuInit (cuda.bindings)": "from cuda.bindings import driver as d\nd.cuInit(0)",
    "CUDA driver: cuInit and primary context (cuda.bindings)": (
        "from cuda.bindings import driver as d\nd.cuInit(0)\n_, dev = d.cuDeviceGet(0)\n"
        "_, ctx = d.cuDevicePrimaryCtxRetain(dev)\nd.cuCtxSetCurrent(ctx)"),
    "pycuda: init and primary context": (
        "import pycuda.driver as drv\ndrv.init()\nc = drv.Device(0).retain_primary_context()\nc.push()\nc.pop()"),
    "NVRTC: load (its version)": "from cuda.bindings import nvrtc\nnvrtc.nvrtcVersion()",
    "NVRTC: load and one small compile": (
        "from cuda.bindings import nvrtc\n"
        f"_, p = nvrtc.nvrtcCreateProgram({CUDA_KERNEL!r}.encode(), b'k.cu', 0, [], [])\n"
        "nvrtc.nvrtcCompileProgram(p, 1, [b'--gpu-architecture=sm_90'])"),
}


def seconds(code: str, repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        out.append(time.perf_counter() - t)
        if r.returncode != 0:
            tail = (r.stderr.strip().splitlines() or ["?"])[-1]
            raise RuntimeError(tail)
    return out


def at_once(code: str, n: int) -> list[float]:
    """n processes started together, each timed from its start to its end (the compile processes
    and the evaluation worker start so, competing for the cores)."""
    t = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for _ in range(n)]
    ends = []
    for p in procs:
        p.wait()
        ends.append(time.perf_counter() - t)
    return ends


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", choices=("cuda", "opencl"), default="cuda")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--together", type=int, default=15, help="processes started at once in the last row")
    args = p.parse_args(argv)
    steps = {k: v.format(backend=args.backend) for k, v in STEPS.items()}
    if args.backend == "cuda":
        steps.update(CUDA_STEPS)
    print(f"| new process, {args.backend} | median s | runs |")
    print("|---|---|---|")
    for name, code in steps.items():
        try:
            runs = seconds(code, args.repeats)
        except RuntimeError as e:
            print(f"| {name} | - | failed: {e} |")
            continue
        print(f"| {name} | {statistics.median(runs):.3f} | {' '.join(f'{s:.3f}' for s in runs)} |", flush=True)
    n = args.together
    ends = at_once(STEPS["the worker's modules"], n)
    print(f"| the worker's modules, {n} processes started together | {statistics.median(ends):.3f} | "
          f"first {min(ends):.3f}, last {max(ends):.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
