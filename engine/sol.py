"""Speed of light: the least time a problem can take on a device.

max(bytes moved / memory bandwidth, flops / arithmetic peak), from the template's cost model and
the device's peaks: measured once per device by `kerntune probe` and cached, datasheet figures
otherwise. A result faster than its bound is flagged as suspect rather than ranked.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import tomli_w

from .device import DeviceLimits

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

# Datasheet figures (GB/s of DRAM bandwidth, dense fp32 non-tensor GFLOP/s), used only when no
# measurement exists for the device. Keys are matched as substrings of the device name.
DATASHEET: dict[str, tuple[float, float]] = {
    "H100 80GB HBM3": (3350.0, 66900.0),
    "H100 PCIe": (2000.0, 51200.0),
    "H100": (3350.0, 66900.0),
    "H200": (4800.0, 66900.0),
    "A100-SXM4-80GB": (2039.0, 19500.0),
    "A100": (1555.0, 19500.0),
    "L40S": (864.0, 91600.0),
    "RTX 4090": (1008.0, 82600.0),
    "TITAN RTX": (672.0, 16300.0),
}

# A measured time may beat its bound by this much before it is called suspect: the probe itself
# is a measurement with a few percent of spread.
SUSPECT_MARGIN = 0.05


@dataclass(frozen=True)
class Peaks:
    bandwidth_gbs: float
    gflops: float
    source: str  # "measured <date>" or "datasheet"


def cache_dir() -> Path:
    base = os.environ.get("KERNTUNE_CACHE_DIR")
    if base:
        return Path(base)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "kerntune"


def _peaks_file() -> Path:
    return cache_dir() / "peaks.toml"


def load_peaks(limits: DeviceLimits) -> Peaks | None:
    """Measured peaks for this device from the cache, else datasheet figures, else None."""
    path = _peaks_file()
    try:
        data = tomllib.loads(path.read_text())
        entry = data.get("device", {}).get(limits.key())
        if isinstance(entry, dict):
            return Peaks(float(entry["bandwidth_gbs"]), float(entry["gflops"]),
                         f"measured {entry.get('measured', '')}".strip())
    except (OSError, ValueError, KeyError, TypeError, tomllib.TOMLDecodeError):
        pass
    for key, (bw, fl) in DATASHEET.items():
        if key in limits.name:
            return Peaks(bw, fl, "datasheet")
    return None


def save_peaks(limits: DeviceLimits, bandwidth_gbs: float, gflops: float) -> Path:
    path = _peaks_file()
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError):
        data = {}
    devices = data.setdefault("device", {})
    devices[limits.key()] = {
        "name": limits.name,
        "bandwidth_gbs": round(bandwidth_gbs, 2),
        "gflops": round(gflops, 2),
        "measured": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(tomli_w.dumps(data))
    tmp.replace(path)
    return path


def sol_time_us(bytes_moved: float, flops: float, limits: DeviceLimits) -> float | None:
    """The speed-of-light time in microseconds, or None when the device's peaks are unknown."""
    terms = []
    if limits.peak_bandwidth_gbs > 0 and bytes_moved > 0:
        terms.append(bytes_moved / (limits.peak_bandwidth_gbs * 1e3))
    if limits.peak_gflops > 0 and flops > 0:
        terms.append(flops / (limits.peak_gflops * 1e3))
    return max(terms) if terms else None
