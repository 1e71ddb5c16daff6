"""The selftest's certificate (engine/selftest.py), kept per device and driver in the cache, read
into every later session's header ([device] selftest) and the dashboard's device panel.

    ~/.cache/kerntune/selftest.toml   (`$KERNTUNE_CACHE_DIR` moves it)
    ["opencl:pthread-AMD_EPYC:"]      caught, hostile, ties, twins, missed, device, driver, date, ...
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Mapping

import tomli_w

from .sol import cache_dir

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

# What a certificate holds, each with the type a file must give it.
FIELDS: dict[str, type | tuple[type, ...]] = {
    "caught": int, "hostile": int, "ties": int, "twins": int, "missed": list, "backend": str, "device": str,
    "driver": str, "date": str, "seconds": (int, float), "tool_version": str,
}


def certificate_file() -> Path:
    return cache_dir() / "selftest.toml"


def device_key(backend: str, name: str, driver: str) -> str:
    """The certificate's key: the device and its driver (a new driver is a new harness)."""
    return f"{backend}:{name}:{driver}".replace(" ", "_")


def _read_all() -> dict[str, Any]:
    try:
        return tomllib.loads(certificate_file().read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return {}


def checked(d: Any) -> dict[str, Any] | None:
    """A certificate read from a file (the cache, a session's header) with every field of the
    type it must have; None when anything is missing or of another type."""
    if not isinstance(d, Mapping):
        return None
    out = {}
    for k, kind in FIELDS.items():
        v = d.get(k)
        if not isinstance(v, kind) or isinstance(v, bool):
            return None
        out[k] = v
    if not all(isinstance(x, str) for x in out["missed"]):
        return None
    return out


def load_certificate(backend: str, name: str, driver: str) -> dict[str, Any] | None:
    """The cached certificate of this device and driver; None when it has none."""
    return checked(_read_all().get(device_key(backend, name, driver)))


def save_certificate(cert: Mapping[str, Any]) -> Path:
    """Keep a certificate for its device and driver (an older one of the same is replaced)."""
    data = _read_all()
    data[device_key(cert["backend"], cert["device"], cert["driver"])] = dict(cert)
    path = certificate_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(tomli_w.dumps(data), encoding="utf-8")
    os.replace(tmp, path)
    return path


def certificate_line(cert: Mapping[str, Any]) -> str:
    """`caught 10 of 10, ties found 2 of 2 (2026-11-25)`."""
    line = f"caught {cert['caught']} of {cert['hostile']}, ties found {cert['ties']} of {cert['twins']}"
    return f"{line} ({cert['date'][:10]})"
