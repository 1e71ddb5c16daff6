"""What a device allows: the hard limits that prune configurations, and its peak rates.

Backends fill a `DeviceLimits` from their own queries (CUDA device attributes, OpenCL device
info). The record is plain data so that it can be saved in a session and shown on any machine.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Mapping


NO_REGISTER_LIMIT = 2**31 - 1


@dataclass(frozen=True)
class DeviceLimits:
    """A device's identity and the limits that constrain launch configurations."""

    backend: str
    name: str
    vendor: str = ""
    compute_capability: str = ""
    driver: str = ""
    max_threads_per_block: int = 1024
    max_block_dims: tuple[int, int, int] = (1024, 1024, 64)
    max_grid_dims: tuple[int, int, int] = (2**31 - 1, 65535, 65535)
    max_shared_per_block: int = 48 * 1024
    max_shared_per_block_optin: int = 48 * 1024
    max_shared_per_sm: int = 0
    max_threads_per_sm: int = 0
    max_blocks_per_sm: int = 0
    max_regs_per_block: int = 0
    max_regs_per_sm: int = 0
    # blocks a thread-block cluster may hold (8, the portable size, from compute capability 9.0);
    # 1 where there are no clusters
    max_cluster_blocks: int = 1
    sm_count: int = 1
    warp_size: int = 32
    l2_bytes: int = 0
    global_mem_bytes: int = 0
    clock_mhz: int = 0
    memory_clock_mhz: int = 0
    memory_bus_width: int = 0
    # Peak rates: measured by `kerntune probe` when `peaks_source` is "measured".
    peak_bandwidth_gbs: float = 0.0
    peak_gflops: float = 0.0
    peaks_source: str = ""
    # The measured peaks' relative spread (the larger of bandwidth's and arithmetic's): how far a
    # time may beat its bound before it is called suspect.
    peaks_spread: float = 0.0
    extra: Mapping[str, Any] = field(default_factory=dict)

    def expression_names(self) -> dict[str, int]:
        """The device names that template expressions may use."""
        return {
            "max_threads_per_block": self.max_threads_per_block,
            # static shared memory; dynamic shared memory may go up to the opt-in limit
            "max_shared_per_block": self.max_shared_per_block,
            "max_shared_per_block_optin": max(self.max_shared_per_block_optin, self.max_shared_per_block),
            "warp_size": self.warp_size,
            "sm_count": self.sm_count,
            # 32-bit registers a block may hold; a device that reports none (OpenCL) sets no limit
            "max_regs_per_block": self.max_regs_per_block or NO_REGISTER_LIMIT,
            "max_cluster_blocks": self.max_cluster_blocks,
        }

    def key(self) -> str:
        """A stable name for caches keyed by device."""
        return f"{self.backend}:{self.name}:{self.compute_capability}".replace(" ", "_")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["max_block_dims"] = list(self.max_block_dims)
        d["max_grid_dims"] = list(self.max_grid_dims)
        d["extra"] = dict(self.extra)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "DeviceLimits":
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in known}
        for k in ("max_block_dims", "max_grid_dims"):
            if k in kw:
                kw[k] = tuple(kw[k])
        return cls(**kw)

    def with_peaks(self, bandwidth_gbs: float, gflops: float, source: str,
                   spread: float = 0.0) -> "DeviceLimits":
        from dataclasses import replace

        return replace(self, peak_bandwidth_gbs=bandwidth_gbs, peak_gflops=gflops, peaks_source=source,
                       peaks_spread=spread)


def describe(limits: DeviceLimits) -> list[tuple[str, str]]:
    """Label/value rows for showing a device's limits."""
    rows = [
        ("backend", limits.backend),
        ("name", limits.name),
    ]
    if limits.vendor:
        rows.append(("vendor", limits.vendor))
    if limits.compute_capability:
        rows.append(("compute capability", limits.compute_capability))
    if limits.driver:
        rows.append(("driver", limits.driver))
    rows += [
        ("multiprocessors", str(limits.sm_count)),
        ("warp size", str(limits.warp_size)),
        ("threads / block", str(limits.max_threads_per_block)),
        ("block dims", " x ".join(map(str, limits.max_block_dims))),
        ("shared / block", _kib(limits.max_shared_per_block)
         + (f" (opt-in {_kib(limits.max_shared_per_block_optin)})"
            if limits.max_shared_per_block_optin > limits.max_shared_per_block else "")),
    ]
    if limits.max_threads_per_sm:
        rows.append(("threads / SM", str(limits.max_threads_per_sm)))
    if limits.max_blocks_per_sm:
        rows.append(("blocks / SM", str(limits.max_blocks_per_sm)))
    if limits.max_shared_per_sm:
        rows.append(("shared / SM", _kib(limits.max_shared_per_sm)))
    if limits.max_regs_per_block:
        rows.append(("registers / block", str(limits.max_regs_per_block)))
    if limits.max_regs_per_sm:
        rows.append(("registers / SM", str(limits.max_regs_per_sm)))
    if limits.max_cluster_blocks > 1:
        rows.append(("blocks / cluster", str(limits.max_cluster_blocks)))
    if limits.l2_bytes:
        rows.append(("L2 / last-level cache", f"{limits.l2_bytes / 2**20:.1f} MiB"))
    if limits.global_mem_bytes:
        rows.append(("memory", f"{limits.global_mem_bytes / 2**30:.1f} GiB"))
    if limits.peak_bandwidth_gbs:
        rows.append(("bandwidth", f"{limits.peak_bandwidth_gbs:.0f} GB/s ({limits.peaks_source})"))
    if limits.peak_gflops:
        rows.append(("arithmetic", f"{limits.peak_gflops:.0f} GFLOP/s ({limits.peaks_source})"))
    return rows


def _kib(n: int) -> str:
    return f"{n / 1024:.0f} KiB"
