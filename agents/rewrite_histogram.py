"""The histogram rewrite: threads that each read elements and add to bins by atomics get the bins
privatised per block in shared (OpenCL local) memory, in copies, several elements per thread and a
grid of a chosen number of blocks per multiprocessor striding over the elements.

What the kernel model must show (else it declines with the reason):

- the counting: each thread takes the element `i` of a one-dimensional launch (`i = blockIdx.x *
  blockDim.x + threadIdx.x` or `get_global_id(0)`, under `if (i < X) {...}` or after `if (i >= X)
  return;`, the launch's grid covering the X elements), the pixel (x, y) of a two-dimensional one
  (guarded by `x < W && y < H`: the elements a flat index over the W * H pixels), a grid-stride loop
  over the elements (`for (i = <that index>; i < X; i += blockDim.x * gridDim.x)`, or a `while`
  whose last statement steps `i` so, any grid), or a thread's chunk of C consecutive elements
  (`for (i = tid * C; i < min((tid + 1) * C, X); ++i)`, the grid covering them): what the thread
  does for one element is a function of the element's index alone (it reads no other thread or
  block id, nothing its loop carries, and stops at no `break` or `return` of the loop);
- the bins: the counting writes memory only by atomic adds (`atomicAdd` and its `_block` and
  `_system` forms; OpenCL `atomic_add`, `atomic_inc`, their `atom_` forms), all into one array,
  their results unused, no bin read besides; every other array the kernel reads it never writes
  (the input). Integer bins count exactly in any order; float bins (CUDA) are summed in another
  order, which the gate's calibrated tolerance judges;
- bins already privatised (the textbook's `histo_private_kernel`): two barriers at the top of the
  body split it into zeroing a shared array of a known size, the counting into it, and the merge
  (each bin, as read, added to the global bins at its own index by an atomic, where it is not zero);
  the zeroing and the merge a loop of the block's threads over the bins or a bin a thread (the
  original's block as many threads as bins, or more under `if (tid < bins)`), neither reading the
  block's index (per-block histograms stay the original);
- for privatising global bins (`PRIVATE`): their count is known when the kernel compiles (the
  spec's shape of the bins is a number) and fits the device's shared memory.

The new kernel (beside the original; its switches at their defaults are the original token for
token): what a thread does for one element becomes a function of the element's index, called for
`ITEMS` elements per thread (`STRIDED` 1: a block's width apart, coalesced; 0: consecutive) over
a grid of one block per `BLOCK * ITEMS` elements (`GRID` 0) or `GRID` blocks per multiprocessor
striding over them; with `PRIVATE` 1 (or bins already privatised) each block zeroes `COPIES`
copies of its bins in shared memory, meets at a barrier, counts into copy `thread % COPIES` by
shared atomics, meets again and adds each non-zero bin, summed over the copies, to the global bins
by one atomic. A block the lifts leave a number, and a two-dimensional original's, is `THREADS`.
"""

from __future__ import annotations

from dataclasses import dataclass

from kerntune.engine.expressions import ExpressionError
from kerntune.engine.expressions import parse as parse_expression
from kerntune.engine.proposal import ParamProposal

from .cooperate import (Decline, Dialect, ReadingPass, beside, expression_names, fresh_names, guard_parts, header,
                        kernel_parameters, kernel_spans, pinned, reads_thread_ids, spec_scalars, spec_text,
                        template_parameters, top_guard, with_names)
from .kernel_tree import span_of, syntax_nodes
from .model import KernelModel, Poly
from .passes import Rewrite, RewriteContext
from .syntax import call_args, cut, strip, target, walk

NAME = "histogram"
# the atomic adds of each dialect (an increment adds one)
ADDS = {"cuda": ("atomicAdd", "atomicAdd_block", "atomicAdd_system"),
        "opencl": ("atomic_add", "atom_add", "atomic_inc", "atom_inc")}
# bins' element types each dialect adds to atomically in shared memory, and their bytes
BIN_TYPES = {"cuda": {"int": 4, "unsigned int": 4, "unsigned": 4, "unsigned long long": 8, "unsigned long long int": 8,
                      "float": 4, "double": 8},
             "opencl": {"int": 4, "unsigned int": 4, "unsigned": 4, "uint": 4}}
FLOATS = ("float", "double")


@dataclass(frozen=True)
class Histogram:
    """A kernel counting elements into bins by atomics, read from the kernel."""

    var: str  # the element's index
    var_type: str  # as declared
    bound: str  # kernel text X: the elements 0 .. X - 1
    spec_bound: str  # X over the spec's problem names
    counting: str  # what a thread does for one element, `var` its index: the function's body
    bins: str  # the array the counting adds to: a pointer argument, or the kernel's shared array
    target: str  # the global bins (a pointer argument)
    private: bool  # the original's bins are privatised already (`bins` is its shared array)
    elem_type: str  # of the bins
    extent: int | None  # the number of bins, where known when the kernel compiles
    no_private: str  # why PRIVATE is not offered ("" where it is)
    merge_add: str  # the atomic the merge adds a bin with
    form: str  # "guard", "grid-stride" or "chunk"
    dims: int = 1  # of the original's launch (2: a thread per (x, y), the elements a flat index over them)
    # the bins' count as the kernel reads it where a scalar argument gives it ("" where it is a number):
    # `extent` is then its largest value over the spec's sizes, the shared copy's size, and a block
    # whose bins outgrow it counts on the global bins
    count: str = ""


class HistogramPass(ReadingPass):
    """The histogram rewrite as a pass: it requires what `read` finds (a counting by atomic adds into
    one array of bins, as a function of the element's index), declined with the reason otherwise."""

    name = NAME

    def read(self, ctx: RewriteContext) -> Histogram:
        return read(ctx)

    def emit(self, ctx: RewriteContext, found: Histogram) -> Rewrite:
        return _rewrite(ctx, found)


rewrite = HistogramPass()


# reading -------------------------------------------------------------------------------------------------

def read(ctx: RewriteContext) -> Histogram:
    """The histogram `ctx`'s kernel computes; Decline with the reason when it is none."""
    model = ctx.model
    if not model.atomics:
        raise Decline("no atomic adds into bins")
    if model.shuffles:
        raise Decline("its threads exchange values by shuffles")
    fn = _function(ctx, model)
    stmts = [s for s in fn.child_by_field_name("body").named_children if s.type != "comment"]
    cuts = _barrier_statements(model, stmts)
    adds = _adds(ctx, model, fn)
    if not cuts:
        counting, zero, merge = stmts, [], []
    elif len(cuts) == 2:
        zero, counting, merge = stmts[:cuts[0]], stmts[cuts[0] + 1:cuts[1]], stmts[cuts[1] + 1:]
        if model.returns:
            raise Decline("it returns before its barriers")
    else:
        raise Decline(f"its {len(cuts)} barriers do not split it into zeroing bins, counting and merging")
    if not counting:
        raise Decline("nothing counts between its barriers")
    span = (counting[0].start_byte, counting[-1].end_byte)
    counted = [(c, arr, idx, val) for c, arr, idx, val in adds if span[0] <= c.start_byte < span[1]]
    bins = {arr for _, arr, _, _ in counted}
    if len(bins) != 1:
        raise Decline("its counting adds to no array of bins" if not bins else
                      f"its counting adds to several arrays ({', '.join(sorted(bins))})")
    bins_name = bins.pop()
    _writes_only_bins(model, adds, span)
    _read_only_by_adds(model, adds, bins_name, span)
    if cuts:
        target, merge_add, extent, elem_type = _privatised(ctx, model, bins_name, zero, merge, adds, span)
        _read_only_by_adds(model, adds, target, (0, len(ctx.source.encode("utf-8"))))
        no_private, count = "", ""
    else:
        if bins_name not in model.pointers:
            raise Decline(f"it counts into `{bins_name}`, which is no array argument, without a barrier")
        target, merge_add = bins_name, "atomicAdd" if ctx.backend == "cuda" else "atomic_add"
        elem_type = model.arg_types.get(bins_name, "")
        extent, count, no_private = _extent(ctx, model, bins_name, BIN_TYPES[ctx.backend].get(elem_type, 0))
    if elem_type not in BIN_TYPES[ctx.backend]:
        raise Decline(f"its bins are of type `{elem_type or '?'}`, which {_dialect_name(ctx)} adds to atomically "
                      f"in {'shared' if ctx.backend == 'cuda' else 'local'} memory only as "
                      f"{', '.join(BIN_TYPES[ctx.backend])}")
    foreign = [a for a in model.opaque if a not in (bins_name, target)]
    if foreign:
        raise Decline(f"`{foreign[0]}` is reached other than by its elements (a cast, an address or a call)")
    e = _elements(ctx, model, counting)
    dims = max(len(e.extents), 1)
    if any(len(x) > dims and any(v.strip() != "1" for v in x[dims:]) for x in (ctx.grid, ctx.block)):
        raise Decline(f"the launch has more dimensions than the counting's {dims}")
    others = _declared(zero + merge) - {bins_name}
    if expression_names_of(e.body) & others:
        raise Decline(f"its counting reads `{sorted(expression_names_of(e.body) & others)[0]}`, declared outside it")
    if "$" in e.body:
        raise Decline("a `$` in the kernel's code")
    bound = model.inline(e.bound)
    known = {a.name for a in model.signature.args} | set(model.defines)
    if expression_names(bound) - known:
        raise Decline(f"the elements' bound `{e.bound}` reads `{sorted(expression_names(bound) - known)[0]}`, "
                      "no argument or #define")
    scalars = spec_scalars(ctx)
    spec_bound = spec_text(bound, scalars)
    if e.form != "grid-stride":
        _covers(ctx, [spec_text(model.inline(x), scalars) for x in e.extents] or [spec_bound], e.per)
    return Histogram(e.var, e.var_type, bound, spec_bound, e.body, bins_name, target, bool(cuts), elem_type, extent,
                     no_private, merge_add, e.form, dims, count)


def _dialect_name(ctx) -> str:
    return "CUDA" if ctx.backend == "cuda" else "OpenCL"


def _function(ctx, model: KernelModel):
    for node, _ in syntax_nodes(ctx.source, ("function_definition",)):
        body = node.child_by_field_name("body")
        if body is not None and span_of(ctx.source, body) == model.kernel.body:
            return node
    raise Decline("the kernel's body cannot be found in its syntax tree")


def _barrier_statements(model: KernelModel, stmts: list) -> list[int]:
    """The positions of the top-level statements that are the block's barriers; Decline where a
    barrier stands anywhere else (in a loop, under a condition, in a function the kernel calls)."""
    at = {(b.span.start, b.span.end) for b in model.barriers}
    out = []
    for k, s in enumerate(stmts):
        if s.type == "expression_statement" and s.named_child_count == 1:
            e = s.named_children[0]
            if (e.start_byte, e.end_byte) in at:
                out.append(k)
    if len(out) != len(model.barriers) or any(b.scope != "block" for b in model.barriers):
        raise Decline("it meets at a barrier inside a loop, under a condition or in a function it calls")
    return out


def _adds(ctx, model: KernelModel, fn) -> list[tuple]:
    """Each atomic of the kernel: (call node, the array it adds to, the index node, the value added
    or None for an increment); Decline for an atomic that is no add of an element whose result is
    unused."""
    calls = {(c.start_byte, c.end_byte): c for c in walk(fn) if c.type == "call_expression"}
    out = []
    for a in model.atomics:
        if a.function != model.name:
            raise Decline(f"it calls `{a.name}` in a function of the file, not in the kernel itself")
        if a.name not in ADDS[ctx.backend]:
            raise Decline(f"its atomic `{a.name}` is no add")
        call = calls.get((a.span.start, a.span.end))
        if call is None:
            raise Decline(f"its atomic `{a.name}` cannot be read")
        if call.parent is None or call.parent.type != "expression_statement":
            raise Decline(f"the result of its `{a.name}` is used")
        args = call_args(call)
        inc = a.name.endswith("_inc")
        if len(args) != (1 if inc else 2):
            raise Decline(f"its `{a.name}` has {len(args)} arguments")
        arr, idx = _element_address(args[0])
        if not arr:
            raise Decline(f"its `{a.name}` adds to `{' '.join(cut(ctx.source, args[0].start_byte, args[0].end_byte).split())}`, "
                          "no element of an array")
        out.append((call, arr, idx, None if inc else args[1]))
    return out


def _element_address(node) -> tuple[str, object]:
    """(array, index) of `&a[i]`, `&(a[i])` or `a + i`; ("", None) otherwise."""
    node = strip(node)
    if node.type == "pointer_expression" and node.child_by_field_name("operator").type == "&":
        inner = strip(node.child_by_field_name("argument"))
        if inner.type == "subscript_expression":
            arr = strip(inner.child_by_field_name("argument"))
            idx = inner.child_by_field_name("indices") or inner.child_by_field_name("index")
            if arr.type == "identifier" and idx is not None:
                return arr.text.decode(), idx
    if node.type == "binary_expression" and node.child_by_field_name("operator").type == "+":
        left, right = strip(node.child_by_field_name("left")), node.child_by_field_name("right")
        if left.type == "identifier":
            return left.text.decode(), right
    return "", None


def _writes_only_bins(model: KernelModel, adds: list, span: tuple[int, int]) -> None:
    """The counting writes no memory but by atomic adds (a thread's own arrays aside), and the
    kernel writes no array argument but by atomic adds (the input is only read)."""
    inside = [(c.start_byte, c.end_byte) for c, _, _, _ in adds]
    for x in model.accesses:
        if not x.write or x.space == "local":
            continue
        in_add = any(s <= x.span.start and x.span.end <= e for s, e in inside)
        if span[0] <= x.span.start < span[1] and not in_add:
            raise Decline(f"its counting writes `{x.array}[{x.index}]` other than by an atomic add")
        if x.space == "global" and x.array in model.pointers and not in_add:
            raise Decline(f"it writes `{x.array}[{x.index}]` other than by an atomic add")


def _read_only_by_adds(model: KernelModel, adds: list, bins: str, span: tuple[int, int]) -> None:
    """Within `span`, the bins are reached only as the elements the atomic adds add to (a bin read
    besides would read the block's own count where they are privatised)."""
    targets = set()
    for call, _, _, _ in adds:
        first = strip(call_args(call)[0])
        if first.type == "pointer_expression":
            inner = strip(first.child_by_field_name("argument"))
            targets.add((inner.start_byte, inner.end_byte))
    for x in model.accesses_of(bins):
        if span[0] <= x.span.start < span[1] and (x.span.start, x.span.end) not in targets:
            raise Decline(f"it reads `{bins}[{x.index}]` other than as an atomic add's bin")


def _privatised(ctx, model: KernelModel, S: str, zero: list, merge: list, adds: list, span) \
        -> tuple[str, str, int, str]:
    """The bins privatised already: S the kernel's shared array of a known size, zeroed before the
    first barrier and added to the global bins after the second; (those bins, the merge's atomic,
    the size, the bins' type)."""
    arr = next((a for a in model.arrays if a.name == S and a.space == "shared" and a.function == model.name), None)
    if arr is None or len(arr.sizes) != 1 or arr.sizes[0] is None:
        raise Decline(f"it counts into `{S}` between barriers, which is no shared array of a known size")
    size = arr.sizes[0]
    for part, what in ((zero, "zeroing"), (merge, "merge")):
        text = "".join(cut(ctx.source, s.start_byte, s.end_byte) for s in part)
        if {"blockIdx", "gridDim", "get_group_id", "get_num_groups", "get_global_id"} & expression_names_of(text):
            raise Decline(f"its {what} reads the block's index: bins per block, not one histogram")
    _zeroes(ctx, model, S, size, zero)
    merges = [(c, arr_, idx, val) for c, arr_, idx, val in adds if not span[0] <= c.start_byte < span[1]]
    if not merges or any(c.start_byte < span[0] for c, _, _, _ in merges):
        raise Decline("it adds nothing to global bins after its counting" if not merges else
                      "it adds atomically before its counting")
    targets = {a for _, a, _, _ in merges}
    if len(targets) != 1 or next(iter(targets)) not in model.pointers:
        raise Decline(f"its merge adds to {', '.join(sorted(targets))}, not one array argument")
    target = targets.pop()
    _merges(ctx, model, S, size, target, merge, merges)
    return target, merges[0][0].child_by_field_name("function").text.decode(), size, arr.ctype


def _thread_stride(model: KernelModel, stmt, size: int, what: str):
    """The loop of `stmt`: each thread from its index in the block by the block's threads below the
    bins' size; its model loop."""
    lp = next((l for l in model.loops if l.span.start == stmt.start_byte and l.in_kernel), None)
    if lp is None or lp.role != "thread-stride" or lp.compare != "<" or lp.dim != 0 or \
            lp.start_form is None or lp.start_form.coeff("threadIdx.x") != Poly.const(1) or \
            lp.bound_form is None or lp.bound_form.invariant is None:
        raise Decline(f"its {what} is no loop of the block's threads over the bins")
    bound = lp.bound_form.invariant
    if not bound.names() <= set(model.defines) or bound.evaluate(model.defines) != size:
        raise Decline(f"its {what} runs to `{lp.bound}`, not the {size} bins")
    return lp


@dataclass(frozen=True)
class _Bins:
    """How the zeroing or the merge goes over the bins: a loop of the block's threads (`var` its
    variable), or one bin a thread (`var` "", the bin the thread's index in the block)."""

    root: object  # the loop's body, or the one statement
    var: str

    def is_bin(self, model: KernelModel, text: str) -> bool:
        if self.var:
            return text == self.var
        form = model.index(model.inline(text)).affine
        return form is not None and form.symbols() == {"threadIdx.x"} and \
            form.coeff("threadIdx.x") == Poly.const(1) and form.const.is_zero


def _over_bins(ctx, model: KernelModel, part: list, size: int, what: str) -> _Bins:
    """The one statement of the zeroing or the merge (declarations aside): a loop of the block's
    threads over the bins, or a statement for the thread's own bin where the original's block has
    as many threads as bins (more, where the statement is under `if (tid < bins)`)."""
    stmts = [s for s in part if s.type != "declaration"]
    if len(stmts) != 1:
        raise Decline(f"its {what} is more than one loop or statement over the bins")
    if stmts[0].type == "for_statement":
        return _Bins(stmts[0].child_by_field_name("body"), _thread_stride(model, stmts[0], size, what).var)
    bins = _Bins(stmts[0], "")
    guarded = stmts[0].type == "if_statement" and _bin_range(model, bins, stmts[0], size)
    device = ctx.limits.expression_names()
    for problem in (*ctx.original.problems, *ctx.original.verify_problems):
        try:
            threads = parse_expression(ctx.block[0]).evaluate({**device, **problem.values, **ctx.defaults})
        except (ExpressionError, KeyError) as e:
            raise Decline(f"the launch cannot be evaluated at {problem.label()} ({e})") from None
        if threads < size or threads > size and not guarded:
            raise Decline(f"its {what} takes a bin a thread, and the block's {threads} threads are not its "
                          f"{size} bins{'' if guarded else ' (no `if (tid < bins)`)'} at {problem.label()}")
    return bins


def _bin_range(model: KernelModel, bins: _Bins, node, size: int) -> bool:
    """Whether an `if` tests only that the thread's bin is below the bins' count."""
    if node.type != "if_statement" or node.child_by_field_name("alternative") is not None:
        return False
    cond = strip(node.child_by_field_name("condition"))
    while cond.type in ("condition_clause", "parenthesized_expression") and cond.named_child_count == 1:
        cond = strip(cond.named_children[0])
    if cond.type != "binary_expression" or cond.child_by_field_name("operator").type != "<":
        return False
    right = _text_of(cond.child_by_field_name("right"))
    value = int(right.rstrip("uU")) if right.rstrip("uU").isdigit() else model.defines.get(right)
    return bins.is_bin(model, _text_of(cond.child_by_field_name("left"))) and value == size


def _zeroes(ctx, model: KernelModel, S: str, size: int, zero: list) -> None:
    """The zeroing: S[bin] = 0 for every bin, by a loop of the block's threads or a bin a thread."""
    bins = _over_bins(ctx, model, zero, size, "zeroing")
    body = [s for s in walk(bins.root) if s.type == "expression_statement"]
    ok = len(body) == 1 and body[0].named_child_count == 1 and body[0].named_children[0].type == "assignment_expression"
    if ok:
        e = body[0].named_children[0]
        left = strip(e.child_by_field_name("left"))
        right = strip(e.child_by_field_name("right"))
        ok = (e.child_by_field_name("operator").type == "=" and left.type == "subscript_expression"
              and left.child_by_field_name("argument").text.decode() == S
              and bins.is_bin(model, _text_of(left.child_by_field_name("indices") or left.child_by_field_name("index")))
              and right.type == "number_literal" and right.text.decode().rstrip("uUlLfF.0") == "")
        node = body[0]
        while ok and node is not None and not _same(node, bins.root):
            node = node.parent
            ok = node is not None and (_same(node, bins.root) or node.type == "compound_statement"
                                       or _bin_range(model, bins, node, size))
    if not ok:
        raise Decline(f"its zeroing does not set each bin of `{S}` to 0 and nothing else")


def _merges(ctx, model: KernelModel, S: str, size: int, target: str, merge: list, adds: list) -> None:
    """The merge: each bin S[bin], as read, added to target[bin] by an atomic (a loop of the block's
    threads, or a bin a thread), under no condition but the bin's being non-zero."""
    if len(adds) != 1:
        raise Decline("after its second barrier it does more than add each bin to the global bins")
    bins = _over_bins(ctx, model, merge, size, "merge")
    call, _, idx, value = adds[0]
    if not bins.is_bin(model, _text_of(idx)):
        raise Decline(f"its merge adds to `{target}[{_text_of(idx)}]`, not the bin it reads")
    value_text = _text_of(value) if value is not None else ""
    value_of = model.locals.get(value_text, value_text) if value_text not in model.changing else value_text
    found = syntax_nodes(f"void kt_f() {{ kt_v = ({value_of}); }}", ("parenthesized_expression",))
    read = strip(found[0][0]) if found else None
    is_read = read is not None and read.type == "subscript_expression" and \
        read.child_by_field_name("argument").text.decode() == S and \
        bins.is_bin(model, _text_of(read.child_by_field_name("indices") or read.child_by_field_name("index")))
    if not is_read:
        raise Decline(f"its merge adds `{value_text or 1}`, not the bin of `{S}` as read")
    reads = {value_text, " ".join(value_of.split())}
    nonzero = {f"{v} {op} 0{u}" for v in reads for op in (">", "!=") for u in ("", "u")} | reads
    node = call.parent
    while node is not None and not _same(node, bins.root):
        if node.type == "if_statement" and not _bin_range(model, bins, node, size):
            cond = _text_of(node.child_by_field_name("condition")).strip("()").strip()
            if cond not in nonzero or node.child_by_field_name("alternative") is not None:
                raise Decline(f"its merge adds a bin under `{cond}`, more than its being non-zero")
        elif node.type in ("for_statement", "while_statement", "do_statement"):
            raise Decline("its merge adds a bin in a loop of its own")
        node = node.parent
    if model.arg_types.get(target, "") != model.types.get(S, ""):
        raise Decline(f"its global bins `{target}` are not of its shared bins' type")


def _same(a, b) -> bool:
    return (a.start_byte, a.end_byte) == (b.start_byte, b.end_byte)


def _text_of(node) -> str:
    """A node's text, spaces made single; a subscript's index list (`[i]`) as its one index."""
    if node is not None and node.type == "subscript_argument_list" and node.named_child_count == 1:
        node = node.named_children[0]
    return " ".join(node.text.decode().split()) if node is not None else ""


def expression_names_of(code: str) -> set[str]:
    """The identifiers of a piece of code (statements or an expression)."""
    wrapped = f"void kt_code() {{\n{code}\n}}\n"
    return {n.text.decode() for n, _ in syntax_nodes(wrapped, ("identifier",))} - {"kt_code"}


def _declared(stmts: list) -> set[str]:
    """The names the top-level declarations of `stmts` declare."""
    out = set()
    for s in stmts:
        if s.type != "declaration":
            continue
        for d in s.children_by_field_name("declarator"):
            while d is not None and d.type != "identifier":
                d = d.child_by_field_name("declarator")
            if d is not None:
                out.add(d.text.decode())
    return out


def _extent(ctx, model: KernelModel, bins: str, size: int) -> tuple[int | None, str, str]:
    """The global bins' count where a shared copy of them can be sized: a number (the spec's shape
    of them), or a scalar argument's value (the spec's shape of them the value of an argument the
    kernel takes) sized at its largest over the spec's sizes; (that size, the argument or "", why
    PRIVATE is not offered or "")."""
    arg = next((a for a in ctx.original.arguments if a.name == bins), None)
    if arg is None or not arg.shape:
        return None, "", f"the spec gives `{bins}` no shape: the bins' count is not known"
    texts = [" ".join(dim.source.split()) for dim in arg.shape]
    count, scalar = 1, ""
    if all(t.isdigit() for t in texts):
        for t in texts:
            count *= int(t)
    else:
        given = next((a.name for a in ctx.original.arguments if len(texts) == 1 and a.role == "scalar"
                      and a.value is not None and " ".join(a.value.source.split()) == texts[0]
                      and a.name in {x.name for x in model.signature.args}), "")
        if not given:
            return None, "", (f"the bins' count `{' * '.join(texts)}` is a problem size no scalar argument gives "
                              "the kernel: no shared copy of them can be sized")
        try:
            count = max(int(arg.shape[0].evaluate(p.values))
                        for p in (*ctx.original.problems, *ctx.original.verify_problems))
        except (ExpressionError, KeyError, ValueError) as e:
            return None, "", f"the bins' count `{texts[0]}` cannot be evaluated ({e})"
        scalar = given
    if size and count * size > ctx.limits.max_shared_per_block:
        return None, "", f"the {count} bins' {count * size} bytes exceed the device's shared memory per block"
    return count, scalar, ""


@dataclass(frozen=True)
class _Elements:
    """The elements the counting takes and what it does for one."""

    var: str  # the element's index
    var_type: str
    bound: str  # kernel text X: the elements 0 .. X - 1
    form: str  # "guard", "grid-stride" or "chunk"
    body: str  # the element's function's body
    per: int = 1  # elements a thread of the original launch takes, where its grid must cover them
    extents: tuple[str, ...] = ()  # a two-dimensional guard's bounds (W, H): X is W * H


def _elements(ctx, model: KernelModel, counting: list) -> _Elements:
    if counting[-1].type in ("for_statement", "while_statement", "do_statement") and \
            all(s.type == "declaration" for s in counting[:-1]):
        return _Elements(*_looped(ctx, model, counting))
    return _guarded(ctx, model, counting)


def _global_index(model: KernelModel, form) -> bool:
    """Whether an affine form is the thread's index in a one-dimensional launch."""
    return form is not None and form.symbols() == {"threadIdx.x", "blockIdx.x"} and \
        form.coeff("threadIdx.x") == Poly.const(1) and form.coeff("blockIdx.x") == Poly.name("blockDim.x") and \
        form.const.is_zero


def _index_of(model: KernelModel, counting: list, dim: int):
    """The thread's global index along `dim` declared in the counting statements, never changed."""
    x = "xyz"[dim]
    for t in model.thread_indices:
        form = t.form
        if t.name in model.changing or form is None or \
                not any(s.start_byte <= t.span.start and t.span.end <= s.end_byte for s in counting):
            continue
        if form.symbols() == {f"threadIdx.{x}", f"blockIdx.{x}"} and form.coeff(f"threadIdx.{x}") == Poly.const(1) \
                and form.coeff(f"blockIdx.{x}") == Poly.name(f"blockDim.{x}") and form.const.is_zero:
            return t
    return None


def _guarded(ctx, model: KernelModel, counting: list) -> "_Elements":
    """A thread per element: `T i = <global index>;` then `if (i < X) {...}` last, or `if (i >= X)
    return;` followed by the counting; or a thread per (x, y) of a two-dimensional launch, guarded
    by `x < W && y < H` (the elements then the W * H of a flat index: x = i % W, y = i / W)."""
    index, row = _index_of(model, counting, 0), _index_of(model, counting, 1)
    if index is None:
        raise Decline("no element index `blockIdx.x * blockDim.x + threadIdx.x` (or `get_global_id(0)`) "
                      "nor a grid-stride loop over the elements")
    coords = {index.name} | ({row.name} if row is not None else set())
    try:
        found = top_guard(counting, coords)
    except Decline:
        found = None
    bounds = {v: b for _, v, b in found[1] if b is not None} if found is not None else {}
    if found is None or len(found[1]) != len(coords) or set(bounds) != coords:
        example = " && ".join(f"{c} < n" for c in sorted(coords))
        raise Decline(f"no guard `if ({example})` or `if (!({example})) return;` bounds the element")
    for bound in bounds.values():
        if reads_thread_ids(model.inline(bound)) or coords & expression_names(model.inline(bound)):
            raise Decline(f"the guard's bound `{bound}` moves with the thread")
    inside = (counting[found[0]].start_byte, counting[-1].end_byte)
    for a in model.atomics:
        if counting[0].start_byte <= a.span.start < inside[0]:
            raise Decline(f"it adds by `{a.name}` before its guard")
    width = model.inline(bounds[index.name])
    values = {index.name: "kt_i"} if row is None else {index.name: f"kt_i % ({width})", row.name: f"kt_i / ({width})"}
    edits = []
    for t in (index, row) if row is not None else (index,):
        if t.span.start < counting[0].start_byte:
            raise Decline(f"`{t.name}` is not declared where the counting starts")
        decl = cut(ctx.source, t.span.start, t.span.end).encode("utf-8")
        at = decl.rfind(t.expr.encode("utf-8"))
        if at < 0:
            raise Decline(f"the declaration of `{t.name}` cannot be rewritten")
        edits.append((t.span.start + at, t.span.start + at + len(t.expr.encode("utf-8")), values[t.name]))
    text = cut(ctx.source, counting[0].start_byte, counting[-1].end_byte).encode("utf-8")
    for first, last, value in sorted(edits, reverse=True):
        a, b = first - counting[0].start_byte, last - counting[0].start_byte
        text = text[:a] + value.encode("utf-8") + text[b:]
    body = text.decode("utf-8")
    if reads_thread_ids(body):
        raise Decline("what a thread does for its element reads thread or block ids other than the element's index")
    if row is None:
        return _Elements(index.name, model.types.get(index.name, "int"), bounds[index.name], "guard",
                         "{\n    " + body + "\n}")
    extents = (bounds[index.name], bounds[row.name])
    return _Elements(index.name, "long", f"({extents[0]}) * ({extents[1]})", "guard", "{\n    " + body + "\n}",
                     extents=extents)


def _looped(ctx, model: KernelModel, counting: list) -> tuple[str, str, str, str, str, int]:
    """A loop over the thread's elements, last of the counting after declarations: a grid-stride
    `for` or `while` (`i += blockDim.x * gridDim.x` its last statement), or a `for` over the
    thread's own chunk of C (`for (i = tid * C; i < min((tid + 1) * C, X); ++i)`). (The index, its
    type, X, the form, the body of the element's function, C: the elements a thread of the original
    launch takes, 1 for a grid-stride loop.)"""
    node, decls = counting[-1], counting[:-1]
    if node.type == "for_statement":
        var, var_type, bound, form, per = _for_loop(ctx, model, node)
        body = node.child_by_field_name("body")
        steps = [body]
    elif node.type == "while_statement":
        var, bound, steps = _while_loop(ctx, model, node, decls)
        var_type, form, per = model.types.get(var, "int"), "grid-stride", 1
    else:
        raise Decline("its counting loop is no `for` or `while` loop over the elements")
    for step in steps:
        for n in walk(step):
            if n.type in ("break_statement", "return_statement", "goto_statement") or \
                    n.type == "continue_statement" and node.type == "while_statement":
                raise Decline(f"a `{n.type.split('_')[0]}` in its loop over the elements")
            t = target(n)
            if t is not None and t.type == "identifier" and t.text.decode() == var:
                raise Decline(f"its loop's body changes `{var}`")
    if reads_thread_ids(model.inline(bound)) or var in expression_names(model.inline(bound)):
        raise Decline(f"the loop's bound `{bound}` moves with the thread")
    carried = {a.var for a in model.accumulators if a.loop is not None
               and model.loops[a.loop].span.start == node.start_byte and a.var != var}
    if carried:
        raise Decline(f"its loop carries `{sorted(carried)[0]}` from one element to the next")
    loop_text = "\n    ".join(cut(ctx.source, st.start_byte, st.end_byte) for st in steps)
    if reads_thread_ids(loop_text):
        raise Decline("what a thread does for its element reads thread or block ids other than the element's index")
    kept, made = [], set()  # the declarations the element's function keeps; names made from thread ids
    for st in decls:
        text = cut(ctx.source, st.start_byte, st.end_byte)
        if reads_thread_ids(text) or expression_names_of(text) & made or var in _declared([st]):
            made |= _declared([st])
        else:
            kept.append(text)
    if expression_names_of(loop_text) & (made - {var}):
        raise Decline(f"its loop reads `{sorted(expression_names_of(loop_text) & (made - {var}))[0]}`, made from "
                      "thread ids")
    decl_text = "".join(f"{k}\n    " for k in kept)
    # a `continue` ends the element, as it ended the loop's step
    body_text = (f"{{\n    {decl_text}{var_type} {var} = kt_i;\n    do {loop_text} while (0);\n}}"
                 if node.type == "for_statement" else f"{{\n    {decl_text}{var_type} {var} = kt_i;\n    {loop_text}\n}}")
    return var, var_type, bound, form, body_text, per


GRID_STRIDE = "grid-stride loop over the elements (from `blockIdx.x * blockDim.x + threadIdx.x` by `blockDim.x * " \
    "gridDim.x` while below a bound)"


def _for_loop(ctx, model: KernelModel, node) -> tuple[str, str, str, str, int]:
    """A `for` over the elements: grid-stride, or the thread's chunk of C."""
    lp = next((l for l in model.loops if l.span.start == node.start_byte and l.in_kernel), None)
    if lp is None or lp.compare != "<" or lp.start_form is None:
        raise Decline(f"its counting loop is no {GRID_STRIDE}, nor over the thread's chunk of the elements")
    init = node.child_by_field_name("initializer")
    if init is None or init.type != "declaration":
        raise Decline(f"the loop's index `{lp.var}` is not declared by the loop")
    kind = init.child_by_field_name("type")
    var_type = " ".join(cut(ctx.source, init.start_byte, kind.end_byte).split()) if kind is not None else "int"
    if lp.role == "grid-stride" and lp.dim == 0 and lp.update == "+=" and _global_index(model, lp.start_form):
        return lp.var, var_type, lp.bound, "grid-stride", 1
    per = _numbered(lp.start_form.coeff("threadIdx.x"), model).number
    chunk = per is not None and per >= 1 and lp.start_form.symbols() == {"threadIdx.x", "blockIdx.x"} and \
        _numbered(lp.start_form.coeff("blockIdx.x"), model) == Poly.const(per) * Poly.name("blockDim.x") and \
        lp.start_form.const.is_zero and lp.step_form is not None and lp.step_form.invariant is not None and \
        lp.step_form.invariant.number == 1 and lp.update in ("++", "+=")
    bound = _chunk_bound(model, lp, per) if chunk else None
    if bound is None:
        raise Decline(f"its counting loop is no {GRID_STRIDE}, nor over the thread's chunk of the elements "
                      "(`for (i = tid * C; i < min((tid + 1) * C, n); ++i)`)")
    return lp.var, var_type, bound, "chunk", per


def _numbered(p: Poly, model: KernelModel) -> Poly:
    """A polynomial with the file's #defines (`CFACTOR`) as their numbers."""
    for name in p.names() & set(model.defines):
        p = p.substitute(name, Poly.const(model.defines[name]))
    return p


def _chunk_bound(model: KernelModel, lp, per: int) -> str | None:
    """X of a chunk loop's bound `min((tid + 1) * C, X)` (either order), else None."""
    found = syntax_nodes(f"void kt_f() {{ kt_v = ({lp.bound}); }}", ("call_expression",))
    if not found:
        return None
    call = found[0][0]
    fn = call.child_by_field_name("function")
    args = call_args(call)
    if fn is None or fn.text.decode() not in ("min", "umin") or len(args) != 2:
        return None
    for end, other in ((args[0], args[1]), (args[1], args[0])):
        form = model.index(model.inline(_text_of(end))).affine
        if form is not None and (form - lp.start_form).symbols() == set() and \
                _numbered((form - lp.start_form).const, model).number == per:
            return _text_of(other)
    return None


def _while_loop(ctx, model: KernelModel, node, decls: list) -> tuple[str, str, list]:
    """A grid-stride `while (i < X) { ...; i += blockDim.x * gridDim.x; }`, i declared before it as
    the thread's global index: (i, X, the statements of one element)."""
    body = node.child_by_field_name("body")
    stmts = [c for c in body.named_children if c.type != "comment"] if body.type == "compound_statement" else [body]
    last = stmts[-1] if stmts else None
    step = last.named_children[0] if last is not None and last.type == "expression_statement" and \
        last.named_child_count == 1 else None
    if step is None or step.type != "assignment_expression" or step.child_by_field_name("operator").type != "+=" \
            or strip(step.child_by_field_name("left")).type != "identifier":
        raise Decline(f"its counting loop is no {GRID_STRIDE}: its last statement is no `i += stride`")
    var = strip(step.child_by_field_name("left")).text.decode()
    index = next((t for t in model.thread_indices if t.name == var), None)
    if index is None or not _global_index(model, index.form) or \
            not any(d.start_byte <= index.span.start < d.end_byte for d in decls):
        raise Decline(f"`{var}` is not declared before the loop as the thread's global index")
    stride = model.index(model.inline(_text_of(step.child_by_field_name("right")))).affine
    if stride is None or stride.symbols() or stride.const != Poly.name("blockDim.x") * Poly.name("gridDim.x"):
        raise Decline(f"its loop steps `{var}` by `{_text_of(step.child_by_field_name('right'))}`, not the grid's "
                      "threads")
    try:
        parts = list(guard_parts(_text_of(node.child_by_field_name("condition")), {var}))
    except Decline:
        parts = []
    if len(parts) != 1 or parts[0][2] is None:
        raise Decline(f"its loop runs while `{_text_of(node.child_by_field_name('condition'))}`, not `{var} < n`")
    return var, parts[0][2], stmts[:-1]


def _covers(ctx, extents: list[str], per: int = 1) -> None:
    """The original's grid of blocks, `per` elements a thread along x, covers the elements along
    each dimension at every size of the spec (a thread past them does nothing)."""
    device = ctx.limits.expression_names()
    try:
        have = [parse_expression(f"({g}) * ({b}) * {per if k == 0 else 1}")
                for k, (g, b) in enumerate(zip(ctx.grid, ctx.block))]
        want = [parse_expression(x) for x in extents]
    except ExpressionError as e:
        raise Decline(f"the launch cannot be read ({e})") from None
    if len(have) < len(want):
        raise Decline(f"the launch has fewer dimensions than the elements' {len(want)}")
    for problem in (*ctx.original.problems, *ctx.original.verify_problems):
        env = {**device, **problem.values, **ctx.defaults}
        for k, (h, w) in enumerate(zip(have, want)):
            try:
                if h.evaluate(env) < w.evaluate(env):
                    raise Decline(f"the grid's threads are fewer than the {extents[k]} elements at {problem.label()}")
            except (ExpressionError, KeyError, ZeroDivisionError) as e:
                raise Decline(f"the launch cannot be evaluated at {problem.label()} ({e})") from None


# writing ---------------------------------------------------------------------------------------------------

def _rewrite(ctx: RewriteContext, h: Histogram) -> Rewrite:
    model = ctx.model
    d = Dialect.of(ctx.backend)
    spans = kernel_spans(ctx.source, model)
    offer_private = not h.private and h.extent is not None
    privatised = h.private or offer_private
    # a block the lifts left a number (its value in a shape, a thread count) gets a parameter of
    # its own: the new kernel reads the block's size, never the number
    # a two-dimensional original's new launch is one-dimensional: THREADS threads a block
    fixed_block = ctx.block[0].strip().isdigit() or h.dims > 1
    wanted = (("PRIVATE",) if offer_private else ()) + (("COPIES",) if privatised else ()) + \
        ("ITEMS", "STRIDED", "GRID") + (("THREADS",) if fixed_block else ())
    names = fresh_names(wanted, ctx.taken | set(ctx.defaults))
    helpers, call, call_private = _function_text(ctx, model, d, h, offer_private)
    kernel = with_names(_kernel_text(ctx, d, h, offer_private, call, call_private), names)
    helpers = with_names(helpers, names)
    params, constraints, first, block0 = _parameters_of(ctx, h, names, offer_private, fixed_block)
    switch = " || ".join(f"{p.name} != {p.default}" for p in params)
    on = switch.replace("||", "or")
    items, grid_p = names["ITEMS"], names["GRID"]
    chunks = f"max(1, ceil_div({h.spec_bound}, ({block0}) * {items}))"
    grid0 = f"({chunks} if {grid_p} == 0 else min(sm_count * {grid_p}, {chunks})) if {on} else ({ctx.grid[0]})"
    if h.dims > 1:
        # the parameters made before (the lifted block) are the original's alone: held while the new one runs
        constraints += pinned(ctx, " and ".join(f"{p.name} == {p.default}" for p in params))
    source = beside(ctx.source, spans, switch, params, helpers, kernel, NAME)
    E = h.extent
    kept = f"the {E} bins privatised in shared memory as the original has them" if h.private else \
        (f"PRIVATE 1 privatising the {E} bins in shared memory" if offer_private and not h.count else
         f"PRIVATE 1 privatising the `{h.count}` bins in shared memory (room for {E}, the most the spec's sizes "
         f"ask; a block whose bins outgrow it counts on the global bins)" if offer_private else
         f"the bins left global ({h.no_private})")
    what = (f"histogram: what a thread does for one element as a function of its index, ITEMS elements per thread "
            f"(STRIDED: a block's width apart or consecutive), GRID blocks per multiprocessor striding over the "
            f"{h.bound} elements; {kept}" + ("; COPIES copies of them a block, a thread counting into its lane's "
                                             "copy, summed at the merge" if privatised else ""))
    if h.elem_type in FLOATS:
        what += ("; the float bins are summed in another order, so they differ from the original's by rounding, "
                 "which the gate's tolerance (calibrated on the original's own error against the reference) judges")
    grid = (grid0,) + tuple(f"1 if {on} else ({g})" if h.dims > 1 else g for g in ctx.grid[1:])
    block = None
    if fixed_block and h.dims > 1:
        block = (f"{block0} if {on} else ({ctx.block[0]})",) + tuple(f"1 if {on} else ({b})" for b in ctx.block[1:])
    elif fixed_block:
        block = (block0,) + tuple(ctx.block[1:])
    return Rewrite(NAME, source, tuple(params), what, tuple(constraints), grid, block, first=first)


def _function_text(ctx, model: KernelModel, d: Dialect, h: Histogram, offer_private: bool) -> tuple[str, str, str]:
    """The element's function (the kernel's parameters, the bins privatised already: its shared
    array too; OpenCL's bins in local memory under PRIVATE), its call on the bins as they are, and
    its call on a block's copy of the bins ($BINS)."""
    cuda = d.name == "cuda"
    found = kernel_parameters(ctx.source, _function(ctx, model))
    params_text, arg_names = [t for t, _ in found], [n for _, n in found]
    qualifier = "static __device__ __forceinline__ void" if cuda else "static inline void"
    index = f"const {h.var_type} kt_i"
    if h.private:
        fn_params = params_text + [f"{'' if cuda else '__local '}{h.elem_type} *{h.bins}", index]
        args = arg_names + [h.bins]
    else:
        fn_params = params_text + [index]
        args = list(arg_names)
    helpers = f"{qualifier} kt_count({', '.join(fn_params)})\n{h.counting}\n"
    shared = "kt_count"
    if offer_private and not cuda:
        # OpenCL names the address space: a function of its own counts into the bins in local memory
        at = arg_names.index(h.bins)
        mine = [w if w not in ("__global", "global") else "__local" for w in params_text[at].split()]
        local_params = params_text[:at] + [" ".join(mine)] + params_text[at + 1:] + [index]
        shared = "kt_count_shared"
        helpers += f"#if $PRIVATE\n{qualifier} {shared}({', '.join(local_params)})\n{h.counting}\n#endif\n"
    name, shared_name = "kt_count", shared
    tparams = template_parameters(ctx.source, model)
    if tparams:
        helpers = helpers.replace(f"{qualifier} kt_count", f"template {tparams}\n{qualifier} kt_count")
        name = f"kt_count<{', '.join(model.signature.template_params)}>"
        shared_name = f"{shared}<{', '.join(model.signature.template_params)}>"
    call = f"{name}({', '.join(args)}, ({h.var_type})kt_i)"
    private = f"{shared_name}({', '.join(a if a != h.bins else '$BINS' for a in args)}, ({h.var_type})kt_i)"
    return helpers, call, private


def _kernel_text(ctx, d: Dialect, h: Histogram, offer_private: bool, call: str, call_private: str) -> str:
    """The new kernel: the bins' copies zeroed, ITEMS elements a thread over the grid's stride, the
    copies summed and merged by an atomic per non-zero bin. Bins a scalar argument counts get a
    shared copy of their largest count over the spec's sizes; a block whose bins outgrow it counts
    on the global bins (every thread of a block takes the same way)."""
    cuda = d.name == "cuda"
    T, cap = h.elem_type, h.extent
    bins = f"(long)({h.count})" if h.count else str(cap)
    lid, size = ("threadIdx.x", "blockDim.x") if cuda else ("(int)get_local_id(0)", "(int)get_local_size(0)")
    group, groups = (d.group_id[0], d.num_groups) if cuda else ("(int)get_group_id(0)", "(int)get_num_groups(0)")
    mine = call_private.replace("$BINS", f"kt_bins + ({lid} % $COPIES) * {cap}")
    if h.count:
        mine = f"if (kt_fits) {mine}; else {call}"
    if offer_private:
        count_call = f"\n#if $PRIVATE\n                {mine};\n#else\n                {call};\n#endif\n"
    else:
        count_call = f"\n                {mine if h.private else call};\n"
    zero = merge = ""
    if h.private or offer_private:
        fits = f"    const bool kt_fits = {bins} <= {cap};\n" if h.count else ""
        zero = (f"    {d.shared} {T} kt_bins[$COPIES * {cap}];\n{fits}"
                f"    for (int kt_b = {lid}; kt_b < $COPIES * {cap}; kt_b += {size}) kt_bins[kt_b] = ({T})0;\n"
                f"    {d.barrier};\n")
        merge = (f"    {d.barrier};\n"
                 f"    for (long kt_b = {lid}; kt_b < {bins}{' && kt_fits' if h.count else ''}; kt_b += {size}) {{\n"
                 f"        {T} kt_v = kt_bins[kt_b];\n"
                 f"        for (int kt_c = 1; kt_c < $COPIES; ++kt_c) kt_v += kt_bins[kt_c * {cap} + kt_b];\n"
                 f"        if (kt_v != ({T})0) {h.merge_add}(&{h.target}[kt_b], kt_v);\n"
                 f"    }}\n")
        if offer_private:
            zero, merge = f"#if $PRIVATE\n{zero}#endif\n", f"#if $PRIVATE\n{merge}#endif\n"
    return f"""{header(ctx.source, kernel_spans(ctx.source, ctx.model))}
{{
{zero}    const long kt_n = (long)({h.bound});
    const long kt_step = (long){size} * $ITEMS;
    for (long kt_base = (long){group} * kt_step; kt_base < kt_n; kt_base += (long){groups} * kt_step) {{
#pragma unroll
        for (int kt_u = 0; kt_u < $ITEMS; ++kt_u) {{
            const long kt_i = $STRIDED ? kt_base + (long)kt_u * {size} + {lid} : kt_base + (long){lid} * $ITEMS + kt_u;
            if (kt_i < kt_n) {{{count_call}            }}
        }}
    }}
{merge}}}"""


def _parameters_of(ctx, h: Histogram, names: dict, offer_private: bool, fixed_block: bool) \
        -> tuple[list, list[str], dict, str]:
    """The rewrite's parameters, their constraints, the values worth measuring first, and the block."""
    E, T = h.extent, h.elem_type
    items, strided, grid_p = names["ITEMS"], names["STRIDED"], names["GRID"]
    params = []
    if offer_private:
        params.append(ParamProposal(names["PRIVATE"], (0, 1), 0, f"1: each block counts into its own {E} bins in "
                                    "shared memory, then adds each non-zero bin to the global bins by one atomic "
                                    "(0: atomics on the global bins)", "tile"))
    if "COPIES" in names:
        params.append(ParamProposal(names["COPIES"], (1, 2, 4, 8, 16, 32), 1, "copies of the bins a block, a thread "
                                    "counting into copy (thread % COPIES): fewer threads at one shared bin", "tile"))
    params += [ParamProposal(items, (1, 2, 4, 8, 16), 1, "elements per thread", "work"),
               ParamProposal(strided, (0, 1), 1, "1: a thread's elements a block's width apart (coalesced); "
                             "0: consecutive", "flag"),
               ParamProposal(grid_p, (0, 1, 2, 4, 8, 16, 32), 0, "0: a block per BLOCK * ITEMS elements; k: k blocks "
                             "per multiprocessor, striding over the elements", "grid")]
    constraints = [f"{items} > 1 or {strided} == 1"]
    first = {items: (1, 4, 16), grid_p: (0, 4, 16)}
    block0 = ctx.block[0]
    if fixed_block:
        block0 = names["THREADS"]
        threads = int(ctx.block[0]) if h.dims == 1 else 256
        values = tuple(sorted({64, 128, 256, 512, 1024, threads}))
        params.append(ParamProposal(block0, values, threads, "threads per block" + (
            " (a one-dimensional block over the flat index of the elements)" if h.dims > 1 else ""), "threads"))
        constraints.append(f"{block0} <= max_threads_per_block")
        first[block0] = tuple(sorted({threads, 1024}))
    if "COPIES" in names:
        copies = names["COPIES"]
        fits = f"{copies} * {E * BIN_TYPES[ctx.backend][T]} <= max_shared_per_block"
        constraints.append(f"{names['PRIVATE']} == 0 or {fits}" if offer_private else fits)
        if offer_private:
            constraints.append(f"{names['PRIVATE']} == 1 or {copies} == 1")
            first[names["PRIVATE"]] = (0, 1)
        first[copies] = (1, 8)
    return params, constraints, first, block0
