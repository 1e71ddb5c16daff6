"""compute-sanitizer memcheck on a configuration (CUDA): out-of-bounds and misaligned accesses,
reads as well as writes, that the guard regions around every buffer cannot see.

It runs the same child as the profiler (`python -m kerntune.engine.profile --target JOB`: compile
the configuration, upload inputs, launch twice) under `compute-sanitizer --tool memcheck`, found
like ncu is: $KERNTUNE_SANITIZER, PATH, the CUDA toolkit. The reported winner is always checked
when it is found; `tune --sanitize K` checks the K fastest. A finding demotes the configuration.
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any, Mapping

from .backends.cuda_toolchain import find_cuda_tool, run_cuda_tool
from .profile import job_for

DEFAULT_TIMEOUT = 300.0


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


def sanitize_config(template: Any, problem: Any, config: Mapping[str, Any] | None, *, device: int = 0,
                    tool: str | None = None, timeout: float = DEFAULT_TIMEOUT) -> tuple[bool, str]:
    """Run one configuration under memcheck: (clean, message). Raises SanitizeError when the tool
    or the child cannot run."""
    tool = tool or find_sanitizer()
    if tool is None:
        raise SanitizeError("compute-sanitizer was not found: install the CUDA toolkit or set KERNTUNE_SANITIZER")
    job = job_for(template, problem, config, device)
    with tempfile.TemporaryDirectory(prefix="kerntune-sanitize-") as tmp:
        job_path = Path(tmp) / "job.json"
        job_path.write_text(json.dumps(asdict(job)))
        cmd = [tool, "--tool", "memcheck", "--error-exitcode", "99", "--print-limit", "8",
               sys.executable, "-m", "kerntune.engine.profile", "--target", str(job_path)]
        text, code = run_cuda_tool(cmd, "compute-sanitizer", timeout, SanitizeError)
    failed = re.search(r"^kerntune-profile-error: (.*)$", text, re.MULTILINE)
    errors, first = parse_report(text)
    if errors > 0:
        return False, f"compute-sanitizer memcheck: {errors} errors; {first}"
    if failed:
        raise SanitizeError(failed.group(1).strip())
    if errors < 0:
        raise SanitizeError(f"compute-sanitizer printed no summary (exit code {code})")
    return True, "compute-sanitizer memcheck: 0 errors"
