"""compute-sanitizer on a configuration (CUDA): memcheck for out-of-bounds and misaligned
accesses, reads as well as writes, that the guard regions around every buffer cannot see;
racecheck for shared-memory hazards (a dropped barrier, warp-synchronous code without
`__syncwarp`); synccheck for barriers used where not every thread reaches them.

It runs the same child as the profiler (`python -m kerntune.engine.profile --target -`: compile the
configuration, upload inputs, launch once) under `compute-sanitizer --tool memcheck`, the job on
its standard input, so that a run can start it ahead (`Memcheck`) while it tunes; found
like ncu is: $KERNTUNE_SANITIZER, PATH, the CUDA toolkit. The reported winner and the leaders
timed again with it are always checked by all three tools when it is found; `tune --sanitize K`
checks the K fastest too. A finding demotes the configuration: out_of_bounds for memcheck's,
wrong_result for a race or a barrier misused.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import asdict, replace
from typing import Any, Mapping

from .backends.cuda_toolchain import find_cuda_tool, finish_cuda_tool, start_cuda_tool, stop_cuda_tool
from .profile import job_for

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
    m = _RACE_SUMMARY.search(text) if check == "racecheck" else None
    m = m or _SUMMARY.search(text)
    errors = int(m.group(1)) if m else -1
    if errors <= 0:
        return errors, ""
    first = _FINDINGS.get(check, _FINDINGS["memcheck"]).search(text) or _ANY_ERROR.search(text)
    where = _WHERE.findall(text)[:2]
    parts = [first.group(1).strip()] if first else []
    parts += [w.strip() for w in where]
    return errors, "; ".join(parts)[:400]


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
        which = json.dumps({"config": dict(config or {}), "original": config is None})
        text, code = finish_cuda_tool(self._proc, "compute-sanitizer", timeout, SanitizeError, stdin=which + "\n")
        return read_report(text, code, self.which)

    def close(self, grace: float = 5.0) -> None:
        """End a child that was not needed: told so (an empty line), given `grace` seconds to end,
        then ended with the tool (the tool killed alone would leave it holding the output)."""
        stop_cuda_tool(self._proc, grace, stdin="\n")


Memcheck = Sanitizer  # (its first tool, and its default)


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
