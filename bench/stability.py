"""Tune each library template several times in a row and compare the verdicts.

    python bench/stability.py [--runs 3] [--templates silu_and_mul vector_add] [--backend cuda]
    python bench/stability.py --backend opencl --templates vector_add silu_and_mul --budget 12 --smallest
    python bench/stability.py --templates silu_and_mul --problem llama70b-t2048 --budget 24

Each run is the same command run again: new input sets, the same search order (`--vary-search`
gives each run another).

A template is stable when every run reports the same configuration, or a tie that holds the
others' reported configurations (the leaders' paired re-timing, engine/retime.py), and the reported
configurations' paired times agree within --within (1%). Prints one row per run (its reported
configuration, what it is tied with, its paired time and speedup interval) and one verdict per
template; the device is named in the header, so the output can be committed as it is.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from kerntune import templates
from kerntune.engine.result import config_key
from kerntune.engine.session import load_session
from kerntune.engine.template import load_template
from kerntune.engine.tune import TuneOptions, TuneRun
from kerntune.tui.words import fmt_params


def tune_once(name: str, args: argparse.Namespace, seed: int, out: Path) -> dict:
    t = load_template(templates.path(name))
    problem = args.problem if args.problem in {p.name for p in t.problems} else None
    if args.smallest:  # the problem moving the fewest bytes: PoCL on a CPU times the large ones slowly
        problem = min(t.problems, key=lambda p: float(t.cost_bytes.evaluate(p.values))).name
    # as a user's repeated command: new inputs every run, the same search order (--vary-search: another)
    opts = TuneOptions(backend=args.backend, problem=problem, seed=None, search_seed=seed if args.vary_search else None,
                       probe=False, budget=args.budget,
                       strategy=args.strategy, session_path=out / f"{name}-{seed}.toml")
    o = TuneRun(t, opts).run()
    s = load_session(o.session_path)
    lead, best = s.leaders(), s.best()
    row = {"device": o.limits.name, "problem": s.space.get("problem_name", ""), "evaluated": len(o.results),
           "best": best, "tied": [], "paired_us": None, "interval": None, "reason": "not re-timed", "quiet": True}
    if lead is not None and best is not None and config_key(lead.configs[lead.chosen]) == config_key(best.config):
        c = lead.chosen
        row.update(tied=lead.tied_with_chosen(), paired_us=lead.median_us[c], reason=lead.reason,
                   quiet=lead.quiet_rounds >= lead.rounds,
                   interval=(lead.low[c], lead.high[c]) if lead.original >= 0 else None)
    return row


def verdict(rows: list[dict], within: float) -> str:
    """Same configuration, or a tie among the same ones; paired times within `within`."""
    keys = [config_key(r["best"].config) if r["best"] is not None else None for r in rows]
    if None in keys:
        return "UNSTABLE: a run reported nothing"
    groups = [{k} | {config_key(c) for c in r["tied"]} for k, r in zip(keys, rows)]
    same = len(set(keys)) == 1
    tie = all(k in g for k in keys for g in groups)
    if not (same or tie):
        return f"UNSTABLE: {len(set(keys))} different configurations reported, not tied with each other"
    times = [r["paired_us"] for r in rows if r["paired_us"]]
    if len(times) == len(rows):
        spread = (max(times) - min(times)) / min(times)
        agree = f"paired times agree within {100 * spread:.2f}%"
        if spread > within:
            return f"{'same' if same else 'tied'}, but {agree} (more than {100 * within:g}%)"
        return f"STABLE: {'the same configuration' if same else 'a stated tie among the same configurations'}; {agree}"
    return f"{'same' if same else 'tied'}; no paired times to compare"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--templates", nargs="*", default=None, help="library templates (default: all)")
    ap.add_argument("--problem", default=None, help="a problem name, for the templates that have it")
    ap.add_argument("--smallest", action="store_true", help="each template's smallest problem")
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--budget", type=int, default=0, help="evaluations per run (0: the whole space)")
    ap.add_argument("--strategy", default="grid")
    ap.add_argument("--within", type=float, default=0.01)
    ap.add_argument("--vary-search", action="store_true",
                    help="a different search order each run (default: the same, as one command run again)")
    ap.add_argument("--keep", type=Path, default=None, help="keep the sessions in this folder")
    args = ap.parse_args()
    names = args.templates or templates.names()
    stable = 0
    with tempfile.TemporaryDirectory() as tmp:
        out = args.keep or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        for name in names:
            rows = [tune_once(name, args, 100 + i, out) for i in range(args.runs)]
            print(f"{name} at {rows[0]['problem']} on {rows[0]['device']} ({args.backend}), "
                  f"{rows[0]['evaluated']} configurations a run")
            for i, r in enumerate(rows, 1):
                b = r["best"]
                interval = f" [{r['interval'][0]:.2f}, {r['interval'][1]:.2f}]" if r["interval"] else ""
                paired = f"{r['paired_us']:.2f} us{interval}" if r["paired_us"] else "-"
                tied = f"; tied with {len(r['tied'])}" if r["tied"] else ""
                quiet = "" if r["quiet"] else " (rounds disturbed)"
                print(f"  run {i}: {fmt_params(b.config) if b else 'none'}: paired {paired}{tied}{quiet}")
            v = verdict(rows, args.within)
            stable += v.startswith("STABLE")
            print(f"  {v}")
    print(f"stable: {stable} of {len(names)} templates")


if __name__ == "__main__":
    main()
