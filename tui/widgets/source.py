"""A configuration's generated source over the dashboard: scroll it, save it as a file."""

from __future__ import annotations

from pathlib import Path

from rich.syntax import Syntax
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static
from rich.text import Text

from ..terminal import printable, printable_source

from ..export import ExportError, write_file
from .prompt import PathPrompt


class SourceScreen(ModalScreen[Path | None]):
    """The source of one configuration; `s` asks where to save it, escape closes."""

    BINDINGS = [
        Binding("escape", "dismiss", "Close"),
        Binding("q", "dismiss", "Close", show=False),
        Binding("v", "dismiss", "Close", show=False),
        Binding("s", "save", "Save as a file"),
    ]

    def __init__(self, title: str, source: str, backend: str, default_path: Path) -> None:
        super().__init__()
        self.title_text = title
        self.source = source
        self.backend = backend
        self.default_path = default_path

    def compose(self) -> ComposeResult:
        lexer = "cuda" if self.backend == "cuda" else "c"
        with Vertical(id="source-box") as box:
            box.border_title = Text(printable(self.title_text))
            box.border_subtitle = "s saves · esc closes"
            with VerticalScroll(id="source-scroll"):
                yield Static(Syntax(printable_source(self.source), lexer, theme="ansi_dark", background_color="default",
                                    word_wrap=False), id="source-body")

    def on_mount(self) -> None:
        self.query_one("#source-scroll").focus()

    def action_save(self) -> None:
        self.app.push_screen(PathPrompt("Save the configuration's source", self.default_path), self._write)

    def _write(self, path: Path | None) -> None:
        if path is None:
            return
        try:
            written = write_file(path, self.source, force=True)  # the prompt asked before an overwrite
        except (ExportError, OSError) as e:
            self.app.notify(str(e), title="Not saved", severity="error")
            return
        self.app.notify(f"Wrote {written}")
