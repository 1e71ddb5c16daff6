"""Evaluation workers and compile processes started before a run asks for them.

A run's first result waits for its children to start: the evaluation worker's interpreter, its
modules (numpy, pycuda, the engine: 0.3-0.4 s on the GPU machine) and the device, and the compile
processes' NVRTC (0.3 s to its first build). None of that depends on the kernel. A program that
knows which device it will tune on starts them here, while it does what comes before the run
(reading the template, asking the agent, the user reading the dashboard), and the run takes them:

    standby("cuda", 0)          # `kerntune tune` and the app do this first
    ...
    TuneRun(template, options).run()   # its worker and compile processes are the ones started

A spare worker has opened the device and waits for the run's description; nothing of a run is
in it (no template, no inputs, no compiled kernel), so each run still starts from nothing of its
own. It holds the device's context (some memory on the device, no work). A spare nobody takes
ends with the program (`stand_down`, at exit, or when its pipe closes). `keep=True` starts a new
spare when a worker of that device ends, and once a replacement is ready after a kernel took one
down, so the next run's worker, and the next replacement, start at once.
"""

from __future__ import annotations

import atexit
import os
import pickle
import tempfile
import threading
import time
from typing import Any

from . import children
from .messages import Failed, Standing

# The compile processes to start for a spare CUDA device when the caller does not say: the pool's
# default (engine/children.py `default_jobs`).
DEFAULT = -1

# KERNTUNE_STANDBY=off: nothing is started ahead (a shared device where another idle context is
# not wanted); every run starts its own worker, as `standby` was never called.
ENV = "KERNTUNE_STANDBY"


def enabled() -> bool:
    return os.environ.get(ENV, "").strip().lower() not in ("off", "0", "no", "false")


class Spare:
    """A worker process started without a run: it opens the device, says so (messages.Standing with the
    backend it chose, the device's limits and the steps of its start), and waits for a run's
    description (engine/worker_boot.py, engine/worker.py `run_child`)."""

    def __init__(self, backend: str, device: int):
        self.backend = backend  # as asked: "cuda", "opencl" or "auto"
        self.device = device
        self.spawned = time.time()
        fd, self.log_path = tempfile.mkstemp(prefix="kerntune-worker-", suffix=".log")
        os.close(fd)
        self.popen, self.conn = children.start("kerntune.engine.worker_boot", "main")
        self.conn.send_bytes(pickle.dumps({"backend": backend, "device": device, "log": self.log_path,
                                           "spawned": self.spawned}))
        self.info: dict[str, Any] = {}  # the standby message: backend, limits, startup
        self.error = ""  # why it could not stand (its own message, or that it died)
        # Its first message is read here, in a thread: the caller goes on, and a compile process
        # waiting for the device's architecture hears it as soon as it is known.
        self._watch = threading.Thread(target=self._stand, name="kerntune-spare", daemon=True)
        self._watch.start()

    def _stand(self) -> None:
        try:
            msg = self.conn.recv()
        except (EOFError, OSError):
            self.error = "the spare worker ended before it opened the device"
            return
        if isinstance(msg, Standing):
            self.info = dict(msg.info)
        else:
            self.error = msg.text if isinstance(msg, Failed) else "the spare worker could not start"

    def wait(self, timeout: float | None = None) -> bool:
        """Whether it stands ready (False: still starting after `timeout`, or failed)."""
        self._watch.join(timeout)
        return not self._watch.is_alive() and not self.error

    @property
    def settled(self) -> bool:
        return not self._watch.is_alive()

    def chose(self) -> str:
        """The backend it opened ("" until it says)."""
        return str(self.info.get("backend", "")) if self.settled else ""

    def alive(self) -> bool:
        return self.popen.poll() is None

    def end(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait()
        self._watch.join(5)
        self.conn.close()
        try:
            os.unlink(self.log_path)
        except OSError:
            pass


_lock = threading.Lock()
_spares: list[Spare] = []
_compilers: list[Any] = []  # compile_process.CompileProcess, warmed or warming
_keep: set[tuple[str, int]] = set()
_warmers: list[threading.Thread] = []  # threads that warm compile processes once the device is known


def standby(backend: str, device: int = 0, *, compile_jobs: int = DEFAULT, arch: str | None = None,
            keep: bool = False) -> None:
    """Start a spare worker for `backend` ("cuda", "opencl" or "auto") device `device`, unless one
    stands for it already, and for CUDA `compile_jobs` compile processes warmed for `arch` (the
    device's own, "sm_90" and the like; None: the one the spare worker finds). Returns at once.
    Failures are quiet here: a spare that cannot start leaves the run to start its own, which says
    why."""
    if not enabled():
        return
    with _lock:
        if keep:
            _keep.add((backend, device))
        have = any(s.backend == backend and s.device == device and s.alive() for s in _spares)
    spare = None
    if not have:
        try:
            spare = Spare(backend, device)
        except OSError:
            return
        with _lock:
            _spares.append(spare)
    if backend == "opencl" or compile_jobs == 0:
        return
    if compile_jobs == DEFAULT:
        compile_jobs = children.default_jobs()
    if backend == "auto":  # compile processes only once the spare worker has chosen CUDA
        if spare is not None:
            _later(spare, compile_jobs)
        return
    with _lock:
        missing = compile_jobs - sum(1 for p in _compilers if p.popen.poll() is None)
    if missing > 0:
        started = _start_compilers(missing)
        if arch is not None:
            _warm(started, arch)
        elif spare is not None:
            _later(spare, 0, started)


def _start_compilers(n: int) -> list:
    from .compile_process import CompileProcess

    started = []
    for _ in range(n):
        try:
            started.append(CompileProcess())
        except OSError:
            break
    with _lock:
        _compilers.extend(started)
    return started


def _later(spare: Spare, jobs: int, started: list | None = None) -> None:
    """Once the spare worker knows its device: `jobs` compile processes started (where it chose
    CUDA), and those and `started` warmed for the device's architecture; in a thread."""
    def when_known() -> None:
        if not spare.wait() or spare.info.get("backend") != "cuda":
            return
        cc = str(spare.info.get("limits", {}).get("compute_capability", "")).replace(".", "")
        with _lock:
            missing = jobs - sum(1 for p in _compilers if p.popen.poll() is None)
        processes = list(started or []) + (_start_compilers(missing) if missing > 0 else [])
        if cc:
            _warm(processes, f"sm_{cc}")

    thread = threading.Thread(target=when_known, name="kerntune-spare-arch", daemon=True)
    thread.start()
    with _lock:
        _warmers.append(thread)


def _warm(processes: list, arch: str) -> None:
    with _lock:  # a process the run took already is warmed by the run
        for p in processes:
            if p in _compilers and not p.warmed:
                p.warm(arch)


def take_worker(backend: str, device: int, timeout: float = 30.0) -> Spare | None:
    """A spare worker for `backend` (as resolved: "cuda" or "opencl") device `device`, taken out of
    the standby; None when none stands for it. A spare started for "auto" is taken once it has
    said which backend it opened (waiting up to `timeout` for one still starting: it is sooner
    than a new one)."""
    with _lock:
        candidates = [s for s in _spares if s.device == device and s.backend in (backend, "auto")]
    for s in candidates:
        if s.backend == "auto":
            s.wait(timeout)
        if not s.alive() or (s.settled and s.error) or (s.backend == "auto" and s.chose() != backend):
            continue
        with _lock:
            if s not in _spares:
                continue  # another thread took it
            _spares.remove(s)
        return s
    return None


def take_compilers(n: int) -> list:
    """Up to `n` started compile processes, out of the standby."""
    with _lock:
        alive = [p for p in _compilers if p.popen.poll() is None]
        taken, rest = alive[:n], alive[n:]
        dead = [p for p in _compilers if p.popen.poll() is not None]
        _compilers[:] = rest
    for p in dead:
        p.close()
    return taken


def refill(backend: str, device: int) -> None:
    """When a worker of this device ends, or a replacement is ready: a new spare, where the
    program asked to keep one (`standby(..., keep=True)`) and none stands."""
    with _lock:
        wanted = [k for k in _keep if k[1] == device and k[0] in (backend, "auto")]
    for b, d in wanted:
        standby(b, d, compile_jobs=0)


def wait(timeout: float | None = None) -> bool:
    """Wait until every spare worker stands ready and every compile process is warm; whether they
    all are (False after `timeout`, or when one could not start). For benches, which start their
    clocks on spares as ready as the other tool's process is."""
    end = None if timeout is None else time.monotonic() + timeout
    left = (lambda: None) if end is None else (lambda: max(0.0, end - time.monotonic()))
    with _lock:
        spares, warmers = list(_spares), list(_warmers)
    ok = all([s.wait(left()) for s in spares])
    for thread in warmers:
        thread.join(left())
    with _lock:
        compilers = list(_compilers)
    for p in compilers:
        try:
            ok = p.settle(left()) and ok
        except (EOFError, OSError):
            ok = False
    return ok


def stand_down() -> None:
    """End every spare and compile process nobody took, and keep no more."""
    with _lock:
        spares, _spares[:] = list(_spares), []
        compilers, _compilers[:] = list(_compilers), []
        _keep.clear()
        _warmers.clear()
    for s in spares:
        s.end()
    for p in compilers:
        p.close()


def standing() -> tuple[int, int]:
    """(spare workers, compile processes) in the standby now."""
    with _lock:
        return len(_spares), len(_compilers)


atexit.register(stand_down)
