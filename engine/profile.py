"""Profiler evidence: Nsight Compute (`ncu`) metrics for chosen configurations.

Timing says which configuration is fastest; the counters say why. `profile_config` starts a
child process under `ncu --clock-control none` (the clocks stay as the timing saw them) that
compiles one configuration, uploads random inputs and launches the kernel twice; ncu profiles
the second launch only (the first warms the module and the instruction cache) with every cache
flushed before each replay pass, so DRAM traffic is what a cold run moves. Its raw CSV page is
read into `ProfileMetrics`: achieved DRAM throughput, SM and memory throughput as fractions of
peak, achieved and theoretical occupancy, L1 and L2 hit rates, the top warp stall reasons,
registers and shared memory, and the bound they point to, by ncu's own speed-of-light rule
(memory or compute when either throughput reaches 60% of peak, latency otherwise).

Without ncu, or where it cannot read the counters, the result is one clear line
(`ProfileError`), never a traceback, and nothing else stops.
"""

from __future__ import annotations

import csv
import glob
import io
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

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
DEFAULT_TIMEOUT = 300.0


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
    env = os.environ.get("KERNTUNE_NCU")
    if env:
        return env if os.access(env, os.X_OK) else None
    found = shutil.which("ncu")
    if found:
        return found
    candidates = [os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "ncu")]
    candidates += sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu"), reverse=True)
    candidates += sorted(glob.glob("/usr/local/cuda*/bin/ncu"), reverse=True)
    return next((c for c in candidates if os.access(c, os.X_OK)), None)


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


@dataclass
class ProfileJob:
    """What the profiled child needs: plain data, written as JSON for it."""

    spec_path: str
    spec_text: str
    sources: Mapping[str, str]
    problem_name: str
    problem: Mapping[str, int]
    config: Mapping[str, Any]
    original: bool = False  # the template's original kernel at its own launch
    device: int = 0
    seed: int = 12345
    originals: Mapping[str, str] = field(default_factory=dict)


def profile_job(job: ProfileJob, *, ncu: str | None = None, timeout: float = DEFAULT_TIMEOUT,
                entry: str, raw_out: Path | None = None) -> ProfileMetrics:
    """Profile one configuration in a child process under ncu; ProfileError on any failure."""
    ncu = ncu or find_ncu()
    if ncu is None:
        raise ProfileError("ncu (Nsight Compute) was not found: install it or set KERNTUNE_NCU")
    metrics = list(ALL_METRICS)
    with tempfile.TemporaryDirectory(prefix="kerntune-profile-") as tmp:
        job_path = Path(tmp) / "job.json"
        job_path.write_text(json.dumps(asdict(job)))
        target = [sys.executable, "-m", "kerntune.engine.profile", "--target", str(job_path)]
        for _attempt in range(3):
            cmd = ncu_command(ncu, entry, metrics, target)
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                                      env={**os.environ, "PYTHONWARNINGS": "ignore"})
            except subprocess.TimeoutExpired:
                raise ProfileError(f"ncu did not finish within {timeout:.0f} s") from None
            except OSError as e:
                raise ProfileError(f"cannot start ncu: {e}") from None
            text = proc.stdout + "\n" + proc.stderr
            if raw_out is not None:
                raw_out.write_text(text)
            missing = [m for m in unknown_metrics(text) if m in metrics]
            if missing and len(missing) < len(metrics):  # an older ncu: drop what it lacks, once more
                metrics = [m for m in metrics if m not in missing]
                continue
            break
        target_error = _target_error(text)
        if target_error:
            raise ProfileError(target_error)
        return parse_ncu_output(text, entry)


def _target_error(text: str) -> str:
    m = re.search(r"^kerntune-profile-error: (.*)$", text, re.MULTILINE)
    return m.group(1).strip() if m else ""


def job_for(template: Any, problem: Any, config: Mapping[str, Any] | None, device: int = 0) -> ProfileJob:
    """The job profiling `config` (None: the original kernel) of `template` at `problem`."""
    return ProfileJob(spec_path=str(template.spec_path), spec_text=template.spec_text,
                      sources=dict(template.sources), problem_name=problem.name,
                      problem=dict(problem.values), config=dict(config or {}), original=config is None,
                      device=device, originals=dict(template.original_sources))


def profile_config(template: Any, problem: Any, config: Mapping[str, Any] | None, *, device: int = 0,
                   ncu: str | None = None, timeout: float = DEFAULT_TIMEOUT,
                   raw_out: Path | None = None) -> ProfileMetrics:
    """Profile one configuration of a template (None: its original kernel) on a CUDA device."""
    return profile_job(job_for(template, problem, config, device), ncu=ncu, timeout=timeout,
                       entry=template.entry, raw_out=raw_out)


def template_from_session(header: Mapping[str, Any], into: Path) -> Any:
    """The template a session was recorded with: its own file when that is unchanged, the
    built-in one of that name when it is the same, else rebuilt in `into` from the spec and
    sources the session carries (without the numpy reference, which profiling does not need)."""
    from .proposal import dump_spec
    from .template import TemplateError, load_template, parse_template, read_spec_toml

    t = header.get("template", {})
    fingerprint = t.get("fingerprint")
    candidates = [Path(str(t.get("path", "")))]
    try:
        from kerntune import templates

        builtin = templates.path(str(t.get("name", "")))
        if builtin is not None:
            candidates.append(builtin)
    except ImportError:  # pragma: no cover
        pass
    for c in candidates:
        if c.is_file():
            try:
                tpl = load_template(c)
            except TemplateError:
                continue
            if tpl.fingerprint() == fingerprint:
                return tpl
    spec, backend = t.get("spec"), t.get("backend", "cuda")
    if not isinstance(spec, str) or not isinstance(t.get("source"), str):
        raise ProfileError("the session does not carry its template's spec and source")
    data = read_spec_toml(spec)
    kernel = data.get("kernel", {})
    kernel.pop("reference", None)
    names = {"cuda": "kernel.cu", "opencl": "kernel.cl"}
    kernel["sources"] = {backend: names.get(backend, "kernel.src")}
    (into / kernel["sources"][backend]).write_text(t["source"])
    if isinstance(t.get("original_source"), str) and kernel.get("baseline"):
        kernel["baseline"] = {backend: "original." + names.get(backend, "x.src").split(".")[-1]}
        (into / kernel["baseline"][backend]).write_text(t["original_source"])
    else:
        kernel.pop("baseline", None)
    spec_path = into / "kernel.toml"
    text = dump_spec(data)
    spec_path.write_text(text)
    return parse_template(text, spec_path)


def ranked_results(results: Sequence[Any]) -> list[Any]:
    """Verified, timed results fastest first: the leaderboard's order (rank 1 is the best)."""
    return sorted((r for r in results if r.ranked), key=lambda r: r.median_us)


def profiled_event(t: float, result: Any, rank: int, bytes_moved: float, *, metrics: ProfileMetrics | None = None,
                   error: str = "", tool: str = "") -> Any:
    from .events import ConfigProfiled

    return ConfigProfiled(t, dict(result.config), metrics is not None,
                          metrics.to_dict() if metrics is not None else {}, error, rank,
                          float(result.median_us or 0.0), float(bytes_moved), tool)


def profile_session(path: Path, ranks: Sequence[int], *, ncu: str | None = None, device: int = 0,
                    timeout: float = DEFAULT_TIMEOUT, record: bool = True, raw_dir: Path | None = None,
                    on_event: Any = None) -> list[Any]:
    """Profile configurations of a saved session by leaderboard rank (1 = best) and append
    a `config_profiled` event for each to the session (with `record`). A config that cannot be
    profiled is an event with its reason; ProfileError only when nothing can be (no ncu, no
    CUDA session, a rank that does not exist)."""
    from .session import SessionWriter, load_session
    from .template import Problem

    session = load_session(path)
    backend = session.template.get("backend")
    if backend != "cuda":
        raise ProfileError(f"{path}: profiling needs a CUDA session (this one ran on {backend})")
    ranked = ranked_results(session.results())
    for n in ranks:
        if not 1 <= n <= len(ranked):
            raise ProfileError(f"{path}: no configuration ranked {n} (ranks 1..{len(ranked)})")
    ncu = ncu or find_ncu()
    if ncu is None:
        raise ProfileError("ncu (Nsight Compute) was not found: install it or set KERNTUNE_NCU")
    tool = ncu_version(ncu)
    space = session.space
    problem = Problem(str(space.get("problem_name", "")), {k: int(v) for k, v in space.get("problem", {}).items()})
    t = session.events[-1].t if session.events else 0.0
    events = []
    with tempfile.TemporaryDirectory(prefix="kerntune-session-template-") as tmp:
        template = template_from_session(session.header, Path(tmp))
        bytes_moved = float(template.cost_bytes.evaluate(problem.values))
        writer = SessionWriter(path) if record else None
        try:
            for n in ranks:
                r = ranked[n - 1]
                raw = raw_dir / f"{template.name}-rank{n}.txt" if raw_dir is not None else None
                try:
                    m = profile_config(template, problem, r.config, device=device, ncu=ncu, timeout=timeout,
                                       raw_out=raw)
                    ev = profiled_event(t, r, n, bytes_moved, metrics=m, tool=tool)
                except ProfileError as e:
                    ev = profiled_event(t, r, n, bytes_moved, error=str(e), tool=tool)
                if writer is not None:
                    writer.write(ev)
                if on_event is not None:
                    on_event(ev)
                events.append(ev)
        finally:
            if writer is not None:
                writer.close()
    return events


def consistency(ev: Any) -> str:
    """The profiler's DRAM traffic read against the run's timing and the cost model's bytes."""
    m = ev.metrics
    if not ev.ok or not m:
        return ""
    parts = []
    if ev.bytes_moved and ev.measured_us:
        parts.append(f"cost model {ev.bytes_moved / 1e6:,.1f} MB in {ev.measured_us:,.2f} us timed = "
                     f"{ev.bytes_moved / (ev.measured_us * 1e3):,.0f} GB/s")
    if m.get("duration_us"):
        parts.append(f"ncu {m.get('dram_bytes', 0) / 1e6:,.1f} MB DRAM in {m['duration_us']:,.2f} us = "
                     f"{m.get('dram_gbs', 0):,.0f} GB/s")
    return "; ".join(parts)


# the profiled child ----------------------------------------------------------------------------
def _run_target(job_path: str) -> int:
    """Compile one configuration, upload inputs, launch twice. Runs under ncu."""
    from .backends import open_backend
    from .evaluate import _defines, arg_shape, launch_geometry, make_inputs
    from .space import geometry
    from .template import Problem, np_dtype, parse_template

    try:
        job = ProfileJob(**json.loads(Path(job_path).read_text()))
        template = parse_template(job.spec_text, Path(job.spec_path), job.sources)
        problem = Problem(job.problem_name, dict(job.problem))
        backend = open_backend("cuda", job.device)
        if job.original:
            source = job.originals.get("cuda") or template.original_sources.get("cuda")
            if source is None:
                raise RuntimeError("the template has no original CUDA source")
            kernel = backend.compile(source, template.entry, {}, template.compile_options.get("cuda", ()))
            geo = launch_geometry(template, None, problem, backend.limits)
        else:
            kernel = backend.compile(template.source_for("cuda"), template.entry, _defines(job.config),
                                     template.compile_options.get("cuda", ()))
            geo = geometry(template, job.config, problem, backend.limits)
        inputs = make_inputs(template, problem, job.seed)
        args = []
        for a in template.arguments:
            if not a.is_buffer:
                args.append(inputs.scalars[a.name])
                continue
            nbytes = math.prod(arg_shape(a, problem)) * np_dtype(a.dtype).itemsize
            buf = backend.alloc(nbytes)
            if a.name in inputs.host:
                backend.upload(buf, inputs.host[a.name])
            else:
                backend.fill(buf, 0, nbytes)
            args.append(buf)
        backend.launch(kernel, geo, args)  # warm-up: skipped by ncu
        backend.launch(kernel, geo, args)  # profiled
        backend.close()
    except Exception as e:  # reported to the parent through ncu's output, as one line
        print(f"kerntune-profile-error: {type(e).__name__}: {e}", flush=True)
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) == 2 and args[0] == "--target":
        return _run_target(args[1])
    print("usage: python -m kerntune.engine.profile --target JOB.json", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
