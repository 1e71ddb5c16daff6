"""The command line's grammar: every command with its help and its arguments, in one place.

`build_parser(command)` gives only the named command its arguments: a command's choices come
from the engine modules it uses (the backends, the search strategies), and `kerntune show` should
not pay for importing what `kerntune tune` needs. Help and errors are argparse's, with a bad
argument raised as a UsageError (one line, exit 2).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Callable, Sequence

from kerntune.tui.errors import UsageError

# The agent loop's defaults (`tune --agent`).
DEFAULT_ROUNDS = 3
DEFAULT_SOL_TARGET = 0.9


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, not argparse's usage dump
        raise UsageError(message)


class _Version(argparse.Action):
    """`--version`: the installed version, looked up only when asked for."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS,
                 default: str = argparse.SUPPRESS, help: str = "show program's version number and exit"):
        super().__init__(option_strings, dest, nargs=0, default=default, help=help)

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        from kerntune.engine.session import tool_version

        print(f"kerntune {tool_version()}")
        parser.exit()


def parse_shape(items: Sequence[str]) -> dict[str, int]:
    """`--shape NAME=VALUE ...` as problem-size overrides; a bad item is one line."""
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


def _backends() -> tuple[str, ...]:
    from kerntune.engine.backends import BACKEND_NAMES

    return ("auto",) + BACKEND_NAMES


def _strategies() -> tuple[str, ...]:
    from kerntune.engine.search import STRATEGIES

    return STRATEGIES


# the commands that run a search: tune (alone or as the agent loop) and campaign -----------------

def add_search_arguments(t: argparse.ArgumentParser) -> None:
    """The options of a search, shared by `tune` (and its agent loop) and `campaign`."""
    t.add_argument("--backend", choices=_backends(), default="auto")
    t.add_argument("--device", type=int, default=0, help="device index within the backend")
    t.add_argument("--devices", metavar="LIST",
                   help="measure on several devices at once, one worker each: `all` or indices, e.g. 0,1")
    t.add_argument("--cluster", metavar="ADDRESS",
                   help="measure on a running Dask cluster (tcp://HOST:8786): its workers compile and "
                        "measure, results stream into this host's session")
    t.add_argument("--strategy", choices=_strategies(), default="model",
                   help="model (the default: the default configuration first, then configurations spread over the space, "
                        "then "
                        "Bayesian optimisation), grid (every configuration in the order of the value lists), "
                        "random or local (hill climbing)")
    t.add_argument("--sol-target", type=float, default=0.0, metavar="F",
                   help="stop once the best reaches this fraction of the speed of light (e.g. 0.9)")
    t.add_argument("--patience", type=int, default=0, metavar="K",
                   help="stop after K evaluations without improvement")
    t.add_argument("--budget", type=int, default=0, help="most configurations to evaluate (0: all)")
    t.add_argument("--time-limit", type=float, default=0.0, metavar="S", help="stop after S seconds")
    t.add_argument("--seed", type=int, help="seed for inputs and the search (default: new inputs each run, the same search order)")
    t.add_argument("--repeats", type=int, default=0, help="fix the number of timed repetitions")
    t.add_argument("--config-timeout", type=float, default=120.0, metavar="S",
                   help="a configuration taking longer is recorded as timeout (default 120)")
    t.add_argument("--compile-jobs", type=int, default=0, metavar="N",
                   help="CUDA: compile N configurations ahead in parallel (0: one per core, 1: off)")
    t.add_argument("--no-probe", action="store_true", help="do not measure the device's peaks when unknown")
    t.add_argument("--objective", choices=("time", "energy", "edp"), default="time",
                   help="what the search minimises: time (the default), energy (joules per launch, from NVML's "
                        "total-energy counter, read only) or edp (energy x time); energy needs an NVIDIA GPU")


def _tune(t: argparse.ArgumentParser) -> None:
    t.add_argument("template", help="a built-in template name or a path to a kernel.toml")
    add_search_arguments(t)
    t.add_argument("--problem", help="a named problem size of the template (default: its first)")
    t.add_argument("--shape", action="append", default=[], metavar="NAME=VALUE",
                   help="override one problem size, e.g. --shape tokens=64")
    t.add_argument("--session", type=Path, help="session file to write (default: sessions/NAME-TIME.toml)")
    t.add_argument("--resume", action="store_true", help="continue the run recorded in --session")
    t.add_argument("--force", action="store_true", help="write over an existing --session file")
    t.add_argument("--sanitize", type=int, default=0, metavar="K",
                   help="CUDA: run compute-sanitizer (memcheck, racecheck, synccheck) on the K fastest "
                        "configurations too (the winner and the leaders timed again with it are always "
                        "checked when compute-sanitizer is found); a finding demotes it")
    t.add_argument("--profile-top", type=int, default=0, metavar="K",
                   help="CUDA: profile the K best configurations with Nsight Compute when the search "
                        "(each round of a loop) ends")
    t.add_argument("--start-from", type=Path, metavar="SESSION",
                   help="try the fastest configurations of this session first (a search of the same "
                        "template at another size)")
    t.add_argument("--start-top", type=int, default=5, metavar="K",
                   help="how many of --start-from's fastest configurations (default 5)")
    add_dispatch_argument(t)
    t.add_argument("--headless", action="store_true", help="print text instead of the dashboard")
    t.add_argument("--show-failed", action="store_true", help="list failed configurations in the final table")
    # the agent loop
    t.add_argument("--agent", choices=("claude", "rules"),
                   help="run the agent loop: plan, template, tune, test, analyse (default for a spec without "
                        "parameters: claude when ANTHROPIC_API_KEY is set, else rules)")
    t.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS, metavar="N",
                   help=f"agent loop: at most N rounds (default {DEFAULT_ROUNDS}); --budget is per round, and "
                        f"--sol-target defaults to {DEFAULT_SOL_TARGET}")
    t.add_argument("--model", help="the Claude model (default: $KERNTUNE_MODEL, else claude-sonnet-5)")


def _campaign(c: argparse.ArgumentParser) -> None:
    from kerntune.engine.campaign import DEFAULT_TOP

    c.add_argument("file", type=Path, help="the campaign file (TOML: [campaign] and [[kernel]] tables)")
    add_search_arguments(c)
    c.add_argument("--dir", type=Path, help="the campaign's folder (default: sessions/campaign-NAME); a rerun "
                                            "skips finished pairs and resumes cut ones")
    c.add_argument("--top", type=int, default=0, metavar="K",
                   help=f"each size's K fastest are measured at every other size (default {DEFAULT_TOP})")
    add_dispatch_argument(c)


def add_dispatch_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dispatch-tolerance", type=float, default=3.0, metavar="P",
                   help="served sizes: the dispatch set keeps every size within P percent of its own best "
                        "(default 3)")


def _templatize(tz: argparse.ArgumentParser) -> None:
    tz.add_argument("template", help="a kernel.toml (usually one without parameters) or its folder")
    tz.add_argument("-o", "--output", type=Path, help="the folder to write (default: NAME-template)")
    tz.add_argument("--agent", choices=("claude", "rules"), help="default: claude with ANTHROPIC_API_KEY, else rules")
    tz.add_argument("--model", help="the Claude model")
    tz.add_argument("--backend", choices=_backends(), default="auto")
    tz.add_argument("--device", type=int, default=0)
    tz.add_argument("--problem", help="the problem size the gate checks at (with the verification sizes)")
    tz.add_argument("--shape", action="append", default=[], metavar="NAME=VALUE")
    tz.add_argument("--session", type=Path, help="session file to write (default: sessions/NAME-TIME.toml)")
    tz.add_argument("--force", action="store_true", help="write into an output folder that has a kernel.toml")
    tz.add_argument("--headless", action="store_true", help="(text is all templatize prints)")


# the other commands ------------------------------------------------------------------------------

def _none(p: argparse.ArgumentParser) -> None:
    pass


def _init(it: argparse.ArgumentParser) -> None:
    it.add_argument("kernel", nargs="?", type=Path, help="the kernel source (.cu, or .cl for OpenCL)")
    it.add_argument("--opencl", type=Path, metavar="KERNEL.cl", help="the same kernel for OpenCL")
    it.add_argument("--entry", help="the kernel's name, when the file defines several")
    it.add_argument("-o", "--output", type=Path, help="the spec to write (default: kernel.toml beside the kernel)")
    it.add_argument("--force", action="store_true", help="overwrite an existing spec")
    it.add_argument("--check", type=Path, metavar="SPEC", help="say what a spec still lacks, in one line")


def _show(s: argparse.ArgumentParser) -> None:
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
    s.add_argument("--compare", type=int, nargs=2, metavar=("A", "B"),
                   help="the configurations ranked A and B side by side: parameters that differ, time and "
                        "interval, resources, occupancy, Nsight Compute's metrics (largest differences first)")


def _replay(rp: argparse.ArgumentParser) -> None:
    rp.add_argument("session", type=Path)
    rp.add_argument("--speed", default="1", metavar="X",
                    help="a multiple of the recorded pace (1, 10, 100, ...) or max (default 1)")
    rp.add_argument("--paused", action="store_true", help="start paused: space plays, n steps one event")


def _simulate(sm: argparse.ArgumentParser) -> None:
    sm.add_argument("session", type=Path)
    sm.add_argument("--strategy", choices=_strategies(), default="model")
    sm.add_argument("--budget", type=int, default=0, help="most evaluations (0: until the space is exhausted)")
    sm.add_argument("--seed", type=int, default=0)
    sm.add_argument("--within", type=float, default=0.03, help="report evaluations to come this close (fraction)")
    sm.add_argument("--json", action="store_true")


def _kt_import(ki: argparse.ArgumentParser) -> None:
    ki.add_argument("cache", type=Path)
    ki.add_argument("-o", "--output", type=Path, required=True, help="the session file to write")
    ki.add_argument("--force", action="store_true", help="write over an existing file")


def _kt_export(ke: argparse.ArgumentParser) -> None:
    ke.add_argument("session", type=Path)
    ke.add_argument("-o", "--output", type=Path, required=True, help="the cache file to write")
    ke.add_argument("--force", action="store_true", help="write over an existing file")


def _export(ex: argparse.ArgumentParser) -> None:
    ex.add_argument("session", type=Path, help="a session file, or a served-size run's folder (its dispatch set)")
    ex.add_argument("--format", choices=("header", "t4", "json"), required=True,
                    help="header: a C++/CUDA header with the configurations, their launch and a dispatch function; "
                         "t4: Kernel Tuner's T4 results JSON; json: the leaderboard and what is shipped")
    ex.add_argument("-o", "--output", type=Path, required=True, help="the file to write")
    ex.add_argument("--force", action="store_true", help="write over an existing file")


def _verify(v: argparse.ArgumentParser) -> None:
    v.add_argument("source", type=Path,
                   help="a session, a `kerntune export --format json` file, or a served-size run's folder")
    v.add_argument("--tolerance", type=float, default=5.0, metavar="P",
                   help="percent a speedup may fall below the recorded one, and a time rise above it, when the "
                        "recorded 95%% interval is not reached (default 5)")
    v.add_argument("--template", type=Path, metavar="SPEC",
                   help="the kernel.toml to measure (default: the one recorded, else the built-in of its name)")
    v.add_argument("--backend", choices=_backends(), default="auto",
                   help="default: the backend recorded")
    v.add_argument("--device", type=int, default=0)
    v.add_argument("--session", type=Path, metavar="FOLDER", help="keep the verification runs' sessions here")
    v.add_argument("--seed", type=int, help="seed for inputs (default: new each run)")
    v.add_argument("--no-probe", action="store_true", help="do not measure the device's peaks when unknown")
    v.add_argument("--json", action="store_true", help="the report as one JSON object")


def _profile(pf: argparse.ArgumentParser) -> None:
    pf.add_argument("session", type=Path)
    pf.add_argument("--config", action="append", type=int, default=[], metavar="N",
                    help="the configuration ranked N in `kerntune show` (1 = the best; repeatable; default 1)")
    pf.add_argument("--device", type=int, default=0)
    pf.add_argument("--timeout", type=float, default=300.0, metavar="S", help="give ncu at most S seconds a config")
    pf.add_argument("--no-record", action="store_true", help="print only; do not append the metrics to the session")
    pf.add_argument("--json", action="store_true", help="one JSON object per configuration")


def _probe(pr: argparse.ArgumentParser) -> None:
    pr.add_argument("--backend", choices=_backends(), default="auto")
    pr.add_argument("--device", type=int, default=0)
    pr.add_argument("--refresh", action="store_true", help="measure again even when a measurement is cached")


def _selftest(st: argparse.ArgumentParser) -> None:
    st.add_argument("--backend", choices=_backends(), default="auto")
    st.add_argument("--device", type=int, default=0)
    st.add_argument("-v", "--verbose", action="store_true", help="print the run's lines as it goes")


# name, help, arguments; in the order `kerntune --help` lists them
COMMANDS: tuple[tuple[str, str, Callable[[argparse.ArgumentParser], None]], ...] = (
    ("list", "built-in templates with their parameters and problem sizes", _none),
    ("devices", "every device found, by backend, with its limits (and each OpenCL device that cannot build, "
                "with the reason)", _none),
    ("setup", "make sure an OpenCL device builds kernels: where none does, install the distribution's PoCL "
              "(apt-get, as root)", _none),
    ("tune", "tune a template", _tune),
    ("templatize", "turn a kernel into a template (stage 1 alone) and write it with its diff", _templatize),
    ("init", "write a starting kernel.toml from a kernel's signature, or --check one", _init),
    ("campaign", "tune templates x problem sizes, one session per pair, and choose each template's general "
                 "configuration", _campaign),
    ("show", "summarise a session file, or a campaign's summary", _show),
    ("replay", "play a session back in the dashboard", _replay),
    ("simulate", "replay a search strategy on a recorded full-grid session", _simulate),
    ("kt-import", "turn a Kernel Tuner cache file (JSON) into a session", _kt_import),
    ("kt-export", "write a session as a Kernel Tuner cache file (JSON)", _kt_export),
    ("export", "write what a run found as a C++/CUDA header, Kernel Tuner's T4 results or JSON", _export),
    ("verify", "check recorded winners again on this machine: correct, and as fast beside the original "
               "(exit 0), or not (exit 1): a CI gate", _verify),
    ("profile", "Nsight Compute metrics for configurations of a CUDA session", _profile),
    ("probe", "measure and cache a device's bandwidth and arithmetic peak", _probe),
    ("selftest", "run built-in hostile kernels and twin programs through the protocol on this device", _selftest),
)


def build_parser(command: str | None = None) -> Parser:
    """The `kerntune` parser: every command, with its arguments (only `command`'s when named)."""
    p = Parser(prog="kerntune", description="Tune GPU kernels: templates, constrained search, verified timing.")
    p.add_argument("--version", action=_Version)
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for name, help, add_arguments in COMMANDS:
        cp = sub.add_parser(name, help=help)
        if command is None or command == name:
            add_arguments(cp)
    return p


def command_of(argv: Sequence[str]) -> str | None:
    """The command an argument list names: its first word that is not an option (the options
    before a command, --help and --version, take no value)."""
    return next((a for a in argv if not a.startswith("-")), None)
