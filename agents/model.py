"""The kernel model: one reading of one kernel that every rules pass works from.

`build(source, entry)` reads the kernel named `entry` and the functions it calls (never the file's
other kernels) with tree-sitter's C++ grammar (engine/cxx.py blanks the CUDA and OpenCL words
first, keeping offsets). Nothing is compiled or run. Every span is a byte range of the source as
written (`source.encode()[span.start:span.end]`).

What a `KernelModel` holds:

- `functions`: the kernel first, then what it calls, each with its spans;
- `loops`: every loop of those functions, outermost first in source order, one `Loop` each: its
  variable, start, bound and step as written and as `Affine` forms, its trip count when the
  bounds are numbers (or the file's #define'd numbers), its parent loop and depth, and its `role`:
  `thread-stride` (starts at the thread's index within the block, steps by the block's threads: the
  threads of a block share the range), `block-stride` (steps by the grid's blocks), `grid-stride`
  (steps by every thread of the grid), `tree` (halves or doubles a shared index: a tree reduction
  or scan over the block), `serial` (each thread runs all of it);
- `accesses`: every element read or written, one `Access` each: the array (a pointer argument,
  possibly through a local pointer into it, a shared or a local array), its memory space, the index
  as written and as an `IndexExpr` (an `Affine` form over the thread, block and loop indices, or
  None where it is not affine, with the names it reads and the arrays it loads: a gather), the
  innermost loop, the ifs and loops around it, cache-hint intrinsics and vload/vstore_half;
- `accumulators`: variables carried across a loop's iterations by a sum, maximum or minimum, one
  `Accumulator` each (a sum of exponentials names the maximum it is taken against: a softmax's);
- `barriers` (with the loop they are in), `atomics`, `shuffles`, `arrays` (shared and local
  arrays with their sizes, in bytes where known), `shared` (every name of shared or OpenCL local
  memory, scalars and `__local` arguments too), `thread_indices` (locals made from thread ids, with
  the literal a global one takes as its block's thread count), `launch_dims` (the dimensions of the
  launch the kernel reads), `defines` (the file's integer
  #defines, literals or arithmetic over those above), locals assigned once and their
  initialisers;
- `aliases` (local pointers into an argument, `p + off` or `p - off`, never moved, with their
  offset) and `casts` (any other local pointer into arguments: of another type, moved, made by a
  call; with the arguments its initialiser names), `opaque` (the arguments the body reaches
  other than by an access it read: a cast, an element's address taken, a call's argument),
  `arg_types` (each pointer argument's element type as written), `guard` (the first `if` of the
  body when it bounds one name: `if (i < n)`, `if (i >= n) return;`), `types` and `scalars` (each
  local's declared type, and those declared as plain scalars), `macros` (the file's function-like
  macros of one expression, with their parameters).

`KernelModel.slope(index, var)` tells how an index moves as a variable moves by one, through div
and mod too (with the conditions under which it holds); `KernelModel.inline` writes an expression
with the kernel's locals replaced by their initialisers.

Index expressions are affine forms: a sum of index symbols (`threadIdx.x`, `blockIdx.y`, a loop's
variable) each times a coefficient, plus a constant, where coefficients and constant are
polynomials over invariant names (`blockDim.x`, `gridDim.x`, scalar arguments, #defines, numbers).
OpenCL's ids are read in CUDA's words (`get_local_id(0)` is `threadIdx.x`, `get_global_id(1)` is
`blockIdx.y * blockDim.y + threadIdx.y`). `IndexExpr.slope(symbol)` is how the index moves when the
symbol moves by one; `IndexExpr.shared_by(dim)` tells whether the threads of a block along a
dimension read the same element (reuse across threads, what shared-memory tiling stages once).

Vocabulary of both dialects lives in `DIALECT` (one table: ids, barriers, atomics, shuffles, math
calls, cache-hint intrinsics).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, fields, replace
from typing import Iterable, Iterator, Mapping

from kerntune.engine.cxx import blank, callee, first_error, int_literal, parser, text
from kerntune.engine.signature import KernelSignature, SignatureError, parse_kernel, parse_kernels

from .syntax import names, target

# one table of both dialects' words ----------------------------------------------------------------

CUDA_IDS = {"threadIdx": "threadIdx", "blockIdx": "blockIdx", "blockDim": "blockDim", "gridDim": "gridDim"}
# OpenCL's id functions, each as CUDA's words: (what it reads, in terms of threadIdx/blockIdx/...)
OPENCL_IDS = {"get_local_id": "threadIdx", "get_group_id": "blockIdx", "get_local_size": "blockDim",
              "get_num_groups": "gridDim", "get_global_id": "global", "get_global_size": "global_size"}
DIMS = ("x", "y", "z")
INDEX_IDS = ("threadIdx", "blockIdx")  # ids that tell threads apart: index symbols
SIZE_IDS = ("blockDim", "gridDim")  # ids the same in every thread: invariant names


@dataclass(frozen=True)
class Dialect:
    """The words of one dialect the model reads."""

    barriers: frozenset[str]  # a block's threads meet
    warp_barriers: frozenset[str]  # a warp's (sub-group's) threads meet
    atomic_prefixes: tuple[str, ...]
    shuffles: frozenset[str]
    exp: frozenset[str]
    max: frozenset[str]
    min: frozenset[str]
    loads: frozenset[str]  # cache-hint loads of an element's address
    stores: frozenset[str]
    half_loads: frozenset[str]  # half storage read as float: vload_half(i, p)
    half_stores: frozenset[str]
    shared_words: frozenset[str]  # the words that put an array in a block's shared memory
    ids: frozenset[str] = frozenset()  # every word that reads the launch: the ids and sizes
    fast: Mapping[str, str] = field(default_factory=dict)  # math calls with a fast form, and that form
    # how code written for the dialect spells an id along a dimension (`{d}` 0-2, `{x}` x/y/z)
    spell: Mapping[str, str] = field(default_factory=dict)
    # a group of threads meeting (cooperative groups' `cg::sync(g)`, `g.sync()`): a block's where
    # the group is made by one of `block_groups` (or declared of that type), else a tile's (a warp's)
    group_syncs: frozenset[str] = frozenset()
    block_groups: frozenset[str] = frozenset()
    tile_groups: frozenset[str] = frozenset()  # a warp's (or fewer threads') groups

    @property
    def cooperating(self) -> frozenset[str]:
        """Calls through which a block's or a warp's threads work together (atomics aside)."""
        return self.barriers | self.warp_barriers | self.shuffles | self.group_syncs

    def id(self, word: str, dim: int = 0) -> str:
        """`word` (threadIdx, blockIdx, blockDim, gridDim) along dimension `dim`, as written in the dialect."""
        return self.spell[word].format(d=dim, x=DIMS[dim])


_EXP = frozenset({"exp", "expf", "__expf", "exp2", "exp2f", "native_exp", "half_exp", "hexp"})
_MAX = frozenset({"max", "fmax", "fmaxf", "__hmax", "fmax_", "maxf"})
_MIN = frozenset({"min", "fmin", "fminf", "__hmin"})
DIALECT = {
    "cuda": Dialect(
        barriers=frozenset({"__syncthreads", "__syncthreads_count", "__syncthreads_and", "__syncthreads_or"}),
        warp_barriers=frozenset({"__syncwarp"}),
        atomic_prefixes=("atomic", "__atomic"),
        shuffles=frozenset({"__shfl_sync", "__shfl_xor_sync", "__shfl_down_sync", "__shfl_up_sync", "__shfl",
                            "__shfl_xor", "__shfl_down", "__shfl_up", "__reduce_add_sync", "__reduce_max_sync",
                            "__reduce_min_sync", "__ballot_sync", "__all_sync", "__any_sync"}),
        exp=_EXP, max=_MAX, min=_MIN,
        loads=frozenset({"__ldg", "__ldcs", "__ldcg", "__ldca", "__ldlu", "__ldcv"}),
        stores=frozenset({"__stcs", "__stcg", "__stwb", "__stwt"}),
        half_loads=frozenset(), half_stores=frozenset(),
        shared_words=frozenset({"__shared__"}),
        ids=frozenset(CUDA_IDS),
        fast={"expf": "__expf", "logf": "__logf", "log2f": "__log2f", "log10f": "__log10f", "sinf": "__sinf",
              "cosf": "__cosf", "tanf": "__tanf", "powf": "__powf", "exp10f": "__exp10f"},
        spell={"threadIdx": "threadIdx.{x}", "blockIdx": "blockIdx.{x}", "blockDim": "blockDim.{x}",
               "gridDim": "gridDim.{x}"},
        group_syncs=frozenset({"sync"}),
        block_groups=frozenset({"thread_block", "this_thread_block", "grid_group", "this_grid"}),
        tile_groups=frozenset({"thread_block_tile", "tiled_partition", "coalesced_group", "coalesced_threads",
                               "thread_group"})),
    "opencl": Dialect(
        barriers=frozenset({"barrier", "work_group_barrier"}),
        warp_barriers=frozenset({"sub_group_barrier"}),
        atomic_prefixes=("atomic", "atom_"),
        shuffles=frozenset({"sub_group_shuffle", "sub_group_shuffle_xor", "sub_group_shuffle_down",
                            "sub_group_shuffle_up", "sub_group_reduce_add", "sub_group_reduce_max",
                            "sub_group_reduce_min", "sub_group_broadcast"}),
        exp=_EXP, max=_MAX, min=_MIN,
        loads=frozenset(), stores=frozenset(),
        half_loads=frozenset({"vload_half", "vloada_half"}),
        half_stores=frozenset({"vstore_half", "vstore_half_rte", "vstorea_half", "vstorea_half_rte"}),
        shared_words=frozenset({"__local", "local"}),
        ids=frozenset(OPENCL_IDS) | {"get_global_offset"},
        fast={n: f"native_{n}" for n in ("exp", "log", "exp2", "log2", "exp10", "log10", "sin", "cos", "tan",
                                         "sqrt", "rsqrt", "powr")},
        spell={"threadIdx": "get_local_id({d})", "blockIdx": "get_group_id({d})", "blockDim": "get_local_size({d})",
               "gridDim": "get_num_groups({d})"}),
}


def _either() -> Dialect:
    """The words of both dialects together: for what reads a kernel before its dialect matters."""
    both = {}
    for f in fields(Dialect):
        values = [getattr(d, f.name) for d in DIALECT.values()]
        if isinstance(values[0], tuple):
            both[f.name] = tuple(dict.fromkeys(w for v in values for w in v))
        elif isinstance(values[0], frozenset):
            both[f.name] = frozenset().union(*values)
        else:
            both[f.name] = {k: w for v in values for k, w in v.items()}
    return Dialect(**both)


EITHER = _either()
ELEMENT_BYTES = {"float": 4, "double": 8, "int": 4, "unsigned": 4, "unsigned int": 4, "uint": 4, "short": 2,
                 "unsigned short": 2, "ushort": 2, "char": 1, "unsigned char": 1, "uchar": 1, "long": 8,
                 "unsigned long": 8, "ulong": 8, "half": 2, "__half": 2, "__nv_bfloat16": 2, "nv_bfloat16": 2,
                 "__nv_half": 2, "int8_t": 1, "uint8_t": 1, "int16_t": 2, "uint16_t": 2, "int32_t": 4,
                 "uint32_t": 4, "int64_t": 8, "uint64_t": 8, "size_t": 8, "float2": 8, "float4": 16,
                 "double2": 16, "int2": 8, "int4": 16, "half2": 4, "__half2": 4, "__nv_bfloat162": 4}


class ModelError(ValueError):
    """The source holds no kernel of that name that can be read; the message is one line."""


# spans and affine forms ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Span:
    """A half-open range of bytes of the source as written."""

    start: int
    end: int

    def within(self, other: "Span") -> bool:
        return other.start <= self.start and self.end <= other.end


Monomial = tuple[str, ...]  # sorted invariant names multiplied together; () is the number 1


# fused multiply-adds, CUDA's and OpenCL's: `fmaf(x, y, s)` is s + x * y
FUSED_ADDS = frozenset({"fmaf", "fma", "__fmaf_rn", "__fma_rn", "mad"})


@dataclass(frozen=True)
class Poly:
    """An integer polynomial over invariant names: {monomial: coefficient}, zero terms left out."""

    terms: tuple[tuple[Monomial, int], ...] = ()

    @staticmethod
    def of(value: int | str) -> "Poly":
        if isinstance(value, int):
            return Poly((((), value),) if value else ())
        return Poly((((value,), 1),))

    @staticmethod
    def const(c: int) -> "Poly":
        return Poly.of(c)

    @staticmethod
    def name(n: str) -> "Poly":
        return Poly.of(n)

    @staticmethod
    def _make(d: Mapping[Monomial, int]) -> "Poly":
        return Poly(tuple(sorted((m, c) for m, c in d.items() if c)))

    def __add__(self, other: "Poly") -> "Poly":
        d = dict(self.terms)
        for m, c in other.terms:
            d[m] = d.get(m, 0) + c
        return Poly._make(d)

    def __neg__(self) -> "Poly":
        return Poly(tuple((m, -c) for m, c in self.terms))

    def __sub__(self, other: "Poly") -> "Poly":
        return self + (-other)

    def __mul__(self, other: "Poly") -> "Poly":
        d: dict[Monomial, int] = {}
        for m1, c1 in self.terms:
            for m2, c2 in other.terms:
                m = tuple(sorted(m1 + m2))
                d[m] = d.get(m, 0) + c1 * c2
        return Poly._make(d)

    @property
    def is_zero(self) -> bool:
        return not self.terms

    @property
    def number(self) -> int | None:
        """Its value when it is a number."""
        if not self.terms:
            return 0
        if len(self.terms) == 1 and self.terms[0][0] == ():
            return self.terms[0][1]
        return None

    def names(self) -> set[str]:
        return {n for m, _ in self.terms for n in m}

    def degree_in(self, var: str) -> int:
        return max((m.count(var) for m, _ in self.terms), default=0)

    def coefficient(self, var: str) -> "Poly":
        """The polynomial multiplying `var` (the polynomial must be linear in it)."""
        d: dict[Monomial, int] = {}
        for m, c in self.terms:
            if var in m:
                rest = list(m)
                rest.remove(var)
                d[tuple(rest)] = d.get(tuple(rest), 0) + c
        return Poly._make(d)

    def without(self, var: str) -> "Poly":
        """The terms that do not read `var`."""
        return Poly._make({m: c for m, c in self.terms if var not in m})

    def substitute(self, var: str, value: "Poly") -> "Poly":
        """`var` replaced by `value`."""
        out = Poly()
        for m, c in self.terms:
            term = Poly.of(c)
            for n in m:
                term = term * (value if n == var else Poly.of(n))
            out = out + term
        return out

    def evaluate(self, env: Mapping[str, int]) -> int | None:
        """Its value with every name given by `env`; None when a name is not there."""
        total = 0
        for m, c in self.terms:
            v = c
            for n in m:
                if n not in env:
                    return None
                v *= env[n]
            total += v
        return total

    def __str__(self) -> str:
        if not self.terms:
            return "0"
        parts = []
        for m, c in self.terms:
            body = " * ".join(m)
            parts.append(str(c) if not m else body if c == 1 else f"{c} * {body}")
        return " + ".join(parts)


@dataclass(frozen=True)
class Affine:
    """sum(coefficient * index symbol) + constant, coefficients and constant `Poly`s over invariant
    names. Index symbols: `threadIdx.x`..., `blockIdx.x`..., and loop variables."""

    coeffs: tuple[tuple[str, Poly], ...] = ()
    const: Poly = Poly()

    @staticmethod
    def of(value: int | str, index: bool = False) -> "Affine":
        if index:
            return Affine(((str(value), Poly.of(1)),))
        return Affine((), Poly.of(value))

    def coeff(self, symbol: str) -> Poly:
        return dict(self.coeffs).get(symbol, Poly())

    def symbols(self) -> set[str]:
        return {s for s, _ in self.coeffs}

    def __add__(self, other: "Affine") -> "Affine":
        d = dict(self.coeffs)
        for s, c in other.coeffs:
            d[s] = d.get(s, Poly()) + c
        return Affine(tuple(sorted((s, c) for s, c in d.items() if not c.is_zero)), self.const + other.const)

    def __neg__(self) -> "Affine":
        return Affine(tuple((s, -c) for s, c in self.coeffs), -self.const)

    def __sub__(self, other: "Affine") -> "Affine":
        return self + (-other)

    def scale(self, k: Poly) -> "Affine":
        return Affine(tuple((s, c * k) for s, c in self.coeffs if not (c * k).is_zero), self.const * k)

    @property
    def invariant(self) -> Poly | None:
        """The constant, when no index symbol moves it."""
        return self.const if not self.coeffs else None

    def __str__(self) -> str:
        parts = [f"{s}" if c.number == 1 else f"({c}) * {s}" for s, c in self.coeffs]
        if not self.const.is_zero or not parts:
            parts.append(str(self.const))
        return " + ".join(parts)


@dataclass(frozen=True)
class IndexExpr:
    """An expression as written, its span, and what it is over the thread, block and loop indices."""

    text: str
    span: Span
    affine: Affine | None  # None: not affine (a product of indices, a division, a load...)
    names: frozenset[str] = frozenset()  # every name it reads, the locals it goes through inlined
    loads: tuple[str, ...] = ()  # arrays it reads an element of: an index that is data (a gather)

    def slope(self, symbol: str) -> Poly | None:
        """How the expression moves when `symbol` moves by one; None when it is not affine."""
        return self.affine.coeff(symbol) if self.affine is not None else None

    def shared_by(self, dim: int = 0) -> bool:
        """Whether every thread of a block along dimension `dim` gets the same value: the element
        is reused across those threads."""
        return self.affine is not None and self.affine.coeff(f"threadIdx.{DIMS[dim]}").is_zero


# the parts of a kernel ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Function:
    """A function of the model: the kernel or one it calls."""

    name: str
    span: Span  # the definition
    body: Span  # its braces included
    name_span: Span
    kernel: bool


@dataclass(frozen=True)
class Loop:
    """A loop; for a `for` of the usual shape its variable, bounds, step and trip count."""

    function: str  # the function it is written in
    in_kernel: bool  # written in the kernel's own body, not in a function it calls
    var: str = ""
    start: str = ""
    bound: str = ""  # `var < bound` (or `<=`, with `inclusive`; `>`/`>=` for a loop counting down)
    inclusive: bool = False
    step: str = ""  # what `+=` adds (`1` for `++`); the divisor or shift of a halving loop
    trip: int | None = None  # a literal trip count
    depth: int = 0  # loops around it in the same function
    strided_by_threads: bool = False  # the step is the block's (or the grid's) thread count
    span: Span = Span(0, 0)
    pragma: Span | None = None  # the `#pragma unroll` line just before it
    body: Span = Span(0, 0)  # the statement it repeats (a block: its braces included)
    accesses: int = 0  # uses of the kernel's pointer arguments in its body
    register_index: bool = False  # its variable indexes a local array (a partial unroll puts it in memory)
    halving: bool = False  # its variable halves each time (`s /= 2`, `s >>= 1`): a tree reduction's loop
    kind: str = "for"  # "for", "while", "do" or "range"
    parent: int | None = None  # the loop it is in (an index into the model's loops)
    role: str = "serial"  # "thread-stride", "block-stride", "grid-stride", "tree" or "serial"
    dim: int | None = None  # the launch dimension a strided loop strides over
    compare: str = ""  # the condition's operator: "<", "<=", "!=", ">", ">="
    update: str = ""  # the update's operator: "+=", "-=", "*=", "/=", ">>=", "<<=", "++", "--"
    start_form: Affine | None = None
    bound_form: Affine | None = None
    step_form: Affine | None = None

    @property
    def hot(self) -> bool:
        """The kernel's own loop over its arrays: where an unroll count is worth tuning. A loop
        over a register array is not (unrolled in part, the array spills to local memory), nor
        a loop of a function the kernel calls."""
        return self.in_kernel and self.accesses > 0 and not self.register_index


@dataclass(frozen=True)
class Access:
    """One array element read or written: `array[index]`, `*(array + index)`, vload/vstore_half(i, array),
    or a cache-hint intrinsic on `&array[index]`."""

    array: str  # the kernel argument (or shared/local array) it is an element of
    index: str  # the index as written (through a local pointer: `offset + (index)`)
    write: bool
    read: bool
    span: Span  # the subscript expression (a cache-hint or half intrinsic: the call)
    index_span: Span
    loop: int | None  # the innermost loop it is in (an index into the model's loops)
    unconditional: bool  # reached on every path through the function's body (not under an if or loop)
    via: str = ""  # the local pointer it goes through, when it does
    offset: str = ""  # that pointer's offset from the argument
    under: tuple[Span, ...] = ()  # the ifs, loops and conditional expressions around it, outermost first
    call: str = ""  # a cache-hint or half intrinsic it goes through (`__ldg(&x[i])`): `span` is the call's
    value_span: Span | None = None  # a store intrinsic's value
    space: str = "global"  # "global" (a pointer argument), "shared", "local" (a thread's own array), "constant"
    function: str = ""  # the function it is written in
    expr: IndexExpr | None = None  # the index over thread, block and loop indices
    deref: bool = False  # written `*(array + index)`, not as a subscript


@dataclass(frozen=True)
class Accumulator:
    """A variable the kernel's innermost loop around its updates carries from one iteration to the
    next (assigned there, declared outside it, no loop's variable): by a sum (`s += e`, `s -= e`,
    `s = s + e`, `s++`, e not reading s), a maximum or minimum (`m = fmaxf(m, e)`, through a local
    `m = m_new` with `m_new = fmaxf(m, e)`, `if (e > m) m = e;`, `m = e > m ? e : m`), the online
    pair of a softmax (op "online": the maximum `var`, read only by the updates of the sum of
    exponentials `partner` taken against it, which rescale it when the maximum grows:
    `s = s * expf(m_old - m) + expf(x - m)`), or in another way (op "other": no reduction)."""

    var: str
    op: str  # "sum", "max", "min", "online" or "other"
    loop: int | None = None  # index into the model's loops
    init: str = ""  # its initial value, as written ("" when not found)
    span: Span = Span(0, 0)  # its first update
    ctype: str = ""  # its type as declared
    partner: str = ""
    exp: str = ""  # the online pair's exponential; a sum's of exponentials taken against `against`
    against: str = ""  # a sum of exponentials taken against a maximum (a softmax's, in any loop): that maximum
    # where the loop reads it other than in its own updates (and the test guarding a maximum's):
    # a reduction read while it accumulates is a scan
    reads: tuple[Span, ...] = ()

    @property
    def name(self) -> str:
        return self.var


@dataclass(frozen=True)
class Barrier:
    """Where threads meet: a block's (`__syncthreads`, `barrier`) or a warp's (`__syncwarp`)."""

    call: str
    span: Span
    loop: int | None  # the innermost loop it is in
    scope: str  # "block" or "warp"
    function: str
    unconditional: bool  # on every path of its function (outside any if)


@dataclass(frozen=True)
class Call:
    """A call of something the model notes: an atomic, a shuffle, a math function."""

    name: str
    span: Span
    loop: int | None
    function: str
    array: str = ""  # an atomic's array, when its address is `&p[i]` or `p + i`


@dataclass(frozen=True)
class Array:
    """A shared (or thread-local) array declared in the kernel or a function it calls."""

    name: str
    space: str  # "shared" or "local"
    ctype: str
    dims: tuple[str, ...]  # each dimension's size as written ("" for `extern __shared__ x[]`)
    span: Span
    function: str
    sizes: tuple[int | None, ...] = ()  # each dimension's value, where numbers and #defines give it

    @property
    def dynamic(self) -> bool:
        return any(d == "" for d in self.dims)

    @property
    def bytes(self) -> int | None:
        """Its size in bytes, where its element type and dimensions are known."""
        size = ELEMENT_BYTES.get(self.ctype)
        if size is None or not self.sizes or any(s is None for s in self.sizes):
            return None
        for s in self.sizes:
            size *= s
        return size


@dataclass(frozen=True)
class ThreadIndex:
    """A local variable initialised from thread or block ids."""

    name: str
    expr: str  # its initialiser, as written
    reads: tuple[tuple[str, int], ...]  # (id, dimension): ("blockIdx", 0)
    is_global: bool  # blockIdx * blockDim + threadIdx (or get_global_id) in one dimension
    span: Span  # the declaration statement
    form: Affine | None = None
    # a global index that writes its block's thread count as a literal (`blockIdx.x * 256 +
    # threadIdx.x`): that count, where the literal stands, and the dimension
    fixed: tuple[int, Span, int] | None = None


@dataclass(frozen=True)
class Guard:
    """What bounds a thread's element at the top of the kernel's body: `if (var < bound) {...}`,
    `if (var >= bound) return;` (the first `if` of the body), or a grid-stride loop over the
    elements (`form` "loop", its span the loop's)."""

    var: str
    bound: str
    form: str  # "if", "return" or "loop"
    span: Span  # the if statement (or the loop)


@dataclass(frozen=True)
class KernelModel:
    """One kernel and what it calls, read once; see the module's docstring."""

    source: str
    dialect: str
    entry: str
    signature: KernelSignature
    functions: tuple[Function, ...]
    loops: tuple[Loop, ...] = ()
    accesses: tuple[Access, ...] = ()
    accumulators: tuple[Accumulator, ...] = ()
    barriers: tuple[Barrier, ...] = ()
    atomics: tuple[Call, ...] = ()
    shuffles: tuple[Call, ...] = ()
    calls: tuple[Call, ...] = ()  # every call of the kernel and its functions, by callee name
    arrays: tuple[Array, ...] = ()
    thread_indices: tuple[ThreadIndex, ...] = ()
    launch_dims: frozenset[int] = frozenset()  # dimensions of the launch the kernel reads
    ids: frozenset[tuple[str, int]] = frozenset()  # (id, dimension) read: ("threadIdx", 1)
    defines: Mapping[str, int] = field(default_factory=dict)  # the file's integer #defines (define_value)
    locals: Mapping[str, str] = field(default_factory=dict)  # the kernel's single-assignment locals
    changing: frozenset[str] = frozenset()  # locals assigned after their declaration
    pointers: frozenset[str] = frozenset()  # the kernel's pointer arguments
    returns: tuple[Span, ...] = ()
    statements: tuple[Span, ...] = ()  # the top-level statements of the kernel's body
    parse_error: str = ""  # where the parser could not read the kernel ("" when it could)
    aliases: Mapping[str, tuple[str, str]] = field(default_factory=dict)  # local pointer -> (argument, offset)
    # any other local pointer into arguments (of another type, moved, made by a call) -> the arguments
    # its initialiser names
    casts: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # pointer arguments the kernel's body reaches other than through the accesses read (a cast to
    # another type, an element's address taken, the pointer passed to a call or moved): in order
    opaque: tuple[str, ...] = ()
    shared: frozenset[str] = frozenset()  # shared (OpenCL local) memory declared or taken as an argument
    arg_types: Mapping[str, str] = field(default_factory=dict)  # pointer argument -> its element type as written
    guard: Guard | None = None  # the first `if` of the kernel's body, when it bounds one name
    types: Mapping[str, str] = field(default_factory=dict)  # each local's type as first declared
    scalars: frozenset[str] = frozenset()  # locals declared as plain scalars (no array, pointer or reference)
    # the file's function-like macros whose body is one expression: name -> (parameters, body)
    macros: Mapping[str, tuple[tuple[str, ...], str]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.functions[0].name

    @property
    def kernel(self) -> Function:
        return self.functions[0]

    @property
    def cooperates(self) -> bool:
        """Whether the kernel's threads already work together (barriers, shared memory, atomics,
        shuffles)."""
        return bool(self.barriers or self.atomics or self.shuffles or any(a.space == "shared" for a in self.arrays))

    def nest(self, loop: int | None) -> tuple[Loop, ...]:
        """The loops around (and including) a loop, outermost first."""
        out = []
        while loop is not None:
            out.append(self.loops[loop])
            loop = self.loops[loop].parent
        return tuple(reversed(out))

    def shared_arrays(self) -> tuple[Array, ...]:
        return tuple(a for a in self.arrays if a.space == "shared")

    def shared_bytes(self) -> int | None:
        """Bytes of the static shared arrays; None when one's size is not known."""
        total = 0
        for a in self.shared_arrays():
            if a.bytes is None:
                return None
            total += a.bytes
        return total

    def accesses_of(self, array: str) -> tuple[Access, ...]:
        return tuple(a for a in self.accesses if a.array == array)

    def arrays_used(self) -> dict[str, tuple[bool, bool]]:
        """Each array the kernel accesses: (read, written)."""
        return arrays_of(self.accesses)

    def slope(self, index: str, var: str, moving_ids: bool = True) -> "Slope":
        """How `index` moves when `var` moves by one, through div and mod (see `Slope`); the thread
        ids move with `var` when `moving_ids` (a thread's element), else they hold still (a loop's
        variable); an element of an array the kernel never writes, read at an index that holds
        still, holds still."""
        node = parse_expression(index)
        if node is None:
            return Slope(None)
        own = [x for x in self.accesses if x.function == self.name and x.array in self.pointers]
        fixed = frozenset(x.array for x in own) - {x.array for x in own if x.write}
        s = _Slopes(self.locals, var, moving_ids, self.changing, fixed)
        value = s.of(node)
        return Slope(value, tuple(dict.fromkeys(s.conditions)))

    def inline(self, expr: str, rename: Mapping[str, str] | None = None) -> str:
        """`expr` with the kernel's single-assignment locals replaced by their initialisers (in
        parentheses) and the names in `rename` renamed: an expression that reads the same anywhere."""
        return inline(self.locals, expr, rename)

    def index(self, expr: str, loops: Iterable[int] = ()) -> IndexExpr:
        """An expression of the kernel (the kernel's locals inlined) over the thread and block ids
        and the variables of `loops`."""
        node = parse_expression(expr)
        if node is None:
            return IndexExpr(expr, Span(0, 0), None)
        indices = {self.loops[i].var for i in loops if self.loops[i].var}
        return _Forms(self.locals, indices, self.changing, self.pointers).index(node, Span(0, 0))


# slopes through div and mod ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Slope:
    """How an index moves when one variable moves by one: 0 (it does not), 1 (one for one) or None
    (otherwise, or unknown); div and mod by values that hold still count as moving one for one (mod)
    or not at all (div) within a stretch that crosses no multiple of the divisor: `conditions`, the
    `(operand, divisor)` pairs they go through, say which (operands inlined, so that they read the
    same anywhere in the kernel)."""

    slope: int | None
    conditions: tuple[tuple[str, str], ...] = ()


class _Slopes:
    """How expressions move with one variable: 0, 1 or None."""

    def __init__(self, locals_: Mapping[str, str], var: str, ids_move: bool = True,
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
            name = text(node)
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
        if t in ("field_expression", "call_expression") and _reads_ids(node):
            return self.ids
        if t == "field_expression":
            return 0
        if t == "call_expression":
            slopes = [self.of(a) for a in node.child_by_field_name("arguments").named_children]
            return 0 if all(s == 0 for s in slopes) else None
        if t == "unary_expression":
            v = self.of(node.child_by_field_name("argument"))
            op = text(node.child_by_field_name("operator"))
            return v if op == "+" else (0 if v == 0 else None)
        if t == "binary_expression":
            return self._binary(node)
        if t == "conditional_expression":
            parts = [self.of(node.child_by_field_name(k)) for k in ("condition", "consequence", "alternative")]
            return 0 if all(p == 0 for p in parts) else None
        if t == "subscript_expression":
            # `inp[b * T + t]` of an array never written, at an index that stays: the same value
            arr = unwrap(node.child_by_field_name("argument"))
            idx = node.child_by_field_name("indices") or node.child_by_field_name("index")
            inner = [c for c in idx.named_children if c.type != "comment"] if idx is not None else []
            if arr is not None and arr.type == "identifier" and text(arr) in self.fixed and len(inner) == 1:
                return 0 if self.of(inner[0]) == 0 else None
            return None
        return None

    def _binary(self, node) -> int | None:
        op = text(node.child_by_field_name("operator"))
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
            one = integer(text(unwrap(right) if a == 1 else unwrap(left)) or "")
            return 1 if one == 1 else None
        if op in ("/", "%", ">>", "&"):
            if b != 0:
                return None
            if a == 0:
                return 0
            divisor = text(right)
            if op == ">>":
                divisor = f"(1 << ({divisor}))"
                op = "/"
            if op == "&":
                return None
            keep = {k: v for k, v in self.locals.items() if k != self.var}  # the variable stays by name
            self.conditions.append((inline(keep, text(left)), inline(keep, divisor)))
            return 0 if op == "/" else 1
        return 0 if a == 0 and b == 0 else None


def _reads_ids(node) -> bool:
    return any(id_of(n) is not None for n in nodes(node))


def inline(locals_: Mapping[str, str], expr: str, rename: Mapping[str, str] | None = None) -> str:
    """`expr` with the names of `locals_` replaced by their values (in parentheses, to a depth of
    32) and the names in `rename` renamed; other text kept as written."""
    node = parse_expression(expr)
    return _inline(node, locals_, rename or {}, 0) if node is not None else expr


def _inline(node, locals_: Mapping[str, str], rename: Mapping[str, str], depth: int) -> str:
    out = []
    pos = base = node.start_byte
    src = node.text
    for ident in identifiers(node):
        name = text(ident)
        if name in rename:
            new = rename[name]
        elif name in locals_ and depth < 32:
            inner = parse_expression(locals_[name])
            new = "(" + (_inline(inner, locals_, rename, depth + 1) if inner is not None else locals_[name]) + ")"
        else:
            continue
        out.append(src[pos - base:ident.start_byte - base].decode("utf-8", "replace"))
        out.append(new)
        pos = ident.end_byte
    out.append(src[pos - base:].decode("utf-8", "replace"))
    return "".join(out)


def identifiers(node) -> list:
    """The identifiers of an expression in order (field names and called functions left out)."""
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


def arrays_of(accesses: Iterable[Access]) -> dict[str, tuple[bool, bool]]:
    """Each array of the accesses: (read, written)."""
    out: dict[str, tuple[bool, bool]] = {}
    for a in accesses:
        r, w = out.get(a.array, (False, False))
        out[a.array] = (r or a.read, w or a.write)
    return out


# reading ------------------------------------------------------------------------------------------------

def build(source: str, entry: str | None = None, at: int | None = None) -> KernelModel:
    """The model of the kernel named `entry` (the source's only kernel, or its first, when None);
    `at`, the byte its definition starts at, picks one of several definitions of that name (the
    copies a pass keeps under `#if`), else the first is read."""
    return _build(source, entry, at)


@functools.lru_cache(maxsize=32)
def _build(source: str, entry: str | None, at: int | None = None) -> KernelModel:
    return _reader(source).model(entry, at)


@functools.lru_cache(maxsize=8)
def _reader(source: str) -> _Reader:
    """A source's reading, shared by the models of its kernels: a file of thirty kernels is parsed,
    and its #defines, macros, functions and signatures read, once, not once a kernel."""
    return _Reader(source)


def parse_expression(expr: str):
    """The syntax tree of one expression (parsed as an initialiser, where C++ reads no declaration)."""
    root = parser().parse(f"auto kt_e = ({expr});".encode("utf-8")).root_node
    if root.has_error:
        return None
    decl = root.named_children[0] if root.named_children else None
    init = decl.child_by_field_name("declarator") if decl is not None else None
    value = init.child_by_field_name("value") if init is not None else None
    if value is None or value.type != "parenthesized_expression":
        return None
    named = [c for c in value.named_children if c.type != "comment"]
    return named[0] if len(named) == 1 else None


def define_value(expr: str, known: Mapping[str, int]) -> int | None:
    """A #define's value that is integer arithmetic over literals and the names in `known`, as C
    computes it; None for anything else. The names are put in as their numbers first: the parser
    reads `(TILE) - 2 * (R)` as a cast of `-2` to a type named TILE, the preprocessor as a difference."""
    tree = parse_expression(expr)
    if tree is None:
        return None
    lead = len("auto kt_e = (")  # where parse_expression puts the expression
    raw = expr.encode("utf-8")
    for n in sorted((n for n in nodes(tree) if n.type in ("identifier", "type_identifier") and text(n) in known),
                    key=lambda n: -n.start_byte):
        raw = raw[:n.start_byte - lead] + f"({known[text(n)]})".encode() + raw[n.end_byte - lead:]
    tree = parse_expression(raw.decode("utf-8"))
    return constant_value(tree, known) if tree is not None else None


def constant_value(node, known: Mapping[str, int]) -> int | None:
    """An integer constant expression's value as C computes it (division and remainder truncate
    toward zero), its names from `known`; None for anything else."""
    t = node.type
    if t == "number_literal":
        return int_literal(text(node))
    if t == "identifier":
        return known.get(text(node))
    if t == "parenthesized_expression":
        inner = [c for c in node.named_children if c.type != "comment"]
        return constant_value(inner[0], known) if len(inner) == 1 else None
    if t == "unary_expression":
        v = constant_value(node.child_by_field_name("argument"), known)
        op = text(node.child_by_field_name("operator"))
        return None if v is None else {"-": -v, "+": v, "~": ~v}.get(op)
    if t != "binary_expression":
        return None
    a = constant_value(node.child_by_field_name("left"), known)
    b = constant_value(node.child_by_field_name("right"), known)
    op = text(node.child_by_field_name("operator"))
    if a is None or b is None:
        return None
    if op in ("/", "%"):
        if b == 0:
            return None
        q = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)
        return q if op == "/" else a - q * b
    if op in ("<<", ">>") and not 0 <= b < 63:
        return None
    ops = {"+": a + b, "-": a - b, "*": a * b, "<<": a << b if op == "<<" else 0, ">>": a >> b if op == ">>" else 0,
           "&": a & b, "|": a | b, "^": a ^ b}
    return ops.get(op)


def base_name(entry: str) -> str:
    """A kernel's plain name: `ns::k<float, 4>` is `k`."""
    return entry.split("<")[0].split("::")[-1].strip()


def nodes(node) -> Iterator:
    """Every node under a node (itself first), in source order."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(n.children))


def unwrap(node):
    """The expression inside parentheses and casts."""
    while node is not None:
        if node.type == "parenthesized_expression":
            named = [c for c in node.named_children if c.type != "comment"]
            node = named[0] if len(named) == 1 else None
        elif node.type == "cast_expression":
            node = node.child_by_field_name("value")
        elif node.type == "call_expression" and callee(node.child_by_field_name("function")) in (
                "static_cast", "size_t", "long", "int", "unsigned"):
            args = node.child_by_field_name("arguments").named_children
            node = args[0] if len(args) == 1 else None
        else:
            return node
    return None


def id_of(node) -> tuple[str, int] | None:
    """(id, dimension) of `threadIdx.x`-style fields and OpenCL's id calls (get_global_id: "global")."""
    if node.type == "field_expression":
        arg, fld = node.child_by_field_name("argument"), node.child_by_field_name("field")
        if arg is not None and arg.type == "identifier" and text(arg) in CUDA_IDS and text(fld) in DIMS:
            return CUDA_IDS[text(arg)], DIMS.index(text(fld))
    if node.type == "call_expression":
        name = callee(node.child_by_field_name("function"))
        if name in OPENCL_IDS:
            args = node.child_by_field_name("arguments").named_children
            dim = int(text(args[0])) if args and text(args[0]).isdigit() else 0
            return OPENCL_IDS[name], dim
    return None


def function_declarator(node):
    """The declarator of a function definition or declaration that holds its name and parameters
    (past pointers and references in its return type), or None."""
    d = node.child_by_field_name("declarator")
    while d is not None and d.type != "function_declarator":
        d = d.child_by_field_name("declarator")
    return d


def function_name(fn) -> str:
    d = function_declarator(fn)
    return callee(d.child_by_field_name("declarator")) if d is not None else ""


MAX_EXPANSION = 4096  # characters of an index a function-like macro may expand to
MAX_EXPANSIONS = 256  # function-like macro calls one expression's form may expand


class _Forms:
    """Affine forms of expressions: locals assigned once inlined, `indices` (loop variables) and the
    thread and block ids as index symbols, everything else that holds still an invariant name."""

    def __init__(self, locals_: Mapping[str, str], indices: set[str], changing: frozenset[str],
                 pointers: frozenset[str] = frozenset(), macros: Mapping[str, tuple[tuple[str, ...], str]] | None = None):
        self.locals, self.indices, self.changing, self.pointers = locals_, indices, changing, pointers
        self.macros = macros or {}  # the file's function-like macros: name -> (parameters, body)
        self.expansions = 0  # macro calls expanded so far (a macro may call another twice, and so on)
        self.depth = 0

    def index(self, node, span: Span) -> IndexExpr:
        names: set[str] = set()
        loads: list[str] = []
        self._reads(node, names, loads, 0)
        return IndexExpr(text(node), span, self.form(node), frozenset(names), tuple(dict.fromkeys(loads)))

    def _expanded(self, call):
        """A call of one of the file's function-like macros (`IDX(i + 1, j)`), expanded as the
        preprocessor does: each parameter of its body replaced by its argument's text as written (no
        parentheses added: `#define AT(r, c) r * W + c` reads `AT(i + 1, 2)` as i + 1 * W + 2), as a
        syntax tree; None for anything else."""
        fn = call.child_by_field_name("function")
        if fn is None or fn.type != "identifier" or text(fn) not in self.macros or self.expansions >= MAX_EXPANSIONS:
            return None
        self.expansions += 1
        params, body = self.macros[text(fn)]
        args = [a for a in call.child_by_field_name("arguments").named_children if a.type != "comment"]
        tree = parse_expression(body)
        if len(args) != len(params) or tree is None:
            return None
        raw, base = tree.text, tree.start_byte
        values = dict(zip(params, (text(a) for a in args)))
        out, at = [], 0
        for n in nodes(tree):
            if n.type == "identifier" and text(n) in values:
                out += [raw[at:n.start_byte - base].decode("utf-8"), values[text(n)]]
                at = n.end_byte - base
        expanded = "".join(out) + raw[at:].decode("utf-8")
        # a macro that grows as it expands (each level calling the last twice) is not read
        return parse_expression(expanded) if len(expanded) <= MAX_EXPANSION else None

    def _reads(self, node, names: set, loads: list, depth: int) -> None:
        for n in nodes(node):
            if n.type == "subscript_expression":
                arr = unwrap(n.child_by_field_name("argument"))
                if arr is not None and arr.type == "identifier":
                    loads.append(text(arr))
            if n.type == "identifier":
                name = text(n)
                names.add(name)
                if name in self.locals and depth < 16 and name not in self.indices:
                    inner = parse_expression(self.locals[name])
                    if inner is not None:
                        self._reads(inner, names, loads, depth + 1)

    def form(self, node) -> Affine | None:
        got = self._form(node)
        if got is None and node is not None and self.still(node):
            return Affine.of(" ".join(text(node).split()))  # `N / TILE`: a name of its own that holds still
        return got

    def still(self, node) -> bool:
        """Whether an expression is the same in every thread and iteration: it reads no id that
        tells threads apart, no loop variable, no local that changes, no pointer and no element."""
        for n in nodes(node):
            found = id_of(n)
            if found is not None and found[0] not in SIZE_IDS:
                return False
            if n.type in ("subscript_expression", "call_expression", "assignment_expression",
                          "update_expression") and found is None:
                return False
            if n.type == "identifier":
                name = text(n)
                if name in self.indices or name in self.changing or name in self.pointers:
                    return False
                if name in self.locals and self.depth < 32:
                    inner = parse_expression(self.locals[name])
                    self.depth += 1
                    ok = inner is not None and self.still(inner)
                    self.depth -= 1
                    if not ok:
                        return False
        return True

    def _form(self, node) -> Affine | None:
        node = unwrap(node)
        if node is None:
            return None
        t = node.type
        if t == "number_literal":
            v = int_literal(text(node))
            return Affine.of(v) if v is not None else None
        found = id_of(node)
        if found is not None:
            kind, dim = found
            d = DIMS[dim]
            if kind in INDEX_IDS:
                return Affine.of(f"{kind}.{d}", index=True)
            if kind in SIZE_IDS:
                return Affine.of(f"{kind}.{d}")
            if kind == "global":
                return Affine(((f"blockIdx.{d}", Poly.of(f"blockDim.{d}")), (f"threadIdx.{d}", Poly.of(1))))
            return Affine((), Poly.of(f"blockDim.{d}") * Poly.of(f"gridDim.{d}"))
        if t == "identifier":
            name = text(node)
            if name in self.indices:
                return Affine.of(name, index=True)
            if name in self.locals and self.depth < 32:
                inner = parse_expression(self.locals[name])
                if inner is None:
                    return None
                self.depth += 1
                got = self.form(inner)
                self.depth -= 1
                return got
            if name in self.changing or name in self.pointers:
                return None
            return Affine.of(name)
        if t == "call_expression" and self.depth < 32:
            expanded = self._expanded(node)
            if expanded is not None:
                self.depth += 1
                got = self.form(expanded)
                self.depth -= 1
                return got
        if t == "unary_expression":
            v = self.form(node.child_by_field_name("argument"))
            op = text(node.child_by_field_name("operator"))
            return None if v is None else v if op == "+" else -v if op == "-" else None
        if t == "binary_expression":
            op = text(node.child_by_field_name("operator"))
            if op not in ("+", "-", "*", "<<"):
                return None
            a, b = self.form(node.child_by_field_name("left")), self.form(node.child_by_field_name("right"))
            if a is None or b is None:
                return None
            if op == "+":
                return a + b
            if op == "-":
                return a - b
            if op == "<<":
                k = b.invariant.number if b.invariant is not None else None
                return a.scale(Poly.of(1 << k)) if k is not None and 0 <= k < 63 else None
            if a.invariant is not None:
                return b.scale(a.invariant)
            if b.invariant is not None:
                return a.scale(b.invariant)
            return None  # a product of two indices
        return None


class _Reader:
    """A source read once: its functions, and the model of one kernel."""

    def __init__(self, source: str):
        self.source = source
        self.raw = source.encode("utf-8")
        self.blanked, self.dialect, self.marks = blank(self.raw)
        self.root = parser().parse(self.blanked).root_node
        self.words = DIALECT[self.dialect]
        self.raw_root = parser().parse(self.raw).root_node
        self.defines = self._defines()
        self.macros = self._macros()

    def _defines(self) -> dict[str, int]:
        """The file's #defines whose value is an integer: a literal, or integer arithmetic over
        literals and the #defines above it (`#define MASK_OFFSET (MASK_DIM / 2)`), as C computes it."""
        out = {}
        for n in nodes(self.root):
            if n.type == "preproc_def":
                value = n.child_by_field_name("value")
                v = None
                if value is not None:
                    v = int_literal(text(value).strip())
                    if v is None:
                        v = define_value(text(value).strip(), out)
                if v is not None:
                    out[text(n.child_by_field_name("name"))] = v
        return out

    def _macros(self) -> dict[str, tuple[tuple[str, ...], str]]:
        """The file's function-like macros whose body is one expression: name -> (parameters, body).
        A name defined more than once (under `#if`s) is left out: which one holds is the
        preprocessor's to say."""
        out, seen = {}, set()
        for n in nodes(self.root):
            if n.type == "preproc_function_def":
                name = text(n.child_by_field_name("name"))
                params, value = n.child_by_field_name("parameters"), n.child_by_field_name("value")
                if name in seen:
                    out.pop(name, None)
                elif params is not None and value is not None and parse_expression(text(value).strip()) is not None:
                    out[name] = (tuple(text(p) for p in params.named_children if p.type == "identifier"),
                                 text(value).strip())
                seen.add(name)
        return out

    def span(self, node) -> Span:
        return Span(node.start_byte, node.end_byte)

    @functools.cached_property
    def signatures(self) -> dict:
        """The file's kernels' signatures by name; a SignatureError is raised again at each use."""
        try:
            return {s.name: s for s in parse_kernels(self.source)}
        except SignatureError as e:
            return {"": e}

    @functools.cached_property
    def shared_marks(self) -> list[int]:
        """Where the file's words for shared memory stand (before the blanking)."""
        return sorted(leaf.start_byte for leaf in nodes(self.raw_root) if leaf.child_count == 0
                      and text(leaf) in self.words.shared_words)

    @functools.cached_property
    def by_name(self) -> dict[str, list]:
        return self.functions()

    def functions(self) -> dict[str, list]:
        out: dict[str, list] = {}
        for n in nodes(self.root):
            if n.type == "function_definition":
                out.setdefault(function_name(n), []).append(n)
        return out

    def is_kernel(self, fn) -> bool:
        body = fn.child_by_field_name("body")
        start = self.marks.head(fn)
        return body is not None and any(start <= o < body.start_byte for o in self.marks.kernels)

    def model(self, entry: str | None, at: int | None = None) -> KernelModel:
        by_name = self.by_name
        kernels = [fn for fns in by_name.values() for fn in fns if self.is_kernel(fn)]
        if not kernels:
            raise ModelError("no __global__ or __kernel function in the source")
        kernels.sort(key=lambda n: n.start_byte)
        if entry is None:
            fn = kernels[0]
        else:
            fn = next((k for k in kernels if function_name(k) == base_name(entry)
                       and (at is None or k.start_byte == at)), None)
            if fn is None:
                raise ModelError(f"no kernel named {entry} (the source has "
                                 f"{', '.join(function_name(k) for k in kernels)})")
        name = function_name(fn)
        sigs = self.signatures
        if isinstance(sigs.get(""), SignatureError):
            raise ModelError(str(sigs[""])) from None
        if name not in sigs:
            raise ModelError(f"the kernel {name} could not be read")
        sig = sigs[name]
        if entry is not None and "<" in entry and sig.is_template:
            # the instantiation the entry names (`heat_step_t<double>`), not the file's first one
            try:
                sig = parse_kernel(self.source, entry)
            except SignatureError:
                pass
        callees = self._callees(fn, by_name)
        walk = _Walk(self, fn, sig, callees)
        return walk.model(entry or name)

    def _callees(self, fn, by_name: dict[str, list]) -> list:
        """The functions of the file the kernel calls, directly or not, in source order (never a kernel)."""
        seen: set[int] = set()
        out = []
        todo = [fn]
        while todo:
            f = todo.pop()
            for n in nodes(f):
                if n.type != "call_expression":
                    continue
                for g in by_name.get(callee(n.child_by_field_name("function")), []):
                    if g.id != fn.id and g.id not in seen and not self.is_kernel(g):
                        seen.add(g.id)
                        out.append(g)
                        todo.append(g)
        return sorted(out, key=lambda n: n.start_byte)


class _Walk:
    """The kernel and its callees walked once."""

    def __init__(self, reader: _Reader, fn, sig: KernelSignature, callees: list):
        self.r = reader
        self.fn = fn
        self.sig = sig
        self.callees = callees
        self.pointers = {a.name for a in sig.args if a.pointer}
        self.local_args = {a.name for a in sig.args if a.pointer and a.local}  # OpenCL's __local workspace
        self.loops: list[Loop] = []
        self.loop_nodes: list = []
        self.accesses: list[Access] = []
        self.accumulators: list[Accumulator] = []
        self.barriers: list[Barrier] = []
        self.atomics: list[Call] = []
        self.shuffles: list[Call] = []
        self.calls: list[Call] = []
        self.arrays: list[Array] = []
        self.returns: list[Span] = []
        self.escaped: list[str] = []  # arguments whose element's address the kernel takes (`&p[i]`)
        body = fn.child_by_field_name("body")
        self.inits, self.assigned, self.declared, self.types, self.scalars = _declarations(body)
        self.ptr_alias: dict[str, tuple[str, str]] = {}
        pointer_locals = self._pointer_decls(body)
        for n, v in self.inits.items():
            if v is not None and n not in self.assigned and n in pointer_locals:
                root = self._pointer_root(v)
                if root is not None:
                    self.ptr_alias[n] = root
        # other local pointers into arguments (of another type: `reinterpret_cast<const pack8 *>(x)`,
        # moved after, made by a call or a choice): the arguments their initialiser names, whose
        # elements they reach in a way no index tells
        self.cast_alias: dict[str, tuple[str, ...]] = {}
        for n, v in self.inits.items():
            if v is not None and n not in self.ptr_alias and n in pointer_locals:
                roots = [r for x in (text(i) for i in nodes(v) if i.type == "identifier")
                         for r in ((x,) if x in self.pointers else (self.ptr_alias[x][0],) if x in self.ptr_alias
                                   else self.cast_alias.get(x, ()))]
                if roots:
                    self.cast_alias[n] = tuple(dict.fromkeys(roots))
        self.locals = {n: text(v) for n, v in self.inits.items() if v is not None and not self.assigned.get(n)}
        self.changing = frozenset(self.declared - set(self.locals))
        self.shared_marks = reader.shared_marks
        self.shared = {declarator_name(d)[0] for f in [fn] + callees
                       for n in nodes(f.child_by_field_name("body")) if n.type == "declaration" and self._is_shared(n)
                       for d in n.children_by_field_name("declarator")}
        # a local pointer to the dynamic shared memory a helper of the file hands out (the samples'
        # `T *sdata = SharedMemory<T>();`, whose conversion returns its `extern __shared__` array)
        givers = self._shared_givers()
        self.given_shared = {n for n, v in self.inits.items() if v is not None and n in pointer_locals
                             and any(c.type == "call_expression" and callee(c.child_by_field_name("function"))
                                     in givers for c in nodes(v))}
        self.shared |= self.given_shared

    @staticmethod
    def _pointer_decls(body) -> set[str]:
        """The locals the body declares as pointers with a value (`float *o = out + i;`)."""
        out = set()
        for n in nodes(body):
            if n.type == "init_declarator":
                d = n.child_by_field_name("declarator")
                if d is not None and d.type == "pointer_declarator":
                    out.add(declarator_name(d)[0])
        return out

    def _pointer_root(self, value) -> tuple[str, str] | None:
        v = unwrap(value)
        if v is None:
            return None
        if v.type == "identifier":
            name = text(v)
            if name in self.pointers:
                return name, "0"
            return self.ptr_alias.get(name)
        if v.type == "binary_expression" and text(v.child_by_field_name("operator")) in ("+", "-"):
            left, right = v.child_by_field_name("left"), v.child_by_field_name("right")
            minus = text(v.child_by_field_name("operator")) == "-"
            for p, off in ((left, right),) if minus else ((left, right), (right, left)):
                got = self._pointer_root(p)
                if got is not None:
                    step = f"-({text(off)})" if minus else text(off)
                    return got[0], step if got[1] in ("", "0") else f"{got[1]} + {step}"
        return None

    # the walk -------------------------------------------------------------------------------------
    def model(self, entry: str) -> KernelModel:
        functions = [self._function(self.fn, True)] + [self._function(g, False) for g in self.callees]
        self._arrays([self.fn] + self.callees)
        for g, f in zip([self.fn] + self.callees, functions):
            self.function = f
            self.under: list[Span] = []
            self._walk(g.child_by_field_name("body"), [], True)
        body = self.fn.child_by_field_name("body")
        ids = set()
        for n in nodes(body):
            found = id_of(n)
            if found is not None:
                ids.add(found)
        dims = frozenset(d for _, d in ids)
        indices = []
        forms = _Forms(self.locals, set(), self.changing, frozenset(self.pointers), self.r.macros)
        for name, value in self.inits.items():
            if value is None:
                continue
            reads = tuple(sorted({id_of(n) for n in nodes(value) if id_of(n) is not None}))
            if not reads:
                continue
            form = forms.form(value)
            decl = value.parent.parent if value.parent is not None else value
            indices.append(ThreadIndex(name, text(value), reads, _is_global(form), self.r.span(decl), form,
                                       self._fixed(value, form)))
        bad = first_error(self.fn) if self.fn.has_error else None
        error = ""
        if self.fn.has_error:
            line = (bad.start_point[0] + 1) if bad is not None else self.fn.start_point[0] + 1
            error = f"the parser could not read line {line} of it"
        return KernelModel(
            self.r.source, self.r.dialect, entry, self.sig, tuple(functions), tuple(self.loops),
            tuple(self.accesses), tuple(self._against(self._accumulators())), tuple(self.barriers),
            tuple(self.atomics), tuple(self.shuffles), tuple(self.calls), tuple(self.arrays), tuple(indices), dims,
            frozenset(ids), dict(self.r.defines), dict(self.locals), self.changing, frozenset(self.pointers),
            tuple(self.returns), tuple(self.r.span(c) for c in body.named_children if c.type != "comment"), error,
            dict(self.ptr_alias), dict(self.cast_alias), self._opaque(body), frozenset(self.shared | self.local_args),
            self._arg_types(), self._guard(body), dict(self.types), frozenset(self.scalars), dict(self.r.macros))

    def _fixed(self, value, form: Affine | None) -> tuple[int, Span, int] | None:
        """The literal a global index takes as its block's thread count (`blockIdx.x * 256 +
        threadIdx.x`), where it stands and the dimension; None for any other initialiser."""
        if form is None or not form.const.is_zero or len(form.coeffs) != 2:
            return None
        for d, dim in enumerate(DIMS):
            count = form.coeff(f"blockIdx.{dim}").number
            if form.coeff(f"threadIdx.{dim}").number != 1 or not count or count < 0:
                continue
            for n in nodes(value):
                up = n.parent
                while up is not None and up.type == "parenthesized_expression":
                    up = up.parent
                if n.type != "number_literal" or int_literal(text(n)) != count or up is None or \
                        up.type != "binary_expression" or text(up.child_by_field_name("operator")) != "*":
                    continue
                sides = [unwrap(up.child_by_field_name(k)) for k in ("left", "right")]
                if any(c is not None and id_of(c) == ("blockIdx", d) for c in sides):
                    return count, self.r.span(n), d
        return None

    def _opaque(self, body) -> tuple[str, ...]:
        """The pointer arguments (or local pointers into them) the kernel's body uses other than in an
        access the walk read or in the initialiser of a local pointer into them: a cast to another
        type, an element's address taken (but for a cache-hint intrinsic), a call's argument, a
        pointer moved: the casts' first, the last written first, then the addresses taken, then the other
        uses, the last first."""
        names = self.pointers | set(self.ptr_alias)
        read = {a.span.start for a in self.accesses if a.function == function_name(self.fn) and (a.deref or a.call)}
        out = [r for roots in reversed(self.cast_alias.values()) for r in roots] + self.escaped
        for n in reversed([n for n in nodes(body) if n.type == "identifier" and text(n) in names]):
            parent = n.parent
            ok = parent is not None and parent.type == "subscript_expression" and \
                parent.child_by_field_name("argument") == n or _read_through(n, read)
            decl = n
            while decl is not None and decl.type not in ("init_declarator", "compound_statement"):
                decl = decl.parent
            if not ok and decl is not None and decl.type == "init_declarator":
                target = decl.child_by_field_name("declarator")
                ok = target is not None and target.type == "pointer_declarator" and \
                    declarator_name(target)[0] in self.ptr_alias
            if not ok:
                out.append(self.ptr_alias.get(text(n), (text(n), ""))[0])
        return tuple(dict.fromkeys(out))

    def _arg_types(self) -> dict[str, str]:
        """Each pointer argument's element type as written, qualifiers left out (`floatX`, `T`)."""
        out = {}
        d = function_declarator(self.fn)
        params = d.child_by_field_name("parameters") if d is not None else None
        for p in params.named_children if params is not None else []:
            if p.type != "parameter_declaration":
                continue
            name, pointer = declarator_name(p.child_by_field_name("declarator"))
            if pointer and name:
                words = [w for w in text(p.child_by_field_name("type")).split()
                         if w not in ("const", "volatile", "__restrict__", "restrict", "__restrict")]
                out[name] = " ".join(words)
        return out

    def _guard(self, body) -> Guard | None:
        """The first `if` of the body when it bounds one name: `if (i < n)` with no else, or
        `if (i >= n) return;` (`n > i` and `n <= i` read the same)."""
        stmt = next((c for c in body.named_children if c.type == "if_statement"), None)
        if stmt is None or stmt.child_by_field_name("alternative") is not None:
            return None
        cond = unwrap(stmt.child_by_field_name("condition"))
        if cond is None or cond.type == "condition_clause":
            named = [c for c in (cond.named_children if cond is not None else []) if c.type != "comment"]
            cond = unwrap(named[0]) if len(named) == 1 else None
        if cond is None or cond.type != "binary_expression":
            return None
        op = text(cond.child_by_field_name("operator"))
        left, right = unwrap(cond.child_by_field_name("left")), unwrap(cond.child_by_field_name("right"))
        if left is None or right is None:
            return None
        then = stmt.child_by_field_name("consequence")
        named = [c for c in then.named_children if c.type != "comment"] if then is not None else []
        returns = then is not None and (then.type == "return_statement" or then.type == "compound_statement"
                                        and len(named) == 1 and named[0].type == "return_statement")
        swapped = {">": "<", ">=": "<=", "<": ">", "<=": ">="}.get(op, op)
        for var, bound, o in ((left, right, op), (right, left, swapped)):
            if var.type == "identifier" and (o == "<" or o == ">=" and returns):
                return Guard(text(var), text(bound), "if" if o == "<" else "return", self.r.span(stmt))
        return None

    def _function(self, fn, kernel: bool) -> Function:
        d = function_declarator(fn)
        name = d.child_by_field_name("declarator") if d is not None else None
        start = self.r.marks.head(fn)
        while start < fn.start_byte and self.r.raw[start:start + 1].isspace():
            start += 1
        return Function(function_name(fn), Span(start, fn.end_byte), self.r.span(fn.child_by_field_name("body")),
                        self.r.span(name) if name is not None else Span(0, 0), kernel)

    def _walk(self, node, loops: list[int], unconditional: bool) -> None:
        t = node.type
        if t == "return_statement" and self.function.kernel:
            self.returns.append(self.r.span(node))
        if t in ("for_statement", "while_statement", "do_statement", "for_range_loop"):
            index = self._loop(node, loops)
            init = node.child_by_field_name("initializer")
            self.under.append(self.r.span(node))
            for c in node.children:
                self._walk(c, loops if init is not None and c.id == init.id else loops + [index],
                           unconditional if init is not None and c.id == init.id else False)
            self.under.pop()
            return
        if t in ("if_statement", "conditional_expression", "switch_statement"):
            cond = node.child_by_field_name("condition")
            self.under.append(self.r.span(node))
            for c in node.children:
                self._walk(c, loops, unconditional and cond is not None and c.id == cond.id)
            self.under.pop()
            return
        if t == "binary_expression" and text(node.child_by_field_name("operator")) in ("&&", "||"):
            self._walk(node.child_by_field_name("left"), loops, unconditional)
            self.under.append(self.r.span(node))
            self._walk(node.child_by_field_name("right"), loops, False)
            self.under.pop()
            return
        loop = loops[-1] if loops else None
        if t == "call_expression":
            self._call(node, loop, loops, unconditional)
        if t == "subscript_expression":
            self._access(node, loops, unconditional)
        if t == "pointer_expression" and text(node.child_by_field_name("operator")) == "*":
            self._deref(node, loops, unconditional)
        if t == "identifier" and self.function.kernel and loops and \
                text(node) in set(self.pointers) | set(self.ptr_alias) | set(self.cast_alias):
            for lp in loops:
                self.loops[lp] = replace(self.loops[lp], accesses=self.loops[lp].accesses + 1)
        for c in node.children:
            self._walk(c, loops, unconditional)

    def _call(self, node, loop: int | None, loops: list[int], unconditional: bool) -> None:
        name = callee(node.child_by_field_name("function"))
        w = self.r.words
        span = self.r.span(node)
        self.calls.append(Call(name, span, loop, self.function.name))
        if name in w.barriers or name in w.warp_barriers:
            self.barriers.append(Barrier(name, span, loop, "block" if name in w.barriers else "warp",
                                         self.function.name, unconditional and not self.under))
        elif name in w.group_syncs and self._group_scope(node) is not None:
            self.barriers.append(Barrier(name, span, loop, self._group_scope(node), self.function.name,
                                         unconditional and not self.under))
        elif name.startswith(w.atomic_prefixes):
            args = node.child_by_field_name("arguments").named_children
            array = _address_of(args[0], self.pointers, self.ptr_alias) if args else ""
            self.atomics.append(Call(name, span, loop, self.function.name, array))
        elif name in w.shuffles:
            self.shuffles.append(Call(name, span, loop, self.function.name))
        if name in w.half_loads | w.half_stores and self.function.kernel:
            args = [c for c in node.child_by_field_name("arguments").named_children if c.type != "comment"]
            want = 2 if name in w.half_loads else 3
            if len(args) == want and args[-1].type == "identifier":
                array, via, offset = self._root(text(args[-1]))
                if array in self.pointers:
                    store = name in w.half_stores
                    self._add(array, args[-2], via, offset, store, not store, span, loops, unconditional, name,
                              self.r.span(args[0]) if store else None)

    def _root(self, name: str) -> tuple[str, str, str]:
        if name in self.ptr_alias:
            root, offset = self.ptr_alias[name]
            return root, name, offset
        return name, "", ""

    def _access(self, node, loops: list[int], unconditional: bool) -> None:
        parent = node.parent
        if parent is not None and parent.type == "subscript_expression" and \
                parent.child_by_field_name("argument") is not None and parent.child_by_field_name("argument").id == node.id:
            return  # tile[i][j]: the outermost subscript is the element
        chain, arr = [], node
        while arr is not None and arr.type == "subscript_expression":
            idx_list = arr.child_by_field_name("indices") or arr.child_by_field_name("index")
            inner = [c for c in idx_list.named_children if c.type != "comment"] \
                if idx_list is not None and idx_list.type == "subscript_argument_list" else [idx_list]
            if len(inner) != 1 or inner[0] is None:
                return
            chain.append(inner[0])
            arr = unwrap(arr.child_by_field_name("argument"))
        if arr is not None and arr.type != "identifier":  # `pack.v[k]`: a thread's own array too
            self._register_index(node, loops, chain)
        if arr is None or arr.type != "identifier":
            return
        chain.reverse()
        array, via, offset = self._root(text(arr))
        self._register_index(node, loops, chain)
        if array in self.pointers:
            if self.function.kernel and len(chain) == 1:
                self._element(node, array, chain[0], via, offset, loops, unconditional)
            return
        if array in self.ptr_alias:
            return
        read, write = _direction(node)
        self._add(array, chain[0], "", "", write, read, self.r.span(node), loops, unconditional, "", None,
                  space="array", more=chain[1:])

    def _deref(self, node, loops: list[int], unconditional: bool) -> None:
        if not self.function.kernel:
            return
        inner = unwrap(node.child_by_field_name("argument"))
        if inner is not None and inner.type == "identifier":  # `*out_btc`, a local pointer into an array
            array, via, offset = self._root(text(inner))
            if via and array in self.pointers:
                read, write = _direction(node)
                self._add(array, inner, via, offset, write, read, self.r.span(node), loops, unconditional, "", None,
                          deref=True, index_text="0")
            return
        if inner is None or inner.type != "binary_expression" or text(inner.child_by_field_name("operator")) != "+":
            return
        left, right = unwrap(inner.child_by_field_name("left")), inner.child_by_field_name("right")
        if left is None or left.type != "identifier":
            return
        array, via, offset = self._root(text(left))
        if array not in self.pointers:
            return
        read, write = _direction(node)
        self._add(array, right, via, offset, write, read, self.r.span(node), loops, unconditional, "", None,
                  deref=True)

    def _element(self, node, array, index, via, offset, loops, unconditional) -> None:
        parent = node.parent
        while parent is not None and parent.type == "parenthesized_expression":
            parent = parent.parent
        call = value = None
        write = read = False
        if parent is not None and parent.type == "assignment_expression" and \
                parent.child_by_field_name("left").start_byte == node.start_byte:
            write, read = True, text(parent.child_by_field_name("operator")) != "="
        elif parent is not None and parent.type == "update_expression":
            write = read = True
        elif parent is not None and parent.type == "pointer_expression" and \
                text(parent.child_by_field_name("operator")) == "&":
            call, value = self._intrinsic(parent)
            if call is None:
                write = read = True  # its address escapes: taken as both
                self.escaped.append(array)
            elif callee(call.child_by_field_name("function")) in self.r.words.loads:
                read = True
            else:
                write = True
        else:
            read = True
        span = self.r.span(call) if call is not None else self.r.span(node)
        self._add(array, index, via, offset, write, read, span, loops, unconditional,
                  callee(call.child_by_field_name("function")) if call is not None else "",
                  self.r.span(value) if value is not None else None)

    def _add(self, array, index_node, via, offset, write, read, span, loops, unconditional, call, value_span,
             space: str = "", deref: bool = False, more: list = (), index_text: str | None = None) -> None:
        index = text(index_node) if index_text is None else index_text
        if via and offset != "0":
            index = f"{offset} + ({index})"
        names = {self.loops[i].var for i in loops if self.loops[i].var}
        forms = _Forms(self.locals if self.function.kernel else {}, names, self.changing if self.function.kernel
                       else frozenset(), frozenset(self.pointers), self.r.macros)
        node = parse_expression(index) if via and offset != "0" or index_text is not None else index_node
        expr = forms.index(node, self.r.span(index_node)) if node is not None else \
            IndexExpr(index, self.r.span(index_node), None)
        if space == "array":
            space = "shared" if array in self.shared else "local"
        if more:  # tile[i][j]: each dimension's index, and the element's offset in the array's order
            exprs = [expr] + [forms.index(m, self.r.span(m)) for m in more]
            dims = next((a.dims for a in self.arrays if a.name == array), None) or self._dims(array)
            flat = self._flatten(exprs, dims)
            index = "][".join(e.text for e in exprs)
            expr = IndexExpr(index, Span(index_node.start_byte, more[-1].end_byte), flat,
                             frozenset().union(*(e.names for e in exprs)),
                             tuple(dict.fromkeys(x for e in exprs for x in e.loads)))
        self.accesses.append(Access(array, index, write, read, span, self.r.span(index_node),
                                    loops[-1] if loops else None, unconditional, via, offset if via else "",
                                    tuple(self.under), call, value_span,
                                    space or ("shared" if array in self.local_args else "global"), self.function.name,
                                    expr, deref))

    def _dims(self, array: str) -> tuple[str, ...]:
        for fn in [self.fn] + self.callees:
            for n in nodes(fn.child_by_field_name("body")):
                if n.type == "declaration":
                    for d in n.children_by_field_name("declarator"):
                        if declarator_name(d)[0] == array:
                            return _array_dims(d)
        return ()

    def _flatten(self, exprs: list[IndexExpr], dims: tuple[str, ...]) -> Affine | None:
        """The element's offset from the array's start: i * dims[1] + j for tile[i][j]."""
        if len(dims) != len(exprs) or any(e.affine is None for e in exprs):
            return None
        total = exprs[0].affine
        for e, d in zip(exprs[1:], dims[1:]):
            node = parse_expression(d)
            size = _Forms({}, set(), frozenset()).form(node) if node is not None else None
            if size is None or size.invariant is None:
                return None
            total = total.scale(size.invariant) + e.affine
        return total

    def _intrinsic(self, address):
        args = address.parent
        call = args.parent if args is not None and args.type == "argument_list" else None
        if call is None or call.type != "call_expression":
            return None, None
        name = callee(call.child_by_field_name("function"))
        named = [c for c in args.named_children if c.type != "comment"]
        if name in self.r.words.loads and len(named) == 1:
            return call, None
        if name in self.r.words.stores and len(named) == 2 and named[0].id == address.id:
            return call, named[1]
        return None, None

    def _register_index(self, node, loops: list[int], indices: list = ()) -> None:
        """Mark the loops whose variable indexes an array that is no pointer argument."""
        arr = unwrap(node.child_by_field_name("argument"))
        if arr is None or (arr.type == "identifier" and
                           text(arr) in set(self.pointers) | set(self.ptr_alias) | set(self.cast_alias)):
            return
        if arr.type == "identifier" and text(arr) not in self.inits and text(arr) not in self.declared \
                and not self.function.kernel:
            return  # a helper's parameter: a pointer the helper was given
        # every dimension's index: `tile[ty + j][tx]` is indexed by j too
        names = {text(n) for idx in (indices or [node.child_by_field_name("indices") or node])
                 for n in nodes(idx) if n.type == "identifier"}
        for lp in loops:
            if self.loops[lp].var and self.loops[lp].var in names:
                self.loops[lp] = replace(self.loops[lp], register_index=True)

    def _shared_givers(self) -> set[str]:
        """The structs and functions of the file (kernels aside) that declare an `extern` shared array."""
        out = set()
        for n in nodes(self.r.root):
            body = n.child_by_field_name("body")
            if body is None or n.type not in ("struct_specifier", "class_specifier", "function_definition") or \
                    (n.type == "function_definition" and self.r.is_kernel(n)):
                continue
            if any(d.type == "declaration" and self._is_shared(d) and "extern" in text(d).split() for d in nodes(body)):
                name = n.child_by_field_name("name") if n.type != "function_definition" else None
                out.add(text(name) if name is not None else function_name(n))
        return out

    def _group_scope(self, call) -> str | None:
        """A cooperative group's meeting (`cg::sync(g)`, `g.sync()`): "block" where `g` is the block
        (made by `this_thread_block()` or declared `thread_block`), "warp" where it is a tile (a
        `thread_block_tile`, `tiled_partition`, coalesced or generic group); None where `g` is no
        group at all (a function of the file that happens to be called `sync`)."""
        fn = call.child_by_field_name("function")
        args = call.child_by_field_name("arguments")
        group = fn.child_by_field_name("argument") if fn.type == "field_expression" else \
            (args.named_children[0] if args is not None and args.named_children else None)
        words = set(names(group)) if group is not None else set()
        for name in list(words):
            init = self.inits.get(name)
            words |= set(self.types.get(name, "").replace("::", " ").replace("<", " ").replace(">", " ").split())
            words |= {callee(n.child_by_field_name("function")) for n in nodes(init) if n.type == "call_expression"} \
                if init is not None else set()
        if group is not None and group.type == "call_expression":
            words.add(callee(group.child_by_field_name("function")))
        if words & self.r.words.block_groups:
            return "block"
        return "warp" if words & self.r.words.tile_groups else None

    def _is_shared(self, decl) -> bool:
        start = decl.start_byte
        line = self.r.raw.rfind(b"\n", 0, start) + 1
        return any(line <= m < decl.end_byte for m in self.shared_marks)

    def _arrays(self, fns: list) -> None:
        for name in sorted(self.given_shared):
            decl = next(n for n in nodes(self.fn.child_by_field_name("body")) if n.type == "declaration"
                        and name in {declarator_name(d)[0] for d in n.children_by_field_name("declarator")})
            ctype = " ".join(w for w in self.types.get(name, "").split() if w not in ("const", "volatile"))
            self.arrays.append(Array(name, "shared", ctype, ("",), self.r.span(decl), function_name(self.fn), (None,)))
        for fn in fns:
            for n in nodes(fn.child_by_field_name("body")):
                if n.type != "declaration":
                    continue
                shared = self._is_shared(n)
                ctype = " ".join(w for w in text(n.child_by_field_name("type")).split()
                                 if w not in ("const", "volatile"))
                for d in n.children_by_field_name("declarator"):
                    dims = _array_dims(d)
                    name = declarator_name(d)[0]
                    if not dims or not name:
                        continue
                    sizes = tuple(self._value(x) for x in dims)
                    self.arrays.append(Array(name, "shared" if shared else "local", ctype, tuple(dims),
                                             self.r.span(n), function_name(fn), sizes))

    def _value(self, expr: str) -> int | None:
        node = parse_expression(expr) if expr else None
        form = _Forms({}, set(), frozenset()).form(node) if node is not None else None
        if form is None or form.invariant is None:
            return None
        return form.invariant.evaluate(self.r.defines)

    # loops ------------------------------------------------------------------------------------------
    def _loop(self, node, loops: list[int]) -> int:
        span = self.r.span(node)
        prev = node.prev_named_sibling
        pragma = None
        if prev is not None and prev.type == "preproc_call" and text(prev.child_by_field_name("directive")) == "#pragma":
            arg = text(prev.child_by_field_name("argument")).split()
            if arg and arg[0] == "unroll":
                end = prev.end_byte
                while end > prev.start_byte and self.r.raw[end - 1:end] in (b"\n", b"\r"):
                    end -= 1
                pragma = Span(prev.start_byte, end)
        body = node.child_by_field_name("body")
        kind = {"for_statement": "for", "while_statement": "while", "do_statement": "do"}.get(node.type, "range")
        depth = sum(1 for i in loops if self.loops[i].function == self.function.name)
        lp = Loop(self.function.name, self.function.kernel, depth=depth, span=span, pragma=pragma,
                  body=self.r.span(body) if body is not None else Span(0, 0), kind=kind,
                  parent=loops[-1] if loops else None)
        if node.type == "for_statement":
            lp = self._for(node, lp, loops)
        self.loops.append(lp)
        self.loop_nodes.append(node)
        return len(self.loops) - 1

    def _for(self, node, lp: Loop, loops: list[int]) -> Loop:
        init, cond, update = (node.child_by_field_name(k) for k in ("initializer", "condition", "update"))
        var = start = ""
        start_node = None
        if init is not None and init.type == "declaration":
            d = init.child_by_field_name("declarator")
            if d is not None and d.type == "init_declarator":
                var, start_node = text(d.child_by_field_name("declarator")), d.child_by_field_name("value")
        elif init is not None and init.type == "assignment_expression":
            var, start_node = text(init.child_by_field_name("left")), init.child_by_field_name("right")
        start = text(start_node) if start_node is not None else ""
        bound, inclusive, compare = "", False, ""
        c = unwrap(cond) if cond is not None else None
        bound_node = None
        if c is not None and c.type == "binary_expression" and text(c.child_by_field_name("left")) == var:
            compare = text(c.child_by_field_name("operator"))
            if compare in ("<", "<=", "!=", ">", ">="):
                bound_node = c.child_by_field_name("right")
                bound, inclusive = text(bound_node), compare in ("<=", ">=")
        step, op, halving, step_node = "", "", False, None
        u = update
        if u is not None and u.type == "update_expression" and text(u.child_by_field_name("argument")) == var:
            op = "++" if "++" in text(u) else "--"
            step = "1" if op == "++" else ""
            step_node = None
        elif u is not None and u.type == "assignment_expression" and text(u.child_by_field_name("left")) == var:
            op = text(u.child_by_field_name("operator"))
            right = u.child_by_field_name("right")
            if op == "+=":
                step, step_node = text(right), right
            elif op == "=" and right.type == "binary_expression" and \
                    text(right.child_by_field_name("left")) == var:
                inner = text(right.child_by_field_name("operator"))
                if inner == "+":
                    op, step_node = "+=", right.child_by_field_name("right")
                    step = text(step_node)
                elif inner in ("/", ">>", "*", "<<"):
                    op, step_node = inner + "=", right.child_by_field_name("right")
            else:
                step_node = right
            halving = (op, integer(text(step_node) if step_node is not None else "")) in (("/=", 2), (">>=", 1))
        outer = {self.loops[i].var for i in loops if self.loops[i].var}
        forms = _Forms(self.locals if self.function.kernel else {}, outer, self.changing, frozenset(self.pointers),
                       self.r.macros)
        start_form = forms.form(start_node) if start_node is not None else None
        bound_form = forms.form(bound_node) if bound_node is not None else None
        step_form = forms.form(step_node) if step_node is not None else \
            Affine.of(1 if op == "++" else -1) if op in ("++", "--") else None
        trip = None
        s_, b_, st_ = (integer(x) for x in (start, bound, step))
        if s_ is not None and b_ is not None and st_ and compare in ("<", "<=", "!=", ""):
            trip = max(0, (b_ + (1 if inclusive else 0) - s_ + st_ - 1) // st_)
        strided, role, dim = False, "serial", None
        if update is not None:
            reads = {id_of(n) for n in nodes(update)} - {None}
            if not reads and step in self.inits and self.inits[step] is not None:
                reads = {id_of(n) for n in nodes(self.inits[step])} - {None}
            kinds = {k for k, _ in reads}
            strided = bool(kinds & {"blockDim", "gridDim", "global_size"})
            if halving or op in ("*=", "<<="):
                role = "tree"
            elif op == "+=" and step_form is not None:
                role, dim = _stride_role(step_form, start_form)
        return replace(lp, var=var, start=start, bound=bound, inclusive=inclusive, step=step, trip=trip,
                       strided_by_threads=strided, halving=halving, role=role, dim=dim, compare=compare, update=op,
                       start_form=start_form, bound_form=bound_form, step_form=step_form)

    # accumulators -------------------------------------------------------------------------------------
    def _accumulators(self) -> list[Accumulator]:
        """What each loop of the kernel carries from one iteration to the next, loop after loop: its
        online pairs first, then the other values in the order of their first updates."""
        out: list[Accumulator] = []
        for index, (lp, node) in enumerate(zip(self.loops, self.loop_nodes)):
            body = node.child_by_field_name("body")
            if lp.in_kernel and body is not None:
                out += self._carried(index, node, body)
        return out

    def _carried(self, index: int, loop, body) -> list[Accumulator]:
        own = {declarator_name(d)[0] for d in nodes(body) if d.type in ("declaration", "init_declarator")}
        own.add(self.loops[index].var)
        loop_vars = {lp.var for lp in self.loops if lp.var}
        updates: dict[str, list[tuple[str, object]]] = {}  # name -> [(form, the update)]
        for n in nodes(body):
            written = target(n)
            if written is None or written.type != "identifier" or text(written) in own or text(written) in loop_vars \
                    or self._innermost(n) != index:
                continue
            updates.setdefault(text(written), []).append((self._form(n, text(written), body, own), n))
        if not updates:
            return []
        # where each may be read: its own updates, and for a maximum the test guarding it
        allowed = {name: [u for _, u in ups] for name, ups in updates.items()}
        for name, ups in updates.items():
            allowed[name] += [_guarding_if(u).child_by_field_name("condition") for f, u in ups
                              if f in ("max-if", "min-if")]
        reads: dict[str, list] = {}
        for n in nodes(body):
            if n.type == "identifier" and text(n) in updates and not any(_inside(n, r) for r in allowed[text(n)]):
                reads.setdefault(text(n), []).append(n)
        ops = {name: {f.split("-")[0] for f, _ in ups} for name, ups in updates.items()}
        out: list[Accumulator] = []
        paired: set[str] = set()
        for m, m_ops in ops.items():
            if m_ops != {"max"} or m not in reads:
                continue
            for s_, s_ops in ops.items():
                if s_ == m or "rescale" not in s_ops or not s_ops <= {"sum", "rescale"} or s_ in reads:
                    continue
                both = allowed[s_] + [u for _, u in updates[m]]
                if not all(any(_inside(r, u) for u in allowed[s_]) or _local_only_in(r, loop, body, both)
                           for r in reads[m]):
                    continue
                exps = {callee(c.child_by_field_name("function")) for _, u in updates[s_] for c in nodes(u)
                        if c.type == "call_expression" and callee(c.child_by_field_name("function")) in self.r.words.exp}
                if len(exps) != 1:
                    continue
                out.append(self._accumulator(m, "online", index, updates[m], (), partner=s_, exp=exps.pop()))
                paired |= {m, s_}
                break
        for name, name_ops in ops.items():
            if name in paired:
                continue
            op = next(iter(name_ops)) if len(name_ops) == 1 and name_ops <= {"sum", "max", "min"} else "other"
            out.append(self._accumulator(name, op, index, updates[name], reads.get(name, ())))
        return out

    def _accumulator(self, var: str, op: str, loop: int, updates: list, reads, **more) -> Accumulator:
        init = self.inits.get(var)
        return Accumulator(var, op, loop, text(init) if init is not None else "", self.r.span(updates[0][1]),
                           self.types.get(var, ""), reads=tuple(self.r.span(r) for r in reads), **more)

    def _innermost(self, node) -> int | None:
        """The innermost loop of the kernel whose body holds `node`."""
        best = None
        for index, lp in enumerate(self.loops):
            if lp.in_kernel and lp.body.start <= node.start_byte and node.end_byte <= lp.body.end:
                best = index if best is None or lp.body.within(self.loops[best].body) else best
        return best

    def _form(self, n, v: str, body, own: set[str]) -> str:
        """How one update changes the carried value v: "sum", "max", "min", "rescale" (`s = s * f +
        e`, f an exponential), "max-if"/"min-if" (under the `if` that compares), or "other"."""
        w = self.r.words
        if n.type == "update_expression":
            return "sum" if text(n.child_by_field_name("operator")) == "++" else "other"
        op = text(n.child_by_field_name("operator"))
        rhs = unwrap(n.child_by_field_name("right"))
        if rhs is None:
            return "other"
        if op in ("+=", "-="):
            return "sum" if v not in names(rhs) else "other"
        if op != "=":
            return "other"
        if rhs.type == "binary_expression" and text(rhs.child_by_field_name("operator")) == "+":
            left, right = unwrap(rhs.child_by_field_name("left")), unwrap(rhs.child_by_field_name("right"))
            for a, b in ((left, right), (right, left)):
                if a is None or b is None or v in names(b):
                    continue
                if text(a) == v:
                    return "sum"
                if a.type == "binary_expression" and text(a.child_by_field_name("operator")) == "*":
                    x, y = unwrap(a.child_by_field_name("left")), unwrap(a.child_by_field_name("right"))
                    for p, q in ((x, y), (y, x)):
                        if p is not None and q is not None and text(p) == v and q.type == "call_expression" \
                                and callee(q.child_by_field_name("function")) in w.exp and v not in names(q):
                            return "rescale"
        if rhs.type == "call_expression" and callee(rhs.child_by_field_name("function")) in FUSED_ADDS \
                and len(_args(rhs)) == 3:  # s = fmaf(x, y, s): a product added to the sum
            *factors, last = (unwrap(x) for x in _args(rhs))
            if last is not None and text(last) == v and all(f is not None and v not in names(f) for f in factors):
                return "sum"
        if rhs.type == "identifier" and text(rhs) in own:  # m = m_new, with float m_new = fmaxf(m, x)
            for d in nodes(body):
                value = unwrap(d.child_by_field_name("value")) if d.type == "init_declarator" and \
                    declarator_name(d)[0] == text(rhs) else None
                if value is not None and value.type == "call_expression" and len(_args(value)) == 2 \
                        and v in {text(unwrap(x)) for x in _args(value)}:
                    return self._extreme(value) or "other"
        if rhs.type == "call_expression" and len(_args(rhs)) == 2 and self._extreme(rhs):
            a, b = (unwrap(x) for x in _args(rhs))
            if a is not None and b is not None and (text(a) == v and v not in names(b) or
                                                    text(b) == v and v not in names(a)):
                return self._extreme(rhs)
        if rhs.type == "conditional_expression":  # m = x > m ? x : m, m = m > x ? m : x
            cond = unwrap(rhs.child_by_field_name("condition"))
            then, alt = (unwrap(rhs.child_by_field_name(k)) for k in ("consequence", "alternative"))
            if then is not None and alt is not None and text(alt) == v and v not in names(then):
                return _compared(cond, text(then), v) or "other"
            if then is not None and alt is not None and text(then) == v and v not in names(alt):
                return {"max": "min", "min": "max"}.get(_compared(cond, text(alt), v), "other")
        guard = _guarding_if(n)
        if guard is not None and _inside(n, guard.child_by_field_name("consequence")):
            cond = unwrap(guard.child_by_field_name("condition"))
            if cond is not None and cond.type == "condition_clause":
                cond = unwrap(cond.child_by_field_name("value"))
            got = _compared(cond, text(rhs), v)
            return f"{got}-if" if got else "other"
        return "other"

    def _extreme(self, call) -> str:
        """"max" or "min" for a call of the dialect's maximum or minimum, else ""."""
        name = callee(call.child_by_field_name("function"))
        return "max" if name in self.r.words.max else "min" if name in self.r.words.min else ""

    def _against(self, accs: list[Accumulator]) -> list[Accumulator]:
        """Each sum of exponentials taken against a maximum the kernel accumulates (in any loop: a
        softmax's), with that maximum and the exponential."""
        out = []
        for a in accs:
            if a.op == "sum":
                for m in accs:
                    if m.op == "max":
                        exp = self._exp_of(a.span, m.var)
                        if exp:
                            a = replace(a, against=m.var, exp=exp)
                            break
            out.append(a)
        return out

    def _exp_of(self, span: Span, var: str) -> str:
        """The exponential an update's right side takes of something that reads `var`, or ""."""
        node = next((n for n in nodes(self.fn) if n.start_byte == span.start and n.end_byte == span.end), None)
        if node is None:
            return ""
        stack = [node.child_by_field_name("right") or node]
        seen: set[str] = set()
        while stack:
            n = stack.pop()
            if n.type == "call_expression" and callee(n.child_by_field_name("function")) in self.r.words.exp:
                todo = list(names(n.child_by_field_name("arguments")))
                while todo:
                    x = todo.pop()
                    if x == var:
                        return callee(n.child_by_field_name("function"))
                    if x in self.inits and self.inits[x] is not None and x not in seen:
                        seen.add(x)
                        todo.extend(names(self.inits[x]))
            if n.type == "identifier" and text(n) in self.inits and self.inits[text(n)] is not None \
                    and text(n) not in seen:
                seen.add(text(n))
                stack.append(self.inits[text(n)])
            stack.extend(n.children)
        return ""


def _args(call) -> list:
    args = call.child_by_field_name("arguments")
    return [a for a in args.named_children if a.type != "comment"] if args is not None else []


def _inside(node, outer) -> bool:
    return outer is not None and outer.start_byte <= node.start_byte and node.end_byte <= outer.end_byte


def _statement(node):
    while node is not None and node.type != "expression_statement":
        node = node.parent
    return node


def _guarding_if(update):
    """The `if` an update is the (braced) consequence of, else None."""
    stmt = _statement(update)
    p = stmt.parent if stmt is not None else None
    if p is not None and p.type == "compound_statement":
        p = p.parent
    return p if p is not None and p.type == "if_statement" else None


def _compared(cond, value: str, v: str) -> str:
    """"max" when `cond` holds where `value` is above `v` (`value > v`, `v < value`), "min" where
    below, "" otherwise."""
    if cond is None or cond.type != "binary_expression":
        return ""
    op = text(cond.child_by_field_name("operator"))
    left, right = (text(unwrap(cond.child_by_field_name(k))) for k in ("left", "right"))
    if (op in (">", ">=") and (left, right) == (value, v)) or (op in ("<", "<=") and (left, right) == (v, value)):
        return "max"
    if (op in ("<", "<=") and (left, right) == (value, v)) or (op in (">", ">=") and (left, right) == (v, value)):
        return "min"
    return ""


def _local_only_in(read, loop, body, updates: list) -> bool:
    """A read in the initialiser of a local of the loop whose every use is inside `updates`
    (`float prev = maxval;` read only by the sum's rescaling)."""
    decl = read.parent
    while decl is not None and decl.type != "init_declarator" and decl.id != loop.id:
        decl = decl.parent
    if decl is None or decl.type != "init_declarator" or not _inside(decl, loop):
        return False
    local = declarator_name(decl)[0]
    uses = [n for n in nodes(body) if n.type == "identifier" and text(n) == local and not _inside(n, decl)]
    return all(any(_inside(u, a) for a in updates) for u in uses)


def _read_through(n, read: set[int]) -> bool:
    """Whether the pointer `n` is the array of an access read at one of the starts `read`: `*q`,
    `*(p + i)`, or the last argument of a vload_half/vstore_half call."""
    up = n.parent
    if up is not None and up.type == "argument_list" and up.named_children and up.named_children[-1] == n:
        return up.parent is not None and up.parent.start_byte in read
    while up is not None and up.type == "parenthesized_expression":
        up = up.parent
    if up is not None and up.type == "binary_expression" and text(up.child_by_field_name("operator")) == "+" \
            and unwrap(up.child_by_field_name("left")) == n:
        up = up.parent
        while up is not None and up.type == "parenthesized_expression":
            up = up.parent
    return up is not None and up.type == "pointer_expression" and \
        text(up.child_by_field_name("operator")) == "*" and up.start_byte in read


def _stride_role(step: Affine, start: Affine | None) -> tuple[str, int | None]:
    """A `+=` loop's role from its step: the block's threads, the grid's blocks, or every thread."""
    if step.coeffs:
        return "serial", None
    for d, dim in enumerate(DIMS):
        block, grid = Poly.of(f"blockDim.{dim}"), Poly.of(f"gridDim.{dim}")
        if step.const == block * grid:
            return "grid-stride", d
        if step.const == block:
            return "thread-stride", d
        if step.const == grid:
            return "block-stride", d
    return "serial", None


def _is_global(form: Affine | None) -> bool:
    """blockIdx * blockDim + threadIdx in one dimension."""
    if form is None or not form.const.is_zero or len(form.coeffs) != 2:
        return False
    for dim in DIMS:
        if form.coeff(f"threadIdx.{dim}").number == 1 and form.coeff(f"blockIdx.{dim}") == Poly.of(f"blockDim.{dim}"):
            return True
    return False


def _direction(node) -> tuple[bool, bool]:
    """(read, written) of an element expression from its parent."""
    parent = node.parent
    while parent is not None and parent.type == "parenthesized_expression":
        parent = parent.parent
    if parent is not None and parent.type == "assignment_expression" and \
            parent.child_by_field_name("left").start_byte == node.start_byte:
        return text(parent.child_by_field_name("operator")) != "=", True
    if parent is not None and parent.type == "update_expression":
        return True, True
    return True, False


def _address_of(node, pointers: set[str], alias: Mapping[str, tuple[str, str]]) -> str:
    """The array `&p[i]` or `p + i` points into ("" when none)."""
    node = unwrap(node)
    for n in nodes(node) if node is not None else ():
        if n.type == "identifier":
            name = text(n)
            if name in pointers:
                return name
            if name in alias:
                return alias[name][0]
    return ""


def _declarations(body) -> tuple[dict, dict[str, int], set[str], dict[str, str], set[str]]:
    """The body's locals: initialiser nodes (None when declared bare), assignments after their
    declaration, every name declared, each one's type as written (where first declared), and the
    names first declared as plain scalars."""
    inits: dict[str, object] = {}
    assigned: dict[str, int] = {}
    declared: set[str] = set()
    types: dict[str, str] = {}
    scalars: set[str] = set()
    for n in nodes(body):
        if n.type in ("declaration", "for_range_loop"):
            ctype = text(n.child_by_field_name("type"))
            for d in n.children_by_field_name("declarator"):
                name, _ = declarator_name(d)
                if name and name not in types:
                    inner = d.child_by_field_name("declarator") if d.type == "init_declarator" else d
                    if n.type == "declaration" and inner is not None and inner.type == "identifier":
                        scalars.add(name)
                if name:
                    declared.add(name)
                    types.setdefault(name, ctype)
        if n.type == "init_declarator":
            target = n.child_by_field_name("declarator")
            value = n.child_by_field_name("value")
            name, _ = declarator_name(target)
            if name and value is not None:
                if name in inits:
                    assigned[name] = assigned.get(name, 0) + 1
                inits[name] = value
        elif n.type == "assignment_expression":
            left = unwrap(n.child_by_field_name("left"))
            if left is not None and left.type == "identifier":
                assigned[text(left)] = assigned.get(text(left), 0) + 1
        elif n.type == "update_expression":
            arg = unwrap(n.child_by_field_name("argument"))
            if arg is not None and arg.type == "identifier":
                assigned[text(arg)] = assigned.get(text(arg), 0) + 1
    return inits, assigned, declared, types, scalars


def _array_dims(d) -> tuple[str, ...]:
    """The sizes of an array declarator's dimensions as written, outermost first ("" for `x[]`)."""
    dims = []
    while d is not None and d.type in ("array_declarator", "init_declarator"):
        if d.type == "array_declarator":
            size = d.child_by_field_name("size")
            dims.append(text(size) if size is not None else "")
        d = d.child_by_field_name("declarator")
    return tuple(reversed(dims))


def declarator_name(node) -> tuple[str, bool]:
    """(name, is a pointer or array) of a declarator."""
    pointer = False
    while node is not None and node.type != "identifier":
        if node.type in ("pointer_declarator", "array_declarator"):
            pointer = True
        inner = node.child_by_field_name("declarator")
        if inner is None:
            named = [c for c in node.named_children if c.type not in ("type_qualifier", "comment")]
            inner = named[-1] if named else None
        node = inner
    return (text(node) if node is not None else ""), pointer


def integer(expr: str) -> int | None:
    """The integer a literal's text is (a `u` or `l` suffix allowed), else None."""
    t = expr.strip().rstrip("uUlL")
    return int(t) if t.isdigit() else None
