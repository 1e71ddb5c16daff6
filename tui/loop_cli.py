"""The agent loop on the command line: `tune --agent`, `templatize` and `init`.

`kerntune tune SPEC --agent claude|rules` runs the loop (engine/loop.py) with the chosen providers
(agents/), on the dashboard on a terminal and as text otherwise; a spec without parameters goes
through the loop even without `--agent` (Claude when ANTHROPIC_API_KEY is set, the rules
otherwise, and a note says which). `templatize` runs stage 1 alone; `init` writes a starting spec
from a kernel's signature and checks a filled-in one.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

from kerntune.engine.events import (
    AgentCall,
    ConfigEvaluated,
    Event,
    GateChecked,
    LoopFinished,
    LoopStarted,
    Note,
    RoundStarted,
    RunStarted,
    SearchPlanned,
    TemplateProposed,
)
from kerntune.engine.loop import LoopOptions, LoopOutcome, TuningLoop
from kerntune.engine.proposal import source_diff
from kerntune.engine.template import Template, load_template
from kerntune.engine.tune import TuneOptions
from kerntune.tui.errors import UsageError
from kerntune.tui.terminal import dashboard_possible

DEFAULT_ROUNDS = 3
DEFAULT_SOL_TARGET = 0.9


def _usage(message: str) -> Exception:
    return UsageError(message)


def add_loop_arguments(t: argparse.ArgumentParser) -> None:
    """`tune`'s options for the agent loop."""
    t.add_argument("--agent", choices=("claude", "rules"),
                   help="run the agent loop: plan, template, tune, test, analyse (default for a spec without "
                        "parameters: claude when ANTHROPIC_API_KEY is set, else rules)")
    t.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS, metavar="N",
                   help=f"agent loop: at most N rounds (default {DEFAULT_ROUNDS}); --budget is per round, and "
                        f"--sol-target defaults to {DEFAULT_SOL_TARGET}")
    t.add_argument("--model", help="the Claude model (default: $KERNTUNE_MODEL, else claude-sonnet-5)")


def add_loop_commands(sub: Any) -> None:
    """The `templatize` and `init` commands."""
    tz = sub.add_parser("templatize", help="turn a kernel into a template (stage 1 alone) and write it with its diff")
    tz.add_argument("template", help="a kernel.toml (usually one without parameters) or its folder")
    tz.add_argument("-o", "--output", type=Path, help="the folder to write (default: NAME-template)")
    tz.add_argument("--agent", choices=("claude", "rules"), help="default: claude with ANTHROPIC_API_KEY, else rules")
    tz.add_argument("--model", help="the Claude model")
    tz.add_argument("--backend", choices=("auto", "cuda", "opencl"), default="auto")
    tz.add_argument("--device", type=int, default=0)
    tz.add_argument("--problem", help="the problem size the gate checks at (with the verification sizes)")
    tz.add_argument("--shape", action="append", default=[], metavar="NAME=VALUE")
    tz.add_argument("--session", type=Path, help="session file to write (default: sessions/NAME-TIME.toml)")
    tz.add_argument("--force", action="store_true", help="write into an output folder that has a kernel.toml")
    tz.add_argument("--headless", action="store_true", help="(text is all templatize prints)")

    it = sub.add_parser("init", help="write a starting kernel.toml from a kernel's signature, or --check one")
    it.add_argument("kernel", nargs="?", type=Path, help="the kernel source (.cu, or .cl for OpenCL)")
    it.add_argument("--opencl", type=Path, metavar="KERNEL.cl", help="the same kernel for OpenCL")
    it.add_argument("--entry", help="the kernel's name, when the file defines several")
    it.add_argument("-o", "--output", type=Path, help="the spec to write (default: kernel.toml beside the kernel)")
    it.add_argument("--force", action="store_true", help="overwrite an existing spec")
    it.add_argument("--check", type=Path, metavar="SPEC", help="say what a spec still lacks, in one line")


# tune --agent ----------------------------------------------------------------------------------

def loop_options(args: argparse.Namespace, options: TuneOptions, templatize: bool = False) -> LoopOptions:
    """The loop's options from the command line's (`--budget` per round, the SOL target 0.9 unless set)."""
    rounds = getattr(args, "rounds", 1)
    if rounds < 1:
        raise _usage("--rounds must be at least 1")
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
        raise _usage(str(e)) from None


def tune_with_agent(template: Template, options: TuneOptions, args: argparse.Namespace,
                    served: bool = False) -> int:
    """`kerntune tune SPEC --agent ...` (or a spec without parameters): the loop, then its summary.
    With `served` (the spec's `serves`), the loop runs at the first size it serves and its
    template is then tuned at every one of them (`serve_after_loop`)."""
    if args.resume:
        raise _usage("--resume does not apply to the agent loop (each run is a new session)")
    provs, why = make_providers(args.agent, args.model)
    if served:
        options = replace(options, problem=template.serves[0])
    lopts = replace(loop_options(args, options), notes=(why,))
    if not served and not args.headless and dashboard_possible():  # served sizes: text
        code = _live(template, provs, lopts)
        if code is not None:
            return code
    text = LoopText()
    loop = TuningLoop(template, provs, lopts, [text])
    outcome = loop.run()
    text.finish(outcome, show_failed=args.show_failed)
    if served:
        return serve_after_loop(template, outcome, lopts)
    if outcome.best is None:
        _error("no configuration was verified")
        return 1
    return 0


def serve_after_loop(template: Template, outcome: LoopOutcome, lopts: LoopOptions) -> int:
    """The loop's accepted template tuned at every size the spec serves (its fastest configurations
    first, within the loop's whole budget), and one configuration chosen for all of them.

    At every size the original's time is the template's default configuration, which the gate
    showed computes what the original kernel computes, with the original's launch."""
    from kerntune.engine.campaign import Campaign, Kernel
    from kerntune.tui.cli import run_campaign

    if outcome.template_dir is None:
        print(f"served sizes: no template passed the gate, so only the original kernel was measured (at "
              f"{template.serves[0]}); the other sizes ({', '.join(template.serves[1:])}) are not tuned")
        return 0 if outcome.best is not None else 1
    tuned = load_template(outcome.template_dir / "kernel.toml")
    measured = [r for rec in outcome.rounds if rec.template_dir == outcome.template_dir for r in rec.results]
    fastest = tuple(dict(r.config) for r in sorted((r for r in measured if r.ranked), key=lambda r: r.median_us)[:5])
    budget = lopts.budget * lopts.rounds if lopts.budget else max(len(measured), len(fastest) + 1)
    folder = outcome.session_path.with_name(outcome.session_path.stem + "-serves")
    print(f"{template.name} serves {', '.join(template.serves)}: the template of {outcome.template_dir} is tuned at "
          f"each ({budget} configurations at most, the loop's fastest first), then one configuration is chosen "
          f"for all of them (sessions in {folder})")
    options = replace(lopts.tune, problem=None, session_path=None, resume=False, budget=budget, skip=(),
                      baseline=None, sol_target=0.0)
    campaign = Campaign([Kernel(tuned.spec_path, tuned.name, tuple((n, n, {}) for n in template.serves))], folder,
                        options, name=template.name, start_from={tuned.name: fastest})
    return run_campaign(campaign, f"{template.name}: the loop's template at every size it serves")


def _live(template: Template, provs: list, lopts: LoopOptions) -> int | None:
    """The loop on the dashboard; None when the dashboard cannot run here."""
    try:
        from multiprocessing import resource_tracker

        from kerntune.engine import nvml
        from kerntune.engine.session import default_path
        from kerntune.tui.app import LiveDashboard
        from kerntune.tui.feeds import LiveFeed
        from kerntune.tui.state import DashboardState
    except ImportError:
        return None
    # spawned processes start multiprocessing's resource tracker with sys.stderr's descriptor,
    # which Textual's capture lacks: start it now (as the dashboard's own live runs do)
    resource_tracker.ensure_running()
    path = lopts.tune.session_path or default_path(template.name)
    lopts = replace(lopts, tune=replace(lopts.tune, session_path=path))
    feed = LiveFeed(path)
    loop = TuningLoop(template, provs, lopts, [_FromFirstRun(feed)])
    app = LiveDashboard(feed=feed, state=DashboardState(), run=loop, engine=loop.run, session_path=path,
                        nvml_index=lopts.tune.device, telemetry=nvml.telemetry)
    app.run()
    if app.run_error is not None:
        raise app.run_error
    outcome = app.outcome
    if isinstance(outcome, LoopOutcome):
        for line in summary_lines(outcome):
            print(line)
        return 0 if outcome.best is not None else 1
    print(f"session: {path}")
    return 1


class _FromFirstRun:
    """Hands events to the dashboard's feed from the first RunStarted on: at that event the feed
    reads the session file, with every event the loop wrote before it."""

    def __init__(self, feed: Any):
        self.feed = feed
        self.started = False

    def __call__(self, ev: Event) -> None:
        self.started = self.started or isinstance(ev, RunStarted)
        if self.started:
            self.feed(ev)


def _error(text: str) -> None:
    print(f"kerntune: error: {' '.join(str(text).split())}", file=sys.stderr)


class LoopText:
    """An event sink that prints the loop as text, in the dashboard's words (tui/words.py): each
    round's run through a TextRenderer of its own, and at the end one leaderboard of every round."""

    def __init__(self, out: Any = None):
        from kerntune.tui.text import TextRenderer

        self.out = out or sys.stdout
        self._renderer = TextRenderer
        self.runs = TextRenderer(self.out)
        self.results: list = []  # the rounds before this one's

    def __call__(self, ev: Event) -> None:
        if isinstance(ev, RunStarted):  # each round counts its own progress
            self.results += self.runs.results
            self.runs = self._renderer(self.out)
        self.runs(ev)

    def finish(self, outcome: LoopOutcome, show_failed: bool = False) -> None:
        board = self._renderer(self.out)
        board.results = self.results + self.runs.results  # a demoted result replaced in its round
        board.baseline = outcome.original  # speedups over the original kernel
        name = outcome.template.name if outcome.template else ""
        board.finish(f"{name} - {outcome.limits.name}: every round", show_failed)
        for line in summary_lines(outcome):
            print(line, file=self.out)


def summary_lines(outcome: LoopOutcome) -> list[str]:
    """The loop's result in a few lines: original, best, speedup, SOL, template, session, cost."""
    from kerntune.tui.numbers import fmt_num, fmt_percent, fmt_ratio
    from kerntune.tui.text import fmt_params

    lines = []
    orig = outcome.original
    if orig is not None:
        lines.append(f"original:  {fmt_num(orig.median_us)} us")
    best = outcome.best
    if outcome.beaten is not None:
        lost = outcome.beaten
        lines.append(f"best:      the original stays ({fmt_num(best.median_us)} us, 1.00x the original): the fastest "
                     f"configuration, {fmt_num(lost.median_us)} us {fmt_params(lost.config)} (round "
                     f"{_round_of(outcome, lost)}), did not beat it")
    elif outcome.kept_original:
        lines.append(f"best:      the original stays ({fmt_num(best.median_us)} us): no configuration was verified")
    elif best is not None:
        sol = f", {fmt_percent(best.sol_fraction)} of SOL" if best.sol_fraction else ""
        speed = f", {fmt_ratio(outcome.speedup)} the original" if outcome.speedup else ""
        lines.append(f"best:      {fmt_num(best.median_us)} us  {fmt_params(best.config)}  (round "
                     f"{outcome.best_round}{speed}{sol}; re-verified on new inputs)")
    else:
        lines.append("best:      none verified")
    if outcome.template_dir is not None:
        lines.append(f"template:  {outcome.template_dir}")
    if outcome.cost_usd:
        lines.append(f"agents:    {', '.join(outcome.agents)}; ${outcome.cost_usd:.4f}")
    lines.append(f"session:   {outcome.session_path}")
    return lines


def _round_of(outcome: Any, result: Any) -> str:
    for r in outcome.rounds:
        if getattr(r, "best", None) is result:
            return str(r.round)
    return "?"


# templatize ------------------------------------------------------------------------------------

def cmd_templatize(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """Stage 1 alone: propose, gate, and write the accepted template with its diff."""
    from kerntune.tui.cli import _parse_shape, resolve_template

    template = resolve_template(args.template)
    overrides = _parse_shape(args.shape)
    template.problem(args.problem, overrides)
    out = args.output or Path(f"{template.name}-template")
    if (out / "kernel.toml").exists() and not args.force:
        raise _usage(f"{out}: already holds a kernel.toml (--force writes over it)")
    provs, why = make_providers(args.agent, args.model)
    options = TuneOptions(backend=args.backend, device=args.device, problem=args.problem, overrides=overrides,
                          session_path=args.session, probe=False, command=["kerntune", *argv])
    lopts = replace(loop_options(args, options, templatize=True), notes=(why,))
    text = LoopText()
    loop = TuningLoop(template, provs, lopts, [text])
    outcome = loop.run()
    if outcome.template is None or outcome.template_dir is None:
        _error(f"no template passed the gate ({outcome.reason}); session: {outcome.session_path}")
        return 1
    written = write_templatized(template, outcome.template, outcome.template_dir, out)
    print(f"template: {out} ({len(outcome.template.parameters)} parameters: "
          f"{', '.join(p.name for p in outcome.template.parameters)})")
    print(f"diff:     {written}")
    print(f"session:  {outcome.session_path}")
    return 0


def write_templatized(original: Template, template: Template, source_dir: Path, out: Path) -> Path:
    """Copy an accepted template's folder to `out`, with template.diff against the original."""
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


# init ------------------------------------------------------------------------------------------

def cmd_init(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """Write a starting kernel.toml from a kernel's signature, or check one (`--check`)."""
    from kerntune.engine.scaffold import check_spec, read_kernel, starter_spec

    if args.check is not None:
        if args.kernel is not None:
            raise _usage("init: give a kernel source or --check SPEC, not both")
        line = check_spec(args.check)
        print(line)
        return 0 if ": complete:" in line else 1
    if args.kernel is None:
        raise _usage("init: give a kernel source (KERNEL.cu or KERNEL.cl), or --check SPEC")
    kernel = args.kernel
    cuda_path, cl_path = (None, kernel) if kernel.suffix == ".cl" else (kernel, args.opencl)
    if kernel.suffix == ".cl" and args.opencl is not None:
        raise _usage("init: the kernel is already OpenCL; --opencl is for a CUDA kernel's OpenCL twin")
    cuda = read_kernel(cuda_path, args.entry) if cuda_path is not None else None
    opencl = read_kernel(cl_path, args.entry or (cuda.name if cuda else None)) if cl_path is not None else None
    spec = args.output or kernel.parent / "kernel.toml"
    if spec.is_dir():
        spec = spec / "kernel.toml"
    if spec.exists() and not args.force:
        raise _usage(f"{spec}: already exists (--force writes over it)")
    sources: dict[str, str] = {}
    copied = []
    for backend, path in (("cuda", cuda_path), ("opencl", cl_path)):
        if path is None:
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
    print(f"wrote {spec} for {sig.name}: {len(sig.args)} arguments ({roles})"
          + (f"; copied {', '.join(copied)} beside it" if copied else ""))
    if sig.notes:
        print(f"could not read: {'; '.join(sig.notes)} (the rest is written)")
    print(f"to fill in: {', '.join(starter.todo)}; then: kerntune init --check {spec}")
    return 0
