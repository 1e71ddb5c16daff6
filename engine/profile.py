"""Profiler evidence: Nsight Compute (`ncu`) metrics for chosen configurations.

Timing says which configuration is fastest; the counters say why. `profile_config` starts a
child process under ncu (engine/ncu.py: how it runs and what its page says) that compiles one
configuration, uploads random inputs and launches the kernel twice; ncu profiles the second
launch. `profile_session` does that for configurations of a saved session, by leaderboard rank,
and appends what it found to the session as `config_profiled` events.

Without ncu, or where it cannot read the counters, the result is one clear line
(`ProfileError`), never a traceback, and nothing else stops.
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from .ncu import ProfileError, ProfileMetrics, ncu_version, parse_ncu_output, require_ncu, run_ncu

DEFAULT_TIMEOUT = 300.0


@dataclass
class ProfileJob:
    """What the profiled child needs: plain data, written as JSON for it."""

    spec_path: str
    spec_text: str
    sources: Mapping[str, str]
    problem_name: str
    problem: Mapping[str, int]
    config: Mapping[str, Any]
    original: bool = False  # the template's original kernel at its own launch
    device: int = 0
    seed: int = 12345
    originals: Mapping[str, str] = field(default_factory=dict)
    launches: int = 2  # ncu profiles the second; memcheck needs one
    backend: str = "cuda"  # (the tools are CUDA's; a test runs the child on OpenCL)


def profile_job(job: ProfileJob, *, ncu: str | None = None, timeout: float = DEFAULT_TIMEOUT,
                entry: str, raw_out: Path | None = None) -> ProfileMetrics:
    """Profile one configuration in a child process under ncu; ProfileError on any failure."""
    ncu = require_ncu(ncu)
    with tempfile.TemporaryDirectory(prefix="kerntune-profile-") as tmp:
        job_path = Path(tmp) / "job.json"
        job_path.write_text(json.dumps(asdict(job)))
        target = [sys.executable, "-m", "kerntune.engine.profile", "--target", str(job_path)]
        text = run_ncu(ncu, entry, target, timeout=timeout, raw_out=raw_out)
    target_error = _target_error(text)
    if target_error:
        raise ProfileError(target_error)
    return parse_ncu_output(text, entry)


def _target_error(text: str) -> str:
    m = re.search(r"^kerntune-profile-error: (.*)$", text, re.MULTILINE)
    return m.group(1).strip() if m else ""


def job_for(template: Any, problem: Any, config: Mapping[str, Any] | None, device: int = 0) -> ProfileJob:
    """The job profiling `config` (None: the original kernel) of `template` at `problem`."""
    return ProfileJob(spec_path=str(template.spec_path), spec_text=template.spec_text,
                      sources=dict(template.sources), problem_name=problem.name,
                      problem=dict(problem.values), config=dict(config or {}), original=config is None,
                      device=device, originals=dict(template.original_sources))


def profile_config(template: Any, problem: Any, config: Mapping[str, Any] | None, *, device: int = 0,
                   ncu: str | None = None, timeout: float = DEFAULT_TIMEOUT,
                   raw_out: Path | None = None) -> ProfileMetrics:
    """Profile one configuration of a template (None: its original kernel) on a CUDA device."""
    return profile_job(job_for(template, problem, config, device), ncu=ncu, timeout=timeout,
                       entry=template.entry, raw_out=raw_out)


def template_from_session(header: Mapping[str, Any], into: Path) -> Any:
    """The template a session was recorded with: its own file when that is unchanged, the
    built-in one of that name when it is the same, else rebuilt in `into` from the spec and
    sources the session carries (without the numpy reference, which profiling does not need)."""
    from .proposal import dump_spec
    from .template import TemplateError, load_template, parse_template, read_spec_toml, spec_entry

    t = header.get("template", {})
    fingerprint = t.get("fingerprint")
    candidates = [Path(str(t.get("path", "")))]
    try:
        from kerntune import templates

        builtin = templates.path(str(t.get("name", "")))
        if builtin is not None:
            candidates.append(builtin)
    except ImportError:  # pragma: no cover
        pass
    for c in candidates:
        if c.is_file():
            try:
                tpl = load_template(c)
            except TemplateError:
                continue
            if tpl.fingerprint() == fingerprint:
                return tpl
    spec, backend = t.get("spec"), t.get("backend", "cuda")
    if not isinstance(spec, str) or not isinstance(t.get("source"), str):
        raise ProfileError("the session does not carry its template's spec and source")
    data = read_spec_toml(spec)
    kernel = data.get("kernel", {})
    kernel.pop("reference", None)
    names = {"cuda": "kernel.cu", "opencl": "kernel.cl"}
    kernel["sources"] = {backend: names.get(backend, "kernel.src")}
    (into / kernel["sources"][backend]).write_text(t["source"])
    had_original = spec_entry(kernel, "original")
    kernel.pop("baseline", None)  # the key earlier specs (and the sessions that carry them) wrote
    kernel.pop("original", None)
    if isinstance(t.get("original_source"), str) and had_original:
        kernel["original"] = {backend: "original." + names.get(backend, "x.src").split(".")[-1]}
        (into / kernel["original"][backend]).write_text(t["original_source"])
    spec_path = into / "kernel.toml"
    text = dump_spec(data)
    spec_path.write_text(text)
    return parse_template(text, spec_path)


def profiled_event(t: float, result: Any, rank: int, bytes_moved: float, *, metrics: ProfileMetrics | None = None,
                   error: str = "", tool: str = "") -> Any:
    from .events import ConfigProfiled

    return ConfigProfiled(t, dict(result.config), metrics is not None,
                          metrics.to_dict() if metrics is not None else {}, error, rank,
                          float(result.median_us or 0.0), float(bytes_moved), tool)


def profile_session(path: Path, ranks: Sequence[int], *, ncu: str | None = None, device: int = 0,
                    timeout: float = DEFAULT_TIMEOUT, record: bool = True, raw_dir: Path | None = None,
                    on_event: Any = None) -> list[Any]:
    """Profile configurations of a saved session by leaderboard rank (1 = best) and append
    a `config_profiled` event for each to the session (with `record`). A config that cannot be
    profiled is an event with its reason; ProfileError only when nothing can be (no ncu, no
    CUDA session, a rank that does not exist)."""
    from .result import ranked
    from .session import SessionWriter, load_session
    from .template import Problem

    session = load_session(path)
    backend = session.template.get("backend")
    if backend != "cuda":
        raise ProfileError(f"{path}: profiling needs a CUDA session (this one ran on {backend})")
    board = ranked(session.results())
    for n in ranks:
        if not 1 <= n <= len(board):
            raise ProfileError(f"{path}: no configuration ranked {n} (ranks 1..{len(board)})")
    ncu = require_ncu(ncu)
    tool = ncu_version(ncu)
    space = session.space
    problem = Problem(str(space.get("problem_name", "")), {k: int(v) for k, v in space.get("problem", {}).items()})
    t = session.events[-1].t if session.events else 0.0
    events = []
    with tempfile.TemporaryDirectory(prefix="kerntune-session-template-") as tmp:
        template = template_from_session(session.header, Path(tmp))
        bytes_moved = float(template.cost_bytes.evaluate(problem.values))
        writer = SessionWriter(path) if record else None
        try:
            for n in ranks:
                r = board[n - 1]
                raw = raw_dir / f"{template.name}-rank{n}.txt" if raw_dir is not None else None
                try:
                    m = profile_config(template, problem, r.config, device=device, ncu=ncu, timeout=timeout,
                                       raw_out=raw)
                    ev = profiled_event(t, r, n, bytes_moved, metrics=m, tool=tool)
                except ProfileError as e:
                    ev = profiled_event(t, r, n, bytes_moved, error=str(e), tool=tool)
                if writer is not None:
                    writer.write(ev)
                if on_event is not None:
                    on_event(ev)
                events.append(ev)
        finally:
            if writer is not None:
                writer.close()
    return events


def consistency(ev: Any) -> str:
    """The profiler's DRAM traffic read against the run's timing and the cost model's bytes."""
    m = ev.metrics
    if not ev.ok or not m:
        return ""
    parts = []
    if ev.bytes_moved and ev.measured_us:
        parts.append(f"cost model {ev.bytes_moved / 1e6:,.1f} MB in {ev.measured_us:,.2f} us timed = "
                     f"{ev.bytes_moved / (ev.measured_us * 1e3):,.0f} GB/s")
    if m.get("duration_us"):
        parts.append(f"ncu {m.get('dram_bytes', 0) / 1e6:,.1f} MB DRAM in {m['duration_us']:,.2f} us = "
                     f"{m.get('dram_gbs', 0):,.0f} GB/s")
    return "; ".join(parts)


# the profiled child ----------------------------------------------------------------------------
# What the child prints around each configuration of a list, so that the parent knows which ones
# began and which ended (never which one a tool's finding belongs to: the tool prints apart)
STARTED, DONE = "kerntune-check-started", "kerntune-check-done"


def _run_target(job_path: str | None) -> int:
    """Compile one configuration, upload inputs, launch (twice: ncu profiles the second). Runs
    under ncu or compute-sanitizer. With no path the job comes on standard input in two lines:
    the job, then which configuration (`{"config": {...}, "original": false}`), or several
    (`{"configs": [{...}, ...], "nonce": word}`: each compiled and launched in turn on fresh
    copies of the inputs, between a STARTED and a DONE line that carry the word), so that the child can be started, its modules
    loaded and its inputs drawn before the configurations are known; nothing touches the device
    until the second line comes. An empty line: not needed after all."""
    from .template import Problem, parse_template
    from .inputs import make_inputs

    try:
        text = Path(job_path).read_text() if job_path is not None else sys.stdin.readline()
        if not text.strip():
            return 0  # started ahead and not needed
        job = ProfileJob(**json.loads(text))
        template = parse_template(job.spec_text, Path(job.spec_path), job.sources)
        problem = Problem(job.problem_name, dict(job.problem))
        inputs = make_inputs(template, problem, job.seed)
        chosen: list[Mapping[str, Any]] = [{"config": job.config, "original": job.original}]
        listed, nonce = False, ""
        if job_path is None:
            which = sys.stdin.readline()
            if not which.strip():
                return 0
            given = json.loads(which)
            listed = "configs" in given
            chosen = list(given["configs"]) if listed else [given]
            nonce = str(given.get("nonce", ""))
        from .backends import open_backend

        for i, c in enumerate(chosen):
            if listed:
                print(f"{STARTED} {nonce} {i}", flush=True)
            # each configuration in a context of its own: memory an earlier one left mapped (its
            # module, a pool) would be valid memory to memcheck and hide a far write
            backend = open_backend(job.backend, job.device)
            try:
                _launch(backend, template, problem, inputs,
                        replace(job, config=dict(c.get("config") or {}), original=bool(c.get("original"))))
            finally:
                backend.close()
            if listed:
                print(f"{DONE} {nonce} {i}", flush=True)
    except Exception as e:  # reported to the parent through the tool's output, as one line
        print(f"kerntune-profile-error: {type(e).__name__}: {e}", flush=True)
        return 1
    return 0


def _launch(backend: Any, template: Any, problem: Any, inputs: Any, job: ProfileJob) -> None:
    """One configuration compiled and launched `job.launches` times on fresh copies of the
    inputs, in buffers of its own (let go when it returns)."""
    from .backends import ConstantArg
    from .inputs import arg_nbytes
    from .space import compiler_defines, geometry, launch_geometry

    name = job.backend
    if job.original:
        # a spec with no original's file is its own original (the agent loop's, with no
        # parameters): its source as written, no defines
        source = job.originals.get(name) or template.original_sources.get(name) or template.source_for(name)
        kernel = backend.compile(source, template.entry, {}, template.options_for(name))
        geo = launch_geometry(template, None, problem, backend.limits)
    else:
        kernel = backend.compile(template.source_for(name), template.entry, compiler_defines(job.config),
                                 template.options_for(name))
        geo = geometry(template, job.config, problem, backend.limits)
    args = []
    for a in template.arguments:
        if not a.is_buffer:
            args.append(inputs.scalars[a.name])
            continue
        nbytes = arg_nbytes(a, problem)
        buf = backend.alloc(nbytes)
        if a.name in inputs.host:
            backend.upload(buf, inputs.host[a.name])
        else:
            backend.fill(buf, 0, nbytes)
        args.append(ConstantArg(a.name, buf, nbytes) if a.constant else buf)
    for _ in range(max(1, job.launches)):  # under ncu: a warm-up, then the profiled launch
        backend.launch(kernel, geo, args)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) == 2 and args[0] == "--target":
        return _run_target(args[1] if args[1] != "-" else None)
    print("usage: python -m kerntune.engine.profile --target JOB.json|-", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
