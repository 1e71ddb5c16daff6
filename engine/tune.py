"""One tuning run: build the space, search it through the worker, and emit every step as an event.

Events go to the session file (appended and flushed as they happen) and to any other sinks (the
dashboard, the text renderer). A run can be stopped or paused from another thread, and resumed
later from its session file without evaluating any configuration twice.
"""

from __future__ import annotations

import functools
import os
import random
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from .backends import BackendError, auto_backend, list_devices, open_backend
from .compile_pool import CompilePool, default_jobs
from .device import DeviceLimits
from .evaluate import TimingPolicy, VerifyPolicy
from .footprint import check_fits
from .events import (
    BestImproved,
    ConfigEvaluated,
    ConfigSanitized,
    LeadersRetimed,
    RunFinished,
    RunStarted,
    SpaceBuilt,
    WinnerVerified,
)
from .result import Result, config_key, fastest, ranked
from .retime import BUDGET_S, ROUNDS, PairedRequest, affordable, leaders, simplicity, verdict
from .search import ByObjective, Seeded, StopRules, make_strategy
from .session import Session, SessionWriter, default_path, load_session, lock_session
from .sol import load_peaks
from .space import Config, Space, build_space, odd_problem
from .template import ParamValue, Problem, Template
from .cluster import ClusterError
from .driver import Progress, search
from .worker import ReferenceStopped, WorkerError, WorkerSpec
from .workers import Workers
from .emitter import Controlled, Emitter, Sink  # noqa: F401 (Sink: the drivers' sinks' type)
from .header import run_header


class TuneError(RuntimeError):
    """A run that cannot start: no feasible configuration, a session for another template, ..."""


# The search's seed when the command gives none: the inputs are drawn anew on every run, but the
# configurations a budget examines, and their order, are the same, so two runs of one command differ
# only by what the measurements say (engine/retime.py judges that).
SEARCH_SEED = 0


@dataclass(frozen=True)
class TuneOptions:
    backend: str = "auto"
    device: int = 0
    strategy: str = "grid"
    budget: int = 0  # evaluations; 0 = no limit
    time_limit: float = 0.0  # seconds; 0 = no limit
    seed: int | None = None  # inputs (and the search, when given); None: a new random seed, recorded
    # The search's own seed: None takes `seed` when one was given, else SEARCH_SEED, so that the same
    # command examines the same configurations in the same order on every run (recorded as well).
    search_seed: int | None = None
    problem: str | None = None
    overrides: Mapping[str, int] = field(default_factory=dict)
    session_path: Path | None = None
    resume: bool = False
    timing: TimingPolicy = field(default_factory=TimingPolicy)
    verify: VerifyPolicy = field(default_factory=VerifyPolicy)
    config_timeout: float = 120.0
    probe: bool = True
    compile_jobs: int = 0  # CUDA: threads compiling ahead of the device; 0 = one per core, 1 = off
    sol_target: float = 0.0  # stop once the best reaches this fraction of the speed of light; 0 = off
    patience: int = 0  # stop after this many evaluations without improvement; 0 = off
    command: Sequence[str] = ()
    # Configurations (their config_key) measured earlier, by an earlier round of the agent loop
    # on the same template: not evaluated again.
    skip: tuple[str, ...] = ()
    # The default configuration's result from such an earlier round: what speedups are over,
    # so that the default is not measured again either.
    default_result: Result | None = None
    # Profile the K best configurations with Nsight Compute when the search ends (CUDA only).
    profile_top: int = 0
    # CUDA: compute-sanitizer memcheck on the K fastest configurations (the reported winner is
    # always checked when compute-sanitizer is found).
    sanitize: int = 0
    # Configurations tried before the strategy's own (the best of a search at another size);
    # those infeasible here are skipped with a note. They count against the budget.
    start_from: tuple[Mapping[str, ParamValue], ...] = ()
    # Several devices of this host measuring at once (one worker each); () = `device` alone.
    devices: tuple[int, ...] = ()
    # A running Dask scheduler's address: its workers compile and measure (engine/cluster.py).
    cluster: str = ""
    # What the search minimises: time, energy (joules per launch) or edp (engine/energy.py);
    # energy needs `timing.energy` on.
    objective: str = "time"


@dataclass
class Outcome:
    session_path: Path
    reason: str
    results: list[Result]
    best: Result | None
    default_result: Result | None
    space: Space
    limits: DeviceLimits
    winner_ok: bool | None = None
    profiles: list = field(default_factory=list)  # ConfigProfiled events, best first


def resolve_device(backend: str, device: int, note: Callable[[str], None] | None = None) -> tuple[str, DeviceLimits]:
    """The backend's name and the device's limits; `note` hears why `auto` skipped CUDA."""
    name = backend
    if backend == "auto":
        name, why = auto_backend()
        if why and note is not None:
            note(why)
    devices = list_devices(name)
    if not devices:
        raise BackendError(f"no {name} device found")
    if not 0 <= device < len(devices):
        raise BackendError(f"{name} device {device} does not exist ({len(devices)} found)")
    return name, devices[device].limits


def peaks_for(backend: str, device: int, limits: DeviceLimits, measure: bool,
              note: Callable[[str], None]) -> DeviceLimits:
    """The device's limits with peak rates: cached measurement, a new measurement, or datasheet."""
    peaks = load_peaks(limits)
    if (peaks is None or peaks.source == "datasheet") and measure:
        from .probe import measure_peaks

        note(f"measuring {limits.name}'s copy bandwidth and arithmetic peak (once per driver; cached)")
        b = open_backend(backend, device)
        try:
            peaks = measure_peaks(b, note)[1] or peaks
        finally:
            b.close()
    if peaks is None:
        note(f"no peak rates known for {limits.name}: % of speed-of-light is not shown (run `kerntune probe`)")
        return limits
    return limits.with_peaks(peaks.bandwidth_gbs, peaks.gflops, peaks.source, spread=peaks.spread)


class TuneRun(Controlled):
    """Drives one run; `run()` blocks, `stop()` and `pause()` may be called from other threads.

    With `emitter` (a round of the agent loop), the run sends its events through that one: it
    appends to the loop's open session instead of writing a file of its own, on the loop's clock,
    and the loop's stop and pause reach it.
    """

    def __init__(self, template: Template, options: TuneOptions, sinks: Sequence[Sink] = (), *,
                 emitter: Emitter | None = None):
        self.template = template
        self.options = options
        self._shared = emitter is not None
        self.events = emitter if emitter is not None else Emitter(sinks)
        self._ahead: Any = None  # a Memcheck started ahead for the winner's check
        self._group_ahead: dict[str, Any] = {}  # a child of each tool started ahead for the leaders' check

    # the run -----------------------------------------------------------------------------------
    def run(self) -> Outcome:
        opts, template = self.options, self.template
        pending: list[str] = []
        backend, limits = resolve_device(opts.backend, opts.devices[0] if opts.devices else opts.device,
                                         pending.append)
        for d in opts.devices[1:]:
            _, other = resolve_device(backend, d)
            if other.name != limits.name:
                raise TuneError(f"--devices: {backend}:{d} is a {other.name}, not a {limits.name}: one run "
                                "measures on devices of one kind")
        limits = peaks_for(backend, opts.device, limits, opts.probe, pending.append)
        problem = template.problem(opts.problem, opts.overrides)
        check_fits(template, problem, limits, opts.verify.pool)  # before a worker allocates anything
        space = build_space(template, problem, limits)
        default = Config.of(template.default_config())
        if space.feasible == 0:
            rules = ", ".join(f"`{k}` ({v})" for k, v in space.pruned.items())
            raise TuneError(f"{template.name}: no feasible configuration for {problem.label()} on "
                            f"{limits.name}; pruned by {rules}")

        previous: Session | None = None
        lock: int | None = None
        path = opts.session_path or default_path(template.name)
        if self._shared:
            path = self.events.writer.path
        elif opts.resume and path.exists():
            # the lock first: a run writing this file now would change what is to be resumed
            lock = lock_session(path)
            try:
                previous = self._check_resumable(path, template, problem, backend)
            except BaseException:
                os.close(lock)
                raise
        results: list[Result] = previous.results() if previous else []
        seed = opts.seed
        search_seed = opts.search_seed if opts.search_seed is not None else seed
        if previous is not None and isinstance(previous.header.tuning.get("seed"), int):
            seed = previous.header.tuning["seed"]
            recorded = previous.header.tuning.get("search_seed", seed)
            search_seed = recorded if isinstance(recorded, int) else seed
        if seed is None:
            seed = random.SystemRandom().randrange(1 << 31)
        if search_seed is None:
            search_seed = SEARCH_SEED
        self.options = opts = replace(opts, seed=seed, search_seed=search_seed)
        done = {config_key(r.config) for r in results} | set(opts.skip)
        if previous is not None:
            last = previous.events[-1].t if previous.events else 0.0
            self.events.offset = float(last)
            writer = SessionWriter(path, lock=lock)
            if writer.repaired:
                pending.append(writer.repaired)
            self.events.open(writer, previous.header, previous.events)
        elif not self._shared:
            header = run_header(template, backend, problem, limits, space, opts,
                                {"strategy": opts.strategy, "budget": opts.budget, "time_limit": opts.time_limit,
                                 "objective": opts.objective})
            self.events.open(SessionWriter(path, header), header)
        try:
            return self._search(template, problem, space, limits, backend, default, results, done, path, pending)
        finally:
            if not self._shared:  # a loop's session stays open for its next round
                self.events.writer.close()

    def _check_resumable(self, path: Path, template: Template, problem: Problem, backend: str) -> Session:
        previous = load_session(path)
        t = previous.template
        if t.get("fingerprint") != template.fingerprint():
            raise TuneError(f"{path}: this session was recorded for a different template "
                            f"({t.get('name')}, fingerprint {t.get('fingerprint')}); it cannot be resumed with this one")
        if dict(previous.space.get("problem", {})) != dict(problem.values):
            raise TuneError(f"{path}: this session tuned {previous.space.get('problem')}, not {dict(problem.values)}")
        if t.get("backend") != backend:
            raise TuneError(f"{path}: this session ran on the {t.get('backend')} backend, not {backend}")
        return previous

    def _search(self, template: Template, problem: Problem, space: Space, limits: DeviceLimits,
                backend: str, default: Config, results: list[Result], done: set[str], path: Path,
                pending: list[str]) -> Outcome:
        opts = self.options
        self.events.emit(RunStarted(self.events.now(), template.name, dict(problem.values), problem.name, backend,
                              limits.name, opts.strategy, opts.budget, opts.time_limit, opts.seed, len(results)))
        self.events.emit(SpaceBuilt(self.events.now(), space.total, space.feasible, dict(space.pruned)))
        for text in pending:
            self.events.note(text)
        if results:
            self.events.note(f"resuming: {len(results)} configurations already evaluated are kept")
        feasible = set(space.configs)
        if default not in feasible:
            self.events.note("the default configuration is not feasible for this problem: speedups are relative "
                             "to the fastest")
        strategy = make_strategy(opts.strategy, space, seed=opts.search_seed, done=done,
                                 first=default if default in feasible else None)
        if opts.start_from:
            starts = [c for c in map(Config.of, opts.start_from) if c in feasible]
            if len(starts) < len(opts.start_from):
                self.events.note(f"{len(opts.start_from) - len(starts)} of the {len(opts.start_from)} starting "
                                 f"configurations are not in this problem's space: skipped")
            first = [default] if default in feasible else []  # the default configuration still goes first
            strategy = Seeded(strategy, first + starts, done)
        if opts.objective != "time":
            strategy = ByObjective(strategy, opts.objective)
        # A resumed run's strategy learns from what is already measured (the model's data, the
        # local search's starting point), not only that it is done.
        for r in results:
            config = Config.of(r.config)
            if config in feasible:
                strategy.observe(config, r)
        odd = odd_problem(template, problem, space.configs, limits)
        if odd is not None:
            self.events.note(f"no verification size is odd in every dimension: verifying also at "
                             f"{fmt_values(odd.values)}, where a tail bug shows")
        spec = WorkerSpec(backend, opts.device, str(template.spec_path), template.spec_text,
                          dict(template.sources), problem.name, dict(problem.values), opts.seed,
                          opts.timing, opts.verify,
                          (limits.peak_bandwidth_gbs, limits.peak_gflops, limits.peaks_source)
                          if limits.peaks_source else None, limits.peaks_spread,
                          ((odd.name, dict(odd.values)),) if odd is not None else ())
        default_result = next((r for r in results if config_key(r.config) == default.key), None)
        earlier = opts.default_result  # an earlier round's
        if default_result is None and earlier is not None and config_key(earlier.config) == default.key:
            default_result = earlier
        progress = Progress(len(results), fastest(results))
        rules = StopRules(opts.budget, opts.time_limit, opts.sol_target, opts.patience)
        reason = "space exhausted"
        started = self._search_started = time.monotonic()
        try:
            evaluations = self._evaluations(spec, template, backend, limits)
        except (ClusterError, ValueError) as e:
            raise TuneError(str(e)) from None
        winner_ok = None

        noted = False

        def worker_notes() -> None:  # what the workers found when they started, once they have
            nonlocal noted
            if not noted and evaluations.info:
                noted = True
                self._worker_notes(evaluations.info, limits)

        def on_result(config: Config, result: Result, improved: bool) -> None:
            nonlocal default_result
            worker_notes()
            results.append(result)
            index = len(results) - 1
            self.events.emit(ConfigEvaluated(self.events.now(), index, result))
            if config == default:
                default_result = result
            if improved:
                speedup = (default_result.median_us / result.median_us
                           if default_result is not None and default_result.ranked else 1.0)
                self.events.emit(BestImproved(self.events.now(), index, dict(result.config), result.median_us,
                                        result.sol_fraction or 0.0, speedup))

        def interrupted() -> str | None:
            self.events.wait_running()
            return self.events.stop_reason if self.events.stopped else None

        try:
            try:
                evaluations.start()
                # memcheck's child for the winner's check, started with the worker: once the
                # search times configurations, nothing else should start on the device
                self._ahead = self._memcheck_ahead(backend, template, problem)
                reason = search(strategy, evaluations, rules, progress, on_result,
                                clock=lambda: time.monotonic() - started, interrupted=interrupted)
            except ReferenceStopped as e:  # what was measured is in the session: --resume goes on
                raise TuneError(f"{e}: the run stops (the session keeps what was measured)") from None
            except WorkerError as e:
                raise TuneError(f"cannot start the evaluation worker: {e}") from None
            worker_notes()
            self._disturbed_note(results)
            best = progress.best
            if best is not None and not self.events.stopped:
                best, winner_ok = self._final_check(evaluations, results, template, problem, backend)
                if best is not None and winner_ok and not self.events.stopped:
                    best = self._paired(evaluations, results, best, default_result, default, template, problem, backend)
                    winner_ok = best is not None
                if best is not None and winner_ok and len(getattr(evaluations, "labels", ())) > 1:
                    self._retime(evaluations, best)
        except KeyboardInterrupt as e:
            reason = str(e) or "interrupted"  # RunCut's reason (a signal) or Ctrl-C
            best = progress.best
        finally:
            evaluations.close()
            self._close_ahead()
        profiles = []
        if opts.profile_top > 0 and not self.events.stopped:
            profiles = self._profile(template, problem, results, backend, opts.profile_top)
        verified = sum(1 for r in results if r.verified)
        self.events.emit(RunFinished(self.events.now(), reason, len(results), verified,
                               dict(best.config) if best else {}, best.median_us if best else 0.0))
        return Outcome(path, reason, results, best, default_result, space, limits, winner_ok, profiles)

    def _evaluations(self, spec: WorkerSpec, template: Template, backend: str, limits: DeviceLimits):
        """Where configurations are measured: a Dask cluster, a worker per listed device, or one."""
        opts = self.options
        if opts.cluster:
            from .cluster import ClusterEvaluations

            self.events.note(f"evaluating on the Dask cluster at {opts.cluster}: each of its workers compiles "
                             "and measures; results stream here")
            return ClusterEvaluations(opts.cluster, spec, config_timeout=opts.config_timeout)
        devices = opts.devices or (opts.device,)
        pool = self._compile_pool(template, backend, limits, workers=len(devices))
        if pool is not None:
            from .backends.cuda_toolchain import compiler_summary
            self.events.note(f"compiling ahead in {pool.jobs} processes: {compiler_summary()}")
        if len(devices) > 1:
            listed = ", ".join(f"{backend}:{d}" for d in devices)
            self.events.note(f"evaluating on {len(devices)} devices at once: {listed}"
                             + ("; devices listed twice share one, and their timings disturb each other"
                                if len(set(devices)) < len(devices) else ""))
        return Workers([replace(spec, device=d) for d in devices], pool, config_timeout=opts.config_timeout)

    def _worker_notes(self, info: Mapping[str, Any], limits: DeviceLimits) -> None:
        steps = {k: v for k, v in info.get("startup", {}).items() if isinstance(v, (int, float))}
        ahead = {k: v for k, v in info.get("ahead", {}).items() if isinstance(v, (int, float)) and k != "waited"}
        if steps:
            each = ", ".join(f"{name} {s:.2f} s" for name, s in steps.items())
            before = ""
            if ahead:  # a spare taken (engine/standby.py): its own start came before the run's
                before = ("; it was started ahead of the run: "
                          + ", ".join(f"{name} {s:.2f} s" for name, s in ahead.items()))
            self.events.note(f"the evaluation worker was ready in {sum(steps.values()):.2f} s: {each}{before}",
                             source="worker")
        for name, err in sorted(info.get("calibration", {}).items()):
            scale = info.get("scale", {}).get(name)
            widened = (f"; its tolerance is widened {scale:.3g}x (twice a high quantile of its errors)" if scale
                       else "; the default tolerance holds")
            share = info.get("spare", {}).get(name)
            if share:
                widened += (f"; {share:.2%} of its elements are beyond that, so a few elements of each "
                            "configuration may be too, none further out than twice its worst")
            self.events.note(f"tolerance of `{name}`: the original kernel's worst error is "
                             f"{err:.3g}x the default{widened}", source="calibration", once=True)
        if info.get("hard"):
            self.events.note(str(info["hard"]), source="calibration")
        if info.get("unfenced"):  # an OpenCL CPU runtime that copies the host memory it is given
            self.events.note(f"{info['unfenced']}: a write far past a buffer (beyond its guard regions) is not "
                             "stopped on this device, and may change what the checks compare with", once=True)
        if not info.get("cold_cache", True):
            flush = info.get("flush_bytes", 0) / 2**20
            self.events.note(f"the cache ({limits.l2_bytes / 2**20:.0f} MiB) is larger than the {flush:.0f} MiB "
                             "flushed between timed runs: small problems may time warm, and % of SOL can pass 100")

    def _retime(self, evaluations, best: Result) -> None:
        """The winner measured again on every device used; the spread, and a device that differs."""
        timed = [(label, r) for label, r in evaluations.retime(Config.of(best.config))]
        ok = [(label, r.median_us) for label, r in timed if r.ranked]
        failed = [f"{label} ({r.status})" for label, r in timed if not r.ranked]
        if not ok:
            self.events.note(f"the winner could not be timed again on any device: {', '.join(failed)}")
            return
        times = sorted(t for _, t in ok)
        mid = times[len(times) // 2]
        noise = max(0.03, 3 * max((r.spread or 0.0) for _, r in timed if r.ranked))
        spread = (times[-1] - times[0]) / mid
        each = ", ".join(f"{label} {t:.4g} us" for label, t in ok)
        off = [label for label, t in ok if abs(t - mid) / mid > noise]
        text = f"the winner on every device: {each}; spread {100 * spread:.1f}%"
        if off:
            text += (f"; {', '.join(off)} differs from the median by more than the timing noise "
                     f"({100 * noise:.0f}%)")
        elif len(ok) > 1:
            text += f", within the timing noise ({100 * noise:.0f}%)"
        if failed:
            text += f"; not timed again: {', '.join(failed)}"
        self.events.note(text, source="devices")

    def _disturbed_note(self, results: list[Result]) -> None:
        """One line when configurations stayed disturbed after they were measured again."""
        hit = [r for r in results if r.verified and r.disturbed]
        if hit:
            self.events.note(f"{len(hit)} of {sum(1 for r in results if r.verified)} verified configurations were "
                             f"measured during a disturbance even after measuring again (first: "
                             f"{fmt_values(hit[0].config) or 'the original'}: {hit[0].disturbed}); their times "
                             "are marked ~", source="disturbance")

    def _paired(self, evaluations, results: list[Result], winner: Result, default_result: Result | None,
                default: Config, template: Template, problem: Problem | None = None,
                backend: str = "") -> Result | None:
        """The leaders and the original timed together (engine/retime.py); the configuration to
        report: the winner, or the one the paired times choose among those tied with the fastest
        (checked again on new inputs first when it is not the winner). One event records it all."""
        paired = getattr(evaluations, "paired", None)
        original = default_result if default_result is not None and default_result.ranked else None
        others = [r for r in ranked(results) if r is not winner]
        # a fixed cost at the end: a tenth of the search's time, between 2 s and a minute
        wall = min(60.0, max(2.0, 0.1 * (time.monotonic() - self._search_started)))
        default_values = template.default_config()
        listed = {p.name: list(p.values) for p in template.parameters}
        lead = affordable(leaders([winner] + others, original,
                                  lambda c: simplicity(c, default_values, listed)), wall, original)
        tool = self._sanitizer(backend) if backend == "cuda" and problem is not None and len(lead) > 1 else None
        if tool is not None:  # a racy or out-of-bounds leader is never timed against the others, nor reported
            lead = self._sanitize_leaders(tool, template, problem, results, lead, winner)
        self._close_ahead()  # what was started ahead and not needed ends before anything is timed
        if len(lead) < 2:
            return winner
        if paired is None:
            self.events.note("the leaders were not timed again together (a cluster measures them apart): "
                             "speedups come from each configuration's own timing")
            return winner
        request = PairedRequest(tuple(dict(r.config) for r in lead), tuple(float(r.median_us or 0.0) for r in lead),
                                rounds=ROUNDS, budget_s=min(BUDGET_S, 10 * self.options.timing.target_s),
                                wall_s=wall)
        reply = paired(request, Config.of(winner.config))
        if "error" in reply:
            self.events.note(f"the leaders could not be timed again together ({reply['error']}): speedups "
                             "come from each configuration's own timing")
            return winner
        at = {config_key(r.config): i for i, r in enumerate(results)}
        for key, (status, text) in reply.get("failed", {}).items():
            if key in at:
                self._demote(results, at[key], status, text)
        v = verdict(request.configs, reply.get("times", {}), default.key if original is not None else None,
                    default_values, listed,
                    reply.get("quiet", []), reply.get("digests", {}), int(reply.get("launches", 0)))
        if winner is not results[at[config_key(winner.config)]]:  # demoted in the paired rounds
            winner = next((r for r in ranked(results)), None) if v is None else None
        if v is None:
            return winner
        key = config_key(v.configs[v.chosen])
        # the original may be an earlier round's result (the agent loop measures it once)
        chosen = results[at[key]] if key in at else original
        if chosen is None:
            return winner
        if winner is None or config_key(chosen.config) != config_key(winner.config):
            seeds = tuple(_fresh_seeds(max(2, self.options.verify.seeds)))
            checked = evaluations.verify_again(Config.of(chosen.config), seeds)
            self.events.emit(WinnerVerified(self.events.now(), dict(chosen.config), checked.ok, checked.message, seeds))
            if not checked.ok:
                if key in at and checked.status:  # (no status: the check could not run at all)
                    self._demote(results, at[key], checked.status,
                                 f"failed its final check on new inputs: {checked.text}")
                return winner
        disturbances = str(reply.get("summary", ""))
        groups = {i: n + 1 for n, g in enumerate(v.identical) for i in g}
        self.events.emit(LeadersRetimed(
            self.events.now(), v.configs, v.median_us, v.speedup, v.low, v.high, v.tied,
            tuple(float(groups.get(i, 0)) for i in range(len(v.configs))), v.fastest, v.chosen, v.original,
            v.reason, v.rounds, v.quiet_rounds, v.launches, disturbances))
        if v.quiet_rounds < v.rounds:
            self.events.note(f"no quiet measurement could be had: {v.rounds - v.quiet_rounds} of {v.rounds} "
                             f"paired rounds were disturbed ({disturbances}); ties are judged on them all",
                             source="disturbance")
        return chosen

    def _final_check(self, worker, results: list[Result], template: Template, problem: Problem,
                     backend: str) -> tuple[Result | None, bool]:
        """Check the fastest configuration again on new inputs, in the module it was timed in
        (and, on CUDA, under compute-sanitizer's memcheck when it is found).

        One that fails is demoted (its result replaced in the session with the status the check
        found) and the next fastest is checked in turn; (the winner, True), or (None, False) when
        none survives."""
        at = {id(r): i for i, r in enumerate(results)}
        order = [at[id(r)] for r in ranked(results)]  # indices in `results`, fastest first
        sanitizer = self._sanitizer(backend)
        if sanitizer is not None:  # the leaders' check comes next: its children start while this one runs
            self._group_ahead = self._started_ahead(sanitizer, template, problem)
        winner = None
        for i in order[:MAX_RECHECKS]:
            r = results[i]
            seeds = tuple(_fresh_seeds(max(2, self.options.verify.seeds)))
            # compute-sanitizer's tools run in processes of their own while the worker checks on new
            # inputs: none times anything, so none disturbs a measurement
            ahead, self._ahead = {"memcheck": self._ahead}, None  # memcheck's started with the search
            checks = self._sanitize_all(sanitizer, template, problem, [r], ahead) if sanitizer is not None else []
            checked = worker.verify_again(Config.of(r.config), seeds)
            self.events.emit(WinnerVerified(self.events.now(), dict(r.config), checked.ok, checked.message, seeds))
            found = [c.result()[0] for c in checks]
            if checked.ok and self._sanitized(found, results, i):
                winner = i
                break
            if not checked.ok and not checked.status:  # the check itself could not run: none can
                self.events.note(f"no configuration is reported: {checked.text}")
                return None, False
            if not checked.ok:
                self._demote(results, i, checked.status, f"failed its final check on new inputs: {checked.text}")
            self.events.note(f"the fastest configuration failed its final check ({results[i].status}): "
                             "it is not reported; checking the next")
        if winner is None:
            more = len(order) > MAX_RECHECKS
            self.events.note("no configuration passed its final check on new inputs"
                             + (f" among the {MAX_RECHECKS} fastest" if more else ""))
            return None, False
        if sanitizer is not None and not self.events.stopped:  # `--sanitize K`: the K fastest, the winner among them
            self._sanitize_each(sanitizer, template, problem, results,
                                [j for j in order if j != winner][:max(0, self.options.sanitize - 1)])
        return results[winner], True

    def _demote(self, results: list[Result], i: int, status: str, message: str) -> None:
        results[i] = replace(results[i], status=status, message=message)
        self.events.emit(ConfigEvaluated(self.events.now(), i, results[i], replaces=True))

    def _sanitizer(self, backend: str) -> str | None:
        if backend != "cuda":
            if self.options.sanitize:
                self.events.note(f"--sanitize needs the CUDA backend; this run used {backend}", once=True)
            return None
        from .sanitize import find_sanitizer

        tool = find_sanitizer()
        if tool is None and self.options.sanitize:
            self.events.note("compute-sanitizer was not found: --sanitize checks nothing", once=True)
        return tool

    def _sanitize(self, tool: str, template: Template, problem: Problem, rs: list[Result],
                  which: str, ahead: Any = None) -> list[tuple[str, bool, str] | str]:
        """One of compute-sanitizer's tools on configurations, one child for them all where it
        finds nothing (engine/sanitize.py's check_all; `ahead`, a child of the tool started
        earlier, first): for each, (tool, clean, message) or why it could not be checked (a str).
        Safe in another thread: it emits nothing."""
        from .sanitize import SanitizeError, sanitize_configs

        configs = [dict(r.config) or None for r in rs]  # {}: the original kernel
        try:
            found = sanitize_configs(template, problem, configs, device=self.options.device, tool=tool,
                                     ahead=ahead, which=which)
        except SanitizeError as e:
            if ahead is not None:
                ahead.close()
            return [f"compute-sanitizer {which} could not check {fmt_values(r.config) or 'the original'}: {e}"
                    for r in rs]
        return [v if isinstance(v, str) else (which, v[0], v[1]) for v in found]

    def _sanitize_all(self, tool: str, template: Template, problem: Problem, rs: list[Result],
                      ahead: Mapping[str, Any] | None = None) -> list:
        """memcheck, racecheck and synccheck on configurations, each tool in processes of its own
        (`ahead`: a child started earlier, by tool), the three at once: their futures (of what
        `_sanitize` returns)."""
        from .sanitize import CHECKS

        ahead = ahead or {}
        return [_threads().submit(self._sanitize, tool, template, problem, rs, which, ahead.get(which))
                for which in CHECKS]

    def _close_ahead(self) -> None:
        """End the sanitizers' children started ahead and not used."""
        if self._ahead is not None or self._group_ahead:
            from .sanitize import close_all

            close_all([self._ahead, *self._group_ahead.values()])
        self._ahead, self._group_ahead = None, {}

    def _started_ahead(self, tool: str, template: Template, problem: Problem) -> dict[str, Any]:
        """A child of each tool, started now: they load and draw their inputs while the run goes on."""
        from .sanitize import CHECKS, SanitizeError, Sanitizer

        started = {}
        for which in CHECKS:
            try:
                started[which] = Sanitizer(tool, template, problem, self.options.device, which)
            except SanitizeError:
                pass  # started again when needed, which says why
        return started

    def _sanitize_leaders(self, tool: str, template: Template, problem: Problem, results: list[Result],
                          lead: list[Result], checked: Result) -> list[Result]:
        """The leaders of the paired rounds (but the original and `checked`, the winner, whose
        check came first) under compute-sanitizer's three tools before they are timed together:
        a finding demotes a leader, which leaves the rounds. The leaders that stay."""
        at = {config_key(r.config): i for i, r in enumerate(results)}
        todo = [r for r in lead if r.config and r is not checked and config_key(r.config) in at]
        demoted = self._sanitize_each(tool, template, problem, results, [at[config_key(r.config)] for r in todo])
        if todo:
            self.events.note(f"compute-sanitizer (memcheck, racecheck, synccheck) checked {len(todo)} leader"
                             f"{'s' if len(todo) != 1 else ''} before timing them together"
                             + (f": {demoted} demoted" if demoted else ": no finding"), source="sanitizer")
        fresh = [results[at[config_key(r.config)]] if config_key(r.config) in at else r for r in lead]
        return [r for r in fresh if r.ranked or not r.config]

    def _sanitize_each(self, tool: str, template: Template, problem: Problem, results: list[Result],
                       indices: list[int]) -> int:
        """results[i] for every i of `indices` under the three tools (a child a tool for them all,
        more only where one finds something) and their verdicts recorded: how many were demoted."""
        if not indices:
            return 0
        ahead, self._group_ahead = self._group_ahead, {}
        by_tool = [c.result() for c in self._sanitize_all(tool, template, problem, [results[i] for i in indices], ahead)]
        return sum(not self._sanitized([found[k] for found in by_tool], results, i) for k, i in enumerate(indices))

    def _memcheck_ahead(self, backend: str, template: Template, problem: Problem):
        """memcheck's child started now, for the winner's check when the search ends: its start
        then costs the run nothing (CUDA, with compute-sanitizer found; None otherwise)."""
        if backend != "cuda":
            return None
        from .sanitize import Memcheck, SanitizeError, find_sanitizer

        tool = find_sanitizer()
        try:
            return Memcheck(tool, template, problem, self.options.device) if tool is not None else None
        except SanitizeError:
            return None  # the check at the end says why, once

    def _sanitized(self, found: list, results: list[Result], i: int) -> bool:
        """Record compute-sanitizer's verdicts on results[i] (one a tool: (tool, clean, message),
        or why it could not run); the first finding demotes it (out_of_bounds for memcheck's,
        wrong_result for a race or a misused barrier). True unless a tool found something (one
        that could not run is a note, and no finding)."""
        from .sanitize import FINDING_STATUS

        clean = True
        for item in found:
            if isinstance(item, str):
                self.events.note(item, once=True)
                continue
            which, ok, message = item
            self.events.emit(ConfigSanitized(self.events.now(), dict(results[i].config), ok, message))
            if not ok and clean:
                self._demote(results, i, FINDING_STATUS[which], message)
            clean = clean and ok
        return clean

    def _profile(self, template: Template, problem: Problem, results: list[Result], backend: str,
                 top: int) -> list:
        """Nsight Compute on the `top` best configurations, one event each; one note when it cannot."""
        from .ncu import ProfileError, find_ncu, ncu_version
        from .profile import profile_config, profiled_event

        if backend != "cuda":
            self.events.note(f"profiling needs the CUDA backend and Nsight Compute; this run used {backend}: skipped")
            return []
        ncu = find_ncu()
        if ncu is None:
            self.events.note("ncu (Nsight Compute) was not found: the leading configurations are not profiled")
            return []
        tool = ncu_version(ncu)
        bytes_moved = float(template.cost_bytes.evaluate(problem.values))
        out = []
        for n, r in enumerate(ranked(results)[:top], 1):
            if self.events.stopped:
                break
            try:
                m = profile_config(template, problem, r.config, device=self.options.device, ncu=ncu)
                ev = profiled_event(self.events.now(), r, n, bytes_moved, metrics=m, tool=tool)
            except ProfileError as e:
                ev = profiled_event(self.events.now(), r, n, bytes_moved, error=str(e), tool=tool)
            self.events.emit(ev)
            out.append(ev)
            if not ev.ok and "counters" in ev.message:  # no config will do better
                break
        return out


    def _compile_pool(self, template: Template, backend: str, limits: DeviceLimits, workers: int = 1):
        # every evaluation worker past the first needs a core of its own too
        jobs = self.options.compile_jobs or max(1, default_jobs() - (workers - 1))
        if backend != "cuda" or jobs <= 1:
            return None
        from .backends.cuda_toolchain import device_arch

        return CompilePool(template, device_arch(limits.compute_capability), jobs)


# How many of the fastest configurations are checked in turn when the winner fails its re-check.
MAX_RECHECKS = 32


@functools.lru_cache(maxsize=1)
def _threads() -> ThreadPoolExecutor:
    """Threads for what runs beside the worker (memcheck's process)."""
    return ThreadPoolExecutor(max_workers=3, thread_name_prefix="kerntune-beside")  # compute-sanitizer's three tools


def _fresh_seeds(count: int = 2) -> list[int]:
    """Seeds no earlier check used, from the system's entropy; recorded in the session."""
    rng = random.SystemRandom()
    return [rng.randrange(1 << 20, 1 << 31) for _ in range(count)]


def fmt_values(values: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in values.items())
