"""Text rendering of engine events, for terminals without the dashboard and for pipes.

The same events the dashboard shows, in the same words (tui/words.py): a progress line while a
run goes, then the leaderboard with the dashboard's columns (tui/columns.py).
"""

from __future__ import annotations

import csv
import io
import sys
import time
from typing import Any, Iterable, Mapping, TextIO

from rich.console import Console
from rich.table import Table
from rich.text import Text

from kerntune.engine.events import (
    Analysis,
    BestImproved,
    ConfigEvaluated,
    ConfigProfiled,
    Event,
    GateChecked,
    LeadersRetimed,
    PlanMade,
    RunStarted,
    SpaceBuilt,
)
from kerntune.engine.result import Result, config_key, ranked

from .columns import Column, csv_columns, energy_measured, several_devices, text_columns
from .numbers import fmt_num, fmt_speedup
from .terminal import clipped, printable, text_width

MESSAGE_CHARS = 2000  # of a message in the text table (a compile error's first lines)
from .words import describe, fmt_config, fmt_params, fmt_value, leaders_text, tie_marks  # noqa: F401 (fmt_config: the command line's too)


def tie_legend(leaders: LeadersRetimed | None) -> str:
    """The line under a leaderboard with marks: what they mean, and the verdict."""
    if leaders is None or not leaders.valid:
        return ""
    tied = " = tied with it;" if leaders.tied_with_chosen() else ""
    return f"* reported;{tied} {leaders_text(leaders)}"


def disturbed_legend(results: Iterable[Result]) -> str:
    """The line under a leaderboard whose ranked results include some measured during a
    disturbance (`~`): how many, and the first one's cause."""
    hit = [r for r in results if r.verified and r.disturbed]
    if not hit:
        return ""
    return (f"~ measured again and still disturbed ({len(hit)} configuration{'s' if len(hit) != 1 else ''}; "
            f"{fmt_params(hit[0].config)}: {hit[0].disturbed}): these times are less certain")


def _board_order(results: Iterable[Result], limit: int | None = None,
                failed: bool = False, marks: Mapping[str, str] | None = None) -> list[tuple[str, Result]]:
    """(rank, result) as the leaderboard lists them: ranked results fastest first (the first
    `limit`), then suspect ones (`!`), then with `failed` every unverified one (`x`); `marks`
    (tie_marks) follow a rank."""
    results = list(results)
    marks = marks or {}
    rows = [(f"{i + 1}{marks.get(config_key(r.config), '')}", r) for i, r in enumerate(ranked(results)[:limit])]
    rows += [("!", r) for r in results if r.status == "suspect"]
    if failed:
        rows += [("x", r) for r in results if not r.verified]
    return rows


def _base_us(default_result: Result | None) -> float | None:
    return default_result.median_us if default_result is not None and default_result.ranked else None


def leaderboard_rows(results: Iterable[Result], default_result: Result | None, limit: int = 15,
                     failed: bool = False, marks: Mapping[str, str] | None = None) -> list[list[str]]:
    """Rows of the leaderboard: ranked results fastest first, then suspect ones, then failures;
    with a device column when they come from more than one device (`headers` names the columns)."""
    results = list(results)
    base = _base_us(default_result)
    columns = text_columns(several_devices(results), energy_measured(results))
    return [_row(rank, r, base, columns) for rank, r in _board_order(results, limit, failed, marks)]


def headers(several: bool = False, energy: bool = False) -> list[str]:
    """The text table's headers: the rank, the parameters, then the columns (tui/columns.py)."""
    return ["#", "parameters", *(c.text_header for c in text_columns(several, energy))]


def _row(rank: str, r: Result, base: float | None, columns: tuple[Column, ...]) -> list[str]:
    cells = [rank, fmt_params(r.config)]
    for c in columns:
        cell = c.text(c.value(r, base))  # type: ignore[misc]
        if c.key == "status" and r.message and not r.verified:  # no message column: it follows the status
            cell = f"{cell}: {clipped(r.message, MESSAGE_CHARS)}"
        elif c.key == "status" and r.disturbed:  # measured again and still disturbed: said, not hidden
            cell = f"{cell} ~"
        cells.append(cell)
    return cells


HEADERS = headers()  # a one-device session's
_LEFT = {"parameters"} | {c.text_header for c in text_columns(True) if not c.right}


def leaderboard_csv(results: Iterable[Result], default_result: Result | None, failed: bool = False) -> str:
    """Every ranked result (then suspect ones, and failures with `failed`) as CSV: one row per
    configuration, its figures as recorded (microseconds, GB/s, fractions), not rounded; the
    device that measured each when they come from more than one."""
    results = list(results)
    names = list(dict.fromkeys(k for r in results for k in r.config))
    columns = csv_columns(several_devices(results), energy_measured(results))
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    # names, values and messages from the session: printable here too (a CSV file gets printed)
    w.writerow(["rank", "label", *map(printable, names), *(c.csv for c in columns), "message"])
    base = _base_us(default_result)

    def cell(v: Any) -> str:
        return "" if v is None else fmt_value(v)

    for rank, r in _board_order(results, failed=failed):
        w.writerow([rank, "" if r.config else "original", *(cell(r.config.get(n)) for n in names),
                    *(cell(c.value(r, base)) for c in columns), printable(r.message)])
    return out.getvalue()


def leaderboard_table(results: Iterable[Result], default_result: Result | None, title: str = "",
                      limit: int = 15, failed: bool = False, marks: Mapping[str, str] | None = None) -> Table:
    results = list(results)
    table = Table(title=_cell(title) if title else None, title_justify="left", header_style="bold")
    for h in headers(several_devices(results), energy_measured(results)):
        table.add_column(h, justify="left" if h in _LEFT else "right", overflow="fold")
    for row in leaderboard_rows(results, default_result, limit, failed, marks):
        table.add_row(*map(_cell, row))
    return table


def _cell(text: object) -> Text:
    """A table cell: printable (tui/terminal.py), never read as Rich markup (a session's
    message can hold `[link=...]`)."""
    return Text(printable(text))


# What text output leaves to the progress line (the best so far) and to the dashboard and the
# session file: plans, analyses, profiles and accepted templates (the run that follows says so).
_QUIET = (BestImproved, PlanMade, Analysis, ConfigProfiled)


class TextRenderer:
    """An event sink that prints a run as text: a progress bar on a terminal, lines in a pipe."""

    def __init__(self, out: TextIO | None = None, verbose: bool = False):
        self.out = out or sys.stdout
        self.tty = self.out.isatty()
        self.console = Console(file=self.out, highlight=False, soft_wrap=False,
                               width=text_width())
        self.verbose = verbose
        self.results: list[Result] = []
        self.default_result: Result | None = None
        self.default_key: str | None = None
        self.feasible = 0
        self.resumed = 0  # results of an earlier run of a resumed session: the count goes on from there
        self.best: Result | None = None
        self.leaders: LeadersRetimed | None = None  # the paired re-timing's verdict, once there is one
        self._t0 = time.monotonic()
        self._line = False

    def __call__(self, ev: Event) -> None:
        if isinstance(ev, RunStarted):
            self.resumed = ev.resumed
        elif isinstance(ev, SpaceBuilt):
            self.feasible = ev.feasible
        elif isinstance(ev, ConfigEvaluated) and ev.replaces:  # demoted by a later check
            r = ev.result
            self.results = [r if x.config == r.config else x for x in self.results]
            if self.best is not None and self.best.config == r.config:
                self.best = None
        elif isinstance(ev, ConfigEvaluated):
            r = ev.result
            self.results.append(r)
            if self.default_key is not None and config_key(r.config) == self.default_key:
                self.default_result = r
            if not self.tty:
                msg = f" {r.message}" if r.message and not r.ranked else ""
                # a run over several devices marks each result with the one that measured it
                where = f" {r.device}" if r.device else ""
                self._print(f"[{self.resumed + len(self.results):>4}/{self.feasible}{where}] {fmt_params(r.config)}: "
                            f"{r.status} {fmt_num(r.median_us)} us{msg}")
            else:
                self._progress()
        elif isinstance(ev, BestImproved):
            self.best = next((r for r in reversed(self.results) if r.config == ev.config), self.best)
        elif isinstance(ev, LeadersRetimed):
            self.leaders = ev
        words = describe(ev)
        if words is not None and not isinstance(ev, _QUIET) and not (isinstance(ev, GateChecked) and ev.ok):
            self._print(words.line())

    def set_default(self, config: Mapping[str, Any]) -> None:
        self.default_key = config_key(config)

    def _progress(self) -> None:
        n, total = self.resumed + len(self.results), max(self.feasible, 1)
        width = 24
        filled = int(width * min(n, total) / total)
        rate = len(self.results) / max(time.monotonic() - self._t0, 1e-6)
        best = f"best {fmt_num(self.best.median_us)} us" if self.best and self.best.median_us else "best -"
        failed = sum(1 for r in self.results if not r.verified)
        line = (f"\r[{'#' * filled}{'.' * (width - filled)}] {n}/{self.feasible}  {rate:.1f}/s  {best}"
                f"  failed {failed}")
        self.out.write(line)
        self.out.flush()
        self._line = True

    def _print(self, text: str) -> None:
        if self._line:
            self.out.write("\n")
            self._line = False
        # wrapped at the width, words kept whole; names, statuses and messages from files printable
        self.console.print(printable(text), markup=False, soft_wrap=False, emoji=False)

    def finish(self, title: str = "", show_failed: bool = False) -> None:
        if self._line:
            self.out.write("\n")
            self._line = False
        self.console.print(leaderboard_table(self.results, self.default_result, title, failed=show_failed,
                                             marks=tie_marks(self.leaders)))
        for legend in (tie_legend(self.leaders), disturbed_legend(self.results)):
            if legend:
                self.console.print(printable(legend), markup=False, emoji=False)


# campaigns and served sizes (engine/campaign.py): the summary it writes, as a table --------------

CAMPAIGN_HEADERS = ["template", "size", "original us", "best us", "best", "general us", "general", "dispatch",
                    "status"]


def campaign_table(summary: Mapping[str, Any], title: str = "") -> Table:
    """One row per (template, size): the original's time, the size's best with its speedup, and
    the template's general configuration's time there with its speedup."""
    general = {(g.get("template"), s.get("size")): s for g in summary.get("general", []) for s in g.get("size", [])}
    dispatch = {(d.get("template"), s.get("size")): s for d in summary.get("dispatch", []) for s in d.get("size", [])}
    table = Table(title=_cell(title) if title else None, title_justify="left", header_style="bold")
    for h in CAMPAIGN_HEADERS:
        table.add_column(h, justify="left" if h in ("template", "size", "status") else "right", overflow="fold")
    for p in summary.get("pair", []):
        g = general.get((p.get("template"), p.get("size")), {})
        orig = p.get("original_us")
        status = p.get("status", "")
        if p.get("error"):
            status = f"{status}: {p['error']}"
        table.add_row(*map(_cell, (p.get("template", ""), p.get("size", ""), fmt_num(orig), fmt_num(p.get("best_us")),
                                    fmt_speedup(orig, p.get("best_us")), fmt_num(g.get("general_us")),
                                    fmt_speedup(orig, g.get("general_us")),
                                    fmt_speedup(orig, dispatch.get((p.get("template"), p.get("size")), {}).get("time_us")),
                                    status)))
    return table


def campaign_lines(summary: Mapping[str, Any]) -> list[str]:
    """Below the table: each template's general configuration and each size's best, in words,
    with every place a reported configuration is slower than the original."""
    from .numbers import fmt_ratio

    lines = []
    for g in summary.get("general", []):
        name = g.get("template", "")
        config = g.get("config")
        sizes = g.get("size", [])
        if config is None:
            lines.append(f"{name}: no general configuration")
        else:
            lines.append(f"{name}: general configuration {fmt_params(config)}, {fmt_ratio(g.get('geomean_speedup'))} "
                         f"the original (geometric mean over {len(sizes)} size{'s' if len(sizes) != 1 else ''})")
        for s in sizes:
            if s.get("best_us") is not None:
                orig = (f"original {fmt_num(s['original_us'])} us" if s.get("original_us") is not None
                        else "the original was not verified at this size")
                lines.append(f"    best at {s.get('size')}: {fmt_params(s.get('best_config', {}))} "
                             f"({fmt_num(s['best_us'])} us, {orig})")
        lines.extend(f"    note: {n}" for n in g.get("notes", []))
    for d in summary.get("dispatch", []):
        lines += dispatch_lines(d)
    return lines


def dispatch_lines(d: Mapping[str, Any]) -> list[str]:
    """A template's dispatch set in words: its configurations and the sizes each serves, and what
    it gains over the general configuration."""
    from .numbers import fmt_ratio

    members = d.get("configs", [])
    head = (f"{d.get('template', '')}: dispatch set of {len(members)} configuration{'s' if len(members) != 1 else ''}"
            f", every size within {100 * float(d.get('tolerance', 0)):.0f}% of its own best and no slower than the "
            f"original: {fmt_ratio(d.get('geomean_speedup'))} the original (geometric mean)")
    if d.get("general_geomean_speedup") is not None:
        head += f" against {fmt_ratio(d.get('general_geomean_speedup'))} for one general configuration"
    lines = [head]
    for m in members:
        lines.append(f"    {fmt_params(m.get('config', {}))} for {', '.join(m.get('covers', []))}")
    for s in d.get("size", []):
        orig = f", original {fmt_num(s['original_us'])} us" if s.get("original_us") is not None else ""
        gen = f", general {fmt_num(s['general_us'])} us" if s.get("general_us") is not None else ""
        lines.append(f"    at {s.get('size')}: {fmt_num(s.get('time_us'))} us (its best {fmt_num(s.get('best_us'))} us"
                     f"{orig}{gen})")
    lines.extend(f"    note: {n}" for n in d.get("notes", []))
    return lines


def print_campaign(summary: Mapping[str, Any], out: TextIO | None = None, title: str = "") -> None:
    """The table and the lines, wrapped at the text width."""
    console = Console(file=out or sys.stdout, highlight=False, soft_wrap=False, width=text_width())
    console.print(campaign_table(summary, title))
    for line in campaign_lines(summary):
        console.print(printable(line), markup=False, emoji=False)
