"""Progress: evaluated of feasible, failures, rate, time left, and the best so far as a sparkline.

Every figure comes from the events' timestamps, so a replay shows what the live run showed.
"""

from __future__ import annotations

from rich.text import Text

from ..terminal import printable
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widget import Widget
from textual.widgets import Sparkline, Static

from ..numbers import fmt_percent, fmt_us
from ..state import DashboardState


def fmt_duration(seconds: float) -> str:
    """`42 s`, `3m05s`, `2h10m`."""
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def fmt_rate(rate: float) -> str:
    """Configurations per second, or per minute when fewer than one a second."""
    return f"{rate:.1f}/s" if rate >= 1 else f"{60 * rate:.1f}/min"


def progress_counts(state: DashboardState) -> Text:
    """`18/24 evaluated · 2 failed · 4.2/s · ~3 s left`, or how the run ended; `on 2 devices`
    after the count when results come from several."""
    out = Text()
    # an agent loop runs one search per round, each over its own space: count the current one
    rounds = len(state.runs) > 1 and state.runs[-1].resumed == 0
    out.append(f"{state.run_evaluated if rounds else state.evaluated}", "bold")
    out.append(f"/{state.feasible or '?'} evaluated")
    if rounds:
        out.append(f" this round, {state.evaluated} in all")
    if state.several_devices:
        out.append(f" on {len(state.devices)} devices")
    target = state.target()
    if target and target < state.feasible:
        out.append(f" (budget {target})")
    if state.failed_count:
        out.append(" · ")
        out.append(f"{state.failed_count} failed", "red")
    rate = state.rate()
    if state.finished is not None:
        out.append(" · ")
        out.append(f"finished: {printable(state.finished.reason)}", "bold")
    elif state.error is not None:
        out.append(" · ")
        out.append("the run failed", "bold red")
    else:
        if rate:
            out.append(f" · {fmt_rate(rate)}")
        left = state.time_left()
        if left is not None:
            out.append(f" · ~{fmt_duration(left)} left")
    return out


def bar(done: int, total: int, width: int) -> Text:
    """A bar of `width` cells that reads without colour: heavy where done, light where not."""
    width = max(width, 1)
    filled = int(width * min(done, total) / total) if total else 0
    return Text.assemble(("━" * filled, "green"), ("─" * (width - filled), "dim"))


class ProgressLine(Widget):
    """The bar and the counts on one line, the bar taking whatever width the counts leave."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._counts = Text()
        self._done = 0
        self._total = 0

    def show(self, state: DashboardState) -> None:
        self._counts = progress_counts(state)
        self._done, self._total = state.evaluated, state.target()
        self.refresh()

    def render(self) -> Text:
        width = self.size.width
        room = width - self._counts.cell_len - 1
        if room < 8:
            return self._counts
        return Text.assemble(bar(self._done, self._total, room), " ", self._counts, no_wrap=True)


def best_line(state: DashboardState) -> Text:
    """`best 10.2 µs · 1.85x default · 43.1% SOL · re-verified`."""
    best = state.best
    if best is None:
        return Text("best -  ", style="dim")
    out = Text.assemble("best ", (f"{fmt_us(best.median_us)} µs", "bold"))
    speed = state.speedup(best)
    if speed:
        out.append(f" · {speed:.2f}x default", "green" if speed > 1.0 else "")
    if best.sol_fraction is not None:
        out.append(f" · {fmt_percent(best.sol_fraction)} SOL")
    if state.winner is not None and state.winner.config == best.config:
        out.append(" · re-verified" if state.winner.ok else " · FAILED re-check",
                   "green" if state.winner.ok else "bold red")
    out.append("  ")
    return out


class ProgressPanel(Widget):
    """Two lines: the bar with counts, then the best so far and its history."""

    def compose(self) -> ComposeResult:
        yield ProgressLine(id="progress-line")
        with Horizontal(id="best-row"):
            yield Static(id="best-line")
            yield Sparkline([], id="best-spark")

    def show(self, state: DashboardState) -> None:
        self.query_one(ProgressLine).show(state)
        self.query_one("#best-line", Static).update(best_line(state))
        spark = self.query_one(Sparkline)
        # Plot speed (1 / time): the line climbs as the run finds faster configurations. The
        # best so far never gets worse, so every n-th point keeps its shape at any length.
        history = state.best_history
        step = max(1, len(history) // 400)
        points = history[::step]
        if history and (len(history) - 1) % step:
            points.append(history[-1])
        spark.data = [1.0 / us for us in points if us > 0]
