"""What a compile process runs: a light module, so that a new process imports only the compiler's
own modules (not numpy, not the engine's) before its first configuration. `serve` is the
process's loop (engine/children.py starts it for engine/compile_pool.py)."""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass
from typing import Mapping


@dataclass(frozen=True)
class Compiled:
    """A binary built ahead, with what the compiler reported."""

    binary: bytes
    info: Mapping[str, int]
    cached: bool
    seconds: float


def build(source: str, entry: str, defines: Mapping[str, str], options: tuple, arch: str) -> Compiled:
    """One configuration, in a pool process."""
    from .backends.cuda_toolchain import compile_cubin  # only the CUDA path builds ahead

    t0 = time.perf_counter()
    cubin, info, cached = compile_cubin(source, entry, defines, options, arch)
    return Compiled(cubin, info, cached, time.perf_counter() - t0)


def warm(arch: str) -> str:
    """Load the compiler in a pool process and build an empty kernel (its first configuration
    then compiles at once)."""
    from .backends.cuda_toolchain import warm_compiler

    return warm_compiler(arch)


def serve() -> None:
    """Requests from the pipe, one at a time: ("warm", arch) or ("build", source, entry, defines,
    options, arch). Answers ("ok", value), ("compile_error", message) or ("error", message)."""
    from .backends import CompileError
    from .children import connect

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the run stops its compile processes itself
    conn = connect()
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return
        try:
            reply = ("ok", warm(*request[1:]) if request[0] == "warm" else build(*request[1:]))
        except CompileError as e:
            reply = ("compile_error", str(e))
        except Exception as e:  # the compiler's own failure: that configuration's compile error
            reply = ("error", f"{type(e).__name__}: {e}")
        conn.send(reply)
