"""`kerntune setup`: make sure an OpenCL device can build kernels on this machine.

Every OpenCL device is checked with one trivial build (engine/backends/opencl_check.py). When one
builds, there is nothing to do. When none does (the PoCL that pyopencl's wheel bundles cannot build
for the newest AMD processors), the distribution's PoCL is installed with apt-get
(`pocl-opencl-icd`, as root or through `sudo -n`) and the devices are checked again in a new
process (the OpenCL loader reads its list of runtimes once per process).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

PACKAGE = "pocl-opencl-icd"
APT_TIMEOUT_S = 900


def opencl_state() -> tuple[list[str], list[str]]:
    """(the devices that build, as labels; the others as `label: reason`, or why OpenCL itself
    cannot be opened)."""
    from kerntune.engine.backends import BackendError

    try:
        from kerntune.engine.backends import opencl

        checked = opencl.checked_devices()
    except BackendError as e:
        return [], [str(e)]
    return ([c.label for _, c in checked if c.builds],
            [f"{c.label}: {c.reason}" for _, c in checked if not c.builds])


def _apt(prefix: list[str], *args: str) -> tuple[bool, str]:
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    try:
        r = subprocess.run([*prefix, "apt-get", "-q", "-y", *args], capture_output=True, text=True, env=env,
                           timeout=APT_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, str(e).splitlines()[0] if str(e) else type(e).__name__
    lines = [l.strip() for l in (r.stderr + "\n" + r.stdout).splitlines() if l.strip()]
    errors = [l for l in lines if l.startswith(("E:", "W:"))]
    return r.returncode == 0, (errors or lines or ["no output"])[-1]


def _install() -> str | None:
    """Install the distribution's PoCL; None when it is installed, else why not, in one line."""
    if shutil.which("apt-get") is None:
        return "there is no apt-get here"
    prefix: list[str] = []
    if os.geteuid() != 0:
        if shutil.which("sudo") is None:
            return "installing needs root (run `kerntune setup` as root)"
        prefix = ["sudo", "-n"]
    ok, said = _apt(prefix, "install", "--no-install-recommends", PACKAGE)
    if not ok:  # a machine that has never read its package lists (a fresh container) says so here
        _apt(prefix, "update")
        ok, said = _apt(prefix, "install", "--no-install-recommends", PACKAGE)
    return None if ok else f"apt-get install {PACKAGE} failed: {said}"


def _check_again() -> tuple[bool, str]:
    """Check the devices in a new process, where the loader reads the runtimes installed now."""
    code = ("from kerntune.tui.setup import opencl_state\n"
            "ok, bad = opencl_state()\n"
            "print(ok[0] if ok else (bad[0] if bad else 'no OpenCL device found'))\n"
            "raise SystemExit(0 if ok else 1)\n")
    try:
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                           stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, str(e).splitlines()[0]
    out = r.stdout.strip().splitlines()
    return r.returncode == 0, out[-1] if out else (r.stderr.strip().splitlines() or ["the check failed"])[-1]


def setup() -> int:
    """Check the OpenCL devices; install the distribution's PoCL where none builds. 0 when a device
    builds at the end, else 1 with one line saying what to install."""
    usable, broken = opencl_state()
    if usable:
        print(f"OpenCL: {usable[0]} builds kernels; nothing to install")
        return 0
    why = broken[0] if broken else "no OpenCL device found"
    print(f"OpenCL: no device builds kernels ({why}); installing the distribution's PoCL ({PACKAGE})")
    failed = _install()
    if failed is None:
        ok, said = _check_again()
        if ok:
            print(f"OpenCL: installed {PACKAGE}; {said} builds kernels")
            return 0
        failed = f"after installing {PACKAGE}, still no device builds kernels ({said})"
    print(f"kerntune: {failed}; install an OpenCL CPU runtime that builds on this processor "
          f"(Debian/Ubuntu: apt-get install {PACKAGE})", file=sys.stderr)
    return 1
