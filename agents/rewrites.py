"""Rewrites: the rules' changes to a kernel's structure, each exposed as template parameters.

A rewrite is a function of one signature,

    def rewrite(ctx: RewriteContext) -> Rewrite | Declined | tuple[Rewrite | Declined, ...]

that reads the kernel's analysis (agents/kernel_tree.py) and the source as the rewrites before it
left it (the literals already lifted), and returns the new source with its parameters, or says
why it does not apply; or returns stages, each a Rewrite whose source builds on the stage
before it (a later stage can be declined or left out and the earlier ones kept). Its
parameters' defaults must reproduce the original token for token (the gate's check stays
true), and it must apply only where the analysis proves it safe. The rules generator runs the
functions of REWRITES in order on each backend's source, each on the source the one before
made; a rewrite or stage the gate rejects is dropped by name and the rest are kept.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, replace
from typing import Callable

from kerntune.engine.device import DeviceLimits
from kerntune.engine.proposal import ParamProposal, TemplateProposal, original_launch
from kerntune.engine.template import Template

from . import (rewrite_contraction, rewrite_elementwise, rewrite_fastmath, rewrite_reduction, rewrite_rowchains,
               rewrite_rowkeep, rewrite_rowwise, rewrite_stencil)
from .kernel_tree import KernelAnalysis, KernelTreeError, classify, source_tokens

# In order; each function sees the source the ones before it made. Add a rewrite here.
REWRITES: tuple[Callable[["RewriteContext"], "Rewrite | Declined"], ...] = (
    rewrite_elementwise.rewrite,
    rewrite_rowwise.rewrite_rowwise,
    rewrite_contraction.rewrite,
    rewrite_reduction.rewrite,
    rewrite_stencil.rewrite,
    rewrite_fastmath.rewrite,  # last: it switches the calls of whatever the ones before made
)
# The names of the rewrites and their stages, in the order they are made, each with the stage it
# builds on ("" for a rewrite's first): what a caller may ask for or leave out by name.
STAGES: tuple[tuple[str, str], ...] = (
    (rewrite_elementwise.NAME, ""),
    (rewrite_rowwise.NAME, ""),
    (rewrite_rowkeep.NAME, rewrite_rowwise.NAME),
    (rewrite_rowchains.NAME, rewrite_rowkeep.NAME),
    (rewrite_contraction.NAME, ""),
    (rewrite_reduction.NAME, ""),
    (rewrite_stencil.NAME, ""),
    (rewrite_fastmath.NAME, ""),
)
GATE_LEFT_OUT = "left out: the gate rejected a template with it"


@dataclass(frozen=True)
class RewriteContext:
    """What a rewrite reads: the original spec, the backend, the source so far and its launch."""

    original: Template
    backend: str  # the dialect of `source`: "cuda" or "opencl"
    source: str  # after the lifts and the rewrites before this one
    analysis: KernelAnalysis  # of `source`'s entry kernel
    grid: tuple[str, ...]  # the launch so far, over problem names and parameters
    block: tuple[str, ...]
    defaults: dict  # the parameters so far and their defaults (the lifts' and earlier rewrites')
    limits: DeviceLimits
    taken: frozenset[str] = frozenset()  # names the source or spec already uses


@dataclass(frozen=True)
class Rewrite:
    """A rewrite's result: the new source, its parameters and constraints, and the launch it needs."""

    name: str  # stable, for dropping it after a rejection: "elementwise"
    source: str
    parameters: tuple[ParamProposal, ...]
    description: str  # one line for the diff panel and `templatize`
    constraints: tuple[str, ...] = ()
    grid: tuple[str, ...] | None = None  # None keeps the launch as it is
    block: tuple[str, ...] | None = None
    risk: int = 4  # rewrites are dropped before lifts (which go up to 3)
    first: dict = field(default_factory=dict)  # parameter -> the values worth measuring first
    helps: str = ""  # "memory": `first` is for kernels of that bound (the rules' tuner reads the cost)


@dataclass(frozen=True)
class Declined:
    """A rewrite that does not apply, and why, in one phrase."""

    name: str
    reason: str


@dataclass
class Applied:
    """The rewrites applied to each backend's source, in order, and those declined."""

    sources: dict[str, str]
    rewrites: list[Rewrite] = field(default_factory=list)  # of the primary backend
    declined: list[Declined] = field(default_factory=list)
    grid: tuple[str, ...] = ()
    block: tuple[str, ...] = ()
    notes: list[str] = field(default_factory=list)


def apply_rewrites(original: Template, sources: dict[str, str], primary: str, grid: tuple[str, ...],
                   block: tuple[str, ...], defaults: dict, limits: DeviceLimits,
                   dropped: frozenset[str] | set[str] = frozenset(), taken: frozenset[str] = frozenset(),
                   rewrites: tuple = REWRITES, left_out: str = GATE_LEFT_OUT) -> Applied:
    """The rewrites of `rewrites` that apply, made in order on every backend's source (the primary
    backend decides; another backend whose rewrite differs is left out, with a note); a rewrite or
    stage named in `dropped` is declined with `left_out` as the reason."""
    out = Applied(dict(sources), grid=tuple(grid), block=tuple(block))
    defaults = dict(defaults)
    for fn in rewrites:
        made: dict[str, list[Rewrite]] = {}  # backend -> the stages it takes
        for backend in [primary] + sorted(b for b in out.sources if b != primary):
            got = _one(fn, original, backend, out, defaults, limits, taken)
            stages = list(got) if isinstance(got, tuple) else [got]
            if backend == primary:
                mine: list[Rewrite] = []
                for stage in stages:
                    if isinstance(stage, Declined):
                        out.declined.append(stage)
                        break
                    if stage.name in dropped:
                        out.declined.append(Declined(stage.name, left_out))
                        break
                    mine.append(stage)
                if not mine:
                    break
                made[backend] = mine
                continue
            mine = made[primary]
            for k, have in enumerate(mine):
                theirs = stages[k] if k < len(stages) else Declined(have.name, "no such stage")
                if isinstance(theirs, Declined) or _shape(theirs) != _shape(have):
                    why = theirs.reason if isinstance(theirs, Declined) else _difference(theirs, have)
                    out.notes.append(f"the {backend} source cannot take the {have.name} rewrite ({why}): "
                                     f"the template is for {', '.join(sorted(made))} only")
                    out.sources.pop(backend)
                    break
            else:
                made[backend] = stages[:len(mine)]
        if primary not in made:
            continue
        for backend, taken_stages in made.items():
            out.sources[backend] = taken_stages[-1].source
        for stage in made[primary]:
            out.rewrites.append(stage)
            out.grid = stage.grid if stage.grid is not None else out.grid
            out.block = stage.block if stage.block is not None else out.block
            defaults.update({p.name: p.default for p in stage.parameters})
    return out


def _one(fn, original: Template, backend: str, sofar: Applied, defaults: dict, limits: DeviceLimits,
         taken: frozenset[str]) -> Rewrite | Declined | tuple:
    source = sofar.sources[backend]
    try:
        analysis = classify(source, original.entry)
    except KernelTreeError as e:
        module = sys.modules.get(getattr(fn, "__module__", ""))
        return Declined(getattr(module, "NAME", getattr(fn, "__name__", "rewrite")), str(e))
    ctx = RewriteContext(original, backend, source, analysis, sofar.grid, sofar.block, dict(defaults), limits,
                         frozenset(taken))
    return fn(ctx)


def _difference(other: Rewrite, mine: Rewrite) -> str:
    """Why another backend's rewrite cannot share the template, in words."""
    names = {p.name for p in other.parameters} ^ {p.name for p in mine.parameters}
    if names:
        return f"its parameters differ: {', '.join(sorted(names))}"
    return "its parameters' defaults, constraints or launch differ"


def _shape(r: Rewrite) -> tuple:
    return (r.name, tuple((p.name, p.default) for p in r.parameters), r.grid, r.block, r.constraints)


def compose(original: Template, backend: str, limits: DeviceLimits, proposal: TemplateProposal | None,
            dropped: frozenset[str] | set[str] = frozenset(),
            left_out: str = GATE_LEFT_OUT) -> tuple[TemplateProposal | None, Applied]:
    """The lifts' proposal (None: nothing was lifted) with the rewrites that apply made on top
    (those named in `dropped` declined, `left_out` saying why)."""
    if proposal is not None:
        sources, grid, block = dict(proposal.sources), proposal.grid, proposal.block
        params = list(proposal.parameters)
    else:
        sources = {b: original.source_for(b) for b in original.sources}
        grid, block = (tuple(x) for x in original_launch(original, limits))
        params = []
    if original.parameters:
        return proposal, Applied(sources, grid=tuple(grid or ()), block=tuple(block or ()))
    taken = frozenset(_identifiers(sources) | set(original.problem_names) | {p.name for p in params})
    applied = apply_rewrites(original, sources, backend, tuple(grid), tuple(block),
                             {p.name: p.default for p in params}, limits, dropped, taken, left_out=left_out)
    if not applied.rewrites:
        if proposal is not None and applied.declined:
            why = "; ".join(f"{d.name}: {d.reason}" for d in applied.declined)
            proposal = replace(proposal, notes=tuple(proposal.notes) + (f"no rewrite applies ({why})",))
        return proposal, applied
    params += [p for r in applied.rewrites for p in r.parameters]
    constraints = list(proposal.constraints if proposal is not None else ())
    constraints += [c for r in applied.rewrites for c in r.constraints]
    described = [r.description for r in applied.rewrites]
    summary = (proposal.summary + "; " if proposal is not None else "rules: ") + "; ".join(described)
    notes = list(proposal.notes if proposal is not None else ()) + applied.notes
    notes += [f"rewrote the kernel: {d}" for d in described]
    # a rewrite for another class of kernel declining is no news once one applied; one left out is
    notes += [f"no {d.name} rewrite: {d.reason}" for d in applied.declined if d.name in dropped]
    return TemplateProposal(
        sources=applied.sources, parameters=tuple(params), constraints=tuple(dict.fromkeys(constraints)),
        grid=applied.grid, block=applied.block,
        shared_bytes=proposal.shared_bytes if proposal is not None else None,
        summary=f"{summary} ({len(params)} parameters: {', '.join(p.name for p in params)})",
        notes=tuple(notes)), applied


def _identifiers(sources: dict[str, str]) -> set[str]:
    return {word for src in sources.values() for word, _ in source_tokens(src) if word.isidentifier()}
