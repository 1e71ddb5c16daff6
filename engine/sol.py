"""Speed of light: the least time a problem can take on a device.

max(bytes moved / memory bandwidth, flops / arithmetic peak), from the template's cost model and
the device's peaks: measured by `kerntune probe` and cached per device and driver with the date and
the measurement's spread, datasheet figures otherwise. A result faster than its bound by more than
the probe's uncertainty is flagged as suspect rather than ranked.
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

# Dense half-precision tensor-core rates with float sums (GFLOP/s, datasheet), for a kernel that may
# compute on the tensor cores: its arithmetic is bounded by these, not by the fp32 rate above (which
# such a kernel beats many times over). Matched like DATASHEET; an unknown device gives such a kernel
# no arithmetic bound at all (its memory bound alone).
TENSOR_DATASHEET: dict[str, float] = {
    "H100 80GB HBM3": 989400.0,
    "H100 PCIe": 756000.0,
    "H100": 989400.0,
    "H200": 989400.0,
    "A100": 312000.0,
    "L40S": 362000.0,
    "RTX 4090": 165200.0,
    "TITAN RTX": 130500.0,
}

# A measured time may beat its bound by this much before it is called suspect: the probe itself
# is a measurement with a few percent of spread.
SUSPECT_MARGIN = 0.05


@dataclass(frozen=True)
class Peaks:
    bandwidth_gbs: float  # 0: unknown
    gflops: float  # 0: unknown
    source: str  # "measured <date>" or "datasheet"
    spread: float = 0.0  # the measurement's relative spread (the larger of the two figures')


def cache_dir() -> Path:
    base = os.environ.get("KERNTUNE_CACHE_DIR")
    if base:
        return Path(base)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "kerntune"


def _peaks_file() -> Path:
    return cache_dir() / "peaks.toml"


def peaks_key(limits: DeviceLimits) -> str:
    """The cache's key: the device and its driver (a new driver may run kernels at other rates)."""
    return f"{limits.key()}:{limits.driver}".replace(" ", "_")


def datasheet(limits: DeviceLimits) -> Peaks | None:
    for key, (bw, fl) in DATASHEET.items():
        if key in limits.name:
            return Peaks(bw, fl, "datasheet")
    return None


def cached_peaks(limits: DeviceLimits) -> Peaks | None:
    """The measurement cached for this device and driver; None when there is none, or only one
    from before the cache carried the driver and the spread."""
    try:
        data = tomllib.loads(_peaks_file().read_text())
        entry = data.get("device", {}).get(peaks_key(limits))
        if not isinstance(entry, dict) or "spread" not in entry or entry.get("driver") != limits.driver:
            return None
        bw, fl = float(entry.get("bandwidth_gbs", 0.0)), float(entry.get("gflops", 0.0))
        if bw <= 0 and fl <= 0:
            return None
        return Peaks(bw, fl, f"measured {entry.get('measured', '')}".strip(), float(entry["spread"]))
    except (OSError, ValueError, KeyError, TypeError, tomllib.TOMLDecodeError):
        return None


def load_peaks(limits: DeviceLimits) -> Peaks | None:
    """Measured peaks for this device and driver from the cache (a figure the probe refused
    filled in from the datasheet when it has one), else datasheet figures, else None."""
    sheet = datasheet(limits)
    peaks = cached_peaks(limits)
    if peaks is None:
        return sheet
    if sheet is not None and (peaks.bandwidth_gbs <= 0 or peaks.gflops <= 0):
        return Peaks(peaks.bandwidth_gbs or sheet.bandwidth_gbs, peaks.gflops or sheet.gflops,
                     f"{peaks.source} and datasheet", peaks.spread)
    return peaks


def save_peaks(limits: DeviceLimits, bandwidth_gbs: float, gflops: float, spread: float = 0.0,
               bandwidth_spread: float | None = None, gflops_spread: float | None = None) -> Path:
    """Cache a measurement for this device and driver, dated, with its spread; a figure of 0 (one
    the probe refused) is not known."""
    path = _peaks_file()
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError):
        data = {}
    devices = data.setdefault("device", {})
    entry = {
        "name": limits.name,
        "driver": limits.driver,
        "bandwidth_gbs": round(bandwidth_gbs, 2),
        "gflops": round(gflops, 2),
        "spread": round(spread, 4),
        "measured": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
    }
    if bandwidth_spread is not None:
        entry["bandwidth_spread"] = round(bandwidth_spread, 4)
    if gflops_spread is not None:
        entry["gflops_spread"] = round(gflops_spread, 4)
    devices[peaks_key(limits)] = entry
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(tomli_w.dumps(data))
    tmp.replace(path)
    return path


def tensor_gflops(limits: DeviceLimits) -> float:
    """The device's dense half-precision tensor-core rate (datasheet), 0 when unknown."""
    return next((v for k, v in TENSOR_DATASHEET.items() if k in limits.name), 0.0)


def tensor_bound(template, backend: str) -> bool:
    """Whether a template's kernel, on this backend, may compute on the tensor cores (any of its
    configurations: the bound must hold for every one)."""
    from .cxx import may_use_tensor_cores

    if backend != "cuda":
        return False
    source = template.sources.get(backend)
    return bool(source) and may_use_tensor_cores(source)


def sol_time_us(bytes_moved: float, flops: float, limits: DeviceLimits, tensor: bool = False) -> float | None:
    """The speed-of-light time in microseconds, or None when the device's peaks are unknown. With
    `tensor` (the kernel may compute on the tensor cores) the arithmetic term is the tensor-core
    rate's, or left out where that rate is unknown."""
    terms = []
    if limits.peak_bandwidth_gbs > 0 and bytes_moved > 0:
        terms.append(bytes_moved / (limits.peak_bandwidth_gbs * 1e3))
    gflops = tensor_gflops(limits) if tensor else limits.peak_gflops
    if gflops > 0 and flops > 0:
        terms.append(flops / (gflops * 1e3))
    return max(terms) if terms else None
