"""Configurations per second end to end (compile + verify + time) on the CUDA backend (or
another: --backend opencl runs it on PoCL), with parallel compilation and without it, in the same
run.

    python bench/throughput.py [--problem llama7b-t128] [--sequential-budget 60]
    python bench/throughput.py --backend opencl --template vector_add --problem 1M --budget 24 --sequential-budget 12

Each mode starts from an empty compile cache, so every configuration is really compiled.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import tempfile
import time
from pathlib import Path

from kerntune import templates
from kerntune.engine.compile_pool import default_jobs
from kerntune.engine.template import load_template
from kerntune.engine.tune import TuneOptions, TuneRun


def run(problem: str, jobs: int, budget: int, profile: bool = False, backend: str = "cuda",
        template: str = "silu_and_mul") -> dict:
    t = load_template(templates.path(template))
    with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as out, \
            tempfile.TemporaryDirectory() as prof_dir:
        os.environ["KERNTUNE_CACHE_DIR"] = cache
        if profile:
            os.environ["KERNTUNE_PROFILE"] = prof_dir
        opts = TuneOptions(backend=backend, strategy="grid", problem=problem, budget=budget, seed=1,
                           session_path=Path(out) / "s.toml", probe=False, compile_jobs=jobs)
        prof = cProfile.Profile() if profile else None
        t0 = time.perf_counter()
        if prof:
            prof.enable()
        o = TuneRun(t, opts).run()
        if prof:
            prof.disable()
        wall = time.perf_counter() - t0
        if prof:
            os.environ.pop("KERNTUNE_PROFILE", None)
            print("the tuning process, by own time:")
            pstats.Stats(prof).sort_stats("tottime").print_stats(12)
            for f in Path(prof_dir).glob("worker-*.prof"):
                print("the evaluation worker, by own time:")
                pstats.Stats(str(f)).sort_stats("tottime").print_stats(25)
    rs = o.results
    return {
        "mode": f"parallel ({jobs} processes)" if jobs > 1 else "sequential",
        "configs": len(rs),
        "ok": sum(r.status == "ok" for r in rs),
        "wall": wall,
        "rate": len(rs) / wall,
        "compile": statistics.median(r.compile_s for r in rs),
        "verify": statistics.median(r.verify_s for r in rs),
        "time": statistics.median(r.time_s for r in rs),
        "best": o.best.median_us if o.best else float("nan"),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--problem", default="llama7b-t128")
    ap.add_argument("--template", default="silu_and_mul")
    ap.add_argument("--jobs", type=int, default=default_jobs(), help="compile processes (default: kerntune's own)")
    ap.add_argument("--budget", type=int, default=0, help="parallel mode: 0 = the whole grid")
    ap.add_argument("--sequential-budget", type=int, default=60)
    ap.add_argument("--profile", action="store_true", help="print where the parallel run's time went")
    ap.add_argument("--backend", choices=("cuda", "opencl"), default="cuda",
                    help="opencl: the sequential mode alone (nothing compiles ahead there)")
    args = ap.parse_args()
    if args.backend == "opencl":  # the sequential mode alone (nothing compiles ahead there)
        rows = [run(args.problem, 1, args.sequential_budget, args.profile, "opencl", args.template)]
    else:
        rows = [run(args.problem, args.jobs, args.budget, args.profile, template=args.template),
                run(args.problem, 1, args.sequential_budget, template=args.template)]
    print(f"{args.template} {args.problem}, {args.backend} backend, empty compile cache per mode")
    print(f"{'mode':<24}{'configs':>8}{'ok':>6}{'wall s':>9}{'configs/s':>11}"
          f"{'compile s':>11}{'verify s':>10}{'time s':>8}{'best us':>9}")
    for r in rows:
        print(f"{r['mode']:<24}{r['configs']:>8}{r['ok']:>6}{r['wall']:>9.1f}{r['rate']:>11.2f}"
              f"{r['compile']:>11.3f}{r['verify']:>10.3f}{r['time']:>8.3f}{r['best']:>9.2f}")
    if len(rows) > 1:
        print(f"parallel / sequential rate: {rows[0]['rate'] / rows[1]['rate']:.1f}x "
              "(compile, verify, time: medians per configuration)")


if __name__ == "__main__":
    main()
