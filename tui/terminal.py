"""Whether this process can show the full-screen dashboard, or prints text instead, and how wide
its text may be."""

from __future__ import annotations

import os
import shutil
import sys
from typing import TextIO


def dashboard_possible(stream: TextIO | None = None) -> bool:
    """True on a terminal that can draw the dashboard: output to a terminal, TERM not `dumb`,
    and neither `KERNTUNE_HEADLESS` set. Pipes, batch jobs and dumb terminals get text mode."""
    out = sys.stdout if stream is None else stream
    try:
        tty = out.isatty()
    except (AttributeError, ValueError):
        tty = False
    if not tty or os.environ.get("KERNTUNE_HEADLESS") is not None:
        return False
    return os.environ.get("TERM", "").strip().lower() not in ("dumb", "unknown")


def text_width() -> int:
    """The width text output wraps at: `COLUMNS` when set, else the terminal's, else 120."""
    return max(shutil.get_terminal_size((120, 24)).columns, 40)
