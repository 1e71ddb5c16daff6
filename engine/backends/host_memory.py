"""Host memory for the buffers of an OpenCL CPU device, each inside unmapped address space.

On a CPU device a kernel's buffers are the worker's own memory: a write far past an output (past
the guard regions, engine/buffers.py) would land in whatever the worker keeps there, the input
sets and their references included, and frame the configurations measured after it. Here every
buffer is pages of its own in the middle of a reservation of address space that is mapped with
no access (PROT_NONE: it costs no memory), and handed to the runtime to use as it is
(CL_MEM_USE_HOST_PTR): a read or write up to FENCE_BYTES before or after a buffer takes SIGSEGV
in the worker, which ends it (the parent records the configuration's crash and measures the next
ones in a fresh worker).

A runtime may copy such memory instead of using it: `uses_host_memory` tells, once per device,
and the backend then says so instead of claiming the protection.
"""

from __future__ import annotations

import ctypes
import mmap
import sys
from typing import Any, Callable

import numpy as np

# Address space with no access on each side of every buffer. Only address space: a 64-bit
# process has 128 TiB of it, and a run keeps at most a few hundred buffers.
FENCE_BYTES = 256 * 2**20
# Where a buffer starts: a multiple of a huge page, as the runtime's own allocations of this size are
ALIGN = 2 * 2**20

_MAP_NORESERVE = getattr(mmap, "MAP_NORESERVE", 0x4000)
_PROT_NONE = 0
_MAP_FAILED = ctypes.c_void_p(-1).value


class HostMemoryError(RuntimeError):
    """The address space could not be reserved or mapped."""


_LIBC: Any = None


def _libc() -> Any:
    global _LIBC
    if _LIBC is None:
        if not sys.platform.startswith("linux"):
            raise HostMemoryError(f"fenced host memory is made on Linux only (this is {sys.platform})")
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                              ctypes.c_long]
        libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        _LIBC = libc
    return _LIBC


class _Reservation:
    """One reservation: unmapped when the array over its middle is collected, after `release`
    (which waits until the device is done with the memory)."""

    def __init__(self, base: int, total: int, release: Callable[[], None] | None):
        self.base, self.total, self.release = base, total, release

    def __del__(self) -> None:
        try:
            if self.release is not None:
                self.release()
        except Exception:  # the device is gone: nothing uses the memory any more
            pass
        if _LIBC is not None:
            _LIBC.munmap(self.base, self.total)


def fenced(nbytes: int, release: Callable[[], None] | None = None) -> np.ndarray:
    """A zeroed uint8 array of at least `nbytes` (whole pages) with FENCE_BYTES of unmapped
    address space before and after it. The array owns the reservation: when nothing holds it any
    more, `release()` runs (to wait for the device) and the whole reservation is unmapped."""
    libc = _libc()
    page = mmap.PAGESIZE
    size = max(page, -(-int(nbytes) // page) * page)
    total = 2 * FENCE_BYTES + ALIGN + size
    base = libc.mmap(None, total, _PROT_NONE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _MAP_NORESERVE, -1, 0)
    if base is None or base == _MAP_FAILED:
        raise HostMemoryError(f"cannot reserve {total / 2**20:.0f} MiB of address space "
                              f"(errno {ctypes.get_errno()})")
    start = -(-(base + FENCE_BYTES) // ALIGN) * ALIGN
    if libc.mprotect(start, size, mmap.PROT_READ | mmap.PROT_WRITE) != 0:
        errno = ctypes.get_errno()
        libc.munmap(base, total)
        raise HostMemoryError(f"cannot map {size} bytes (errno {errno})")
    raw = (ctypes.c_uint8 * size).from_address(start)
    raw.reservation = _Reservation(base, total, release)  # lives as long as the array does
    return np.frombuffer(raw, dtype=np.uint8)


def uses_host_memory(write_on_device: Callable[[Any, int], None], read_on_device: Callable[[Any], np.ndarray],
                     buffer_over: Callable[[np.ndarray], Any]) -> str:
    """"" when a runtime uses a buffer's host memory as it is (what the device writes is in that
    memory, what the host writes there the device reads); else one line saying what it does.
    `buffer_over(array)` makes a buffer over the array, `write_on_device(buffer, byte)` fills it
    on the device and waits, `read_on_device(buffer)` copies it back."""
    host = fenced(mmap.PAGESIZE)
    buf = buffer_over(host)
    write_on_device(buf, 0x5A)
    if not (host == 0x5A).all():
        return "the OpenCL runtime keeps a buffer's data apart from the host memory it is given"
    host[:] = 0xA5
    if not (read_on_device(buf) == 0xA5).all():
        return "the OpenCL runtime copies the host memory it is given instead of using it"
    return ""
