"""How long `kerntune show --json` and `kerntune simulate` take on every session in sessions/.

Each command runs as a fresh process (start-up and imports included), N times; the table gives
the median in seconds, wall (CPU in brackets: user and system time), and the load average before
and after says how quiet the machine was.
`--write FILE` also appends the table to FILE as a Markdown section with the machine, the date and
the command line. `--session NAME` (again for more) times only the sessions whose file name
contains NAME.

The commands run as an installed kerntune runs, its modules' bytecode compiled once and kept (in a
folder of its own for the run, not in the checkout); with `--compile` each run compiles them
again as it starts, as a run in a checkout does where PYTHONDONTWRITEBYTECODE is set (about 0.05 s
more on this 2-core machine).

    python bench/sessions.py [--repeats 5] [--compile] [--session matmul] [--write bench/results/sessions-cpu.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
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


def command_env(bytecode_cache: Path | None) -> dict[str, str]:
    """The environment of a timed `kerntune` command: with `bytecode_cache`, Python keeps the
    compiled modules there, as an installed kerntune has them; without, as it is."""
    env = dict(os.environ)
    if bytecode_cache is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(bytecode_cache)
    return env


def seconds(argv: list[str], repeats: int, env: dict[str, str]) -> tuple[float, float]:
    """The median wall time of `kerntune ARGV`, and of its CPU time (user and system): on a machine
    shared with other work, the CPU time says what the command costs when the wall time waits."""
    walls, cpus = [], []
    for _ in range(repeats):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "kerntune.tui.cli", *argv], check=True, stdout=subprocess.DEVNULL,
                       env=env)
        walls.append(time.perf_counter() - t0)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(walls), statistics.median(cpus)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--write", type=Path, help="also write the table as Markdown")
    ap.add_argument("--compile", action="store_true",
                    help="compile kerntune's modules at every start (keep no bytecode), as PYTHONDONTWRITEBYTECODE does")
    ap.add_argument("--session", action="append", default=[], metavar="NAME",
                    help="only the sessions whose file name contains NAME")
    args = ap.parse_args()
    sessions = [s for s in sorted((ROOT / "sessions").glob("*.toml"))
                if not args.session or any(n in s.name for n in args.session)]
    cache = None if args.compile else Path(tempfile.mkdtemp(prefix="kerntune-bytecode-"))
    env = command_env(cache)
    try:
        if cache is not None and sessions:  # compile once, untimed: the bytecode an install has
            for argv in COMMANDS.values():
                seconds([argv[0], str(sessions[0]), *argv[1:]], 1, env)
        load_before = os.getloadavg()[0]
        head = ["session", "MB", *COMMANDS]
        rows = []
        for s in sessions:
            row = [s.stem, f"{s.stat().st_size / 1e6:.1f}"]
            for name, argv in COMMANDS.items():
                wall, cpu = seconds([argv[0], str(s), *argv[1:]], args.repeats, env)
                row.append(f"{wall:.2f} ({cpu:.2f})")
            rows.append(row)
            print("  ".join(row), flush=True)
    finally:
        if cache is not None:
            shutil.rmtree(cache, ignore_errors=True)
    table = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    table += ["| " + " | ".join(r) + " |" for r in rows]
    load = f"load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after"
    print("\n".join(table))
    print(load)
    if args.write:
        with open(args.write, "a", encoding="utf-8") as f:
            f.write(f"\n## {date.today()}: `python bench/sessions.py {shlex.join(sys.argv[1:])}`\n\n"
                    f"Median of {args.repeats} runs in seconds, wall (CPU), each a fresh `kerntune` process "
                    f"(start-up and imports included; "
                    + ("modules compiled at every start" if args.compile else "bytecode compiled once and kept")
                    + f"), on this {os.cpu_count()}-core CPU machine "
                    f"({platform.processor() or platform.machine()}, no GPU, shared with other work; {load}).\n\n"
                    + "\n".join(table) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
