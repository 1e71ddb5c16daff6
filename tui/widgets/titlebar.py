"""The top line: what is being tuned where, and the state of the run or the replay."""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget

from ..state import DashboardState
from ..terminal import printable
from ..words import fmt_config


def run_title(state: DashboardState) -> str:
    """`template · problem · device (backend)`, from the events or the header, whichever is known."""
    started = state.started
    template = started.template if started else str(state.template.get("name", ""))
    if started is not None:
        problem = fmt_config(started.problem)
        device, backend = started.device, started.backend
    else:
        p = state.space.get("problem")
        problem = fmt_config(p) if isinstance(p, dict) else ""
        device = str(state.device.get("name", ""))
        backend = str(state.device.get("backend", state.template.get("backend", "")))
    parts = [x for x in (template, problem) if x]
    if device:
        parts.append(f"{device} ({backend})" if backend else device)
    return printable(" · ".join(parts)) or "waiting for the run to start"


class TitleBar(Widget):
    """One line: `kerntune` and the run's title on the left, its state on the right."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._title = ""
        self._status = Text()

    def show(self, state: DashboardState, status: Text) -> None:
        title = run_title(state)
        if title != self._title or status != self._status:
            self._title, self._status = title, status
            self.refresh()

    def render(self) -> Text:
        width = max(self.size.width, 20)
        status = self._status
        left = Text.assemble(("kerntune ", "bold"), self._title)
        room = width - status.cell_len - 1
        if left.cell_len > room:
            left.truncate(max(room, 1), overflow="ellipsis")
        gap = max(1, width - left.cell_len - status.cell_len)
        return Text.assemble(left, " " * gap, status, no_wrap=True)
