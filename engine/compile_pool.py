"""Parallel compilation ahead of the device.

The compilers run in a pool of processes (NVRTC compiles in the calling process and holds it
while it does, nvcc in a subprocess of its own), so every core builds while the worker verifies
and times one configuration at a time. Binaries come back as bytes and are loaded by the worker.
A compiler that crashes its process costs that configuration a compile error, never the run: the
pool starts new processes and goes on.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import threading
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Mapping

from .backends import CompileError
from .compile_child import Compiled, build, warm
from .space import compiler_defines
from .template import ParamValue, Template


def default_jobs() -> int:
    """Compile processes: every core but those the evaluation worker, the run itself and the
    driver need (on the H200's 16 cores, 13 build 1.5x more configurations per second than 16)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, cores - 3 if cores >= 8 else cores - 1 if cores >= 4 else cores)


class CompilePool:
    """Compiles configurations of one template for one CUDA architecture in `jobs` processes."""

    def __init__(self, template: Template, arch: str, jobs: int):
        self.template = template
        self.arch = arch
        self.source = template.source_for("cuda")
        self.options = tuple(template.compile_options.get("cuda", ()))
        self.jobs = jobs
        self._lock = threading.Lock()
        self._procs = self._new_processes()
        # Threads hand work to the processes and wait for it, so a crashed process is seen (and
        # its configuration retried once) behind the Future the caller holds.
        self._threads = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="kerntune-compile")

    def _new_processes(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(max_workers=self.jobs, mp_context=mp.get_context("spawn"))

    def warm(self) -> None:
        """Start every process now, each loading the compiler, while the run starts the rest."""
        for _ in range(self.jobs):
            self._procs.submit(warm)

    def submit(self, config: Mapping[str, ParamValue]) -> "Future[Compiled]":
        return self._threads.submit(self._build, compiler_defines(config))

    def _build(self, defines: Mapping[str, str]) -> Compiled:
        for attempt in range(2):
            procs = self._procs
            try:
                return procs.submit(build, self.source, self.template.entry, defines, self.options,
                                    self.arch).result()
            except BrokenProcessPool:
                with self._lock:
                    if self._procs is procs:
                        procs.shutdown(wait=False, cancel_futures=True)
                        self._procs = self._new_processes()
        raise CompileError("the compiler crashed its process (twice) on this configuration")

    def close(self) -> None:
        self._threads.shutdown(wait=False, cancel_futures=True)
        self._procs.shutdown(wait=False, cancel_futures=True)


__all__ = ["CompilePool", "Compiled", "CompileError", "default_jobs"]
