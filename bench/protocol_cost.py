"""Where one configuration's device-side time goes: verification and timing, in one process.

    python bench/protocol_cost.py [--template silu_and_mul] [--problem llama7b-t128] [--backend cuda]
                                  [--configs 40] [--profile]

Evaluates the first N configurations of the template's space with kerntune's protocol (each
compiled once before the clock starts), and prints the median verify and timing seconds per
configuration, the timed launches per configuration and the time per timed launch. With
--profile, the functions that took the most time (cProfile, cumulative) follow.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import time

from kerntune import templates
from kerntune.engine.backends import open_backend
from kerntune.engine.evaluate import Evaluator
from kerntune.engine.space import build_space
from kerntune.engine.template import load_template


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--template", default="silu_and_mul")
    ap.add_argument("--problem", default="llama7b-t128")
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--configs", type=int, default=40)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    t = load_template(templates.path(args.template))
    backend = open_backend(args.backend)
    problem = t.problem(args.problem)
    space = build_space(t, problem, backend.limits)
    configs = [c.as_dict() for c in space.configs[: args.configs]]
    ev = Evaluator(backend, t, problem, seed=1)
    ev.prepare()
    kernels = [ev.compile(c) for c in configs]
    prof = cProfile.Profile() if args.profile else None
    rows = []
    t0 = time.perf_counter()
    if prof:
        prof.enable()
    for c, k in zip(configs, kernels):
        r = ev.evaluate(c, kernel=k)
        rows.append(r)
    if prof:
        prof.disable()
    wall = time.perf_counter() - t0
    ok = [r for r in rows if r.status == "ok"]
    launches = [len(r.times_us) for r in ok]
    per_launch = [r.time_s / max(1, len(r.times_us)) * 1e6 for r in ok]
    print(f"{args.template} {args.problem} on {backend.limits.name}: {len(rows)} configurations, {len(ok)} ok, "
          f"{wall:.2f} s ({len(rows) / wall:.1f} configs/s without compiling)")
    print(f"{'verify s':>9}{'time s':>9}{'timed launches':>16}{'us per timed launch':>21}{'kernel us':>11}")
    print(f"{statistics.median(r.verify_s for r in ok):>9.4f}{statistics.median(r.time_s for r in ok):>9.4f}"
          f"{statistics.median(launches):>16.0f}{statistics.median(per_launch):>21.1f}"
          f"{statistics.median(r.median_us for r in ok):>11.2f}")
    if prof:
        pstats.Stats(prof).sort_stats("cumulative").print_stats(28)
    del ev, kernels
    backend.close()


if __name__ == "__main__":
    main()
