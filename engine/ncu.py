"""Nsight Compute (`ncu`): finding it, running it on a program, and reading its raw CSV page.

`run_ncu` profiles one launch of a kernel in a program (the second: the first warms the module
and the instruction cache) with the clocks as the timing saw them (`--clock-control none`) and
every cache flushed before each replay pass, so DRAM traffic is what a cold run moves. Its output
is read into `ProfileMetrics`: achieved DRAM throughput, SM and memory throughput as fractions of
peak, achieved and theoretical occupancy, L1 and L2 hit rates, the top warp stall reasons,
registers and shared memory, and the bound they point to, by ncu's own speed-of-light rule
(memory or compute when either throughput reaches 60% of peak, latency otherwise).

Without ncu, or where it cannot read the counters, the result is one clear line
(`ProfileError`), never a traceback.
"""

from __future__ import annotations

import csv
import io
import re
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from .backends.cuda_toolchain import find_cuda_tool, run_cuda_tool

# The warp states ncu's Warp State Statistics section reports, as metric-name fragments.
STALL_REASONS = (
    "barrier", "branch_resolving", "dispatch_stall", "drain", "imc_miss", "lg_throttle",
    "long_scoreboard", "math_pipe_throttle", "membar", "mio_throttle", "misc", "no_instruction",
    "not_selected", "short_scoreboard", "sleeping", "tex_throttle", "wait",
)
STALL_METRIC = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"
CYCLES_PER_ISSUE = "smsp__average_warps_active_per_issue_active.ratio"

# field name -> ncu metric (units with --print-units base: ns, byte, %, count)
METRICS: dict[str, str] = {
    "duration_ns": "gpu__time_duration.sum",
    "dram_read_bytes": "dram__bytes_read.sum",
    "dram_write_bytes": "dram__bytes_write.sum",
    "dram_pct": "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "memory_pct": "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "sm_pct": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "achieved_occupancy_pct": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "theoretical_occupancy_pct": "sm__maximum_warps_per_active_cycle_pct",
    "l1_hit_pct": "l1tex__t_sector_hit_rate.pct",
    "l2_hit_pct": "lts__t_sector_hit_rate.pct",
    "registers": "launch__registers_per_thread",
    "shared_static": "launch__shared_mem_per_block_static",
    "shared_dynamic": "launch__shared_mem_per_block_dynamic",
    "block_size": "launch__block_size",
    "grid_size": "launch__grid_size",
    "cycles_per_issue": CYCLES_PER_ISSUE,
}
ALL_METRICS: tuple[str, ...] = tuple(METRICS.values()) + tuple(STALL_METRIC.format(r) for r in STALL_REASONS)
BOUND_THRESHOLD = 60.0  # % of peak: ncu's speed-of-light rule


class ProfileError(RuntimeError):
    """Profiling could not be done; the message is one line saying why."""


@dataclass(frozen=True)
class ProfileMetrics:
    """What ncu measured for one launch of one configuration."""

    kernel: str = ""
    duration_us: float = 0.0
    dram_bytes: float = 0.0
    dram_gbs: float = 0.0  # achieved: DRAM bytes / duration
    dram_pct: float = 0.0  # % of peak DRAM throughput
    memory_pct: float = 0.0  # % of peak of the busiest memory unit (L1, L2, DRAM)
    sm_pct: float = 0.0
    achieved_occupancy_pct: float = 0.0
    theoretical_occupancy_pct: float = 0.0
    l1_hit_pct: float = 0.0
    l2_hit_pct: float = 0.0
    registers: int = 0
    shared_bytes: int = 0  # static + dynamic, per block
    block_size: int = 0
    grid_size: int = 0
    cycles_per_issue: float = 0.0
    stalls: tuple[tuple[str, float], ...] = ()  # top reasons: (name, cycles per issued instruction)
    bound: str = ""  # memory, compute or latency

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["stalls"] = {name: value for name, value in self.stalls}
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ProfileMetrics":
        known = {f for f in cls.__dataclass_fields__}
        kw = {k: v for k, v in d.items() if k in known and k != "stalls"}
        stalls = d.get("stalls", {})
        if isinstance(stalls, Mapping):
            kw["stalls"] = tuple((str(k), float(v)) for k, v in stalls.items())
        for k, v in list(kw.items()):
            if k in ("kernel", "bound"):
                kw[k] = str(v)
            elif k in ("registers", "shared_bytes", "block_size", "grid_size"):
                kw[k] = int(v)
            elif k != "stalls":
                kw[k] = float(v)
        return cls(**kw)

    def summary(self) -> str:
        """One line: the bound and the figures that show it."""
        stalls = ", ".join(f"{n.replace('_', ' ')} {v:.1f}" for n, v in self.stalls)
        return (f"{self.bound}-bound: DRAM {self.dram_gbs:,.0f} GB/s ({self.dram_pct:.0f}% of peak), "
                f"SM {self.sm_pct:.0f}%, occupancy {self.achieved_occupancy_pct:.0f}% of "
                f"{self.theoretical_occupancy_pct:.0f}%, L1 hit {self.l1_hit_pct:.0f}%, L2 hit "
                f"{self.l2_hit_pct:.0f}%, {self.registers} regs, {self.shared_bytes} B smem"
                + (f"; stalls (cycles/issue): {stalls}" if stalls else ""))


def bound_of(memory_pct: float, sm_pct: float, threshold: float = BOUND_THRESHOLD) -> str:
    """ncu's speed-of-light reading: the busier unit when either reaches the threshold, else latency."""
    if max(memory_pct, sm_pct) < threshold:
        return "latency"
    return "memory" if memory_pct >= sm_pct else "compute"


# parsing ---------------------------------------------------------------------------------------
def _number(text: str) -> float | None:
    t = text.strip().replace(",", "")
    if t in ("", "n/a", "N/A", "nan"):
        return None
    try:
        return float(t)
    except ValueError:
        return None


def parse_raw_csv(text: str) -> list[dict[str, tuple[str, str]]]:
    """ncu's `--csv --page raw` output: one dict per profiled kernel, metric -> (value, unit).

    ncu's own messages (`==PROF==`, `==WARNING==`) and the program's output may surround the
    table; the table starts at the header row whose first cell is "ID"."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID",')), None)
    if start is None:
        return []
    body = [line for line in lines[start:] if line.startswith('"')]
    rows = list(csv.reader(io.StringIO("\n".join(body))))
    if len(rows) < 2:
        return []
    header, units = rows[0], rows[1]
    data_rows = rows[2:]
    if units and units[0].strip():  # no units row: the first row is already a kernel
        data_rows, units = rows[1:], [""] * len(header)
    out = []
    for row in data_rows:
        if len(row) != len(header):
            continue
        out.append({name: (row[i], units[i] if i < len(units) else "") for i, name in enumerate(header)})
    return out


_TO_BYTES = {"byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "KB": 1e3, "MB": 1e6, "GB": 1e9}
_TO_NS = {"ns": 1.0, "nsecond": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6, "second": 1e9}


def _value(row: Mapping[str, tuple[str, str]], metric: str, scale: Mapping[str, float] | None = None) -> float:
    if metric not in row:
        return 0.0
    text, unit = row[metric]
    v = _number(text)
    if v is None:
        return 0.0
    if scale is not None:
        v *= scale.get(unit.strip(), 1.0)
    return v


def metrics_from_row(row: Mapping[str, tuple[str, str]], top: int = 3) -> ProfileMetrics:
    """The metrics of one profiled launch (a row of `parse_raw_csv`)."""
    duration_ns = _value(row, METRICS["duration_ns"], _TO_NS)
    dram = (_value(row, METRICS["dram_read_bytes"], _TO_BYTES)
            + _value(row, METRICS["dram_write_bytes"], _TO_BYTES))
    stalls = []
    for reason in STALL_REASONS:
        v = _value(row, STALL_METRIC.format(reason))
        if v > 0:
            stalls.append((reason, round(v, 4)))
    stalls.sort(key=lambda s: -s[1])
    memory_pct = _value(row, METRICS["memory_pct"])
    sm_pct = _value(row, METRICS["sm_pct"])
    kernel = row.get("Kernel Name", ("", ""))[0]
    return ProfileMetrics(
        kernel=kernel,
        duration_us=duration_ns / 1e3,
        dram_bytes=dram,
        dram_gbs=dram / duration_ns if duration_ns > 0 else 0.0,
        dram_pct=_value(row, METRICS["dram_pct"]),
        memory_pct=memory_pct,
        sm_pct=sm_pct,
        achieved_occupancy_pct=_value(row, METRICS["achieved_occupancy_pct"]),
        theoretical_occupancy_pct=_value(row, METRICS["theoretical_occupancy_pct"]),
        l1_hit_pct=_value(row, METRICS["l1_hit_pct"]),
        l2_hit_pct=_value(row, METRICS["l2_hit_pct"]),
        registers=int(_value(row, METRICS["registers"])),
        shared_bytes=int(_value(row, METRICS["shared_static"], _TO_BYTES)
                         + _value(row, METRICS["shared_dynamic"], _TO_BYTES)),
        block_size=int(_value(row, METRICS["block_size"])),
        grid_size=int(_value(row, METRICS["grid_size"])),
        cycles_per_issue=_value(row, METRICS["cycles_per_issue"]),
        stalls=tuple(stalls[:top]),
        bound=bound_of(memory_pct, sm_pct),
    )


def parse_ncu_output(text: str, kernel: str | None = None) -> ProfileMetrics:
    """The metrics of the last profiled launch of `kernel` (any kernel when None) in ncu's output."""
    rows = parse_raw_csv(text)
    if kernel is not None:
        rows = [r for r in rows if _base_name(r.get("Kernel Name", ("", ""))[0]) == kernel] or rows
    if not rows:
        raise ProfileError(ncu_failure(text) or "ncu profiled no kernel")
    return metrics_from_row(rows[-1])


def _base_name(name: str) -> str:
    return name.split("(", 1)[0].strip()


_ERROR = re.compile(r"^==(ERROR|WARNING)==\s*(.*)$", re.MULTILINE)


def ncu_failure(text: str) -> str:
    """ncu's own reason for not profiling, as one line ('' when it gave none)."""
    errors = [m.group(2).strip() for m in _ERROR.finditer(text) if m.group(1) == "ERROR"]
    if any("ERR_NVGPUCTRPERM" in e or "permission" in e.lower() for e in errors):
        return ("ncu may not read the GPU's performance counters here (ERR_NVGPUCTRPERM: the driver "
                "restricts them to administrators)")
    if errors:
        return "ncu: " + "; ".join(dict.fromkeys(errors))[:300]
    if "No kernels were profiled" in text:
        return "ncu profiled no kernel (the launch did not happen or the name filter missed it)"
    return ""


def unknown_metrics(text: str) -> list[str]:
    """Metrics ncu says it does not know (`Failed to find metric X`)."""
    return re.findall(r"Failed to find metric\s+'?([A-Za-z0-9_.]+)'?", text)


# running ncu -----------------------------------------------------------------------------------
def find_ncu() -> str | None:
    """ncu from $KERNTUNE_NCU, PATH, the CUDA toolkit or an Nsight Compute install; None if absent."""
    return find_cuda_tool("ncu", "KERNTUNE_NCU",
                          ("/opt/nvidia/nsight-compute/*/ncu", "/usr/local/cuda*/bin/ncu"))


def ncu_version(ncu: str) -> str:
    try:
        out = subprocess.run([ncu, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    m = re.search(r"Version\s+([0-9][0-9A-Za-z.\-() ]*)", out)
    return m.group(1).strip() if m else out.strip().splitlines()[-1] if out.strip() else ""


def ncu_command(ncu: str, kernel: str, metrics: Sequence[str], target: Sequence[str]) -> list[str]:
    return [ncu, "--clock-control", "none", "--target-processes", "all", "--kernel-name", kernel,
            "--launch-skip", "1", "--launch-count", "1", "--cache-control", "all",
            "--csv", "--page", "raw", "--print-units", "base",
            "--metrics", ",".join(metrics), *target]


def require_ncu(ncu: str | None = None) -> str:
    """`ncu`, or the one `find_ncu` finds; ProfileError when there is none."""
    found = ncu or find_ncu()
    if found is None:
        raise ProfileError("ncu (Nsight Compute) was not found: install it or set KERNTUNE_NCU")
    return found


def run_ncu(ncu: str, kernel: str, target: Sequence[str], *, timeout: float, raw_out: Path | None = None) -> str:
    """ncu's whole output (its own lines, the program's and the CSV page) profiling `kernel` in the
    program `target`; metrics an older ncu does not know are dropped and it runs once more.
    ProfileError when ncu cannot start or does not finish within `timeout` seconds."""
    metrics = list(ALL_METRICS)
    for _attempt in range(3):
        cmd = ncu_command(ncu, kernel, metrics, target)
        text, _code = run_cuda_tool(cmd, "ncu", timeout, ProfileError)
        if raw_out is not None:
            raw_out.write_text(text)
        missing = [m for m in unknown_metrics(text) if m in metrics]
        if missing and len(missing) < len(metrics):  # an older ncu: drop what it lacks, once more
            metrics = [m for m in metrics if m not in missing]
            continue
        break
    return text
