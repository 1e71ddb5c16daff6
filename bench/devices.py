"""Configurations per second on one GPU and on every GPU of the host, same template, same space.

    python bench/devices.py [--devices 0,1] [--cases silu_and_mul:llama7b-t128,matmul:2048:600]
                            [--budget 0] [--md FILE]

Each case runs twice from an empty compile cache: on the first device alone, then on all the
listed devices (one worker each, one compile pool feeding them). Throughput is counted two ways:
end to end (the run's wall time, start-up and the final checks included) and steady (results
between the first and the last result, the rate the search runs at once every worker is up).
The winner of the run over several devices is timed again on each device (its spread is printed).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from kerntune import templates
from kerntune.engine.events import ConfigEvaluated, Note
from kerntune.engine.template import load_template
from kerntune.engine.tune import TuneOptions, TuneRun


def run(kernel: str, problem: str, devices: tuple[int, ...], budget: int, cache: str | None = None) -> dict:
    t = load_template(templates.path(kernel))
    stamps: list[float] = []
    notes: list[str] = []

    def sink(ev) -> None:
        if isinstance(ev, ConfigEvaluated):
            stamps.append(time.perf_counter())
        elif isinstance(ev, Note) and ev.source == "devices":
            notes.append(ev.text)

    with tempfile.TemporaryDirectory() as fresh, tempfile.TemporaryDirectory() as out:
        os.environ["KERNTUNE_CACHE_DIR"] = cache or fresh
        opts = TuneOptions(backend="cuda", strategy="grid", problem=problem, budget=budget, seed=1,
                           session_path=Path(out) / "s.toml", probe=False, devices=devices)
        t0 = time.perf_counter()
        o = TuneRun(t, opts, [sink]).run()
        wall = time.perf_counter() - t0
    n = len(o.results)
    steady = (n - 1) / (stamps[-1] - stamps[0]) if n > 1 else 0.0
    per_device: dict[str, int] = {}
    for r in o.results:
        per_device[r.device or f"cuda:{devices[0]}"] = per_device.get(r.device or f"cuda:{devices[0]}", 0) + 1
    return {"n": n, "wall": wall, "e2e": n / wall, "steady": steady, "best": o.best.median_us if o.best else 0.0,
            "ok": o.winner_ok, "split": per_device, "retimed": notes[-1] if notes else "",
            "verified": sum(1 for r in o.results if r.verified),
            "compile_s": statistics.median([r.compile_s for r in o.results if not r.cached] or [0.0])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--devices", default="0,1")
    ap.add_argument("--cases", default="silu_and_mul:llama7b-t128,matmul:2048:600",
                    help="kernel:problem[:budget], comma-separated")
    ap.add_argument("--budget", type=int, default=0, help="evaluations per run (0: the whole space)")
    ap.add_argument("--md", type=Path, help="append the table here too")
    ap.add_argument("--warm", action="store_true",
                    help="compile every configuration first (a run of its own), then measure both from "
                         "that cache: what the devices do, without the host's compilers as the limit")
    args = ap.parse_args()
    devices = tuple(int(d) for d in args.devices.split(","))
    rows = []
    for case in args.cases.split(","):
        kernel, problem, *cap = case.split(":")  # kernel:problem[:budget]
        budget = int(cap[0]) if cap else args.budget
        with tempfile.TemporaryDirectory() as cache:
            if args.warm:
                run(kernel, problem, devices, budget, cache)
            one = run(kernel, problem, devices[:1], budget, cache if args.warm else None)
            many = run(kernel, problem, devices, budget, cache if args.warm else None)
        rows.append((kernel, problem, one, many))
        print(f"{kernel} {problem}: 1 GPU {one['steady']:.1f}/s steady, {one['e2e']:.1f}/s e2e; "
              f"{len(devices)} GPUs {many['steady']:.1f}/s steady, {many['e2e']:.1f}/s e2e; split {many['split']}; "
              f"median compile {one['compile_s']:.3f} s")
        if many["retimed"]:
            print("  " + many["retimed"])
    head = (f"| case | configurations | 1 GPU steady /s | {len(devices)} GPUs steady /s | ratio | "
            f"1 GPU end to end /s | {len(devices)} GPUs end to end /s | ratio | best us (1 / {len(devices)}) | split |")
    lines = [head, "|" + "---|" * 10]
    for kernel, problem, one, many in rows:
        lines.append(f"| {kernel} {problem} | {many['n']} | {one['steady']:.1f} | {many['steady']:.1f} | "
                     f"{many['steady'] / one['steady']:.2f}x | {one['e2e']:.1f} | {many['e2e']:.1f} | "
                     f"{many['e2e'] / one['e2e']:.2f}x | {one['best']:.2f} / {many['best']:.2f} | "
                     f"{', '.join(f'{k} {v}' for k, v in sorted(many['split'].items()))} |")
    ratios = [many["steady"] / one["steady"] for _, _, one, many in rows if one["steady"]]
    lines.append("")
    lines.append(f"steady ratio, median over cases: {statistics.median(ratios):.2f}x" if ratios else "")
    for kernel, problem, _, many in rows:
        if many["retimed"]:
            lines.append(f"- {kernel} {problem}: {many['retimed']}")
    table = "\n".join(lines)
    print(table)
    if args.md:
        with args.md.open("a") as f:
            f.write(table + "\n")


if __name__ == "__main__":
    main()
