"""The rules' passes made in order on a kernel: the registry of agents/passes.py filled, and run.

Every pass (agents/passes.py) is registered here, in the order they run when nothing else orders
them; a pass that follows another runs on its source and is left out without it. A pass returns
its Rewrite, or Declined with why; a pass with later stages (passes whose `stage_of` names it)
returns them too, in order (each a Rewrite whose source builds on the one before: a later stage
can be declined or left out and the earlier ones kept). Its parameters' defaults reproduce the
original token for token (the gate's check stays true), and it applies only where the model of
the kernel proves it safe. The rules generator runs the passes on each backend's source, each on
the source the one before made; a pass the gate rejects is dropped by name and the rest are kept.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from kerntune.engine.device import DeviceLimits
from kerntune.engine.proposal import TemplateProposal, original_launch
from kerntune.engine.template import Template

from . import (rewrite_contraction, rewrite_elementwise, rewrite_fastmath, rewrite_histogram, rewrite_reduction,
               rewrite_rowwise, rewrite_stencil, rewrite_transpose)
from .kernel_tree import KernelTreeError, classify, source_tokens
from .passes import Declined, Pass, Rewrite, RewriteContext, ordered, register

__all__ = ["Applied", "Declined", "Rewrite", "RewriteContext", "REWRITES", "apply_rewrites", "compose"]

register(rewrite_elementwise.rewrite)
register(rewrite_rowwise.ROWWISE)
register(rewrite_rowwise.ROWWISE_KEEP)
register(rewrite_rowwise.ROWWISE_CHAINS)
register(rewrite_contraction.rewrite)
register(rewrite_reduction.rewrite)
register(rewrite_histogram.rewrite)
register(rewrite_stencil.rewrite)
register(rewrite_transpose.rewrite)
# last: it switches the math calls of whatever the passes before made
register(rewrite_fastmath.rewrite)


def top_level() -> tuple[Pass, ...]:
    """What apply_rewrites runs by default: each registered pass that is no later stage of another,
    in order."""
    return tuple(p for p in ordered() if not p.stage_of)


# In order; each sees the source the ones before it made (agents/passes.py's registry, which
# passes.names() and passes.builds_on() read by name).
REWRITES = top_level()
GATE_LEFT_OUT = "left out: the gate rejected a template with it"


@dataclass
class Applied:
    """The rewrites applied to each backend's source, in order, and those declined."""

    sources: dict[str, str]
    rewrites: list[Rewrite] = field(default_factory=list)  # of the primary backend
    declined: list[Declined] = field(default_factory=list)
    grid: tuple[str, ...] = ()
    block: tuple[str, ...] = ()
    shared_bytes: str | None = None  # the last pass's that sets it; None keeps the lifts' or the original's
    notes: list[str] = field(default_factory=list)


def apply_rewrites(original: Template, sources: dict[str, str], primary: str, grid: tuple[str, ...],
                   block: tuple[str, ...], defaults: dict, limits: DeviceLimits,
                   dropped: frozenset[str] | set[str] = frozenset(), taken: frozenset[str] = frozenset(),
                   rewrites: tuple[Pass, ...] | None = None, left_out: str = GATE_LEFT_OUT) -> Applied:
    """The rewrites of `rewrites` that apply, made in order on every backend's source (the primary
    backend decides; another backend whose rewrite differs is left out, with a note); a rewrite or
    stage named in `dropped` is declined with `left_out` as the reason."""
    out = Applied(dict(sources), grid=tuple(grid), block=tuple(block))
    defaults = dict(defaults)
    for p in (top_level() if rewrites is None else rewrites):
        made: dict[str, list[Rewrite]] = {}  # backend -> the stages it takes
        for backend in [primary] + sorted(b for b in out.sources if b != primary):
            got = _one(p, original, backend, out, defaults, limits, taken)
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
            out.shared_bytes = stage.shared_bytes if stage.shared_bytes is not None else out.shared_bytes
            defaults.update({p.name: p.default for p in stage.parameters})
    return out


def _one(p: Pass, original: Template, backend: str, sofar: Applied, defaults: dict, limits: DeviceLimits,
         taken: frozenset[str]) -> Rewrite | Declined | tuple:
    """A pass run on one backend's source so far."""
    source = sofar.sources[backend]
    try:
        analysis = classify(source, original.entry)
    except KernelTreeError as e:
        return Declined(p.name, str(e))
    ctx = RewriteContext(original, backend, source, analysis, sofar.grid, sofar.block, dict(defaults), limits,
                         frozenset(taken))
    return p.run(ctx)


def _difference(other: Rewrite, mine: Rewrite) -> str:
    """Why another backend's rewrite cannot share the template, in words."""
    names = {p.name for p in other.parameters} ^ {p.name for p in mine.parameters}
    if names:
        return f"its parameters differ: {', '.join(sorted(names))}"
    return "its parameters' defaults, constraints or launch differ"


def _shape(r: Rewrite) -> tuple:
    return (r.name, tuple((p.name, p.default) for p in r.parameters), r.grid, r.block, r.shared_bytes, r.constraints)


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
    notes += [f"no {d.name} rewrite: {d.reason}" for d in applied.declined if d.name in dropped or d.for_device]
    return TemplateProposal(
        sources=applied.sources, parameters=tuple(params), constraints=tuple(dict.fromkeys(constraints)),
        grid=applied.grid, block=applied.block,
        shared_bytes=applied.shared_bytes if applied.shared_bytes is not None else
        proposal.shared_bytes if proposal is not None else None,
        summary=f"{summary} ({len(params)} parameters: {', '.join(p.name for p in params)})",
        notes=tuple(notes)), applied


def _identifiers(sources: dict[str, str]) -> set[str]:
    return {word for src in sources.values() for word, _ in source_tokens(src) if word.isidentifier()}
