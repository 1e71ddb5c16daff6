"""Parallel compilation ahead of the device.

The compilers run in a pool of processes (NVRTC compiles in the calling process and holds it
while it does, nvcc in a subprocess of its own), so every core builds while the worker verifies
and times one configuration at a time. Binaries come back as bytes and are loaded by the worker.
A compiler that crashes its process costs that configuration a compile error, never the run: the
pool starts a new process and goes on. The processes are new interpreters that import only the
compiler's modules (engine/children.py, engine/compile_child.py).
"""

from __future__ import annotations

import os
import queue
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Mapping

from .children import default_jobs
from .backends import CompileError
from .compile_child import Compiled
from .compile_process import CompileProcess
from .space import compiler_defines
from .template import ParamValue, Template


class CompilePool:
    """Compiles configurations of one template for one CUDA architecture in `jobs` processes."""

    def __init__(self, template: Template, arch: str, jobs: int):
        self.template = template
        self.arch = arch
        self.source = template.source_for("cuda")
        self.options = template.options_for("cuda")
        self.jobs = jobs
        self._lock = threading.Lock()
        self._idle: queue.SimpleQueue[CompileProcess | None] = queue.SimpleQueue()
        self._started: list[CompileProcess] = []
        self._closed = False
        # Threads hand work to the processes and wait for it, so a crashed process is seen (and
        # its configuration retried once, in a new process) behind the Future the caller holds.
        self._threads = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="kerntune-compile")

    def _new(self) -> CompileProcess:
        try:
            p = CompileProcess()
        except OSError as e:
            raise CompileError(f"cannot start a compile process: {e}") from None
        self._started.append(p)
        return p

    def warm(self) -> None:
        """Start every process now, each loading the compiler and building an empty kernel, while
        the run starts the rest. Processes started ahead of the run (engine/standby.py) are taken
        first: they have loaded the compiler already."""
        from . import standby

        with self._lock:
            if self._closed:
                return
            for p in standby.take_compilers(self.jobs - len(self._started)):
                self._started.append(p)
                if p.warmed != self.arch:
                    p.warm(self.arch)
                self._idle.put(p)
            while len(self._started) < self.jobs:
                p = self._new()
                p.warm(self.arch)
                self._idle.put(p)

    def _take(self) -> CompileProcess:
        with self._lock:
            if self._closed:
                raise CompileError("the run has ended")
            try:
                p = self._idle.get_nowait()
            except queue.Empty:
                p = self._new() if len(self._started) < self.jobs else None
        if p is None:
            p = self._idle.get()
        if p is None:  # close() wakes the threads waiting for a process so
            raise CompileError("the run has ended")
        return p

    def submit(self, config: Mapping[str, ParamValue]) -> "Future[Compiled]":
        return self._threads.submit(self._build, compiler_defines(config))

    def _build(self, defines: Mapping[str, str]) -> Compiled:
        request = ("build", self.source, self.template.entry, dict(defines), self.options, self.arch)
        for attempt in range(2):
            p = self._take()
            try:
                kind, value = p.call(request)
            except (EOFError, OSError):  # the compiler took its process down: a new one, once
                with self._lock:
                    if p in self._started:
                        self._started.remove(p)
                    closed = self._closed
                p.close()
                if closed:
                    raise CompileError("the run has ended") from None
                continue
            with self._lock:
                if self._closed:
                    p.close()
                else:
                    self._idle.put(p)
            if kind == "ok":
                return value
            raise CompileError(value)
        raise CompileError("the compiler crashed its process (twice) on this configuration")

    def close(self) -> None:
        self._threads.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            self._closed = True
            started, self._started = self._started, []
        for p in started:
            p.stop()  # a thread waiting for its answer reads the end, and closes the pipe
        while True:
            try:
                p = self._idle.get_nowait()
            except queue.Empty:
                break
            if p is not None:
                p.close()
        for _ in range(self.jobs):
            self._idle.put(None)


__all__ = ["CompilePool", "Compiled", "CompileError", "default_jobs"]
