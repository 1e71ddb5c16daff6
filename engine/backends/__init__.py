"""Backends: one small interface, real implementations for CUDA (pycuda) and OpenCL (pyopencl).

The evaluator drives a backend through these primitives only, so the verification and timing
protocol is written once, in engine/evaluate.py.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol, Sequence

if TYPE_CHECKING:  # names for the annotations only: a compile process imports this package, and
    # needs neither numpy nor the engine's modules (their imports are most of its start)
    import numpy as np

    from ..device import DeviceLimits
    from ..result import Resources
    from ..space import Geometry

BACKEND_NAMES = ("cuda", "opencl")


class BackendError(RuntimeError):
    """A backend that cannot be opened (no driver, no device, missing package)."""


class CompileError(RuntimeError):
    """The source did not compile; the message holds the compiler's first error lines."""


@dataclass(frozen=True)
class ConstantArg:
    """An input the kernel reads from constant memory, in a launch's argument list: on CUDA a
    `__constant__` variable of the file by this name, filled from `buffer` before each launch (not
    a kernel argument); on OpenCL a `__constant` pointer argument, the buffer itself."""

    name: str
    buffer: Any
    nbytes: int


class LaunchError(RuntimeError):
    """The kernel could not be launched or failed while running."""


# The most of a compiler's log a compile error keeps (a result's message; the session stores it).
COMPILE_LOG_LIMIT = 20_000


def compile_message(summary: str, log: str) -> str:
    """A compile error's message: the first error lines on one line, then the compiler's whole log
    (cut at COMPILE_LOG_LIMIT characters), which the dashboard's details show."""
    log = log.strip()
    if not log or log == summary.strip():
        return summary
    if len(log) > COMPILE_LOG_LIMIT:
        log = log[:COMPILE_LOG_LIMIT] + f"\n... (the log is cut here: {len(log)} characters in all)"
    return f"{summary}\n\ncompiler log:\n{log}"


# Bytes of guard region before and after every buffer a kernel is given: filled with a random
# pattern and checked after each checked launch, so a write out of bounds is caught where it lands.
# A multiple of every device's base-address alignment, so views keep the buffer's alignment.
GUARD_BYTES = 16384


@dataclass(frozen=True)
class DeviceInfo:
    """A device a backend can open, for `kerntune devices`."""

    backend: str
    index: int
    limits: DeviceLimits


def chosen_device(devices: Sequence[Any], device: int, api: str, hint: str = "") -> Any:
    """The `device`th of a backend's devices; BackendError, one line, when there is no such one
    (`hint` follows the message when there is none at all)."""
    if not devices:
        raise BackendError(f"no {api} device found{hint}")
    if not 0 <= device < len(devices):
        raise BackendError(f"{api} device {device} does not exist ({len(devices)} found)")
    return devices[device]


def count_devices(devices: Callable[[], Sequence[Any]]) -> int:
    """How many devices `devices()` finds; 0 where the backend cannot be opened at all."""
    try:
        return len(devices())
    except BackendError:
        return 0


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do beyond the protocol's primitives, declared by the backend: the
    engine asks these fields, never whether a method happens to exist."""

    # build(source, entry, defines, options) without the device's context (in a thread), then
    # load(binary...) on it; a build returns what was built, so binaries can be compared
    build: bool = False
    # first_differences(pairs): first_difference of many pairs of ranges in one device pass
    first_differences: bool = False
    # compare_close(out, out_offset, ref, n, dtype, rtol, atol, ...): the tolerance check on the
    # device, only a failure read back
    compare_close: bool = False
    # warm(): the engine's own device kernels built and the compiler loaded ahead of a run
    warm: bool = False


class Backend(Protocol):
    """What the evaluator needs from a compute API."""

    name: str
    limits: DeviceLimits
    capabilities: Capabilities  # the optional methods it has (see Capabilities)

    def compile(self, source: str, entry: str, defines: Mapping[str, str],
                options: Sequence[str] = ()) -> Any:
        """Compile and load; raises CompileError."""

    def resources(self, kernel: Any) -> Resources:
        """Registers, shared and local memory of a compiled kernel."""

    def launch_limit(self, kernel: Any) -> int:
        """The most threads per block this compiled kernel can be launched with."""

    def alloc(self, nbytes: int) -> Any:
        """A device buffer of nbytes."""

    def view(self, buffer: Any, offset: int, nbytes: int) -> Any:
        """A kernel argument for bytes [offset, offset + nbytes) of `buffer` (offset: a multiple
        of GUARD_BYTES). The evaluator passes views that sit between two guard regions."""

    def copy(self, dst: Any, src: Any, nbytes: int, dst_offset: int = 0, src_offset: int = 0,
             wait: bool = True) -> None:
        """Device-to-device copy; with wait=False it is only queued, in order with launches."""

    def fill(self, buffer: Any, byte: int, nbytes: int, offset: int = 0, wait: bool = True) -> None:
        """Set every byte of a device buffer (or of a range of it)."""

    def first_difference(self, a: Any, a_offset: int, b: Any, b_offset: int, nbytes: int) -> int:
        """The first byte at which two device ranges differ, or -1 when they are equal (a
        comparison on the device where it can be, so only a few bytes come back)."""

    def upload(self, buffer: Any, array: np.ndarray, offset: int = 0) -> None: ...

    def download(self, buffer: Any, array: np.ndarray, offset: int = 0) -> None:
        """Copy to the host once everything queued before it has run."""

    def launch(self, kernel: Any, geo: Geometry, args: Sequence[Any]) -> None:
        """Run once and wait; raises LaunchError."""

    def time(self, kernel: Any, geo: Geometry, args: Sequence[Any], repeats: int,
             flush: bool) -> list[float]:
        """Device-timed runs in microseconds, each after a cache flush when `flush`."""

    def timed(self, kernel: Any, geo: Geometry, args: Sequence[Any], flush: bool) -> Any:
        """Queue one device-timed launch (after a cache flush when `flush`) without waiting;
        returns a token for `elapsed`."""

    def elapsed(self, tokens: Sequence[Any]) -> list[float]:
        """Wait for queued timed launches; their device times in microseconds."""

    def flush_bytes(self) -> int:
        """Size of the buffer written between timed runs to evict the cache."""

    def close(self) -> None: ...


def _module(name: str):
    if name not in BACKEND_NAMES:
        raise BackendError(f"unknown backend {name!r} (known: {', '.join(BACKEND_NAMES)})")
    return importlib.import_module(f"{__name__}.{name}")


def open_backend(name: str, device: int = 0) -> Backend:
    """Open a backend by name; 'auto' picks CUDA when a CUDA device exists, else OpenCL."""
    if name == "auto":
        name = pick_auto()
    return _module(name).open(device)


def pick_auto() -> str:
    """CUDA when pycuda finds a device, otherwise OpenCL."""
    return auto_backend()[0]


def auto_backend() -> tuple[str, str]:
    """`--backend auto`'s choice, and one line saying why CUDA was skipped when it was (no
    pycuda, no driver, no device); "" when CUDA was chosen."""
    try:
        if _module("cuda").list_devices():
            return "cuda", ""
        why = "pycuda found no CUDA device"
    except BackendError as e:
        why = str(e)
    return "opencl", f"--backend auto: CUDA skipped: {why}; using OpenCL"


def list_devices(name: str) -> list[DeviceInfo]:
    """Every device a backend can see; raises BackendError when the backend itself is missing."""
    return _module(name).list_devices()
