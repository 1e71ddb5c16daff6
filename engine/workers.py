"""Evaluations on this host: one worker per device, fed by one pool compiling ahead.

Each device has its own evaluation child (engine/worker.py) with up to two configurations at it,
so that while it measures one the next is already there. Compilation (CUDA) runs ahead in a
process pool shared by all devices; a configuration that fails to compile never reaches a device.
Results come back in the order they finish, each marked with the device that measured it when
there are several.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future
from concurrent.futures import wait as futures_wait
from dataclasses import replace
from multiprocessing.connection import wait as wait_for
from typing import Sequence

from .backends import CompileError
from .compile_pool import CompilePool
from .messages import Checked
from .result import Result
from .space import Config
from .worker import Worker, WorkerError, WorkerSpec

AT_DEVICE = 2  # configurations at one device at once: the one it measures and the next


class Workers:
    """A worker per device; `capacity` covers every device's two and the compilation ahead."""

    def __init__(self, specs: Sequence[WorkerSpec], pool: CompilePool | None = None,
                 config_timeout: float = 120.0, labels: Sequence[str] | None = None):
        if not specs:
            raise ValueError("no device to evaluate on")
        self.workers = [Worker(s, config_timeout=config_timeout) for s in specs]
        # the device each result is marked with; none with one device (its sessions stay as they were)
        self.labels = list(labels) if labels is not None else _labels(specs)
        self.pool = pool
        self.capacity = AT_DEVICE * len(self.workers) + (2 * pool.jobs if pool is not None else 0)
        self.devices = len(self.workers)
        self._waiting: deque[tuple[Config, Future | None]] = deque()  # compiling, not yet at a device
        self._sent: list[deque[Config]] = [deque() for _ in self.workers]
        self._ready: deque[tuple[Config, Result]] = deque()  # failed to compile: no device needed
        self.where: dict[Config, int] = {}  # the worker that measured each configuration
        self._started = True  # every worker ready (or none started yet)

    # start and stop ------------------------------------------------------------------------------
    def start(self) -> None:
        """Start every device's worker and the compile processes, without waiting: while the
        workers open their devices, draw inputs and calibrate, the first configurations compile.
        The first call that needs a worker waits for all of them (`started`)."""
        for w in self.workers:
            w.start(wait=False)
        self._started = False
        if self.pool is not None:
            self.pool.warm()

    def started(self) -> None:
        """Wait until every worker is ready; WorkerError, naming the device, when one is not."""
        if self._started:
            return
        self._started = True
        for i, w in enumerate(self.workers):
            try:
                w.wait_ready()
            except WorkerError as e:
                where = f" on {self.labels[i]}" if self.labels[i] else ""
                raise WorkerError(f"{e}{where}") from None

    @property
    def info(self) -> dict:
        """What the first worker found when it started ({} until it is ready)."""
        return self.workers[0].info

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
        for w in self.workers:
            w.close()

    # the Evaluations interface -------------------------------------------------------------------
    def submit(self, config: Config) -> None:
        future = self.pool.submit(config.as_dict()) if self.pool is not None else None
        self._waiting.append((config, future))
        self._feed(block=False)

    def collect(self) -> tuple[Config, Result]:
        self.started()
        while True:
            if self._ready:
                return self._ready.popleft()
            # a device with nothing to do waits for the next compilation; otherwise only what is built goes
            self._feed(block=any(not s for s in self._sent))
            if self._ready:
                continue
            for i, w in enumerate(self.workers):
                if self._sent[i] and w.ready():
                    return self._result(i)
            busy = [i for i, s in enumerate(self._sent) if s]
            if not busy:
                if not self._waiting:
                    raise RuntimeError("collect() with nothing submitted")
                continue
            deadline = min(self.workers[i].deadline for i in busy)
            # wake for a result, a deadline, or (while something compiles) to feed a device again
            timeout = max(0.0, deadline - time.perf_counter())
            if self._waiting:
                timeout = min(timeout, 0.005)
            conns = [c for c in (self.workers[i].connection for i in busy) if c is not None]
            if conns:
                wait_for(conns, timeout)

    def _result(self, i: int) -> tuple[Config, Result]:
        config = self._sent[i].popleft()
        result = self.workers[i].result()
        if self.labels[i]:
            result = replace(result, device=self.labels[i])
        self.where[config] = i
        self._feed(block=False)
        return config, result

    def _feed(self, block: bool) -> None:
        """Send built configurations to the least busy device with room, in the order their
        compilation ends (a slow one holds up no device); with `block`, wait for the next one to
        be built when a device has nothing. A configuration that failed to compile becomes a
        result at once."""
        while self._waiting:
            i = min(range(len(self.workers)), key=lambda k: len(self._sent[k]))
            if len(self._sent[i]) >= AT_DEVICE:
                return
            n = next((k for k, (_, f) in enumerate(self._waiting) if f is None or f.done()), None)
            if n is None:
                if not (block and not self._sent[i]):
                    return
                futures_wait([f for _, f in self._waiting], return_when=FIRST_COMPLETED)
                continue
            config, future = self._waiting[n]
            del self._waiting[n]
            if future is None:
                self.workers[i].submit(config.as_dict())
            else:
                try:
                    built = future.result()
                except CompileError as e:
                    self._ready.append((config, Result(config=config.as_dict(), status="compile_error",
                                                       message=str(e))))
                    continue
                self.workers[i].submit(config.as_dict(), (built.binary, dict(built.info), built.cached,
                                                          built.seconds))
            self._sent[i].append(config)

    # after the search ----------------------------------------------------------------------------
    def worker_for(self, config: Config) -> Worker:
        """The worker whose module measured `config` (the first when none did)."""
        return self.workers[self.where.get(config, 0)]

    def verify_again(self, config: Config, seeds: tuple[int, ...]) -> Checked:
        self.started()
        return self.worker_for(config).verify_again(config.as_dict(), seeds)

    def paired(self, request, where: Config) -> dict:
        """The leaders and the original timed together on the device that measured `where` (the
        fastest): engine/retime.py's rounds, as the worker answers them."""
        self.started()
        return self.worker_for(where).paired(request)

    def retime(self, config: Config) -> list[tuple[str, Result]]:
        """`config` measured again on every device, all at once: (device, result) each."""
        self.started()
        out: list[Result | None] = [None] * len(self.workers)

        def measure(i: int) -> None:
            out[i] = self.workers[i].evaluate(config.as_dict())

        threads = [threading.Thread(target=measure, args=(i,), daemon=True) for i in range(len(self.workers))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return [(label, r if r is not None else Result(config=config.as_dict(), status="crashed",
                                                       message="no result", device=label))
                for label, r in zip(self.labels, out)]


def _labels(specs: Sequence[WorkerSpec]) -> list[str]:
    """`cuda:0`, `cuda:1`, ...; a device listed again is told apart (`opencl:0#2`); "" for one."""
    if len(specs) == 1:
        return [""]
    out: list[str] = []
    for s in specs:
        label = f"{s.backend}:{s.device}"
        n = sum(1 for x in out if x == label or x.startswith(label + "#")) + 1
        out.append(label if n == 1 else f"{label}#{n}")
    return out
