"""What the rewrite tests share: a source's tokens once the C preprocessor has run."""

from __future__ import annotations

import re
import subprocess


def preprocessed(source: str, defines: dict[str, int]) -> list[str]:
    """The tokens the C preprocessor makes of a source (no includes, comments dropped)."""
    flags = [f"-D{k}={v}" for k, v in defines.items()]
    out = subprocess.run(["cpp", "-P", "-undef", "-nostdinc", *flags], input=source, capture_output=True, text=True,
                         check=True).stdout
    return re.findall(r"[A-Za-z_]\w*|\d[\w.]*|\S", out)
