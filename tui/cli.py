"""The `kerntune` command: `main`, and the commands that read, convert or describe (list, devices,
show, simulate, kt-import, kt-export, profile, probe, init).

The grammar is tui/parser.py; the commands that run a search or show the dashboard (tune,
templatize, campaign, replay) are tui/launch.py; which errors end a command as one line is
tui/errors.py. Each command imports only what it uses, so that `show` and `simulate` start fast.
Every command exits non-zero with one clear line on bad input, never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

from kerntune.tui.errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_INTERRUPTED, UsageError, one_line, print_error
from kerntune.tui.parser import build_parser, command_of
from kerntune.tui.terminal import guarded_output, printable, printable_source


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    with guarded_output():  # what any command prints reaches the terminal with its controls escaped
        return _run(argv)


def _run(argv: list[str]) -> int:
    try:
        for arg in argv:
            if "\0" in arg:  # no file name or value holds one; the OS would refuse it later, unclearly
                raise UsageError(f"{arg!r}: an argument with a NUL byte")
        args = build_parser(command_of(argv)).parse_args(argv)
        if args.command is None:
            build_parser().print_help()
            return EXIT_BAD_INPUT
        with _cut_by_signals() as was_cut:
            status = COMMANDS[args.command](args, argv)
        if was_cut:  # the run stopped for the signal and ended well: still a cut run
            print_error(was_cut[0])
            return EXIT_INTERRUPTED
        return status
    except BaseException as e:  # noqa: B036 (what is not one line, --help's exit among them, goes on up)
        said = one_line(e)
        if said is None:
            raise
        status, line = said
        if line:
            print_error(line)
        return status


CUT_BY = {"SIGTERM": "cut: the run was terminated (SIGTERM)", "SIGHUP": "cut: the terminal hung up (SIGHUP)"}


@contextlib.contextmanager
def _cut_by_signals():
    """While a command runs, SIGTERM and SIGHUP cut it as Ctrl-C does: the run stops, records why
    in its session, and ends every child it started (workers, compute-sanitizer, the profiler).
    Yields a list that holds the reason once a signal came."""
    import signal
    import threading

    from kerntune.engine.emitter import cut

    was_cut: list[str] = []
    if threading.current_thread() is not threading.main_thread():
        yield was_cut
        return

    def handler(reason: str) -> None:
        was_cut.append(reason)
        cut(reason)

    before = {}
    for name, reason in CUT_BY.items():
        sig = getattr(signal, name, None)
        if sig is not None:
            before[sig] = signal.signal(sig, lambda _s, _f, reason=reason: handler(reason))
    try:
        yield was_cut
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def refuse_overwrite(path: Path, force: bool) -> None:
    """A command that writes a file never writes over one without --force (one line, exit 2)."""
    if path.exists() and not force:
        raise UsageError(f"{path}: already exists (--force writes over it)")


# list, devices ---------------------------------------------------------------------------------

def cmd_list(args: argparse.Namespace, argv: Sequence[str]) -> int:
    import textwrap

    from kerntune import templates
    from kerntune.engine.template import load_template
    from kerntune.tui.terminal import text_width

    width = text_width()

    def say(label: str, text: str) -> None:  # `    label      text`, wrapped at the width under the text
        head = f"    {label:<10} "
        print(textwrap.fill(printable(text), width, initial_indent=printable(head), subsequent_indent=" " * len(head),
                            break_on_hyphens=False))

    for name in templates.names():
        t = load_template(templates.path(name))
        print(textwrap.fill(printable(f"{t.name}: {t.description}"), width, subsequent_indent="    ", break_on_hyphens=False))
        say("backends", ", ".join(sorted(t.sources)))
        for p in t.parameters:
            say(p.name, f"{', '.join(map(str, p.values))}  (default {p.default})")
        say("problems", "; ".join(f"{pr.name} ({', '.join(f'{k}={v}' for k, v in pr.values.items())})"
                                  for pr in t.problems))
    return 0


def cmd_devices(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from kerntune.engine.backends import BACKEND_NAMES, BackendError, list_devices
    from kerntune.engine.device import describe

    found = 0
    for backend in BACKEND_NAMES:
        said = False
        try:
            devices = list_devices(backend)
        except BackendError as e:
            print(printable(f"{backend}: {e}"))
            devices, said = [], True
        unusable = _unusable(backend)
        if not devices and not unusable and not said:
            print(printable(f"{backend}: no devices"))
        for d in devices:
            found += 1
            print(printable(f"{backend} device {d.index}: {d.limits.name}"))
            for label, value in describe(d.limits):
                if label in ("backend", "name"):
                    continue
                print(printable(f"    {label:<22} {value}"))
            for defect in _defects(d.limits):
                print(printable(f"    {'runtime defect':<22} {defect}"))
        for line in unusable:
            print(printable(f"{backend} (not used): {line}"))
    try:
        from kerntune.engine import nvml
    except ImportError:
        nvml = None
    if nvml is not None:
        for line in nvml.describe_all():
            print(printable(line))
    return 0 if found else EXIT_FAILED


def _unusable(backend: str) -> list[str]:
    """The devices of a backend that failed their check, as `label: reason`."""
    if backend != "opencl":
        return []
    from kerntune.engine.backends import BackendError, opencl

    try:
        return [f"{c.label}: {c.reason}" for c in opencl.unusable_devices()]
    except BackendError:
        return []


def _defects(limits: Any) -> list[str]:
    """The known runtime defects a device's check found, in words."""
    from kerntune.engine.backends.opencl_check import DEFECTS

    return [f"{DEFECTS[d]} (the rewrites it breaks are declined)" for d in limits.extra.get("defects", ())
            if d in DEFECTS]


def cmd_setup(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from kerntune.tui.setup import setup

    return setup()


# show ------------------------------------------------------------------------------------------

def cmd_show(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from kerntune.engine.session import SessionError, load_session
    from kerntune.tui.numbers import fmt_num, fmt_ratio

    if args.config is not None and not args.source:
        raise UsageError("--config N goes with --source")
    if args.output is not None and not args.csv:
        raise UsageError("show: -o goes with --csv")
    if args.output is not None:
        refuse_overwrite(args.output, args.force)
    try:
        session = load_session(args.session)
    except SessionError:
        from kerntune.engine.campaign import is_summary

        if is_summary(args.session):  # not a session: a campaign's summary
            return _show_summary(args)
        raise
    if args.source:
        return _show_source(session, 1 if args.config is None else args.config)
    if args.compare:
        return _show_compare(session, *args.compare)
    if args.csv:
        from kerntune.tui.text import leaderboard_csv

        text = leaderboard_csv(session.results(), session.default_result(), failed=args.failed)
        if args.output is None:
            sys.stdout.write(text)
        else:
            args.output.write_text(text, encoding="utf-8")
            print(printable(f"{args.session}: leaderboard -> {args.output}"))
        return 0
    summary = session.summary()
    if args.json:
        print(json.dumps(summary, indent=2, default=str))
        return 0
    from kerntune.tui.text import TextRenderer, fmt_config

    for w in session.warnings:
        print(printable(f"warning: {w}"), file=sys.stderr)
    out = TextRenderer()
    print(printable(f"session {summary['id']} ({summary['created']}): {summary['template']} on {summary['device']} "
          f"({summary['backend']}), problem {fmt_config(summary['problem'])}"))
    from kerntune.engine.certificate import certificate_line, checked

    cert = checked(session.device.get("selftest"))
    if cert is not None:
        print(printable(f"selftest of this device and driver: {certificate_line(cert)}"))
    failed = ", ".join(f"{k} {v}" for k, v in summary["failed"].items()) or "none"
    # an agent loop's session has no one space (each round searches its own): no "of N feasible"
    of = f" of {summary['feasible']} feasible" if summary["feasible"] else ""
    print(printable(f"evaluated {summary['evaluated']}{of}; verified {summary['verified']}; "
          f"failed: {failed}"))
    for line in summary.get("calibration", []):
        print(printable(line))
    if summary["speedup"]:
        interval = summary["best"].get("speedup_interval")
        within = f" (95% interval {interval[0]:.2f}-{interval[1]:.2f}, paired)" if interval else ""
        print(printable(f"best {fmt_num(summary['best']['median_us'])} us, {fmt_ratio(summary['speedup'])} the default "
              f"configuration{within}"))
    out.results = session.results()
    out.default_result = session.default_result()
    out.leaders = session.leaders()
    out.finish(show_failed=args.failed)
    from kerntune.tui.words import front_lines

    for line in front_lines(session.results(), str(session.header.get("tuning", {}).get("objective", "time"))):
        print(line)
    return 0


def _show_summary(args: argparse.Namespace) -> int:
    """`show` of a campaign's (or a served-size run's) summary: the table per (template, size)."""
    from kerntune.engine.campaign import load_summary
    from kerntune.tui.text import print_campaign

    if args.source or args.csv or args.failed:
        raise UsageError(f"{args.session}: a campaign's summary; --source, --csv and --failed go with one of "
                         "its sessions")
    summary = load_summary(args.session)
    if args.json:
        print(json.dumps(summary, indent=2, default=str))
        return 0
    head = summary["summary"]
    print(printable(f"campaign {head.get('name', '')} ({head.get('created', '')}): {len(summary['pair'])} pairs; "
          f"sessions in {Path(summary['path']).parent}"))
    print_campaign(summary)
    return 0


def _show_compare(session: Any, rank_a: int, rank_b: int) -> int:
    """`show --compare A B`: the configurations ranked A and B side by side, as the dashboard's `c`."""
    from kerntune.engine.contrast import contrast_lines
    from kerntune.tui.state import DashboardState, contrast_of

    state = DashboardState(session.header)
    state.apply_all(session.events)
    keys = []
    for rank in (rank_a, rank_b):
        key = state.ranked_key(rank)
        if key is None:
            raise UsageError(f"--compare {rank}: {session.path} ranks {state.ranked_count} configurations")
        keys.append(key)
    for line in contrast_lines(contrast_of(state, keys[0], keys[1]), f"A (rank {rank_a})", f"B (rank {rank_b})"):
        print(line)
    return 0


def _show_source(session: Any, rank: int) -> int:
    """`show --source`: the same source the dashboard's `v` shows, for the configuration ranked N."""
    from kerntune.tui.export import ExportError, config_source
    from kerntune.tui.state import DashboardState

    state = DashboardState(session.header)
    state.apply_all(session.events)
    key = state.ranked_key(rank)
    if key is None:
        raise UsageError(f"--config {rank}: {session.path} ranks {state.ranked_count} configurations")
    try:
        text = config_source(session.header, state.entries[key].result, rank=rank, ranked=state.ranked_count,
                             default_us=state.default_us, session_path=session.path,
                             template=state.template_of(key))
    except ExportError as e:
        raise UsageError(f"{session.path}: {e}") from None
    sys.stdout.write(printable_source(text))
    return 0


# simulate, kt-import, kt-export ----------------------------------------------------------------

def cmd_simulate(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from kerntune.engine.session import load_session
    from kerntune.engine.simulate import simulate

    if args.budget < 0 or not 0 < args.within < 1:
        raise UsageError("--budget must not be negative and --within is a fraction in (0, 1)")
    session = load_session(args.session)
    sim = simulate(session, args.strategy, budget=args.budget, seed=args.seed, within=(args.within,))
    if args.json:
        print(json.dumps(sim.to_dict(), indent=2))
        return 0
    from kerntune.tui.numbers import fmt_num, fmt_ratio
    from kerntune.tui.words import fmt_params

    need = sim.within[args.within]
    print(printable(f"{sim.strategy} (seed {sim.seed}) on {args.session}: {sim.evaluations} of {sim.space_size} evaluated "
          f"({sim.reason})"))
    print(printable(f"recorded best {fmt_num(sim.recorded_best.median_us)} us: {fmt_params(sim.recorded_best.config)}"))
    if sim.best is not None:
        print(printable(f"found         {fmt_num(sim.best.median_us)} us: {fmt_params(sim.best.config)} "
              f"({fmt_ratio(sim.ratio)} the best)"))
    print(printable(f"within {100 * args.within:g}% of the best after "
          + (f"{need} evaluations ({100 * need / sim.space_size:.1f}% of the space)" if need else "never")))
    return 0


def cmd_kt_import(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from kerntune.engine.kerneltuner import import_cache
    from kerntune.engine.session import load_session

    refuse_overwrite(args.output, args.force)
    out = import_cache(args.cache, args.output)
    s = load_session(out)
    print(printable(f"{args.cache}: {len(s.results())} configurations of {s.template.get('name')} -> {out}"))
    return 0


def cmd_kt_export(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from kerntune.engine.kerneltuner import export_cache
    from kerntune.engine.session import load_session

    refuse_overwrite(args.output, args.force)
    data = export_cache(load_session(args.session))
    args.output.write_text(json.dumps(data, indent=1) + "\n")
    print(printable(f"{args.session}: {len(data['cache'])} configurations -> {args.output}"))
    return 0


def cmd_export(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """`kerntune export SESSION --format header|t4|json -o FILE`."""
    from kerntune.engine.export import ExportError, export_header, export_json, export_t4, shipped_of_folder
    from kerntune.engine.session import load_session
    from kerntune.engine.summary import is_summary

    refuse_overwrite(args.output, args.force)
    try:
        if args.session.is_dir() or is_summary(args.session):  # a served-size run: its dispatch set
            if args.format == "t4":
                raise UsageError(f"{args.session}: t4 holds one session's results: export one of its sessions")
            shipped, sizes = shipped_of_folder(args.session)
            session = next(iter(sizes.values()))
        else:
            session, shipped, sizes = load_session(args.session), None, None
        if args.format == "header":
            text = export_header(session, shipped)
        else:
            data = export_t4(session) if args.format == "t4" else export_json(session, shipped, sizes)
            text = json.dumps(data, indent=1) + "\n"
    except ExportError as e:
        raise UsageError(str(e)) from None
    write_text(args.output, text)
    print(f"{args.session}: {args.format} -> {args.output}")
    return 0


def cmd_verify(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """`kerntune verify SESSION|EXPORT|FOLDER`: exit 0 when every recorded winner is correct and as
    fast as recorded beside the original, 1 when one is wrong or slower, 2 on bad input."""
    from kerntune.engine.tune import TuneOptions
    from kerntune.engine.verify import VerifyError, read_recorded, report_lines, verify

    if not 0 <= args.tolerance < 100:
        raise UsageError("--tolerance is a percentage in [0, 100)")
    try:
        recorded = read_recorded(args.source)
    except VerifyError as e:
        raise UsageError(str(e)) from None
    template = _recorded_template(args.template, recorded)
    options = TuneOptions(backend=args.backend, device=args.device, seed=args.seed, probe=not args.no_probe,
                          command=["kerntune", *argv])

    def said(s: Any) -> list:
        if not args.json:
            print(f"verifying {s.size}: {' '.join(f'{k}={v}' for k, v in s.config.items()) or 'the original'} "
                  "beside the original", flush=True)
        return []

    report = verify(recorded, template, options, args.tolerance / 100, args.session, said)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        for line in report_lines(report):
            print(line)
        print(f"{args.source}: " + ("every recorded winner passed" if report.passed else "FAILED"))
    return 0 if report.passed else EXIT_FAILED


def _recorded_template(given: Path | None, recorded: Any) -> Any:
    """The template a verification measures: --template, else the spec the recording names (as
    written, or beside the recording), else the built-in template of its name."""
    from kerntune import templates
    from kerntune.engine.template import load_template

    if given is not None:
        return load_template(given)
    path = recorded.template.get("path")
    for candidate in ([Path(path), Path(recorded.source).parent / path] if path else []):
        if candidate.is_file():
            return load_template(candidate)
    name = str(recorded.template.get("name", ""))
    if name in templates.names():
        return load_template(templates.path(name))
    raise UsageError(f"{recorded.source}: template {name!r} is neither at {path!r} nor built in: give --template SPEC")


def write_text(path: Path, text: str) -> None:
    """Write a file whole (a reader never sees half of it)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


# probe, profile --------------------------------------------------------------------------------

def cmd_probe(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from kerntune.engine.backends import open_backend
    from kerntune.engine.probe import measure_peaks
    from kerntune.engine.sol import cache_dir, cached_peaks
    from kerntune.tui.numbers import fmt_num

    backend = open_backend(args.backend, args.device)
    try:
        cached = None if args.refresh else cached_peaks(backend.limits)
        if cached is not None:
            known = [f"copy bandwidth {fmt_num(cached.bandwidth_gbs)} GB/s" if cached.bandwidth_gbs else "",
                     f"fp32 FMA {fmt_num(cached.gflops)} GFLOP/s" if cached.gflops else ""]
            print(printable(f"{backend.limits.name} ({backend.name}): {', '.join(k for k in known if k)} "
                  f"(spread {100 * cached.spread:.1f}%, {cached.source}); `kerntune probe --refresh` measures again"))
            return 0
        refused: list[str] = []
        r, peaks = measure_peaks(backend, refused.append)
    finally:
        backend.close()
    print(printable(f"{backend.limits.name} ({backend.name}): copy bandwidth {fmt_num(r.bandwidth_gbs)} GB/s "
          f"(spread {100 * r.bandwidth_spread:.1f}% over {r.bandwidth_rounds} rounds, "
          f"{r.copy_bytes / 2**20:.0f} MiB each way), fp32 FMA {fmt_num(r.gflops)} GFLOP/s "
          f"(spread {100 * r.gflops_spread:.1f}% over {r.gflops_rounds} rounds)")
          )
    for line in refused:
        print(printable(line))
    if peaks is None or not r.stable:
        print("nothing saved")
        return 1
    print(printable(f"saved to {cache_dir() / 'peaks.toml'}"))
    return 0


def cmd_selftest(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """The protocol on this device: hostile kernels caught, twin programs tied; the certificate
    is cached and recorded in later sessions' headers."""
    from kerntune.engine.certificate import certificate_file
    from kerntune.engine.selftest import run_selftest
    from kerntune.tui.text import TextRenderer

    sinks = [TextRenderer(verbose=True)] if args.verbose else []
    verdict, cert = run_selftest(args.backend, args.device, sinks)
    print(printable(f"{cert['device']} ({cert['backend']}{', ' + cert['driver'] if cert['driver'] else ''}): "
          f"caught {cert['caught']} of {cert['hostile']}, ties found {cert['ties']} of {cert['twins']} "
          f"in {cert['seconds']:.0f} s"))
    for line in verdict.missed:
        print(printable(f"missed: {line}"))
    if verdict.ties < verdict.twins:
        print(printable(verdict.tie_text))
    if verdict.same_program:
        print(printable(f"{verdict.same_program} of the twins were found built to the same program as the original"))
    if "unsaved" in cert:
        print(printable(f"could not save to {certificate_file()}: {cert['unsaved']}"))
    else:
        print(printable(f"saved to {certificate_file()}: later sessions on this device record it"))
    return 0 if verdict.passed else EXIT_FAILED


def cmd_profile(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from kerntune.engine.profile import ProfileError, ProfileMetrics, consistency, profile_session
    from kerntune.tui.text import fmt_config

    def show(ev: Any) -> None:
        if args.json:
            print(json.dumps({"rank": ev.rank, "config": dict(ev.config), "ok": ev.ok, "message": ev.message,
                              "measured_us": ev.measured_us, "bytes_moved": ev.bytes_moved,
                              "metrics": dict(ev.metrics), "tool": ev.tool}), flush=True)
            return
        print(printable(f"#{ev.rank} {fmt_config(ev.config)}"))
        if not ev.ok:
            print(printable(f"    not profiled: {ev.message}"))
            return
        print(printable(f"    {ProfileMetrics.from_dict(ev.metrics).summary()}"))
        print(printable(f"    {consistency(ev)}"), flush=True)

    try:
        profile_session(args.session, args.config or [1], device=args.device, timeout=args.timeout,
                        record=not args.no_record, on_event=show)
    except ProfileError as e:
        print_error(e)
        return EXIT_FAILED
    if not args.no_record and not args.json:
        print(printable(f"appended to {args.session}"))
    return 0


# init ------------------------------------------------------------------------------------------

def cmd_init(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """Write a starting kernel.toml from a kernel's signature, or check one (`--check`)."""
    import shutil

    from kerntune.engine.scaffold import check_spec, read_kernel, starter_spec

    if args.check is not None:
        if args.kernel is not None:
            raise UsageError("init: give a kernel source or --check SPEC, not both")
        line = check_spec(args.check)
        print(printable(line))
        return 0 if ": complete:" in line else 1
    if args.kernel is None:
        raise UsageError("init: give a kernel source (KERNEL.cu or KERNEL.cl), or --check SPEC")
    kernel = args.kernel
    cuda_path, cl_path = (None, kernel) if kernel.suffix == ".cl" else (kernel, args.opencl)
    if kernel.suffix == ".cl" and args.opencl is not None:
        raise UsageError("init: the kernel is already OpenCL; --opencl is for a CUDA kernel's OpenCL twin")
    cuda = read_kernel(cuda_path, args.entry) if cuda_path is not None else None
    opencl = read_kernel(cl_path, args.entry or (cuda.name if cuda else None)) if cl_path is not None else None
    spec = args.output or kernel.parent / "kernel.toml"
    if spec.is_dir():
        spec = spec / "kernel.toml"
    refuse_overwrite(spec, args.force)
    sources: dict[str, str] = {}
    copied = []
    written = []
    for backend, path in (("cuda", cuda_path), ("opencl", cl_path)):
        if path is None:
            continue
        sig = cuda if backend == "cuda" else opencl
        if sig is not None and sig.added_instantiation:
            # a template kernel the file does not instantiate as the entry names it (its launcher is
            # elsewhere, or it lives in a header): a source of its own adds the instantiation
            name = f"{path.stem}_{sig.name}.cu"
            spec.parent.mkdir(parents=True, exist_ok=True)
            refuse_overwrite(spec.parent / name, args.force)
            (spec.parent / name).write_text(
                path.read_text(encoding="utf-8") + "\n// kerntune init: the explicit instantiation the entry names (the file "
                "has none)\n" + sig.added_instantiation + "\n", encoding="utf-8")
            written.append(name)
            sources[backend] = name
            continue
        # sources sit beside the spec: a spec elsewhere gets its own copy
        if path.resolve().parent != spec.resolve().parent:
            spec.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, spec.parent / path.name)
            copied.append(path.name)
        sources[backend] = path.name
    starter = starter_spec(sources, cuda, opencl, ", ".join(p.name for p in (cuda_path, cl_path) if p))
    spec.parent.mkdir(parents=True, exist_ok=True)
    spec.write_text(starter.text, encoding="utf-8")
    sig = starter.signature
    roles = ", ".join(f"{a.name} {a.role}" for a in sig.args)
    print(printable(f"wrote {spec} for {sig.name}: {len(sig.args)} arguments ({roles})"
          + (f"; copied {', '.join(copied)} beside it" if copied else "")
          + (f"; wrote {', '.join(written)} beside it with the instantiation {sig.name}{sig.instantiations[0].text}"
             if written else "")))
    if sig.notes:
        print(printable(f"could not read: {'; '.join(sig.notes)} (the rest is written)"))
    print(printable(f"to fill in: {', '.join(starter.todo)}; then: kerntune init --check {spec}"))
    return 0


# the launcher's commands (tui/launch.py, which imports the engine's run machinery) -------------

def start_ahead(args: argparse.Namespace) -> None:
    """The evaluation worker and compile processes of the device(s) a command will tune on,
    started now (engine/standby.py): they import their modules and open the device while this
    process reads the template, asks the agent and builds the space, and the run takes them. A
    spare is kept for each device while the command runs, so every run after the first (the
    agent's rounds, a campaign's sizes) and every worker after a crash starts at once."""
    if getattr(args, "cluster", None):
        return  # the cluster's workers measure
    text = (getattr(args, "devices", None) or "").strip()
    try:
        devices = sorted({int(d) for d in text.split(",")}) if text and text != "all" else [args.device]
    except ValueError:
        return  # the run says what is wrong with --devices
    from kerntune.engine import standby
    from kerntune.engine.children import default_jobs

    # the run's own count (engine/tune.py `_compile_pool`): --compile-jobs, 1 for none
    jobs = args.compile_jobs or max(1, default_jobs() - (len(devices) - 1))
    for i, device in enumerate(devices):
        standby.standby(args.backend, device, keep=True, compile_jobs=jobs if i == 0 and jobs > 1 else 0)


def _with_spares(name: str, args: argparse.Namespace, argv: Sequence[str]) -> int:
    """tui/launch.py's command `name`, its spares started before it imports the engine's run."""
    start_ahead(args)
    try:
        from kerntune.tui import launch

        return getattr(launch, name)(args, argv)
    finally:
        from kerntune.engine import standby

        standby.stand_down()  # what the command did not take ends with it


def cmd_tune(args: argparse.Namespace, argv: Sequence[str]) -> int:
    return _with_spares("tune", args, argv)


def cmd_templatize(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from kerntune.tui.launch import templatize

    return templatize(args, argv)


def cmd_campaign(args: argparse.Namespace, argv: Sequence[str]) -> int:
    return _with_spares("campaign", args, argv)


def cmd_replay(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from kerntune.tui.feeds import parse_speed

    try:
        speed = parse_speed(args.speed)
    except ValueError as e:
        raise UsageError(str(e)) from None
    from kerntune.tui.launch import replay

    return replay(args.session, speed=speed, paused=args.paused)


COMMANDS: dict[str, Callable[[argparse.Namespace, Sequence[str]], int]] = {
    "list": cmd_list,
    "devices": cmd_devices,
    "setup": cmd_setup,
    "tune": cmd_tune,
    "templatize": cmd_templatize,
    "init": cmd_init,
    "campaign": cmd_campaign,
    "show": cmd_show,
    "replay": cmd_replay,
    "simulate": cmd_simulate,
    "kt-import": cmd_kt_import,
    "kt-export": cmd_kt_export,
    "export": cmd_export,
    "verify": cmd_verify,
    "profile": cmd_profile,
    "probe": cmd_probe,
    "selftest": cmd_selftest,
}

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
