"""The `kerntune` command.

Every command exits non-zero with one clear line on bad input, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from dataclasses import replace
from typing import Any, Sequence

from kerntune.engine.campaign import DEFAULT_TOP, CampaignError
from kerntune.engine.backends import BACKEND_NAMES, BackendError, list_devices, open_backend
from kerntune.engine.device import describe
from kerntune.engine.evaluate import TimingPolicy, VerifyPolicy
from kerntune.engine.expressions import ExpressionError
from kerntune.engine.kerneltuner import CacheFormatError
from kerntune.engine.search import STRATEGIES
from kerntune.engine.session import SessionError, load_session, tool_version
from kerntune.engine.simulate import SimulationError
from kerntune.engine.space import SpaceError
from kerntune.engine.template import Template, TemplateError, load_template
from kerntune.engine.tune import TuneError, TuneOptions, TuneRun
from kerntune.tui.errors import UsageError
from kerntune.tui.numbers import fmt_num, fmt_ratio
from kerntune.tui.loop_cli import add_loop_arguments, add_loop_commands, cmd_init, cmd_templatize

EXIT_BAD_INPUT = 2
EXIT_FAILED = 1


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, not argparse's usage dump
        raise UsageError(message)


def resolve_template(name: str) -> Template:
    """A built-in template by name, or a path to a kernel.toml (or its folder)."""
    from kerntune import templates

    builtin = templates.path(name)
    if builtin is not None and not Path(name).exists():
        return load_template(builtin)
    p = Path(name)
    if p.exists():
        return load_template(p)
    raise TemplateError(f"{name}: no built-in template of that name and no such file "
                        f"(built-in: {', '.join(templates.names())})")


def _parse_shape(items: Sequence[str]) -> dict[str, int]:
    out = {}
    for item in items:
        name, eq, value = item.partition("=")
        if not eq or not name.strip():
            raise UsageError(f"--shape expects NAME=VALUE, got {item!r}")
        try:
            v = int(value, 0)
        except ValueError:
            raise UsageError(f"--shape {name}: expected an integer, got {value!r}") from None
        if v < 0:
            raise UsageError(f"--shape {name}: expected a non-negative integer, got {v}")
        out[name.strip()] = v
    return out


def add_search_arguments(t: argparse.ArgumentParser) -> None:
    """The options of a search, shared by `tune` and `campaign`."""
    t.add_argument("--backend", choices=("auto",) + BACKEND_NAMES, default="auto")
    t.add_argument("--device", type=int, default=0, help="device index within the backend")
    t.add_argument("--strategy", choices=STRATEGIES, default="grid",
                   help="grid, random, model (Bayesian optimisation) or local (hill climbing)")
    t.add_argument("--sol-target", type=float, default=0.0, metavar="F",
                   help="stop once the best reaches this fraction of the speed of light (e.g. 0.9)")
    t.add_argument("--patience", type=int, default=0, metavar="K",
                   help="stop after K evaluations without improvement")
    t.add_argument("--budget", type=int, default=0, help="most configurations to evaluate (0: all)")
    t.add_argument("--time-limit", type=float, default=0.0, metavar="S", help="stop after S seconds")
    t.add_argument("--seed", type=int, help="seed for inputs and random search (default: new each run)")
    t.add_argument("--repeats", type=int, default=0, help="fix the number of timed repetitions")
    t.add_argument("--config-timeout", type=float, default=120.0, metavar="S",
                   help="a configuration taking longer is recorded as timeout (default 120)")
    t.add_argument("--compile-jobs", type=int, default=0, metavar="N",
                   help="CUDA: compile N configurations ahead in parallel (0: one per core, 1: off)")
    t.add_argument("--no-probe", action="store_true", help="do not measure the device's peaks when unknown")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="kerntune", description="Tune GPU kernels: templates, constrained search, verified timing.")
    p.add_argument("--version", action="version", version=f"kerntune {tool_version()}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.add_parser("list", help="built-in templates with their parameters and problem sizes")
    sub.add_parser("devices", help="every device found, by backend, with its limits")

    t = sub.add_parser("tune", help="tune a template")
    t.add_argument("template", help="a built-in template name or a path to a kernel.toml")
    add_search_arguments(t)
    t.add_argument("--problem", help="a named problem size of the template (default: its first)")
    t.add_argument("--shape", action="append", default=[], metavar="NAME=VALUE",
                   help="override one problem size, e.g. --shape tokens=64")
    t.add_argument("--session", type=Path, help="session file to write (default: sessions/NAME-TIME.toml)")
    t.add_argument("--resume", action="store_true", help="continue the run recorded in --session")
    t.add_argument("--sanitize", type=int, default=0, metavar="K",
                   help="CUDA: run compute-sanitizer memcheck on the K fastest configurations (the "
                        "winner is always checked when compute-sanitizer is found); a finding demotes it")
    t.add_argument("--profile-top", type=int, default=0, metavar="K",
                   help="CUDA: profile the K best configurations with Nsight Compute when the search "
                        "(each round of a loop) ends")
    t.add_argument("--start-from", type=Path, metavar="SESSION",
                   help="try the fastest configurations of this session first (a search of the same "
                        "template at another size)")
    t.add_argument("--start-top", type=int, default=5, metavar="K",
                   help="how many of --start-from's fastest configurations (default 5)")
    t.add_argument("--headless", action="store_true", help="print text instead of the dashboard")
    t.add_argument("--show-failed", action="store_true", help="list failed configurations in the final table")
    add_loop_arguments(t)
    add_loop_commands(sub)

    c = sub.add_parser("campaign", help="tune templates x problem sizes, one session per pair, and choose each "
                                        "template's general configuration")
    c.add_argument("file", type=Path, help="the campaign file (TOML: [campaign] and [[kernel]] tables)")
    add_search_arguments(c)
    c.add_argument("--dir", type=Path, help="the campaign's folder (default: sessions/campaign-NAME); a rerun "
                                            "skips finished pairs and resumes cut ones")
    c.add_argument("--top", type=int, default=0, metavar="K",
                   help=f"each size's K fastest are measured at every other size (default {DEFAULT_TOP})")

    s = sub.add_parser("show", help="summarise a session file, or a campaign's summary")
    s.add_argument("session", type=Path)
    s.add_argument("--json", action="store_true", help="one JSON object")
    s.add_argument("--failed", action="store_true", help="also list failed configurations")
    s.add_argument("--csv", action="store_true", help="the leaderboard as CSV (to stdout, or -o FILE)")
    s.add_argument("-o", "--output", type=Path, help="with --csv: the file to write")
    s.add_argument("--force", action="store_true", help="with -o: write over an existing file")
    s.add_argument("--source", action="store_true",
                   help="print the generated source of the configuration ranked --config N (defines, launch, "
                        "compiler options)")
    s.add_argument("--config", type=int, metavar="N",
                   help="with --source: the configuration ranked N (1 = the best; default 1)")

    rp = sub.add_parser("replay", help="play a session back in the dashboard")
    rp.add_argument("session", type=Path)
    rp.add_argument("--speed", default="1", metavar="X",
                    help="a multiple of the recorded pace (1, 10, 100, ...) or max (default 1)")
    rp.add_argument("--paused", action="store_true", help="start paused: space plays, n steps one event")

    sm = sub.add_parser("simulate", help="replay a search strategy on a recorded full-grid session")
    sm.add_argument("session", type=Path)
    sm.add_argument("--strategy", choices=STRATEGIES, default="model")
    sm.add_argument("--budget", type=int, default=0, help="most evaluations (0: until the space is exhausted)")
    sm.add_argument("--seed", type=int, default=0)
    sm.add_argument("--within", type=float, default=0.03, help="report evaluations to come this close (fraction)")
    sm.add_argument("--json", action="store_true")

    ki = sub.add_parser("kt-import", help="turn a Kernel Tuner cache file (JSON) into a session")
    ki.add_argument("cache", type=Path)
    ki.add_argument("-o", "--output", type=Path, required=True, help="the session file to write")
    ke = sub.add_parser("kt-export", help="write a session as a Kernel Tuner cache file (JSON)")
    ke.add_argument("session", type=Path)
    ke.add_argument("-o", "--output", type=Path, required=True, help="the cache file to write")
    ke.add_argument("--force", action="store_true", help="write over an existing file")

    pf = sub.add_parser("profile", help="Nsight Compute metrics for configurations of a CUDA session")
    pf.add_argument("session", type=Path)
    pf.add_argument("--config", action="append", type=int, default=[], metavar="N",
                    help="the configuration ranked N in `kerntune show` (1 = the best; repeatable; default 1)")
    pf.add_argument("--device", type=int, default=0)
    pf.add_argument("--timeout", type=float, default=300.0, metavar="S", help="give ncu at most S seconds a config")
    pf.add_argument("--no-record", action="store_true", help="print only; do not append the metrics to the session")
    pf.add_argument("--json", action="store_true", help="one JSON object per configuration")

    pr = sub.add_parser("probe", help="measure and cache a device's bandwidth and arithmetic peak")
    pr.add_argument("--backend", choices=("auto",) + BACKEND_NAMES, default="auto")
    pr.add_argument("--device", type=int, default=0)
    pr.add_argument("--refresh", action="store_true", help="measure again even when a measurement is cached")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        for arg in argv:
            if "\0" in arg:  # no file name or value holds one; the OS would refuse it later, unclearly
                raise UsageError(f"{arg!r}: an argument with a NUL byte")
        args = build_parser().parse_args(argv)
        if args.command is None:
            build_parser().print_help()
            return EXIT_BAD_INPUT
        return COMMANDS[args.command](args, argv)
    except (UsageError, TemplateError, SessionError, ExpressionError, SpaceError, SimulationError,
            CacheFormatError, CampaignError) as e:
        _error(str(e))
        return EXIT_BAD_INPUT
    except (BackendError, TuneError) as e:
        _error(str(e))
        return EXIT_FAILED
    except KeyboardInterrupt:
        _error("interrupted")
        return 130
    except BrokenPipeError:
        return EXIT_FAILED
    except OSError as e:
        _error(f"{getattr(e, 'filename', '') or ''}: {e.strerror or e}".lstrip(": "))
        return EXIT_FAILED


def refuse_overwrite(path: Path, force: bool) -> None:
    """A command that writes a file never writes over one without --force (one line, exit 2)."""
    if path.exists() and not force:
        raise UsageError(f"{path}: already exists (--force writes over it)")


def _error(text: str) -> None:
    line = " ".join(str(text).split())
    print(f"kerntune: error: {line}", file=sys.stderr)


def cmd_list(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from kerntune import templates

    for name in templates.names():
        t = load_template(templates.path(name))
        print(f"{t.name}: {t.description}")
        for p in t.parameters:
            print(f"    {p.name:<10} {', '.join(map(str, p.values))}  (default {p.default})")
        sizes = "; ".join(f"{pr.name} ({', '.join(f'{k}={v}' for k, v in pr.values.items())})" for pr in t.problems)
        print(f"    problems   {sizes}")
    return 0


def cmd_devices(args: argparse.Namespace, argv: Sequence[str]) -> int:
    found = 0
    for backend in BACKEND_NAMES:
        try:
            devices = list_devices(backend)
        except BackendError as e:
            print(f"{backend}: {e}")
            continue
        if not devices:
            print(f"{backend}: no devices")
        for d in devices:
            found += 1
            print(f"{backend} device {d.index}: {d.limits.name}")
            for label, value in describe(d.limits):
                if label in ("backend", "name"):
                    continue
                print(f"    {label:<22} {value}")
    try:
        from kerntune.engine import nvml
    except ImportError:
        nvml = None
    if nvml is not None:
        for line in nvml.describe_all():
            print(line)
    return 0 if found else EXIT_FAILED


def fastest_configs(session, template_name: str, k: int) -> tuple[dict, ...]:
    """The k fastest verified configurations of a session of the same template."""
    if session.template.get("name", "") != template_name:
        raise UsageError(f"{session.path} is a session of {session.template.get('name', '?')!r}, "
                         f"not of {template_name!r}")
    ranked = sorted((r for r in session.results() if r.ranked), key=lambda r: r.median_us)
    if not ranked:
        raise UsageError(f"{session.path} holds no verified configuration to start from")
    return tuple(dict(r.config) for r in ranked[:k])


def search_options(args: argparse.Namespace, argv: Sequence[str], **more: Any) -> TuneOptions:
    """A search's options from `tune`'s or `campaign`'s command line; bad values are one line."""
    if args.budget < 0 or args.time_limit < 0 or args.repeats < 0 or getattr(args, "profile_top", 0) < 0:
        raise UsageError("--budget, --time-limit, --repeats and --profile-top must not be negative")
    if args.config_timeout <= 0:
        raise UsageError("--config-timeout must be positive")
    if not 0 <= args.sol_target <= 1 or args.patience < 0:
        raise UsageError("--sol-target is a fraction in [0, 1] and --patience must not be negative")
    timing = TimingPolicy()
    if args.repeats:
        timing = TimingPolicy(min_repeats=args.repeats, max_repeats=args.repeats)
    return TuneOptions(
        backend=args.backend, device=args.device, strategy=args.strategy, budget=args.budget,
        time_limit=args.time_limit, seed=args.seed, timing=timing, verify=VerifyPolicy(),
        config_timeout=args.config_timeout, probe=not args.no_probe, compile_jobs=args.compile_jobs,
        sol_target=args.sol_target, patience=args.patience, command=["kerntune", *argv], **more)


def cmd_tune(args: argparse.Namespace, argv: Sequence[str]) -> int:
    template = resolve_template(args.template)
    overrides = _parse_shape(args.shape)
    template.problem(args.problem, overrides)  # fail early on a bad --problem/--shape
    if args.resume and args.session is None:
        raise UsageError("--resume needs --session PATH")
    start_from: tuple = ()
    if args.start_from is not None:
        if args.start_top < 1:
            raise UsageError("--start-top must be at least 1")
        start_from = fastest_configs(load_session(args.start_from), template.name, args.start_top)
    options = search_options(args, argv, problem=args.problem, overrides=overrides, session_path=args.session,
                             resume=args.resume, profile_top=args.profile_top, start_from=start_from,
                             sanitize=max(0, args.sanitize))
    served = bool(template.serves) and args.problem is None and not overrides
    if args.agent is not None or not template.parameters:  # the agent loop: plan, template, tune, test
        from kerntune.tui.loop_cli import tune_with_agent

        return tune_with_agent(template, options, args, served=served)
    if served:  # every size the spec serves, and one configuration for all of them
        return tune_served(template, options, args.session, args.resume)
    from kerntune.tui.terminal import dashboard_possible

    if not args.headless and dashboard_possible():
        try:
            from kerntune.tui.app import run_live
        except ImportError:
            pass
        else:
            return run_live(template, options)
    return _tune_headless(template, options, args.show_failed)


# served sizes and campaigns (engine/campaign.py) ------------------------------------------------

def served_folder(template: Template, folder: Path | None, resume: bool) -> Path:
    """Where a served-size run keeps its sessions and summary: --session names the folder."""
    from kerntune.engine.session import default_path

    if folder is None:
        if resume:
            raise UsageError("--resume needs --session FOLDER (the folder of the served-size run)")
        first = default_path(template.name)
        return first.with_name(first.stem + "-serves")
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"{folder}: {template.name} serves {', '.join(template.serves)}: --session names a "
                         "folder for their sessions, not a file")
    if folder.is_dir() and any(folder.glob("*.toml")) and not resume:
        raise UsageError(f"{folder}: already holds sessions (--resume continues that run)")
    return folder


def tune_served(template: Template, options: TuneOptions, folder: Path | None, resume: bool) -> int:
    """`tune` of a spec with `serves`: each size tuned in a session of its own, then the
    configuration for every size, and the report per size."""
    from kerntune.engine.campaign import Campaign, served_kernel

    where = served_folder(template, folder, resume)
    print(f"{template.name} serves {', '.join(template.serves)}: each size is tuned, then one configuration "
          f"is chosen for all of them (sessions in {where})")
    campaign = Campaign([served_kernel(template)], where, replace(options, session_path=None, resume=False),
                        name=template.name, start_from={template.name: options.start_from})
    return run_campaign(campaign, f"{template.name}: every size it serves")


def run_campaign(campaign: Any, title: str) -> int:
    """Run a campaign in text: each pair's progress as lines, then the summary table."""
    from kerntune.engine.campaign import load_summary
    from kerntune.tui.text import TextRenderer, print_campaign

    def sinks_for(job: Any) -> list:
        what = "measuring the other sizes' leaders" if job.configs else "tuning"
        print(f"-- {job.size}: {what} ({job.session})", flush=True)
        return [TextRenderer()]

    def said(pair: Any) -> None:
        what = {"skipped": "finished before: kept", "failed": f"failed: {pair.error}"}.get(pair.status, pair.status)
        print(f"{pair.template} at {pair.size}: {what}", flush=True)

    outcome = campaign.run(sinks_for, said)
    print_campaign(load_summary(outcome.summary_path), title=title)
    print(f"summary: {outcome.summary_path}")
    ok = all(g.config is not None for g in outcome.generals) and not any(p.status == "failed" for p in outcome.pairs)
    return 0 if ok else EXIT_FAILED


def cmd_campaign(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """`kerntune campaign FILE.toml`: every template x size of the file, resumable."""
    from kerntune import templates
    from kerntune.engine.campaign import Campaign, load_campaign

    name, kernels, file_options = load_campaign(args.file, templates.path)
    given = {a.split("=", 1)[0] for a in argv if a.startswith("--")}
    for key, value in file_options.items():  # the file's options, unless the command line gives them
        flag = "--" + key.replace("_", "-")
        if key != "top" and flag not in given:
            setattr(args, key, value)
    if args.top < 0:
        raise UsageError("--top must not be negative (0: the file's, else 3)")
    top = args.top or file_options.get("top", DEFAULT_TOP)
    options = search_options(args, argv)
    folder = args.dir or Path("sessions") / f"campaign-{name}"
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"{folder}: not a folder")
    pairs = sum(len(k.sizes) for k in kernels)
    print(f"campaign {name}: {len(kernels)} template{'s' if len(kernels) != 1 else ''}, {pairs} pairs, in {folder}")
    return run_campaign(Campaign(kernels, folder, options, top=top, name=name), f"campaign {name}")


def _tune_headless(template: Template, options: TuneOptions, show_failed: bool) -> int:
    from kerntune.tui.text import TextRenderer

    renderer = TextRenderer()
    renderer.set_default(template.default_config())
    run = TuneRun(template, options, [renderer])
    outcome = run.run()
    title = f"{template.name} - {outcome.space.problem.label()} - {outcome.limits.name}"
    renderer.finish(title, show_failed)
    print(f"session: {outcome.session_path}")
    if outcome.best is None:
        _error("no configuration was verified")
        return EXIT_FAILED
    return 0


def cmd_show(args: argparse.Namespace, argv: Sequence[str]) -> int:
    if args.config is not None and not args.source:
        raise UsageError("--config N goes with --source")
    if args.output is not None and not args.csv:
        raise UsageError("show: -o goes with --csv")
    if args.output is not None:
        refuse_overwrite(args.output, args.force)
    from kerntune.engine.campaign import is_summary

    if is_summary(args.session):
        return _show_summary(args)
    session = load_session(args.session)
    if args.source:
        return _show_source(session, 1 if args.config is None else args.config)
    if args.csv:
        from kerntune.tui.text import leaderboard_csv

        text = leaderboard_csv(session.results(), session.baseline(), failed=args.failed)
        if args.output is None:
            sys.stdout.write(text)
        else:
            args.output.write_text(text, encoding="utf-8")
            print(f"{args.session}: leaderboard -> {args.output}")
        return 0
    summary = session.summary()
    if args.json:
        print(json.dumps(summary, indent=2, default=str))
        return 0
    from kerntune.tui.text import TextRenderer, fmt_config

    for w in session.warnings:
        print(f"warning: {w}", file=sys.stderr)
    out = TextRenderer()
    print(f"session {summary['id']} ({summary['created']}): {summary['template']} on {summary['device']} "
          f"({summary['backend']}), problem {fmt_config(summary['problem'])}")
    failed = ", ".join(f"{k} {v}" for k, v in summary["failed"].items()) or "none"
    print(f"evaluated {summary['evaluated']} of {summary['feasible']} feasible; verified {summary['verified']}; "
          f"failed: {failed}")
    for line in summary.get("calibration", []):
        print(line)
    if summary["speedup"]:
        print(f"best {fmt_num(summary['best']['median_us'])} us, {fmt_ratio(summary['speedup'])} the default "
              "configuration")
    out.results = session.results()
    out.baseline = session.baseline()
    out.finish(show_failed=args.failed)
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
    print(f"campaign {head.get('name', '')} ({head.get('created', '')}): {len(summary['pair'])} pairs; "
          f"sessions in {Path(summary['path']).parent}")
    print_campaign(summary)
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
                             baseline_us=state.baseline_us, session_path=session.path)
    except ExportError as e:
        raise UsageError(f"{session.path}: {e}") from None
    sys.stdout.write(text)
    return 0


def cmd_simulate(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from kerntune.engine.simulate import simulate
    from kerntune.tui.text import fmt_params

    if args.budget < 0 or not 0 < args.within < 1:
        raise UsageError("--budget must not be negative and --within is a fraction in (0, 1)")
    session = load_session(args.session)
    sim = simulate(session, args.strategy, budget=args.budget, seed=args.seed, within=(args.within,))
    if args.json:
        print(json.dumps(sim.to_dict(), indent=2))
        return 0
    need = sim.within[args.within]
    print(f"{sim.strategy} (seed {sim.seed}) on {args.session}: {sim.evaluations} of {sim.space_size} evaluated "
          f"({sim.reason})")
    print(f"recorded best {fmt_num(sim.recorded_best.median_us)} us: {fmt_params(sim.recorded_best.config)}")
    if sim.best is not None:
        print(f"found         {fmt_num(sim.best.median_us)} us: {fmt_params(sim.best.config)} "
              f"({fmt_ratio(sim.ratio)} the best)")
    print(f"within {100 * args.within:g}% of the best after "
          + (f"{need} evaluations ({100 * need / sim.space_size:.1f}% of the space)" if need else "never"))
    return 0


def cmd_kt_import(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from kerntune.engine.kerneltuner import import_cache

    out = import_cache(args.cache, args.output)
    s = load_session(out)
    print(f"{args.cache}: {len(s.results())} configurations of {s.template.get('name')} -> {out}")
    return 0


def cmd_kt_export(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from kerntune.engine.kerneltuner import export_cache

    refuse_overwrite(args.output, args.force)
    data = export_cache(load_session(args.session))
    args.output.write_text(json.dumps(data, indent=1) + "\n")
    print(f"{args.session}: {len(data['cache'])} configurations -> {args.output}")
    return 0


def cmd_probe(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from kerntune.engine.probe import measure_peaks
    from kerntune.engine.sol import cache_dir, cached_peaks

    backend = open_backend(args.backend, args.device)
    try:
        cached = None if args.refresh else cached_peaks(backend.limits)
        if cached is not None:
            known = [f"copy bandwidth {fmt_num(cached.bandwidth_gbs)} GB/s" if cached.bandwidth_gbs else "",
                     f"fp32 FMA {fmt_num(cached.gflops)} GFLOP/s" if cached.gflops else ""]
            print(f"{backend.limits.name} ({backend.name}): {', '.join(k for k in known if k)} "
                  f"(spread {100 * cached.spread:.1f}%, {cached.source}); `kerntune probe --refresh` measures again")
            return 0
        refused: list[str] = []
        r, peaks = measure_peaks(backend, refused.append)
    finally:
        backend.close()
    print(f"{backend.limits.name} ({backend.name}): copy bandwidth {fmt_num(r.bandwidth_gbs)} GB/s "
          f"(spread {100 * r.bandwidth_spread:.1f}% over {r.bandwidth_rounds} rounds, "
          f"{r.copy_bytes / 2**20:.0f} MiB each way), fp32 FMA {fmt_num(r.gflops)} GFLOP/s "
          f"(spread {100 * r.gflops_spread:.1f}% over {r.gflops_rounds} rounds)"
          + ("" if r.stable else "; the rounds did not settle"))
    for line in refused:
        print(line)
    if peaks is None:
        print("nothing saved")
        return 1
    print(f"saved to {cache_dir() / 'peaks.toml'}")
    return 0


def cmd_replay(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from kerntune.tui.feeds import parse_speed

    try:
        speed = parse_speed(args.speed)
    except ValueError as e:
        raise UsageError(str(e)) from None
    from kerntune.tui.app import run_replay

    return run_replay(args.session, speed=speed, paused=args.paused)


def cmd_profile(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from kerntune.engine.profile import ProfileError, ProfileMetrics, consistency, profile_session
    from kerntune.tui.text import fmt_config

    def show(ev: Any) -> None:
        if args.json:
            print(json.dumps({"rank": ev.rank, "config": dict(ev.config), "ok": ev.ok, "message": ev.message,
                              "measured_us": ev.measured_us, "bytes_moved": ev.bytes_moved,
                              "metrics": dict(ev.metrics), "tool": ev.tool}), flush=True)
            return
        print(f"#{ev.rank} {fmt_config(ev.config)}")
        if not ev.ok:
            print(f"    not profiled: {ev.message}")
            return
        print(f"    {ProfileMetrics.from_dict(ev.metrics).summary()}")
        print(f"    {consistency(ev)}", flush=True)

    try:
        profile_session(args.session, args.config or [1], device=args.device, timeout=args.timeout,
                        record=not args.no_record, on_event=show)
    except ProfileError as e:
        _error(str(e))
        return EXIT_FAILED
    if not args.no_record and not args.json:
        print(f"appended to {args.session}")
    return 0


COMMANDS: dict[str, Any] = {
    "profile": cmd_profile,
    "simulate": cmd_simulate,
    "kt-import": cmd_kt_import,
    "kt-export": cmd_kt_export,
    "list": cmd_list,
    "devices": cmd_devices,
    "tune": cmd_tune,
    "show": cmd_show,
    "probe": cmd_probe,
    "replay": cmd_replay,
    "templatize": cmd_templatize,
    "init": cmd_init,
    "campaign": cmd_campaign,
}

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
