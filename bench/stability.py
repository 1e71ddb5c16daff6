"""Tune silu_and_mul several times in a row and compare the winners.

    python bench/stability.py [--runs 3] [--problem llama7b-t2048]

Prints each run's winner and its median, the spread (IQR / median) of its repetitions, and the
largest difference between the runs' winning times.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from kerntune import templates
from kerntune.engine.template import load_template
from kerntune.engine.tune import TuneOptions, TuneRun
from kerntune.tui.text import fmt_config


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--problem", default="llama7b-t2048")
    ap.add_argument("--backend", default="cuda")
    args = ap.parse_args()
    t = load_template(templates.path("silu_and_mul"))
    winners = []
    with tempfile.TemporaryDirectory() as out:
        for i in range(args.runs):
            opts = TuneOptions(backend=args.backend, problem=args.problem, seed=100 + i, probe=False,
                               session_path=Path(out) / f"run{i}.toml")
            o = TuneRun(t, opts).run()
            winners.append(o.best)
            print(f"run {i + 1}: {len(o.results)} configs, winner {fmt_config(o.best.config)}: "
                  f"{o.best.median_us:.2f} us (spread {100 * o.best.spread:.2f}%, {len(o.best.times_us)} reps), "
                  f"baseline {o.baseline.median_us:.2f} us")
    times = [w.median_us for w in winners]
    diff = (max(times) - min(times)) / min(times)
    print(f"winning times {', '.join(f'{x:.2f}' for x in times)} us: largest difference {100 * diff:.2f}%")


if __name__ == "__main__":
    main()
