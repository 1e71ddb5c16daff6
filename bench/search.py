"""How fast each search strategy finds a configuration within 3% of the best, on recorded spaces.

    python bench/search.py [--seeds 20] [--budget-fraction 0.5] [--within 0.03] [SESSION ...]

Every strategy runs with 20 seeds on each full-grid session (default: sessions/*.toml), against
the recorded results. Per strategy and space: the median number of evaluations to come within 3%
of the grid's best, as a fraction of the grid (a seed that never gets there counts as past the
budget), and how often it got there within the budget. The last line gives the whole run's
seconds: about 10-20 s on a 2-core CPU (over 30 minutes while the model-guided strategy refitted
its Gaussian process at every step). bench/strategy_speed.py gives the cost of one proposal.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from pathlib import Path

from kerntune.engine.search import STRATEGIES
from kerntune.engine.session import load_session
from kerntune.engine.simulate import simulate


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("sessions", nargs="*", type=Path)
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--budget-fraction", type=float, default=0.5)
    ap.add_argument("--within", type=float, default=0.03)
    ap.add_argument("--strategies", default=",".join(STRATEGIES))
    args = ap.parse_args()
    paths = args.sessions or sorted(Path("sessions").glob("*.toml"))
    print(f"{'space':<34}{'configs':>8}  {'strategy':<8}{'median evals':>13}{'% of grid':>10}"
          f"{'reached':>9}{'s':>7}")
    worst_model = 0.0
    started = time.perf_counter()
    for path in paths:
        session = load_session(path)
        n = len(session.results())
        budget = max(1, math.ceil(args.budget_fraction * n))
        for strategy in args.strategies.split(","):
            t0 = time.perf_counter()
            needs = []
            for seed in range(args.seeds):
                sim = simulate(session, strategy, budget=budget, seed=seed, within=(args.within,),
                               stop_within=args.within)
                needs.append(sim.within[args.within])
            reached = sum(x is not None for x in needs)
            med = statistics.median(x if x is not None else math.inf for x in needs)
            frac = med / n
            if strategy == "model":
                worst_model = max(worst_model, frac)
            shown = f"{med:.1f}" if math.isfinite(med) else f">{budget}"
            pct = f"{100 * frac:.1f}%" if math.isfinite(frac) else "-"
            print(f"{path.stem:<34}{n:>8}  {strategy:<8}{shown:>13}{pct:>10}"
                  f"{reached:>6}/{args.seeds}{time.perf_counter() - t0:>7.1f}")
    print(f"budget per run: {100 * args.budget_fraction:g}% of the grid; target {100 * args.within:g}% of the "
          f"best; model-guided worst median: {100 * worst_model:.1f}% of the grid; "
          f"{time.perf_counter() - started:.1f} s in all")


if __name__ == "__main__":
    main()
