"""A screen of lines over the dashboard: a comparison of two rows, the Pareto front of time
against energy. The lines are plain text (nothing in them is read as markup)."""

from __future__ import annotations

from typing import Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static


class LinesScreen(ModalScreen[None]):
    """Lines of text under a title; escape, q or enter closes it."""

    BINDINGS = [
        Binding("escape", "dismiss", "Close"),
        Binding("q", "dismiss", "Close", show=False),
        Binding("enter", "dismiss", "Close", show=False),
    ]

    def __init__(self, title: str, lines: Sequence[str]) -> None:
        super().__init__()
        self.title_text = title
        self.lines = list(lines)

    def compose(self) -> ComposeResult:
        with Vertical(id="help-box") as box:
            box.border_title = self.title_text
            box.border_subtitle = "esc closes"
            with VerticalScroll():
                yield Static(Text("\n".join(self.lines), no_wrap=True, overflow="fold"), id="lines-body")
