"""Where one tuning run's wall time goes, phase by phase: start-up, the search, the final checks.

    python bench/phases.py [--template fused_add_rmsnorm] [--problem llama7b-t2048] [--backend cuda]
                           [--strategy grid] [--budget 0] [--runs 3] [--warm] [--inputs warm|cold] [--ahead]

Runs `kerntune tune` in this process (as bench/peer.py does) under cProfile, each run from an empty
compile cache unless --warm, its input sets and references drawn before (by an untimed run) unless
--inputs cold, and prints a table of the median seconds of each phase: the whole run,
the search from the first submission to the last result, the final checks (new inputs and
compute-sanitizer, side by side) (and inside the
evaluation worker, from its own profile: opening the backend, drawing inputs and references,
calibration, evaluations, the final check; and the steps of the worker's start as it reports
them: its process and modules, the device, inputs and references, calibration); then the
configurations per second end to end and from the first result to the last. With --ahead each
run's worker and compile processes are started before its clock (engine/standby.py, as
`kerntune tune` starts them while it reads the template) and waited for: the clock then counts
only what a run does once it is asked.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

from kerntune.engine import standby
from kerntune.engine.evaluate import VerifyPolicy
from kerntune.engine.events import ConfigEvaluated, Event, Note, RunStarted
from kerntune.engine.inputs_cache import ENV as INPUTS_ENV
from kerntune.engine.template import load_template
from kerntune import templates
from kerntune.engine.tune import TuneOptions, TuneRun

# configurations whose checks use every input set of a run's pools (each uses `seeds` of `pool` per
# size, in turn): what the untimed run that draws the input sets for --inputs warm evaluates
DRAWN_BY = -(-VerifyPolicy().pool // VerifyPolicy().seeds)

# (phase, the function whose cumulative time it is: file suffix, name)
PHASES = (
    ("search", ("engine/driver.py", "search")),
    ("final checks (new inputs, compute-sanitizer)", ("engine/tune.py", "_final_check")),
)
# phases inside the evaluation worker, from its own profile (KERNTUNE_PROFILE)
WORKER_PHASES = (
    ("worker: open the backend", ("engine/backends/__init__.py", "open_backend")),
    ("worker: inputs and references", ("engine/evaluate.py", "prepare")),
    ("worker: calibration", ("engine/evaluate.py", "calibrate")),
    ("worker: evaluations", ("engine/evaluate.py", "evaluate")),
    ("worker: final check on new inputs", ("engine/evaluate.py", "check_again")),
)


def one_run(spec: Path, args: argparse.Namespace, seed: int) -> dict[str, float]:
    template = load_template(spec)
    marks: list[float] = []
    timeline: list[str] = []  # the first results: when, and each one's compile, check and timing seconds
    t0 = time.perf_counter()

    started: list[float] = []
    worker_start: dict[str, float] = {}

    def sink(ev: Event) -> None:
        if isinstance(ev, ConfigEvaluated) and not ev.replaces:
            marks.append(time.perf_counter() - t0)
            if len(timeline) < args.timeline:
                r = ev.result
                timeline.append(f"{marks[-1]:6.3f} s  compile {r.compile_s or 0.0:.3f}  check {r.verify_s or 0.0:.3f}  "
                                f"time {r.time_s or 0.0:.3f}  {r.status}{' (cached)' if r.cached else ''}")
        elif isinstance(ev, Note) and ev.source == "worker" and ": " in ev.text:
            # "the evaluation worker was ready in T s: STEP S s, STEP S s, ...[; it was started
            # ahead of the run: STEP S s, ...]"
            steps, _, ahead = ev.text.split(": ", 1)[1].partition("; it was started ahead of the run: ")
            for which, text in (("worker start", steps), ("worker started ahead", ahead)):
                for name, s in re.findall(r"([a-z][a-z ]*?) ([0-9.]+) s", text):
                    worker_start[f"{which}: {name}"] = float(s)
        elif isinstance(ev, RunStarted) and not started:
            started.append(time.perf_counter() - t0)

    with tempfile.TemporaryDirectory(prefix="phases-") as tmp:
        if not args.plain:
            os.environ["KERNTUNE_PROFILE"] = tmp
        if not args.warm:
            os.environ["KERNTUNE_CACHE_DIR"] = tmp
        opts = TuneOptions(backend=args.backend, strategy=args.strategy, budget=args.budget, seed=seed,
                           problem=args.problem, probe=False, session_path=Path(tmp) / "run.toml")
        prof = cProfile.Profile()
        if args.ahead:
            standby.standby(args.backend, 0)
            if not standby.wait(300):
                print("phases: the worker started ahead is not ready (the run starts its own)", file=sys.stderr)
        t0 = time.perf_counter()
        if args.plain:
            TuneRun(template, opts, [sink]).run()
        else:
            prof.runcall(TuneRun(template, opts, [sink]).run)
        wall = time.perf_counter() - t0
        standby.stand_down()
        files = sorted(Path(tmp).glob("worker-*.prof"))
        worker = [pstats.Stats(str(f)).stats for f in files]
        if args.top and files:
            print("the evaluation worker:")
            pstats.Stats(str(files[0])).sort_stats(args.sort).print_stats(args.top)
    os.environ.pop("KERNTUNE_PROFILE", None)
    if args.top and not args.plain:
        print("the run's own process:")
        pstats.Stats(prof).sort_stats(args.sort).print_stats(args.top)
    stats = {} if args.plain else pstats.Stats(prof).stats  # {(file, line, name): (cc, nc, tt, ct, callers)}
    out = {"whole run": wall}
    for phase, (suffix, name) in PHASES if not args.plain else ():
        out[phase] = sum(v[3] for (f, _, n), v in stats.items() if n == name and f.endswith(suffix))
    for phase, (suffix, name) in WORKER_PHASES if not args.plain else ():
        out[phase] = sum(v[3] for st in worker for (f, _, n), v in st.items() if n == name and f.endswith(suffix))
    out.update(worker_start)
    if timeline:
        print(f"the first {len(timeline)} results of run {seed} (seconds from the call):")
        print("\n".join(f"  {line}" for line in timeline))
    if started:
        out["before the search starts (device, space, session)"] = started[0]
    if len(marks) >= 2:
        out["before the first result"] = marks[0]
        out["after the last result"] = wall - marks[-1]
        out["configurations"] = len(marks)
        out["configurations/s end to end"] = len(marks) / wall
        out["configurations/s first to last"] = (len(marks) - 1) / (marks[-1] - marks[0])
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--template", default="fused_add_rmsnorm")
    p.add_argument("--problem", default=None)
    p.add_argument("--backend", default="auto")
    p.add_argument("--strategy", default="grid")
    p.add_argument("--budget", type=int, default=0)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--warm", action="store_true", help="keep the compile cache between runs")
    p.add_argument("--top", type=int, default=0, help="also print the worker's N costliest functions (last run)")
    p.add_argument("--sort", default="cumulative", help="the order of --top: cumulative or tottime")
    p.add_argument("--plain", action="store_true", help="no profiler (its overhead): whole-run figures only")
    p.add_argument("--inputs", choices=("warm", "cold"), default="warm",
                   help="input sets and references already drawn by an earlier run (warm), or drawn by each run")
    p.add_argument("--timeline", type=int, default=0, metavar="N",
                   help="print each run's first N results: when, and their compile, check and timing seconds")
    p.add_argument("--ahead", action="store_true",
                   help="start each run's worker and compile processes before its clock, and wait for them")
    args = p.parse_args(argv)
    spec = templates.path(args.template) if not args.template.endswith(".toml") else Path(args.template)
    with tempfile.TemporaryDirectory(prefix="phases-inputs-") as inputs:
        # cold: every run draws its input sets and computes their references; warm: they were
        # drawn before, as by an earlier run with the same seed (an untimed run of the first
        # configurations, whose checks use every set)
        os.environ[INPUTS_ENV] = "off" if args.inputs == "cold" else inputs
        if args.inputs == "warm":
            for seed in range(1, args.runs + 1):
                one_run(spec, argparse.Namespace(**{**vars(args), "budget": DRAWN_BY, "plain": True, "top": 0, "timeline": 0}),
                        seed)
        runs = [one_run(spec, args, seed) for seed in range(1, args.runs + 1)]
        os.environ.pop(INPUTS_ENV, None)
    keys = list(dict.fromkeys(k for r in runs for k in r))
    print(f"{args.template} {args.problem or '(first problem)'} {args.backend} {args.strategy}, "
          f"{args.runs} runs, {'warm' if args.warm else 'empty'} compile cache, {args.inputs} inputs"
          + (", worker and compile processes started ahead" if args.ahead else ""))
    print(f"{'phase':<46} {'median':>8}  runs")
    for k in keys:
        vals = [r[k] for r in runs if k in r]
        print(f"{k:<46} {statistics.median(vals):>8.2f}  " + " ".join(f"{v:.2f}" for v in vals))
    return 0


if __name__ == "__main__":
    sys.exit(main())
