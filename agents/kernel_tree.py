"""The element-wise and row-wise passes' view of a kernel: what each thread owns, over the kernel model.

Loops, accesses, accumulators, barriers, atomics and returns are agents/model.py's: the kernel
model reads the named kernel and what it calls once, and this module takes its facts of the
kernel's own body (its `Loop`, `Access` and `Accumulator`, the one dialect table). What is read
here, from the same syntax tree (tree-sitter's C++ grammar with the CUDA and OpenCL words blanked
as engine/cxx.py does; nothing read with regular expressions, nothing compiled or run), is what only
the passes over one element or one row ask:

- the thread and block ids each local is made from (`blockIdx.x * blockDim.x + threadIdx.x`,
  `get_global_id(0)`, ...) and the launch dimensions read, and the literals the indexing uses as a
  thread count (`blockIdx.x * 256 + threadIdx.x` assumes 256 threads per block);
- the variable holding the element or row a thread owns, and the guard that bounds it
  (`if (i < n) {...}`, `if (i >= n) return;`, or a grid-stride loop over the elements);
- the arrays used other than by subscript (casts, pointer arithmetic, an element's address taken),
  whose accesses no index tells;
- the softmax pair (a max, then a sum of `exp(... - max)`, in any loops);
- a classification: `elementwise` (a thread per element, every array read and written at an index
  that moves with the element one for one), `rowwise` (a thread per row, loops over the row) or
  `neither`, with the reasons.

`slope` tells how an index expression moves as the element variable moves (through div and mod
too, with the conditions under which it holds), which is what the rewrites need to prove a vector
access safe. Every span is bytes of the source, as the model's are (`span_of`, `source_tokens`
too): agents/syntax.py's `cut` gives the text of one.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from typing import Iterator

from kerntune.engine import cxx
from kerntune.engine.signature import KernelSignature, parse_kernels

from . import model
from .model import (EITHER, Access, Accumulator, Loop, declarator_name, function_name, integer, parse_expression,
                    unwrap)
from .model import Span, ThreadIndex
from .syntax import names

# ids a thread reads, by kind: CUDA fields and OpenCL functions (the model's dialect table, in this
# analysis' words)
KINDS = {"threadIdx": "local", "blockIdx": "group", "blockDim": "local_size", "gridDim": "groups",
         "global": "global", "global_size": "global_size"}
CUDA_IDS = {word: KINDS[kind] for word, kind in model.CUDA_IDS.items()}
OPENCL_IDS = {word: KINDS[kind] for word, kind in model.OPENCL_IDS.items()}
DIMS = {x: d for d, x in enumerate(model.DIMS)}
BARRIERS = EITHER.barriers | EITHER.warp_barriers
# loads and stores with a cache hint, on an element's address: read (or written) as the element
LOAD_INTRINSICS = EITHER.loads
STORE_INTRINSICS = EITHER.stores
# OpenCL's half storage read and written as float: vload_half(i, p), vstore_half(v, i, p)
HALF_LOADS = EITHER.half_loads
HALF_STORES = EITHER.half_stores
EXP_FUNCTIONS = EITHER.exp


@dataclass(frozen=True)
class Guard:
    """The bound on the owned element or row: `if (var < bound) {...}` or `if (var >= bound) return;`."""

    var: str
    bound: str
    form: str  # "if", "return" or "loop" (a grid-stride loop over the elements)
    span: Span  # the if statement (or the loop)


@dataclass(frozen=True)
class KernelAnalysis:
    """What one kernel does, read from its syntax tree; see the module's docstring."""

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
    softmax_pairs: tuple[tuple[str, str], ...] = ()  # (max variable, sum-of-exp variable)
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
        out: dict[str, tuple[bool, bool]] = {}
        for a in self.accesses:
            r, w = out.get(a.array, (False, False))
            out[a.array] = (r or a.read, w or a.write)
        return out


class KernelTreeError(ValueError):
    """The source holds no kernel that can be read; the message is one line."""


# the API ---------------------------------------------------------------------------------------

def analyse(source: str, defines: dict[str, str] | None = None) -> list[KernelAnalysis]:
    """Every kernel of the source, analysed, in order."""
    return _File(source, defines).kernels()


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
    """How `index` moves when the owned variable moves by one: 0 (it does not), 1 (one for one)
    or None (otherwise, or unknown); div and mod by values that do not move count as moving one
    for one within a stretch that crosses no multiple of the divisor (see `Slope.conditions`)."""
    return index_slope(analysis, index, var).slope


@dataclass(frozen=True)
class Slope:
    """An index's slope, and the `(operand, divisor)` pairs of the div and mod it goes through:
    the slope holds over a stretch of elements whose operand crosses no multiple of the divisor."""

    slope: int | None
    conditions: tuple[tuple[str, str], ...] = ()


def index_slope(analysis: KernelAnalysis, index: str, var: str | None = None) -> Slope:
    """`slope` with the conditions under which it holds; operands are inlined (locals replaced by
    their initialisers) so that they can be evaluated anywhere in the kernel."""
    node = parse_expression(index)
    if node is None:
        return Slope(None)
    var = var or analysis.element
    # thread ids move with the element a thread owns, not with a loop the thread runs
    # an array no statement of the kernel writes holds its values: read where the index stays, it stays
    fixed = frozenset(x.array for x in analysis.accesses) - {x.array for x in analysis.accesses if x.write}
    s = _Slopes(analysis.locals, var, ids_move=var == analysis.element, changing=analysis.changing, fixed=fixed)
    value = s.of(node)
    return Slope(value, tuple(dict.fromkeys(s.conditions)))


def inline(analysis: KernelAnalysis, expr: str, rename: dict[str, str] | None = None) -> str:
    """`expr` with the kernel's single-assignment locals replaced by their initialisers (in
    parentheses) and the names in `rename` renamed: an expression that can be evaluated anywhere."""
    node = parse_expression(expr)
    if node is None:
        return expr
    return _inline(node, analysis.locals, rename or {}, 0)



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
        names |= {cxx.text(n) for n in _identifiers(node)}
        dims |= {d for kind, d in thread_reads(node, analysis.dialect) if kind == "local_size"}
    return frozenset(names), frozenset(dims)

# reading a file --------------------------------------------------------------------------------

class _File:
    def __init__(self, source: str, defines: dict[str, str] | None):
        self.source = source
        self.raw = source.encode("utf-8")
        self.blanked, self.dialect, self.marks = cxx.blank(self.raw)
        self.root = cxx.parser().parse(self.blanked).root_node
        self.signatures = {s.name: s for s in parse_kernels(source, defines)}
        raw_root = cxx.parser().parse(self.raw).root_node
        self.shared_marks = sorted(leaf.start_byte for leaf in cxx.leaves(raw_root)
                                   if cxx.text(leaf) in ("__shared__", "__local", "local" if self.dialect == "opencl" else ""))

    def span(self, start: int, end: int) -> Span:
        return Span(start, end)

    def node_span(self, node) -> Span:
        return Span(node.start_byte, node.end_byte)

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

    def kernels(self) -> list[KernelAnalysis]:
        out = []
        for fn in self.functions():
            if not self.is_kernel(fn):
                continue
            name = function_name(fn)
            sig = self.signatures.get(name)
            if sig is None:
                continue
            try:
                m = model.build(self.source, name, fn.start_byte)
            except model.ModelError:
                continue
            out.append(_Body(self, fn, m).analysis(sig))
        return out




def thread_reads(node, dialect: str) -> set[tuple[str, int]]:
    """The (kind, dimension) of every thread or block id an expression reads."""
    out: set[tuple[str, int]] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if n.type == "field_expression":
            arg, fld = n.child_by_field_name("argument"), n.child_by_field_name("field")
            if arg is not None and arg.type == "identifier" and cxx.text(arg) in CUDA_IDS and cxx.text(fld) in DIMS:
                out.add((CUDA_IDS[cxx.text(arg)], DIMS[cxx.text(fld)]))
                continue
        if n.type == "call_expression":
            name = cxx.callee(n.child_by_field_name("function"))
            if name in OPENCL_IDS:
                args = n.child_by_field_name("arguments").named_children
                dim = int(cxx.text(args[0])) if args and cxx.text(args[0]).isdigit() else 0
                out.add((OPENCL_IDS[name], dim))
                continue
        stack.extend(n.children)
    return out


def _global_index(node, dialect: str) -> tuple[bool, int | None, tuple[int, ...]]:
    """Whether an initialiser is a global index in one dimension; its dimension; the literals it
    takes as the block's thread count (`blockIdx.x * 256 + threadIdx.x`)."""
    node = unwrap(node)
    if node is None:
        return False, None, ()
    if node.type == "call_expression" and cxx.callee(node.child_by_field_name("function")) == "get_global_id":
        (kind, dim), = thread_reads(node, dialect)
        return True, dim, ()
    if node.type != "binary_expression" or cxx.text(node.child_by_field_name("operator")) != "+":
        return False, None, ()
    left, right = unwrap(node.child_by_field_name("left")), unwrap(node.child_by_field_name("right"))
    for prod, local in ((left, right), (right, left)):
        if prod is None or local is None:
            continue
        lr = thread_reads(local, dialect)
        if len(lr) != 1 or next(iter(lr))[0] != "local" or unwrap(local) is None:
            continue
        dim = next(iter(lr))[1]
        if prod.type != "binary_expression" or cxx.text(prod.child_by_field_name("operator")) != "*":
            continue
        a, b = unwrap(prod.child_by_field_name("left")), unwrap(prod.child_by_field_name("right"))
        if a is None or b is None:
            continue
        ra, rb = thread_reads(a, dialect), thread_reads(b, dialect)
        for g, s, rg, rs in ((a, b, ra, rb), (b, a, rb, ra)):
            if rg == {("group", dim)}:
                if rs == {("local_size", dim)}:
                    return True, dim, ()
                if not rs and s.type == "number_literal" and cxx.text(s).rstrip("uUlL").isdigit():
                    return True, dim, ((int(cxx.text(s).rstrip("uUlL")), s),)
    return False, None, ()


class _Body:
    """The element-wise and row-wise reading of one kernel over its model: the loops, accesses,
    accumulators, barriers, atomics and returns are the model's (agents/model.py, one walk of the
    tree); what is read here is what only these passes ask: the kernel's locals and the local
    pointers into its arguments, the element a thread owns and its guard, the literals the indexing
    takes as a thread count, and the arrays used other than by subscript."""

    def __init__(self, f: _File, fn, m: model.KernelModel):
        self.f = f
        self.fn = fn
        self.m = m
        self.name = function_name(fn)
        self.body = fn.child_by_field_name("body")
        self.pointers: set[str] = set(m.pointers)
        self.ptr_alias: dict[str, tuple[str, str]] = {}  # local pointer -> (argument, offset)
        self.cast_alias: dict[str, str] = {}  # local pointer of another type into an argument -> it
        self.assigned: dict[str, int] = {}  # name -> assignments after its declaration
        self.inits: dict[str, object] = {}  # local name -> initialiser node
        self.declared: set[str] = set()  # every local the body declares
        self._declarations(self.body)
        # the model's facts of the kernel's own body; its loops come first in the model's order, so
        # an access's or accumulator's loop indexes these too
        self.loops = [self._loop(lp) for lp in m.loops if lp.in_kernel]
        by_span = {(n.start_byte, n.end_byte): n for n in _walk_types(self.body, _LOOP_TYPES)}
        self.loop_nodes = [by_span.get((lp.span.start, lp.span.end)) for lp in m.loops if lp.in_kernel]
        self.helper_loops = tuple(self._loop(lp) for lp in m.loops if not lp.in_kernel)
        # `*(p + i)` and `*q` (q a local pointer into an argument) are the element accesses they name
        self.accesses = [x for x in m.accesses if x.function == m.name and x.array in self.pointers]
        self.derefs = {x.span.start for x in self.accesses if x.deref}
        self.accumulators = [replace(a, init=cxx.text(self.inits[a.var]) if a.var in self.inits else "")
                             for a in m.accumulators]
        self.returns = list(m.returns)
        self.barriers = any(b.function == m.name for b in m.barriers)
        self.atomics = any(c.function == m.name for c in m.atomics)

    def _loop(self, lp: Loop) -> Loop:
        """A model's loop in this reading's words: only `<`, `<=` and `!=` bound it."""
        up = lp.compare in ("<", "<=", "!=")
        trip = lp.trip
        if lp.compare == "!=" and trip is None:
            s, b, st = integer(lp.start), integer(lp.bound), integer(lp.step)
            if s is not None and b is not None and st:
                trip = max(0, (b - s + st - 1) // st)
        return replace(lp, bound=lp.bound if up else "", inclusive=lp.inclusive and up, trip=trip)

    # locals and assignments ----------------------------------------------------------------
    def _declarations(self, body) -> None:
        stack = [body]
        while stack:
            n = stack.pop()
            if n.type in ("declaration", "for_range_loop"):
                for d in n.children_by_field_name("declarator"):
                    name, _ = declarator_name(d)
                    if name:
                        self.declared.add(name)
            if n.type == "init_declarator":
                name_node = n.child_by_field_name("declarator")
                value = n.child_by_field_name("value")
                pointer = name_node is not None and name_node.type == "pointer_declarator"
                while name_node is not None and name_node.type not in ("identifier",):
                    name_node = name_node.child_by_field_name("declarator")
                if name_node is not None and value is not None:
                    name = cxx.text(name_node)
                    if name in self.inits:
                        self.assigned[name] = self.assigned.get(name, 0) + 1
                    self.inits[name] = value
                    if pointer:
                        root, offset = self._pointer_root(value)
                        if root is not None:
                            self.ptr_alias[name] = (root, offset)
                        else:
                            root = self._cast_root(value)
                            if root is not None:
                                self.cast_alias[name] = root
            elif n.type == "assignment_expression":
                left = unwrap(n.child_by_field_name("left"))
                if left is not None and left.type == "identifier":
                    self.assigned[cxx.text(left)] = self.assigned.get(cxx.text(left), 0) + 1
            elif n.type == "update_expression":
                arg = unwrap(n.child_by_field_name("argument"))
                if arg is not None and arg.type == "identifier":
                    self.assigned[cxx.text(arg)] = self.assigned.get(cxx.text(arg), 0) + 1
            stack.extend(n.children)

    def _pointer_root(self, value) -> tuple[str | None, str]:
        v = unwrap(value)
        if v is None:
            return None, ""
        if v.type == "identifier":
            name = cxx.text(v)
            if name in self.pointers:
                return name, "0"
            if name in self.ptr_alias:
                return self.ptr_alias[name]
            return None, ""
        if v.type == "binary_expression" and cxx.text(v.child_by_field_name("operator")) == "+":
            left, right = v.child_by_field_name("left"), v.child_by_field_name("right")
            root, off = self._pointer_root(left)
            if root is not None:
                return root, _plus(off, cxx.text(right))
            root, off = self._pointer_root(right)
            if root is not None:
                return root, _plus(off, cxx.text(left))
        return None, ""

    def _cast_root(self, value) -> str | None:
        """The argument a pointer cast to another type points into (`reinterpret_cast<pack8 *>(x + i)`)."""
        stack = [value]
        while stack:
            n = stack.pop()
            if n.type == "identifier":
                name = cxx.text(n)
                if name in self.pointers:
                    return name
                if name in self.ptr_alias:
                    return self.ptr_alias[name][0]
                if name in self.cast_alias:
                    return self.cast_alias[name]
            stack.extend(n.children)
        return None

    def single_locals(self) -> dict[str, object]:
        return {n: v for n, v in self.inits.items() if not self.assigned.get(n)}

    # the kernel's analysis -------------------------------------------------------------------
    def analysis(self, sig: KernelSignature) -> KernelAnalysis:
        f = self.f
        locals_ = self.single_locals()
        indices = []
        fixed: list = []
        for name, value in self.inits.items():
            reads = thread_reads(value, f.dialect)
            if not reads:
                continue
            is_global, dim, literal = _global_index(value, f.dialect)
            fixed += [(v, f.node_span(node), dim) for v, node in literal]
            decl = value.parent.parent if value.parent is not None else value
            # the model's ThreadIndex, global also where the block's count is a literal
            ids = {model.id_of(n) for n in model.nodes(value)} - {None}
            indices.append(ThreadIndex(name, cxx.text(value), tuple(sorted(ids)), is_global, f.node_span(decl)))
        dims = {d for d in range(3) if any(d == dim for _, dim in thread_reads(self.body, f.dialect))}
        shared = any(self.f.marks.head(self.fn) <= o < self.fn.end_byte for o in f.shared_marks)
        element = next((t.name for t in indices if t.is_global and t.reads[0][1] == 0 and
                        not self.assigned.get(t.name)), "")
        guard = self._guard(element) if element else None
        stride = None
        if not element:
            element, guard, stride = self._grid_stride()
        opaque = self._opaque()
        pairs = []
        for m in self.accumulators:
            if m.op != "max":
                continue
            for s in self.accumulators:
                if s.op == "sum" and _exp_of(self._node_at(s.span), m.var, self.inits):
                    pairs.append((m.var, s.var))
        analysis = KernelAnalysis(
            sig.name, f.dialect, sig, f.span(self._start(), self.fn.end_byte), f.node_span(self.body),
            tuple(indices), element, guard, tuple(self.loops), self.helper_loops, tuple(self.accesses),
            tuple(self.accumulators), tuple(dict.fromkeys(pairs)), frozenset(dims), tuple(dict.fromkeys(v for v, _, _ in fixed)), tuple(fixed),
            self.barriers, shared, self.atomics, opaque,
            locals={n: cxx.text(v) for n, v in locals_.items()}, arg_types=self._arg_types(),
            returns=tuple(self.returns), changing=frozenset(self.declared - set(locals_)),
            statements=tuple(f.node_span(c) for c in self.body.named_children if c.type != "comment"),
            name_span=self._name_span(), stride_loop=stride)
        kind, reasons = _classify(analysis)
        if self.fn.has_error:  # what the parser could not read may hide an access: no rewrite
            bad = cxx.first_error(self.fn)
            line = (bad.start_point[0] + 1) if bad is not None else self.fn.start_point[0] + 1
            kind, reasons = "neither", [f"the parser could not read line {line} of it"]
        return KernelAnalysis(**{**analysis.__dict__, "kind": kind, "reasons": tuple(reasons)})

    def _start(self) -> int:
        """Where the definition starts in the source as written: its first kernel word."""
        start = self.f.marks.head(self.fn)
        while start < self.fn.start_byte and self.f.raw[start:start + 1].isspace():
            start += 1
        return start

    def _name_span(self) -> Span:
        d = self.fn.child_by_field_name("declarator")
        while d is not None and d.type != "function_declarator":
            d = d.child_by_field_name("declarator")
        name = d.child_by_field_name("declarator") if d is not None else None
        return self.f.node_span(name) if name is not None else Span(0, 0)

    def _arg_types(self) -> dict[str, str]:
        """Each pointer argument's element type as written, qualifiers left out (`floatX`, `T`)."""
        out = {}
        d = self.fn.child_by_field_name("declarator")
        while d is not None and d.type != "function_declarator":
            d = d.child_by_field_name("declarator")
        params = d.child_by_field_name("parameters") if d is not None else None
        for p in params.named_children if params is not None else []:
            if p.type != "parameter_declaration":
                continue
            name, pointer = declarator_name(p.child_by_field_name("declarator"))
            if pointer and name:
                words = [w for w in cxx.text(p.child_by_field_name("type")).split()
                         if w not in ("const", "volatile", "__restrict__", "restrict", "__restrict")]
                out[name] = " ".join(words)
        return out

    def _opaque(self) -> tuple[str, ...]:
        """Pointer arguments (or local pointers into them) used other than as `p[index]` or in the
        initialiser of a local pointer: accesses this analysis cannot see."""
        names = self.pointers | set(self.ptr_alias)
        escaped, half_args = self._escaped()
        out = [root for root in self.cast_alias.values()] + escaped
        stack = [self.body]
        while stack:
            n = stack.pop()
            if n.type == "identifier" and cxx.text(n) in names:
                parent = n.parent
                ok = parent is not None and parent.type == "subscript_expression" and \
                    parent.child_by_field_name("argument") == n or n.id in half_args or self._dereferenced(n)
                decl = n
                while decl is not None and decl.type not in ("init_declarator", "compound_statement"):
                    decl = decl.parent
                if decl is not None and decl.type == "init_declarator":
                    target = decl.child_by_field_name("declarator")
                    ok = ok or (target is not None and target.type == "pointer_declarator" and
                                cxx.text(target).lstrip("*").strip().split()[-1] in self.ptr_alias)
                if not ok:
                    root = self.ptr_alias.get(cxx.text(n), (cxx.text(n), ""))[0]
                    out.append(root)
                continue
            stack.extend(n.children)
        return tuple(dict.fromkeys(out))

    def _dereferenced(self, n) -> bool:
        """Whether the pointer `n` is dereferenced as an access the model read: `*q`, `*(p + i)`."""
        up = n.parent
        while up is not None and up.type == "parenthesized_expression":
            up = up.parent
        if up is not None and up.type == "binary_expression" and cxx.text(up.child_by_field_name("operator")) == "+" \
                and unwrap(up.child_by_field_name("left")) == n:
            up = up.parent
            while up is not None and up.type == "parenthesized_expression":
                up = up.parent
        return up is not None and up.type == "pointer_expression" and \
            cxx.text(up.child_by_field_name("operator")) == "*" and self.f.node_span(up).start in self.derefs

    def _escaped(self) -> tuple[list[str], set[int]]:
        """The arguments whose element's address is taken (`&p[i]`, but for a cache-hint
        intrinsic), in order; and the nodes naming the array of a vload_half/vstore_half call the
        model reads as an access."""
        escaped: list[str] = []
        half_args: set[int] = set()
        for n in model.nodes(self.body):
            if n.type == "call_expression":
                name = cxx.callee(n.child_by_field_name("function"))
                if name in HALF_LOADS | HALF_STORES:
                    args = [c for c in n.child_by_field_name("arguments").named_children if c.type != "comment"]
                    if len(args) == (2 if name in HALF_LOADS else 3) and args[-1].type == "identifier" and \
                            self.ptr_alias.get(cxx.text(args[-1]), (cxx.text(args[-1]), ""))[0] in self.pointers:
                        half_args.add(args[-1].id)
            if n.type != "subscript_expression":
                continue
            arr = unwrap(n.child_by_field_name("argument"))
            idx_list = n.child_by_field_name("indices") or n.child_by_field_name("index")
            if arr is None or idx_list is None or arr.type != "identifier":
                continue
            inner = [c for c in idx_list.named_children if c.type != "comment"] if idx_list.type == \
                "subscript_argument_list" else [idx_list]
            name = self.ptr_alias.get(cxx.text(arr), (cxx.text(arr), ""))[0]
            if len(inner) != 1 or name not in self.pointers:
                continue
            parent = n.parent
            while parent is not None and parent.type == "parenthesized_expression":
                parent = parent.parent
            if parent is not None and parent.type == "pointer_expression" and \
                    cxx.text(parent.child_by_field_name("operator")) == "&" and _intrinsic(parent)[0] is None:
                escaped.append(name)
        return escaped, half_args

    def _node_at(self, span: Span):
        stack = [self.body]
        while stack:
            n = stack.pop()
            if self.f.node_span(n) == span:
                return n
            stack.extend(n.children)
        return None

    def _grid_stride(self) -> tuple[str, Guard | None, int | None]:
        """A top-level loop over the elements by the whole grid's stride:
        `for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)`;
        (its variable, the loop as the guard, its index in `loops`) or ("", None, None)."""
        for stmt in self.body.named_children:
            if stmt.type != "for_statement":
                continue
            index = next((k for k, n in enumerate(self.loop_nodes) if n.id == stmt.id), None)
            lp = self.loops[index] if index is not None else None
            if lp is None or not lp.var or not lp.bound or lp.inclusive or not lp.strided_by_threads:
                continue
            value = self.inits.get(lp.var)
            if value is None or not _global_index(value, self.f.dialect)[0]:
                continue
            step = self.loop_nodes[index].child_by_field_name("update")
            reads = {k for k, _ in thread_reads(step, self.f.dialect)} if step is not None else set()
            if reads not in ({"global_size"}, {"local_size", "groups"}):
                continue
            return lp.var, Guard(lp.var, lp.bound, "loop", lp.span), index
        return "", None, None

    def _guard(self, var: str) -> Guard | None:
        for stmt in self.body.named_children:
            if stmt.type != "if_statement":
                continue
            cond = unwrap(stmt.child_by_field_name("condition"))
            if cond is None or cond.type == "condition_clause":
                named = [c for c in (cond.named_children if cond is not None else []) if c.type != "comment"]
                cond = unwrap(named[0]) if len(named) == 1 else None
            if cond is None or cond.type != "binary_expression":
                return None
            op = cxx.text(cond.child_by_field_name("operator"))
            left, right = unwrap(cond.child_by_field_name("left")), unwrap(cond.child_by_field_name("right"))
            if left is None or right is None:
                return None
            if cxx.text(right) == var:  # `n > i` reads as `i < n`
                left, right = right, left
                op = {">": "<", ">=": "<=", "<": ">", "<=": ">="}.get(op, op)
            if cxx.text(left) != var:
                return None
            then = stmt.child_by_field_name("consequence")
            alt = stmt.child_by_field_name("alternative")
            if op == "<" and alt is None:
                return Guard(var, cxx.text(right), "if", self.f.node_span(stmt))
            if op == ">=" and alt is None and _returns(then):
                return Guard(var, cxx.text(right), "return", self.f.node_span(stmt))
            return None
        return None


def _intrinsic(address) -> tuple[object | None, object | None]:
    """(the call, a store's value node) when `&x[i]` is the address a cache-hint intrinsic loads
    from or stores to; (None, None) otherwise."""
    args = address.parent
    call = args.parent if args is not None and args.type == "argument_list" else None
    if call is None or call.type != "call_expression":
        return None, None
    name = cxx.callee(call.child_by_field_name("function"))
    named = [c for c in args.named_children if c.type != "comment"]
    if name in LOAD_INTRINSICS and len(named) == 1:
        return call, None
    if name in STORE_INTRINSICS and len(named) == 2 and named[0].id == address.id:
        return call, named[1]
    return None, None


def _returns(node) -> bool:
    if node is None:
        return False
    if node.type == "return_statement":
        return True
    if node.type == "compound_statement":
        named = [c for c in node.named_children if c.type != "comment"]
        return len(named) == 1 and named[0].type == "return_statement"
    return False


def _exp_of(node, var: str, inits: dict) -> bool:
    """Whether an update's right side takes exp of something that reads `var` (directly or through
    a local)."""
    if node is None:
        return False
    stack = [node.child_by_field_name("right") or node]
    seen: set[str] = set()
    while stack:
        n = stack.pop()
        if n.type == "call_expression" and cxx.callee(n.child_by_field_name("function")) in EXP_FUNCTIONS:
            todo = list(names(n.child_by_field_name("arguments")))
            while todo:
                x = todo.pop()
                if x == var:
                    return True
                if x in inits and x not in seen:
                    seen.add(x)
                    todo.extend(names(inits[x]))
        if n.type == "identifier" and cxx.text(n) in inits and cxx.text(n) not in seen:
            seen.add(cxx.text(n))
            stack.append(inits[cxx.text(n)])
        stack.extend(n.children)
    return False


def _plus(a: str, b: str) -> str:
    if a in ("", "0"):
        return b
    return f"{a} + {b}"


# slopes ----------------------------------------------------------------------------------------

class _Slopes:
    """How expressions move with one variable: 0, 1 or None."""

    def __init__(self, locals_: dict[str, str], var: str, ids_move: bool = True,
                 changing: frozenset[str] = frozenset(), fixed: frozenset[str] = frozenset()):
        self.locals = locals_
        self.fixed = fixed  # arrays the kernel never writes
        self.changing = changing  # a local that changes is not known to stay put
        self.ids = None if ids_move else 0
        self.var = var
        self.conditions: list[tuple[str, str]] = []
        self.depth = 0

    def of(self, node) -> int | None:
        node = unwrap(node)
        if node is None:
            return None
        t = node.type
        if t == "number_literal":
            return 0
        if t == "identifier":
            name = cxx.text(node)
            if name == self.var:
                return 1
            if name in self.locals and self.depth < 32:
                self.depth += 1
                value = parse_expression(self.locals[name])
                got = self.of(value) if value is not None else None
                self.depth -= 1
                return got
            if name in self.changing:
                return None
            return 0 if name not in CUDA_IDS else self.ids
        if t == "field_expression":
            return self.ids if thread_reads(node, "") else 0
        if t == "call_expression":
            if thread_reads(node, ""):
                return self.ids
            args = node.child_by_field_name("arguments").named_children
            slopes = [self.of(a) for a in args]
            return 0 if all(s == 0 for s in slopes) else None
        if t == "unary_expression":
            v = self.of(node.child_by_field_name("argument"))
            op = cxx.text(node.child_by_field_name("operator"))
            return v if op == "+" else (0 if v == 0 else None)
        if t == "binary_expression":
            op = cxx.text(node.child_by_field_name("operator"))
            left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
            a, b = self.of(left), self.of(right)
            if a is None or b is None:
                return None
            if op == "+":
                return a + b if a + b <= 1 else None
            if op == "-":
                return a - b if a - b in (0, 1) else None
            if op == "*":
                if a == 0 and b == 0:
                    return 0
                one = integer(cxx.text(unwrap(right) if a == 1 else unwrap(left)) or "")
                return 1 if one == 1 else None
            if op in ("/", "%", ">>", "&"):
                if b != 0:
                    return None
                if a == 0:
                    return 0
                divisor = cxx.text(right)
                if op == ">>":
                    divisor = f"(1 << ({divisor}))"
                    op = "/"
                if op == "&":
                    return None
                keep = {k: v for k, v in self.locals.items() if k != self.var}  # the variable stays by name
                self.conditions.append((_inline_text(cxx.text(left), keep, {}), _inline_text(divisor, keep, {})))
                return 0 if op == "/" else 1
            return 0 if a == 0 and b == 0 else None
        if t == "conditional_expression":
            parts = [self.of(node.child_by_field_name(k)) for k in ("condition", "consequence", "alternative")]
            return 0 if all(p == 0 for p in parts) else None
        if t == "subscript_expression":
            # `inp[b * T + t]` of an array never written, at an index that stays: the same value
            arr = unwrap(node.child_by_field_name("argument"))
            idx = node.child_by_field_name("indices") or node.child_by_field_name("index")
            inner = [c for c in idx.named_children if c.type != "comment"] if idx is not None else []
            if arr is not None and arr.type == "identifier" and cxx.text(arr) in self.fixed and len(inner) == 1:
                return 0 if self.of(inner[0]) == 0 else None
            return None
        return None


def _inline_text(expr: str, locals_: dict[str, str], rename: dict[str, str]) -> str:
    node = parse_expression(expr)
    return _inline(node, locals_, rename, 0) if node is not None else expr


def _inline(node, locals_: dict[str, str], rename: dict[str, str], depth: int) -> str:
    """The text of `node` with identifiers replaced; other text kept as written."""
    out = []
    pos = node.start_byte
    base = node.start_byte
    src = node.text
    for ident in _identifiers(node):
        name = cxx.text(ident)
        if name in rename:
            text = rename[name]
        elif name in locals_ and depth < 32:
            text = "(" + _inline_text(locals_[name], locals_, rename) + ")"
        else:
            continue
        out.append(src[pos - base:ident.start_byte - base].decode("utf-8", "replace"))
        out.append(text)
        pos = ident.end_byte
    out.append(src[pos - base:].decode("utf-8", "replace"))
    return "".join(out)


def _identifiers(node) -> list:
    """Identifiers of an expression in order (field names and called functions left out)."""
    out = []
    stack = [node]
    while stack:
        n = stack.pop()
        if n.type == "identifier":
            parent = n.parent
            if parent is not None and parent.type == "call_expression" and \
                    parent.child_by_field_name("function") == n:
                continue
            out.append(n)
            continue
        if n.type == "field_expression":
            stack.append(n.child_by_field_name("argument"))
            continue
        stack.extend(reversed(n.children))
    return sorted(out, key=lambda n: n.start_byte)


# the classification ----------------------------------------------------------------------------

def _classify(a: KernelAnalysis) -> tuple[str, list[str]]:
    reasons: list[str] = []
    if not a.element:
        return "neither", ["no variable holds a global index (blockIdx * blockDim + threadIdx, get_global_id)"]
    if a.barriers or a.shared or a.atomics:
        what = [w for w, on in (("barriers", a.barriers), ("shared memory", a.shared), ("atomics", a.atomics)) if on]
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



# the source's syntax, for the lifts ------------------------------------------------------------

@functools.lru_cache(maxsize=8)
def _file(source: str) -> "_File":
    return _File(source, None)


def syntax_nodes(source: str, types: tuple[str, ...]) -> list:
    """The nodes of the given types in the source's tree (CUDA and OpenCL words blanked), in
    order, each with a function giving a node's text."""
    f = _file(source)
    out = []
    stack = [f.root]
    while stack:
        n = stack.pop()
        if n.type in types:
            out.append(n)
        stack.extend(reversed(n.children))
    return [(n, cxx.text) for n in sorted(out, key=lambda n: n.start_byte)]


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
        d = node.child_by_field_name("declarator")
        while d is not None and d.type != "function_declarator":
            d = d.child_by_field_name("declarator")
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


_LOOP_TYPES = ("for_statement", "while_statement", "do_statement", "for_range_loop")


def _walk_types(root, types: tuple[str, ...]) -> Iterator:
    stack = [root]
    while stack:
        n = stack.pop()
        if n.type in types:
            yield n
        stack.extend(n.children)
