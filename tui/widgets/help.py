"""The help screen: every key and what it does, from the dashboard's one table of actions."""

from __future__ import annotations

from typing import Sequence

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static


def help_table(rows: Sequence[tuple[str, str, str]]) -> Table:
    """Rows of (group, keys, description) as a table, a heading per group."""
    table = Table.grid(padding=(0, 2))
    table.add_column(no_wrap=True, style="bold")
    table.add_column(overflow="fold")
    group = None
    for g, keys, text in rows:
        if g != group:
            if group is not None:
                table.add_row("", "")
            table.add_row(Text(g, style="bold underline"), "")
            group = g
        table.add_row(keys, text)
    return table


class HelpScreen(ModalScreen[None]):
    """Lists the keys; escape, q or ? closes it."""

    BINDINGS = [
        Binding("escape", "dismiss", "Close"),
        Binding("q", "dismiss", "Close", show=False),
        Binding("question_mark", "dismiss", "Close", show=False),
        Binding("f1", "dismiss", "Close", show=False),
    ]

    def __init__(self, rows: Sequence[tuple[str, str, str]]) -> None:
        super().__init__()
        self.rows = list(rows)

    def compose(self) -> ComposeResult:
        with Vertical(id="help-box") as box:
            box.border_title = "Keys"
            box.border_subtitle = "ctrl+p: every action by name · esc closes"
            with VerticalScroll():
                yield Static(help_table(self.rows), id="help-body")
