"""What of a string from a file may reach a terminal: `printable`, the one function every
command, the dashboard and the engine's own text lines (engine/contrast.py, engine/energy.py)
write names, values and messages through.

A session, a spec or a kernel's source is data: its control characters are written as escapes
(`\\x1b`, `\\x9b`, `\\u202e`), so no file can set the window title, write the clipboard (OSC 52),
draw a hyperlink, clear the screen, ring the bell, rewrite a line with `\\r` or reorder what
follows it. One regular expression over the text (no per-character Python): a 30 MB string
costs what reading it does.
"""

from __future__ import annotations

import functools
import re
from typing import Any

# Control characters (C0, DEL, C1), Unicode's line and paragraph separators, and the format
# characters that reorder or hide what follows them (bidirectional embeddings, overrides,
# isolates and marks, zero-width spaces and joiners, invisible operators, the byte-order mark,
# interlinear annotations): a terminal acts on each, or shows text in an order or a shape
# that is not its own.
CONTROLS = ("\x00-\x1f\x7f-\x9f\u2028\u2029\u061c\u200b-\u200f\u202a-\u202e\u2060-\u206f\ufeff"
            "\ufff9-\ufffb")


@functools.lru_cache(maxsize=8)
def control_pattern(keep: str = "") -> re.Pattern[str]:
    """A pattern matching one control character, but those in `keep`."""
    kept = "".join(re.escape(c) for c in keep)
    return re.compile(f"(?![{kept}])[{CONTROLS}]" if kept else f"[{CONTROLS}]")


def escape_match(match: re.Match[str]) -> str:
    """A matched control character as its escape: `\\x1b` below 256, `\\u202e` above."""
    c = ord(match.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def printable(text: Any, keep: str = "") -> str:
    """`text` with every control character written as an escape (`\\x1b`, `\\u202e`), but for
    the ones in `keep` (`"\\n\\t"` for a kernel's source shown whole). One line by default."""
    s = text if isinstance(text, str) else str(text)
    return control_pattern(keep).sub(escape_match, s)
