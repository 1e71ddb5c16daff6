"""The template diff: the original kernel against the template, syntax-coloured, unified or side by side.

Added and removed lines carry `+` and `-` as well as a tint, so the diff reads without colour.
"""

from __future__ import annotations

import difflib
from typing import Any, Mapping

from rich.console import Group, RenderableType
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text
from textual.containers import ScrollableContainer
from textual.widgets import Static

from ..terminal import printable_source

ADDED = "on #15301f"
REMOVED = "on #3a1a1f"
MODES = ("unified", "split")


def _lines(code: str, lexer: str) -> list[Text]:
    """Each source line, highlighted as code (the lexer sees the whole file, so comments span)."""
    if not code:
        return []
    code = printable_source(code)  # a file's text: its control characters escaped (tui/terminal.py)
    text = Syntax(code, lexer, theme="ansi_dark").highlight(code)
    lines = text.split("\n", allow_blank=True)
    if lines and not lines[-1].plain and code.endswith("\n"):
        lines = lines[:-1]
    return lines


def lexer_for(backend: Any) -> str:
    """Pygments has a CUDA lexer and none for OpenCL C, which the C lexer reads well enough."""
    return "cuda" if backend == "cuda" else "c"


def unified(original: str, source: str, lexer: str = "c", context: int = 3) -> RenderableType:
    """A unified diff with hunk headers; each line highlighted as code and tinted by its change."""
    old, new = _lines(original, lexer), _lines(source, lexer)
    a, b = [t.plain for t in old], [t.plain for t in new]
    out: list[Text] = [Text("--- original kernel", "bold red"), Text("+++ template", "bold green")]
    # (no_wrap: a wrapped line of a diff reads as two lines)
    for group in difflib.SequenceMatcher(None, a, b, autojunk=False).get_grouped_opcodes(context):
        i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
        out.append(Text(f"@@ -{i1 + 1},{i2 - i1} +{j1 + 1},{j2 - j1} @@", "cyan"))
        for tag, x1, x2, y1, y2 in group:
            if tag == "equal":
                out += [Text.assemble("  ", old[i], no_wrap=True) for i in range(x1, x2)]
                continue
            for i in range(x1, x2):
                out.append(_marked("-", old[i], "bold red", REMOVED))
            for j in range(y1, y2):
                out.append(_marked("+", new[j], "bold green", ADDED))
    return Group(*out)


def _marked(mark: str, line: Text, mark_style: str, tint: str, wrap: bool = False) -> Text:
    t = Text.assemble((mark + " ", mark_style), line, no_wrap=not wrap)
    t.stylize(tint)
    return t


def side_by_side(original: str, source: str, lexer: str = "c") -> RenderableType:
    """Original on the left, template on the right, changed lines paired and tinted."""
    old, new = _lines(original, lexer), _lines(source, lexer)
    a, b = [t.plain for t in old], [t.plain for t in new]
    table = Table(expand=True, box=None, padding=(0, 1), show_edge=False, pad_edge=False)
    table.add_column("", justify="right", style="dim", no_wrap=True)
    table.add_column("original kernel", ratio=1, overflow="fold")
    table.add_column("", justify="right", style="dim", no_wrap=True)
    table.add_column("template", ratio=1, overflow="fold")
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        for k in range(max(i2 - i1, j2 - j1)):
            i, j = i1 + k, j1 + k
            left = old[i] if i < i2 else None
            right = new[j] if j < j2 else None
            if tag != "equal":
                left = _marked("-", left, "bold red", REMOVED, wrap=True) if left is not None else None
                right = _marked("+", right, "bold green", ADDED, wrap=True) if right is not None else None
            else:
                left, right = Text.assemble("  ", left), Text.assemble("  ", right)
            table.add_row(str(i + 1) if left is not None else "", left or "",
                          str(j + 1) if right is not None else "", right or "")
    return table


def diff_renderable(template: Mapping[str, Any], mode: str) -> RenderableType:
    """The panel's contents for a session's [template] table."""
    source = template.get("source")
    original = template.get("original_source", source)
    if not isinstance(source, str) or not isinstance(original, str):
        return Text("waiting for the template", style="dim")
    lexer = lexer_for(template.get("backend"))
    if original == source:
        return Group(
            Text("The template is the original kernel: nothing has been rewritten.", style="italic"),
            Text(""),
            Group(*[Text.assemble("  ", line, no_wrap=True) for line in _lines(source, lexer)]),
        )
    return side_by_side(original, source, lexer) if mode == "split" else unified(original, source, lexer)


def diff_counts(template: Mapping[str, Any]) -> tuple[int, int]:
    """Lines added and removed between the original kernel and the template."""
    source, original = template.get("source"), template.get("original_source", template.get("source"))
    if not isinstance(source, str) or not isinstance(original, str):
        return 0, 0
    added = removed = 0
    for line in difflib.unified_diff(original.splitlines(), source.splitlines(), lineterm="", n=0):
        if line.startswith("+") and not line.startswith("+++"):
            added += 1
        elif line.startswith("-") and not line.startswith("---"):
            removed += 1
    return added, removed


class DiffPanel(ScrollableContainer):
    """Shows the diff in the current mode; the sources are rendered again only when they change."""

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.mode = "unified"
        self._key: tuple | None = None

    def compose(self):
        yield Static(id="diff-body")

    def show(self, template: Mapping[str, Any]) -> None:
        key = (template.get("source"), template.get("original_source"), template.get("backend"), self.mode)
        if key == self._key:
            return
        self._key = key
        # Unified lines are not wrapped (a wrapped diff line reads as two): the panel scrolls sideways.
        self.set_class(self.mode == "unified", "-unified")
        self.query_one("#diff-body", Static).update(diff_renderable(template, self.mode))

    def toggle(self, template: Mapping[str, Any]) -> str:
        self.mode = MODES[(MODES.index(self.mode) + 1) % len(MODES)]
        self.show(template)
        return self.mode
