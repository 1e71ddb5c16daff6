"""The leaderboard's columns, once: what each takes from a result, its header, how the dashboard
and the text mode write it, how it sorts and filters, and which the dashboard drops first.

The dashboard's board, the text mode's table and `show --csv` read this table; the dashboard's
state sorts and filters by its values. Before these columns come the rank and the parameters,
which depend on the whole board rather than on one result.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from kerntune.engine.result import Result

from .numbers import fmt_gbs, fmt_num, fmt_percent, fmt_ratio, fmt_us


def speedup_over(base_us: float | None, r: Result) -> float | None:
    """How many times faster than the baseline's median time (None without either time)."""
    return base_us / r.median_us if base_us and r.median_us else None


def _plain(_value: Any) -> str:
    return ""


def _above(limit: float, style: str) -> Callable[[Any], str]:
    return lambda v: style if v is not None and v > limit else ""


def _whole_percent(v: float | None) -> str:
    return f"{100 * v:.0f}%" if v is not None else "-"


_STATUS_STYLE = {"ok": "green", "suspect": "bold yellow"}


@dataclass(frozen=True)
class Column:
    """One figure of a result on the leaderboard."""

    key: str  # what sorts, filters and the board's view call it
    header: str  # the dashboard's header; text output writes µ as u
    value: Callable[[Result, float | None], Any]  # from a result and the baseline's µs: sorts, filters, CSV
    screen: Callable[[Any], str]  # the dashboard's cell
    text: Callable[[Any], str] | None = None  # the text mode's cell; None: the text table leaves it out
    style: Callable[[Any], str] = _plain  # the dashboard cell's Rich style for a value
    name: str = ""  # the column in words, where the header abbreviates it
    csv: str = ""  # its CSV column (the value unrounded); "": not in the CSV
    right: bool = True  # numbers line up on the right
    drop: int = 0  # too narrow a dashboard drops 1 first, then 2, then 3; 0: always shown
    descending: bool = False  # bigger is better: the first sort by it puts the largest first
    percent: bool = False  # a fraction shown as a percentage: filters compare percentages (`sol>50`)
    aliases: tuple[str, ...] = ()  # other names a filter knows it by

    @property
    def text_header(self) -> str:
        return self.header.replace("µ", "u")

    @property
    def title(self) -> str:
        """The column as people read it: `occ` is occupancy."""
        return self.name or self.header


COLUMNS: tuple[Column, ...] = (
    Column("median", "median µs", lambda r, base: r.median_us, fmt_us, fmt_num, csv="median_us", aliases=("us",)),
    # a spread over 25 % of the median is noise worth a look
    Column("spread", "spread", lambda r, base: r.spread, fmt_percent, fmt_percent, _above(0.25, "yellow"),
           csv="spread", drop=3, percent=True),
    Column("gbs", "GB/s", lambda r, base: r.bandwidth_gbs, fmt_gbs, fmt_num, csv="bandwidth_gbs", drop=2,
           descending=True),
    # above 100 % a result beat its own bound: a warm cache or a broken measurement
    Column("sol", "% SOL", lambda r, base: r.sol_fraction, fmt_percent, fmt_percent, _above(1.0, "yellow"),
           csv="sol_fraction", descending=True, percent=True),
    Column("speedup", "speedup", lambda r, base: speedup_over(base, r), fmt_ratio, fmt_ratio, _above(1.0, "green"),
           csv="speedup", descending=True),
    Column("occ", "occ", lambda r, base: r.occupancy, _whole_percent, name="occupancy", drop=1, descending=True,
           percent=True, aliases=("occupancy",)),
    Column("status", "status", lambda r, base: r.status, str, str, lambda s: _STATUS_STYLE.get(s, "red"),
           csv="status", right=False),
)

COLUMN: dict[str, Column] = {c.key: c for c in COLUMNS}
# The columns too narrow a dashboard drops, first dropped first.
OPTIONAL: tuple[str, ...] = tuple(c.key for c in sorted((c for c in COLUMNS if c.drop), key=lambda c: c.drop))
# The text mode's table and the CSV.
TEXT_COLUMNS: tuple[Column, ...] = tuple(c for c in COLUMNS if c.text is not None)
CSV_COLUMNS: tuple[Column, ...] = tuple(c for c in COLUMNS if c.csv)
# Every name a filter knows a column by.
FILTER_NAMES: dict[str, str] = {n: c.key for c in COLUMNS for n in (c.key, *c.aliases)}
