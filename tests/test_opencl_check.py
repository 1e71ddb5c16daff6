"""Every OpenCL device is checked with one trivial build before it is used, remembered per driver:
a device that cannot build is never chosen, `kerntune devices` shows it with the reason, and with
no device that builds a command says what to install in one line.

A runtime that fails every build is made here for real by PoCL's own setting POCL_EXTRA_BUILD_FLAGS
(an option PoCL refuses, so every build fails, as pip's PoCL fails on the newest AMD processors)."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest

pytest.importorskip("pyopencl")

from kerntune.engine.backends import opencl, opencl_check  # noqa: E402
from kerntune.engine.backends.opencl_check import DeviceCheck, build_failure, device_key  # noqa: E402
from kerntune.tui.cli import main  # noqa: E402

# PoCL 3.0-rc2's message on an AMD processor of family 26, as pyopencl raises it
FAMILY_26 = ("clBuildProgram failed: BUILD_PROGRAM_FAILURE - clBuildProgram failed: BUILD_PROGRAM_FAILURE\n\n"
             "Build on <pyopencl.Device 'pthread-AMD EPYC' on 'Portable Computing Language' at 0x55d8e0155280>:\n\n"
             "error: unknown target CPU 'generic'\nnote: valid target CPU values are: nocona, core2\n\n"
             "(options: -I /home/me/.venv/lib/python3.11/site-packages/pyopencl/cl)")


@dataclass
class FakeDevice:
    """A device listed ahead of the real one whose runtime fails every build (its check recorded
    by an earlier run, as the cache keeps it)."""

    name: str = "pthread-AMD EPYC"
    driver_version: str = "3.0-rc2"
    version: str = "OpenCL 3.0 PoCL HSTR: pthread-x86_64-unknown-linux-gnu-generic"
    type: int = 2  # CL_DEVICE_TYPE_CPU
    platform: object = field(default_factory=lambda: SimpleNamespace(
        name="Portable Computing Language", version="OpenCL 3.0 PoCL 3.0-rc2  Linux, Release, LLVM 14.0.6"))


def broken_first(monkeypatch) -> FakeDevice:
    fake = FakeDevice()
    real = opencl._all_devices()
    monkeypatch.setattr(opencl, "_all_devices", lambda: [fake, *real])
    opencl_check._record([DeviceCheck(device_key(fake), "pthread-AMD EPYC (PoCL 3.0-rc2)", False,
                                      "cannot build a kernel: " + build_failure(FAMILY_26))])
    return fake


def test_a_build_failure_is_one_short_line_without_objects_or_paths():
    said = build_failure(FAMILY_26)
    assert said == "error: unknown target CPU 'generic'"
    log = ("Build on <pyopencl.Device 'x' on 'y' at 0x1>:\n\n"
           "error: /root/.cache/pocl/kcache/tempfile_9DzToW.cl:1:39: use of undeclared identifier 'z'\n")
    assert build_failure(log) == "error: source:1:39: use of undeclared identifier 'z'"
    missing = "error: <built-in>:1:10: '/home/me/.venv/lib/pocl/include/pocl_types.h' file not found"
    assert build_failure(missing) == "error: <built-in>:1:10: 'pocl_types.h' file not found"


def test_each_device_is_checked_once_per_driver_and_the_check_is_remembered(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNTUNE_CACHE_DIR", str(tmp_path))
    checked = opencl.checked_devices()
    assert any(c.builds for _, c in checked), checked
    recorded = opencl_check.read_cache()
    assert {c.key for _, c in checked} <= set(recorded)
    # the next command reads the file: no child process checks again
    monkeypatch.setattr(opencl_check, "run_checks", lambda needed: pytest.fail(f"checked again: {needed}"))
    assert [c for _, c in opencl.checked_devices()] == [c for _, c in checked]
    # another driver (here: other settings of the runtime) is another key, checked anew
    monkeypatch.setenv("POCL_AFFINITY", "0")
    assert all(device_key(d) not in recorded for d, _ in checked)


def test_a_device_that_cannot_build_is_never_chosen_and_devices_says_why(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KERNTUNE_CACHE_DIR", str(tmp_path))
    fake = broken_first(monkeypatch)
    usable = opencl._devices()
    assert fake not in usable and usable
    b = opencl.open(0)
    try:
        assert b.device is usable[0]
    finally:
        b.close()
    assert [d.limits.name for d in opencl.list_devices()] == [d.name.strip() for d in usable]
    assert main(["devices"]) == 0
    out = capsys.readouterr().out
    assert ("opencl (not used): pthread-AMD EPYC (PoCL 3.0-rc2): cannot build a kernel: "
            "error: unknown target CPU 'generic'\n") in out
    assert "0x" not in out and "site-packages" not in out


def test_with_no_device_that_builds_a_run_says_what_to_install_in_one_line(tmp_path):
    env = dict(os.environ, KERNTUNE_CACHE_DIR=str(tmp_path / "cache"), POCL_EXTRA_BUILD_FLAGS="-kerntune-refused",
               KERNTUNE_STANDBY="off")
    kerntune = [sys.executable, "-m", "kerntune.tui.cli"]
    run = subprocess.run([*kerntune, "tune", "silu_and_mul", "--budget", "2", "--headless", "--session",
                          str(tmp_path / "s.toml")], capture_output=True, text=True, env=env, timeout=300,
                         cwd=tmp_path)
    assert run.returncode != 0 and "Traceback" not in run.stderr + run.stdout, run.stderr
    err = run.stderr.strip().splitlines()
    assert len(err) == 1 and "no OpenCL device can build a kernel" in err[0], run.stderr
    assert "Invalid build option: -kerntune-refused" in err[0] and "apt-get install pocl-opencl-icd" in err[0]
    devices = subprocess.run([*kerntune, "devices"], capture_output=True, text=True, env=env, timeout=300)
    assert devices.returncode == 1
    assert "opencl (not used): " in devices.stdout and "cannot build a kernel" in devices.stdout
    # setup cannot install anything without apt-get: one line, what to install
    bare = dict(env, PATH=os.path.dirname(sys.executable))
    setup = subprocess.run([*kerntune, "setup"], capture_output=True, text=True, env=bare, timeout=300)
    assert setup.returncode == 1 and "Traceback" not in setup.stderr
    assert setup.stderr.strip().splitlines() == [
        "kerntune: there is no apt-get here; install an OpenCL CPU runtime that builds on this processor "
        "(Debian/Ubuntu: apt-get install pocl-opencl-icd)"]
    # an apt-get that installs, quietly, a runtime that builds no better: checked again, one line
    if os.geteuid() != 0:
        return  # (as another user, setup asks `sudo -n`, which this bare PATH does not have)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "apt-get").write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path / 'apt.txt'}\n")
    (bin_dir / "apt-get").chmod(0o755)
    apt = dict(env, PATH=f"{bin_dir}:{os.path.dirname(sys.executable)}")
    setup = subprocess.run([*kerntune, "setup"], capture_output=True, text=True, env=apt, timeout=300)
    assert (tmp_path / "apt.txt").read_text() == "-q -y install --no-install-recommends pocl-opencl-icd\n"
    assert setup.returncode == 1 and setup.stdout.startswith("OpenCL: no device builds kernels (")
    assert setup.stderr.startswith("kerntune: after installing pocl-opencl-icd, still no device builds kernels (")
    assert setup.stderr.count("\n") == 1


def test_setup_installs_nothing_where_a_device_builds(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KERNTUNE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr("kerntune.tui.setup._install", lambda: pytest.fail("setup installed something"))
    assert main(["setup"]) == 0
    assert capsys.readouterr().out.endswith("builds kernels; nothing to install\n")


def test_a_compile_error_is_short_and_holds_no_object_or_machine_path(opencl_backend):
    from kerntune.engine.backends import CompileError

    with pytest.raises(CompileError) as info:
        opencl_backend.compile("__kernel void k(__global float *a) { a[0] = nowhere + nothing; }", "k", {"X": "1"})
    said = str(info.value)
    first = said.splitlines()[0]
    assert first == ("error: source:1:45: use of undeclared identifier 'nowhere' | "
                     "error: source:1:55: use of undeclared identifier 'nothing'")
    assert "0x" not in said and "pyopencl" not in said and "-I " not in said and "/" not in said
