"""The element-wise and row-wise passes' view of a kernel over the kernel model, and the views of a
file the rules and lifts read (the named kernel's, its explicit instantiations, spans and tokens).

Everything known about a kernel is agents/model.py's: its loops, accesses, accumulators, barriers,
atomics, shared memory, returns, locals, pointer aliases, thread indices, the first guard of its
body and the slopes of index expressions. A `KernelAnalysis` is that model seen by the passes over
one element or one row:

- the element or row a thread owns: the global index of dimension 0 that no statement changes
  (the model's `ThreadIndex`, global also where the block's count is a literal:
  `blockIdx.x * 256 + threadIdx.x`), or the variable of a grid-stride loop over the elements, and
  the guard that bounds it (the model's `Guard`: `if (i < n) {...}`, `if (i >= n) return;`, the loop);
- the kernel's own loops and accesses (a function it calls keeps its own), and the literals its
  indexing takes as a thread count;
- a classification: `elementwise` (a thread per element, every array read and written at an index
  that moves with the element one for one), `rowwise` (a thread per row, loops over the row) or
  `neither`, with the reasons.

`slope` tells how an index expression moves as the element variable moves (the model's
`KernelModel.slope`: through div and mod too, with the conditions under which it holds), which is
what the rewrites need to prove a vector access safe. Every span is bytes of the source, as the
model's are (`span_of`, `source_tokens` too): agents/syntax.py's `cut` gives the text of one.
Nothing is read with regular expressions, compiled or run.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from typing import Iterator

from kerntune.engine import cxx
from kerntune.engine.signature import KernelSignature, parse_kernels

from . import model
from .model import (EITHER, Access, Accumulator, Guard, KernelModel, Loop, Slope, Span, ThreadIndex,
                    function_declarator, function_name, id_of, identifiers, integer, parse_expression)

# ids a thread reads, by kind: CUDA fields and OpenCL functions (the model's dialect table, in this
# view's words)
KINDS = {"threadIdx": "local", "blockIdx": "group", "blockDim": "local_size", "gridDim": "groups",
         "global": "global", "global_size": "global_size"}
BARRIERS = EITHER.barriers | EITHER.warp_barriers
# OpenCL's half storage read and written as float: vload_half(i, p), vstore_half(v, i, p)
HALF_LOADS = EITHER.half_loads
HALF_STORES = EITHER.half_stores
EXP_FUNCTIONS = EITHER.exp
__all__ = ["KernelAnalysis", "KernelTreeError", "analyse", "classify", "slope", "index_slope", "inline",
           "tree_reductions", "thread_reads", "view", "syntax_nodes", "span_of", "source_tokens",
           "TemplateArgument", "ExplicitInstantiation", "explicit_instantiations", "KernelView", "kernel_view",
           "KINDS", "BARRIERS", "HALF_LOADS", "HALF_STORES", "EXP_FUNCTIONS",
           # the model's types, as the view's users read them
           "Access", "Accumulator", "Guard", "Loop", "Slope", "Span", "ThreadIndex"]


@dataclass(frozen=True)
class KernelAnalysis:
    """One kernel's model as the element-wise and row-wise passes see it; see the module's docstring."""

    name: str
    dialect: str
    signature: KernelSignature
    span: Span  # the function definition (from its return type, the kernel words included)
    body: Span  # the body's braces included
    thread_indices: tuple[ThreadIndex, ...] = ()
    element: str = ""  # the variable of the element or row a thread owns
    guard: Guard | None = None
    loops: tuple[Loop, ...] = ()  # the kernel's own loops, in order
    helper_loops: tuple[Loop, ...] = ()  # loops of the functions the kernel calls
    accesses: tuple[Access, ...] = ()
    accumulators: tuple[Accumulator, ...] = ()
    softmax_pairs: tuple[tuple[str, str], ...] = ()  # (max variable, sum-of-exp variable), online pairs too
    launch_dims: frozenset[int] = frozenset()  # dimensions of the launch the kernel reads
    fixed_threads: tuple[int, ...] = ()  # literals the indexing takes as a thread count
    fixed_spans: tuple[tuple[int, Span, int], ...] = ()  # each such literal, where it stands, its dimension
    barriers: bool = False
    shared: bool = False  # __shared__ or __local memory
    atomics: bool = False
    opaque: tuple[str, ...] = ()  # arrays used other than by subscript (casts, pointer arithmetic, calls)
    kind: str = "neither"  # "elementwise", "rowwise" or "neither"
    reasons: tuple[str, ...] = ()
    locals: dict[str, str] = field(default_factory=dict)  # single-assignment locals: name -> initialiser
    arg_types: dict[str, str] = field(default_factory=dict)  # pointer argument -> its element type as written
    returns: tuple[Span, ...] = ()  # the kernel's return statements
    changing: frozenset[str] = frozenset()  # locals assigned after their declaration (or declared bare)
    statements: tuple[Span, ...] = ()  # the top-level statements of its body
    stride_loop: int | None = None  # the grid-stride loop over the elements (an index into `loops`), if any
    name_span: Span = Span(0, 0)  # its name in the declaration
    shuffles: bool = False
    model: KernelModel | None = field(default=None, repr=False, compare=False)  # what this is a view of

    @property
    def owns(self) -> str:
        """In words: what one thread owns."""
        if self.kind == "elementwise":
            return f"one element, `{self.element}`"
        if self.kind == "rowwise":
            return f"one row, `{self.element}`"
        return "no one element or row"

    def arrays(self) -> dict[str, tuple[bool, bool]]:
        """Each array the kernel accesses: (read, written)."""
        return model.arrays_of(self.accesses)


class KernelTreeError(ValueError):
    """The source holds no kernel that can be read; the message is one line."""


# the API ---------------------------------------------------------------------------------------

def analyse(source: str, defines: dict[str, str] | None = None) -> list[KernelAnalysis]:
    """Every kernel of the source, analysed, in order."""
    return _File(source).kernels(defines)


def classify(source: str, entry: str | None = None) -> KernelAnalysis:
    """The analysis of the kernel named `entry` (or the only kernel of the source)."""
    kernels = analyse(source)
    if not kernels:
        raise KernelTreeError("no __global__ or __kernel function in the source")
    if entry is None:
        return kernels[0]
    base = entry.split("<")[0].split("::")[-1]
    for k in kernels:
        if k.name == base:
            return k
    raise KernelTreeError(f"no kernel named {entry} (the source has {', '.join(k.name for k in kernels)})")


def slope(analysis: KernelAnalysis, index: str, var: str | None = None) -> int | None:
    """How `index` moves when the owned variable (or `var`) moves by one: 0, 1 or None (the model's
    `Slope`)."""
    return index_slope(analysis, index, var).slope


def index_slope(analysis: KernelAnalysis, index: str, var: str | None = None) -> Slope:
    """`slope` with the conditions under which it holds; operands are inlined (locals replaced by
    their initialisers) so that they can be evaluated anywhere in the kernel. Thread ids move with
    the element a thread owns, not with a loop the thread runs."""
    var = var or analysis.element
    return analysis.model.slope(index, var, moving_ids=var == analysis.element)


def inline(analysis, expr: str, rename: dict[str, str] | None = None) -> str:
    """`expr` with the kernel's single-assignment locals (`analysis.locals`, of a KernelAnalysis or
    a KernelModel) replaced by their initialisers (in parentheses) and the names in `rename`
    renamed: an expression that can be evaluated anywhere."""
    return model.inline(analysis.locals, expr, rename)


def tree_reductions(analysis: KernelAnalysis) -> tuple[frozenset[str], frozenset[int]]:
    """What the kernel's halving loops (`for (s = BLOCK / 2; s > 0; s /= 2)`, a tree reduction,
    correct only when what it halves from is a power of two) start from: the names their start
    reads (its locals inlined) and the launch dimensions whose thread count it reads."""
    names: set[str] = set()
    dims: set[int] = set()
    for lp in analysis.loops:
        if not lp.halving:
            continue
        node = parse_expression(inline(analysis, lp.start))
        if node is None:
            continue
        names |= {cxx.text(n) for n in identifiers(node)}
        dims |= {d for kind, d in thread_reads(node, analysis.dialect) if kind == "local_size"}
    return frozenset(names), frozenset(dims)


def thread_reads(node, dialect: str = "") -> set[tuple[str, int]]:
    """The (kind, dimension) of every thread or block id an expression reads, in this view's words."""
    found = (id_of(n) for n in model.nodes(node)) if node is not None else ()
    return {(KINDS[kind], dim) for kind, dim in (f for f in found if f is not None)}


# the view ---------------------------------------------------------------------------------------

def view(m: KernelModel, sig: KernelSignature | None = None) -> KernelAnalysis:
    """The kernel model `m` as the element-wise and row-wise passes see it, classified."""
    pointers = m.pointers
    loops = tuple(_upward(lp) for lp in m.loops if lp.in_kernel)  # first in the model's order: same indices
    # a global index of one dimension, also where the block's count is a literal
    indices = tuple(replace(t, is_global=t.is_global or t.fixed is not None) for t in m.thread_indices)
    fixed = tuple(t.fixed for t in indices if t.fixed is not None)
    element = next((t.name for t in indices if t.is_global and t.reads[0][1] == 0 and t.name in m.locals), "")
    guard = m.guard if element and m.guard is not None and m.guard.var == element else None
    stride = None
    if not element:
        element, guard, stride = _grid_stride(m, loops, indices)
    pairs = [(a.against, a.var) if a.op == "sum" else (a.var, a.partner) for a in m.accumulators
             if a.op == "sum" and a.against or a.op == "online"]
    analysis = KernelAnalysis(
        m.name, m.dialect, sig or m.signature, m.kernel.span, m.kernel.body, indices, element, guard, loops,
        tuple(lp for lp in m.loops if not lp.in_kernel),
        tuple(x for x in m.accesses if x.function == m.name and x.array in pointers), m.accumulators,
        tuple(dict.fromkeys(pairs)), m.launch_dims, tuple(dict.fromkeys(v for v, _, _ in fixed)), fixed,
        bool(m.barriers), bool(m.shared), bool(m.atomics), m.opaque, locals=dict(m.locals),
        arg_types=dict(m.arg_types), returns=m.returns, changing=m.changing, statements=m.statements,
        stride_loop=stride, name_span=m.kernel.name_span, shuffles=bool(m.shuffles), model=m)
    kind, reasons = _classify(analysis)
    if m.parse_error:  # what the parser could not read may hide an access: no rewrite
        kind, reasons = "neither", [m.parse_error]
    return replace(analysis, kind=kind, reasons=tuple(reasons))


def _upward(lp: Loop) -> Loop:
    """A model's loop in this view's words: only `<`, `<=` and `!=` bound it."""
    up = lp.compare in ("<", "<=", "!=")
    return replace(lp, bound=lp.bound if up else "", inclusive=lp.inclusive and up)


def _grid_stride(m: KernelModel, loops: tuple[Loop, ...], indices: tuple[ThreadIndex, ...]) \
        -> tuple[str, Guard | None, int | None]:
    """A loop of the kernel's body over the elements by the whole grid's stride:
    `for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)`;
    (its variable, the loop as the guard, its index in `loops`) or ("", None, None)."""
    for index, lp in enumerate(loops):
        if lp.span not in m.statements or lp.kind != "for" or not lp.var or not lp.bound or lp.inclusive \
                or lp.role != "grid-stride":
            continue
        start = next((t for t in indices if t.name == lp.var and t.span.within(lp.span)), None)
        if start is None or not start.is_global:
            continue
        return lp.var, Guard(lp.var, lp.bound, "loop", lp.span), index
    return "", None, None


# the classification ----------------------------------------------------------------------------

def _classify(a: KernelAnalysis) -> tuple[str, list[str]]:
    reasons: list[str] = []
    if not a.element:
        return "neither", ["no variable holds a global index (blockIdx * blockDim + threadIdx, get_global_id)"]
    if a.barriers or a.shared or a.atomics or a.shuffles:
        what = [w for w, on in (("barriers", a.barriers), ("shared memory", a.shared), ("atomics", a.atomics),
                                ("shuffles", a.shuffles)) if on]
        return "neither", [f"threads cooperate ({', '.join(what)})"]
    if len(a.launch_dims) > 1:
        return "neither", [f"it reads launch dimensions {sorted(a.launch_dims)}"]
    others = [t for t in a.thread_indices if t.name != a.element]
    if others:
        return "neither", [f"`{others[0].name}` reads thread ids apart from `{a.element}`"]
    if a.opaque:
        return "neither", [f"`{a.opaque[0]}` is used other than by subscript (a cast, pointer arithmetic or a call)"]
    if not a.accesses:
        return "neither", ["it accesses no array argument"]
    in_loops = [x for x in a.accesses if x.loop is not None and x.loop != a.stride_loop]
    slopes = {(x.array, x.index): slope(a, x.index) for x in a.accesses}
    if not in_loops:
        bad = [x for x in a.accesses if slopes[(x.array, x.index)] not in (0, 1)]
        if bad:
            return "neither", [f"`{bad[0].array}[{bad[0].index}]` does not move one for one with `{a.element}`"]
        for arr, (read, written) in a.arrays().items():
            idx = {x.index for x in a.accesses if x.array == arr}
            if written and (len(idx) > 1 or any(slopes[(arr, i)] != 1 for i in idx)):
                return "neither", [f"`{arr}` is written at {len(idx)} indices, or at one that does not move "
                                   f"with `{a.element}`"]
        reasons.append(f"a thread per element `{a.element}`; every array is accessed at an index that moves "
                       "with it one for one (or not at all, for arrays only read)")
        if a.guard is None:
            reasons.append(f"no guard `if ({a.element} < n)` bounds the element")
        return "elementwise", reasons
    # a thread per row: loops over the row, arrays indexed by the row and the loop variable
    row_loops = [i for i, lp in enumerate(a.loops) if lp.var and lp.bound and not lp.strided_by_threads
                 and slope(a, lp.bound) == 0]
    if not row_loops:
        return "neither", ["its loops are not loops over a row (a bound that does not move with the thread)"]
    for x in in_loops:
        lp = a.loops[x.loop]
        if not lp.var:
            return "neither", [f"`{x.array}[{x.index}]` is in a loop of unknown shape"]
        if slope(a, x.index, lp.var) != 1 and slope(a, x.index, lp.var) != 0:
            return "neither", [f"`{x.array}[{x.index}]` does not move one for one with `{lp.var}`"]
    return "rowwise", [f"a thread per row `{a.element}`, {len(row_loops)} loop(s) over the row"]


# reading a file --------------------------------------------------------------------------------

class _File:
    def __init__(self, source: str):
        self.source = source
        self.raw = source.encode("utf-8")
        self.blanked, self.dialect, self.marks = cxx.blank(self.raw)
        self.root = cxx.parser().parse(self.blanked).root_node

    def functions(self) -> Iterator:
        stack = [self.root]
        out = []
        while stack:
            n = stack.pop()
            if n.type == "function_definition":
                out.append(n)
                continue
            stack.extend(n.children)
        return sorted(out, key=lambda n: n.start_byte)

    def is_kernel(self, fn) -> bool:
        body = fn.child_by_field_name("body")
        start = self.marks.head(fn)
        return body is not None and any(start <= o < body.start_byte for o in self.marks.kernels)

    def kernels(self, defines: dict[str, str] | None = None) -> list[KernelAnalysis]:
        """Each kernel of the file with a signature, its model seen as this module's view."""
        signatures = {s.name: s for s in parse_kernels(self.source, defines)}
        out = []
        for fn in self.functions():
            if not self.is_kernel(fn):
                continue
            sig = signatures.get(function_name(fn))
            if sig is None:
                continue
            try:
                m = model.build(self.source, sig.name, fn.start_byte)
            except model.ModelError:
                continue
            out.append(view(m, sig))
        return out


# the source's syntax, for the lifts ------------------------------------------------------------

@functools.lru_cache(maxsize=8)
def _file(source: str) -> "_File":
    return _File(source)


def syntax_nodes(source: str, types: tuple[str, ...]) -> list:
    """The nodes of the given types in the source's tree (CUDA and OpenCL words blanked), in
    order, each with a function giving a node's text."""
    return list(_syntax_nodes(source, tuple(types)))


@functools.lru_cache(maxsize=4096)
def _syntax_nodes(source: str, types: tuple[str, ...]) -> tuple:
    # the passes read the same small expressions again and again (each a parse of its own)
    f = _file(source)
    out = []
    stack = [f.root]
    while stack:
        n = stack.pop()
        if n.type in types:
            out.append(n)
        stack.extend(reversed(n.children))
    return tuple((n, cxx.text) for n in sorted(out, key=lambda n: n.start_byte))


def span_of(source: str, node, f: "_File | None" = None) -> Span:
    """A node's span in bytes of `source` (a preprocessor line's end of line left out)."""
    f = f or _file(source)
    end = node.end_byte
    while end > node.start_byte and f.raw[end - 1:end] in (b"\n", b"\r"):
        end -= 1
    return Span(node.start_byte, end)


def source_tokens(source: str) -> list[tuple[str, Span]]:
    """The source's tokens as written (CUDA and OpenCL words included), comments and string
    literals left out, with their spans in bytes."""
    f = _file(source)
    root = cxx.parser().parse(f.raw).root_node
    return [(cxx.text(leaf), Span(leaf.start_byte, leaf.end_byte)) for leaf in cxx.leaves(root)]


@dataclass(frozen=True)
class TemplateArgument:
    """An integer literal an explicit instantiation gives a non-type template parameter."""

    param: str  # the template parameter's name
    ctype: str  # its declared type, as written
    value: int
    span: Span  # the literal, its suffix included


@dataclass(frozen=True)
class ExplicitInstantiation:
    """`template __global__ void k<float, 128>(...);`: the kernel it instantiates and the literals
    it gives the kernel's non-type template parameters."""

    kernel: str
    text: str  # its template arguments, as written: "<float, 128>"
    span: Span  # the whole declaration
    literals: tuple[TemplateArgument, ...] = ()


def explicit_instantiations(source: str, kernel: str) -> list[ExplicitInstantiation]:
    """The explicit instantiations of the template kernel named `kernel`, in order, read from the
    source's syntax tree; none when the kernel is not a template."""
    f = _file(source)
    params: list[tuple[str, str]] | None = None  # (name, type as written; "" for a type parameter)
    for node, _ in syntax_nodes(source, ("template_declaration",)):
        fn = next((c for c in node.named_children if c.type == "function_definition"), None)
        if fn is None or function_name(fn) != kernel or not f.is_kernel(fn):
            continue
        plist = node.child_by_field_name("parameters")
        params = []
        for p in plist.named_children if plist is not None else []:
            if p.type in ("parameter_declaration", "optional_parameter_declaration"):
                decl = p.child_by_field_name("declarator")
                params.append((cxx.text(decl) if decl is not None and decl.type == "identifier" else "",
                               " ".join(cxx.text(p.child_by_field_name("type")).split())))
            elif p.type != "comment":
                params.append(("", ""))
        break
    if params is None:
        return []
    out = []
    for node, _ in syntax_nodes(source, ("template_instantiation",)):
        d = function_declarator(node)
        target = d.child_by_field_name("declarator") if d is not None else None
        while target is not None and target.type == "qualified_identifier":
            target = target.child_by_field_name("name")
        if target is None or target.type != "template_function" or cxx.callee(target) != kernel:
            continue
        targs = target.child_by_field_name("arguments")
        args = [c for c in targs.named_children if c.type != "comment"]
        literals = []
        for (name, ctype), arg in zip(params, args):
            value = integer(cxx.text(arg)) if arg.type == "number_literal" else None
            if name and ctype and value is not None:
                literals.append(TemplateArgument(name, ctype, value, span_of(source, arg, f)))
        out.append(ExplicitInstantiation(kernel, " ".join(cxx.text(targs).split()), span_of(source, node, f),
                                         tuple(literals)))
    return out


# the named kernel's view of a file ---------------------------------------------------------------

@dataclass(frozen=True)
class KernelView:
    """A source as the rules read it for one kernel: every function that is neither the kernel nor
    one it calls (directly or through other functions or macros) is hidden behind a comment marker
    that keeps its lines, so other kernels of the file (variants of the same operation, as code
    bases publish them) never decide a rewrite or a parameter. `restore` puts the hidden text back
    into what the rules wrote from the view."""

    text: str
    hidden: tuple[tuple[str, str], ...] = ()  # (marker as it stands in `text`, the text it hides)

    def restore(self, text: str) -> str:
        for marker, original in self.hidden:
            if text.count(marker) != 1:
                raise KernelTreeError("a rewrite moved text between the kernel's functions")
            text = text.replace(marker, original)
        return text


def kernel_view(source: str, entry: str) -> KernelView:
    """The view of `source` for the kernel named `entry` (`ns::k<float>` names `k`); the source as
    it is when it holds nothing else to hide, or no kernel of that name."""
    raw = source.encode("utf-8")
    blanked, _, marks = cxx.blank(raw)
    root = cxx.parser().parse(blanked).root_node
    f = _File.__new__(_File)
    f.root, f.marks = root, marks
    fns = [fn for fn in f.functions() if not _in_class(fn)]
    by_name: dict[str, list] = {}
    for fn in fns:
        by_name.setdefault(function_name(fn), []).append(fn)
    base = entry.split("<")[0].split("::")[-1].strip()
    if base not in by_name:
        return KernelView(source)
    macros: dict[str, set[str]] = {}
    for node in _walk_types(root, ("preproc_def", "preproc_function_def")):
        name = node.child_by_field_name("name")
        value = node.child_by_field_name("value")
        if name is not None and value is not None:
            macros.setdefault(cxx.text(name), set()).update(w for w, _ in source_tokens(cxx.text(value)))
    kept, todo, seen = set(), [base], set()
    while todo:  # the kernel, what it names, and what that names in turn
        word = todo.pop()
        if word in seen:
            continue
        seen.add(word)
        for fn in by_name.get(word, ()):
            kept.add(fn.start_byte)
            todo += [cxx.text(leaf) for leaf in cxx.leaves(_outer(fn)) if leaf.type in _NAME_TYPES]
        todo += list(macros.get(word, ()))
    spans = []
    for fn in fns:
        if fn.start_byte in kept:
            continue
        node = _outer(fn)
        start, end = marks.head(node), node.end_byte
        while start < end and raw[start:start + 1].isspace():
            start += 1
        spans.append((start, end))
    if not spans:
        return KernelView(source)
    out, hidden, at = [], [], 0
    for i, (start, end) in enumerate(sorted(spans)):
        if start < at:
            continue  # inside a span hidden already
        text = raw[start:end].decode("utf-8")
        marker = f"/*kerntune:hidden:{i}*/" + "\n" * text.count("\n")
        out += [raw[at:start].decode("utf-8"), marker]
        hidden.append((marker, text))
        at = end
    out.append(raw[at:].decode("utf-8"))
    return KernelView("".join(out), tuple(hidden))


_NAME_TYPES = ("identifier", "field_identifier", "type_identifier", "namespace_identifier")


def _in_class(fn) -> bool:
    """Whether a function is a class's member, written in its body (it stays with its class)."""
    p = fn.parent
    while p is not None:
        if p.type == "field_declaration_list":
            return True
        p = p.parent
    return False


def _outer(fn):
    """A function definition with the template headers and the `extern "C"` written before it."""
    node = fn
    while node.parent is not None and node.parent.type in ("template_declaration", "linkage_specification") \
            and node.parent.named_children and node.parent.named_children[-1] == node:
        node = node.parent
    return node





def _walk_types(root, types: tuple[str, ...]) -> Iterator:
    stack = [root]
    while stack:
        n = stack.pop()
        if n.type in types:
            yield n
        stack.extend(n.children)
