"""What one proposal costs each search strategy as observations pile up, on recorded spaces.

    python bench/strategy_speed.py [--strategies model,local] [--seed 0] [--at 100,300,1000] [SESSION ...]

Each strategy proposes on a full-grid session (default: the largest ones in sessions/), and every
proposal is answered at once from the recorded results, never stopping at the best, so the
strategy keeps growing its history up to the largest count asked for. The table gives the
milliseconds of one proposal (propose plus the observe that answers it) at each number of
observations (median over the 21 proposals around it), the 99th percentile and the slowest single
proposal up to the largest count, all in CPU time of this process (a shared machine's other work
does not count; run with one BLAS thread, OMP_NUM_THREADS=1, so that CPU time is time on one
core), and the whole run's CPU and wall seconds. The objects of the loaded session are frozen
out of Python's garbage collector first: a full collection walks them all (10-20 ms for
matmul-2048's 3876 results) whenever it falls, whatever the strategy; that is the loader's weight,
not a proposal's cost.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

from kerntune.engine.search import make_strategy
from kerntune.engine.session import load_session
from kerntune.engine.simulate import recorded_space
from kerntune.engine.space import Config

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ("matmul-2048", "softmax-llama-t2048", "silu_and_mul-llama7b-t2048")


def proposal_ms(path: Path, strategy: str, seed: int, upto: int) -> tuple[list[float], float]:
    """CPU milliseconds of each proposal (propose + observe), the first `upto` of them, and the
    wall seconds of them all."""
    session = load_session(path)
    space, recorded = recorded_space(session)
    default = session.template.get("default_config")
    first = Config.of(default) if isinstance(default, dict) and Config.of(default) in recorded else None
    strat = make_strategy(strategy, space, seed=seed, first=first)
    gc.collect()
    gc.freeze()
    out = []
    wall = time.perf_counter()
    for _ in range(upto):
        t0 = time.process_time()
        config = strat.propose()
        if config is None:
            break
        strat.observe(config, recorded[config])
        out.append(1e3 * (time.process_time() - t0))
    wall = time.perf_counter() - wall
    gc.unfreeze()
    return out, wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sessions", nargs="*", type=Path)
    ap.add_argument("--strategies", default="model,local")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--at", default="100,300,1000", help="observation counts to report")
    args = ap.parse_args()
    at = [int(a) for a in args.at.split(",")]
    paths = args.sessions or [ROOT / "sessions" / f"{name}.toml" for name in DEFAULT]
    head = f"{'space':<30}{'configs':>8}  {'strategy':<9}" + "".join(f"{f'ms @{a}':>10}" for a in at) + \
        f"{'p99 ms':>9}{'max ms':>9}{'cpu s':>8}{'wall s':>8}"
    print(head)
    for path in paths:
        for strategy in args.strategies.split(","):
            ms, wall = proposal_ms(path, strategy, args.seed, max(at) + 10)
            cells = []
            for a in at:
                window = ms[max(0, a - 11):a + 10]
                cells.append(f"{statistics.median(window):>10.2f}" if len(ms) >= a else f"{'-':>10}")
            upto = sorted(ms[:max(at)])
            p99 = upto[min(len(upto) - 1, int(0.99 * len(upto)))]
            print(f"{path.stem:<30}{len(load_session(path).results()):>8}  {strategy:<9}" + "".join(cells) +
                  f"{p99:>9.2f}{upto[-1]:>9.2f}{sum(ms) / 1e3:>8.2f}{wall:>8.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
