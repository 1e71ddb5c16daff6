"""Which OpenCL devices work: each is checked once per driver, before it is used, with one trivial
build and launch, and with self-checks for the runtime defects kerntune knows of.

An OpenCL runtime may be installed and list its device, yet build nothing on this processor (the
PoCL that pyopencl's wheel bundles, LLVM 14, fails every build with "unknown target CPU 'generic'"
on the newest AMD processors), or build code that runs wrongly. The checks run in a child process
(a runtime that crashes while building takes only the child down) and are remembered in
`<cache dir>/opencl-devices.toml`, keyed by the platform, the device, their driver and the
runtime's environment settings, so later commands and the evaluation worker only read the file.

Run as `python -m kerntune.engine.backends.opencl_check [KEY ...]` it checks the devices of this
process's platforms (those with these keys), printing each check as a line of JSON.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import warnings
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable

import tomli_w

try:
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib

CACHE_NAME = "opencl-devices.toml"
# How long the child may take to check every device (a first build on PoCL takes about a second).
CHECK_TIMEOUT_S = 180.0

# The one trivial kernel every device must build and run correctly before it is used.
_TRIVIAL = """
__kernel void kerntune_check(__global int *out) {
    const int i = (int)get_global_id(0);
    out[i] = 3 * i + 1;
}
"""
TRIVIAL_ITEMS = 64

# Known runtime defects, each with a small kernel that shows it. STORE_AFTER_BARRIER: PoCL 3.1
# (LLVM 15) compiles a lane group's strided store loop, `for (j = lane; j < n; j += LANES)`, that
# follows a barrier in a called function inside a branch so that a lane whose first index is already
# past `n` stores anyway: a row of 19 elements spread over 32 lanes gets 13 stores past its end.
# The row-wise rewrite (a lane group per row) has exactly this shape, so it is declined on a device
# that shows the defect.
STORE_AFTER_BARRIER = "store-after-barrier"
DEFECTS = {
    STORE_AFTER_BARRIER: "a lane group's guarded store loop after a barrier stores past its bound",
}
_STORE_AFTER_BARRIER = """
void kerntune_meet(float *ps, __local float *red) {
    const int lane = (int)(get_local_id(0) % 32);
    red[lane] = *ps;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int o = 16; o > 0; o >>= 1) {
        if (lane < o) red[lane] += red[lane + o];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    *ps = red[0];
    barrier(CLK_LOCAL_MEM_FENCE);
}
__kernel void kerntune_defect(__global float *out, __global const float *inp, int rows, int n) {
    __local float red[32];
    const int i = (int)get_group_id(0);
    if (i < rows) {
        __global const float *in_row = inp + i * n;
        __global float *out_row = out + i * n;
        float sum = 0.0f;
        for (int j = (int)(get_local_id(0) % 32); j < n; j += 32) sum += in_row[j];
        kerntune_meet(&sum, red);
        for (int j = (int)(get_local_id(0) % 32); j < n; j += 32) out_row[j] = exp(in_row[j]);
    }
}
"""
DEFECT_ROW = 19  # elements of the row, fewer than the 32 lanes
DEFECT_SPARE = 64  # elements after the row that nothing may write


@dataclass(frozen=True)
class DeviceCheck:
    """What the checks found for one device: whether it builds and runs a trivial kernel (and why
    not), and the known runtime defects it shows."""

    key: str
    label: str  # the device and its driver, for people
    builds: bool
    reason: str = ""  # why it cannot be used; "" when it builds
    defects: tuple[str, ...] = ()


def cache_file() -> Path:
    base = os.environ.get("KERNTUNE_CACHE_DIR")
    if base:
        return Path(base) / CACHE_NAME
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "kerntune" / CACHE_NAME


def device_label(dev: Any) -> str:
    """The device and its runtime in words: `pthread-AMD EPYC (PoCL 3.0-rc2)`."""
    platform = dev.platform
    version = platform.version.strip()
    m = re.search(r"PoCL\s+(\S+)", version)
    runtime = f"PoCL {m.group(1)}" if m else f"{platform.name.strip()} {dev.driver_version.strip()}"
    return f"{dev.name.strip()} ({runtime})"


def device_key(dev: Any) -> str:
    """The cache's key for a device: its platform, name and driver, and the runtime's settings
    from the environment (PoCL reads POCL_* variables, which change what it builds)."""
    platform = dev.platform
    settings = sorted((k, v) for k, v in os.environ.items() if k.startswith("POCL_"))
    text = json.dumps([platform.name, platform.version, dev.name, dev.driver_version, dev.version, settings])
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def read_cache() -> dict[str, DeviceCheck]:
    """The checks recorded so far; an unreadable file counts as none."""
    try:
        with open(cache_file(), "rb") as f:
            data = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return {}
    out = {}
    for key, d in (data.get("device") or {}).items():
        if isinstance(d, dict) and isinstance(d.get("builds"), bool):
            defects = tuple(x for x in d.get("defects", ()) if isinstance(x, str) and x in DEFECTS)
            out[key] = DeviceCheck(key, str(d.get("label", "")), d["builds"], str(d.get("reason", "")), defects)
    return out


def _record(checks: Iterable[DeviceCheck]) -> None:
    """Add checks to the cache file (read again and replaced whole, so concurrent writers lose
    nothing worse than a check to repeat)."""
    path = cache_file()
    have = read_cache()
    for c in checks:
        have[c.key] = c
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    data = {"device": {k: {"label": c.label, "builds": c.builds, "reason": c.reason, "defects": list(c.defects),
                           "checked": now} for k, c in have.items()}}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".opencl-devices-")
        with os.fdopen(fd, "wb") as f:
            tomli_w.dump(data, f)
        os.replace(tmp, path)
    except OSError:
        pass  # a cache that cannot be written: the check runs again next time


def build_log(text: str) -> list[str]:
    """pyopencl's build failure as the compiler's lines: without its repeated header, the device's
    object (`<pyopencl.Device ... at 0x...>`), the build options (the virtual environment's
    include path) or a temporary file's folder."""
    lines = []
    for line in text.splitlines():
        line = line.strip()
        if (not line or line.startswith(("clBuildProgram failed", "Build on <", "(options:"))
                or re.fullmatch(r"\d+ errors? generated\.?", line)):
            continue
        line = re.sub(r"<pyopencl\.(\w+) '([^']*)'[^>]*>", r"\2", line)
        line = re.sub(r"\S*tempfile_\w+\.cl:", "source:", line)
        line = re.sub(r"(?<![\w.])/(?:[^\s/:'\"]+/)+", "", line)  # a file's folders: the machine's, not the code's
        lines.append(line)
    return lines


def build_failure(text: str, limit: int = 1) -> str:
    """The first `limit` errors of a build failure on one short line."""
    lines = build_log(text)
    errors = [l for l in lines if re.search(r"\berror\b", l, re.IGNORECASE)] or lines
    return " | ".join(errors[:limit])[:300] or "the build failed"


def _check_device(cl: Any, dev: Any, stage: Any) -> DeviceCheck:
    """Build and run the trivial kernel, then each defect's self-check, on one device."""
    import numpy as np

    key, label = device_key(dev), device_label(dev)
    stage(key, "build")
    try:
        ctx = cl.Context([dev])
        queue = cl.CommandQueue(ctx)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            program = cl.Program(ctx, _TRIVIAL).build()
        out = np.zeros(TRIVIAL_ITEMS, dtype=np.int32)
        buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, out.nbytes)
        program.kerntune_check(queue, (TRIVIAL_ITEMS,), None, buf)
        cl.enqueue_copy(queue, out, buf)
        queue.finish()
    except cl.Error as e:
        return DeviceCheck(key, label, False, f"cannot build a kernel: {build_failure(str(e))}")
    if not np.array_equal(out, 3 * np.arange(TRIVIAL_ITEMS, dtype=np.int32) + 1):
        return DeviceCheck(key, label, False, "a trivial kernel built but computed wrong values")
    stage(key, STORE_AFTER_BARRIER)
    defects = [STORE_AFTER_BARRIER] if _stores_past_bound(cl, ctx, queue, dev) else []
    return DeviceCheck(key, label, True, "", tuple(defects))


def _stores_past_bound(cl: Any, ctx: Any, queue: Any, dev: Any) -> bool:
    """Whether the store-after-barrier kernel writes past its row (or cannot run at all)."""
    import numpy as np

    if int(dev.max_work_group_size) < 32:
        return False  # the lane group of the row-wise rewrite cannot exist there either
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            program = cl.Program(ctx, _STORE_AFTER_BARRIER).build()
        rng = np.random.default_rng(1)
        inp = rng.uniform(-1, 1, DEFECT_ROW).astype(np.float32)
        out = np.full(DEFECT_ROW + DEFECT_SPARE, -7.0, dtype=np.float32)
        flags = cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR
        ib, ob = cl.Buffer(ctx, flags, hostbuf=inp), cl.Buffer(ctx, flags, hostbuf=out)
        program.kerntune_defect(queue, (32,), (32,), ob, ib, np.int32(1), np.int32(DEFECT_ROW))
        cl.enqueue_copy(queue, out, ob)
        queue.finish()
    except cl.Error:
        return True
    return bool(np.any(out[DEFECT_ROW:] != -7.0))


def _crashed(stage: str, label: str, key: str, how: str) -> DeviceCheck:
    if stage == "build":
        return DeviceCheck(key, label, False, f"its runtime crashed building a trivial kernel ({how})")
    return DeviceCheck(key, label, True, "", (stage,) if stage in DEFECTS else ())


def run_checks(needed: set[str]) -> dict[str, DeviceCheck]:
    """Check the devices whose keys are in `needed`, in child processes, and record what they
    found; every device ends with a check, a crash in the child included (the device it was
    checking is blamed, and the rest are checked in another child)."""
    found: dict[str, DeviceCheck] = {}
    labels: dict[str, str] = {}
    for _ in range(len(needed) + 1):
        todo = needed - set(found)
        if not todo:
            break
        try:
            child = subprocess.run([sys.executable, "-m", __name__, *sorted(todo)], capture_output=True,
                                   text=True, timeout=CHECK_TIMEOUT_S, stdin=subprocess.DEVNULL)
            status, output = child.returncode, child.stdout
            how = f"signal {-status}" if status < 0 else f"exit {status}"
        except subprocess.TimeoutExpired as e:
            output = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            status, how = -1, f"no answer in {CHECK_TIMEOUT_S:.0f} s"
        except OSError as e:
            output, status, how = "", -1, e.strerror or "cannot start"
        last = None
        for line in output.splitlines():
            try:
                said = json.loads(line)
            except ValueError:
                continue
            key = said.get("key") if isinstance(said, dict) else None
            if key not in todo:
                continue
            labels[key] = str(said.get("label", ""))
            if isinstance(said.get("builds"), bool):
                found[key] = DeviceCheck(key, labels[key], said["builds"], str(said.get("reason", "")),
                                         tuple(d for d in said.get("defects", ()) if d in DEFECTS))
                last = None
            else:
                last = (key, str(said.get("stage", "")))
        if status == 0 and last is None:
            break  # the child checked every device it found; one it did not find is gone
        blamed = last or next(((k, "build") for k in sorted(todo) if k not in found), None)
        if blamed is not None:
            found[blamed[0]] = _crashed(blamed[1], labels.get(blamed[0], ""), blamed[0], how)
    _record(found.values())
    return found


def checks_for(devices: list[Any]) -> list[DeviceCheck]:
    """Each device's check, from the cache, running the checks the cache lacks."""
    keys = [device_key(d) for d in devices]
    have = read_cache()
    missing = {k for k in keys if k not in have}
    if missing:
        have.update(run_checks(missing))
    out = []
    for dev, key in zip(devices, keys):
        c = have.get(key) or DeviceCheck(key, "", False, "its check found no such device")
        out.append(DeviceCheck(key, device_label(dev), c.builds, c.reason, c.defects))
    return out


def _main(keys: list[str]) -> int:
    """Check each device of this process's platforms whose key is in `keys` (every device with
    none): a line before each step, and the device's check, each one JSON object."""
    import pyopencl as cl

    def stage(key: str, what: str) -> None:
        print(json.dumps({"key": key, "label": labels.get(key, ""), "stage": what}), flush=True)

    labels: dict[str, str] = {}
    for platform in cl.get_platforms():
        try:
            devices = platform.get_devices()
        except cl.Error:
            continue
        for dev in devices:
            key = device_key(dev)
            if keys and key not in keys:
                continue
            labels[key] = device_label(dev)
            c = _check_device(cl, dev, stage)
            print(json.dumps({"key": key, "label": c.label, "builds": c.builds, "reason": c.reason,
                              "defects": list(c.defects)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
