"""Parallel compilation ahead of the device.

nvcc runs in subprocesses, so a thread pool keeps every core busy while the worker verifies and
times one configuration at a time. Binaries come back as bytes and are loaded by the worker.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Mapping

from .backends import CompileError
from .template import ParamValue, Template


@dataclass(frozen=True)
class Compiled:
    """A binary built ahead, with what the compiler reported."""

    binary: bytes
    info: Mapping[str, int]
    cached: bool
    seconds: float


def default_jobs() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


class CompilePool:
    """Compiles configurations of one template for one CUDA architecture on `jobs` threads."""

    def __init__(self, template: Template, arch: str, jobs: int):
        from .backends.cuda import compile_cubin  # only the CUDA path builds ahead

        self._compile = compile_cubin
        self.template = template
        self.arch = arch
        self.source = template.source_for("cuda")
        self.options = tuple(template.compile_options.get("cuda", ()))
        self.jobs = jobs
        self._pool = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="kerntune-nvcc")

    def submit(self, config: Mapping[str, ParamValue]) -> "Future[Compiled]":
        defines = {k: ("1" if v is True else "0" if v is False else str(v)) for k, v in config.items()}
        return self._pool.submit(self._build, defines)

    def _build(self, defines: Mapping[str, str]) -> Compiled:
        t0 = time.perf_counter()
        cubin, info, cached = self._compile(self.source, self.template.entry, defines, self.options, self.arch)
        return Compiled(cubin, info, cached, time.perf_counter() - t0)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


__all__ = ["CompilePool", "Compiled", "CompileError", "default_jobs"]
