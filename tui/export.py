"""Files the dashboard writes: the best configuration as a C header or JSON, a copy of the session.

Everything written comes from a session, which may come from anywhere: names and values go into
the header only when they are plain C tokens, and text goes into comments only with `*/` broken.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any, Mapping

from .state import DashboardState

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TOKEN = re.compile(r"^[A-Za-z0-9_.+\-]+$")


class ExportError(ValueError):
    """Nothing to export yet, or a value that cannot be written as asked."""


def _best(state: DashboardState):
    best = state.best
    if best is None:
        raise ExportError("no verified configuration yet: nothing to export")
    return best


def _comment(text: Any) -> str:
    return " ".join(str(text).split()).replace("*/", "* /")


def _c_value(name: str, v: Any) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str) and _TOKEN.match(v):
        return v
    raise ExportError(f"parameter {name}: value {v!r} is not a C token; export it as JSON instead")


def best_header(state: DashboardState, session_path: Path | None = None) -> str:
    """The best configuration as `#define` lines, with where it came from in a comment."""
    best = _best(state)
    template = str(state.template.get("name") or "kernel")
    guard = "KERNTUNE_" + re.sub(r"[^A-Za-z0-9]", "_", template).upper() + "_BEST_H"
    problem = " ".join(f"{k}={v}" for k, v in _problem(state).items())
    speed = state.speedup(best)
    lines = [
        f"/* kerntune: the fastest verified configuration of {_comment(template)}",
        f" * problem {_comment(problem) or '-'} on {_comment(state.device.get('name', '?'))} "
        f"({_comment(state.device.get('backend') or state.template.get('backend', '?'))})",
        f" * median {best.median_us:.3f} us"
        + (f", {speed:.2f}x the default configuration" if speed else "")
        + (f", {100 * best.sol_fraction:.1f}% of speed-of-light" if best.sol_fraction is not None else ""),
    ]
    if session_path is not None:
        lines.append(f" * session {_comment(session_path)}")
    lines += [" */", f"#ifndef {guard}", f"#define {guard}"]
    for name, value in best.config.items():
        if not _IDENT.match(str(name)):
            raise ExportError(f"parameter {name!r} is not a C identifier")
        lines.append(f"#define {name} {_c_value(name, value)}")
    lines += [f"#endif /* {guard} */", ""]
    return "\n".join(lines)


def best_json(state: DashboardState, session_path: Path | None = None) -> str:
    """The best configuration and its figures as one JSON object."""
    best = _best(state)
    base = state.baseline
    out = {
        "template": state.template.get("name", ""),
        "problem": _problem(state),
        "device": state.device.get("name", ""),
        "backend": state.device.get("backend") or state.template.get("backend", ""),
        "config": dict(best.config),
        "median_us": best.median_us,
        "spread": best.spread,
        "sol_fraction": best.sol_fraction,
        "bandwidth_gbs": best.bandwidth_gbs,
        "speedup": state.speedup(best),
        "baseline": {"config": dict(base.config), "median_us": base.median_us} if base is not None else None,
        "winner_verified": state.winner.ok if state.winner is not None else None,
        "session": str(session_path) if session_path is not None else None,
    }
    return json.dumps(out, indent=2) + "\n"


def _problem(state: DashboardState) -> Mapping[str, Any]:
    if state.started is not None:
        return dict(state.started.problem)
    p = state.space.get("problem")
    return dict(p) if isinstance(p, Mapping) else {}


def write_file(path: Path, text: str) -> Path:
    """Write text to path (its folder is created); returns the path written."""
    path = Path(path).expanduser()
    if path.is_dir():
        raise ExportError(f"{path} is a folder; give a file name")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return path


def save_copy(session_path: Path, dest: Path) -> Path:
    """Copy the session file as it stands (a live run keeps appending to the original)."""
    dest = Path(dest).expanduser()
    if dest.is_dir():
        dest = dest / Path(session_path).name
    if dest.exists() and dest.resolve() == Path(session_path).resolve():
        raise ExportError(f"{dest} is the session itself; choose another path")
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(session_path, dest)
    return dest
