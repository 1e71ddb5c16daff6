"""The row kept on chip between passes, and moved in vector packs: the second stage of the row-wise rewrite.

A row-wise kernel often reads its row more than once: a softmax reads it for the maximum, again
for the sum of exponentials, and again for the output. Once the row is spread over a group of
lanes (agents/rewrite_rowwise.py), each lane owns the same elements in every pass, so it can keep
them. Two parameters:

- `KEEP`: elements of the row a lane keeps in registers (0 = none, the original). The first pass
  that touches an array loads the lane's first KEEP elements of it into a register array (fully
  unrolled loops, so every index is known when compiling and the array stays in registers); later
  passes use those registers instead of memory. An array the kernel writes and reads back in a
  later pass (a two-pass softmax rescaling its output in place) is kept the same way, and its kept
  elements reach memory once, from the last pass that writes them. Elements past the kept ones
  go through memory as before, so any row length is right.
- `VEC`: adjacent elements a lane moves as one pack (1 = element by element): a lane's elements
  are packs of VEC, `KEEP / VEC` of them kept; a pack is read or written with one wide access
  where its address is aligned (16-byte words in CUDA, vloadN / vstoreN in OpenCL), element by
  element where not. The elements past the last whole pack go one by one.

Each applies only where the analysis proves it safe: an array is kept or packed only where every
access of it in the pass is at the pass's own element (`p[e + i]` for the loop's `i`, the same `e`
in every pass), the pass touches it on every iteration (so the original reads or writes every
element a pack covers), no other name reaches its buffer, its pointer is not passed on, compared
or reassigned, and the kernel either never writes its buffer or writes it only at elements the
lane owns. Distinct arguments are distinct buffers, as the spec's arguments are. `KEEP = 0` and
`VEC = 1` give the original loops token for token.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from .model import Access, KernelModel, function_declarator
from .passes import defaults
from .rewrite_elementwise import CUDA_HELPERS, OPENCL_HALF_HELPERS, OPENCL_HELPERS, indented
from . import syntax as sx

NAME = "rowwise_keep"
MACROS = ("KT_ALIGNED", "KT_ROW_LOAD", "KT_ROW_STORE", "KT_LOAD", "KT_STORE", "KT_LOAD_HALF", "KT_STORE_HALF",
          "KT_CAT", "KT_CAT_")  # besides kt_ names, the ones the stage defines
# bytes of an element in memory, by its type's name; an array of another type is left as it is
SIZES = {"float": 4, "double": 8, "int": 4, "unsigned": 4, "unsigned int": 4, "uint": 4, "short": 2,
         "unsigned short": 2, "ushort": 2, "char": 1, "unsigned char": 1, "uchar": 1, "long": 8,
         "unsigned long": 8, "ulong": 8, "half": 2, "__half": 2, "__nv_bfloat16": 2, "nv_bfloat16": 2,
         "__nv_half": 2, "int8_t": 1, "uint8_t": 1, "int16_t": 2, "uint16_t": 2, "int32_t": 4,
         "uint32_t": 4, "int64_t": 8, "uint64_t": 8}
HALF_LOAD, HALF_STORE = "vload_half", "vstore_half"
# what a loop's start, end or an element's offset may be made of to be copied and to hold still
PURE = {"identifier", "number_literal", "binary_expression", "unary_expression", "parenthesized_expression",
        "cast_expression", "type_descriptor", "primitive_type", "sized_type_specifier", "type_identifier",
        "sizeof_expression", "type_qualifier"}
BRANCHING = {"switch_statement", "case_statement", "for_statement", "while_statement", "do_statement"}


class NotKept(ValueError):
    """The row cannot be kept or packed; the message says why."""


@dataclass(frozen=True)
class Stream:
    """An array that moves with a loop's element; `address` is its pack's first element, kt_j0."""

    array: str
    ctype: str  # the element's type in registers
    size: int  # bytes of an element in memory
    half: bool  # read and written through vload_half / vstore_half: floats in registers
    address: str
    key: str  # the element's offset from the loop's counter, without blanks
    accesses: tuple[Access, ...]
    packed: bool  # touched on every iteration: a pack may be read or written whole
    load: bool  # read before it is written whole: a pack starts from memory
    written: bool


@dataclass(frozen=True)
class KeepLoop:
    """A loop over the row as the stage sees it."""

    region: tuple[int, int]  # from the start of its first line (its pragmas' included) to its end
    var: str
    vtype: str
    start: str
    end: str
    body: tuple[int, int]
    indent: str
    parent: int  # the block it is a statement of, by its first byte
    streams: tuple[Stream, ...]

    def stream(self, array: str) -> Stream | None:
        return next((s for s in self.streams if s.array == array), None)


@dataclass(frozen=True)
class Kept:
    """An array kept in registers from the pass that first touches it to the last."""

    array: str
    ctype: str
    words: int  # 32-bit registers an element takes
    loops: tuple[int, ...]  # indices into KeepPlan.loops
    last_store: int | None  # the last pass that writes it: it writes the kept elements to memory


@dataclass(frozen=True)
class KeepPlan:
    """What the stage does to each row loop, and what it keeps across them."""

    loops: tuple[KeepLoop, ...]
    kept: tuple[Kept, ...]
    bounds: tuple[str, str] | None  # the kernel's head before its name and from it (CUDA: declared with bounds)
    regs: str  # what a register array's declaration starts with: 16-byte alignment in CUDA (a pack's word)
    size: int  # bytes of the largest packed element

    @property
    def half(self) -> bool:
        return any(s.half for lp in self.loops for s in lp.streams if s.packed)

    def live_words(self) -> int:
        """Registers per kept element at most at once: the arrays kept across one gap between passes."""
        most = max((k.words for k in self.kept), default=0)
        for gap in range(1, len(self.loops)):
            most = max(most, sum(k.words for k in self.kept if k.loops[0] < gap <= k.loops[-1]))
        return most


# the analysis -----------------------------------------------------------------------------------

def plan(src: bytes, fn, body, loops: list, stores: list, sites: list, dialect: str, head: int,
         m: KernelModel) -> KeepPlan:
    """What can be kept and packed in the row loops `loops` (rewrite_rowwise's, in order) of the
    kernel `fn` (its declaration from byte `head`, its kernel word included), whose element writes
    are `stores` ((node, array, index)); `m` is its kernel model (a stream's accesses are the model's,
    its pointers the model's arguments and local pointers into them); NotKept says why nothing can."""
    accesses = {(a.span.start, a.span.end): a for a in m.accesses if a.function == m.name}
    pointers = _pointers(m)
    escaped = set(m.opaque)
    assigned = {sx.text(t) for n in sx.walk(body) for t in [sx.target(n)] if t is not None and t.type == "identifier"}
    written_roots = {pointers.get(a, ("", None))[1] for _, a, _ in stores}
    reached: dict[str | None, set[str]] = {}  # buffer -> the names its elements are reached through
    for n in sx.walk(body):
        el = sx.element(n)
        if el is not None and el[0]:
            reached.setdefault(pointers.get(el[0], ("", None))[1], set()).add(el[0])
    facts = _Facts(src, pointers, escaped, assigned, written_roots, reached, sites, accesses)
    out = [_keep_loop(facts, lp) for lp in loops]
    # an array one loop writes and another touches: every loop must give its elements to the same lanes
    written = {a for n, a, _ in stores if any(sx.within(n, lp.node) for lp in loops)}
    for a in written:
        ranges = {(k.start, k.end) for k, lp in zip(out, loops)
                  if any(el is not None and el[0] == a for el in map(sx.element, sx.walk(lp.node)))}
        if len(ranges) > 1:
            raise NotKept(f"{a} is written in one loop and touched in another over a different range: "
                          "their elements would go to different lanes")
    if not any(s.packed for lp in out for s in lp.streams):
        raise NotKept("no array is read or written at its loop's element on every iteration")
    cuda = dialect == "cuda"
    return KeepPlan(tuple(out), _kept(out, written), _bounds(src, fn, body, head) if cuda else None,
                    "__align__(16) " if cuda else "", max(s.size for lp in out for s in lp.streams if s.packed))


def _bounds(src: bytes, fn, body, head: int) -> tuple[str, str] | None:
    """The kernel's head, cut before its name, for a declaration with launch bounds (nvcc applies a
    declaration's bounds to the definition that follows); None for a template or one with bounds."""
    decl = function_declarator(fn)
    p = fn.parent
    if decl is None or (p is not None and p.type == "template_declaration") \
            or b"__launch_bounds__" in src[head:body.start_byte]:
        return None
    start = p.start_byte if p is not None and p.type == "linkage_specification" and \
        sx.same(p.child_by_field_name("body"), fn) else head
    start = min(start, head)
    name = decl.child_by_field_name("declarator").start_byte
    return src[start:name].decode("utf-8"), src[name:body.start_byte].decode("utf-8").rstrip()


@dataclass(frozen=True)
class _Facts:
    """What the whole kernel says about its pointers and names."""

    src: bytes
    pointers: dict  # name -> (element type, the parameter whose buffer it points into, or None)
    escaped: set  # buffers reached otherwise than by an access (the model's opaque arguments)
    assigned: set  # names the kernel assigns after declaring them
    written_roots: set  # buffers the kernel writes (None: a write to a buffer not known)
    reached: dict  # buffer -> the names its elements are reached through
    sites: list  # the thread index's spans
    accesses: Mapping  # the kernel model's accesses by their spans


def _keep_loop(facts: _Facts, lp) -> KeepLoop:
    src, node, line = facts.src, lp.node, sx.line(lp.node)
    init = node.child_by_field_name("initializer")
    if init is None or init.type != "declaration":
        raise NotKept(f"line {line}: the loop's counter {lp.var} is declared outside the loop")
    parent = node.parent
    if parent is None or parent.type != "compound_statement":
        raise NotKept(f"line {line}: the loop is not a statement of a block")
    line_start = src.rfind(b"\n", 0, node.start_byte) + 1
    if src[line_start:node.start_byte].strip():
        raise NotKept(f"line {line}: the loop shares its first line with other code")
    line_end = src.find(b"\n", node.end_byte)
    rest = src[node.end_byte:line_end if line_end >= 0 else len(src)].strip()
    if rest and not rest.startswith(b"//"):
        raise NotKept(f"line {line}: the loop shares its last line with other code")
    start = line_start
    while start > 0:  # the pragmas that go with the loop
        above = src.rfind(b"\n", 0, start - 1) + 1
        if not src[above:start].strip().startswith((b"#pragma", b"KERNTUNE_PRAGMA")):
            break
        start = above
    value = init.named_children[-1].child_by_field_name("value")
    end = sx.strip(node.child_by_field_name("condition")).child_by_field_name("right")
    for what, n in (("start", value), ("end", end)):
        why = _impure(n, facts.assigned)
        if why:
            raise NotKept(f"line {line}: the loop's {what} `{sx.text(n)}` {why}")
    body = node.child_by_field_name("body")
    return KeepLoop((start, node.end_byte), lp.var, sx.text(init.child_by_field_name("type")), _text(src, value),
                    _text(src, end), (body.start_byte, body.end_byte), src[line_start:node.start_byte].decode(),
                    parent.start_byte, tuple(_streams(facts, lp, body)))


def _streams(facts: _Facts, lp, body) -> list[Stream]:
    """The arrays that move with the loop's element, and how."""
    by_array: dict[str, list] = {}
    excluded: set[str] = set()
    for n in sx.walk(body):
        el = sx.element(n)
        if el is None or not el[0]:
            continue
        array, index = el
        if n.type == "call_expression" and sx.call_name(n) not in (HALF_LOAD, HALF_STORE):
            excluded.add(array)  # vloadN reads N elements
            continue
        own, offset = _offset(index, lp.var)
        if own:
            by_array.setdefault(array, []).append((n, offset))
        elif index is not None and lp.var in sx.names(index):
            excluded.add(array)  # p[2 * i]: not the loop's element
    always = not any(n.type == "continue_statement" for n in sx.walk(body))
    out = []
    for array, xs in by_array.items():
        ptype, root = facts.pointers.get(array, ("", None))
        keys = {sx.compact(o) if o is not None else "" for _, o in xs}
        offset = xs[0][1]
        written = root in facts.written_roots
        if (array in excluded or root is None or root in facts.escaped or array in facts.assigned or len(keys) != 1
                or _impure(offset, facts.assigned)
                or (offset is not None and any(_inside(s, offset) for s in facts.sites))
                or (written and facts.reached.get(root, set()) != {array})  # another name reaches its buffer
                or (not written and None in facts.written_roots)):  # a write to a buffer not known
            continue
        calls = {n.type == "call_expression" for n, _ in xs}
        if calls == {True, False}:
            continue
        half = calls == {True}
        ctype = "float" if half else ptype
        size = 2 if half else SIZES.get(ctype, 0)
        if not size:
            continue
        accesses = tuple(facts.accesses.get((n.start_byte, n.end_byte)) for n, _ in xs)
        if None in accesses:  # an element the kernel model does not read as one: left as written
            continue
        address = f"{array} + (kt_j0 + ({_text(facts.src, offset)}))" if offset is not None else f"{array} + kt_j0"
        out.append(Stream(array, ctype, size, half, address, next(iter(keys)), accesses,
                          always and any(_always(n, body) for n, _ in xs),
                          not _store_first(body, [n for n, _ in xs]), written))
    return out


def _kept(loops: list[KeepLoop], written: set[str]) -> tuple[Kept, ...]:
    """The arrays worth keeping: touched in two passes or more, over the same range and at the same
    offset, in loops of one block, the first of them touching every element."""
    out = []
    for a in dict.fromkeys(s.array for lp in loops for s in lp.streams):
        at = [i for i, lp in enumerate(loops) if lp.stream(a) is not None]
        first = loops[at[0]].stream(a)
        if len(at) < 2 or not first.packed or (first.half and a in written):
            continue  # a half kept as a float would skip the rounding its store makes
        if len({(loops[i].start, loops[i].end, loops[i].stream(a).key, loops[i].parent) for i in at}) != 1:
            continue
        stores = [i for i in at if loops[i].stream(a).written]
        out.append(Kept(a, first.ctype, 1 if first.half else max(1, first.size // 4), tuple(at),
                        stores[-1] if stores else None))
    return tuple(out)


def _store_first(body, nodes: list) -> bool:
    """Whether the loop's first statement that touches the array writes its element whole (`p[i] = v;`,
    `vstore_half(v, i, p);`) without reading it: then a pack need not be read first."""
    for st in body.named_children if body.type == "compound_statement" else [body]:
        mine = [n for n in nodes if sx.within(n, st)]
        if not mine:
            continue
        e = st.named_children[0] if st.type == "expression_statement" and st.named_child_count == 1 else None
        if e is not None and e.type == "assignment_expression" and sx.text(e.child_by_field_name("operator")) == "=":
            return len(mine) == 1 and sx.same(sx.strip(e.child_by_field_name("left")), mine[0])
        if e is not None and e.type == "call_expression" and sx.call_name(e) == HALF_STORE:
            return len(mine) == 1 and sx.same(e, mine[0])
        return False
    return False


def _always(node, body) -> bool:
    """Whether `node` runs on every iteration of the loop whose body is `body` (no branch between)."""
    child, p = node, node.parent
    while p is not None and not sx.same(child, body):
        if p.type in ("if_statement", "conditional_expression") and \
                not sx.same(child, p.child_by_field_name("condition")):
            return False
        if p.type == "binary_expression" and sx.text(p.child_by_field_name("operator")) in ("&&", "||") \
                and sx.same(child, p.child_by_field_name("right")):
            return False
        if p.type in BRANCHING:
            return False
        child, p = p, p.parent
    return True


def _offset(index, var: str) -> tuple[bool, object]:
    """(True, None) for the index `var`, (True, e) for `e + var` or `var + e` with e free of var,
    (False, None) for any other index."""
    index = sx.strip(index)
    if index is not None and index.type == "subscript_argument_list" and index.named_child_count == 1:
        index = sx.strip(index.named_children[0])
    if index is None:
        return False, None
    if index.type == "identifier" and sx.text(index) == var:
        return True, None
    if index.type == "binary_expression" and sx.text(index.child_by_field_name("operator")) == "+":
        left, right = sx.strip(index.child_by_field_name("left")), sx.strip(index.child_by_field_name("right"))
        for a, b in ((left, right), (right, left)):
            if a is not None and a.type == "identifier" and sx.text(a) == var and var not in sx.names(b):
                return True, b
    return False, None


def _impure(node, assigned: set) -> str:
    """Why an expression may change between passes or cannot be copied (a call, a memory read, a name
    the kernel assigns); '' when it is made of constants and names the kernel never assigns."""
    for n in sx.walk(node) if node is not None else ():
        if not n.is_named:
            continue
        if n.type not in PURE:
            return f"is not made of names and constants (a {n.type.replace('_', ' ')})"
        if n.type == "identifier" and sx.text(n) in assigned:
            return f"reads {sx.text(n)}, which the kernel assigns"
        if n.type == "unary_expression" and sx.text(n.child_by_field_name("operator")) not in ("-", "+", "~", "!"):
            return f"applies {sx.text(n.child_by_field_name('operator'))}"
    return ""


def _pointers(m: KernelModel) -> dict[str, tuple[str, str | None]]:
    """Each pointer of the kernel (the model's arguments, and its local pointers into them): its
    element type as written, and the argument whose buffer it points into (None where its
    initialiser names more than one, or none)."""
    out: dict[str, tuple[str, str | None]] = {p: (m.arg_types.get(p, ""), p) for p in m.pointers}
    for name, (root, _) in m.aliases.items():
        out[name] = (m.types.get(name, ""), root)
    for name, roots in m.casts.items():
        out[name] = (m.types.get(name, ""), roots[0] if len(roots) == 1 else None)
    return out


# the rewrite -------------------------------------------------------------------------------------

CUDA_KEEP = """\
extern "C++" {
// a pack of N elements: one wide access where the pass's packs are aligned (`whole`), else one by one
template <int N, typename T> __device__ __forceinline__ void kt_row_copy(T *dst, const T *src, bool whole) {
    if (whole) {
        kt_store<N, 0>(dst, src);
    } else {
#pragma unroll
        for (int k = 0; k < N; ++k) dst[k] = src[k];
    }
}
}
#define KT_ALIGNED(p) kt_aligned<VEC>(p)
#define KT_ROW_LOAD(dst, src, whole) kt_row_copy<VEC>(dst, src, whole)
#define KT_ROW_STORE(dst, src, whole) kt_row_copy<VEC>(dst, src, whole)
"""

OPENCL_KEEP = """\
// vloadN and vstoreN need their elements' alignment only
#define KT_ALIGNED(p) 1
#define KT_ROW_LOAD(dst, src, whole) KT_LOAD(dst, src)
#define KT_ROW_STORE(dst, src, whole) KT_STORE(dst, src)
"""


def prelude(plan: KeepPlan, dialect: str, keep: str, vec: str, block: str, chains: str = "") -> str:
    """The stage's macros and helpers, before the kernel; only defaults when KEEP = 0 and VEC = 1
    (and CHAINS = 1, `chains` its name where the third stage is made)."""
    out = [f"// kerntune: {keep} elements of the row kept in a lane's registers between passes (0: none),",
           f"// moved in packs of {vec} adjacent elements (1: one by one).",
           defaults([(keep, 0), (vec, 1)]).rstrip("\n"),
           f"#if {keep} > 0 || {vec} > 1" + (f" || {chains} > 1" if chains else "")]
    if dialect == "cuda":
        out += [CUDA_HELPERS.rstrip("\n"), CUDA_KEEP.replace("<VEC>", f"<{vec}>").rstrip("\n")]
    else:
        out.append(OPENCL_HELPERS.format(vec=vec).rstrip("\n"))
        if plan.half:
            out.append(OPENCL_HALF_HELPERS.format(vec=vec).rstrip("\n"))
        out.append(OPENCL_KEEP.rstrip("\n"))
    out.append("#endif")
    if plan.bounds is not None:  # a lane's kept elements: the compiler must fit the block's registers
        before, after = plan.bounds
        out.append(f"#if {keep} > 0\n{before}__launch_bounds__({block}) {after};\n#endif")
    return "\n".join(out) + "\n"


def loop_text(plan: KeepPlan, i: int, src: bytes, edits: list, keep: str, vec: str, lanes: str,
              chains: tuple | None = None) -> str:
    """Loop `i` of the plan rewritten for KEEP and VEC: the kept packs (loaded all at once where this
    pass is the first, so that their loads are in flight together), the packs past them, the
    elements past the last whole pack; with KEEP = 0 and VEC = 1 the original loop, `edits` made.
    `chains` (CHAINS's name, the loop's rewrite_rowchains.ChainLoop, the dialect) gives the lane
    CHAINS copies of the loop's accumulators, its elements going to them in turn (the third stage)."""
    lp = plan.loops[i]
    d0, d1, d2, d3 = (lp.indent + "    " * k for k in range(4))
    kept = {k.array: k for k in plan.kept if i in k.loops}
    fills = [s for s in lp.streams if s.array in kept and kept[s.array].loops[0] == i]
    out = [f"#if {keep} > 0\n{d0}{plan.regs}{s.ctype} kt_keep_{s.array}[{keep} / {vec}][{vec}];\n#endif"
           for s in fills]
    count, chain = (chains[0], chains[1]) if chains is not None else ("", None)

    def mine(which: str) -> list:  # the edits, the accumulators made chain `which`'s copies
        return list(edits) + (chain.edits(which) if chain is not None else [])

    out += [f"#if {keep} > 0 || {vec} > 1" + (f" || {count} > 1" if count else ""), f"{d0}{{",
            f"{d1}const {lp.vtype} kt_n = ({lp.end}) > ({lp.start}) ? ({lp.end}) - ({lp.start}) : 0, "
            f"kt_packs = kt_n / {vec}, kt_j0 = ({lp.start});"]
    whole = " && ".join(f"KT_ALIGNED({s.address})" for s in lp.streams if s.packed and not s.half) or "1"
    out.append(f"{d1}const bool kt_al = {whole};  // every pack of this pass in one access")
    if chain is not None:
        out += chain.setup(count, d1)
    slot = [f"{d1}for (int kt_s = 0; kt_s < {keep} / {vec}; ++kt_s) {{",
            f"{d2}const {lp.vtype} kt_p = ROW_LANE + kt_s * {lanes};", f"{d2}if (kt_p < kt_packs) {{"]
    first = f"{d3}const {lp.vtype} kt_j0 = ({lp.start}) + kt_p * {vec};"
    out.append(f"#if {keep} > 0")
    loads = [s for s in fills if s.load]
    if loads:  # the first pass loads the kept packs before it uses any
        for branch, how in (("if (kt_al) {", "1"), ("} else {", "0")):
            out += [f"{d1}{branch}", "#pragma unroll"] + ["    " + x for x in slot + [first]]
            out += [f"{d3}    {_load(s, f'kt_keep_{s.array}[kt_s]', how)};" for s in loads]
            out += [f"{d2}    }}", f"{d1}    }}"]
        out.append(f"{d1}}}")
    # the kept packs: the lane's first KEEP / VEC
    packs = [s for s in lp.streams if s.packed and s.array not in kept]
    regs = {s.array: f"kt_keep_{s.array}[kt_s][kt_v]" for s in lp.streams if s.array in kept}
    inner = _pack_loads(plan, packs, vec, d3)
    inner.append(_element_loop(src, lp, mine(f"(kt_s * {vec} + kt_v) % {count}"),
                               {**regs, **{s.array: f"kt_pack_{s.array}[kt_v]" for s in packs}}, vec, d3))
    inner += [f"{d3}{_store(s, f'kt_keep_{s.array}[kt_s]')};" for s in lp.streams
              if s.array in kept and kept[s.array].last_store == i]
    inner += [f"{d3}{_store(s, f'kt_pack_{s.array}')};" for s in packs if s.written]
    out += ["#pragma unroll"] + slot + ([first] if any("kt_j0" in x for x in inner) else []) + inner
    out += [f"{d2}}}", f"{d1}}}", "#endif"]
    # the packs past the kept ones
    packs = [s for s in lp.streams if s.packed]
    regs = {s.array: f"kt_pack_{s.array}[kt_v]" for s in packs}
    past = f"ROW_LANE + {keep} / {vec} * {lanes}"
    if chain is not None:  # a group of packs at once, enough for an element a chain, then those left
        group = f"({count} > {vec} ? {count} / {vec} : 1)"
        out += [f"{d1}{lp.vtype} kt_p = {past};",
                f"{d1}for (; kt_p + ({group} - 1) * {lanes} < kt_packs; kt_p += {group} * {lanes}) {{",
                f"#pragma unroll\n{d2}for (int kt_g = 0; kt_g < {group}; ++kt_g) {{"]
        out += _pack(plan, lp, src, mine(f"(kt_g * {vec} + kt_v) % {count}"), regs, packs, vec,
                     f"(kt_p + kt_g * {lanes})", d3)
        out += [f"{d2}}}", f"{d1}}}", f"{d1}for (; kt_p < kt_packs; kt_p += {lanes}) {{"]
    else:
        out.append(f"{d1}for ({lp.vtype} kt_p = {past}; kt_p < kt_packs; kt_p += {lanes}) {{")
    out += _pack(plan, lp, src, mine(f"kt_v % {count}"), regs, packs, vec, "kt_p", d2)
    out.append(f"{d1}}}")
    # the elements past the last whole pack, fewer than VEC
    out.append(f"{d1}for ({lp.vtype} {lp.var} = ({lp.start}) + kt_packs * {vec} + ROW_LANE; {lp.var} < {lp.end}; "
               f"{lp.var} += {lanes}) {_body(src, lp, mine('0'), {}, d1)}")
    if chain is not None:
        out += chain.finish(count, chains[2], d1)
    out += [f"{d0}}}", "#else", _spliced(src, lp.region[0], lp.region[1], edits), "#endif"]
    return "\n".join(out)


def _pack(plan: KeepPlan, lp: KeepLoop, src: bytes, edits: list, regs: dict, packs: list, vec: str, p: str,
          ind: str) -> list[str]:
    """One pack of the lane's, the `p`th of the row, not kept: loaded, its elements' bodies, stored."""
    out = [f"{ind}const {lp.vtype} kt_j0 = ({lp.start}) + {p} * {vec};"]
    out += _pack_loads(plan, packs, vec, ind)
    out.append(_element_loop(src, lp, edits, regs, vec, ind))
    out += [f"{ind}{_store(s, f'kt_pack_{s.array}')};" for s in packs if s.written]
    return out


def _load(s: Stream, dst: str, whole: str = "kt_al") -> str:
    return f"KT_LOAD_HALF({dst}, {s.address})" if s.half else f"KT_ROW_LOAD({dst}, {s.address}, {whole})"


def _store(s: Stream, src: str) -> str:
    return f"KT_STORE_HALF({s.address}, {src})" if s.half else f"KT_ROW_STORE({s.address}, {src}, kt_al)"


def _pack_loads(plan: KeepPlan, streams: list[Stream], vec: str, ind: str) -> list[str]:
    out = []
    for s in streams:
        out.append(f"{ind}{plan.regs}{s.ctype} kt_pack_{s.array}[{vec}];")
        if s.load:
            out.append(f"{ind}{_load(s, f'kt_pack_{s.array}')};")
    return out


def _element_loop(src: bytes, lp: KeepLoop, edits: list, regs: dict, vec: str, ind: str) -> str:
    inner = ind + "    "
    body = _body(src, lp, edits, regs, inner)
    counter = f"{inner}{lp.vtype} {lp.var} = kt_j0 + kt_v;\n" if sx.uses(body, lp.var) else ""
    return f"#pragma unroll\n{ind}for (int kt_v = 0; kt_v < {vec}; ++kt_v) {{\n{counter}{inner}{body}\n{ind}}}"


def _body(src: bytes, lp: KeepLoop, edits: list, regs: dict, ind: str) -> str:
    """The loop's body with `edits` made, each access of an array of `regs` made to its register."""
    mine = []
    for s in lp.streams:
        reg = regs.get(s.array)
        for x in s.accesses if reg is not None else ():
            if x.value_span is not None:  # vstore_half(v, i, p) -> (reg = (v))
                mine += [(x.span.start, x.value_span.start, f"({reg} = ("), (x.value_span.end, x.span.end, "))")]
            else:
                mine.append((x.span.start, x.span.end, reg))
    return indented(_spliced(src, lp.body[0], lp.body[1], mine + list(edits)), len(lp.indent), len(ind))


def _spliced(src: bytes, start: int, end: int, edits: list) -> str:
    """src[start:end] with the edits that fall inside it made; an edit inside a larger one gives way."""
    out, pos = [], start
    inside = [x for x in edits if start <= x[0] and x[1] <= end and (x[0] < x[1] or start < x[0] < end)]
    for s, e, t in sorted(inside, key=lambda x: (x[0], -x[1])):
        if s < pos:
            continue
        out += [src[pos:s].decode("utf-8"), t]
        pos = e
    out.append(src[pos:end].decode("utf-8"))
    return "".join(out)


def _text(src: bytes, node) -> str:
    """A node's source as written (the parsed text has the dialect's words blanked)."""
    return src[node.start_byte:node.end_byte].decode("utf-8") if node is not None else ""


def _inside(span: tuple[int, int], node) -> bool:
    return node.start_byte <= span[0] and span[1] <= node.end_byte
