"""How many configurations per second the OpenCL path evaluates, and where the time goes.

    python bench/opencl_rate.py [--template silu_and_mul] [--shape tokens=64] [--configs 40]

Runs a real tuning run (worker process, compile, verify, time) and prints the rate end to end
and the median compile / verify / time seconds per configuration.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from kerntune import templates
from kerntune.engine.evaluate import TimingPolicy
from kerntune.engine.template import load_template
from kerntune.engine.tune import TuneOptions, TuneRun


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--template", default="silu_and_mul")
    ap.add_argument("--shape", action="append", default=["tokens=64"])
    ap.add_argument("--configs", type=int, default=40)
    ap.add_argument("--strategy", default="random")
    args = ap.parse_args()
    t = load_template(templates.path(args.template))
    shape = {k: int(v) for k, v in (s.split("=") for s in args.shape)}
    with tempfile.TemporaryDirectory() as tmp:
        opts = TuneOptions(backend="opencl", strategy=args.strategy, budget=args.configs, seed=1,
                           overrides=shape, session_path=Path(tmp) / "bench.toml", probe=False,
                           timing=TimingPolicy())
        t0 = time.perf_counter()
        out = TuneRun(t, opts).run()
        wall = time.perf_counter() - t0
    rs = out.results
    n = len(rs)
    parts = {k: [getattr(r, k) for r in rs] for k in ("compile_s", "verify_s", "time_s")}
    busy = sum(sum(v) for v in parts.values())
    print(f"{args.template} {out.space.problem.label()} on {out.limits.name}: {n} configs in {wall:.1f} s "
          f"= {n / wall:.2f} configs/s end to end (worker start and final check included)")
    print(f"{'stage':<10}{'median s':>10}{'total s':>10}{'share':>8}")
    for k, v in parts.items():
        print(f"{k[:-2]:<10}{statistics.median(v):>10.3f}{sum(v):>10.1f}{100 * sum(v) / wall:>7.0f}%")
    print(f"{'other':<10}{'':>10}{wall - busy:>10.1f}{100 * (wall - busy) / wall:>7.0f}%")


if __name__ == "__main__":
    main()
