"""Profiler evidence for recorded sessions: Nsight Compute's DRAM traffic against the timing.

    python bench/profiler.py SESSION [SESSION ...] [--top K] [--record] [--raw DIR] [--md FILE]

For each session the K best configurations are profiled (`kerntune profile`): ncu with
--clock-control none and every cache flushed before each pass. The table reads the cost model's
bytes over the run's own timed median against ncu's DRAM bytes over ncu's duration, with the
bound, occupancy and top warp stalls. --record appends the metrics to each session (so replay
shows them); --raw keeps ncu's raw output of every config.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path

from kerntune.engine.ncu import ProfileError, find_ncu, ncu_version
from kerntune.engine.profile import profile_session
from kerntune.tui.text import fmt_config


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sessions", nargs="+", type=Path)
    ap.add_argument("--top", type=int, default=1)
    ap.add_argument("--record", action="store_true", help="append the metrics to each session")
    ap.add_argument("--raw", type=Path, help="keep ncu's raw output here")
    ap.add_argument("--md", type=Path, help="also write the table as Markdown")
    args = ap.parse_args()
    ncu = find_ncu()
    if ncu is None:
        print("ncu (Nsight Compute) was not found", file=sys.stderr)
        return 1
    if args.raw:
        args.raw.mkdir(parents=True, exist_ok=True)
    head = ("| kernel | rank | config | timed us | model MB | model GB/s | ncu us | ncu DRAM MB | ncu DRAM GB/s "
            "| DRAM % peak | SM % | occupancy % | L2 hit % | bound | top stalls |")
    rows = [head, "|" + "---|" * (head.count("|") - 1)]
    for path in args.sessions:
        try:
            events = profile_session(path, list(range(1, args.top + 1)), ncu=ncu, record=args.record,
                                     raw_dir=args.raw)
        except ProfileError as e:
            print(f"{path}: {e}", file=sys.stderr)
            continue
        name = path.stem.split("-")[0]
        for ev in events:
            if not ev.ok:
                rows.append(f"| {name} | {ev.rank} | {fmt_config(ev.config)} | {ev.measured_us:.2f} | "
                            f"| | | | | | | | | | not profiled: {ev.message} |")
                continue
            m = ev.metrics
            model_gbs = ev.bytes_moved / (ev.measured_us * 1e3) if ev.measured_us else 0.0
            stalls = ", ".join(f"{k} {v:.1f}" for k, v in m.get("stalls", {}).items())
            rows.append(f"| {name} | {ev.rank} | {fmt_config(ev.config)} | {ev.measured_us:.2f} | "
                        f"{ev.bytes_moved / 1e6:.1f} | {model_gbs:.0f} | {m['duration_us']:.2f} | "
                        f"{m['dram_bytes'] / 1e6:.1f} | {m['dram_gbs']:.0f} | {m['dram_pct']:.1f} | "
                        f"{m['sm_pct']:.1f} | {m['achieved_occupancy_pct']:.1f} | {m['l2_hit_pct']:.1f} | "
                        f"{m['bound']} | {stalls} |")
        print("\n".join(rows[-len(events):]), flush=True)
    text = "\n".join(rows)
    print(text)
    if args.md:
        stamp = datetime.date.today().isoformat()
        args.md.write_text(f"# Profiler evidence\n\n- command: `python {' '.join(sys.argv)}`\n- date: {stamp}\n"
                           f"- ncu: {ncu_version(ncu)}\n\n{text}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
