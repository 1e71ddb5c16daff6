"""A campaign's summary (`summary.toml`, which engine/campaign.py writes): read back and checked.

Reading a summary needs nothing of the tuning machinery, so that `show` and `replay` of a
campaign's folder or one of its sessions start fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .template import read_toml_file

SUMMARY_FORMAT = "kerntune-campaign"
SUMMARY_VERSION = 1
SUMMARY_FILE = "summary.toml"


class CampaignError(ValueError):
    """A campaign file or folder that cannot be used; the message is one line."""


def load_summary(path: Path) -> dict[str, Any]:
    """A campaign's summary (the file, or the folder holding summary.toml); one-line errors."""
    p = Path(path)
    if p.is_dir():
        p = p / SUMMARY_FILE
    data = read_toml_file(p, CampaignError)
    head = data.get("summary")
    if not isinstance(head, dict) or head.get("format") != SUMMARY_FORMAT:
        raise CampaignError(f"{p}: not a campaign summary (no [summary] with format = \"{SUMMARY_FORMAT}\")")
    if head.get("version") != SUMMARY_VERSION:
        raise CampaignError(f"{p}: summary version {head.get('version')!r}; this kerntune reads {SUMMARY_VERSION}")
    for key in ("pair", "general", "dispatch"):
        rows = data.get(key, [])
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            raise CampaignError(f"{p}: [[{key}]] expected tables")
        for i, row in enumerate(rows):
            _check_row(p, f"{key}[{i}]", row)
            for j, size in enumerate(row.get("size", [])) if key != "pair" else ():
                _check_row(p, f"{key}[{i}].size[{j}]", size)
            for j, member in enumerate(row.get("configs", [])) if key == "dispatch" else ():
                _check_row(p, f"{key}[{i}].configs[{j}]", member)
    for key in ("pair", "general", "dispatch"):
        data.setdefault(key, [])
    data["path"] = str(p)
    return data


# what each key of a summary's rows holds: read back, a summary is only shown, never trusted further
_ROW_TYPES = {"template": str, "size": (str, list), "session": str, "status": str, "error": str, "notes": list,
              "problem": dict, "config": dict, "best_config": dict, "best_us": (int, float),
              "original_us": (int, float), "general_us": (int, float), "geomean_speedup": (int, float),
              "time_us": (int, float), "tolerance": (int, float), "general_geomean_speedup": (int, float),
              "configs": list, "covers": list}


def _check_row(path: Path, where: str, row: Any) -> None:
    if not isinstance(row, dict):
        raise CampaignError(f"{path}: [{where}] expected a table")
    for key, value in row.items():
        kind = _ROW_TYPES.get(key)
        if kind is not None and (not isinstance(value, kind) or isinstance(value, bool)):
            raise CampaignError(f"{path}: [{where}.{key}] expected {getattr(kind, '__name__', 'a number')}")
        if key in ("size", "configs") and isinstance(value, list) and not all(isinstance(v, dict) for v in value):
            raise CampaignError(f"{path}: [{where}.{key}] expected tables")
        if key == "covers" and not all(isinstance(v, str) for v in value):
            raise CampaignError(f"{path}: [{where}.covers] expected names of sizes")
        if key == "notes" and not all(isinstance(v, str) for v in value):
            raise CampaignError(f"{path}: [{where}.notes] expected strings")


def is_summary(path: Path) -> bool:
    """Whether `path` is a campaign's summary (or a folder with one) rather than a session."""
    p = Path(path)
    if p.is_dir():
        return (p / SUMMARY_FILE).is_file()
    try:
        with open(p, "rb") as f:
            head = f.read(200)
    except OSError:
        return False
    return head.startswith(b"[summary]")
