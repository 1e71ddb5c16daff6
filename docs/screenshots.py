"""Screenshots of the dashboard for the README, as SVG through Textual's own screenshot.

    python docs/screenshots.py live TEMPLATE [--shape NAME=VALUE] [--budget N] [--backend B] [--out DIR]
    python docs/screenshots.py replay SESSION [--out DIR]

`live` runs a real tuning run in the dashboard (headless, 120x40), saves the screen when half the
budget is evaluated (dashboard-live.svg) and the session it recorded; `replay` plays a session to
its end and saves dashboard-replay.svg.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from kerntune.engine.evaluate import TimingPolicy
from kerntune.engine.session import load_session
from kerntune.engine.tune import TuneOptions
from kerntune.tui.app import live_app, replay_app
from kerntune.tui.launch import resolve_template
from kerntune.tui.parser import parse_shape

SIZE = (120, 40)


async def _until(pilot, condition, timeout: float) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not condition() and loop.time() < end:
        await pilot.pause(0.05)


def live(args: argparse.Namespace) -> None:
    template = resolve_template(args.template)
    session = args.out / f"{template.name}-live.toml"
    options = TuneOptions(backend=args.backend, budget=args.budget, strategy=args.strategy,
                          overrides=parse_shape(args.shape), problem=args.problem, session_path=session,
                          seed=args.seed, timing=TimingPolicy(), probe=True,
                          command=["kerntune", "tune", args.template, *sys.argv[3:]])

    async def go() -> None:
        app = live_app(template, options)
        async with app.run_test(size=SIZE) as pilot:
            await _until(pilot, lambda: app.state.evaluated >= args.budget // 2 or app.engine_done, 900)
            await pilot.press(args.panel_key) if args.panel_key else None
            await pilot.pause(0.3)
            (args.out / "dashboard-live.svg").write_text(app.export_screenshot(title="kerntune tune (live)"))
            await _until(pilot, lambda: app.engine_done, 900)
            await pilot.pause(0.3)
            (args.out / "dashboard-live-end.svg").write_text(app.export_screenshot(title="kerntune tune (live)"))

    asyncio.run(go())
    print(f"wrote {args.out / 'dashboard-live.svg'} and the session {session}")


def replay(args: argparse.Namespace) -> None:
    async def go() -> None:
        app = replay_app(load_session(args.session), paused=True)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("greater_than_sign", *args.keys)
            await pilot.pause(0.3)
            (args.out / "dashboard-replay.svg").write_text(app.export_screenshot(title="kerntune replay"))

    asyncio.run(go())
    print(f"wrote {args.out / 'dashboard-replay.svg'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    lv = sub.add_parser("live")
    lv.add_argument("template")
    lv.add_argument("--shape", action="append", default=[])
    lv.add_argument("--problem")
    lv.add_argument("--budget", type=int, default=60)
    lv.add_argument("--strategy", default="grid")
    lv.add_argument("--backend", default="auto")
    lv.add_argument("--seed", type=int, default=1)
    lv.add_argument("--panel-key", default="", help="a key to press before the screenshot (e.g. d)")
    lv.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    rp = sub.add_parser("replay")
    rp.add_argument("session", type=Path)
    rp.add_argument("--keys", nargs="*", default=[], help="keys to press at the end (e.g. f)")
    rp.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    live(args) if args.what == "live" else replay(args)


if __name__ == "__main__":
    main()
