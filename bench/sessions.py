"""How long `kerntune show --json` and `kerntune simulate` take on every session in sessions/.

Each command runs as a fresh process (start-up and imports included), N times; the table gives
the median in seconds. `--write FILE` also writes the table as Markdown with the machine, the
date and the command line.

    python bench/sessions.py [--repeats 5] [--write bench/results/sessions-cpu.md]
"""

from __future__ import annotations

import argparse
import os
import platform
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
}


def seconds(argv: list[str], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "kerntune.tui.cli", *argv], check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--write", type=Path, help="also write the table as Markdown")
    args = ap.parse_args()
    sessions = sorted((ROOT / "sessions").glob("*.toml"))
    head = ["session", "MB", *COMMANDS]
    rows = []
    for s in sessions:
        row = [s.stem, f"{s.stat().st_size / 1e6:.1f}"]
        for name, argv in COMMANDS.items():
            row.append(f"{seconds([argv[0], str(s), *argv[1:]], args.repeats):.2f}")
        rows.append(row)
        print("  ".join(row), flush=True)
    table = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    table += ["| " + " | ".join(r) + " |" for r in rows]
    print("\n".join(table))
    if args.write:
        args.write.write_text(
            f"# show --json and simulate on the recorded sessions\n\n"
            f"Median of {args.repeats} runs in seconds, each a fresh `kerntune` process (start-up and imports "
            f"included), on this {os.cpu_count()}-core CPU machine ({platform.processor() or platform.machine()}, "
            f"shared with other work), {date.today()}.\n\n"
            f"Command: `python bench/sessions.py {shlex.join(sys.argv[1:])}`\n\n" + "\n".join(table) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
