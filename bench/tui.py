"""How fast the dashboard takes in a session: a 10,000-event replay, as fast as it can go.

    python bench/tui.py [--events 10000] [--size 120x40] [--headless]
    python bench/tui.py --sessions [--size 80x24] [--runs 5] [--session matmul] [--compile]

--sessions: the first paint of every session in sessions/ as `kerntune replay` opens it: the time
to load the file, from then to the dashboard's first frame painted, and to the whole session
painted after `>` (every result a row); the median of --runs runs each, headless. The last column
is the whole command as a user runs it: `kerntune replay SESSION --paused` started in a
pseudo-terminal of --size, to its first frame on that terminal (start-up and imports included),
with the CPU time it had spent by then (what it costs when other work slows the wall clock); its
modules' bytecode is compiled once and kept, as an installed kerntune has it (--compile: compiled
at every start, as in a checkout where PYTHONDONTWRITEBYTECODE is set). --session NAME times only
the sessions whose file name contains NAME.

Writes a session of N events with the real SessionWriter (the vector_add fixture's header; four
parameters; synthetic results, about 6 % of them failures, 16 raw times each, since a real run of
10,000 configurations takes hours), loads it, and replays it at max speed in the real dashboard
inside a pseudo-terminal (Textual's own driver writing to it), or headless with --headless.

It reports the wall time from the first frame to the last event painted, the frames it took, and
the delay of each event from the moment the replay released it to the paint of the frame that
shows it (its row, when the row is among the best shown, and the counts and the sparkline).
"""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import itertools
import json
import os
import platform
import pty
import random
import select
import shutil
import signal
import statistics
import struct
import sys
import tempfile
import termios
import time
from pathlib import Path

from kerntune.engine.events import (BestImproved, ConfigEvaluated, Note, RunFinished, RunStarted, SpaceBuilt,
                                    WinnerVerified)
from kerntune.engine.result import Resources, Result
from kerntune.engine.session import SessionWriter, load_session
from kerntune.tui.app import ReplayDashboard
from kerntune.tui.feeds import MAX_BATCH, ReplayFeed
from kerntune.tui.state import DashboardState

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "data" / "sessions" / "vector_add.toml"
PARAMS = {"BLOCK": [32, 64, 128, 256, 512, 1024], "ITEMS": [1, 2, 4, 8, 16], "UNROLL": [1, 2, 4, 8, 16, 32],
          "VEC": [1, 2, 4, 8], "STAGES": list(range(1, 15))}


def write_session(path: Path, events: int, seed: int = 1) -> None:
    """A session of `events` events: header of a real run, synthetic results."""
    rng = random.Random(seed)
    header = load_session(FIXTURE).header
    default = {"BLOCK": 256, "ITEMS": 1, "UNROLL": 1, "VEC": 1, "STAGES": 1}
    header = {**header, "template": {**header["template"], "parameters": list(PARAMS), "default_config": default},
              "space": {**header["space"], "total": events, "feasible": events, "pruned": {}}}
    configs = [dict(zip(PARAMS, values)) for values in itertools.product(*PARAMS.values())]
    rng.shuffle(configs)
    configs.remove(default)
    configs.insert(0, default)
    t = 0.1
    with SessionWriter(path, header) as w:
        w.write(RunStarted(t, "vector_add", {"n": 1048576}, "1M", "opencl", header["device"]["name"], "random",
                           seed=seed))
        w.write(SpaceBuilt(t, events, events, {}))
        w.write(Note(t, "a synthetic session for bench/tui.py"))
        written, results, best = 3, 0, None
        # Results until two events are left for the winner's check and the end of the run.
        for i, config in enumerate(configs):
            if written >= events - 3:
                break
            t += rng.uniform(0.02, 0.08)
            if rng.random() < 0.06:
                status = rng.choice(["compile_error", "wrong_result", "timeout"])
                r = Result(config, status, message=f"{status}: synthetic failure {i}", compile_s=0.2)
            else:
                median = 100 + 900 * rng.random() ** 2 + 5 * config["BLOCK"] / 256
                times = tuple(round(median * rng.uniform(0.97, 1.05), 3) for _ in range(16))
                r = Result(config, "ok", times_us=times, median_us=round(median, 3), spread=0.03,
                           min_us=min(times), compile_s=0.2, verify_s=0.1, time_s=0.1,
                           resources=Resources(32, 0, 0, 1024, 0), bandwidth_gbs=12.0e3 / median,
                           sol_us=80.0, sol_fraction=80.0 / median, seeds=(1, 2))
            w.write(ConfigEvaluated(t, i, r))
            written, results = written + 1, results + 1
            if r.ranked and (best is None or r.median_us < best.median_us):
                best = r
                w.write(BestImproved(t, i, dict(config), r.median_us, r.sol_fraction or 0.0, 1.0))
                written += 1
        while written < events - 2:
            t += 0.001
            w.write(Note(t, f"note {written}"))
            written += 1
        w.write(WinnerVerified(t + 0.5, dict(best.config), True, "", (3, 4)))
        w.write(RunFinished(t + 0.6, "budget reached", results, results, dict(best.config), best.median_us))


class BenchDashboard(ReplayDashboard):
    """The replay dashboard, recording its frames, leaving once the last event is on screen."""

    def on_mount(self) -> None:
        self.record_frames = True
        self.started_at = time.monotonic()
        super().on_mount()

    def _apply(self, batch) -> None:
        super()._apply(batch)
        if self.feed.done and not getattr(self, "_leaving", False) and batch.items:
            self._leaving = True
            self.call_after_refresh(self._done)

    def _done(self) -> None:
        self.finished_at = time.monotonic()
        self.call_after_refresh(self.exit)


def measure(session_path: Path, size: tuple[int, int], headless: bool, batch: int = MAX_BATCH) -> dict:
    t0 = time.perf_counter()
    session = load_session(session_path)
    load_s = time.perf_counter() - t0
    app = BenchDashboard(feed=ReplayFeed(session.events, speed=float("inf"), max_batch=batch),
                         state=DashboardState(session.header), session_path=session.path)
    if headless:
        async def go():
            async with app.run_test(size=size) as pilot:
                while app.is_running:
                    await pilot.pause(0.05)
        asyncio.run(go())
    else:
        app.run()
    frames = app.frames
    delays = []
    for since, n, shown in frames:
        delays += [shown - since] * n
    best = session.best()
    top = app.state.best
    return {
        "events": len(session.events),
        "load_s": load_s,
        "wall_s": app.finished_at - app.started_at,
        "frames": len(frames),
        "worst_delay_s": max(delays),
        "median_delay_s": statistics.median(delays),
        "events_shown": sum(n for _, n, _ in frames),
        "best_matches": top is not None and best is not None and top.config == best.config,
    }


def in_pty(session_path: Path, size: tuple[int, int], batch: int = MAX_BATCH) -> dict:
    """Run `measure` in a child whose terminal is a pseudo-terminal of `size`; drain what it writes."""
    out = Path(tempfile.mkstemp(suffix=".json")[1])
    pid, fd = pty.fork()
    if pid == 0:  # the child: a terminal of its own, the real Textual driver
        try:
            result = measure(session_path, size, headless=False, batch=batch)
            out.write_text(json.dumps(result))
        finally:
            os._exit(0)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", size[1], size[0], 0, 0))
    written = 0
    while True:
        ready, _, _ = select.select([fd], [], [], 1.0)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            written += len(chunk)
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
    os.close(fd)
    result = json.loads(out.read_text() or "{}")
    out.unlink()
    if not result:
        raise SystemExit("the benchmark's child failed; run with --headless to see why")
    result["terminal_bytes"] = written
    return result


class FirstPaint(ReplayDashboard):
    """The replay dashboard as `kerntune replay` opens it, noting when its first frame is painted."""

    painted_at = 0.0

    def on_mount(self) -> None:
        super().on_mount()
        self.call_after_refresh(self._painted)

    def _painted(self) -> None:
        self.painted_at = time.perf_counter()


def first_paint(session_path: Path, size: tuple[int, int]) -> dict:
    """Seconds to load the session, to paint the first frame, and to paint the whole session."""
    t0 = time.perf_counter()
    session = load_session(session_path)
    loaded = time.perf_counter()
    app = FirstPaint(feed=ReplayFeed(session.events), state=DashboardState(session.header),
                     session_path=session.path, warnings=session.warnings)
    out: dict = {}

    async def go():
        async with app.run_test(size=size) as pilot:
            while not app.painted_at:
                await pilot.pause(0.001)
            out["paint_s"] = app.painted_at - t0
            t1 = time.perf_counter()
            await pilot.press("greater_than_sign")
            await pilot.pause()
            out["end_s"] = time.perf_counter() - t1
            out["rows"] = app.query_one("#board-table").row_count

    asyncio.run(go())
    out["load_s"] = loaded - t0
    return out


def command_first_paint(session_path: Path, size: tuple[int, int], marker: str, bytecode_cache: Path | None = None,
                        timeout: float = 60.0) -> tuple[float, float]:
    """Seconds from starting `kerntune replay SESSION --paused` in a pseudo-terminal of `size` to its
    first frame there (the first time `marker`, the template's name in the title bar, is written),
    and the CPU seconds (user and system) the command had spent by then. With `bytecode_cache`,
    Python keeps the compiled modules there, as an installed kerntune has them."""
    want = marker.encode()
    t0 = time.perf_counter()
    pid, fd = pty.fork()
    if pid == 0:  # the child: the command on a terminal of its own
        fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", size[1], size[0], 0, 0))
        env = {k: v for k, v in os.environ.items() if k != "KERNTUNE_HEADLESS"}
        if bytecode_cache is not None:
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = str(bytecode_cache)
        os.execve(sys.executable, [sys.executable, "-m", "kerntune.tui.cli", "replay", str(session_path), "--paused"],
                  {**env, "TERM": "xterm-256color"})
    seen = b""
    painted = None
    try:
        while painted is None and time.perf_counter() - t0 < timeout:
            if not select.select([fd], [], [], 0.5)[0]:
                continue
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # the child is gone
                break
            if not chunk:
                break
            seen = seen[-len(want):] + chunk
            if want in seen:
                painted = time.perf_counter() - t0
    finally:
        os.kill(pid, signal.SIGKILL)
        usage = os.wait4(pid, 0)[2]
        os.close(fd)
    if painted is None:
        raise SystemExit(f"kerntune replay {session_path}: no first frame within {timeout:.0f} s")
    return painted, usage.ru_utime + usage.ru_stime


def bench_sessions(size: tuple[int, int], runs: int, names: list[str], compile_: bool) -> None:
    print(f"first paint of every session in sessions/, headless {size[0]}x{size[1]}, median of {runs} runs, "
          f"Python {platform.python_version()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; "
          + ("the command compiles its modules at every start" if compile_ else
             "the command's bytecode compiled once and kept"))
    print(f"{'session':<46}{'MiB':>6}{'events':>8}{'load s':>8}{'paint s':>9}{'> all s':>9}{'rows':>7}"
          f"{'command s':>11}{'(CPU s)':>9}")
    cache = None if compile_ else Path(tempfile.mkdtemp(prefix="kerntune-bytecode-"))
    for path in sorted((ROOT / "sessions").glob("*.toml")):
        if names and not any(n in path.name for n in names):
            continue
        rs = [first_paint(path, size) for _ in range(runs)]
        med = {k: statistics.median(r[k] for r in rs) for k in ("load_s", "paint_s", "end_s")}
        session = load_session(path)
        name = str(session.template.get("name", ""))[:12]
        if cache is not None:  # compile once, untimed: the bytecode an install has
            command_first_paint(path, size, name, cache)
        commands = [command_first_paint(path, size, name, cache) for _ in range(runs)]
        command, cpu = (statistics.median(c[i] for c in commands) for i in (0, 1))
        print(f"{path.name:<46}{path.stat().st_size / 2**20:>6.1f}{len(session.events):>8d}{med['load_s']:>8.2f}"
              f"{med['paint_s']:>9.2f}{med['end_s']:>9.2f}{rs[0]['rows']:>7d}{command:>11.2f}{cpu:>9.2f}")
    print(f"load average {os.getloadavg()[0]:.1f} at the end")
    if cache is not None:
        shutil.rmtree(cache, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=10_000)
    ap.add_argument("--size", default="120x40")
    ap.add_argument("--headless", action="store_true", help="no terminal: Textual's headless driver")
    ap.add_argument("--batch", type=int, default=MAX_BATCH, help=f"events a frame takes in (default {MAX_BATCH})")
    ap.add_argument("--sessions", action="store_true", help="first paint of every session in sessions/")
    ap.add_argument("--runs", type=int, default=5, help="with --sessions: runs per session (the median)")
    ap.add_argument("--session", action="append", default=[], metavar="NAME",
                    help="with --sessions: only the sessions whose file name contains NAME")
    ap.add_argument("--compile", action="store_true",
                    help="with --sessions: the command compiles kerntune's modules at every start (keeps no "
                         "bytecode), as PYTHONDONTWRITEBYTECODE does; by default they are compiled once and kept")
    args = ap.parse_args()
    w, h = (int(x) for x in args.size.split("x"))
    if args.sessions:
        bench_sessions((w, h), args.runs, args.session, args.compile)
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.toml"
        write_session(path, args.events)
        size_mb = path.stat().st_size / 2**20
        r = (measure(path, (w, h), headless=True, batch=args.batch) if args.headless
             else in_pty(path, (w, h), batch=args.batch))
    mode = ("headless" if args.headless else f"pty {w}x{h}") + f", up to {args.batch} events a frame"
    print(f"dashboard replay at max speed: {r['events']} events ({size_mb:.1f} MiB session), {mode}, "
          f"Python {platform.python_version()}, {os.cpu_count()} CPUs")
    print(f"{'measure':<44}{'value':>12}")
    print(f"{'load the session file (s)':<44}{r['load_s']:>12.2f}")
    print(f"{'replay, first frame to last event painted (s)':<44}{r['wall_s']:>12.2f}")
    print(f"{'frames painted with events':<44}{r['frames']:>12d}")
    print(f"{'events per second':<44}{r['events'] / r['wall_s']:>12.0f}")
    print(f"{'worst delay, event released to painted (ms)':<44}{1000 * r['worst_delay_s']:>12.1f}")
    print(f"{'median delay (ms)':<44}{1000 * r['median_delay_s']:>12.1f}")
    if "terminal_bytes" in r:
        print(f"{'bytes written to the terminal':<44}{r['terminal_bytes']:>12,d}")
    print(f"all {r['events_shown']} events shown; the best row is the session's best: {r['best_matches']}; "
          f"target under 5 s: {'met' if r['wall_s'] < 5 else 'MISSED'}")


if __name__ == "__main__":
    main()
