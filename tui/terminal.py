"""Whether this process can show the full-screen dashboard, or prints text instead, how wide
its text may be, and what of a string may reach the terminal.

Every string read from a file (a session, a spec, a campaign summary, a kernel's source) is
data: before it is printed, `printable` (engine/printable.py, the engine's text lines use it
too) writes its control characters as escapes (`\\x1b`), so
no file can set the window title, write the clipboard (OSC 52), draw a hyperlink, clear the
screen, ring the bell or rewrite a line with `\\r`. The command line's output streams are
guarded too (`guarded_output`): what a command prints passes the same function, keeping only
line breaks, tabs, the progress line's `\\r` and, on a terminal, the colour sequences the text
tables draw themselves.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sys
from typing import Iterator, TextIO

from kerntune.engine.printable import control_pattern, escape_match, printable

# A colour or weight (SGR: ESC [ digits m) is the only sequence the text tables write themselves.
_SGR = "\x1b\\[[0-9;:]*m"


def printable_source(text: str) -> str:
    """A file's text shown as lines (a kernel's source): its line breaks (Windows' too) and tabs
    kept, every other control character escaped."""
    return printable(text.replace("\r\n", "\n"), keep="\n\t")


def clipped(text: str, limit: int) -> str:
    """At most `limit` characters of a message, saying how many were left out (a session may hold
    a megabyte in one; a table of it would take seconds to lay out)."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit} more characters; `show --json` has them all)"


class GuardedStream:
    """A text stream that escapes, as `printable` does, every control character written to it
    but line breaks, tabs and `\\r`; on a terminal it lets through the colour sequences (SGR)
    the text tables draw. The command line wraps stdout and stderr in it while a command runs."""

    def __init__(self, raw: TextIO):
        self.raw = raw
        try:
            tty = raw.isatty()
        except (AttributeError, ValueError):
            tty = False
        keep = "\n\r\t"
        self._pattern = re.compile(f"({_SGR})|{control_pattern(keep).pattern}") if tty else control_pattern(keep)

    def write(self, s: str) -> int:
        self.raw.write(self._pattern.sub(_keep_sgr, s))
        return len(s)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str):  # flush, isatty, fileno, encoding, errors, buffer, ...
        return getattr(self.raw, name)


def _keep_sgr(match: re.Match[str]) -> str:
    if match.lastindex:  # the colour sequence's group
        return match.group()
    return escape_match(match)


@contextlib.contextmanager
def guarded_output() -> Iterator[None]:
    """While a command runs, what it prints to stdout and stderr reaches the terminal escaped
    (GuardedStream); the streams are put back after."""
    before = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = GuardedStream(sys.stdout), GuardedStream(sys.stderr)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = before


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
