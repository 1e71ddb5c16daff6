"""Evaluation in a child process that owns the device context.

A kernel that faults or hangs kills only the child: the parent records `crashed` or `timeout`
for that configuration, starts a new child when the next one comes, and goes on.
"""

from __future__ import annotations

import math
import os
from collections import deque
import pickle
import subprocess
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

from . import children, disturb, retime, standby
from .evaluate import Evaluator, TimingPolicy, VerifyPolicy
from .input_sets import ReferenceFailed
from .messages import (Checked, Evaluate, Evaluated, Failed, Pair, Paired, Ready, Reproduce, Reproduced, Standing,
                       Stop, VerifyAgain)
from .result import Result, config_key
from .template import Problem, parse_template, stray_references


class WorkerError(RuntimeError):
    """The worker could not start (no device, a broken reference): nothing can be evaluated."""


class ReferenceStopped(WorkerError):
    """The template's reference failed (raised or ran past its time limit) on inputs drawn during
    the search: no later configuration could be checked, so the run stops there."""


@dataclass(frozen=True)
class WorkerSpec:
    """Everything the child needs to rebuild the evaluator; plain, picklable data."""

    backend: str
    device: int
    spec_path: str
    spec_text: str
    sources: Mapping[str, str]
    problem_name: str
    problem: Mapping[str, int]
    seed: int = 0
    timing: TimingPolicy = field(default_factory=TimingPolicy)
    verify: VerifyPolicy = field(default_factory=VerifyPolicy)
    peaks: tuple[float, float, str] | None = None
    peaks_spread: float = 0.0
    # Verification sizes the engine adds to the template's own (an odd size; see tune.odd_problem)
    extra_problems: tuple[tuple[str, Mapping[str, int]], ...] = ()
    # A worker that only checks a template against its original (the gate, `reproduces_original`):
    # it draws no input sets ahead and calibrates nothing, since it times nothing.
    check_only: bool = False


# Loaded modules kept for the final re-check, fastest first: the winner is checked again in the
# module it was timed in, where any state it keeps across launches still is.
KEEP_KERNELS = 16


def run_child(conn: Any, spec: WorkerSpec | None, log_path: str, spawned: float = 0.0, entered: float = 0.0,
              opening: threading.Thread | None = None, standby: tuple[str, int] | None = None) -> None:
    # `spawned`: the parent's wall clock when it started this process, `entered`: when the child's
    # entry point (worker_boot.main) began, `opening`: the thread starting the device meanwhile.
    # The ready message reports each step of the start. A spare (engine/standby.py) has no `spec`
    # yet: `standby` is the (backend, device) it opens before a run sends its description.
    now = time.time()
    startup = {"process": max(0.0, entered - spawned), "modules": max(0.0, now - entered)} if spawned else {}
    if opening is not None:
        opening.join()
        startup["device start, beside the modules"] = max(0.0, time.time() - now)
    # KERNTUNE_PROFILE=DIR: the child's own cProfile statistics go to DIR/worker-PID.prof when it
    # ends (bench/throughput.py --profile reads them), to see where a configuration's time goes.
    where = os.environ.get("KERNTUNE_PROFILE")
    if not where:
        return _serve(conn, spec, log_path, startup, standby)
    import cProfile

    prof = cProfile.Profile()
    try:
        prof.runcall(_serve, conn, spec, log_path, startup, standby)
    finally:
        prof.dump_stats(os.path.join(where, f"worker-{os.getpid()}.prof"))


def _serve(conn: Any, spec: WorkerSpec | None, log_path: str, startup: dict[str, float] | None = None,
           standby: tuple[str, int] | None = None) -> None:
    # Compilers and drivers write to fd 2; keep it off the user's terminal (and the dashboard).
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(fd, 2)
    warnings.simplefilter("ignore")
    startup = dict(startup or {})
    mark = time.perf_counter()

    def step(name: str) -> None:  # seconds of each step of the start, for the run's notes
        nonlocal mark
        now = time.perf_counter()
        startup[name] = now - mark
        mark = now

    ahead: dict[str, float] = {}
    try:
        from .backends import open_backend

        if spec is None:  # a spare: the device now, the run's description when a run takes it
            backend, spec, ahead = _stand(conn, standby or ("auto", 0), startup)
            if spec is None:
                return
            startup, mark = {}, time.perf_counter()
        else:
            backend = open_backend(spec.backend, spec.device)
            step("device")
        if spec.peaks is not None:
            backend.limits = backend.limits.with_peaks(*spec.peaks, spread=spec.peaks_spread)
        template = parse_template(spec.spec_text, Path(spec.spec_path), spec.sources)
        problem = Problem(spec.problem_name, dict(spec.problem))
        extra = tuple(Problem(name, dict(values)) for name, values in spec.extra_problems)
        ev = Evaluator(backend, template, problem, seed=spec.seed, timing=spec.timing, verify=spec.verify,
                       extra_problems=extra)
        calibration = {}
        if not spec.check_only:
            ev.prepare()
            step("inputs and references")
            calibration = ev.calibrate()
            step("calibration")
            ev.sets.draw_ahead()  # the rest of each size's input sets, while the first configurations run
    except Exception as e:  # reported to the parent as one line; the run cannot go on without it
        conn.send(Failed(f"{type(e).__name__}: {e}"))
        return
    conn.send(Ready({"limits": backend.limits.to_dict(), "cold_cache": ev.cold_cache,
                         "flush_bytes": backend.flush_bytes(), "calibration": calibration,
                         "scale": dict(ev.scale), "spare": {k: v[0] for k, v in ev.spare.items()},
                         "hard": ev.hard_note, "startup": startup, "ahead": ahead,
                         "fenced": bool(getattr(backend, "fenced", False)),
                         "unfenced": str(getattr(backend, "unfenced", ""))}))
    kept: dict[str, tuple[float, Any]] = {}  # config key -> (median, loaded kernel)
    watch = disturb.watch_for(backend, spec.device) if not spec.check_only else None
    steady = disturb.Steadier(watch)
    while True:
        try:
            msg = conn.recv()
        except (EOFError, KeyboardInterrupt):
            if watch is not None:
                watch.close()
            return
        if isinstance(msg, Evaluate):
            config, built = dict(msg.config), msg.built
            t0 = time.monotonic()
            kernel = None
            try:
                if built is None:
                    result = ev.evaluate(config)
                    kernel = ev.last_kernel
                else:
                    binary, info, cached, seconds = built
                    try:
                        kernel = backend.load(binary, template.entry, info, cached)
                    except Exception as e:  # a binary that does not load is that config's compile error
                        result = Result(config=config, status="compile_error", message=str(e), compile_s=seconds)
                    else:
                        result = ev.evaluate(config, kernel=kernel, compile_s=seconds, cached=cached)
            except ReferenceFailed as e:  # the template's, not the configuration's: the run stops
                conn.send(Failed(" ".join(f"{e}, on inputs drawn during the search".split())[:1000]))
                return _end(ev, backend, watch)
            # measured again when disturbed, above its speed of light or spread out (engine/disturb.py)
            result = steady.settle(result, t0, lambda r: ev.measure_again(r, kernel))
            if result.ranked:
                _keep(kept, config_key(config), float(result.median_us), kernel)
            # a fault leaves a CUDA context unusable, and a write out of bounds may have reached
            # what the checks compare with: this worker ends, the next one starts fresh
            cuda = backend.name == "cuda"
            # a failure found with the worker's own references, pristine inputs or guard patterns
            # changed (a stray write of an earlier configuration) is measured again in a fresh one
            again = result.status in ("wrong_result", "wrote_input", "out_of_bounds") and not ev.intact()
            ending = (cuda and result.status in ("launch_error", "out_of_bounds")) or stray_references() > 0
            conn.send(Evaluated(result.to_dict(), ending or again, again))
            if ending:
                return
        elif isinstance(msg, VerifyAgain):
            held = kept.get(config_key(msg.config))
            try:
                checked = ev.check_again(msg.config, tuple(msg.seeds), kernel=held[1] if held else None)
            except Exception as e:  # the template's reference on the new inputs: no verdict on the configuration
                checked = Checked(False, "", f"the check on new inputs could not run: {_one_line(e)}")
            # a reference call given up on still runs in this process: it ends, and with it the call
            ending = stray_references() > 0
            conn.send(replace(checked, ending=ending))
            if ending:
                return _end(ev, backend, watch)
        elif isinstance(msg, Pair):  # the leaders and the original timed together (engine/retime.py)
            try:
                reply = retime.paired_rounds(ev, msg.request, {k: v[1] for k, v in kept.items()},
                                             watch.during if watch is not None else None)
            except Exception as e:  # the rounds' own failure: the run keeps its per-configuration times
                reply = {"error": f"{type(e).__name__}: {e}"}
            conn.send(Paired(reply))
        elif isinstance(msg, Reproduce):
            try:
                ok, worst, text = ev.reproduces_original(msg.config, tuple(msg.seeds))
            except Exception as e:  # the template's own code (its reference, its shapes): a failed check
                ok, worst, text = False, math.inf, _one_line(e)
            ending = stray_references() > 0
            conn.send(Reproduced(ok, worst, text, ending))
            if ending:
                return _end(ev, backend, watch)
        else:
            return _end(ev, backend, watch)


def _end(ev: Evaluator, backend: Any, watch: Any) -> None:
    """The worker's end: no more sets drawn ahead, the device let go."""
    ev.sets.stop_drawing()
    if watch is not None:
        watch.close()
    backend.close()


def _one_line(e: BaseException) -> str:
    """An exception from the template's own code as one line."""
    return " ".join(f"{type(e).__name__}: {e}".split())[:1000]


def _stand(conn: Any, where: tuple[str, int], startup: dict[str, float]) -> tuple[Any, WorkerSpec | None, dict]:
    """A spare's wait: open the device (the backend `auto` chooses, where asked), say so, and read
    the run's description. Returns the backend opened, the description (None when the program
    ends first) and the steps of its start with the seconds it waited (the ready message's
    `ahead`). An error opening the device goes up (the error message)."""
    from .backends import auto_backend, open_backend

    name, device = where
    mark = time.perf_counter()
    if name == "auto":
        name, _ = auto_backend()
    backend = open_backend(name, device)
    ahead = dict(startup)
    ahead["device"] = time.perf_counter() - mark
    warm = backend.warm if backend.capabilities.warm else None
    if warm is not None:  # the engine's own kernels built, the compiler loaded: nothing of a run's
        mark = time.perf_counter()
        try:
            warm()
        except Exception:  # built again, and reported, when the run needs them
            pass
        ahead["engine kernels"] = time.perf_counter() - mark
    conn.send(Standing({"backend": name, "device": device, "limits": backend.limits.to_dict(),
                        "startup": dict(ahead)}))
    stood = time.perf_counter()
    try:
        spec = pickle.loads(conn.recv_bytes())
    except (EOFError, OSError, KeyboardInterrupt):
        backend.close()
        return backend, None, {}
    ahead["waited"] = time.perf_counter() - stood
    return backend, spec, ahead


def _keep(kept: dict[str, tuple[float, Any]], key: str, median: float, kernel: Any) -> None:
    kept[key] = (median, kernel)
    if len(kept) > KEEP_KERNELS:
        slowest = max(kept, key=lambda k: kept[k][0])
        del kept[slowest]


class _Child:
    """The worker's process, as the parent handles it."""

    def __init__(self, popen: subprocess.Popen):
        self.popen = popen

    def is_alive(self) -> bool:
        return self.popen.poll() is None

    def kill(self) -> None:
        self.popen.kill()

    def join(self, timeout: float | None = None) -> None:
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            pass

    @property
    def exitcode(self) -> int | None:
        return self.popen.returncode  # negative: the signal that ended it, as multiprocessing says


class Worker:
    """The parent's handle on the evaluation child; restarts it after a crash or a timeout."""

    def __init__(self, spec: WorkerSpec, config_timeout: float = 120.0, start_timeout: float = 600.0):
        self.spec = spec
        self.config_timeout = config_timeout
        self.start_timeout = start_timeout
        self._proc: Any = None
        self._conn: Any = None
        # Evaluations sent and not answered, oldest first: the parent sends the next one before it
        # handles a result, so the device never waits for the parent.
        self._pending: deque[Evaluate] = deque()
        self._head_since = 0.0  # when the oldest pending evaluation became the one running
        self._starting = 0.0  # when a child started without waiting began, until it is ready
        self._spare: Any = None  # the spare taken (engine/standby.py), until its start is read
        self._head_log = 0
        self.restarts = 0
        self._starts = 0
        self.info: dict = {}
        fd, self.log_path = tempfile.mkstemp(prefix="kerntune-worker-", suffix=".log")
        os.close(fd)

    def start(self, wait: bool = True) -> None:
        """Start the child. With `wait` False this returns at once: the child opens the device,
        draws its inputs and calibrates while the caller goes on (configurations compile, and may
        already be sent); the first call that needs an answer waits for it to be ready and raises
        WorkerError when it could not start. A spare worker for this device, started ahead of the
        run (engine/standby.py), is taken where one stands."""
        self._starts += 1
        if not self._adopt():
            spawned = time.time()
            # A new interpreter whose entry point is a light module (engine/worker_boot.py): it
            # starts the device while the worker's modules load, and imports nothing of the parent's.
            try:
                popen, parent = children.start("kerntune.engine.worker_boot", "main")
            except OSError as e:
                raise WorkerError(f"cannot start the worker's process: {e}") from None
            parent.send_bytes(pickle.dumps({"backend": self.spec.backend, "device": self.spec.device,
                                            "spec": pickle.dumps(self.spec), "log": self.log_path,
                                            "spawned": spawned}))
            self._proc = _Child(popen)
            self._conn = parent
        self._starting = time.perf_counter()
        if wait:
            self.wait_ready()

    def _adopt(self) -> bool:
        """Take a spare worker of this device and send it the run's description; whether one was."""
        spare = standby.take_worker(self.spec.backend, self.spec.device)
        if spare is None:
            return False
        try:
            spare.conn.send_bytes(pickle.dumps(self.spec))
        except OSError:
            spare.end()
            return False
        try:
            os.unlink(self.log_path)
        except OSError:
            pass
        self.log_path = spare.log_path  # its stderr goes there already
        self._proc, self._conn, self._spare = _Child(spare.popen), spare.conn, spare
        return True

    def wait_ready(self) -> None:
        """Wait for a started child's first message: ready (with what it found), or why not."""
        if not self._starting:
            return
        parent, since, spare = self._conn, self._starting, self._spare
        self._starting, self._spare = 0.0, None
        left = lambda: max(0.0, self.start_timeout - (time.perf_counter() - since))  # noqa: E731
        if spare is not None and not spare.wait(left()) and not spare.settled:
            self._kill()
            raise WorkerError(f"the worker did not start within {self.start_timeout:.0f} s")
        if spare is not None and spare.error:
            self._kill()
            raise WorkerError(f"{spare.error}{self._log_tail()}")
        if not parent.poll(left()):
            self._kill()
            raise WorkerError(f"the worker did not start within {self.start_timeout:.0f} s")
        try:
            msg = parent.recv()
        except (EOFError, OSError):
            code = self._kill()
            raise WorkerError(f"the worker died while starting ({_exit_text(code)}){self._log_tail()}") from None
        if isinstance(msg, Failed):
            self._kill()
            raise WorkerError(msg.text)
        self.info = dict(msg.info)
        # configurations sent while it started: the oldest one's time runs from now
        self._head_since = time.perf_counter()
        # where the program keeps a spare for this device and a kernel has taken a worker down
        # already (it may again), the next replacement starts now, once this one is ready
        if self.restarts:
            standby.refill(self.spec.backend, self.spec.device)

    def _ensure(self) -> None:
        if self._proc is None or not self._proc.is_alive():
            if self._starts:
                self.restarts += 1
            self.start()

    def _kill(self) -> int | None:
        proc, self._proc = self._proc, None
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if proc is None:
            return None
        if proc.is_alive():
            proc.kill()
        proc.join(10)
        return proc.exitcode

    def _log_tail(self, lines: int = 3) -> str:
        try:
            text = Path(self.log_path).read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        tail = [l for l in text if l.strip()][-lines:]
        return (": " + " | ".join(tail))[:400] if tail else ""

    def _call(self, msg: Any, timeout: float | None = None) -> tuple[str, Any]:
        """Send a request; ('timeout', s), ('crashed', text) or the child's reply (within
        `timeout` seconds, config_timeout unless given)."""
        while self._pending:  # answers come in order: earlier evaluations first
            self.result()
        self._ensure()
        self.wait_ready()
        log_size = _size(self.log_path)
        t0 = time.perf_counter()
        self._conn.send(msg)
        if not self._conn.poll(self.config_timeout if timeout is None else timeout):
            self._kill()
            return "timeout", time.perf_counter() - t0
        try:
            return "reply", self._conn.recv()
        except (EOFError, OSError):
            code = self._kill()
            detail = _read_from(self.log_path, log_size)
            return "crashed", self._died(code, detail)

    def evaluate(self, config: Mapping[str, Any], built: tuple | None = None) -> Result:
        """Evaluate one configuration; `built` is (binary, info, cached, seconds) from the pool."""
        self.submit(config, built)
        return self.result()

    def submit(self, config: Mapping[str, Any], built: tuple | None = None) -> None:
        """Send a configuration to evaluate; results come back in order from `result`."""
        if not self._pending or self._conn is None:
            self._ensure()  # a child that died with evaluations pending is found by `result`
        msg = Evaluate(dict(config), built)
        if not self._pending:
            self._head_since, self._head_log = time.perf_counter(), _size(self.log_path)
        self._pending.append(msg)
        try:
            self._conn.send(msg)
        except (OSError, BrokenPipeError):
            pass  # the child is gone: `result` finds out and sends the rest to a new one

    @property
    def pending(self) -> int:
        return len(self._pending)

    @property
    def connection(self) -> Any:
        """The pipe a result arrives on (for waiting on several workers at once); None when down."""
        return self._conn

    @property
    def deadline(self) -> float:
        """When the oldest pending configuration times out (time.perf_counter())."""
        return self._head_since + self.config_timeout

    def ready(self) -> bool:
        """Whether `result` would return at once: an answer, a dead child or a timeout is there."""
        if not self._pending:
            return False
        if self._spare is not None and not self._spare.settled:
            return False  # a spare taken before it stood: its first message is not the run's
        if self._starting and self._conn is not None:
            try:
                if not self._conn.poll(0):
                    return False
            except (OSError, EOFError):
                pass
            self.wait_ready()  # its first message is there: ready, or WorkerError
        if self._conn is None or time.perf_counter() >= self.deadline:
            return True
        try:
            return self._conn.poll(0)
        except (OSError, EOFError):
            return True

    def result(self, again: bool = False) -> Result:
        """The result of the oldest configuration submitted. A timeout or a crash is that
        configuration's result; the ones sent after it go to a new worker. A failure the worker
        found with its references changed is measured again in a new worker (`again`: this is
        that measurement)."""
        self.wait_ready()
        config = dict(self._pending[0].config)
        left = self.config_timeout - (time.perf_counter() - self._head_since)
        if self._conn is None or not self._conn.poll(max(0.0, left)):
            waited = time.perf_counter() - self._head_since
            self._pending.popleft()
            self._kill()
            self._resend()
            return Result(config=config, status="timeout",
                          message=f"no result within {self.config_timeout:.0f} s; the worker was restarted",
                          time_s=waited)
        try:
            payload = self._conn.recv()
        except (EOFError, OSError):
            self._pending.popleft()
            code = self._kill()
            detail = _read_from(self.log_path, self._head_log)
            self._resend()
            return Result(config=config, status="crashed", message=self._died(code, detail))
        if isinstance(payload, Failed):  # the template's reference failed: nothing more can be checked
            self._pending.clear()
            self._kill()
            raise ReferenceStopped(payload.text)
        head = self._pending.popleft()
        self._head_since, self._head_log = time.perf_counter(), _size(self.log_path)
        if payload.ending:
            self._kill()  # the child is ending on its own; what was sent after goes to the next one
            if payload.again and not again:
                # its references were found changed: the configuration again, first, in a fresh worker
                self._pending.appendleft(head)
                self._resend()
                return self.result(again=True)
            self._resend()
        return Result.from_dict(payload.result)

    def _resend(self) -> None:
        rest = list(self._pending)
        self._pending.clear()
        for msg in rest:
            self.submit(msg.config, msg.built)

    def _died(self, code: int | None, detail: str) -> str:
        """Why the child ended, in one line; on a CPU device whose buffers sit in unmapped address
        space (engine/backends/host_memory.py), a segmentation fault is a kernel's access outside them."""
        import signal

        text = f"the worker died ({_exit_text(code)})"
        if self.info.get("fenced") and code in (-signal.SIGSEGV, -signal.SIGBUS):
            text += (": the kernel read or wrote outside its buffers (on this CPU device the address space "
                     "around every buffer is unmapped)")
        return text + detail

    def verify_again(self, config: Mapping[str, Any], seeds: tuple[int, ...]) -> Checked:
        """A configuration checked on new inputs from `seeds` (Evaluator.check_again)."""
        kind, payload = self._call(VerifyAgain(dict(config), tuple(seeds)))
        if kind == "timeout":
            return Checked(False, "timeout", f"the final check did not end within {self.config_timeout:.0f} s")
        if kind == "crashed":
            return Checked(False, "crashed", str(payload))
        if payload.ending:
            self._kill()  # the child is ending on its own; the next request starts a new one
        return payload

    def paired(self, request: "retime.PairedRequest") -> dict:
        """The leaders and the original timed together, round-robin (engine/retime.py): the
        worker's plain-data answer, or {"error": text}."""
        # the rounds stop once their wall time is spent, after MIN_ROUNDS at least
        kind, payload = self._call(Pair(request), timeout=self.config_timeout + 2 * request.wall_s)
        if kind == "timeout":
            return {"error": f"the paired re-timing did not end within {self.config_timeout:.0f} s"}
        if kind == "crashed":
            return {"error": str(payload)}
        return dict(payload.answer)

    def reproduces_original(self, config: Mapping[str, Any], seeds: tuple[int, ...]) -> tuple[bool, float, str]:
        """Whether `config` gives the original kernel's outputs on fresh inputs from `seeds` (the
        gate's check, Evaluator.reproduces_original): (ok, worst error / tolerance, message)."""
        kind, payload = self._call(Reproduce(dict(config), tuple(seeds)))
        if kind == "timeout":
            return False, math.inf, f"timeout: the check did not end within {self.config_timeout:.0f} s"
        if kind == "crashed":
            return False, math.inf, f"crashed: {payload}"
        if payload.ending:
            self._kill()
        return payload.ok, payload.worst, payload.text

    def close(self) -> None:
        starting, self._starting = self._starting, 0.0
        # a child still starting is stopped at once: it has nothing to finish
        if not starting and self._proc is not None and self._proc.is_alive() and self._conn is not None:
            try:
                self._conn.send(Stop())
                self._proc.join(5)
            except (OSError, BrokenPipeError):
                pass
        self._kill()
        try:
            os.unlink(self.log_path)
        except OSError:
            pass
        if self._starts:  # where the program keeps a spare for this device, the next run's starts now
            standby.refill(self.spec.backend, self.spec.device)

    def __enter__(self) -> "Worker":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _exit_text(code: int | None) -> str:
    if code is None:
        return "no exit code"
    if code < 0:
        import signal

        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _read_from(path: str, offset: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    return (": " + " | ".join(lines[-3:]))[:400] if lines else ""

