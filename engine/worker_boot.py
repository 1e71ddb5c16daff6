"""The evaluation worker's first moments: the device starts while the modules load.

A new worker process spends most of its start in two waits that do not depend on each other:
importing numpy, pycuda and kerntune's modules (about 0.4 s on the GPU machine), and the CUDA
driver's own start and the device's primary context (about 0.3 s). This module is the child's
entry point and imports nothing heavy: it asks the driver for the primary context in a thread,
through ctypes (which lets go of the interpreter during the call), and only then imports the
worker. When pycuda opens the device afterwards, the driver has started and the context exists,
and retaining it again is immediate.

The worker's description travels pickled as bytes and is unpickled here after the thread starts,
since unpickling it imports the modules it refers to.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import pickle
import threading
import time
from typing import Any


def _cuda_primary_context(ordinal: int) -> None:
    """cuInit and cuDevicePrimaryCtxRetain through the driver's C library; any failure is left for
    the backend, which opens the device properly and reports it."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        name = ctypes.util.find_library("cuda")
        if name is None:
            return
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            return
    try:
        if lib.cuInit(0) != 0:
            return
        dev = ctypes.c_int()
        if lib.cuDeviceGet(ctypes.byref(dev), ctypes.c_int(ordinal)) != 0:
            return
        ctx = ctypes.c_void_p()
        lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev)
    except (AttributeError, OSError):
        return


def start_device(backend: str, device: int) -> threading.Thread | None:
    """The device's slow start begun in a thread (CUDA); None where there is nothing to begin."""
    if backend != "cuda":
        return None
    thread = threading.Thread(target=_cuda_primary_context, args=(device,), name="kerntune-device-start",
                              daemon=True)
    thread.start()
    return thread


def main(conn: Any, backend: str, device: int, spec: bytes, log_path: str, spawned: float) -> None:
    """The worker child: the device starting, then the worker's modules and its description."""
    entered = time.time()
    opening = start_device(backend, device)
    from .worker import _child

    _child(conn, pickle.loads(spec), log_path, spawned, entered, opening)
