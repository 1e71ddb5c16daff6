"""The plan panel: the engine's notes (and, once agents land, their plans) as they stream."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.widgets import RichLog

from ..state import DashboardState, LogLine

_STYLES = {"note": "", "info": "dim", "best": "green", "good": "green", "warn": "yellow", "error": "bold red"}


def log_text(line: LogLine) -> Text:
    """The line's words, with the source named when it is not the engine."""
    out = Text()
    if line.speaker:
        out.append(f"{line.speaker}: ", "bold")
    out.append(line.text, _STYLES.get(line.kind, ""))
    return out


def log_row(line: LogLine) -> Table:
    """`  12.3s  text`, the text wrapping under itself rather than under the time."""
    row = Table.grid(padding=(0, 1), expand=True)
    row.add_column(width=7, justify="right", style="dim", no_wrap=True)
    row.add_column(ratio=1)
    row.add_row(f"{line.t:.1f}s", log_text(line))
    return row


class PlanPanel(RichLog):
    """Appends the log lines it has not shown yet; a log that got shorter (a restart) starts over."""

    def __init__(self, state: DashboardState, *, id: str | None = None) -> None:
        # min_width=1: lines wrap at the panel's width, whatever it is.
        super().__init__(id=id, wrap=True, markup=False, highlight=False, auto_scroll=True, min_width=1)
        self.state = state
        self._shown = 0
        self._width = 0

    def show(self) -> None:
        log = self.state.log
        if len(log) < self._shown:
            self.clear()
            self._shown = 0
        for line in log[self._shown:]:
            self.write(log_row(line))
        self._shown = len(log)

    def on_resize(self, event) -> None:
        # Written lines keep the width they were wrapped at: wrap them again for the new one.
        if event.size.width != self._width:
            self._width = event.size.width
            self.clear()
            self._shown = 0
            self.show()
