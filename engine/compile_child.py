"""What a compile process runs: a light module, so that a new process imports only the compiler's
own modules (not numpy, not the engine's) before its first configuration."""

from __future__ import annotations

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


def warm() -> str:
    """Load the compiler in a pool process (its first configuration then compiles at once)."""
    from .backends.cuda_toolchain import nvrtc_version

    return nvrtc_version()
