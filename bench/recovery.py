"""Hostile kernels through the worker: the status each ends with, and how soon the worker is back.

    python bench/recovery.py [--backend cuda] [--timeout 5]

For each hostile configuration, prints its status, the seconds until its result, and the seconds
until the next good configuration has its result (the worker restarted when it had to be).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from kerntune.engine.evaluate import TimingPolicy
from kerntune.engine.template import load_template
from kerntune.engine.worker import Worker, WorkerSpec

HOSTILE = Path(__file__).resolve().parent.parent / "tests" / "data" / "hostile"
WHAT = {1: "does not compile", 2: "writes half its output", 3: "writes a NaN", 5: "never ends",
        6: "writes out of bounds", 7: "1024 threads x 128 registers"}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--timeout", type=float, default=5.0)
    args = ap.parse_args()
    t = load_template(HOSTILE)
    p = t.problem()
    spec = WorkerSpec(args.backend, 0, str(t.spec_path), t.spec_text, dict(t.sources), p.name, dict(p.values), 1,
                      TimingPolicy(warmup=1, min_repeats=5, max_repeats=20, target_s=0.005))
    good = {"MODE": 0, "THREADS": 64}
    with Worker(spec, config_timeout=args.timeout) as w:
        w.evaluate(good)
        print(f"{'MODE':<5}{'what':<32}{'status':<15}{'result s':>9}{'back s':>8}  message")
        for mode, what in WHAT.items():
            config = {"MODE": mode, "THREADS": 1024 if mode == 7 else 64}
            t0 = time.perf_counter()
            r = w.evaluate(config)
            t1 = time.perf_counter()
            nxt = w.evaluate(good)
            t2 = time.perf_counter()
            assert nxt.status == "ok", nxt.message
            print(f"{mode:<5}{what:<32}{r.status:<15}{t1 - t0:>9.2f}{t2 - t1:>8.2f}  {r.message[:70]}")
        print(f"worker restarts: {w.restarts}; config timeout {args.timeout:g} s")


if __name__ == "__main__":
    main()
