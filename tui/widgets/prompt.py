"""A one-line question for a file path (save a copy, export), answered with enter or escape.

A path naming a file that exists is not taken at once: the prompt says so, and only a second
enter on the same path overwrites it."""

from __future__ import annotations

from pathlib import Path

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static
from rich.text import Text

from ..terminal import printable


class PathPrompt(ModalScreen[Path | None]):
    """Asks for a path, offering a default; dismisses with the path, or None on escape."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, title: str, default: Path) -> None:
        super().__init__()
        self.title_text = title
        self.default = default
        self._confirmed: Path | None = None  # an existing file the user was warned about

    def compose(self) -> ComposeResult:
        with Vertical(id="prompt-box") as box:
            box.border_title = Text(printable(self.title_text))
            box.border_subtitle = "enter writes · esc cancels"
            yield Static("Path:", id="prompt-label")
            yield Input(str(self.default), id="prompt-input")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        value = event.value.strip()
        if not value:
            self.dismiss(None)
            return
        path = Path(value)
        if path.expanduser().is_file() and path != self._confirmed:
            self._confirmed = path
            self.query_one("#prompt-label", Static).update(
                Text(f"{printable(path)} exists. Enter again to overwrite it, or change the name:"))
            return
        self.dismiss(path)

    def action_cancel(self) -> None:
        self.dismiss(None)
