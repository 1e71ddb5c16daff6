"""kerntune beside Kernel Tuner on one template, in one process: same space, same data, one timer.

    python bench/peer.py [--template silu_and_mul] [--problem llama7b-t128] [--backend cuda|opencl]
                         [--max-configs N] [--strategy-budget N] [--seeds 5] [--cold]
                         [--kt-strategies bayes_opt,genetic_algorithm,random_sample] [--kt-lang cupy|nvcuda]

Both tools tune the template's whole feasible space (or the same random N of it with
--max-configs): kerntune with its grid strategy, Kernel Tuner with brute_force. Kernel Tuner gets
kerntune's template as its own arguments (see `kernel_tuner_job`): the source and entry, the
launch grid and block from the template's [launch] expressions, the parameters as tune_params,
one restriction that asks kerntune's own feasibility check (engine/space.py), the input set
kerntune's evaluator verifies with first at the tuning size, with the template's numpy reference
as `answer`, compared with kerntune's own tolerance (engine/compare.py `compare`).

Printed: configurations evaluated, end-to-end wall time and configurations per second; each
tool's winner as it timed it; both winners timed again by kerntune's evaluator in a process of its
own, alternating, median of every timed launch; and the seconds each tool's search needs to reach
a configuration within 3% of the exhaustive best: kerntune's `model` strategy against the best of
Kernel Tuner's strategies, each with the same evaluation budget. One 3% set judges both: every
configuration either exhaustive run timed within 10% of its own best is timed again by the common
timer (alternating rounds), and the set is those within 3% of the fastest of them. A tool reaches
it when it first evaluates one of them, whatever its own timer said (Kernel Tuner's timer counts
its launch overhead: 14.6 us for a kernel the common timer times at 7.0 us).

Each tool compiles from nothing in every run: kerntune's cubin cache and CuPy's kernel cache
point at new empty folders per run, and PoCL's kernel cache is off. Neither tool's clock counts
making its input data: Kernel Tuner is handed its arrays and answer, and kerntune's input sets and
references (every set of its pools) are drawn into its inputs cache by an untimed run before the
timed ones.

Before each clock starts, each tool's processes are as a program that uses it would have them:
Kernel Tuner runs in a process that has imported it (and CuPy), opened the device (its context)
and loaded NVRTC (one empty kernel built); kerntune runs in a process that has imported it, and
its evaluation worker and compile processes were started ahead (engine/standby.py, as `kerntune
tune` starts them while it reads the template): the worker has imported its modules and opened
the device, the compile processes have loaded NVRTC. Neither has anything of the run in it: no
template, no input data on the device, no compiled kernel. With --cold neither does any of this:
Kernel Tuner's run starts CuPy's context and NVRTC itself, and kerntune's starts its processes.
"""

from __future__ import annotations

import os

# Before anything loads PoCL: every run, of either tool, really compiles every kernel.
os.environ.setdefault("POCL_KERNEL_CACHE", "0")

import argparse  # noqa: E402
import math  # noqa: E402
import multiprocessing as mp  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from concurrent.futures import ProcessPoolExecutor  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from datetime import datetime, timezone  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, Callable, Iterator, Mapping, Sequence  # noqa: E402

import numpy as np  # noqa: E402

from kerntune import templates  # noqa: E402
from kerntune.engine import standby  # noqa: E402
from kerntune.engine.backends import BackendError, open_backend  # noqa: E402
from kerntune.engine.compare import Expected, compare  # noqa: E402
from kerntune.engine.device import DeviceLimits  # noqa: E402
from kerntune.engine.evaluate import Evaluator, TimingPolicy, VerifyPolicy, launch_geometry  # noqa: E402
from kerntune.engine.events import ConfigEvaluated, Event  # noqa: E402
from kerntune.engine.inputs import Inputs, arg_shape, make_inputs  # noqa: E402
from kerntune.engine.inputs_cache import ENV as INPUTS_ENV  # noqa: E402
from kerntune.engine.result import config_key  # noqa: E402
from kerntune.engine.space import Config, Space, build_space, infeasible_reason  # noqa: E402
from kerntune.engine.template import ParamValue, Problem, Template, TemplateError, load_template, np_dtype  # noqa: E402
from kerntune.engine.tune import TuneError, TuneOptions, TuneRun, resolve_device  # noqa: E402

WITHIN = 0.03
# configurations whose checks use every input set of a run's pools (each uses `seeds` of `pool`
# per size, in turn): the untimed run that draws kerntune's input sets evaluates this many
DRAWN_BY = -(-VerifyPolicy().pool // VerifyPolicy().seeds)
# configurations each exhaustive run timed within this of its own best are timed again by the
# common timer to find the 3% set; at most CANDIDATES of them, the fastest by their own runs
NEAR = 0.10
CANDIDATES = 64
KT_STRATEGIES = ("bayes_opt", "genetic_algorithm", "random_sample")
# Kernel Tuner's milliseconds per configuration, in the order of Evaluation's seconds
KT_STAGES = ("compile_time", "verification_time", "benchmark_time")
# Kernel Tuner's name for a block dimension the template computes instead of naming a parameter
SYNTHETIC_BLOCK = "KT_BLOCK_{}"
# numpy dtypes Kernel Tuner's backends move as they are; others (bfloat16) travel as raw bits
PLAIN_KINDS = "biuf"


class PeerError(RuntimeError):
    """A bench that cannot run: one line saying why."""


# -- the mapping: kerntune's template as Kernel Tuner's arguments ------------------------------

def reference_inputs(template: Template, problem: Problem, seed: int) -> Inputs:
    """The input set kerntune's evaluator verifies with first at the tuning size (engine/input_sets.py
    draws it from this seed), with the template's reference outputs."""
    inputs = make_inputs(template, problem, (seed * 1_000_003) & 0x7FFFFFFF)
    reference = template.load_reference()
    if reference is None:
        raise PeerError(f"{template.spec_path}: the template has no numpy reference; Kernel Tuner needs one "
                        "as its `answer`")
    given = {**{k: v.copy() for k, v in inputs.host.items()}, **inputs.scalars}
    outputs = reference(given, dict(problem.values))
    for a in template.arguments:
        if a.is_output:
            shape = arg_shape(a, problem)
            inputs.expected[a.name] = np.asarray(outputs[a.name]).astype(np_dtype(a.dtype)).reshape(shape)
            inputs.checks[a.name] = Expected(inputs.expected[a.name], a.dtype, a)
    return inputs


def _as_kt(array: np.ndarray) -> np.ndarray:
    """An array as Kernel Tuner's backends can upload it: a dtype they know, or its raw bits."""
    if array.dtype.kind in PLAIN_KINDS:
        return array
    return array.view(np.dtype(f"u{array.dtype.itemsize}"))


def _kt_value(v: ParamValue) -> int | float:
    """A parameter value as Kernel Tuner writes it into a #define (kerntune writes booleans as 1/0)."""
    return int(v) if isinstance(v, bool) else v


@dataclass
class KernelTunerJob:
    """Kernel Tuner's tune_kernel arguments for one template, problem and space."""

    kernel_name: str
    kernel_source: str
    lang: str
    problem_size: Callable[[Mapping[str, Any]], tuple[int, int, int]]
    tune_params: dict[str, list]
    restrictions: Callable[[Mapping[str, Any]], bool]
    block_size_names: list[str]
    arguments: list[Any]
    answer: list[Any]
    verify: Callable[..., bool]
    compiler_options: list[str]
    smem_args: dict | None
    # Kernel Tuner's parameter values (and any it adds) back to kerntune's configuration
    to_kerntune: Callable[[Mapping[str, Any]], dict[str, ParamValue]]
    device: int = 0
    platform: int = 0

    def kwargs(self) -> dict[str, Any]:
        """Everything tune_kernel is called with, but the strategy, budget, seed and cache."""
        one = _whole_grid  # the problem size already is the grid: each dimension divided by 1
        return dict(kernel_name=self.kernel_name, kernel_source=self.kernel_source, lang=self.lang,
                    problem_size=self.problem_size, grid_div_x=one, grid_div_y=one, grid_div_z=one,
                    tune_params=self.tune_params, restrictions=self.restrictions,
                    block_size_names=self.block_size_names, arguments=self.arguments, answer=self.answer,
                    verify=self.verify, compiler_options=self.compiler_options, smem_args=self.smem_args,
                    device=self.device, platform=self.platform, quiet=True, verbose=False)


def _whole_grid(params: Mapping[str, Any]) -> int:
    return 1


def kernel_tuner_job(template: Template, problem: Problem, space: Space, backend: str, limits: DeviceLimits,
                     inputs: Inputs, *, lang: str, allowed: set[str] | None = None, device: int = 0,
                     platform: int = 0, local_memory: Callable[[int], Any] | None = None) -> KernelTunerJob:
    """Kernel Tuner's view of `template` at `problem` on the device `limits` describes.

    `allowed`: the config keys to tune (a capped space); None tunes every feasible one.
    `local_memory(nbytes)`: on OpenCL, the `__local` argument a template with dynamic shared
    memory takes last (Kernel Tuner's OpenCL backend has no smem_args); its size is the largest
    any configuration asks for."""
    names = [p.name for p in template.parameters]
    tune_params: dict[str, list] = {p.name: [_kt_value(v) for v in p.values] for p in template.parameters}
    back = {p.name: {_kt_value(v): v for v in p.values} for p in template.parameters}

    def to_kerntune(params: Mapping[str, Any]) -> dict[str, ParamValue]:
        return {n: back[n][params[n]] for n in names}

    # Block dimensions: a parameter's name where the template's expression is one; otherwise a
    # parameter of Kernel Tuner's own that takes the expression's values, tied to it below.
    block_size_names: list[str] = []
    computed: dict[str, int] = {}  # Kernel Tuner's parameter -> block dimension it stands for
    for i, e in enumerate(template.block):
        if e.source.strip() in names:
            block_size_names.append(e.source.strip())
            continue
        name = SYNTHETIC_BLOCK.format("XYZ"[i])
        values = {launch_geometry(template, c.as_dict(), problem, limits).block[i] for c in space.configs}
        tune_params[name] = sorted(values) or [1]
        block_size_names.append(name)
        computed[name] = i

    def restrictions(params: Mapping[str, Any]) -> bool:
        values = to_kerntune(params)
        if allowed is not None and config_key(values) not in allowed:
            return False
        if infeasible_reason(template, values, problem, limits) is not None:
            return False
        if computed:
            block = launch_geometry(template, values, problem, limits).block
            return all(params[n] == block[i] for n, i in computed.items())
        return True

    def problem_size(params: Mapping[str, Any]) -> tuple[int, int, int]:
        return launch_geometry(template, to_kerntune(params), problem, limits).grid

    arguments: list[Any] = []
    answer: list[Any] = []
    checks: dict[int, tuple[str, np.dtype, Expected]] = {}
    for a in template.arguments:
        if a.role == "scalar":
            arguments.append(inputs.scalars[a.name])
            answer.append(None)
            continue
        if a.role == "output":
            # all-ones bytes (NaN in a float), kerntune's first poison: an unwritten element fails
            shape = inputs.checks[a.name].shape
            data = np.full(int(np.prod(shape)) * np_dtype(a.dtype).itemsize, 0xFF, dtype=np.uint8)
            data = data.view(np_dtype(a.dtype)).reshape(shape)
        else:
            data = inputs.host[a.name].copy()
        arguments.append(_as_kt(data))
        if a.is_output:
            checks[len(answer)] = (a.name, np_dtype(a.dtype), inputs.checks[a.name])
            answer.append(_as_kt(inputs.expected[a.name]))
        else:
            answer.append(None)

    def verify(expected: Sequence[Any], result_host: Sequence[Any], atol: float = 0.0) -> bool:
        """kerntune's own comparison (its dtype's rtol and atol) on every output."""
        for i, (name, dtype, check) in checks.items():
            out = np.asarray(result_host[i]).view(dtype).reshape(check.shape)
            if compare(name, out, check)[1]:
                return False
        return True

    smem_args = None
    if template.shared_bytes is not None:
        if backend == "opencl":
            if local_memory is None:
                raise PeerError("the template takes dynamic local memory: pass `local_memory` for OpenCL")
            most = max((launch_geometry(template, c.as_dict(), problem, limits).shared_bytes
                        for c in space.configs), default=0)
            arguments.append(local_memory(max(most, 16)))
            answer.append(None)
        else:
            smem_args = {"size": lambda params: launch_geometry(template, to_kerntune(params), problem,
                                                                limits).shared_bytes}
    return KernelTunerJob(template.entry, template.source_for(backend), lang, problem_size, tune_params,
                          restrictions, block_size_names, arguments, answer, verify,
                          list(template.compile_options.get(backend, ())), smem_args, to_kerntune,
                          device, platform)


# -- runs --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Evaluation:
    """One configuration a run evaluated: when it was done, its time, where its seconds went."""

    key: str
    at_s: float  # seconds since the run was started
    us: float | None  # None: it failed
    compile_s: float = 0.0
    verify_s: float = 0.0
    time_s: float = 0.0


@dataclass
class Run:
    """One tuning run of one tool: what it evaluated and when, and its winner."""

    tool: str
    strategy: str
    seed: int
    wall_s: float
    evaluations: list[Evaluation]
    best: dict[str, ParamValue] | None
    best_us: float | None
    note: str = ""

    @property
    def unique(self) -> list[Evaluation]:
        """Each configuration's first evaluation (Kernel Tuner's strategies may revisit one)."""
        seen: dict[str, Evaluation] = {}
        for e in self.evaluations:
            seen.setdefault(e.key, e)
        return list(seen.values())

    @property
    def evaluated(self) -> int:
        return len(self.unique)

    def reaching(self, good: set[str]) -> tuple[float, int] | None:
        """(seconds, configurations evaluated) until the run first evaluated one of `good`."""
        return next(((e.at_s, n) for n, e in enumerate(self.unique, 1) if e.key in good), None)

    def stages(self) -> tuple[float, float, float]:
        """Median compile, verify and time seconds per configuration."""
        u = self.unique or [Evaluation("", 0.0, None)]
        return tuple(statistics.median(getattr(e, f) for e in u) for f in ("compile_s", "verify_s", "time_s"))


def near_best(run: Run, within: float) -> list[tuple[float, str]]:
    """(time / the run's best, key) of each configuration an exhaustive run timed within `within`
    of its best, fastest first."""
    times = [(e.us, e.key) for e in run.unique if e.us is not None]
    if not times:
        return []
    best = min(us for us, _ in times)
    return sorted((us / best, k) for us, k in times if us <= best * (1 + within))


def candidates(runs: Sequence[Run], configs: Mapping[str, Config]) -> list[Config]:
    """Every configuration either exhaustive run timed within NEAR of its own best (at most
    CANDIDATES, those nearest their run's best first)."""
    ranked = sorted(x for run in runs for x in near_best(run, NEAR))
    keys = list(dict.fromkeys(k for _, k in ranked if k in configs))[:CANDIDATES]
    return [configs[k] for k in keys]


def good_set(timed: Sequence[tuple[Config, float]], within: float = WITHIN) -> set[str]:
    """The configurations the common timer timed within `within` of the fastest it timed."""
    ok = [(c, us) for c, us in timed if math.isfinite(us)]
    if not ok:
        return set()
    best = min(us for _, us in ok)
    return {c.key for c, us in ok if us <= best * (1 + within)}


@contextmanager
def env_folder(variable: str, folder: Path) -> Iterator[None]:
    """Point `variable` at `folder` for the duration of the block."""
    old = os.environ.get(variable)
    folder.mkdir(parents=True, exist_ok=True)
    os.environ[variable] = str(folder)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(variable, None)
        else:
            os.environ[variable] = old


@contextmanager
def fresh_dir(variable: str) -> Iterator[None]:
    """Point a compile cache at a new empty folder for the duration of one run."""
    with tempfile.TemporaryDirectory(prefix="peer-cache-") as d, env_folder(variable, Path(d)):
        yield


def run_kerntune(template: Template, problem: Problem, backend: str, device: int, strategy: str,
                 budget: int, seed: int, skip: tuple[str, ...], out: Path, ahead: bool = False) -> Run:
    """A kerntune tuning run as `kerntune tune` does it: worker process, compile, verify, time.
    With `ahead`, its worker and compile processes are started before the clock, and waited for."""
    marks: dict[int, Evaluation] = {}
    t0 = time.perf_counter()

    def sink(ev: Event) -> None:
        if isinstance(ev, ConfigEvaluated):
            r = ev.result
            at = marks[ev.index].at_s if ev.replaces and ev.index in marks else time.perf_counter() - t0
            marks[ev.index] = Evaluation(config_key(r.config), at, r.median_us if r.ranked else None,
                                         r.compile_s, r.verify_s, r.time_s)

    opts = TuneOptions(backend=backend, device=device, strategy=strategy, budget=budget, seed=seed,
                       problem=problem.name, skip=skip, probe=False,
                       session_path=out / f"kerntune-{strategy}-{seed}.toml")
    with fresh_dir("KERNTUNE_CACHE_DIR"):
        if ahead:
            standby.standby(backend, device)
            if not standby.wait(300):
                print("kerntune's worker started ahead is not ready: the run starts its own", flush=True)
        t0 = time.perf_counter()
        try:
            outcome = TuneRun(template, opts, [sink]).run()
        except TuneError as e:
            return Run("kerntune", strategy, seed, time.perf_counter() - t0, [], None, None, f"stopped: {e}")
        finally:
            standby.stand_down()
        wall = time.perf_counter() - t0
    best = outcome.best
    return Run("kerntune", strategy, seed, wall, [marks[i] for i in sorted(marks)],
               dict(best.config) if best else None, best.median_us if best else None,
               "" if outcome.winner_ok is not False else "no configuration passed the final check")


def run_kernel_tuner(job: KernelTunerJob, strategy: str, budget: int, seed: int,
                     ahead: Callable[[], None] | None = None) -> Run:
    """A Kernel Tuner tune_kernel call; its times (ms, the mean of its 7 launches) as us. `ahead`
    runs before the clock, with CuPy's kernel cache already the run's new folder (a kernel it
    builds is kept there, not where an earlier run's are)."""
    from kernel_tuner import tune_kernel

    options = {"max_fevals": budget} if budget else None
    with fresh_dir("CUPY_CACHE_DIR"), warnings.catch_warnings():
        # it warns that block_size_y and block_size_z are not parameters (they are 1 here)
        warnings.simplefilter("ignore", UserWarning)
        if ahead is not None:
            ahead()
        start = datetime.now(timezone.utc)
        t0 = time.perf_counter()
        try:
            results, _ = tune_kernel(**job.kwargs(), strategy=strategy, strategy_options=options, seed=seed)
        except Exception as e:  # Kernel Tuner stops a whole run on a failed verification
            return Run("Kernel Tuner", strategy, seed, time.perf_counter() - t0, [], None, None,
                       f"stopped: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        wall = time.perf_counter() - t0
    evaluations: list[Evaluation] = []
    best, best_us = None, None
    for r in results:
        if not r:
            continue
        config = job.to_kerntune(r)
        t = r.get("time")
        us = float(t) * 1e3 if isinstance(t, (int, float)) and "__error__" not in r and math.isfinite(t) else None
        stamp = datetime.fromisoformat(str(r["timestamp"]))
        evaluations.append(Evaluation(config_key(config), (stamp - start).total_seconds(), us,
                                      *(float(r.get(k) or 0.0) / 1e3 for k in KT_STAGES)))
        if us is not None and (best_us is None or us < best_us):
            best, best_us = config, us
    return Run("Kernel Tuner", strategy, seed, wall, evaluations, best, best_us)


def retime(template: Template, problem: Problem, backend: str, device: int, configs: Sequence[dict],
           seed: int, rounds: int) -> list[tuple[float, int, str]]:
    """Each configuration timed by kerntune's evaluator (verified, L2 flushed, up to 200 launches
    a round), the configurations alternating for `rounds` rounds; per configuration the median of
    every timed launch, their count, and "ok" or the first failure any round found."""
    b = open_backend(backend, device)
    try:
        ev = Evaluator(b, template, problem, seed=seed, timing=TimingPolicy(min_repeats=50, max_repeats=200,
                                                                            target_s=0.1))
        kernels = [ev.compile(c) for c in configs]
        times: list[list[float]] = [[] for _ in configs]
        status = ["ok" for _ in configs]
        for n in range(rounds):
            order = range(len(configs)) if n % 2 == 0 else reversed(range(len(configs)))
            for i in order:  # A B, B A, ...: neither is always timed first
                r = ev.evaluate(configs[i], kernel=kernels[i])
                if r.status != "ok" and status[i] == "ok":
                    status[i] = f"{r.status}: {r.message}"
                times[i] += r.times_us
    finally:
        b.close()
    return [(statistics.median(t) if t else math.nan, len(t), s) for t, s in zip(times, status)]


def retime_apart(spec: Path, problem: str | None, backend: str, device: int, configs: Sequence[dict],
                 seed: int, rounds: int) -> list[tuple[float, int, str]]:
    """`retime` in a new process: nothing either tool left behind in this one (contexts, queues,
    memory pools, threads) shares the device with the timed launches."""
    with ProcessPoolExecutor(max_workers=1, mp_context=mp.get_context("spawn")) as pool:
        return pool.submit(_retime_spec, str(spec), problem, backend, device, list(configs), seed, rounds).result()


def _retime_spec(spec: str, problem: str | None, backend: str, device: int, configs: list[dict], seed: int,
                 rounds: int) -> list[tuple[float, int, str]]:
    template = load_template(spec)
    return retime(template, template.problem(problem), backend, device, configs, seed, rounds)


# -- the bench ---------------------------------------------------------------------------------

def _opencl_place(device: int) -> tuple[int, int, Callable[[int], Any]]:
    """Kernel Tuner's (platform, device) numbers for kerntune's OpenCL device `device`, and a maker
    of `__local` arguments."""
    import pyopencl as cl

    b = open_backend("opencl", device)
    try:
        dev = b.device
        platforms = cl.get_platforms()
        p = next(i for i, pl in enumerate(platforms) if pl.int_ptr == dev.platform.int_ptr)
        d = next(i for i, x in enumerate(platforms[p].get_devices()) if x.int_ptr == dev.int_ptr)
    finally:
        b.close()
    return p, d, cl.LocalMemory


def capped(space: Space, template: Template, n: int, seed: int = 0) -> tuple[Config, ...]:
    """The same N configurations for both tools: the default (when feasible) and a seeded sample."""
    if not n or n >= space.feasible:
        return space.configs
    default = Config.of(template.default_config())
    rest = [c for c in space.configs if c != default]
    chosen = set(random.Random(seed).sample(rest, n - (default in space.configs)))
    if default in space.configs:
        chosen.add(default)
    return tuple(c for c in space.configs if c in chosen)


def protocols(template: Template) -> str:
    """What each tool does to one configuration, as each runs by default here."""
    import inspect

    from kernel_tuner import tune_kernel

    t, v = TimingPolicy(), VerifyPolicy()
    sizes = 1 + len(template.verify_problems)
    iterations = inspect.signature(tune_kernel).parameters["iterations"].default
    return (f"kerntune checks each configuration at {sizes} size{'s' if sizes > 1 else ''} with {v.seeds} input "
            f"sets each (outputs poisoned before every launch, timed launches checked too) and reports the "
            f"median of {t.min_repeats}-{t.max_repeats} launches, the cache flushed between them; Kernel Tuner "
            f"checks one launch at the tuning size and reports the mean of {iterations} launches, no flush.")


def _fmt_config(config: Mapping[str, ParamValue] | None) -> str:
    return " ".join(f"{k}={int(v) if isinstance(v, bool) else v}" for k, v in config.items()) if config else "-"


def _fmt_s(x: float | None) -> str:
    return "not reached" if x is None or not math.isfinite(x) else f"{x:.1f}"


def _step(text: str) -> None:
    print(f"  {text}", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--template", default="silu_and_mul", help="a library template's name, or a kernel.toml")
    ap.add_argument("--problem", default=None, help="one of the template's [[problem]] names (default: its first)")
    ap.add_argument("--backend", choices=("cuda", "opencl"), default="cuda")
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--max-configs", type=int, default=0, help="tune the same random N of the space (0: all)")
    ap.add_argument("--strategy-budget", type=int, default=0,
                    help="evaluations for each strategy run (0: a tenth of the space, at least 30)")
    ap.add_argument("--seeds", type=int, default=5,
                    help="strategy runs per strategy, seeds 1..N (their median: one lucky run must not decide it)")
    ap.add_argument("--kt-strategies", default=",".join(KT_STRATEGIES))
    ap.add_argument("--kt-lang", choices=("cupy", "nvcuda"), default="cupy", help="Kernel Tuner's CUDA backend")
    ap.add_argument("--rounds", type=int, default=5, help="alternating rounds of the common timer")
    ap.add_argument("--seed", type=int, default=1, help="the input data's seed")
    ap.add_argument("--cold", action="store_true",
                    help="start nothing ahead of either tool's clock (see the notes above)")
    args = ap.parse_args(argv)
    try:
        return bench(args)
    except ImportError as e:
        print(f"peer: {e} (pip install -e '.[bench]' for Kernel Tuner)", file=sys.stderr)
    except (OSError, TemplateError, BackendError, PeerError) as e:
        print(f"peer: {e}", file=sys.stderr)
    return 2


def _setup(args: argparse.Namespace) -> tuple:
    """The template, problem, space and Kernel Tuner job the arguments name."""
    template = load_template(templates.path(args.template) or Path(args.template))
    problem = template.problem(args.problem)
    backend = args.backend
    _, limits = resolve_device(backend, args.device)
    space = build_space(template, problem, limits)
    configs = capped(space, template, args.max_configs)
    allowed = {c.key for c in configs}
    skip = tuple(c.key for c in space.configs if c.key not in allowed)
    platform, device, local = (0, args.device, None)
    if backend == "opencl":
        platform, device, local = _opencl_place(args.device)
        lang = "OpenCL"
    else:
        lang = {"cupy": "CuPy", "nvcuda": "NVCUDA"}[args.kt_lang]
    inputs = reference_inputs(template, problem, args.seed)
    job = kernel_tuner_job(template, problem, space, backend, limits, inputs, lang=lang, allowed=allowed,
                           device=device, platform=platform, local_memory=local)
    return template, problem, backend, limits, space, configs, skip, lang, job


def run_kernel_tuner_apart(args: argparse.Namespace, strategy: str, budget: int, seed: int) -> Run:
    """`run_kernel_tuner` in a new process: CuPy keeps compiled modules in memory for the life of
    a process, so runs in one process after the first would compile nothing. Each run starts as
    kerntune's does, from no compiled kernel at all (its clock starts at tune_kernel's call)."""
    with ProcessPoolExecutor(max_workers=1, mp_context=mp.get_context("spawn")) as pool:
        return pool.submit(_kernel_tuner_run, vars(args), strategy, budget, seed).result()


def _kernel_tuner_run(arguments: dict, strategy: str, budget: int, seed: int) -> Run:
    args = argparse.Namespace(**arguments)
    job = _setup(args)[-1]
    from kernel_tuner.interface import strategy_map

    strategy_map[strategy].tune  # imported before the clock starts (scikit-learn's import: 3 s)
    ahead = None if args.cold else lambda: kernel_tuner_ahead(args.backend, args.kt_lang, job.platform, job.device)
    return run_kernel_tuner(job, strategy, budget, seed, ahead)


WARM_SOURCE = 'extern "C" __global__ void peer_warm(float *x) { if (x) x[0] = 0.0f; }\n'


def kernel_tuner_ahead(backend: str, lang: str, platform: int, device: int) -> None:
    """Kernel Tuner's process as a program using it would have it before a run: the device's
    context open and the compiler loaded, one empty kernel built (as kerntune's worker and compile
    processes are started ahead). Its own kernel cache is left alone: the run compiles into a new
    folder."""
    if backend == "opencl":
        import pyopencl as cl

        ctx = cl.Context([cl.get_platforms()[platform].get_devices()[device]])
        cl.Program(ctx, "__kernel void peer_warm(__global float *x) { if (x) x[0] = 0.0f; }").build()
        return
    if lang == "cupy":
        import cupy as cp

        with cp.cuda.Device(device):
            cp.zeros(1, dtype=cp.float32).sum()  # the context, CuPy's memory pool
            module = cp.RawModule(code=WARM_SOURCE)
            module.get_function("peer_warm")  # NVRTC loads and builds
            cp.cuda.Device(device).synchronize()
        return
    from cuda.bindings import driver, nvrtc

    driver.cuInit(0)
    err, prog = nvrtc.nvrtcCreateProgram(WARM_SOURCE.encode(), b"peer_warm.cu", 0, [], [])
    nvrtc.nvrtcCompileProgram(prog, 0, [])
    nvrtc.nvrtcDestroyProgram(prog)


def bench(args: argparse.Namespace) -> int:
    """Both exhaustive runs, the strategy runs, the common timer, then the tables."""
    import kernel_tuner
    from kernel_tuner.interface import strategy_map

    template, problem, backend, limits, space, configs, skip, lang, job = _setup(args)
    budget = args.strategy_budget or min(len(configs), max(30, len(configs) // 10))
    strategies = [s for s in args.kt_strategies.split(",") if s]
    unknown = [s for s in strategies if s not in strategy_map]
    if unknown:
        raise PeerError(f"Kernel Tuner has no strategy {', '.join(unknown)} (it has {', '.join(strategy_map)})")
    for s in list(strategies):  # imported now, so that no run's clock counts an import (scikit-learn's: 3 s)
        try:
            strategy_map[s].tune
        except ImportError as e:  # bayes_opt needs scipy and scikit-learn
            print(f"Kernel Tuner's {s} is left out: {str(e).splitlines()[-1]}", flush=True)
            strategies.remove(s)

    print(f"{template.name} {problem.label()} on {limits.name} ({backend}); Kernel Tuner "
          f"{kernel_tuner.__version__} ({lang}); {len(configs)} of {space.feasible} feasible configurations; "
          f"strategy budget {budget}, seeds 1..{args.seeds}", flush=True)
    ahead = not args.cold
    print("before each clock: " + ("each tool's processes started ahead (Kernel Tuner's: imported, the device's "
                                   "context open, NVRTC loaded; kerntune's: imported, its worker and compile "
                                   "processes started and ready)" if ahead else
                                   "nothing started ahead (--cold): each run starts its device and compiler"),
          flush=True)
    searches: dict[tuple[str, str], list[Run]] = {}
    # kerntune's input sets and references kept for the bench (its compile caches are new for every
    # run, and the inputs' cache lives beside them by default)
    with tempfile.TemporaryDirectory(prefix="peer-") as tmp, env_folder(INPUTS_ENV, Path(tmp) / "inputs"):
        out = Path(tmp)
        # Kernel Tuner's input set and answer are made before its clock starts (`_setup`); kerntune's
        # likewise: its input sets and references for every seed a run below uses, drawn now by an
        # untimed run of its first configurations, whose checks use every set (each timed run still compiles
        # everything)
        for seed in sorted({args.seed, *range(1, args.seeds + 1)}):
            _step(f"kerntune's input sets, seed {seed} (untimed)")
            run_kerntune(template, problem, backend, args.device, "grid", DRAWN_BY, seed, skip, out)
        _step("kerntune, grid")
        ours = run_kerntune(template, problem, backend, args.device, "grid", 0, args.seed, skip, out, ahead)
        _step("Kernel Tuner, brute_force")
        theirs = run_kernel_tuner_apart(args, "brute_force", 0, args.seed)
        for seed in range(1, args.seeds + 1):
            _step(f"kerntune, model, seed {seed}")
            searches.setdefault(("kerntune", "model"), []).append(
                run_kerntune(template, problem, backend, args.device, "model", budget, seed, skip, out, ahead))
            for s in strategies:
                _step(f"Kernel Tuner, {s}, seed {seed}")
                searches.setdefault(("Kernel Tuner", s), []).append(run_kernel_tuner_apart(args, s, budget, seed))
    if ours.best is not None and theirs.best is not None:
        _step("both winners, kerntune's evaluator")
        common = retime_apart(template.spec_path, args.problem, backend, args.device, [ours.best, theirs.best],
                              args.seed, args.rounds)
    else:
        common = [(math.nan, 0, "no winner")] * 2
    near = candidates([ours, theirs], {c.key: c for c in configs})
    _step(f"the 3% set: {len(near)} configurations near either best, kerntune's evaluator")
    timed = retime_apart(template.spec_path, args.problem, backend, args.device, [c.as_dict() for c in near],
                         args.seed, args.rounds) if near else []
    good = good_set([(c, us if s == "ok" else math.inf) for c, (us, _, s) in zip(near, timed)])
    print_tables(ours, theirs, common, searches, budget, good, len(near))
    print(f"\n{protocols(template)}")
    return 0


def _rate(run: Run) -> float:
    return run.evaluated / run.wall_s if run.wall_s > 0 else math.nan


def _steady(run: Run) -> str:
    """Configurations per second from the first result to the last, and the seconds outside that
    span: before the first result (start-up) and after the last (final checks, shutdown)."""
    if len(run.evaluations) < 2:
        return "-"
    first, last = run.evaluations[0].at_s, run.evaluations[-1].at_s
    rate = (len(run.evaluations) - 1) / (last - first) if last > first else math.nan
    return f"{rate:.2f} ({first:.1f} s before, {run.wall_s - last:.1f} s after)"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def print_tables(kt: Run, peer: Run, common: list[tuple[float, int, str]],
                 searches: Mapping[tuple[str, str], list[Run]], budget: int, good: set[str],
                 retimed: int) -> None:
    """The exhaustive runs side by side, then the searches' time to within 3%."""
    rows = [
        ("configurations evaluated", f"{kt.evaluated}", f"{peer.evaluated}"),
        ("end-to-end wall s", f"{kt.wall_s:.1f}", f"{peer.wall_s:.1f}"),
        ("configurations/s", f"{_rate(kt):.2f}", f"{_rate(peer):.2f}"),
        ("configurations/s from the first result to the last", _steady(kt), _steady(peer)),
        ("compile / verify / time s per configuration (medians)",
         *("{:.3f} / {:.3f} / {:.3f}".format(*r.stages()) for r in (kt, peer))),
        ("winner", _fmt_config(kt.best), _fmt_config(peer.best)),
        ("winner, own timer us", *(f"{r.best_us:.2f}" if r.best_us else "-" for r in (kt, peer))),
        ("winner, common timer us", *(f"{us:.2f} ({n} launches)" for us, n, _ in common)),
        ("winner, kerntune's checks", *(s for _, _, s in common)),
    ]
    print()
    print("| exhaustive | kerntune (grid) | Kernel Tuner (brute_force) |")
    print("|---|---|---|")
    for name, a, b in rows:
        print(f"| {name} | {a} | {b} |")
    for run in (kt, peer):
        if run.note:
            print(f"\n{run.tool}: {run.note}")
    print(f"\nkerntune / Kernel Tuner configurations per second: {_rate(kt) / _rate(peer):.2f}x")

    print(f"\nTime to a configuration within {100 * WITHIN:g}% of the best, both tools judged by the common "
          f"timer ({_plural(len(good), 'such configuration')} among the {retimed} either exhaustive run timed "
          f"within {100 * NEAR:g}% of its best); {budget} evaluations per run; seconds from the call, per seed:")
    print()
    print("| tool | strategy | seconds per seed | median s | configurations evaluated by then (median) "
          "| run wall s (median) | compile s per configuration (median) |")
    print("|---|---|---|---|---|---|---|")
    medians: dict[str, list[tuple[float, str]]] = {}
    notes: list[str] = []
    for (tool, strategy), runs in searches.items():
        reached = [r.reaching(good) for r in runs]
        seconds = statistics.median(x[0] if x else math.inf for x in reached)
        counts = statistics.median(x[1] if x else math.inf for x in reached)
        medians.setdefault(tool, []).append((seconds, strategy))
        notes += [f"{tool} {strategy}, seed {r.seed}: {r.note}" for r in runs if r.note]
        # (a compile far under the exhaustive run's would be a cache's answer, not a build)
        compiles = [r.stages()[0] for r in runs if r.evaluations]
        print(f"| {tool} | {strategy} | {', '.join(_fmt_s(x[0] if x else None) for x in reached)} | "
              f"{_fmt_s(seconds)} | {counts:g} | {statistics.median(r.wall_s for r in runs):.1f} | "
              f"{statistics.median(compiles) if compiles else math.nan:.3f} |")
    for note in notes:
        print(f"\n{note}")
    best = {tool: min(v) for tool, v in medians.items()}
    if "kerntune" in best and "Kernel Tuner" in best:
        (a, _), (b, s) = best["kerntune"], best["Kernel Tuner"]
        line = (f"\nmedian seconds to within {100 * WITHIN:g}%: kerntune's model strategy {_fmt_s(a)}, Kernel "
                f"Tuner's best strategy here ({s}) {_fmt_s(b)}")
        if math.isfinite(a) and math.isfinite(b) and a > 0 and b > 0:
            line += f": kerntune {b / a:.2f}x sooner" if b >= a else f": Kernel Tuner {a / b:.2f}x sooner"
        print(line)


if __name__ == "__main__":
    sys.exit(main())
