"""What the command line runs and shows: `tune` (one search, or the agent loop), `templatize`,
`campaign` and `replay`.

Both drivers, the single search (engine/tune.py) and the agent loop (engine/loop.py), go through
one launcher: on the dashboard on a terminal that can draw it, as text otherwise (`on_dashboard`
is the one place that decides). Served sizes, campaigns and templatize print text.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, Sequence

from kerntune.engine.result import ranked
from kerntune.engine.session import default_path, load_session
from kerntune.engine.template import Template, TemplateError, load_template
from kerntune.tui.errors import EXIT_FAILED, EXIT_INTERRUPTED, UsageError, print_error
from kerntune.tui.parser import DEFAULT_SOL_TARGET, parse_shape
from kerntune.tui.terminal import dashboard_possible, printable

if TYPE_CHECKING:  # the run machinery is imported when a run starts: `replay` does without it
    from kerntune.engine.loop import LoopOptions, LoopOutcome
    from kerntune.engine.tune import TuneOptions
    from kerntune.tui.app import LiveDashboard


def on_dashboard(headless: bool = False) -> bool:
    """Whether a run or a replay goes on the dashboard: on a terminal that can draw it (not a
    pipe, not TERM=dumb, not KERNTUNE_HEADLESS), unless --headless asks for text."""
    return not headless and dashboard_possible()


class Driver(Protocol):
    """A run the launcher can show: the single search or the agent loop."""

    def dashboard(self) -> LiveDashboard:
        """The live dashboard that runs it."""

    def after_dashboard(self, app: LiveDashboard) -> int:
        """What is left in the terminal once the dashboard closes; the exit status."""

    def as_text(self) -> int:
        """Run it printing text; the exit status."""


def launch(driver: Driver, headless: bool = False) -> int:
    """Run a driver on the dashboard, or as text when the dashboard cannot (or should not) run."""
    if on_dashboard(headless):
        try:
            import kerntune.tui.app  # noqa: F401  (Textual, which text mode does without)
        except ImportError:
            pass
        else:
            app = driver.dashboard()
            app.run()
            return driver.after_dashboard(app)
    return driver.as_text()


# the single search -----------------------------------------------------------------------------

@dataclass
class SingleRun:
    """`kerntune tune`: one search of one template at one size."""

    template: Template
    options: TuneOptions
    show_failed: bool = False

    def dashboard(self) -> LiveDashboard:
        from kerntune.tui.app import live_app

        return live_app(self.template, self.options)

    def after_dashboard(self, app: LiveDashboard) -> int:
        if app.run_error is not None and app.state.started is None:
            raise app.run_error  # the command line prints it as one line
        _leave_leaders(app)
        if app.run_error is not None:
            print_error(app.run_error)
            return EXIT_FAILED
        return 0 if app.state.best is not None else EXIT_FAILED  # as the text mode: nothing verified is a failure

    def as_text(self) -> int:
        from kerntune.engine.tune import TuneRun
        from kerntune.tui.text import TextRenderer

        renderer = TextRenderer()
        renderer.set_default(self.template.default_config())
        outcome = TuneRun(self.template, self.options, [renderer]).run()
        title = f"{self.template.name} - {outcome.space.problem.label()} - {outcome.limits.name}"
        renderer.finish(title, self.show_failed)
        print(printable(f"session: {outcome.session_path}"))
        if outcome.reason == "interrupted":
            print_error("interrupted")
            return EXIT_INTERRUPTED
        if outcome.best is None:
            print_error("no configuration was verified")
            return EXIT_FAILED
        why = default_is_best(outcome.results, outcome.best, self.template.default_config())
        if why:
            print(printable(why))
        return 0


def default_is_best(results: Sequence[Any], best: Any, default: Any) -> str:
    """One line saying why the winner is the template's default configuration ("" when it is not):
    nothing else measured ran faster, and by how much the closest was slower."""
    from kerntune.engine.result import config_key, ranked
    from kerntune.tui.numbers import fmt_num
    from kerntune.tui.words import fmt_params

    if best is None or best.config is None or config_key(best.config) != config_key(default):
        return ""
    board = [r for r in ranked(results) if r.config is not None and config_key(r.config) != config_key(default)]
    if not board:
        return "the default configuration wins: no other configuration was verified and timed"
    near = board[0]
    if near.median_us < best.median_us:
        return ""  # another ran faster and the paired re-timing found them tied: its legend says so
    return (f"the default configuration wins: none of the {len(board)} other configurations measured ran faster "
            f"(the closest, {fmt_params(near.config)}, {fmt_num(near.median_us)} us, "
            f"{100 * (near.median_us / best.median_us - 1):.0f}% slower)")


def _leave_leaders(app: LiveDashboard) -> None:
    """Once the dashboard is gone, the best few and the session's path stay in the scrollback."""
    from rich.console import Console

    from kerntune.tui.text import leaderboard_table

    state = app.state
    results = [e.result for e in state.entries.values()]
    if results:
        Console().print(leaderboard_table(results, state.default_result, limit=5))
    if app.session_path is not None:
        print(printable(f"session: {app.session_path}"))


# the agent loop --------------------------------------------------------------------------------

@dataclass
class AgentLoop:
    """`kerntune tune --agent` (or a spec without parameters): plan, template, tune, test, analyse.
    With `served` (the spec's `serves`), its template is then tuned at every size it serves."""

    template: Template
    providers: list
    options: LoopOptions
    show_failed: bool = False
    served: bool = False

    def dashboard(self) -> LiveDashboard:
        from kerntune.engine.loop import TuningLoop
        from kerntune.tui.app import live_dashboard

        path = self.options.tune.session_path or default_path(self.template.name)
        self.options = replace(self.options, tune=replace(self.options.tune, session_path=path))
        return live_dashboard(lambda feed: TuningLoop(self.template, self.providers, self.options, [feed]),
                              path, self.options.tune.device)

    def after_dashboard(self, app: LiveDashboard) -> int:
        from kerntune.engine.loop import LoopOutcome
        from kerntune.tui.loop_cli import summary_lines

        if app.run_error is not None:
            raise app.run_error
        outcome = app.outcome
        if isinstance(outcome, LoopOutcome):
            for line in summary_lines(outcome):
                print(printable(line))
            return 0 if outcome.best is not None else EXIT_FAILED
        print(printable(f"session: {self.options.tune.session_path}"))
        return EXIT_FAILED

    def run_as_text(self) -> tuple[LoopOutcome, Any]:
        """Run the loop printing its events; the outcome and the printer (for the final table)."""
        from kerntune.engine.loop import TuningLoop
        from kerntune.tui.loop_cli import LoopText

        text = LoopText()
        return TuningLoop(self.template, self.providers, self.options, [text]).run(), text

    def as_text(self) -> int:
        outcome, text = self.run_as_text()
        text.finish(outcome, show_failed=self.show_failed)
        if outcome.reason == "interrupted":
            print_error("interrupted")
            return EXIT_INTERRUPTED
        if self.served:
            return serve_after_loop(self.template, outcome, self.options)
        if outcome.best is None:
            print_error("no configuration was verified")
            return EXIT_FAILED
        return 0


def loop_options(args: argparse.Namespace, options: TuneOptions, templatize: bool = False) -> LoopOptions:
    """The loop's options from the command line's (`--budget` per round, the SOL target 0.9 unless set)."""
    from kerntune.engine.loop import LoopOptions

    rounds = getattr(args, "rounds", 1)
    if rounds < 1:
        raise UsageError("--rounds must be at least 1")
    sol = getattr(args, "sol_target", 0.0) or DEFAULT_SOL_TARGET
    # the loop's tuner picks each round's strategy and budget; the SOL target also ends a round early
    tune = replace(options, resume=False, sol_target=sol)
    return LoopOptions(tune=tune, rounds=1 if templatize else rounds, sol_target=sol,
                       budget=options.budget, templatize_only=templatize)


def make_providers(agent: str | None, model: str | None) -> tuple[list, str]:
    """The providers for `--agent`, and the note that says which; an unavailable agent is one line."""
    from kerntune.agents.providers import AgentUnavailable, providers

    try:
        return providers(agent, model)
    except AgentUnavailable as e:
        raise UsageError(str(e)) from None


# tune ------------------------------------------------------------------------------------------

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


def fastest_configs(session: Any, template_name: str, k: int) -> tuple[dict, ...]:
    """The k fastest verified configurations of a session of the same template."""
    if session.template.get("name", "") != template_name:
        raise UsageError(f"{session.path} is a session of {session.template.get('name', '?')!r}, "
                         f"not of {template_name!r}")
    board = ranked(session.results())
    if not board:
        raise UsageError(f"{session.path} holds no verified configuration to start from")
    return tuple(dict(r.config) for r in board[:k])


def search_options(args: argparse.Namespace, argv: Sequence[str], **more: Any) -> TuneOptions:
    """A search's options from `tune`'s or `campaign`'s command line; bad values are one line."""
    from kerntune.engine.evaluate import TimingPolicy, VerifyPolicy
    from kerntune.engine.tune import TuneOptions

    if args.budget < 0 or args.time_limit < 0 or args.repeats < 0 or getattr(args, "profile_top", 0) < 0:
        raise UsageError("--budget, --time-limit, --repeats and --profile-top must not be negative")
    if args.config_timeout <= 0:
        raise UsageError("--config-timeout must be positive")
    if not 0 <= args.sol_target <= 1 or args.patience < 0:
        raise UsageError("--sol-target is a fraction in [0, 1] and --patience must not be negative")
    timing = TimingPolicy()
    devices = parse_devices(getattr(args, "devices", None), args.backend)
    if devices and getattr(args, "cluster", None):
        raise UsageError("--devices and --cluster do not go together: a cluster's workers each have their own device")
    if args.repeats:
        timing = TimingPolicy(min_repeats=args.repeats, max_repeats=args.repeats)
    objective = getattr(args, "objective", "time")
    if objective != "time":
        energy_counter(args.backend, args.device)
        timing = replace(timing, energy=True)
    return TuneOptions(
        backend=args.backend, device=args.device, strategy=args.strategy, budget=args.budget,
        time_limit=args.time_limit, seed=args.seed, timing=timing, verify=VerifyPolicy(),
        config_timeout=args.config_timeout, probe=not args.no_probe, compile_jobs=args.compile_jobs,
        sol_target=args.sol_target, patience=args.patience, command=["kerntune", *argv], devices=devices,
        cluster=getattr(args, "cluster", None) or "", objective=objective, **more)


def energy_counter(backend: str, device: int) -> None:
    """`--objective energy|edp` where the device has no energy counter: one line, exit 2."""
    from kerntune.engine.energy import NoEnergyCounter, counter_reader
    from kerntune.engine.tune import resolve_device

    name, limits = resolve_device(backend, device)
    try:
        counter_reader(name, device, str(limits.extra.get("pci_bus_id", "")))
    except NoEnergyCounter as e:
        raise UsageError(f"--objective: {e}") from None


def parse_devices(text: str | None, backend: str) -> tuple[int, ...]:
    """`--devices`: () for none given, every device of the backend for `all`, else the indices."""
    if not text:
        return ()
    if text.strip() == "all":
        from kerntune.engine.tune import resolve_device
        from kerntune.engine.backends import list_devices

        name, _ = resolve_device(backend, 0)
        return tuple(range(len(list_devices(name))))
    try:
        devices = tuple(int(d) for d in text.split(","))
    except ValueError:
        raise UsageError(f"--devices: `all` or device indices separated by commas, not {text!r}") from None
    if any(d < 0 for d in devices):
        raise UsageError("--devices: device indices are not negative")
    return devices


def tune(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """`kerntune tune`: one search, the agent loop (`--agent`, or a spec without parameters), or
    every size a spec serves."""
    template = resolve_template(args.template)
    overrides = parse_shape(args.shape)
    template.problem(args.problem, overrides)  # fail early on a bad --problem/--shape
    if args.resume and args.session is None:
        raise UsageError("--resume needs --session PATH")
    if args.resume and args.force:
        raise UsageError("--resume continues a session, --force writes over it: one or the other")
    if args.session is not None and args.session.is_file() and not (args.resume or args.force):
        raise UsageError(f"{args.session}: already exists (--resume continues it, --force writes over it)")
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
        if args.resume:
            raise UsageError("--resume does not apply to the agent loop (each run is a new session)")
        provs, why = make_providers(args.agent, args.model)
        if served:  # the loop runs at the first size served, its template then at every one
            options = replace(options, problem=template.serves[0])
        lopts = replace(loop_options(args, options), notes=(why,))
        return launch(AgentLoop(template, provs, lopts, args.show_failed, served), args.headless or served)
    if served:  # every size the spec serves, and one configuration for all of them
        return tune_served(template, options, args.session, args.resume, dispatch_tolerance(args))
    return launch(SingleRun(template, options, args.show_failed), args.headless)


# served sizes and campaigns (engine/campaign.py): text -----------------------------------------

def served_folder(template: Template, folder: Path | None, resume: bool) -> Path:
    """Where a served-size run keeps its sessions and summary: --session names the folder."""
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


def dispatch_tolerance(args: argparse.Namespace) -> float:
    """--dispatch-tolerance P, as a fraction; a bad value is one line."""
    p = getattr(args, "dispatch_tolerance", 3.0)
    if not 0 <= p < 100:
        raise UsageError("--dispatch-tolerance is a percentage in [0, 100)")
    return p / 100


def tune_served(template: Template, options: TuneOptions, folder: Path | None, resume: bool,
                tolerance: float = 0.03) -> int:
    """`tune` of a spec with `serves`: each size tuned in a session of its own, then the
    configuration for every size, and the report per size."""
    from kerntune.engine.campaign import Campaign, served_kernel

    where = served_folder(template, folder, resume)
    print(printable(f"{template.name} serves {', '.join(template.serves)}: each size is tuned, then one configuration "
          f"is chosen for all of them (sessions in {where})"))
    campaign = Campaign([served_kernel(template)], where, replace(options, session_path=None, resume=False),
                        name=template.name, start_from={template.name: options.start_from}, tolerance=tolerance)
    return run_campaign(campaign, f"{template.name}: every size it serves")


def serve_after_loop(template: Template, outcome: LoopOutcome, lopts: LoopOptions) -> int:
    """The loop's accepted template tuned at every size the spec serves (its fastest configurations
    first, within the loop's whole budget), and one configuration chosen for all of them.

    At every size the original's time is the template's default configuration, which the gate
    showed computes what the original kernel computes, with the original's launch."""
    from kerntune.engine.campaign import Campaign, Kernel

    if outcome.template_dir is None:
        print(printable(f"served sizes: no template passed the gate, so only the original kernel was measured (at "
              f"{template.serves[0]}); the other sizes ({', '.join(template.serves[1:])}) are not tuned"))
        return 0 if outcome.best is not None else EXIT_FAILED
    tuned = load_template(outcome.template_dir / "kernel.toml")
    measured = [r for rec in outcome.rounds if rec.template_dir == outcome.template_dir for r in rec.results]
    fastest = tuple(dict(r.config) for r in ranked(measured)[:5])
    budget = lopts.budget * lopts.rounds if lopts.budget else max(len(measured), len(fastest) + 1)
    folder = outcome.session_path.with_name(outcome.session_path.stem + "-serves")
    print(printable(f"{template.name} serves {', '.join(template.serves)}: the template of {outcome.template_dir} is tuned at "
          f"each ({budget} configurations at most, the loop's fastest first), then one configuration is chosen "
          f"for all of them (sessions in {folder})"))
    options = replace(lopts.tune, problem=None, session_path=None, resume=False, budget=budget, skip=(),
                      default_result=None, sol_target=0.0)
    campaign = Campaign([Kernel(tuned.spec_path, tuned.name, tuple((n, n, {}) for n in template.serves))], folder,
                        options, name=template.name, start_from={tuned.name: fastest})
    return run_campaign(campaign, f"{template.name}: the loop's template at every size it serves")


def run_campaign(campaign: Any, title: str) -> int:
    """Run a campaign in text: each pair's progress as lines, then the summary table."""
    from kerntune.engine.campaign import load_summary
    from kerntune.tui.text import TextRenderer, print_campaign

    def sinks_for(job: Any) -> list:
        what = "measuring the other sizes' leaders" if job.configs else "tuning"
        print(printable(f"-- {job.size}: {what} ({job.session})"), flush=True)
        return [TextRenderer()]

    def said(pair: Any) -> None:
        what = {"skipped": "finished before: kept", "failed": f"failed: {pair.error}"}.get(pair.status, pair.status)
        print(printable(f"{pair.template} at {pair.size}: {what}"), flush=True)

    outcome = campaign.run(sinks_for, said)
    print_campaign(load_summary(outcome.summary_path), title=title)
    print(printable(f"summary: {outcome.summary_path}"))
    ok = all(g.config is not None for g in outcome.generals) and not any(p.status == "failed" for p in outcome.pairs)
    return 0 if ok else EXIT_FAILED


def campaign(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """`kerntune campaign FILE.toml`: every template x size of the file, resumable."""
    from kerntune import templates
    from kerntune.engine.campaign import DEFAULT_TOP, Campaign, load_campaign

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
    print(printable(f"campaign {name}: {len(kernels)} template{'s' if len(kernels) != 1 else ''}, {pairs} pairs, in {folder}"))
    return run_campaign(Campaign(kernels, folder, options, top=top, name=name, tolerance=dispatch_tolerance(args)),
                        f"campaign {name}")


# templatize ------------------------------------------------------------------------------------

def templatize(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """Stage 1 alone: propose, gate, and write the accepted template with its diff."""
    from kerntune.engine.tune import TuneOptions

    template = resolve_template(args.template)
    overrides = parse_shape(args.shape)
    template.problem(args.problem, overrides)
    out = args.output or Path(f"{template.name}-template")
    if (out / "kernel.toml").exists() and not args.force:
        raise UsageError(f"{out}: already holds a kernel.toml (--force writes over it)")
    provs, why = make_providers(args.agent, args.model)
    options = TuneOptions(backend=args.backend, device=args.device, problem=args.problem, overrides=overrides,
                          session_path=args.session, probe=False, command=["kerntune", *argv])
    lopts = replace(loop_options(args, options, templatize=True), notes=(why,))
    outcome, _ = AgentLoop(template, provs, lopts).run_as_text()
    if outcome.template is None or outcome.template_dir is None:
        print_error(f"no template passed the gate ({outcome.reason}); session: {outcome.session_path}")
        return EXIT_FAILED
    written = write_templatized(template, outcome.template, outcome.template_dir, out)
    print(printable(f"template: {out} ({len(outcome.template.parameters)} parameters: "
          f"{', '.join(p.name for p in outcome.template.parameters)})"))
    print(printable(f"diff:     {written}"))
    print(printable(f"session:  {outcome.session_path}"))
    return 0


def write_templatized(original: Template, template: Template, source_dir: Path, out: Path) -> Path:
    """Copy an accepted template's folder to `out`, with template.diff against the original."""
    from kerntune.engine.proposal import source_diff

    out.mkdir(parents=True, exist_ok=True)
    for f in sorted(source_dir.iterdir()):
        if f.is_file():
            shutil.copyfile(f, out / f.name)
    load_template(out)  # what was copied loads on its own
    diff = "".join(source_diff(original.source_for(b), template.source_for(b), b)
                   for b in sorted(template.sources))
    path = out / "template.diff"
    path.write_text(diff, encoding="utf-8")
    return path


# replay ----------------------------------------------------------------------------------------

def replay(path: Path, speed: float = 1.0, paused: bool = False) -> int:
    """`kerntune replay SESSION`: the dashboard on a terminal, the text rendering otherwise."""
    session = with_dispatch_set(load_session(path))
    if not on_dashboard():
        return _replay_text(session)
    from kerntune.tui.app import replay_app

    replay_app(session, speed=speed, paused=paused).run()
    return 0


def with_dispatch_set(session: Any) -> Any:
    """A session of a served-size run (or a campaign) replays with its template's dispatch set said
    at its end, as notes, from the summary beside it; the session file itself is not changed."""
    from kerntune.engine.summary import CampaignError, is_summary, load_summary

    folder = Path(session.path).parent
    if not is_summary(folder):
        return session
    from kerntune.engine.events import Note
    from kerntune.tui.text import dispatch_lines

    try:
        summary = load_summary(folder)
    except CampaignError:
        return session
    t = session.events[-1].t if session.events else 0.0
    notes = [Note(t, line.strip(), "dispatch") for d in summary["dispatch"]
             if d.get("template") == session.template.get("name") for line in dispatch_lines(d)]
    return replace(session, events=[*session.events, *notes]) if notes else session


def _replay_text(session: Any) -> int:
    from kerntune.tui.text import TextRenderer

    for w in session.warnings:
        print(printable(f"warning: {w}"), file=sys.stderr)
    out = TextRenderer()
    default = session.template.get("default_config")
    if isinstance(default, dict):
        out.set_default(default)
    for ev in session.events:
        out(ev)
    out.finish(f"{session.template.get('name', '')} - {session.device.get('name', '')}", show_failed=True)
    return 0
