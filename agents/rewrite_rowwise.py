"""The row-wise rewrite: a kernel that gives each thread a whole row gets a group of threads per row.

A kernel is row-wise when its one thread index (`blockIdx.x * blockDim.x + threadIdx.x`, or
`get_global_id(0)`) picks a row and every loop of the kernel runs over that row, one element after
another, carrying nothing from one element to the next but sums, maxima, minima and the online
maximum-and-sum pair of a softmax, and writing only the element it is at. Such a kernel becomes a
template of two parameters:

- `LANES`: threads sharing a row (1 = the original). Every loop over the row starts at the
  thread's lane and steps by `LANES`; after each loop its accumulators are combined across the
  group (warp shuffles within a warp, shared memory across warps; local memory in OpenCL); what
  the kernel writes outside its loops is written by the group's first lane, the elements of the
  row by the lane that owns them.
- `ROWS`: rows per block, whose default is the original's block size, so that the default
  configuration is the original kernel token for token once the preprocessor has run.

Two more stages build on it: the row kept in registers and moved in packs (`KEEP`, `VEC`:
agents/rewrite_rowkeep.py), and a pass carried through an exponential run as independent chains
a lane (`CHAINS`: agents/rewrite_rowchains.py).

The analysis reads the kernel model (agents/model.py: its loops, calls, accesses and what each
loop carries, the online pair included) and the kernel's syntax tree for where the rewrite edits,
and refuses, with the reason, anything it cannot prove safe: a value carried from one element to
the next that is not a reduction (a scan), a write at an element other than the loop's own, a loop
inside a row loop, threads that already cooperate (barriers, shared memory, atomics).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from kerntune.engine.backends.opencl_check import DEFECTS, STORE_AFTER_BARRIER
from kerntune.engine.device import DeviceLimits
from kerntune.engine.expressions import expression_words, renamed
from kerntune.engine.proposal import ParamProposal
from kerntune.engine.cxx import blank, parser

from . import rewrite_rowchains, rewrite_rowkeep
from .lift import fresh_name, launch_sites
from .model import DIALECT, EITHER, Accumulator, Loop, ModelError, Span, build, declarator_name
from .passes import Declined, EditConflict, Edits, Pass, Rewrite, RewriteContext, defaults
from .rewrite_rowchains import ACC_TYPES, ChainLoop, combine, merge
from .rewrite_rowkeep import KeepPlan
from . import syntax as sx

LANES = "LANES"
ROWS = "ROWS"
# the words of both dialects (agents/model.py's table)
EXP_CALLS = EITHER.exp
CUDA_IDS = DIALECT["cuda"].ids
OPENCL_IDS = DIALECT["opencl"].ids
COOPERATING = EITHER.cooperating
INDEX_TYPES = {"int", "long", "unsigned", "size_t", "ptrdiff_t", "int64_t", "uint32_t", "int32_t"}


class NotRowwise(ValueError):
    """The kernel is not a one-thread-per-row map-reduce the rewrite can spread; the message says why."""


@dataclass(frozen=True)
class RowLoop:
    """A loop over the row: where its start and step are, where the combine goes after it."""

    var: str
    line: int
    start: tuple[int, int]
    update: tuple[int, int]
    after: int
    indent: str
    accumulators: tuple[Accumulator, ...]


@dataclass(frozen=True)
class RowKernel:
    """What the analysis found in a row-wise kernel (byte offsets into the source)."""

    dialect: str
    index_sites: tuple[tuple[int, int], ...]
    loops: tuple[RowLoop, ...]
    lead_stores: tuple[tuple[int, int], ...]
    head: int  # where the kernel's definition starts its line: the prelude goes before it
    body_open: int  # just after the `{` of the kernel's body
    keep: "KeepPlan | None" = None  # the row kept in registers and moved in packs (agents/rewrite_rowkeep.py)
    keep_reason: str = ""  # why not, when keep is None
    chains: tuple["ChainLoop | None", ...] = ()  # by loop: its accumulators split into chains (rewrite_rowchains)

    @property
    def chained(self) -> bool:
        """Whether a pass carries a value through an exponential: chains of its accumulators pay."""
        return any(rewrite_rowchains.offered(lp.accumulators) for lp in self.loops)

    @property
    def accumulators(self) -> tuple[Accumulator, ...]:
        return tuple(a for lp in self.loops for a in lp.accumulators)


# syntax helpers --------------------------------------------------------------------------------


def _is_zero(node) -> bool:
    node = sx.strip(node)
    if node is None or node.type != "number_literal":
        return False
    try:
        return float(sx.text(node).rstrip("fFlLuU") or "x") == 0.0
    except ValueError:
        return False


def _field(node, obj: str, member: str = "x") -> bool:
    node = sx.strip(node)
    return (node is not None and node.type == "field_expression"
            and sx.text(node.child_by_field_name("argument")) == obj and sx.text(node.child_by_field_name("field")) == member)


def _is_index_site(node) -> bool:
    """`blockIdx.x * blockDim.x + threadIdx.x` in any order, or `get_global_id(0)`."""
    node = sx.strip(node)
    if node is None:
        return False
    if node.type == "call_expression":
        args = sx.call_args(node)
        return sx.call_name(node) == "get_global_id" and len(args) == 1 and sx.text(args[0]) == "0"
    if node.type != "binary_expression" or sx.text(node.child_by_field_name("operator")) != "+":
        return False
    left, right = sx.strip(node.child_by_field_name("left")), sx.strip(node.child_by_field_name("right"))
    for a, b in ((left, right), (right, left)):
        if _field(b, "threadIdx") and a is not None and a.type == "binary_expression" \
                and sx.text(a.child_by_field_name("operator")) == "*":
            x, y = a.child_by_field_name("left"), a.child_by_field_name("right")
            if (_field(x, "blockIdx") and _field(y, "blockDim")) or (_field(x, "blockDim") and _field(y, "blockIdx")):
                return True
    return False


# the analysis ----------------------------------------------------------------------------------

@dataclass
class _Loop:
    """A loop over the row: the kernel model's Loop, its syntax node, and the names its body declares."""

    loop: Loop
    node: object
    locals: set[str] = field(default_factory=set)

    @property
    def var(self) -> str:
        return self.loop.var

    @property
    def start_text(self) -> str:
        return self.loop.start


def analyse(source: str, entry: str) -> RowKernel:
    """The row-wise structure of `entry` in `source` (CUDA or OpenCL); NotRowwise says why not.
    Read once per source and entry (a pass's `requires` and `apply` read the same)."""
    return _analysed(source, entry)


@functools.lru_cache(maxsize=16)
def _analysed(source: str, entry: str) -> RowKernel:
    src = source.encode("utf-8")
    text, dialect, marks = blank(src)
    root = parser().parse(text).root_node
    try:  # the kernel's loops, calls and functions are the kernel model's
        m = build(source, entry)
    except ModelError:
        raise NotRowwise(f"no kernel named {entry} in the source") from None
    fn = next(n for n in sx.walk(root) if n.type == "function_definition" and n.start_byte <= m.kernel.body.start
              and n.end_byte == m.kernel.body.end)
    body = fn.child_by_field_name("body")
    if m.shared:  # the model's shared (OpenCL: local) memory, declared or taken as an argument
        raise NotRowwise(f"the kernel already uses {'local' if dialect == 'opencl' else 'shared'} memory: its "
                         "threads cooperate")

    # the one thread index, and nothing else that tells threads apart (what comes first in the source)
    sites = [n for n in sx.walk(body) if _is_index_site(n)]
    sites = [s for s in sites if not any(o is not s and sx.within(s, o) for o in sites)]
    if not sites:
        raise NotRowwise("no thread index of the form blockIdx.x * blockDim.x + threadIdx.x or get_global_id(0)")
    mine = [f.span for f in m.functions]  # the kernel and what it calls, never the file's other kernels
    stray = next((n for n in sx.walk(root) if _id_word(n) and not any(sx.within(n, s) for s in sites)
                  and any(f.start <= n.start_byte < f.end for f in mine)), None)
    together = min((c for c in m.calls if c.name in COOPERATING or c.name.startswith(EITHER.atomic_prefixes)),
                   key=lambda c: c.span.start, default=None)
    if together is not None and (stray is None or together.span.start < stray.start_byte):
        raise NotRowwise(f"line {_line(src, together.span)}: {together.name}: the kernel's threads already cooperate")
    if stray is not None:
        raise NotRowwise(f"line {sx.line(stray)}: {_id_word(stray)} is read outside the thread index: the kernel "
                         "is not one thread per row")
    own = [lp for lp in m.loops if lp.in_kernel]
    for lp in own:
        if lp.kind in ("while", "do"):
            raise NotRowwise(f"line {_line(src, lp.span)}: a {lp.kind} loop: its trip count is unknown")

    by_span = {(n.start_byte, n.end_byte): n for n in sx.walk(body) if n.type == "for_statement"}
    loops = [_loop_header(lp, by_span[lp.span.start, lp.span.end]) for lp in own if lp.kind == "for"]
    if not loops:
        raise NotRowwise("no loop over a row: each thread owns single elements (an elementwise kernel)")
    for lp in loops:
        around = [m.loops[i] for i in _parents(m, m.loops.index(lp.loop)) if m.loops[i].kind == "for"]
        if around:
            raise NotRowwise(f"line {_line(src, lp.loop.span)}: a loop inside the row loop of line "
                             f"{_line(src, around[0].span)}")

    carried_in: dict[str, int] = {}
    row_loops: list[RowLoop] = []
    written: dict[str, str] = {}  # array -> its normalised index, for arrays written in a row loop
    chains: list[ChainLoop | None] = []
    for lp in loops:
        lp.locals = {declarator_name(d)[0] for d in sx.walk(lp.node.child_by_field_name("body"))
                     if d.type in ("declaration", "init_declarator")} | {lp.var}
        accs = _accumulators(m, lp)
        for a in accs:
            for name in (a.name, a.partner):
                if name and name in carried_in:
                    raise NotRowwise(f"line {sx.line(lp.node)}: {name} accumulates in two loops (and the one of line "
                                     f"{carried_in[name]}): each lane would add the combined value again")
                if name:
                    carried_in[name] = sx.line(lp.node)
        _check_elements(lp, written)
        chains.append(rewrite_rowchains.chain_loop(lp.node.child_by_field_name("body"), tuple(accs)) if accs else None)
        parent = lp.node.parent
        if accs and (parent is None or parent.type != "compound_statement"):
            raise NotRowwise(f"line {sx.line(lp.node)}: the loop is not a statement of a block: there is no place "
                             "to combine its accumulators after it")
        init = lp.node.child_by_field_name("initializer")
        value = init.child_by_field_name("value") if init.type == "assignment_expression" else \
            init.child_by_field_name("declarator").child_by_field_name("value")
        update = lp.node.child_by_field_name("update")
        line_start = src.rfind(b"\n", 0, lp.node.start_byte) + 1
        before = src[line_start:lp.node.start_byte]
        indent = before[:len(before) - len(before.lstrip(b" \t"))].decode()
        row_loops.append(RowLoop(lp.var, sx.line(lp.node), (value.start_byte, value.end_byte),
                                 (update.start_byte, update.end_byte), lp.node.end_byte, indent, tuple(accs)))

    leads = _lead_stores(body, loops, written)
    head_node = fn
    while head_node.parent is not None and head_node.parent.type in ("template_declaration",):
        head_node = head_node.parent
    kernel_words = [k for k in marks.kernels if k <= fn.start_byte]
    start = min([head_node.start_byte] + ([max(kernel_words)] if kernel_words else []))
    head = src.rfind(b"\n", 0, start) + 1
    while head > 0:  # above the kernel's own comment too
        above = src.rfind(b"\n", 0, head - 1) + 1
        if not src[above:head].lstrip().startswith(b"//"):
            break
        head = above
    open_brace = body.children[0]
    keep, keep_reason = None, ""
    try:
        keep = rewrite_rowkeep.plan(src, fn, body, loops, _stores(body), [(s.start_byte, s.end_byte) for s in sites],
                                    dialect, start, m)
    except rewrite_rowkeep.NotKept as e:
        keep_reason = str(e)
    return RowKernel(dialect, tuple((s.start_byte, s.end_byte) for s in sites), tuple(row_loops), tuple(leads),
                     head, open_brace.end_byte, keep, keep_reason, tuple(chains))


def _loop_header(lp: Loop, node) -> _Loop:
    """A loop over the row: a counter set once at its start, `< end`, stepping by one, never changed
    in the body nor left early."""
    line = sx.line(node)
    var = lp.var
    init = node.child_by_field_name("initializer")
    declarators = [c for c in init.named_children if c.type == "init_declarator"] if init is not None and \
        init.type == "declaration" else []
    plain = len(declarators) == 1 and declarators[0].child_by_field_name("declarator").type == "identifier" \
        if declarators else init is not None and init.type == "assignment_expression" and \
        sx.text(init.child_by_field_name("operator")) == "=" and init.child_by_field_name("left").type == "identifier"
    if not var or not lp.start or not plain:
        raise NotRowwise(f"line {line}: a loop whose counter is not set once at its start")
    if lp.compare != "<":
        raise NotRowwise(f"line {line}: the loop's condition is not `{var} < end`")
    if not (lp.update == "++" or lp.update == "+=" and lp.step.strip() == "1"):
        update = node.child_by_field_name("update")
        step = sx.text(update).replace(" ", "") if update is not None else ""
        raise NotRowwise(f"line {line}: the loop does not step by one element ({step or 'no step'})")
    body = node.child_by_field_name("body")
    for n in sx.walk(body):
        if n.type in ("break_statement", "return_statement", "goto_statement"):
            raise NotRowwise(f"line {sx.line(n)}: the loop over the row may end early ({sx.text(n).rstrip(';')})")
        target = sx.target(n)
        if target is not None and target.type == "identifier" and sx.text(target) == var:
            raise NotRowwise(f"line {sx.line(n)}: the loop's counter {var} is changed inside the loop")
    return _Loop(lp, node)


def _parents(m, index: int) -> list[int]:
    """The loops around the model's loop `index`, outermost first."""
    out = []
    while m.loops[index].parent is not None:
        index = m.loops[index].parent
        out.insert(0, index)
    return out


def _id_word(n) -> str:
    """The id a node reads (threadIdx, get_global_id, ...), or ""."""
    if n.type == "identifier" and sx.text(n) in CUDA_IDS:
        return sx.text(n)
    if n.type == "call_expression" and sx.call_name(n) in OPENCL_IDS:
        return sx.call_name(n)
    return ""


def _line(src: bytes, span: Span) -> int:
    """The 1-based line a span of the source starts on."""
    return src.count(b"\n", 0, span.start) + 1


def _statement(node):
    while node is not None and node.type != "expression_statement":
        node = node.parent
    return node


def _accumulators(m, lp: _Loop) -> list[Accumulator]:
    """The values the loop carries from one element to the next (the kernel model's accumulators of
    the loop), each a reduction of a scalar the kernel declares, or NotRowwise."""
    line = sx.line(lp.node)
    index = m.loops.index(lp.loop)
    accs = [a for a in m.accumulators if a.loop == index]
    for name in (n for a in accs for n in (a.var, a.partner) if n):
        ctype = m.types.get(name, "")
        if name not in m.scalars or ctype not in ACC_TYPES:
            what = f"a {ctype}" if ctype else "declared outside the kernel's body"
            raise NotRowwise(f"line {line}: {name} is carried from element to element but is {what}, not a "
                             f"{', '.join(ACC_TYPES)} scalar")
    for a in accs:
        if a.op == "other":
            raise NotRowwise(f"line {line}: {a.var} is carried from one element to the next, and not as a sum, "
                             "a maximum, a minimum or the online maximum-and-sum of a softmax")
        if a.reads:
            raise NotRowwise(f"line {_line(m.source.encode('utf-8'), a.reads[0])}: {a.var} is read while it "
                             "accumulates: each element depends on the ones before it (a scan), which a group of "
                             "threads cannot split")
        if a.op in ("sum", "online"):
            _check_start(a.partner or a.var, lp, "sum")
    return accs


def _check_start(name: str, lp: _Loop, op: str) -> None:
    """A sum split over lanes must start from 0 in every lane: the last value given before the loop."""
    node = lp.node
    while node is not None:
        parent = node.parent
        if parent is not None and parent.type == "compound_statement":
            before = [c for c in parent.named_children if c.end_byte <= node.start_byte]
            for stmt in reversed(before):
                value = _assigned_value(stmt, name)
                if value is not None:
                    if _is_zero(value):
                        return
                    raise NotRowwise(f"line {sx.line(stmt)}: the {op} {name} starts from {sx.text(value)}, not 0: "
                                     "each lane of a group would add it once")
                if any(sx.target(n) is not None and sx.text(sx.target(n)) == name for n in sx.walk(stmt)):
                    raise NotRowwise(f"line {sx.line(stmt)}: {name} changes before the loop of line {sx.line(lp.node)} "
                                     "in a way that does not show it starts from 0")
        node = parent
    raise NotRowwise(f"the sum {name} has no starting value in the kernel")


def _assigned_value(stmt, name: str):
    if stmt.type == "declaration":
        for d in stmt.named_children:
            if d.type == "init_declarator" and declarator_name(d)[0] == name:
                return d.child_by_field_name("value")
    if stmt.type == "expression_statement" and stmt.named_child_count == 1:
        e = stmt.named_children[0]
        if e.type == "assignment_expression" and sx.text(e.child_by_field_name("operator")) == "=" \
                and sx.text(sx.strip(e.child_by_field_name("left"))) == name:
            return e.child_by_field_name("right")
    return None


def _stores(node) -> list:
    """Element writes under a node: (the write's node, array, index)."""
    out = []
    for n in sx.walk(node):
        target = sx.target(n)
        if target is not None and target.type != "identifier":
            el = sx.element(target)
            if el is None:
                raise NotRowwise(f"line {sx.line(n)}: a write through {sx.text(target)} the rewrite cannot follow")
            out.append((n, *el))
        elif n.type == "call_expression" and sx.call_name(n).startswith("vstore"):
            out.append((n, *sx.element(n)))
    return out


def _key(index, var: str, start: str) -> str:
    return f"{start}|" + (sx.compact(index, {var: "@"}) if index is not None else "")


def _check_elements(lp: _Loop, written: dict[str, str]) -> None:
    """A row loop writes only its own element, and reads back what it wrote only at that element."""
    body = lp.node.child_by_field_name("body")
    for n, array, index in _stores(body):
        if not array:
            raise NotRowwise(f"line {sx.line(n)}: a write the rewrite cannot follow to an array")
        if array in lp.locals:
            raise NotRowwise(f"line {sx.line(n)}: {array} is the thread's own array: its elements are not the row's")
        if index is None or lp.var not in sx.names(index):
            raise NotRowwise(f"line {sx.line(n)}: {array} is written at an element other than the loop's own "
                             f"({lp.var}) in every iteration")
        key = _key(index, lp.var, lp.start_text)
        if written.setdefault(array, key) != key:
            raise NotRowwise(f"line {sx.line(n)}: {array} is written at two different elements of the row")
    for n in sx.walk(body):
        if n.type not in ("subscript_expression", "pointer_expression", "call_expression"):
            continue
        el = sx.element(n)
        if el is None or el[0] not in written:
            continue
        if _key(el[1], lp.var, lp.start_text) != written[el[0]]:
            raise NotRowwise(f"line {sx.line(n)}: {el[0]} is read at another element than the one written there "
                             "(a dependence between elements of the row)")


def _lead_stores(body, loops: list[_Loop], written: dict[str, str]) -> list[tuple[int, int]]:
    """The writes outside the row loops (one lane of a group makes them): their expressions' spans.
    Nothing outside the loops may read an element a loop wrote, nor one such a write made."""
    out, targets, stored = [], [], set()
    for n, array, _ in _stores(body):
        if any(sx.within(n, lp.node) for lp in loops):
            continue
        if array in written:
            raise NotRowwise(f"line {sx.line(n)}: {array} is written both inside and outside the row loops")
        stmt = _statement(n)
        if stmt is None or stmt.named_child_count != 1 or not sx.same(stmt.named_children[0], n):
            raise NotRowwise(f"line {sx.line(n)}: a write inside a larger expression, outside the row loops")
        stored.add(array)
        out.append((n.start_byte, n.end_byte))
        targets.append(n if n.type == "call_expression" else sx.target(n))
    for n in sx.walk(body):
        if n.type not in ("subscript_expression", "pointer_expression", "call_expression"):
            continue
        el = sx.element(n)
        if el is None or any(sx.within(n, lp.node) for lp in loops):
            continue
        if el[0] in written:
            raise NotRowwise(f"line {sx.line(n)}: {el[0]} is read outside the row loops, where another lane may "
                             "have written it")
        if el[0] in stored and not any(sx.same(n, t) for t in targets):
            raise NotRowwise(f"line {sx.line(n)}: {el[0]} is read back after one lane wrote it")
    return out


# the rewrite -----------------------------------------------------------------------------------

def _cuda_helpers(accs: tuple[Accumulator, ...], lanes: str, rows: str) -> str:
    """The CUDA helpers of a row spread over `lanes` threads, `rows` rows a block."""
    out = [
        f"#define ROW_LANE ((int)(threadIdx.x % {lanes}))",
        f"#define ROW_INDEX(original) (blockIdx.x * {rows} + threadIdx.x / {lanes})",
        "#define LANE_FIRST(start) ((start) + ROW_LANE)",
        f"#define LANE_NEXT(i, step) i += {lanes}",
        "#define LEAD_ONLY(...) do { if (ROW_LANE == 0) { __VA_ARGS__; } } while (0)",
        "// the lanes of this thread's group within its warp (a group never straddles two warps)",
        f"#define ROW_MASK ({lanes} >= 32 ? 0xffffffffu : ((1u << {lanes}) - 1u) << "
        f"(threadIdx.x % 32 / {lanes} * {lanes}))",
    ]
    for op, ctype in sorted({(a.op, a.ctype) for a in accs if a.op != "online"}):
        f = f"row_{op}_{ctype}"
        c = combine(op, ctype, "cuda", "v", "__shfl_xor_sync(ROW_MASK, v, o)")
        c32 = combine(op, ctype, "cuda", "v", "__shfl_xor_sync(0xffffffffu, v, o)")
        cw = combine(op, ctype, "cuda", "v", "part[w]")
        out.append(f"""// the {op} of v over the row's lanes, in every lane (the same bits in each: the butterfly
// combines the same pairs in both orders)
__device__ __forceinline__ {ctype} {f}({ctype} v)
{{
#if {lanes} <= 32
    for (int o = {lanes} / 2; o > 0; o >>= 1) v = {c};
#else
    __shared__ {ctype} part[{lanes} / 32];
    for (int o = 16; o > 0; o >>= 1) v = {c32};
    if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = v;
    __syncthreads();
    v = part[0];
    for (int w = 1; w < {lanes} / 32; ++w) v = {cw};
    __syncthreads();
#endif
    return v;
}}""")
    for ctype, exp in sorted({(a.ctype, a.exp) for a in accs if a.op == "online"}):
        top, total = merge(ctype, exp, "cuda", "*m", "*s", "m2", "s2")
        out.append(f"""// (m, s) and (m2, s2), each s a sum of exponentials taken against its m, merged into one pair
__device__ __forceinline__ void row_merge_{ctype}({ctype}* m, {ctype}* s, {ctype} m2, {ctype} s2)
{{
    {top}
    *s = {total};
    *m = top;
}}

__device__ __forceinline__ void row_online_{ctype}({ctype}* m, {ctype}* s)
{{
#if {lanes} <= 32
    for (int o = {lanes} / 2; o > 0; o >>= 1)
        row_merge_{ctype}(m, s, __shfl_xor_sync(ROW_MASK, *m, o), __shfl_xor_sync(ROW_MASK, *s, o));
#else
    __shared__ {ctype} part_m[{lanes} / 32], part_s[{lanes} / 32];
    for (int o = 16; o > 0; o >>= 1)
        row_merge_{ctype}(m, s, __shfl_xor_sync(0xffffffffu, *m, o), __shfl_xor_sync(0xffffffffu, *s, o));
    if (threadIdx.x % 32 == 0) part_m[threadIdx.x / 32] = *m, part_s[threadIdx.x / 32] = *s;
    __syncthreads();
    *m = part_m[0], *s = part_s[0];
    for (int w = 1; w < {lanes} / 32; ++w) row_merge_{ctype}(m, s, part_m[w], part_s[w]);
    __syncthreads();
#endif
}}""")
    return "\n".join(out)


def _opencl_helpers(accs: tuple[Accumulator, ...], lanes: str, rows: str) -> str:
    """The OpenCL helpers of a row spread over `lanes` work-items, `rows` rows a work-group."""
    out = [
        "// without sub-groups, a row's lanes meet in local memory: one row per work-group",
        f"#if {rows} > 1",
        "#error a row's lanes need a work-group of their own in OpenCL",
        "#endif",
        f"#define ROW_LANE ((int)(get_local_id(0) % {lanes}))",
        f"#define ROW_INDEX(original) (get_group_id(0) * {rows} + get_local_id(0) / {lanes})",
        "#define LANE_FIRST(start) ((start) + ROW_LANE)",
        f"#define LANE_NEXT(i, step) i += {lanes}",
        "#define LEAD_ONLY(...) do { if (ROW_LANE == 0) { __VA_ARGS__; } } while (0)",
    ]
    for op, ctype in sorted({(a.op, a.ctype) for a in accs if a.op != "online"}):
        c = combine(op, ctype, "opencl", "red[lane]", "red[lane + o]")
        out.append(f"""// the {op} of v over the work-group's lanes, in every lane
{ctype} row_{op}_{ctype}({ctype} v, __local {ctype}* red)
{{
    const int lane = ROW_LANE;
    red[lane] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int o = {lanes} / 2; o > 0; o >>= 1) {{
        if (lane < o) red[lane] = {c};
        barrier(CLK_LOCAL_MEM_FENCE);
    }}
    v = red[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return v;
}}""")
    for ctype, exp in sorted({(a.ctype, a.exp) for a in accs if a.op == "online"}):
        top, total = merge(ctype, exp, "opencl", "m", "s", "m2", "s2")
        out.append(f"""// (m, s) and (m2, s2), each s a sum of exponentials taken against its m, merged into one pair
void row_online_{ctype}({ctype}* pm, {ctype}* ps, __local {ctype}* red_m, __local {ctype}* red_s)
{{
    const int lane = ROW_LANE;
    red_m[lane] = *pm;
    red_s[lane] = *ps;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int o = {lanes} / 2; o > 0; o >>= 1) {{
        if (lane < o) {{
            const {ctype} m = red_m[lane], s = red_s[lane], m2 = red_m[lane + o], s2 = red_s[lane + o];
            {top}
            red_s[lane] = {total};
            red_m[lane] = top;
        }}
        barrier(CLK_LOCAL_MEM_FENCE);
    }}
    *pm = red_m[0];
    *ps = red_s[0];
    barrier(CLK_LOCAL_MEM_FENCE);
}}""")
    return "\n".join(out)


def rewrite(source: str, kernel: RowKernel, rows: str, rows_default: int | None, lanes: str = LANES,
            launch_edits: list = (), keep: tuple[str, str, str] | None = None, chains: str = "") -> str:
    """The template source: the original with the lane group woven in (`lanes` = 1 is the original).
    `rows` is the rows a block: a parameter of its own (with `rows_default`) or an expression.
    `keep`, the names of KEEP and VEC and the block's threads, adds the stage of
    agents/rewrite_rowkeep.py (kernel.keep); `chains`, the name of CHAINS, the stage of
    agents/rewrite_rowchains.py on top of it (kernel.chains)."""
    src = source.encode("utf-8")
    edits: list[tuple[int, int, str]] = []
    for s, e in kernel.index_sites:
        edits.append((s, e, f"ROW_INDEX({src[s:e].decode()})"))
    for lp in kernel.loops:
        s, e = lp.start
        edits.append((s, e, f"LANE_FIRST({src[s:e].decode()})"))
        s, e = lp.update
        edits.append((s, e, f"LANE_NEXT({lp.var}, {src[s:e].decode()})"))
        if lp.accumulators:
            lines = []
            for a in lp.accumulators:
                if a.op == "online":
                    extra = f", row_red_{a.ctype}, row_red2_{a.ctype}" if kernel.dialect == "opencl" else ""
                    lines.append(f"{lp.indent}row_online_{a.ctype}(&{a.name}, &{a.partner}{extra});")
                else:
                    extra = f", row_red_{a.ctype}" if kernel.dialect == "opencl" else ""
                    lines.append(f"{lp.indent}{a.name} = row_{a.op}_{a.ctype}({a.name}{extra});")
            edits.append((lp.after, lp.after, f"\n#if {lanes} > 1\n" + "\n".join(lines) + "\n#endif"))
    for s, e in kernel.lead_stores:
        edits.append((s, e, f"LEAD_ONLY({src[s:e].decode()})"))
    for edit in launch_edits:
        edits.append((edit.start, edit.end, f"{lanes} * {rows}"))
    accs = kernel.accumulators
    if kernel.dialect == "opencl" and accs:
        types = sorted({a.ctype for a in accs})
        online = {a.ctype for a in accs if a.op == "online"}
        decl = "\n".join(f"    __local {t} row_red_{t}[{lanes}]" + (f", row_red2_{t}[{lanes}];" if t in online else ";")
                         for t in types)
        edits.append((kernel.body_open, kernel.body_open, f"\n#if {lanes} > 1\n{decl}\n#endif"))
    helpers = _opencl_helpers(accs, lanes, rows) if kernel.dialect == "opencl" else _cuda_helpers(accs, lanes, rows)
    own = [(rows, rows_default)] if rows_default is not None else []
    prelude = (
        f"// kerntune: the row spread over a group of {lanes} threads, {rows} rows a block; {lanes} = 1 is\n"
        "// the original, one thread per row.\n"
        + defaults([(lanes, 1), *own])
        + f"#if {lanes} == 1\n"
        "#define ROW_INDEX(original) original\n"
        "#define LANE_FIRST(start) start\n"
        "#define LANE_NEXT(i, step) step\n"
        "#define LEAD_ONLY(...) __VA_ARGS__\n"
        "#define ROW_LANE 0\n"
        "#else\n" + helpers + "\n#endif\n\n")
    if keep is not None and kernel.keep is not None:
        split = [(chains, c, kernel.dialect) if chains and c is not None else None for c in kernel.chains]
        edits = _keep_edits(kernel.keep, src, edits, keep[:2], lanes, split)
        if chains:
            prelude += (f"// kerntune: {chains} independent chains of the accumulators a lane (1: one, as written).\n"
                        + defaults([(chains, 1)]))
        prelude += rewrite_rowkeep.prelude(kernel.keep, kernel.dialect, *keep, chains) + "\n"
    edits.append((kernel.head, kernel.head, prelude))
    # through the passes' one edit buffer (overlaps refused); of two insertions at one place the
    # later one made here goes first
    buffer = Edits(source)
    try:
        for s, e, t in reversed(edits):
            buffer.replace((s, e), t)
    except EditConflict as e:
        raise NotRowwise(f"two of the rewrite's changes meet in one place ({e})") from None
    return buffer.result()


def _keep_edits(plan: "KeepPlan", src: bytes, edits: list, names: tuple[str, str], lanes: str,
                chains: list) -> list:
    """The edits with each row loop replaced by its KEEP / VEC form (which makes the edits inside it),
    with its chains where `chains` (by loop) gives them."""
    keep, vec = names
    out = list(edits)
    for i, lp in enumerate(plan.loops):
        s, e = lp.region
        inside = [x for x in out if s <= x[0] and x[1] <= e and (x[0] < x[1] or s < x[0] < e)]
        out = [x for x in out if x not in inside]
        out.append((s, e, rewrite_rowkeep.loop_text(plan, i, src, inside, keep, vec, lanes, chains[i])))
    return out


# the rewrite in the rules' registry (agents/rewrites.py) ---------------------------------------

NAME = "rowwise"
MACROS = ("ROW_INDEX", "ROW_LANE", "ROW_MASK", "LANE_FIRST", "LANE_NEXT", "LEAD_ONLY")
POWERS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


class RowwisePass(Pass):
    """The row spread over a group of lanes (LANES: lanes; ROWS: rows, where the lifts made no block
    size), with its later stages made together: the row kept and packed (RowKeepPass), a pass's
    accumulators split into chains (RowChainsPass). It requires a thread per row, every loop over
    the row carrying sums, maxima, minima or the online pair only (`analyse`), and a 1-D launch."""

    name = NAME

    def requires(self, ctx: RewriteContext) -> str | Declined | None:
        if ctx.analysis.kind == "elementwise":
            return "a thread per element, not per row"
        broken = runtime_defect(ctx.backend, ctx.limits)
        if broken:
            return Declined(NAME, broken, for_device=True)
        try:
            analyse(ctx.source, ctx.original.entry)
        except NotRowwise as e:
            return str(e)
        clash = [m for m in MACROS if m in ctx.taken]
        if clash:
            return f"the source already uses the name {clash[0]}"
        if len(ctx.block) > 1 and any(b.strip() != "1" for b in ctx.block[1:]) or \
                len(ctx.grid) > 1 and any(g.strip() != "1" for g in ctx.grid[1:]):
            return "the launch is not one-dimensional"
        return None

    def apply(self, ctx: RewriteContext) -> "tuple[Rewrite, Rewrite | Declined] | Declined":
        """The stages: the row spread over lanes; the row kept and moved in packs; a pass carried
        through an exponential split into chains (each stage's source holds the ones before)."""
        kernel = analyse(ctx.source, ctx.original.entry)
        try:
            spread, how, threads, top = self._spread(ctx, kernel)
        except NotRowwise as e:
            return Declined(NAME, str(e))
        kept = ROWWISE_KEEP.stage(ctx, kernel, spread, how, threads, top)
        if isinstance(kept, Declined):
            return spread, kept
        return spread, kept, ROWWISE_CHAINS.stage(ctx, kernel, (spread, kept), how, threads)

    def _spread(self, ctx: RewriteContext, kernel: RowKernel) -> tuple[Rewrite, tuple, str, int]:
        taken = set(ctx.taken) | set(ctx.defaults)
        lanes = fresh_name(LANES, taken)
        block = ctx.block[0].strip()
        limits = ctx.limits
        top = min(limits.max_threads_per_block, 1024)
        lane_param = ParamProposal(lanes, tuple(v for v in POWERS if v <= top), 1,
                                   "threads sharing a row (1 = the original, a thread per row)", "lanes")
        one_row = "ROWS == 1"
        if block.isascii() and block.isdigit():
            threads = int(block)
            rows = fresh_name(ROWS, taken | {lanes})
            params = (lane_param, ParamProposal(rows, row_values(threads, limits), threads,
                                                "rows a block (the original's block size)", "rows"))
            rows_expr, new_block, default_rows = rows, (f"{lanes} * {rows}",), threads
            one_row = f"{rows} == 1"
            constraints = [f"{lanes} * {rows} <= max_threads_per_block"]
            edits, others = launch_sites(ctx.source, threads)
            if others:
                raise NotRowwise(f"the source's launch attribute says {others[0]} threads, the launch {threads}")
        elif block in ctx.defaults:  # the block size the lifts made a parameter: LANES of its threads a row
            rows_expr, new_block, default_rows = f"({block} / {lanes})", None, None
            params = (lane_param,)
            constraints = [f"{block} % {lanes} == 0"]
            one_row = f"{lanes} == {block}"
            edits = []
        else:
            raise NotRowwise(f"the launch's block size `{block}` is neither a number nor a parameter")
        if block not in expression_words(ctx.grid[0]):
            raise NotRowwise(f"the grid `{ctx.grid[0]}` is not the rows over the block size `{block}`")
        per_block = rows_expr.replace(" / ", " // ")  # exact (BLOCK % LANES == 0); // in the spec's expressions
        grid = (renamed(ctx.grid[0], block, per_block),) + tuple(ctx.grid[1:])
        if ctx.backend == "opencl":
            constraints.insert(0, f"{lanes} == 1 or {one_row}")  # lanes meet in local memory: a work-group per row
        else:
            constraints.insert(0, f"{lanes} <= 32 or {one_row}")  # a row over several warps has its block alone
        source = rewrite(ctx.source, kernel, rows_expr, default_rows, lanes, edits)
        accs = ", ".join(f"{a.op} of {a.name}" + (f" and {a.partner}" if a.partner else "")
                         for a in kernel.accumulators)
        spread = Rewrite(NAME, source, params,
                         f"the row spread over {lanes} threads ({len(kernel.loops)} loops over the row strided by "
                         f"the group; {accs or 'no accumulators'} combined across it; {len(kernel.lead_stores)} writes "
                         "outside the loops made by one lane)",
                         tuple(constraints), grid=grid, block=new_block)
        threads = new_block[0] if new_block else block
        return spread, (rows_expr, default_rows, lanes, edits), threads, top


class RowKeepPass(Pass):
    """The second stage (agents/rewrite_rowkeep.py): KEEP (keep) elements of the row in a lane's
    registers between passes, VEC (vector) adjacent elements moved as one pack. It requires a row
    read again in a later pass, or read and written at its loop's element on every iteration."""

    name = rewrite_rowkeep.NAME
    follows = (NAME,)
    stage_of = NAME

    def requires(self, ctx: RewriteContext) -> str | None:
        try:
            return analyse(ctx.source, ctx.original.entry).keep_reason or None
        except NotRowwise as e:
            return str(e)

    def apply(self, ctx: RewriteContext) -> Rewrite | Declined:
        """This stage of the row-wise pass made on the context's source (the earlier stage's changes in it)."""
        return _stage(ROWWISE(ctx), self.name)

    def stage(self, ctx: RewriteContext, kernel: RowKernel, spread: Rewrite, how: tuple, threads: str,
              top: int) -> Rewrite | Declined:
        plan = kernel.keep
        if plan is None:
            return Declined(self.name, kernel.keep_reason)
        taken = set(ctx.taken) | set(ctx.defaults) | {p.name for p in spread.parameters}
        clash = sorted(w for w in taken if w.startswith("kt_") or w in rewrite_rowkeep.MACROS)
        if clash:
            return Declined(self.name, f"the source already uses the name {clash[0]}")
        keep = fresh_name("KEEP", taken)
        vec = fresh_name("VEC", taken | {keep})
        rows_expr, default_rows, lanes, edits = how
        try:
            source = rewrite(ctx.source, kernel, rows_expr, default_rows, lanes, edits, (keep, vec, threads))
        except NotRowwise as e:
            return Declined(self.name, str(e))
        packs = tuple(v for v in (1, 2, 4, 8) if v * plan.size <= 16)
        words = plan.live_words()
        params = (ParamProposal(keep, (0, 4, 8, 16, 32, 64), 0, "elements of the row a lane keeps in registers "
                                "between passes (0 = none, the original)", "keep"),
                  ParamProposal(vec, packs, 1, f"adjacent elements a lane moves as one pack, a vector access where "
                                f"aligned ({packs[-1]} = 16 bytes; 1 = the original, one by one)", "vector"))
        constraints = [f"{keep} % {vec} == 0"]
        if words:  # the kept elements and about 24 more registers a thread must fit a block's registers
            constraints.append(f"{keep} == 0 or ({threads}) * ({keep} * {words} + 24) <= max_regs_per_block")
        kept = ", ".join(k.array for k in plan.kept)
        packed = sorted({s.array for lp in plan.loops for s in lp.streams if s.packed})
        what = (f"{kept} kept in a lane's registers from the first pass to the last" if kept else "nothing reread")
        return Rewrite(self.name, source, params,
                       f"the row kept on chip and moved in packs ({what}; {', '.join(packed)} in packs of {vec})",
                       tuple(constraints),
                       first={spread.parameters[0].name: (1, 32, top), keep: (0, 32), vec: (1, packs[-1])},
                       helps="memory")


class RowChainsPass(Pass):
    """The third stage (agents/rewrite_rowchains.py): CHAINS (chains) independent chains of a
    pass's accumulators a lane. It requires a pass that carries a value through an exponential."""

    name = rewrite_rowchains.NAME
    follows = (rewrite_rowkeep.NAME,)
    stage_of = NAME

    def requires(self, ctx: RewriteContext) -> str | None:
        try:
            kernel = analyse(ctx.source, ctx.original.entry)
        except NotRowwise as e:
            return str(e)
        if not kernel.chained:
            return "no pass carries a value through an exponential from one element to the next"
        return None

    def apply(self, ctx: RewriteContext) -> Rewrite | Declined:
        """This stage of the row-wise pass made on the context's source (the earlier stages' changes in it)."""
        return _stage(ROWWISE(ctx), self.name)

    def stage(self, ctx: RewriteContext, kernel: RowKernel, stages: tuple, how: tuple, threads: str) -> Rewrite | Declined:
        name = self.name
        if not kernel.chained:
            return Declined(name, "no pass carries a value through an exponential from one element to the next")
        taken = set(ctx.taken) | set(ctx.defaults) | {p.name for s in stages for p in s.parameters}
        if any(w.startswith(rewrite_rowchains.PREFIX) for w in ctx.taken):
            return Declined(name, f"the source already uses a name starting {rewrite_rowchains.PREFIX}")
        chains = fresh_name("CHAINS", taken)
        keep, vec = (p.name for p in stages[1].parameters)
        rows_expr, default_rows, lanes, edits = how
        try:
            source = rewrite(ctx.source, kernel, rows_expr, default_rows, lanes, edits, (keep, vec, threads), chains)
        except NotRowwise as e:
            return Declined(name, str(e))
        split = [", ".join(a.name + (f" and {a.partner}" if a.partner else "") for a in c.accumulators)
                 for c in kernel.chains if c is not None]
        return Rewrite(name, source,
                       (ParamProposal(chains, (1, 2, 4), 1, "independent chains of a pass's accumulators a lane runs "
                                                            "(1 = the original, one chain)", "chains"),),
                       f"{'; '.join(split)} split into {chains} independent chains a lane, combined at each pass's end",
                       first={chains: (1, 2, 4)})


def _stage(got, name: str) -> Rewrite | Declined:
    """The stage named of what the row-wise pass made (or the Declined that ended its stages first)."""
    for stage in got if isinstance(got, tuple) else (got,):
        if isinstance(stage, Declined) or stage.name == name:
            return stage
    return Declined(name, "the row-wise pass made no such stage")


# the passes (agents/rewrites.py registers them); each is called as a function of a RewriteContext
ROWWISE = RowwisePass()
ROWWISE_KEEP = RowKeepPass()
ROWWISE_CHAINS = RowChainsPass()
rewrite_rowwise = ROWWISE


def runtime_defect(backend: str, limits: DeviceLimits) -> str:
    """Why the device's runtime cannot run a row spread over lanes correctly ("" when it can): its
    check found a guarded store loop after a barrier compiled to store past its bound."""
    if backend != "opencl" or STORE_AFTER_BARRIER not in limits.extra.get("defects", ()):
        return ""
    return (f"this device's OpenCL runtime ({limits.driver or limits.name}) miscompiles it: "
            f"{DEFECTS[STORE_AFTER_BARRIER]} (its self-check at start; `kerntune devices`)")


def row_values(default: int, limits: DeviceLimits) -> tuple[int, ...]:
    """Rows a block: powers of two up to a block's threads, the original's block size among them."""
    top = min(limits.max_threads_per_block, 1024)
    return tuple(sorted({v for v in POWERS if v <= top} | {default}))
