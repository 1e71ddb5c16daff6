"""How long `kerntune show --json` and `kerntune simulate` take on every session in sessions/.

Each command runs as a fresh process (start-up and imports included), N times; the table gives
the median in seconds, wall (CPU in brackets: user and system time), and the load average before
and after says how quiet the machine was.
`--write FILE` also appends the table to FILE as a Markdown section with the machine, the date and
the command line.

    python bench/sessions.py [--repeats 5] [--write bench/results/sessions-cpu.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import shlex
import statistics
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = {
    "show --json": ["show", "--json"],
    "simulate grid": ["simulate", "--strategy", "grid"],
    "simulate random": ["simulate", "--strategy", "random"],
    "simulate local": ["simulate", "--strategy", "local"],
    "simulate model, budget 100": ["simulate", "--strategy", "model", "--budget", "100"],
    "simulate (model until the recorded best)": ["simulate"],
}


def seconds(argv: list[str], repeats: int) -> tuple[float, float]:
    """The median wall time of `kerntune ARGV`, and of its CPU time (user and system): on a machine
    shared with other work, the CPU time says what the command costs when the wall time waits."""
    walls, cpus = [], []
    for _ in range(repeats):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "kerntune.tui.cli", *argv], check=True, stdout=subprocess.DEVNULL)
        walls.append(time.perf_counter() - t0)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(walls), statistics.median(cpus)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--write", type=Path, help="also write the table as Markdown")
    args = ap.parse_args()
    sessions = sorted((ROOT / "sessions").glob("*.toml"))
    load_before = os.getloadavg()[0]
    head = ["session", "MB", *COMMANDS]
    rows = []
    for s in sessions:
        row = [s.stem, f"{s.stat().st_size / 1e6:.1f}"]
        for name, argv in COMMANDS.items():
            wall, cpu = seconds([argv[0], str(s), *argv[1:]], args.repeats)
            row.append(f"{wall:.2f} ({cpu:.2f})")
        rows.append(row)
        print("  ".join(row), flush=True)
    table = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    table += ["| " + " | ".join(r) + " |" for r in rows]
    load = f"load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after"
    print("\n".join(table))
    print(load)
    if args.write:
        with open(args.write, "a", encoding="utf-8") as f:
            f.write(f"\n## {date.today()}: `python bench/sessions.py {shlex.join(sys.argv[1:])}`\n\n"
                    f"Median of {args.repeats} runs in seconds, wall (CPU), each a fresh `kerntune` process "
                    f"(start-up and imports included), on this {os.cpu_count()}-core CPU machine "
                    f"({platform.processor() or platform.machine()}, no GPU, shared with other work; {load}).\n\n"
                    + "\n".join(table) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
