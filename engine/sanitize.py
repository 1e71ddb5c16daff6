"""compute-sanitizer memcheck on a configuration (CUDA): out-of-bounds and misaligned accesses,
reads as well as writes, that the guard regions around every buffer cannot see.

It runs the same child as the profiler (`python -m kerntune.engine.profile --target -`: compile the
configuration, upload inputs, launch once) under `compute-sanitizer --tool memcheck`, the job on
its standard input, so that a run can start it ahead (`Memcheck`) while it tunes; found
like ncu is: $KERNTUNE_SANITIZER, PATH, the CUDA toolkit. The reported winner is always checked
when it is found; `tune --sanitize K` checks the K fastest. A finding demotes the configuration.
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


class SanitizeError(RuntimeError):
    """compute-sanitizer could not run the configuration at all."""


def find_sanitizer() -> str | None:
    """compute-sanitizer from $KERNTUNE_SANITIZER, PATH or the CUDA toolkit; None if absent."""
    return find_cuda_tool("compute-sanitizer", "KERNTUNE_SANITIZER")


_SUMMARY = re.compile(r"ERROR SUMMARY:\s*(\d+) error")
_FINDING = re.compile(r"^=========\s+(Invalid .*|Misaligned .*|Out of bounds .*|.*out of bounds.*)$", re.MULTILINE)
_WHERE = re.compile(r"^=========\s+(at .*|by thread .*|Address .*)$", re.MULTILINE)


def parse_report(text: str) -> tuple[int, str]:
    """(errors, a one-line summary of the first finding) from memcheck's output."""
    m = _SUMMARY.search(text)
    errors = int(m.group(1)) if m else -1
    if errors <= 0:
        return errors, ""
    first = _FINDING.search(text)
    where = _WHERE.findall(text)[:2]
    parts = [first.group(1).strip()] if first else []
    parts += [w.strip() for w in where]
    return errors, "; ".join(parts)[:400]


class Memcheck:
    """compute-sanitizer's memcheck on a child started ahead: the tool and the child's Python
    start, its modules load and it draws its inputs while the run goes on; the configuration to
    check is given later (`check`) through the child's standard input. Until then the child
    touches no device. One check a Memcheck; `close` ends one that was not needed."""

    def __init__(self, tool: str, template: Any, problem: Any, device: int = 0):
        self.tool = tool
        problem = memcheck_problem(template, problem)
        self._template, self._problem = template, problem
        self._proc = start_cuda_tool(
            [tool, "--tool", "memcheck", "--error-exitcode", "99", "--print-limit", "8",
             sys.executable, "-m", "kerntune.engine.profile", "--target", "-"],
            "compute-sanitizer", SanitizeError)
        job = replace(job_for(template, problem, None, device), launches=1)
        try:
            self._proc.stdin.write(json.dumps(asdict(job)) + "\n")
            self._proc.stdin.flush()
        except OSError:
            pass  # the child already ended: `check` reads why

    def check(self, config: Mapping[str, Any] | None, *, timeout: float = DEFAULT_TIMEOUT) -> tuple[bool, str]:
        """Run one configuration (None: the original) under memcheck: (clean, message).
        SanitizeError when the tool or the child cannot run it."""
        which = json.dumps({"config": dict(config or {}), "original": config is None})
        text, code = finish_cuda_tool(self._proc, "compute-sanitizer", timeout, SanitizeError, stdin=which + "\n")
        return read_memcheck(text, code)

    def close(self, grace: float = 5.0) -> None:
        """End a child that was not needed: told so (an empty line), given `grace` seconds to end,
        then ended with the tool (the tool killed alone would leave it holding the output)."""
        stop_cuda_tool(self._proc, grace, stdin="\n")


def read_memcheck(text: str, code: int) -> tuple[bool, str]:
    """(clean, message) from memcheck's output on the profile child; SanitizeError when the child
    failed on its own, or the tool printed no summary."""
    failed = re.search(r"^kerntune-profile-error: (.*)$", text, re.MULTILINE)
    errors, first = parse_report(text)
    if errors > 0:
        return False, f"compute-sanitizer memcheck: {errors} errors; {first}"
    if failed:
        raise SanitizeError(failed.group(1).strip())
    if errors < 0:
        raise SanitizeError(f"compute-sanitizer printed no summary (exit code {code})")
    return True, "compute-sanitizer memcheck: 0 errors"


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
                    ahead: Memcheck | None = None) -> tuple[bool, str]:
    """Run one configuration under memcheck: (clean, message). Raises SanitizeError when the tool
    or the child cannot run. `ahead`: a Memcheck started earlier for this template and problem."""
    if ahead is None:
        tool = tool or find_sanitizer()
        if tool is None:
            raise SanitizeError("compute-sanitizer was not found: install the CUDA toolkit or set KERNTUNE_SANITIZER")
        ahead = Memcheck(tool, template, problem, device)
    return ahead.check(config, timeout=timeout)
