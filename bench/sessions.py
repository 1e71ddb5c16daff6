"""How long `kerntune show --json` and `kerntune simulate` take on every session in sessions/.

Each command runs as a fresh process (start-up and imports included), N times, the commands taking
turns; the table gives the median in seconds, wall (CPU in brackets: user and system time), and
the load average before and after says how quiet the machine was.
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


def run_once(argv: list[str], env: dict[str, str]) -> tuple[float, float] | int:
    """The wall and CPU seconds (user and system) of one `kerntune ARGV`, or its exit status when
    it fails (a session with no results cannot be simulated)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "kerntune.tui.cli", *argv], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL, env=env)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return done.returncode or (wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)


def session_row(session: Path, repeats: int, env: dict[str, str]) -> list[str]:
    """The session's cells: per command the median wall time and, in brackets, CPU time (on a
    machine shared with other work, the CPU time says what the command costs when the wall time
    waits). The commands take turns, each round running every one once, so that a spell of other
    work on the machine weighs on all of them alike."""
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in COMMANDS}
    failed: dict[str, int] = {}
    for _ in range(repeats):
        for name, argv in COMMANDS.items():
            if name not in failed:
                got = run_once([argv[0], str(session), *argv[1:]], env)
                if isinstance(got, int):
                    failed[name] = got
                else:
                    times[name].append(got)
    return [f"fails (exit {failed[name]})" if name in failed else
            f"{statistics.median(w for w, _ in runs):.2f} ({statistics.median(c for _, c in runs):.2f})"
            for name, runs in times.items()]


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
            session_row(sessions[0], 1, env)
        load_before = os.getloadavg()[0]
        head = ["session", "MB", *COMMANDS]
        rows = []
        for s in sessions:
            row = [s.stem, f"{s.stat().st_size / 1e6:.1f}", *session_row(s, args.repeats, env)]
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
                    f"Median of {args.repeats} rounds in seconds, wall (CPU), each command a fresh `kerntune` process "
                    f"(start-up and imports included; "
                    + ("modules compiled at every start" if args.compile else "bytecode compiled once and kept")
                    + f"), on this {os.cpu_count()}-core CPU machine "
                    f"({platform.processor() or platform.machine()}, no GPU, shared with other work; {load}).\n\n"
                    + "\n".join(table) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
