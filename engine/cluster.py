"""Evaluations on a Dask cluster: many hosts, each GPU a Dask worker.

`kerntune tune ... --cluster tcp://HOST:8786` connects to a running Dask scheduler. Every Dask
worker keeps one kerntune evaluation child (engine/worker.py) for the run, which compiles and
measures on the worker's own device; the configurations go out as Dask tasks and their results
stream back to the submitting host, the session's single writer. Dask does the scheduling, the
transport and the recovery: a worker lost mid-run has its tasks run again elsewhere, so nothing is
lost, and a result is delivered once, so nothing is recorded twice.

A worker's device is `--device` unless the worker's environment says `KERNTUNE_DEVICE` (the
usual set-up is a worker per GPU, each started with its own `CUDA_VISIBLE_DEVICES`, where the
device is 0). kerntune's evaluation child is a new interpreter (engine/children.py), not a
multiprocessing child, so Dask's daemonic workers may start it as they are.
"""

from __future__ import annotations

import os
import threading
import uuid
from dataclasses import replace
from typing import Any, Mapping

from .messages import Checked
from .result import Result
from .space import Config
from .worker import Worker, WorkerError, WorkerSpec

AT_WORKER = 2  # tasks at each Dask worker at once: the one it measures and the next


class ClusterError(RuntimeError):
    """The cluster cannot be used: Dask missing, the scheduler unreachable, no worker."""


def _distributed():
    try:
        import distributed
    except ImportError:
        raise ClusterError("--cluster needs Dask's distributed scheduler: pip install 'kerntune[cluster]'") from None
    return distributed


# on each Dask worker ------------------------------------------------------------------------------

_LOCK = threading.Lock()
_HERE: dict[str, Worker] = {}  # the run's token -> this Dask worker's evaluation child


def _local(spec: WorkerSpec, token: str, config_timeout: float) -> tuple[Worker, str]:
    """This Dask worker's evaluation child for the run `token` (started on first use; a child of
    an earlier run is closed), and the label results are marked with. Call with _LOCK held."""
    from distributed import get_worker

    device = int(os.environ.get("KERNTUNE_DEVICE", spec.device))
    label = f"{get_worker().address.split('://')[-1]}/{spec.backend}:{device}"
    worker = _HERE.get(token)
    if worker is None:
        for old in _HERE.values():
            old.close()
        _HERE.clear()
        worker = Worker(replace(spec, device=device), config_timeout=config_timeout)
        worker.start()
        _HERE[token] = worker
    return worker, label


def remote_start(spec: WorkerSpec, token: str, config_timeout: float) -> tuple[str, dict]:
    with _LOCK:
        worker, label = _local(spec, token, config_timeout)
        return label, dict(worker.info)


def remote_evaluate(spec: WorkerSpec, token: str, config_timeout: float,
                    config: Mapping[str, Any]) -> tuple[str, dict]:
    with _LOCK:
        worker, label = _local(spec, token, config_timeout)
        return label, worker.evaluate(config).to_dict()


def remote_verify(spec: WorkerSpec, token: str, config_timeout: float, config: Mapping[str, Any],
                  seeds: tuple[int, ...]) -> Checked:
    with _LOCK:
        worker, _ = _local(spec, token, config_timeout)
        return worker.verify_again(config, seeds)


def remote_close(token: str) -> None:
    with _LOCK:
        worker = _HERE.pop(token, None)
        if worker is not None:
            worker.close()


# on the submitting host -----------------------------------------------------------------------

class ClusterEvaluations:
    """The Evaluations interface (engine/driver.py) over a Dask cluster."""

    def __init__(self, address: str, spec: WorkerSpec, config_timeout: float = 120.0,
                 client: Any = None, start_timeout: float = 60.0, connect_timeout: float = 10.0):
        d = _distributed()
        self.spec = spec
        self.config_timeout = config_timeout
        self.start_timeout = start_timeout
        self.token = uuid.uuid4().hex
        self._own_client = client is None
        if client is None:
            try:
                client = d.Client(address, timeout=connect_timeout)
            except (OSError, TimeoutError) as e:
                raise ClusterError(f"cannot reach the Dask scheduler at {address}: {e}") from None
        self.client = client
        self.labels: list[str] = []
        self.info: dict = {}
        self.capacity = AT_WORKER
        self._done = d.as_completed()
        self._configs: dict[str, Config] = {}
        self._futures: dict[str, Any] = {}
        self.where: dict[Config, str] = {}  # the Dask worker that measured each configuration

    def _args(self) -> tuple:
        return self.spec, self.token, self.config_timeout

    def _workers(self) -> list[str]:
        return sorted(self.client.scheduler_info().get("workers", {}))

    def start(self) -> None:
        """Start an evaluation child on every Dask worker (inputs, references, calibration)."""
        try:
            self.client.wait_for_workers(1, timeout=self.start_timeout)
        except (TimeoutError, OSError):
            raise ClusterError(f"the cluster has no worker (waited {self.start_timeout:.0f} s)") from None
        workers = self._workers()
        futures = [self.client.submit(remote_start, *self._args(), workers=[w], allow_other_workers=False,
                                      pure=False, key=f"kerntune-start-{self.token}-{n}")
                   for n, w in enumerate(workers)]
        started = []
        for w, f in zip(workers, futures):
            try:
                started.append(f.result())
            except (WorkerError, ClusterError) as e:
                raise WorkerError(f"{e} (Dask worker {w})") from None
            except Exception as e:  # noqa: BLE001 - whatever the cluster raised, in one line
                raise WorkerError(f"Dask worker {w} could not start: {type(e).__name__}: {e}") from None
        self.labels = [label for label, _ in started]
        self.info = started[0][1]
        self.capacity = AT_WORKER * len(workers)
        self.devices = len(workers)

    def submit(self, config: Config) -> None:
        key = f"kerntune-eval-{self.token}-{len(self._configs)}-{uuid.uuid4().hex[:8]}"
        future = self.client.submit(remote_evaluate, *self._args(), config.as_dict(), pure=False, key=key)
        self._configs[key] = config
        self._futures[key] = future
        self._done.add(future)

    def collect(self) -> tuple[Config, Result]:
        future = next(self._done)
        config = self._configs.pop(future.key)
        self._futures.pop(future.key, None)
        try:
            label, data = future.result()
        except Exception as e:  # noqa: BLE001 - a task the cluster gave up on is that configuration's result
            return config, Result(config=config.as_dict(), status="crashed",
                                  message=f"the cluster could not evaluate it: {type(e).__name__}: {e}")
        self.where[config] = label
        return config, replace(Result.from_dict(data), device=label)

    def _on(self, config: Config | None) -> dict:
        """Task options that send a follow-up to the worker that measured `config`, if it is there."""
        label = self.where.get(config) if config is not None else None
        alive = {w.split("://")[-1]: w for w in self._workers()}
        address = alive.get(label.split("/")[0]) if label else None
        return {"workers": [address], "allow_other_workers": True} if address else {}

    def verify_again(self, config: Config, seeds: tuple[int, ...]) -> Checked:
        future = self.client.submit(remote_verify, *self._args(), config.as_dict(), tuple(seeds), pure=False,
                                    key=f"kerntune-verify-{self.token}-{uuid.uuid4().hex[:8]}", **self._on(config))
        try:
            return future.result()
        except Exception as e:  # noqa: BLE001
            return Checked(False, "crashed", f"the cluster could not check it again: {type(e).__name__}: {e}")

    def retime(self, config: Config) -> list[tuple[str, Result]]:
        """`config` measured again on every Dask worker: (device, result) each."""
        out = []
        for n, w in enumerate(self._workers()):
            future = self.client.submit(remote_evaluate, *self._args(), config.as_dict(), workers=[w],
                                        allow_other_workers=False, pure=False,
                                        key=f"kerntune-retime-{self.token}-{n}")
            try:
                label, data = future.result()
                out.append((label, replace(Result.from_dict(data), device=label)))
            except Exception as e:  # noqa: BLE001
                out.append((w, Result(config=config.as_dict(), status="crashed", message=str(e), device=w)))
        return out

    def close(self) -> None:
        try:
            for future in self._futures.values():
                future.cancel()
            self.client.run(remote_close, self.token)
        except Exception:  # noqa: BLE001 - a cluster already gone has nothing to close
            pass
        if self._own_client:
            try:
                self.client.close()
            except Exception:  # noqa: BLE001
                pass
