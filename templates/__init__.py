"""The built-in template library: one folder per kernel with kernel.toml, sources and a reference."""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent


def _specs() -> dict[str, Path]:
    """Every built-in spec by template name: a folder's kernel.toml, and its variants
    kernel_<variant>.toml (the same sources for another element type) as <folder>_<variant>."""
    out: dict[str, Path] = {}
    for d in sorted(p for p in HERE.iterdir() if p.is_dir()):
        if (d / "kernel.toml").is_file():
            out[d.name] = d / "kernel.toml"
            for v in sorted(d.glob("kernel_*.toml")):
                out[f"{d.name}_{v.stem[len('kernel_'):]}"] = v
    return out


def names() -> list[str]:
    """Names of the built-in templates."""
    return sorted(_specs())


def path(name: str) -> Path | None:
    """The spec path of a built-in template, or None."""
    return _specs().get(name)
