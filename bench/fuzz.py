"""Mutated specs and sessions through kerntune's loaders and commands, in this process.

    python bench/fuzz.py [--specs 10000] [--sessions 10000] [--seed 0] [--hang 10]

Each case mutates a real spec (templates/vector_add, templates/softmax) or a real session
(tests/data/sessions) with one to four edits (a byte flipped, the text cut, a slice duplicated,
a NUL byte, a deep nest of arrays or tables, a non-finite number) and runs it through
`load_template` up to allocating (problems, memory footprint, the space) and `kerntune init
--check`, or through `load_session`, its summary, `kerntune show` and `show --json`. A case that
raises anything but kerntune's own one-line error, or that a command answers with more than one
line, is a traceback; one that takes longer than --hang seconds is a hang. The first few of each are
printed with their seeds, to replay one: `--seed N --specs 1 --sessions 0` runs case N alone.
"""

from __future__ import annotations

import argparse
import random
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from fuzz_support import SESSIONS, SPEC_DIRS, mutate, session_case, spec_case  # noqa: E402


class Hang(Exception):
    pass


def _alarm(signum, frame):
    raise Hang()


def run(kind: str, count: int, seed: int, hang: float, scratch: Path, trace: bool = False) -> tuple[int, int, float]:
    seeds = [(d, (d / "kernel.toml").read_bytes()) for d in SPEC_DIRS] if kind == "spec" else \
        [(p, p.read_bytes()) for p in SESSIONS]
    tracebacks = hangs = 0
    slowest = 0.0
    for n in range(count):
        case = seed + n
        rng = random.Random(f"{kind}-{case}")
        origin, data = rng.choice(seeds)
        mutated = mutate(data, rng)
        where = scratch / f"{kind}-{case % 50}"
        if trace:  # the case about to run, for a crash that takes the process with it
            print(f"{kind} case {case}", file=sys.stderr, flush=True)
        t0 = time.monotonic()
        signal.setitimer(signal.ITIMER_REAL, hang)
        try:
            if kind == "spec":
                spec_case(mutated, where, origin)
            else:
                session_case(mutated, where.with_suffix(".toml"))
        except Hang:
            hangs += 1
            print(f"hang: {kind} case {case} (from {origin.name})", file=sys.stderr)
        except Exception:
            tracebacks += 1
            if tracebacks <= 5:
                print(f"traceback: {kind} case {case} (from {origin.name}):\n{traceback.format_exc()}",
                      file=sys.stderr)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        slowest = max(slowest, time.monotonic() - t0)
    return tracebacks, hangs, slowest


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--specs", type=int, default=10_000)
    ap.add_argument("--sessions", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hang", type=float, default=10.0, help="seconds after which a case counts as a hang")
    ap.add_argument("--trace", action="store_true", help="name each case on stderr before it runs")
    args = ap.parse_args()
    signal.signal(signal.SIGALRM, _alarm)
    bad = 0
    with tempfile.TemporaryDirectory(prefix="kerntune-fuzz-") as tmp:
        for kind, count in (("spec", args.specs), ("session", args.sessions)):
            if not count:
                continue
            t0 = time.monotonic()
            tracebacks, hangs, slowest = run(kind, count, args.seed, args.hang, Path(tmp), args.trace)
            bad += tracebacks + hangs
            print(f"{count} mutated {kind}s: {tracebacks} tracebacks, {hangs} hangs; "
                  f"{time.monotonic() - t0:.0f} s, slowest case {slowest:.2f} s")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
