"""compute-sanitizer on configurations (CUDA): memcheck for out-of-bounds and misaligned
accesses, reads as well as writes, that the guard regions around every buffer cannot see;
racecheck for shared-memory hazards (a dropped barrier, warp-synchronous code without
`__syncwarp`); synccheck for barriers used where not every thread reaches them.

It runs the same child as the profiler (`python -m kerntune.engine.profile --target -`: compile a
configuration, upload inputs, launch once) under `compute-sanitizer --tool memcheck`, the job on
its standard input, so that a run can start it ahead (`Memcheck`) while it tunes; found
like ncu is: $KERNTUNE_SANITIZER, PATH, the CUDA toolkit. The reported winner and the leaders
timed again with it are always checked by all three tools when it is found; `tune --sanitize K`
checks the K fastest too. A finding demotes the configuration: out_of_bounds for memcheck's,
wrong_result for a race or a barrier misused.

Several configurations are checked by one child a tool (`check_all`): each compiled and launched
in turn on fresh copies of the inputs. A tool's report does not say which launch a finding came
from, so a group with a finding is split in halves and each half checked again in a fresh child,
down to the configurations it belongs to; only those are demoted. The child says which
configurations it began: one it never began has no part in a finding (memcheck's first finding
ends the child's CUDA context, and with it the rest of the group, which is checked again apart).
"""

from __future__ import annotations

import json
import re
import secrets
import sys
from dataclasses import asdict, dataclass, replace
from typing import Any, Callable, Mapping, Sequence, Union

from .backends.cuda_toolchain import find_cuda_tool, follow_cuda_tool, start_cuda_tool, stop_cuda_tool
from .profile import DONE, STARTED, job_for

# memcheck runs a kernel tens to hundreds of times slower than the device: a configuration is
# checked at the smallest of the spec's sizes (its odd verification sizes are there for tails and
# edges, what memcheck looks for), and given this long at most
DEFAULT_TIMEOUT = 120.0


# compute-sanitizer's tools kerntune runs, and the status a finding of each gives a configuration
CHECKS = ("memcheck", "racecheck", "synccheck")
FINDING_STATUS = {"memcheck": "out_of_bounds", "racecheck": "wrong_result", "synccheck": "wrong_result"}


class SanitizeError(RuntimeError):
    """compute-sanitizer could not run the configuration at all."""


def find_sanitizer() -> str | None:
    """compute-sanitizer from $KERNTUNE_SANITIZER, PATH or the CUDA toolkit; None if absent."""
    return find_cuda_tool("compute-sanitizer", "KERNTUNE_SANITIZER")


_SUMMARY = re.compile(r"ERROR SUMMARY:\s*(\d+) error")
# racecheck's own summary: hazards displayed (errors, warnings); its warnings are not races
_RACE_SUMMARY = re.compile(r"RACECHECK SUMMARY:\s*\d+ hazards? displayed \((\d+) errors?")
_FINDINGS = {
    "memcheck": re.compile(r"^=========\s+(Invalid .*|Misaligned .*|Out of bounds .*|.*out of bounds.*)$", re.MULTILINE),
    "racecheck": re.compile(r"^=========\s+(?:ERROR: |Error: )?(Race reported .*)$", re.MULTILINE | re.IGNORECASE),
    "synccheck": re.compile(r"^=========\s+(Barrier error .*|.*[Dd]ivergent .*|Invalid .*)$", re.MULTILINE),
}
_ANY_ERROR = re.compile(r"^=========\s+((?!.*SUMMARY).*[Ee]rror.*)$", re.MULTILINE)
_WHERE = re.compile(r"^=========\s+(at .*|by thread .*|Address .*|and .* access at .*)$", re.MULTILINE)


def parse_report(text: str, check: str = "memcheck") -> tuple[int, str]:
    """(errors, a one-line summary of the first finding) from a tool's output; errors -1 when
    it printed no summary. racecheck counts the errors of its RACECHECK SUMMARY."""
    # the tool's own summary is the last one: a kernel may printf a line that looks like one
    m = _last(_RACE_SUMMARY, text) if check == "racecheck" else None
    m = m or _last(_SUMMARY, text)
    errors = int(m.group(1)) if m else -1
    if errors <= 0:
        return errors, ""
    first = _FINDINGS.get(check, _FINDINGS["memcheck"]).search(text) or _ANY_ERROR.search(text)
    where = _WHERE.findall(text)[:2]
    parts = [first.group(1).strip()] if first else []
    parts += [w.strip() for w in where]
    return errors, "; ".join(parts)[:400]


def _last(pattern: re.Pattern[str], text: str) -> re.Match[str] | None:
    found = None
    for found in pattern.finditer(text):
        pass
    return found


class Sanitizer:
    """One of compute-sanitizer's tools (`which`: memcheck, racecheck, synccheck) on a child
    started ahead: the tool and the child's Python start, its modules load and it draws its
    inputs while the run goes on; the configuration to check is given later (`check`) through
    the child's standard input. Until then the child touches no device. One check a Sanitizer;
    `close` ends one that was not needed."""

    def __init__(self, tool: str, template: Any, problem: Any, device: int = 0, which: str = "memcheck"):
        if which not in CHECKS:
            raise SanitizeError(f"no compute-sanitizer tool {which!r} (kerntune runs {', '.join(CHECKS)})")
        self.tool, self.which = tool, which
        problem = memcheck_problem(template, problem)
        self._template, self._problem = template, problem
        self._proc = start_cuda_tool(
            [tool, "--tool", which, "--error-exitcode", "99", "--print-limit", "8",
             sys.executable, "-m", "kerntune.engine.profile", "--target", "-"],
            "compute-sanitizer", SanitizeError)
        job = replace(job_for(template, problem, None, device), launches=1)
        try:
            self._proc.stdin.write(json.dumps(asdict(job)) + "\n")
            self._proc.stdin.flush()
        except OSError:
            pass  # the child already ended: `check` reads why

    def check(self, config: Mapping[str, Any] | None, *, timeout: float = DEFAULT_TIMEOUT) -> tuple[bool, str]:
        """Run one configuration (None: the original) under the tool: (clean, message).
        SanitizeError when the tool or the child cannot run it."""
        run = self.run([config], timeout=timeout)
        if run.ended:
            raise SanitizeError(f"compute-sanitizer did not finish within {timeout:.0f} s")
        return read_report(run.text, run.code, self.which)

    def run(self, configs: Sequence[Mapping[str, Any] | None], *, timeout: float = DEFAULT_TIMEOUT) -> "GroupRun":
        """Run configurations (None: the original) in turn under the tool, each given `timeout`
        seconds: what it printed, and how many of them the child began and ended."""
        listed = [{"config": dict(c or {}), "original": c is None} for c in configs]
        # the child's lines carry a word drawn now: a kernel's printf cannot pass for them
        nonce = secrets.token_hex(8)
        progress = re.compile(rf"^({STARTED}|{DONE}) {nonce} (\d+)$", re.MULTILINE)
        text, code, ended = follow_cuda_tool(self._proc, json.dumps({"configs": listed, "nonce": nonce}) + "\n",
                                             timeout, progress)
        began = [int(m.group(2)) for m in progress.finditer(text) if m.group(1) == STARTED]
        done = [int(m.group(2)) for m in progress.finditer(text) if m.group(1) == DONE]
        return GroupRun(text, code, ended, 1 + max(began, default=-1), 1 + max(done, default=-1))

    def close(self, grace: float = 5.0) -> None:
        """End a child that was not needed: told so (an empty line), given `grace` seconds to end,
        then ended with the tool (the tool killed alone would leave it holding the output)."""
        stop_cuda_tool(self._proc, grace, stdin="\n")


Memcheck = Sanitizer  # (its first tool, and its default)


def close_all(sanitizers: Sequence[Sanitizer | None]) -> None:
    """End children that were not needed, told all at once (each then ends as the others do)."""
    live = [s for s in sanitizers if s is not None]
    for s in live:
        try:
            if s._proc.stdin is not None and not s._proc.stdin.closed:
                s._proc.stdin.write("\n")
                s._proc.stdin.close()
        except OSError:
            pass  # ended already
    for s in live:
        s.close()


@dataclass(frozen=True)
class GroupRun:
    """A tool's run over a list of configurations: its output and exit code, whether it was ended
    for going quiet too long (`ended`), and how many of the list the child began and finished."""

    text: str
    code: int
    ended: bool
    began: int
    done: int


# A configuration's verdict from one tool: (clean, message), or why it could not be checked
Verdict = Union[tuple[bool, str], str]


def check_all(configs: Sequence[Mapping[str, Any] | None], start: Callable[[], Sanitizer], *,
              first: Sanitizer | None = None, timeout: float = DEFAULT_TIMEOUT) -> list[Verdict]:
    """Every configuration under one tool, one child for the lot where nothing is found: each
    configuration's verdict, in order. `start()` starts a child of the tool (`first`: one
    started ahead, used first). A group with a finding is checked again in halves, each in a
    fresh child, until each finding is pinned to a configuration; what the child never began
    is checked again apart; one that ran past `timeout` or broke the child is one line."""
    verdicts: list[Verdict | None] = [None] * len(configs)
    groups = [list(range(len(configs)))] if configs else []
    which = first.which if first is not None else ""
    while groups:
        group = groups.pop(0)
        try:
            sanitizer, first = (first if first is not None else start()), None
            which = sanitizer.which
            run = sanitizer.run([configs[i] for i in group], timeout=timeout)
        except SanitizeError as e:
            for i in group:
                verdicts[i] = f"compute-sanitizer could not check {_name(configs[i])}: {e}"
            continue
        for i, verdict in _attribute(run, group, which, configs, timeout, groups.append):
            verdicts[i] = verdict
    return [v if v is not None else "compute-sanitizer left it unchecked" for v in verdicts]


def _attribute(run: GroupRun, group: list[int], which: str, configs: Sequence[Mapping[str, Any] | None],
               timeout: float, again: Callable[[list[int]], None]) -> list[tuple[int, Verdict]]:
    """What one run of a group says of its configurations; the groups it leaves open go to `again`."""
    errors, first = parse_report(run.text, which)
    failed = re.search(r"^kerntune-profile-error: (.*)$", run.text, re.MULTILINE)
    # (a finding comes from a launch, so from a configuration the child began; with none begun,
    # from any of them as far as can be told)
    began, rest = (group[:run.began], group[run.began:]) if run.began else (group, [])
    if errors > 0:  # a finding of one or more of the configurations the child began
        if rest:
            again(rest)
        if len(began) == 1:
            return [(began[0], (False, f"compute-sanitizer {which}: {errors} errors; {first}"))]
        # the child stopped inside the last one it began (memcheck's finding ends its CUDA
        # context): that one apart, the ones it finished together; else in halves
        half = len(began) - 1 if run.done < run.began else len(began) // 2
        again(began[:half])
        again(began[half:])
        return []
    if errors == 0 and not run.ended:
        out: list[tuple[int, Verdict]] = [(i, (True, f"compute-sanitizer {which}: 0 errors")) for i in group[:run.done]]
        if run.done < len(group):  # the child stopped in the middle of one (or before the first)
            stuck = group[run.done]
            why = failed.group(1).strip() if failed else f"the child ended (exit code {run.code})"
            out.append((stuck, f"compute-sanitizer {which} could not check {_name(configs[stuck])}: {why}"))
            if run.began == 0 and failed:  # nothing began: the same would stop every one of them
                out += [(i, f"compute-sanitizer {which} could not check {_name(configs[i])}: {why}")
                        for i in group[run.done + 1:]]
            elif group[run.done + 1:]:
                again(group[run.done + 1:])
        return out
    if run.ended:  # quiet past the time limit: in the one it was running, or before any began
        if not run.began:
            return [(i, f"compute-sanitizer {which} could not check {_name(configs[i])}: its child began "
                        f"nothing within {timeout:.0f} s") for i in group]
        stuck = group[run.began - 1]
        if group != [stuck]:
            again([i for i in group if i != stuck])
        return [(stuck, f"compute-sanitizer {which} could not check {_name(configs[stuck])}: "
                        f"it did not finish within {timeout:.0f} s")]
    # no summary: the tool itself failed
    if len(group) > 1:
        half = len(group) // 2
        again(group[:half])
        again(group[half:])
        return []
    why = failed.group(1).strip() if failed else f"compute-sanitizer {which} printed no summary (exit code {run.code})"
    return [(group[0], f"compute-sanitizer {which} could not check {_name(configs[group[0]])}: {why}")]


def _name(config: Mapping[str, Any] | None) -> str:
    return ", ".join(f"{k}={v}" for k, v in (config or {}).items()) or "the original"


def read_report(text: str, code: int, which: str = "memcheck") -> tuple[bool, str]:
    """(clean, message) from a tool's output on the profile child; SanitizeError when the child
    failed on its own, or the tool printed no summary."""
    failed = re.search(r"^kerntune-profile-error: (.*)$", text, re.MULTILINE)
    errors, first = parse_report(text, which)
    if errors > 0:
        return False, f"compute-sanitizer {which}: {errors} errors; {first}"
    if failed:
        raise SanitizeError(failed.group(1).strip())
    if errors < 0:
        raise SanitizeError(f"compute-sanitizer {which} printed no summary (exit code {code})")
    return True, f"compute-sanitizer {which}: 0 errors"


def memcheck_problem(template: Any, problem: Any) -> Any:
    """The size memcheck runs a configuration at: the smallest of the tuned size and the spec's
    verification sizes (by the elements of its buffers), where every configuration is verified."""
    from .expressions import ExpressionError
    from .inputs import arg_nbytes

    def size(p: Any) -> float:
        try:
            return sum(arg_nbytes(a, p) for a in template.arguments if a.is_buffer)
        except (ExpressionError, ValueError, TypeError, ZeroDivisionError):  # a size it cannot give
            return float("inf")

    return min((problem, *getattr(template, "verify_problems", ())), key=size)


def sanitize_config(template: Any, problem: Any, config: Mapping[str, Any] | None, *, device: int = 0,
                    tool: str | None = None, timeout: float = DEFAULT_TIMEOUT,
                    ahead: Sanitizer | None = None, which: str = "memcheck") -> tuple[bool, str]:
    """Run one configuration under one tool (`which`): (clean, message). Raises SanitizeError
    when the tool or the child cannot run. `ahead`: a Sanitizer of that tool started earlier for
    this template and problem."""
    if ahead is None:
        tool = tool or find_sanitizer()
        if tool is None:
            raise SanitizeError("compute-sanitizer was not found: install the CUDA toolkit or set KERNTUNE_SANITIZER")
        ahead = Sanitizer(tool, template, problem, device, which)
    return ahead.check(config, timeout=timeout)


def sanitize_configs(template: Any, problem: Any, configs: Sequence[Mapping[str, Any] | None], *, device: int = 0,
                     tool: str | None = None, timeout: float = DEFAULT_TIMEOUT, ahead: Sanitizer | None = None,
                     which: str = "memcheck") -> list[Verdict]:
    """Configurations (None: the original) under one tool (`which`), one child for the lot where
    nothing is found (`check_all`): each one's (clean, message), or why it could not be checked.
    SanitizeError when compute-sanitizer is not found. `ahead`: a Sanitizer of that tool started
    earlier for this template and problem, used first."""
    tool = tool or (ahead.tool if ahead is not None else find_sanitizer())
    if tool is None:
        raise SanitizeError("compute-sanitizer was not found: install the CUDA toolkit or set KERNTUNE_SANITIZER")
    return check_all(configs, lambda: Sanitizer(tool, template, problem, device, which), first=ahead, timeout=timeout)
