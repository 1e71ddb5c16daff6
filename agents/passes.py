"""Transformations as passes over the kernel model: the interface every rules rewrite is written to.

A pass is an object with

- `name`: stable, what a caller (the rules' generator, Claude's `apply_rewrites`) asks for or
  leaves out by;
- `follows`: the passes it builds on, by name (it runs on the source they made, and is left out
  when one of them is); `after`: passes it only runs later than, when they are made;
- `requires(ctx) -> str | None`: why it does not apply to the kernel (`ctx.model`, the
  `KernelModel` of agents/model.py, of the source so far), or None;
- `apply(ctx) -> Rewrite | Declined`: the new source with its parameters (`Param`, each with a
  `kind` of PARAM_KINDS: threads, lanes, rows, vector, work, grid, bounds, flag, unroll, tile,
  keep, chains, size; the tuner reads the kind, never the description), constraints and launch;
  or why it declined after all.

What every pass shares, written once here:

- `Edits`: one buffer of byte-range replacements over a source; an edit that overlaps another is
  refused (`EditConflict`), so two changes never fight over the same text;
- `HELPERS` / `helper()`: helper code (device functions, macros) declared once under a name, per
  dialect; `Helpers` collects what a pass's code needs and writes each once, in declaration order;
- `guarded()` and `defaults()`: the wrapper that keeps the original token for token at the
  parameters' defaults (`#ifndef P / #define P default / #endif` for each, then
  `#if <any parameter off its default> new #else original #endif`);
- `Pass.make()`: the `Rewrite` a pass returns, built from its buffer, helpers and parameters.

A cooperating pass (tiling a contraction through shared memory, a block's tree reduction, a
haloed stencil tile, a staged gather) reads what it needs from the model: the loop nest and each
loop's role and trip count, each access's affine index (`Access.expr.slope("threadIdx.x")`,
`.shared_by(0)` for reuse across the threads of a block), barriers with their loops, shared arrays
with their bytes; writes its code through `Edits`; declares its device functions with `helper()`;
and registers itself with `register()`. tests/test_passes.py runs every registered pass alone at
its defaults through the C preprocessor and compares the tokens with the original's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping

from kerntune.engine.device import DeviceLimits
from kerntune.engine.template import PARAM_KINDS, Parameter, Template

from .lift import Edit, fresh_name
from .model import KernelModel, ModelError, Span, build

Param = Parameter  # name, values, default, description, kind


def param(name: str, values: Iterable, default, kind: str, description: str) -> Param:
    """A pass's parameter; `kind` is one of PARAM_KINDS."""
    if kind not in PARAM_KINDS:
        raise ValueError(f"unknown kind of parameter {kind!r} (known: {', '.join(PARAM_KINDS)})")
    return Parameter(name, tuple(values), default, description, kind)


# the context and the results -------------------------------------------------------------------------

@dataclass(frozen=True)
class RewriteContext:
    """What a pass reads: the original spec, the backend, the source so far and its launch."""

    original: Template
    backend: str  # the dialect of `source`: "cuda" or "opencl"
    source: str  # after the lifts and the passes before this one
    analysis: object  # agents/kernel_tree.py's KernelAnalysis of `source`'s entry kernel
    grid: tuple[str, ...]  # the launch so far, over problem names and parameters
    block: tuple[str, ...]
    defaults: dict  # the parameters so far and their defaults (the lifts' and earlier passes')
    limits: DeviceLimits
    taken: frozenset[str] = frozenset()  # names the source or spec already uses

    @property
    def model(self) -> KernelModel:
        """The kernel model of the source so far (agents/model.py); ModelError when it cannot be read."""
        return build(self.source, self.original.entry)

    def fresh(self, name: str, also: Iterable[str] = ()) -> str:
        """`name`, or a variant no name of the source, spec or parameters so far has."""
        return fresh_name(name, set(self.taken) | set(self.defaults) | set(also))


@dataclass(frozen=True)
class Rewrite:
    """A pass's result: the new source, its parameters and constraints, and the launch it needs."""

    name: str  # the pass's name: what a caller drops it by after a rejection
    source: str
    parameters: tuple[Param, ...]
    description: str  # one line for the diff panel and `templatize`
    constraints: tuple[str, ...] = ()
    grid: tuple[str, ...] | None = None  # None keeps the launch as it is
    block: tuple[str, ...] | None = None
    shared_bytes: str | None = None  # the launch's dynamic shared memory; None keeps it as it is
    risk: int = 4  # rewrites are dropped before lifts (which go up to 3)
    first: dict = field(default_factory=dict)  # parameter -> the values worth measuring first
    helps: str = ""  # "memory": `first` is for kernels of that bound (the rules' tuner reads the cost)


@dataclass(frozen=True)
class Declined:
    """A pass that does not apply, and why, in one phrase."""

    name: str
    reason: str
    # declined for the device's runtime, not for the kernel: always told in the plan
    for_device: bool = False


# one edit buffer -----------------------------------------------------------------------------------------

class EditConflict(ValueError):
    """Two edits of one buffer overlap."""


class Edits:
    """Replacements of byte ranges of one source, made at once; overlapping ranges are refused.

    Two insertions at the same offset are kept in the order they were made; an insertion at the
    edge of a replaced range goes before (at its start) or after (at its end) it."""

    def __init__(self, source: str):
        self.source = source
        self.raw = source.encode("utf-8")
        self.edits: list[tuple[Edit, int]] = []

    def replace(self, span: Span | tuple[int, int], text: str) -> None:
        start, end = (span.start, span.end) if isinstance(span, Span) else span
        if not 0 <= start <= end <= len(self.raw):
            raise EditConflict(f"bytes {start}..{end} are outside the source")
        for e, _ in self.edits:
            if start < e.end and e.start < end or (start == end and e.start < start < e.end) \
                    or (e.start == e.end and start < e.start < end):
                raise EditConflict(f"bytes {start}..{end} overlap an edit of {e.start}..{e.end}")
        self.edits.append((Edit(start, end, text), len(self.edits)))

    def insert(self, at: int, text: str) -> None:
        self.replace((at, at), text)

    def text(self, span: Span | tuple[int, int]) -> str:
        """The source's text of a span, as written."""
        start, end = (span.start, span.end) if isinstance(span, Span) else span
        return self.raw[start:end].decode("utf-8")

    def result(self) -> str:
        out = self.raw
        for e, _ in sorted(self.edits, key=lambda x: (x[0].start, x[0].end, x[1]), reverse=True):
            out = out[:e.start] + e.text.encode("utf-8") + out[e.end:]
        return out.decode("utf-8")


# helper code declared once ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Helper:
    """Code a pass's source needs once per file (a device function, macros), for one dialect
    ("" for both); `needs` names helpers it uses; `{NAME}` fields are filled by `Helpers.text`."""

    name: str
    dialect: str
    text: str
    needs: tuple[str, ...] = ()


HELPERS: dict[tuple[str, str], Helper] = {}


def helper(name: str, text: str, dialect: str = "", needs: tuple[str, ...] = ()) -> Helper:
    """Declare a helper once (a second declaration of the same name and dialect is an error)."""
    key = (name, dialect)
    if key in HELPERS and HELPERS[key].text != text:
        raise ValueError(f"the helper {name} ({dialect or 'both dialects'}) is declared twice")
    HELPERS[key] = Helper(name, dialect, text, needs)
    return HELPERS[key]


class Helpers:
    """The helpers one source needs, each written once, what it needs before it."""

    def __init__(self, dialect: str):
        self.dialect = dialect
        self.names: list[str] = []

    def need(self, name: str) -> None:
        h = HELPERS.get((name, self.dialect)) or HELPERS.get((name, ""))
        if h is None:
            raise KeyError(f"no helper {name} is declared for {self.dialect}")
        for n in h.needs:
            self.need(n)
        if name not in self.names:
            self.names.append(name)

    def text(self, fields: Mapping[str, str] | None = None) -> str:
        out = []
        for name in self.names:
            h = HELPERS.get((name, self.dialect)) or HELPERS[(name, "")]
            out.append(h.text.format(**fields) if fields else h.text)
        return "".join(out)


# the defaults reproduce the original ------------------------------------------------------------------------

def defaults(params: Iterable[Param | tuple[str, object]]) -> str:
    """Each parameter's default (a Param, or its name and default), for a compile that does not set it."""
    pairs = [p if isinstance(p, tuple) else (p.name, p.default) for p in params]
    return "".join(f"#ifndef {name}\n#define {name} {_c(value)}\n#endif\n" for name, value in pairs)


def guarded(params: Iterable[Param], new: str, original: str, off: Iterable[str] = ()) -> str:
    """`new` when any parameter is off its default (or `off`'s conditions hold), `original` as written
    otherwise: at the defaults the preprocessor leaves the original token for token."""
    params = list(params)
    switches = [f"{p.name} != {_c(p.default)}" for p in params] + list(off)
    return f"#if {' || '.join(switches)}\n{new}\n#else\n{original}\n#endif"


def _c(value) -> str:
    return str(int(value)) if isinstance(value, bool) else str(value)


# passes and their registry --------------------------------------------------------------------------------------

class Pass:
    """A transformation of a kernel; subclasses set `name`, `follows`, `after` and write `requires`
    and `apply`. A pass is called as a function of a RewriteContext (`run`).

    A pass whose `stage_of` names another is a later stage of that pass: the two are made together,
    from the source before the first (a stage rebuilds the earlier stages' changes with its own), by
    the first pass's `apply`, which returns its stages in order (a tuple, each a Rewrite whose
    source holds the one before's changes, or a Declined that ends them)."""

    name = ""
    follows: tuple[str, ...] = ()  # passes it builds on: it runs on their source, and not without them
    after: tuple[str, ...] = ()  # passes it runs later than, when they are made ("*": all but the other "*")
    stage_of = ""  # the pass whose `apply` makes this one as a later stage ("" for none)

    def requires(self, ctx: RewriteContext) -> str | Declined | None:
        """Why the pass does not apply to `ctx`'s kernel; None when it may (a Declined of its own
        where more than the reason is told: one for the device's runtime rather than the kernel)."""
        return None

    def apply(self, ctx: RewriteContext) -> Rewrite | Declined:
        raise NotImplementedError

    def run(self, ctx: RewriteContext) -> Rewrite | Declined:
        """`requires`, then `apply`; a kernel the model cannot read is declined with the reason."""
        try:
            why = self.requires(ctx)
        except ModelError as e:
            why = str(e)
        if isinstance(why, Declined):
            return why
        if why:
            return Declined(self.name, why)
        return self.apply(ctx)

    def __call__(self, ctx: RewriteContext) -> Rewrite | Declined | tuple:
        return self.run(ctx)

    def make(self, edits: Edits, params: Iterable[Param], description: str, **more) -> Rewrite:
        return Rewrite(self.name, edits.result(), tuple(params), description, **more)


PASSES: list[Pass] = []


def register(p: Pass) -> Pass:
    """Add a pass to the registry (by name, once); it runs after what it follows and its `after`."""
    if any(q.name == p.name for q in PASSES):
        raise ValueError(f"a pass named {p.name} is registered already")
    known = {q.name for q in PASSES}
    missing = [n for n in p.follows if n not in known]
    if missing:
        raise ValueError(f"the pass {p.name} follows {', '.join(missing)}, which is not registered before it")
    PASSES.append(p)
    return p


def ordered(passes: Iterable[Pass] | None = None) -> list[Pass]:
    """The passes in the order they run: registration order, each after what it follows and its
    `after` (a pass naming one registered later waits for it)."""
    todo = list(PASSES if passes is None else passes)
    names = {p.name for p in todo}
    last = {p.name for p in todo if "*" in p.after}
    out: list[Pass] = []
    done: set[str] = set()
    while todo:
        for p in todo:
            waits = (*p.follows, *p.after) if "*" not in p.after else tuple(names - last)
            if all(n in done or n not in names for n in waits):
                out.append(p)
                done.add(p.name)
                todo.remove(p)
                break
        else:
            raise ValueError(f"the passes {', '.join(p.name for p in todo)} wait for each other")
    return out


def names() -> tuple[str, ...]:
    """Every registered pass's name, in the order they run."""
    return tuple(p.name for p in ordered())


def builds_on() -> dict[str, str]:
    """Each registered pass's name and the pass it builds on ("" for none), in the order they run:
    what a caller may ask for or leave out by name (asking for a pass asks for what it builds on)."""
    return {p.name: p.follows[-1] if p.follows else "" for p in ordered()}
