"""The leaderboard's columns, once: what each takes from a result, its header, how the dashboard
and the text mode write it, how it sorts and filters, and which the dashboard drops first.

The dashboard's board, the text mode's table and `show --csv` read this table; the dashboard's
state sorts and filters by its values. Before these columns come the rank and the parameters,
which depend on the whole board rather than on one result. The device column is there only when
a session's results come from more than one device (`columns_for`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable

from kerntune.engine.result import Result

from .numbers import fmt_gbs, fmt_num, fmt_percent, fmt_ratio, fmt_us


def speedup_over(base_us: float | None, r: Result) -> float | None:
    """How many times faster than the default configuration's median time (None without either time)."""
    return base_us / r.median_us if base_us and r.median_us else None


def _plain(_value: Any) -> str:
    return ""


def _above(limit: float, style: str) -> Callable[[Any], str]:
    return lambda v: style if v is not None and v > limit else ""


def _whole_percent(v: float | None) -> str:
    return f"{100 * v:.0f}%" if v is not None else "-"


def _label(v: str | None) -> str:
    return v or "-"


_STATUS_STYLE = {"ok": "green", "suspect": "bold yellow"}


@dataclass(frozen=True)
class Column:
    """One figure of a result on the leaderboard."""

    key: str  # what sorts, filters and the board's view call it
    header: str  # the dashboard's header; text output writes µ as u
    value: Callable[[Result, float | None], Any]  # from a result and the default configuration's µs: sorts, filters, CSV
    screen: Callable[[Any], str]  # the dashboard's cell
    text: Callable[[Any], str] | None = None  # the text mode's cell; None: the text table leaves it out
    style: Callable[[Any], str] = _plain  # the dashboard cell's Rich style for a value
    name: str = ""  # the column in words, where the header abbreviates it
    csv: str = ""  # its CSV column (the value unrounded); "": not in the CSV
    right: bool = True  # numbers line up on the right
    drop: int = 0  # too narrow a dashboard drops 1 first, then 2, then 3; 0: always shown
    several_devices: bool = False  # shown only when the results come from more than one device
    energy: bool = False  # shown only when a result has its energy measured
    numeric: bool = True  # a filter compares it as a number (`sol>50`); else as words (`status=ok`)
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
           csv="spread", drop=4, percent=True),
    Column("gbs", "GB/s", lambda r, base: r.bandwidth_gbs, fmt_gbs, fmt_num, csv="bandwidth_gbs", drop=3,
           descending=True),
    # above 100 % a result beat its own bound: a warm cache or a broken measurement
    Column("sol", "% SOL", lambda r, base: r.sol_fraction, fmt_percent, fmt_percent, _above(1.0, "yellow"),
           csv="sol_fraction", descending=True, percent=True),
    Column("speedup", "speedup", lambda r, base: speedup_over(base, r), fmt_ratio, fmt_ratio, _above(1.0, "green"),
           csv="speedup", descending=True),
    Column("occ", "occ", lambda r, base: r.occupancy, _whole_percent, name="occupancy", drop=2, descending=True,
           percent=True, aliases=("occupancy",)),
    # joules per launch from NVML's energy counter (`--objective energy|edp`); only when measured
    Column("energy", "µJ", lambda r, base: None if r.energy_j is None else 1e6 * r.energy_j, fmt_num, fmt_num,
           csv="energy_uj", name="energy per launch", drop=3, energy=True, aliases=("uj",)),
    # which device measured it ("cuda:1", "host:port/cuda:0" on a cluster); with one device, nothing
    Column("device", "device", lambda r, base: r.device or None, _label, _label, csv="device",
           right=False, drop=1, several_devices=True, numeric=False),
    Column("status", "status", lambda r, base: r.status, str, str, lambda s: _STATUS_STYLE.get(s, "red"),
           csv="status", right=False, numeric=False),
)

COLUMN: dict[str, Column] = {c.key: c for c in COLUMNS}
# Every name a filter knows a column by.
FILTER_NAMES: dict[str, str] = {n: c.key for c in COLUMNS for n in (c.key, *c.aliases)}


def columns_for(several_devices: bool, energy: bool = False) -> tuple[Column, ...]:
    """The columns of a session's board: the device column only when its results come from more
    than one device, the energy column only when energy was measured, so that a one-device
    session timed for speed reads as it always has."""
    return tuple(c for c in COLUMNS if (several_devices or not c.several_devices) and (energy or not c.energy))


def optional(columns: tuple[Column, ...]) -> tuple[str, ...]:
    """The keys of the columns too narrow a dashboard drops, first dropped first."""
    return tuple(c.key for c in sorted((c for c in columns if c.drop), key=lambda c: c.drop))


def text_columns(several_devices: bool = False, energy: bool = False) -> tuple[Column, ...]:
    """The text mode's table."""
    return tuple(c for c in columns_for(several_devices, energy) if c.text is not None)


def csv_columns(several_devices: bool = False, energy: bool = False) -> tuple[Column, ...]:
    """The CSV's figures."""
    return tuple(c for c in columns_for(several_devices, energy) if c.csv)


def energy_measured(results: Iterable[Result]) -> bool:
    """Whether a result has its energy per launch."""
    return any(r.energy_j is not None for r in results)


def several_devices(results: Iterable[Result]) -> bool:
    """Whether results came from more than one device (each marks its own in runs over several)."""
    seen = set()
    for r in results:
        if r.device:
            seen.add(r.device)
            if len(seen) > 1:
                return True
    return False
