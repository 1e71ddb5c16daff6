"""The contraction rewrite: shared-memory tiles and register blocking for a kernel in which each
thread computes one output as a sum over a shared index of products of two operands (a matrix
product in either layout, with any epilogue: alpha/beta, a cast, a bias).

What the analysis must show (else it declines with the reason):

- the thread's output has two coordinates, `r` and `c`, locals made from thread and block ids,
  each bounded by the guard (`if (r < M && c < N)` or `if (r >= M || c >= N) return;`), or, where
  no guard names it, a global index whose bound is the original launch's extent (every thread the
  original makes writes its output);
- one loop `for (k = S; k < E; ++k)` (or `<=`) whose bounds read neither coordinate, carrying one
  accumulator updated as `acc += X * Y`, `acc = acc + X * Y` or `acc = fma(X, Y, acc)`, where the
  factors split into an operand X that reads `r` (and `k`) but not `c`, and an operand Y that reads
  `c` (and `k`) but not `r`; no other statement in the loop than locals feeding the update;
- after the loop, statements that write only at indices reading both coordinates (the thread's
  own output), and no array the operands read is written anywhere (no aliasing the analysis can
  see; distinct buffers are the spec's promise);
- no barrier, shared memory or atomic already (a kernel tiled by hand is left alone), no other
  control flow than the guard.

The new kernel (beside the original under `#if BK > 0`; BK = 0 is the original token for token):
a block computes a BM x BN tile of outputs; each k-step of BK loads X over BM x BK and Y over
BK x BN into shared memory (as the accumulator's type, out-of-range elements as zero, each
element read along the index its operand walks contiguously, so loads coalesce); each thread
keeps TM x TN accumulators in registers and reads TM values of X and TN of Y per k (as float4 in
CUDA when TM or TN is a multiple of 4); the epilogue runs as written for each of the thread's
outputs that the guard admits. The sum over k keeps its order (k ascending, one accumulator per
output), so the result is the original's bit for bit where the compiler contracts the same way;
the gate's calibrated tolerance covers the rest. Any size is correct: the tile loads and the
epilogue test the guard's conditions and the loop's own condition.
"""

from __future__ import annotations

from dataclasses import dataclass

from kerntune.engine.proposal import ParamProposal

from . import affine, contraction_mma, contraction_tiled, contraction_wgmma
from .cooperate import (Decline, Dialect, ReadingPass, beside, body_of, expression_names, guard_parts, header, inlined,
                        is_pragma, kernel_spans, launch_extent, pinned, product_update, reads_thread_ids, spec_scalars, spec_text,
                        strip_parens, substituted, unbounded_header, within)
from .kernel_tree import span_of, syntax_nodes
from .model import DIALECT, ModelError
from .passes import Rewrite, RewriteContext


NAME = "contraction"
SWITCH = "BK"
ELEMENT_BYTES = {"float": 4, "double": 8, "int": 4, "half": 2, "__half": 2, "long": 8, "unsigned": 4}


@dataclass(frozen=True)
class Contraction:
    """A thread-per-output contraction, read from the kernel."""

    r: str
    c: str
    r_type: str
    c_type: str
    k: str
    k_type: str
    start: str  # the loop's start, inlined
    k_cond: str  # the loop's condition over `kt_k`
    r_conds: tuple[str, ...]  # the guard's conditions on r, over `kt_r`
    c_conds: tuple[str, ...]
    m_spec: str  # the bound of r over the spec's problem names
    n_spec: str
    acc_type: str
    acc_init: str
    x: str  # the operand reading r, over kt_r and kt_k
    y: str  # the operand reading c, over kt_c and kt_k
    update: str  # "op=" ("+=", "-=") or an fma function's name
    epilogue: tuple[str, ...]  # statements over kt_r, kt_c and kt_v (the sum)
    x_k_fast: bool  # X's elements are contiguous along k (else along r)
    y_k_fast: bool  # Y's along k (else along c)
    kb_cond: str  # the loop's condition over `kt_kb`, a tile's first k
    # where only the original's launch knows an extent of the outputs (no argument gives it): the
    # tiles' grid keeps the original's count of blocks along it (m_blocks, n_blocks, over the spec's
    # names), blocks past the extent return first (`exits`), and what the tiles need of BM, BN
    whole: tuple[str, ...] = ()
    m_blocks: str = ""
    n_blocks: str = ""
    exits: tuple[str, ...] = ()
    tiled: str = ""  # where a product tiled by hand was read from ("" for a thread per output)
    # where X's (Y's) element is loaded besides the guard, over kt_r (kt_c) and kt_k, zero elsewhere:
    # a hand-tiled fill's own bounds ("" for none)
    x_load: str = ""
    y_load: str = ""


class ContractionPass(ReadingPass):
    """The contraction rewrite as a pass: it requires the contraction `read` finds in the kernel
    (declined with the reason `read` gives otherwise)."""

    name = NAME

    def read(self, ctx: RewriteContext):
        return read(ctx)

    def emit(self, ctx: RewriteContext, found) -> Rewrite:
        return _rewrite(ctx, found)


# the pass, called as a function of a RewriteContext (agents/rewrites.py registers it)
rewrite = ContractionPass()


def read(ctx: RewriteContext) -> Contraction:
    """The contraction the kernel computes; Decline with the reason when it is none."""
    try:
        a = ctx.model
    except ModelError as e:
        raise Decline(str(e)) from None
    if a.cooperates:
        # a product tiled by hand: the contraction its tiles compose to
        try:
            _no_pointer_passed(a)
            found = contraction_tiled.read(ctx)
        except Decline as e:
            raise Decline(f"its threads already cooperate, and not as a product tiled by hand: {e}") from None
        return Contraction(**found, x_k_fast=_fast(found["x"], "kt_k", "kt_r"),
                           y_k_fast=_fast(found["y"], "kt_k", "kt_c"))
    _no_pointer_passed(a)
    sums = [acc for acc in a.accumulators if acc.op == "sum"]
    if len(sums) != 1 or len(a.accumulators) != 1:
        raise Decline("not one sum carried across a loop" if not sums else "more than one accumulator")
    acc = sums[0]
    loop = a.loops[acc.loop]
    if sum(lp.in_kernel for lp in a.loops) != 1 or loop.depth or not loop.in_kernel:
        raise Decline("not one loop around the sum (a loop nest)")
    if loop.step != "1" or not loop.var or not loop.bound or loop.compare not in ("<", "<="):
        raise Decline(f"the loop over `{loop.var or '?'}` does not step by one to a bound")
    body = body_of(ctx.source, kernel_spans(ctx.source, a))
    text_of = body.text_of
    loops = [s for s in body.statements if s.type == "for_statement"]
    if len(loops) != 1 or span_of(ctx.source, loops[0]) != loop.span:
        raise Decline("the loop is not a statement of the kernel's body")
    at = body.statements.index(loops[0])
    before, after = body.statements[:at], body.statements[at + 1:]
    for s in before:
        if s.type != "declaration" and not is_pragma(s, text_of):
            raise Decline(f"a statement before the loop that declares nothing (line {s.start_point[0] + 1})")
    for s in after:
        if s.type not in ("declaration", "expression_statement") and not is_pragma(s, text_of):
            raise Decline(f"a statement after the loop that is neither a declaration nor an expression (line "
                          f"{s.start_point[0] + 1})")
    # a batch: locals made from the grid's z index alone (the tiles keep the original's z dimension)
    batch = {t.name for t in a.thread_indices if t.reads and set(t.reads) <= {("blockIdx", 2)}}
    coords = {t.name for t in a.thread_indices} - batch
    # the update, its product and its factors
    update, factors = product_update(loops[0], acc.var, text_of)
    k = loop.var
    stop = {**{name: name for name in coords}, k: k}
    deps = []
    for f in factors:
        text = inlined(a, f, stop)
        if _reads_ids(text):
            raise Decline(f"the factor `{f}` reads thread ids other than through the output's coordinates")
        deps.append((f, expression_names(text) & coords))
    both = [f for f, d in deps if len(d) > 1]
    if both:
        raise Decline(f"the factor `{both[0]}` reads both of the output's coordinates")
    used = sorted({next(iter(d)) for _, d in deps if d})
    if len(used) != 2:
        raise Decline("the product's factors do not read two different coordinates of the output (no "
                      "contraction of two operands)")
    r, c = _order(ctx, a, after, used)
    x = " * ".join(f"({f})" for f, d in deps if c not in d)
    y = " * ".join(f"({f})" for f, d in deps if c in d)
    ren = {r: "kt_r", c: "kt_c", k: "kt_k", acc.var: "kt_v"}
    x_text = inlined(a, x, {r: "kt_r", k: "kt_k"})
    y_text = inlined(a, y, {c: "kt_c", k: "kt_k"})
    for side, text in (("X", x_text), ("Y", y_text)):
        if expression_names(text) & (coords | {acc.var}):
            raise Decline(f"the operand {side} reads the other coordinate or the sum")
    # bounds: the guard's conditions, each on one coordinate
    r_conds, c_conds, m_bound, n_bound = [], [], None, None
    scalars = spec_scalars(ctx)
    for g in body.guards:
        for cond, var, bound in guard_parts(g, {r, c}):
            (r_conds if var == r else c_conds).append(inlined(a, cond, {r: "kt_r", c: "kt_c"}))
            if bound is not None and var == r:
                m_bound = m_bound or bound
            elif bound is not None:
                n_bound = n_bound or bound
    # no guard on a coordinate at all (a tutorial's kernel for sizes that are multiples of its
    # block): every thread the original's launch makes writes its output, so the launch's extent
    # along that coordinate's dimension is the bound
    m_spec = n_spec = None
    if m_bound is None and not r_conds:
        m_spec, m_bound = _launch_extent(ctx, a, r, scalars)
        r_conds.append(f"kt_r < {m_bound}")
    if n_bound is None and not c_conds:
        n_spec, n_bound = _launch_extent(ctx, a, c, scalars)
        c_conds.append(f"kt_c < {n_bound}")
    if m_bound is None or n_bound is None:
        raise Decline(f"the guard does not bound both coordinates (`{r} < M`, `{c} < N`)")
    for cond in r_conds + c_conds:
        if _reads_ids(cond) or expression_names(cond) & (coords - {r, c}):
            raise Decline(f"the guard's condition `{cond}` reads more than its coordinate")
    m_spec = m_spec or spec_text(inlined(a, m_bound, {}), scalars)
    n_spec = n_spec or spec_text(inlined(a, n_bound, {}), scalars)
    start = inlined(a, loop.start, {})
    k_cond = inlined(a, f"{k} {'<=' if loop.inclusive else '<'} {loop.bound}", {k: "kt_k"})
    for text in (start, k_cond):
        if _reads_ids(text) or expression_names(text) & (coords | {acc.var}):
            raise Decline(f"the loop's bounds read the thread's coordinates (`{text}`)")
    # the epilogue: statements over the coordinates and the sum
    mapping = _pre_loop_values(a, before, text_of, ren)
    epilogue = []
    for s in after:
        text = substituted(s, text_of, {**mapping, **ren})
        if _reads_ids(text):
            raise Decline(f"the statement after the loop reads thread ids (line {s.start_point[0] + 1})")
        epilogue.append(" ".join(text.split()))
    _own_outputs(ctx, a, after, {r: "kt_r", c: "kt_c"}, x_text + " " + y_text)
    acc_type = _declared_type(before, acc.var, text_of) or "float"
    return Contraction(
        r, c, _declared_type(before, r, text_of) or "int", _declared_type(before, c, text_of) or "int",
        k, _loop_type(loops[0], text_of), start, k_cond, tuple(r_conds), tuple(c_conds), m_spec, n_spec,
        acc_type, _start(a, acc, r, c, k, coords), x_text, y_text, update, tuple(epilogue),
        _fast(x_text, "kt_k", "kt_r"), _fast(y_text, "kt_k", "kt_c"),
        inlined(a, f"{k} {'<=' if loop.inclusive else '<'} {loop.bound}", {k: "kt_kb"}))


def _start(a, acc, r: str, c: str, k: str, coords: set[str]) -> str:
    """The sum's start, over the output's coordinates `kt_r` and `kt_c` (a bias read at the
    output, `bias[oc]`, is read at each of a thread's outputs in the tiles); "0" for none."""
    if not acc.init:
        return "0"
    text = inlined(a, acc.init, {r: "kt_r", c: "kt_c"})
    if _reads_ids(text) or expression_names(text) & ((coords - {r, c}) | {k, acc.var}):
        raise Decline(f"the sum starts at `{acc.init}`, which reads more than the output's coordinates")
    return text


def start_sums(s: Contraction, T: str, r_ok: str, c_ok: str) -> str:
    """Each of a thread's TM x TN sums set to its start: at its own output's coordinates where
    the start reads them (and only where the guard admits that output: a bias has no element past
    the last column), else the start as written."""
    loop = ("    for (int kt_m = 0; kt_m < TM; ++kt_m)\n"
            "        for (int kt_n = 0; kt_n < TN; ++kt_n)")
    if not expression_names(s.acc_init) & {"kt_r", "kt_c"}:
        return f"{loop} kt_acc[kt_m][kt_n] = {s.acc_init};\n"
    return (f"{loop} {{\n"
            f"            const {s.r_type} kt_r = kt_r0 + kt_tr * TM + kt_m;\n"
            f"            const {s.c_type} kt_c = kt_c0 + kt_tc * TN + kt_n;\n"
            f"            kt_acc[kt_m][kt_n] = ({r_ok} && {c_ok}) ? ({T})({s.acc_init}) : ({T})0;\n"
            "        }\n")


def _no_pointer_passed(model) -> None:
    """Decline a kernel that hands one of its arrays to a function of the file that may write
    through it (a parameter that is a pointer to non-const): what it writes is not the model's to see."""
    raw = model.source.encode("utf-8")
    writable = {f.name: _writable_parameters(raw[f.span.start:f.body.start].decode("utf-8", "replace"))
                for f in model.functions[1:]}
    for call in model.calls:
        if call.name not in writable or call.function != model.name:
            continue
        text = raw[call.span.start:call.span.end].decode("utf-8", "replace")
        found = syntax_nodes(f"auto kt_e = {text};", ("argument_list",))
        if not found:
            continue
        node, text_of = found[0]
        args = [c for c in node.named_children if c.type != "comment"]
        for i, arg in enumerate(args):
            if i in writable[call.name] and expression_names(text_of(arg)) & set(model.pointers):
                raise Decline(f"it hands an array to `{call.name}`, which may write through it")


def _writable_parameters(head: str) -> set[int]:
    """The positions of a function's parameters that are pointers to non-const data."""
    found = syntax_nodes(head + ";", ("parameter_list",))
    if not found:
        return set()
    node, text_of = found[0]
    out = set()
    for i, p in enumerate(c for c in node.named_children if c.type == "parameter_declaration"):
        decl = p.child_by_field_name("declarator")
        if decl is not None and decl.type in ("pointer_declarator", "abstract_pointer_declarator"):
            before = text_of(p)[:text_of(p).find("*")]
            if "const" not in before.split():
                out.add(i)
    return out


def _reads_ids(text: str) -> bool:
    """Whether an expression reads thread or block ids other than the grid's z index (a batch)."""
    return reads_thread_ids(text.replace("blockIdx.z", "").replace("get_group_id(2)", ""))


def _launch_extent(ctx, a, coordinate: str, scalars: dict[str, str]) -> tuple[str, str]:
    """The threads the original's launch makes along the coordinate's dimension (its grid times its
    block there), over the spec's problem names and as C over the kernel's scalar arguments;
    Decline when the coordinate is no global index of one dimension or the launch reads a size no
    scalar argument carries."""
    t = next((t for t in a.thread_indices if t.name == coordinate), None)
    dims = {d for _, d in t.reads} if t is not None else set()
    if t is None or not t.is_global or len(dims) != 1:
        raise Decline(f"no guard bounds `{coordinate}`, which is no global index of one dimension")
    d = dims.pop()
    if d >= len(ctx.block):
        raise Decline(f"no guard bounds `{coordinate}` and the launch has no dimension {d}")
    return launch_extent(ctx, d, ctx.block[d], scalars, coordinate)


def _order(ctx, a, after, used: list[str]) -> tuple[str, str]:
    """(r, c): c is the coordinate along which the output's index walks contiguously."""
    stores = [x for x in a.accesses if x.write and any(within(x.span, span_of(ctx.source, s))
                                                        for s in after)]
    for x in stores:
        idx = inlined(a, x.index, {used[0]: "kt_0", used[1]: "kt_1"})
        if affine.slope(idx, "kt_0", {"kt_1"}) == 1:
            return used[1], used[0]
    return used[0], used[1]


def _pre_loop_values(a, before, text_of, ren: dict[str, str]) -> dict[str, str]:
    """The locals declared before the loop, other than the sum and the coordinates, as their
    initialisers (inlined) for the epilogue."""
    out = {}
    for s in before:
        for d in s.children_by_field_name("declarator"):
            if d.type == "init_declarator":
                name = text_of(d.child_by_field_name("declarator")).strip()
                if name in ren or name not in a.locals:
                    continue
                out[name] = "(" + inlined(a, a.locals[name], ren) + ")"
    return out


def _declared_type(statements, name: str, text_of) -> str | None:
    for s in statements:
        if s.type != "declaration":
            continue
        for d in s.children_by_field_name("declarator"):
            inner = d.child_by_field_name("declarator") if d.type == "init_declarator" else d
            if inner is not None and text_of(inner).strip() == name:
                words = [text_of(x) for x in s.children if x.type in ("primitive_type", "sized_type_specifier",
                                                                        "type_identifier", "qualified_identifier")]
                return " ".join(words) or None
    return None


def _loop_type(loop_node, text_of) -> str:
    init = loop_node.child_by_field_name("initializer")
    if init is not None and init.type == "declaration":
        t = init.child_by_field_name("type")
        if t is not None:
            return text_of(t)
    return "int"


def _own_outputs(ctx, a, after, ren: dict[str, str], operands: str) -> None:
    """Every write is after the loop, at an index reading both coordinates, into an array the
    operands do not read."""
    spans = [span_of(ctx.source, s) for s in after]
    read_by_operands = expression_names(operands)
    for x in a.accesses:
        if not x.write:
            continue
        if not any(within(x.span, sp) for sp in spans):
            raise Decline(f"`{x.array}` is written inside the loop or before it")
        idx = expression_names(inlined(a, x.index, ren))
        if not {"kt_r", "kt_c"} <= idx:
            raise Decline(f"`{x.array}` is written at an index that is not the thread's own output")
        if x.array in read_by_operands or (x.via and x.via in read_by_operands):
            raise Decline(f"`{x.array}` is both an operand and the output")


def _fast(operand: str, k: str, coord: str) -> bool:
    """Whether the operand's array index walks contiguously along k (else along its coordinate)."""
    # the operand's own subscripts, read from its text: the first array it indexes decides
    for sub in _subscripts(operand):
        s_k = affine.slope(sub, k, {coord})
        s_c = affine.slope(sub, coord, {k})
        if s_k == 1:
            return True
        if s_c == 1:
            return False
    return True


def _subscripts(text: str) -> list[str]:
    """The index expressions an expression reads arrays at: `x[i]`, and OpenCL's vload_half(i, x)."""
    from .kernel_tree import syntax_nodes
    out = []
    for node, text_of in syntax_nodes(f"auto kt_e = ({text});", ("subscript_expression", "call_expression")):
        if node.type == "subscript_expression":
            idx = node.child_by_field_name("indices") or node.child_by_field_name("index")
            if idx is not None:
                inner = [c for c in idx.named_children if c.type != "comment"]
                out.append(text_of(inner[0]) if idx.type == "subscript_argument_list" and inner else text_of(idx))
        else:
            fn = text_of(node.child_by_field_name("function"))
            args = [x for x in node.child_by_field_name("arguments").named_children if x.type != "comment"]
            if fn.startswith(("vload", "vloada")) and len(args) == 2:
                out.append(text_of(args[0]))
    return out


# CUDA's conversion of one half element to float (OpenCL's is the dialect table's vload_half), and
# of one bfloat16
HALF_TO_FLOAT = frozenset({"__half2float"})
BF16_TO_FLOAT = frozenset({"__bfloat162float"})
BF16_TYPES = ("__nv_bfloat16", "nv_bfloat16")


@dataclass(frozen=True)
class Vector:
    """An operand VEC = 4 may load four neighbours of at once: the element `array[index]` (its
    index moving by one along the axis the operand walks contiguously), of the accumulator's type,
    or a half converted to float (`__half2float(A[i])`, `vload_half(i, A)`), or a bfloat16
    (`__bfloat162float(A[i])`: `half` and `bf16` both hold, a 16-bit element)."""

    array: str
    index: str
    half: bool
    bf16: bool = False

    @property
    def storage(self) -> str:
        """The CUDA type of a 16-bit element, as tiles of it are declared."""
        return "__nv_bfloat16" if self.bf16 else "__half"

    @property
    def zero(self) -> str:
        return "__float2bfloat16(0.0f)" if self.bf16 else "__float2half(0.0f)"

    @property
    def element(self) -> str:
        return f"{self.array}[{self.index}]"

    def aligned(self, cuda: bool) -> str:
        """The run-time test that the four elements are one aligned word (CUDA; none in OpenCL,
        whose vload4 / vload_half4 take any element's address)."""
        return f" && ((unsigned long)&{self.element} & {7 if self.half else 15}) == 0" if cuda else ""

    def load(self, cuda: bool, ind: str) -> str:
        """`const float4 kt_w` holding the four elements from `array[index]` on, as floats."""
        if not self.half:
            return (f"{ind}const float4 kt_w = " + (f"*reinterpret_cast<const float4 *>(&{self.element});\n" if cuda
                                                     else f"vload4(0, &{self.element});\n"))
        if not cuda:
            return f"{ind}const float4 kt_w = vload_half4(0, {self.array} + ({self.index}));\n"
        pair, convert = ("__nv_bfloat162", "__bfloat1622float2") if self.bf16 else ("__half2", "__half22float2")
        return (f"{ind}const float2 kt_h = *reinterpret_cast<const float2 *>(&{self.element});\n"
                f"{ind}const float2 kt_lo = {convert}(*reinterpret_cast<const {pair} *>(&kt_h.x));\n"
                f"{ind}const float2 kt_hi = {convert}(*reinterpret_cast<const {pair} *>(&kt_h.y));\n"
                f"{ind}const float4 kt_w = make_float4(kt_lo.x, kt_lo.y, kt_hi.x, kt_hi.y);\n")


def _one_element(text: str, dialect: str) -> tuple[str, str, bool, bool] | None:
    """(array, index, whether a half converted to float, whether a bfloat16 converted) of an operand
    that is one array element, as itself or through the dialect's conversion of a half (CUDA: or a
    bfloat16) to float; None for anything else."""
    found = syntax_nodes(f"auto kt_e = {text};", ("parenthesized_expression", "subscript_expression", "call_expression"))
    if not found:
        return None
    node, text_of = found[0]
    node = strip_parens(node)
    half = bf16 = False
    if node is not None and node.type == "call_expression":
        fn = text_of(node.child_by_field_name("function")).strip()
        args = [x for x in node.child_by_field_name("arguments").named_children if x.type != "comment"]
        if fn in DIALECT[dialect].half_loads and len(args) == 2 and args[1].type == "identifier":
            return text_of(args[1]).strip(), text_of(args[0]), True, False
        if fn not in HALF_TO_FLOAT | BF16_TO_FLOAT or dialect != "cuda" or len(args) != 1:
            return None
        node, half, bf16 = strip_parens(args[0]), True, fn in BF16_TO_FLOAT
    if node is None or node.type != "subscript_expression":
        return None
    array = text_of(node.child_by_field_name("argument")).strip()
    idx = node.child_by_field_name("indices") or node.child_by_field_name("index")
    inner = [c for c in idx.named_children if c.type != "comment"] if idx is not None else []
    index = text_of(inner[0]) if idx is not None and idx.type == "subscript_argument_list" and len(inner) == 1 \
        else (text_of(idx) if idx is not None else "")
    return (array, index, half, bf16) if array.isidentifier() and index else None


def vector_operands(ctx: RewriteContext, s: Contraction) -> tuple[Vector | None, Vector | None]:
    """For X and Y, the operand as one array element whose four neighbours along the index it
    walks contiguously are four neighbours in memory, of the accumulator's type (float) or half
    storage converted to it, so VEC = 4 may load them as one vector; None where the operand is
    anything else (another conversion, a product, another type)."""
    types = {x.name: x.ctype for x in ctx.model.signature.args if x.pointer and not x.local}
    out = []
    for text, fast, coord in ((s.x, s.x_k_fast, "kt_r"), (s.y, s.y_k_fast, "kt_c")):
        got = _one_element(text, ctx.model.dialect)
        walk = "kt_k" if fast else coord
        still = {coord, "kt_k"} - {walk}
        if got is None or s.acc_type != "float" or affine.slope(got[1], walk, still) != 1 or \
                types.get(got[0]) not in (BF16_TYPES if got[3] else ("half", "__half") if got[2] else ("float",)):
            out.append(None)
            continue
        out.append(Vector(*got))
    return out[0], out[1]


def _rewrite(ctx: RewriteContext, s: Contraction) -> Rewrite:
    d = Dialect.of(ctx.backend)
    a = kernel_spans(ctx.source, ctx.model)
    vectors = vector_operands(ctx, s)
    mma = not contraction_mma.declines(ctx.backend, ctx.limits.compute_capability, s, vectors)
    # Hopper's warpgroup instructions beside the warp fragments, where the device has them
    wg = mma and not contraction_wgmma.declines(ctx.limits.compute_capability)
    head = header(ctx.source, a)
    if wg:  # the block's threads told to the compiler: four warpgroups' registers must fit the block's
        head = unbounded_header(ctx.source, a).replace("__global__", "__global__ __launch_bounds__(KT_THREADS)", 1)
    kernel = _kernel(head, s, d, vectors, mma, wg)
    acc_bytes = ELEMENT_BYTES.get(s.acc_type.split()[-1], 4)
    params = [
        ParamProposal("BM", (16, 32, 64, 128, 256), 64, "rows of outputs per block (a tile)", "tile"),
        ParamProposal("BN", (16, 32, 64, 128, 256), 64, "columns of outputs per block (a tile)", "tile"),
        # with the warpgroup instructions, steps 64 deep (their widest swizzle) and no single rows or
        # columns a thread, which no tile on such a device picks beside the tensor cores (the space's
        # product stays within what the engine enumerates)
        ParamProposal(SWITCH, (0, 8, 16, 32, 64) if wg else (0, 4, 8, 16, 32), 0,
                      "depth of each shared-memory step (0: the original kernel, no tiles)", "tile"),
        ParamProposal("TM", (2, 4, 8) if wg else (1, 2, 4, 8), 4, "rows of outputs per thread, in registers", "tile"),
        ParamProposal("TN", (2, 4, 8) if wg else (1, 2, 4, 8), 4, "columns of outputs per thread, in registers",
                      "tile"),
        ParamProposal("STAGES", contraction_mma.STAGES if mma else (1, 2), 1,
                      "2: the next step's tiles are loaded into registers while this step computes"
                      + ("; with MMA, the shared tiles in flight (asynchronous copies)" if mma else ""), "tile"),
    ]
    if any(vectors):
        params.append(ParamProposal("VEC", (1, 4), 1, "4: the operands' tiles loaded four neighbours at a time as "
                                                      "one vector where they are aligned and in range (a switch: tried on the leaders "
                                                      "once the tiles are chosen)", "flag"))
    if mma:  # last: the coarse grid trims the earlier of equally long lists first
        params.append(ParamProposal("MMA", (0, 1, 2) if wg else (0, 1), 0,
                                    "1: tensor cores (warp fragments of 16 x 16 x 16 half products summed in float), "
                                    "8 TM x 8 TN outputs a warp"
                                    + ("; 2: warpgroup tensor-core instructions (wgmma), 64 x BN outputs a warpgroup"
                                       if wg else ""), "tile"))
    vec_off = " and VEC == 1" if any(vectors) else ""
    off = f"{SWITCH} == 0"
    simt = (f"MMA > 0 or {off}" if wg else f"MMA == 1 or {off}") if mma else off
    constraints = [
        f"{SWITCH} > 0 or (BM == 64 and BN == 64 and TM == 4 and TN == 4 and STAGES == 1{vec_off}"
        + (" and MMA == 0" if mma else "") + ")",  # unread by the original
        "BM % TM == 0 and BN % TN == 0",
        f"{simt} or (BM // TM) * (BN // TN) <= max_threads_per_block",
        f"{simt} or (BM // TM) * (BN // TN) >= warp_size",
        f"{simt} or {SWITCH} * (BM + BN + 8) * {acc_bytes} <= max_shared_per_block",
        "TM * TN <= 64",
    ] + ([f"VEC == 1 or ({SWITCH} % 4 == 0 and BM % 4 == 0 and BN % 4 == 0)"] if any(vectors) else []) \
        + (list(contraction_mma.constraints(s, wg)) if mma else []) + (list(contraction_wgmma.constraints(s)) if wg else []) \
        + [f"{off} or {w}" for w in s.whole] + pinned(ctx, off)
    grid = list(ctx.grid)
    block = list(ctx.block)
    tiled_grid = [s.n_blocks or f"ceil_div({s.n_spec}, BN)", s.m_blocks or f"ceil_div({s.m_spec}, BM)"] + list(grid[2:])
    threads = f"({contraction_mma.THREADS}) if MMA == 1 else ((BM // TM) * (BN // TN))" if mma else "(BM // TM) * (BN // TN)"
    if wg:
        threads = f"({contraction_wgmma.THREADS}) if MMA == 2 else ({threads})"
    tiled_block = [threads] + ["1"] * max(0, len(block) - 1)
    if len(grid) < 2:
        grid.append("1")
    new_grid = tuple(f"({t}) if {SWITCH} > 0 else ({o})" for t, o in zip(tiled_grid + ["1"] * 3, grid))
    new_block = tuple(f"({t}) if {SWITCH} > 0 else ({o})" for t, o in zip(tiled_block, block))
    source = beside(ctx.source, a, f"{SWITCH} > 0", params, _helpers(d, mma, (s, vectors) if wg else None), kernel, NAME)
    first = {"BM": (64, 128), "BN": (64, 128), SWITCH: (0, 8, 16), "TM": (4, 8), "TN": (4, 8), "STAGES": (1,)}
    if mma:
        # tensor-core steps are 16 deep (32 halves the barriers) and wait on their copies unless the
        # next are in flight; warp tiles of 64 x 64 keep the fragments' loads from shared memory few.
        # On an H100 every tile of 128 to 256 a side, 32 deep, two or three stages, came within 3% of
        # the best (bench/results/agent-loop-mma.md): the first round measures that corner, and the
        # float tiles of the same shape beside it
        first.update({"MMA": (0, 1), SWITCH: (0, 16, 32), "BM": (64, 128), "BN": (128,), "TM": (4, 8), "TN": (8,),
                      "STAGES": (2,)})
    if wg:
        # warpgroups: on an H100 two warpgroups of 64 x 256 (a 128 x 256 tile) 64 deep in three stages
        # came first, 74% of cuBLAS, 128 x 128 and 256 x 128 within 15% (bench/results/agent-loop-wgmma-h100.md)
        first.update({"MMA": (0, 1, 2), SWITCH: (0, 16, 32, 64), "BN": (128, 256), "STAGES": (2, 3)})
    for name, value in ctx.defaults.items():
        first[name] = (value,)
    what = (f"contraction over `{s.k}` of {'k' if s.x_k_fast else s.r}-contiguous X and "
            f"{'k' if s.y_k_fast else s.c}-contiguous Y: BM x BN tiles through shared memory in BK steps, TM x TN "
            f"outputs per thread in registers, STAGES 2 loading the next step while this one computes"
            + (f", VEC 4 loading {' and '.join(n + (' (bfloat16)' if v.bf16 else ' (halves)' if v.half else '') for n, v in zip('XY', vectors) if v)}"
               " four elements at a time"
               if any(vectors) else "")
            + (", MMA 1 on tensor cores (8 TM x 8 TN outputs a warp in fragments of half products, float sums)" if mma else "")
            + (", MMA 2 on Hopper's warpgroup tensor-core instructions (64 x BN outputs a warpgroup)" if wg else "")
            + ", any size" + (f" (read from {s.tiled})" if s.tiled else ""))
    shared = ctx.original.shared_bytes
    shared_bytes = contraction_mma.shared_bytes(s, SWITCH, shared.source if shared is not None else "0") if mma else None
    if wg:
        shared_bytes = f"({contraction_wgmma.shared(s)}) if {SWITCH} > 0 and MMA == 2 else ({shared_bytes})"
    return Rewrite(NAME, source, tuple(params), what, tuple(constraints), new_grid, new_block,
                   shared_bytes=shared_bytes, first=first, helps="compute")


def _helpers(d: Dialect, mma: bool = False, wg=None) -> str:
    """The kernel's helpers; with `wg` (the contraction read), MMA = 2's too."""
    threads = contraction_mma.helpers(wg is not None) if mma else "#define KT_THREADS ((BM / TM) * (BN / TN))\n"
    return threads + (contraction_wgmma.helpers(*wg) if wg is not None else "") \
        + "#define KT_CEIL(a, b) (((a) + (b) - 1) / (b))\n"


def _groups(size: str, k_fast: bool) -> tuple[str, str, str]:
    """A tile's groups of four neighbours along the index its operand walks contiguously: how many,
    and group `kt_g`'s first element (its offset along the tile's side, its depth)."""
    groups = f"({size} * {SWITCH} / 4)"
    if k_fast:
        return groups, f"kt_g / ({SWITCH} / 4)", f"4 * (kt_g % ({SWITCH} / 4))"
    return groups, f"4 * (kt_g % ({size} / 4))", f"kt_g / ({size} / 4)"


def _kernel(head: str, s: Contraction, d: Dialect, vectors: tuple[Vector | None, Vector | None] = (None, None),
            mma: bool = False, wg: bool = False) -> str:
    cuda = d.name == "cuda"
    T = s.acc_type
    vec = cuda and T == "float"
    align = "__align__(16) " if cuda else ""
    upd = (f"kt_acc[kt_m][kt_n] {s.update} kt_a[kt_m] * kt_b[kt_n];" if s.update in ("+=", "-=")
           else f"kt_acc[kt_m][kt_n] = {s.update}(kt_a[kt_m], kt_b[kt_n], kt_acc[kt_m][kt_n]);")
    r_ok = " && ".join(f"({c})" for c in s.r_conds) or "1"
    c_ok = " && ".join(f"({c})" for c in s.c_conds) or "1"
    a_m, a_q = ("kt_i / " + SWITCH, "kt_i % " + SWITCH) if s.x_k_fast else ("kt_i % BM", "kt_i / BM")
    b_n, b_q = ("kt_i / " + SWITCH, "kt_i % " + SWITCH) if s.y_k_fast else ("kt_i % BN", "kt_i / BN")
    start = f"    const {s.k_type} kt_kb0 = {s.start};\n"
    read_a = ("if (TM % 4 == 0) {\n"
              "                for (int kt_v4 = 0; kt_v4 < TM / 4; ++kt_v4) {\n"
              "                    const float4 kt_q4 = *reinterpret_cast<const float4 *>(&kt_as[kt_q][kt_tr * TM + 4 * kt_v4]);\n"
              "                    kt_a[4 * kt_v4] = kt_q4.x; kt_a[4 * kt_v4 + 1] = kt_q4.y; kt_a[4 * kt_v4 + 2] = kt_q4.z; kt_a[4 * kt_v4 + 3] = kt_q4.w;\n"
              "                }\n"
              "            } else\n            ") if vec else ""
    read_b = read_a.replace("TM", "TN").replace("kt_as", "kt_bs").replace("kt_tr", "kt_tc").replace("kt_a[", "kt_b[")
    epilogue = "\n".join(f"                {st}" for st in s.epilogue)

    def regs(size: str, element: Vector | None) -> str:
        scalar = f"KT_CEIL({size} * {SWITCH}, KT_THREADS)"
        return f"(VEC == 4 ? 4 * KT_CEIL({size} * {SWITCH} / 4, KT_THREADS) : {scalar})" if element else scalar
    next_cond = s.kb_cond.replace("kt_kb", "kt_next")

    x_ok = f"{r_ok} && ({s.x_load})" if s.x_load else r_ok
    y_ok = f"{c_ok} && ({s.y_load})" if s.y_load else c_ok
    operands = (("kt_ra", "BM", (a_m, a_q), "kt_r", s.r_type, x_ok, s.x, s.x_k_fast, vectors[0], "kt_as"),
                ("kt_rb", "BN", (b_n, b_q), "kt_c", s.c_type, y_ok, s.y, s.y_k_fast, vectors[1], "kt_bs"))

    def fetch(base: str, ind: str) -> str:
        """This thread's elements of both tiles at depth `base`, into registers (zero outside)."""
        out = ""
        for reg, size, fast_split, coord, ctype, conds, value, k_fast, element, _ in operands:
            first, q = fast_split
            origin = "kt_r0" if coord == "kt_r" else "kt_c0"
            scalar = (f"{ind}#pragma unroll\n{ind}for (int kt_j = 0; kt_j < KT_CEIL({size} * {SWITCH}, KT_THREADS); ++kt_j) {{\n"
                      f"{ind}    const int kt_i = kt_t + kt_j * KT_THREADS;\n"
                      f"{ind}    const int kt_o = {first}, kt_q = {q};\n"
                      f"{ind}    const {ctype} {coord} = {origin} + kt_o;\n"
                      f"{ind}    const {s.k_type} kt_k = {base} + kt_q;\n"
                      f"{ind}    {reg}[kt_j] = (kt_i < {size} * {SWITCH} && {conds} && ({s.k_cond})) ? ({T})({value}) : ({T})0;\n"
                      f"{ind}}}\n")
            if not element:
                out += scalar
                continue
            # four neighbours along the contiguous index a group: one vector where all four are in
            # range and (CUDA) the first is aligned to the four's word, else each as the scalar path reads it
            groups, o, qq = _groups(size, k_fast)
            step = ("0", "kt_v") if k_fast else ("kt_v", "0")
            aligned = element.aligned(cuda)
            out += (f"{ind}#if VEC == 4\n"
                    f"{ind}#pragma unroll\n{ind}for (int kt_j = 0; kt_j < KT_CEIL({groups}, KT_THREADS); ++kt_j) {{\n"
                    f"{ind}    const int kt_g = kt_t + kt_j * KT_THREADS;\n"
                    f"{ind}    const int kt_o = {o}, kt_q = {qq};\n"
                    f"{ind}    bool kt_all = kt_g < {groups};\n"
                    f"{ind}    bool kt_in[4];\n"
                    f"{ind}#pragma unroll\n{ind}    for (int kt_v = 0; kt_v < 4; ++kt_v) {{\n"
                    f"{ind}        const {ctype} {coord} = {origin} + kt_o + {step[0]};\n"
                    f"{ind}        const {s.k_type} kt_k = {base} + kt_q + {step[1]};\n"
                    f"{ind}        kt_in[kt_v] = kt_g < {groups} && {conds} && ({s.k_cond});\n"
                    f"{ind}        kt_all = kt_all && kt_in[kt_v];\n"
                    f"{ind}    }}\n"
                    f"{ind}    {{\n"
                    f"{ind}        const {ctype} {coord} = {origin} + kt_o;\n"
                    f"{ind}        const {s.k_type} kt_k = {base} + kt_q;\n"
                    f"{ind}        if (kt_all{aligned}) {{\n"
                    + element.load(cuda, f"{ind}            ") +
                    f"{ind}            {reg}[4 * kt_j] = kt_w.x; {reg}[4 * kt_j + 1] = kt_w.y; "
                    f"{reg}[4 * kt_j + 2] = kt_w.z; {reg}[4 * kt_j + 3] = kt_w.w;\n"
                    f"{ind}            continue;\n"
                    f"{ind}        }}\n"
                    f"{ind}    }}\n"
                    f"{ind}#pragma unroll\n{ind}    for (int kt_v = 0; kt_v < 4; ++kt_v) {{\n"
                    f"{ind}        const {ctype} {coord} = {origin} + kt_o + {step[0]};\n"
                    f"{ind}        const {s.k_type} kt_k = {base} + kt_q + {step[1]};\n"
                    f"{ind}        {reg}[4 * kt_j + kt_v] = kt_in[kt_v] ? ({T})({value}) : ({T})0;\n"
                    f"{ind}    }}\n"
                    f"{ind}}}\n{ind}#else\n{scalar}{ind}#endif\n")
        return out

    def stash(ind: str) -> str:
        """The registers of `fetch` into the shared tiles."""
        out = ""
        for reg, size, fast_split, _, _, _, _, k_fast, element, tile in operands:
            first, q = fast_split
            scalar = (f"{ind}#pragma unroll\n{ind}for (int kt_j = 0; kt_j < KT_CEIL({size} * {SWITCH}, KT_THREADS); ++kt_j) {{\n"
                      f"{ind}    const int kt_i = kt_t + kt_j * KT_THREADS;\n"
                      f"{ind}    if (kt_i < {size} * {SWITCH}) {tile}[{q}][{first}] = {reg}[kt_j];\n"
                      f"{ind}}}\n")
            if not element:
                out += scalar
                continue
            groups, o, qq = _groups(size, k_fast)
            at = "[kt_q + kt_v][kt_o]" if k_fast else "[kt_q][kt_o + kt_v]"
            out += (f"{ind}#if VEC == 4\n"
                    f"{ind}#pragma unroll\n{ind}for (int kt_j = 0; kt_j < KT_CEIL({groups}, KT_THREADS); ++kt_j) {{\n"
                    f"{ind}    const int kt_g = kt_t + kt_j * KT_THREADS;\n"
                    f"{ind}    const int kt_o = {o}, kt_q = {qq};\n"
                    f"{ind}    if (kt_g < {groups})\n"
                    f"{ind}#pragma unroll\n{ind}        for (int kt_v = 0; kt_v < 4; ++kt_v) {tile}{at} = {reg}[4 * kt_j + kt_v];\n"
                    f"{ind}}}\n{ind}#else\n{scalar}{ind}#endif\n")
        return out

    tensor = f"#if MMA\n{contraction_mma.body(s, vectors, r_ok, c_ok, epilogue, x_ok, y_ok)}#else\n" if mma else ""
    if wg:
        tensor = (f"#if MMA == 2\n{contraction_wgmma.body(s, vectors, r_ok, c_ok, epilogue, x_ok, y_ok)}#el"
                  + tensor[1:])
    leave = f"    if ({' || '.join(s.exits)}) return;\n" if s.exits else ""
    return f"""{head}
{{
{leave}{tensor}    {d.shared} {align}{T} kt_as[{SWITCH}][BM + 4];
    {d.shared} {align}{T} kt_bs[{SWITCH}][BN + 4];
    const int kt_t = {d.local_id};
    const int kt_tr = kt_t / (BN / TN), kt_tc = kt_t % (BN / TN);
    const {s.r_type} kt_r0 = ({s.r_type}){d.group_id[1]} * BM;
    const {s.c_type} kt_c0 = ({s.c_type}){d.group_id[0]} * BN;
    {T} kt_acc[TM][TN];
{start_sums(s, T, r_ok, c_ok)}    {T} kt_ra[{regs("BM", vectors[0])}], kt_rb[{regs("BN", vectors[1])}];
{start}{fetch("kt_kb0", "    ")}{stash("    ")}    {d.barrier};
    for ({s.k_type} kt_kb = kt_kb0; {s.kb_cond}; kt_kb += {SWITCH}) {{
        const {s.k_type} kt_next = kt_kb + {SWITCH};
        const bool kt_more = {next_cond};
#if STAGES == 2
        if (kt_more) {{
{fetch("kt_next", "            ")}        }}
#endif
#pragma unroll
        for (int kt_q = 0; kt_q < {SWITCH}; ++kt_q) {{
            {T} kt_a[TM], kt_b[TN];
            {read_a}for (int kt_m = 0; kt_m < TM; ++kt_m) kt_a[kt_m] = kt_as[kt_q][kt_tr * TM + kt_m];
            {read_b}for (int kt_n = 0; kt_n < TN; ++kt_n) kt_b[kt_n] = kt_bs[kt_q][kt_tc * TN + kt_n];
#pragma unroll
            for (int kt_m = 0; kt_m < TM; ++kt_m)
#pragma unroll
                for (int kt_n = 0; kt_n < TN; ++kt_n) {upd}
        }}
        {d.barrier};
        if (kt_more) {{
#if STAGES == 1
{fetch("kt_next", "            ")}#endif
{stash("            ")}        }}
        {d.barrier};
    }}
#pragma unroll
    for (int kt_m = 0; kt_m < TM; ++kt_m) {{
#pragma unroll
        for (int kt_n = 0; kt_n < TN; ++kt_n) {{
            const {s.r_type} kt_r = kt_r0 + kt_tr * TM + kt_m;
            const {s.c_type} kt_c = kt_c0 + kt_tc * TN + kt_n;
            if ({r_ok} && {c_ok}) {{
                {T} kt_v = kt_acc[kt_m][kt_n];
{epilogue}
            }}
        }}
    }}
{"#endif" + chr(10) if mma else ""}}}"""
