"""The evaluation worker's first moments: a new interpreter, the device starting while the
modules load.

The worker is a new interpreter running `main` (engine/children.py), and this module imports
nothing heavy. It reads how to start (backend, device, the worker's description as pickled bytes)
from its pipe, asks the CUDA driver for the device's primary context in a thread, through ctypes
(which lets go of the interpreter during the call), and only then imports the worker. When pycuda opens the device, the
driver has started and the context exists, and retaining it again is immediate.

On the GPU machine the imports take about 0.4 s and the driver's start and the context about
0.3 s (bench/startup.py); side by side, the second costs nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import pickle
import threading
import time


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


def main() -> None:
    """The worker child (engine/children.py starts it for `Worker.start`, and for a spare worker
    in engine/standby.py: then the boot message holds no description, which comes once a run
    takes it)."""
    entered = time.time()
    from .children import connect

    conn = connect()
    try:
        boot = pickle.loads(conn.recv_bytes())  # plain values only: this imports no module
    except (EOFError, OSError):
        return  # the parent went away before it said how to start
    opening = start_device("cuda" if boot["backend"] == "auto" else boot["backend"], boot["device"])
    from .worker import run_child

    spec = pickle.loads(boot["spec"]) if boot.get("spec") is not None else None
    run_child(conn, spec, boot["log"], boot["spawned"], entered, opening,
              standby=(boot["backend"], boot["device"]) if spec is None else None)
