"""The built-in template library: one folder per kernel with kernel.toml, sources and a reference."""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent


def names() -> list[str]:
    """Names of the built-in templates."""
    return sorted(p.name for p in HERE.iterdir() if (p / "kernel.toml").is_file())


def path(name: str) -> Path | None:
    """The spec path of a built-in template, or None."""
    p = HERE / name / "kernel.toml"
    return p if p.is_file() else None
