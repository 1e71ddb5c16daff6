"""The details of one configuration: raw times, resources, the time each step took, its error."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Sparkline, Static

from ..numbers import fmt_gbs, fmt_percent, fmt_us
from ..state import DashboardState
from ..terminal import clipped, printable, printable_source
from ..words import fmt_config


def details_renderable(state: DashboardState, key: str):
    """Everything the session holds about one configuration's result."""
    r = state.entries[key].result
    rank = state.rank(key)
    where = f"rank {rank} of {state.ranked_count}" if rank else ("not ranked: faster than its bound"
                                                                 if r.status == "suspect" else "failed")
    head = Text.assemble((fmt_config(r.config), "bold"), "  ", (printable(r.status), "green" if r.verified else "bold red"),
                         (f"  ({where})", "dim"))
    parts: list = [head]
    if r.message:
        parts += [Text(""), Text("verification error" if r.status == "wrong_result" else "message", "bold"),
                  Text(printable_source(clipped(r.message, 20_000)), "red" if not r.verified else "")]
    w = state.winner
    if w is not None and dict(w.config) == dict(r.config):
        state_text = "passed" if w.ok else f"FAILED: {w.message}"
        parts.append(Text(printable(f"re-verified on new inputs (seeds {', '.join(map(str, w.seeds))}): {state_text}"),
                          "green" if w.ok else "bold red"))
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="dim", no_wrap=True)
    grid.add_column(overflow="fold")

    def row(label: str, value: str) -> None:  # values name devices and files: printable, never markup
        grid.add_row(label, Text(printable(value)))

    if r.median_us is not None:
        row("median", f"{fmt_us(r.median_us)} µs" + (f"   min {fmt_us(r.min_us)} µs" if r.min_us is not None else ""))
        row("spread", f"{fmt_percent(r.spread)}  (interquartile range / median)")
    speed = state.speedup(r)
    if speed:
        row("speedup", f"{speed:.2f}x the default configuration ({fmt_us(state.default_us)} µs)")
    if r.sol_us is not None:
        row("speed of light", f"{fmt_us(r.sol_us)} µs; this result is at {fmt_percent(r.sol_fraction)} of it")
    if r.bandwidth_gbs is not None:
        row("bandwidth", f"{fmt_gbs(r.bandwidth_gbs)} GB/s")
    if r.gflops is not None:
        row("arithmetic", f"{r.gflops:.1f} GFLOP/s")
    if r.occupancy is not None:
        row("occupancy", f"{100 * r.occupancy:.0f}%")
    if r.resources is not None:
        res = r.resources
        row("resources", f"{res.registers} registers/thread · {res.shared_static} B shared · "
            f"{res.local_bytes} B local · {res.spills} B spilled · up to {res.max_threads} threads/block")
    if r.grid or r.block:
        row("launch", f"grid {' x '.join(map(str, r.grid)) or '-'} · block {' x '.join(map(str, r.block)) or '-'}")
    if r.device:
        row("device", f"measured on {r.device}")
    row("seconds", f"compile {r.compile_s:.3f}{' (cached)' if r.cached else ''} · verify {r.verify_s:.3f}"
        f" · time {r.time_s:.3f}")
    if r.seeds:
        row("verified with", f"seeds {', '.join(map(str, r.seeds))}"
            + (f"; largest error {r.max_error:.3g} of the tolerance" if r.max_error is not None else ""))
    parts += [Text(""), grid]
    prof = state.profiles.get(key)
    if prof is not None:
        parts += [Text(""), profile_renderable(prof)]
    if r.times_us:
        parts += [Text(""), Text(f"raw times, µs, in the order measured ({len(r.times_us)})", "bold"),
                  Text("  ".join(fmt_us(t) for t in r.times_us))]
    return Group(*parts)


def profile_renderable(ev):
    """Nsight Compute's reading of the configuration, against the run's own timing."""
    from kerntune.engine.profile import ProfileMetrics, consistency

    title = Text(printable(f"profiler (Nsight Compute{' ' + ev.tool if ev.tool else ''})"), "bold")
    if not ev.ok:
        return Group(title, Text(printable(f"not profiled: {ev.message}"), "yellow"))
    m = ProfileMetrics.from_dict(ev.metrics)
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="dim", no_wrap=True)
    grid.add_column(overflow="fold")
    grid.add_row("bound", Text(printable(m.bound), "bold"))
    grid.add_row("DRAM", f"{fmt_gbs(m.dram_gbs)} GB/s, {m.dram_pct:.1f}% of peak; {m.dram_bytes / 1e6:,.1f} MB in "
                 f"{fmt_us(m.duration_us)} µs")
    grid.add_row("throughput", f"memory {m.memory_pct:.1f}% · SM {m.sm_pct:.1f}% of peak")
    grid.add_row("occupancy", f"{m.achieved_occupancy_pct:.1f}% achieved of {m.theoretical_occupancy_pct:.1f}% "
                 "theoretical")
    grid.add_row("hit rates", f"L1 {m.l1_hit_pct:.1f}% · L2 {m.l2_hit_pct:.1f}%")
    grid.add_row("per block", f"{m.registers} registers/thread · {m.shared_bytes} B shared · {m.block_size} threads")
    if m.stalls:
        grid.add_row("warp stalls", Text(printable(" · ".join(f"{n.replace('_', ' ')} {v:.1f}" for n, v in m.stalls)
                     + f"  (cycles per issued instruction, of {m.cycles_per_issue:.1f})")))
    check = consistency(ev)
    if check:
        grid.add_row("against timing", Text(printable(check)))
    return Group(title, grid)


class DetailsScreen(ModalScreen[None]):
    """A configuration's record over the dashboard; escape closes it."""

    BINDINGS = [
        Binding("escape", "dismiss", "Close"),
        Binding("q", "dismiss", "Close", show=False),
        Binding("enter", "dismiss", "Close", show=False),
    ]

    def __init__(self, state: DashboardState, key: str) -> None:
        super().__init__()
        self.state = state
        self.key = key

    def compose(self) -> ComposeResult:
        r = self.state.entries[self.key].result
        with Vertical(id="details-box") as box:
            box.border_title = "Configuration"
            box.border_subtitle = "esc closes"
            if r.times_us:
                yield Sparkline(list(r.times_us), id="details-spark")
            with VerticalScroll(id="details-scroll"):
                yield Static(details_renderable(self.state, self.key), id="details-body")
