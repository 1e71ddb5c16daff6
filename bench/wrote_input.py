"""What a configuration that writes its input costs against an honest one: the seconds of one
evaluation (compile, checked and timed launches, the checks) of tests/data/cheats' MODE 9 (it
overwrites every element of its input `a`, `wrote_input`) and MODE 0 (honest), at a size of your
choosing, on the OpenCL device (PoCL on a CPU) or CUDA, in this process.

    python bench/wrote_input.py [--n 16777216] [--backend opencl|cuda] [--repeats 3] [--modes 0,9]

Before the fix, the written input's report sorted every differing byte's position to count
elements: a minute and gigabytes at 64M elements; now it is one pass over the elements.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from kerntune.engine.backends import open_backend
from kerntune.engine.evaluate import Evaluator, TimingPolicy
from kerntune.engine.template import Problem, load_template

CHEATS = Path(__file__).resolve().parent.parent / "tests" / "data" / "cheats"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1 << 24)
    ap.add_argument("--backend", default="opencl")
    ap.add_argument("--repeats", type=int, default=3, help="evaluations of each configuration; the best is shown")
    ap.add_argument("--modes", default="0,9", help="the MODEs to evaluate (0 honest, 9 writes its input)")
    args = ap.parse_args()
    t = load_template(CHEATS)
    backend = open_backend(args.backend, 0)
    ev = Evaluator(backend, t, Problem("bench", {"n": args.n}), seed=5,
                   timing=TimingPolicy(warmup=1, min_repeats=3, max_repeats=3))
    ev.prepare()
    ev.calibrate()
    print(f"{backend.limits.name} ({args.backend}), n = {args.n}")
    print(f"{'configuration':<34} {'status':<12} {'seconds':>8}")
    labels = {0: "MODE 0 (honest)", 9: "MODE 9 (writes its input)"}
    for mode in (int(m) for m in args.modes.split(",")):
        label = labels.get(mode, f"MODE {mode}")
        best, status = float("inf"), ""
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            r = ev.evaluate({"MODE": mode, "THREADS": 64})
            best, status = min(best, time.perf_counter() - t0), r.status
        print(f"{label:<34} {status:<12} {best:>8.2f}")
    backend.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
