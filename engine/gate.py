"""The gate: a proposed template is used only once it is shown to be the same kernel.

A proposal passes when its spec loads (every parameter is mentioned in the source and every
constraint and launch expression parses), every parameter it declares is used beyond its own
`#ifndef` guard (in the source or in the launch geometry), its default configuration is feasible,
the source compiles for the backend in use, and the default configuration reproduces the original
kernel's outputs on fresh random inputs at every verification size.

The device part runs in an evaluation worker (engine/worker.py), like every evaluation: a
proposal that faults or hangs costs a rejection, never the run.
"""

from __future__ import annotations

import os
import random
import re
from dataclasses import dataclass
from pathlib import Path

from .device import DeviceLimits
from .proposal import TemplateProposal, write_template
from .space import infeasible_reason
from .template import Problem, Template, TemplateError
from .worker import Worker, WorkerError, WorkerSpec


@dataclass(frozen=True)
class GateVerdict:
    """Whether a proposal may be used; `reason` says why not, `checks` what passed."""

    ok: bool
    reason: str = ""
    checks: tuple[str, ...] = ()
    seeds: tuple[int, ...] = ()
    template: Template | None = None
    directory: Path | None = None


def guard_free(source: str, name: str) -> str:
    """The source without the `#ifndef NAME / #define NAME ... / #endif` block that sets a default."""
    pattern = (rf"^[ \t]*#[ \t]*ifndef[ \t]+{re.escape(name)}\b[^\n]*\n"
               rf"[ \t]*#[ \t]*define[ \t]+{re.escape(name)}\b[^\n]*\n"
               rf"[ \t]*#[ \t]*endif\b[^\n]*(\n|$)")
    return re.sub(pattern, "", source, flags=re.MULTILINE)


def unused_parameters(template: Template, backend: str) -> list[str]:
    """Parameters that neither the source (beyond their guard) nor the launch geometry uses."""
    source = _strip_comments(template.source_for(backend))
    launch = set().union(*(e.names for e in template.grid + template.block))
    if template.shared_bytes is not None:
        launch |= template.shared_bytes.names
    out = []
    for p in template.parameters:
        if p.name in launch:
            continue
        if not re.search(rf"\b{re.escape(p.name)}\b", guard_free(source, p.name)):
            out.append(p.name)
    return out


def _strip_comments(source: str) -> str:
    source = re.sub(r"/\*.*?\*/", " ", source, flags=re.DOTALL)
    return re.sub(r"//[^\n]*", "", source)


def check_proposal(original: Template, proposal: TemplateProposal, directory: Path, *, backend: str,
                   device: int, problem: Problem, limits: DeviceLimits, timeout: float = 300.0,
                   header: str = "", seeds: tuple[int, ...] | None = None) -> GateVerdict:
    """Write the proposal's template into `directory` and run every check on it."""
    checks: list[str] = []
    if not proposal.parameters:
        return GateVerdict(False, "the template declares no parameters: there is nothing to tune")
    if backend not in proposal.sources:
        return GateVerdict(False, f"the proposal has no {backend} source, and {backend} is the backend in use")
    try:
        template = write_template(original, proposal, directory, limits, header)
    except TemplateError as e:
        return GateVerdict(False, f"the spec does not load: {_relative(str(e), directory)}", directory=directory)
    except OSError as e:
        return GateVerdict(False, f"cannot write the template: {e}", directory=directory)
    checks.append("the spec loads; every parameter is mentioned and every expression parses")
    unused = unused_parameters(template, backend)
    if unused:
        return GateVerdict(False, f"parameter(s) {', '.join(unused)} are declared but never used beyond "
                           "their #ifndef default (nor in the launch geometry)", tuple(checks),
                           template=template, directory=directory)
    checks.append("every parameter is used")
    default = template.default_config()
    for p in (problem, *template.verify_problems):
        why = infeasible_reason(template, default, p, limits)
        if why is not None:
            return GateVerdict(False, f"the default configuration is infeasible at {p.label()}: {why}",
                               tuple(checks), template=template, directory=directory)
    checks.append("the default configuration is feasible")
    seeds = seeds or tuple(random.SystemRandom().randrange(1 << 20, 1 << 31) for _ in range(2))
    ok, message = _device_check(template, backend, device, problem, seeds, timeout)
    if not ok:
        return GateVerdict(False, message, tuple(checks), seeds, template, directory)
    checks.append(f"it compiles for {backend}, and the default configuration reproduces the original's "
                  f"outputs on fresh inputs (seeds {', '.join(map(str, seeds))}; {message})")
    return GateVerdict(True, "", tuple(checks), seeds, template, directory)


def _relative(text: str, directory: Path) -> str:
    """Messages name files in the template folder by their own names."""
    return text.replace(str(directory) + os.sep, "")


# Seconds an evaluation worker of the gate may take to start (its imports and the device's opening).
START_S = 120.0


def _device_check(template: Template, backend: str, device: int, problem: Problem, seeds: tuple[int, ...],
                  timeout: float) -> tuple[bool, str]:
    """The default configuration against the original, in an evaluation worker that may take
    `timeout` seconds for the check, and at least START_S to start (starting is the host's cost,
    not the proposal's: a loaded host must not reject a template for it)."""
    spec = WorkerSpec(backend=backend, device=device, spec_path=str(template.spec_path),
                      spec_text=template.spec_text, sources=dict(template.sources), problem_name=problem.name,
                      problem=dict(problem.values), check_only=True)
    worker = Worker(spec, config_timeout=timeout, start_timeout=max(timeout, START_S))
    try:
        worker.start()
        ok, worst, message = worker.reproduces_original(template.default_config(), seeds)
    except WorkerError as e:  # no device, a reference that does not load: the proposal is rejected with it
        return False, str(e)
    finally:
        worker.close()
    return ok, f"worst error {worst:.3g} of the tolerance" if ok else message
