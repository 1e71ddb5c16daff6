"""The elementwise rewrite: vector loads and stores, several elements per thread, a grid-stride
loop, streaming cache hints and launch bounds, for a kernel whose threads each own one element.

Parameters (each default gives the original kernel, token for token, through `#if`):

- `VEC`: elements per thread handled as one pack, loaded and stored as 16-byte words (CUDA) or
  `vloadN` / `vstoreN` (OpenCL) when the pack is whole, in range and aligned, element by element
  (the original code) otherwise: the tail and any pack crossing a row;
- `ITEMS`: packs per thread, a block's width apart so that loads stay coalesced;
- `GRID`: 0 launches a block per BLOCK * VEC * ITEMS elements (one pass); k > 0 launches k blocks
  per multiprocessor, which stride over the elements;
- `CACHE` (CUDA): 1 loads and stores with the streaming hints `__ldcs` / `__stcs`;
- `BOUNDS` (CUDA, a kernel without `__launch_bounds__`): the rewritten kernel declares
  `__launch_bounds__(BLOCK, BOUNDS)`, the blocks per multiprocessor the compiler must fit.

The analysis (agents/kernel_tree.py) must show a thread per element with a guard `if (i < n)` or
`if (i >= n) return;`, every array read or written at an index that moves one for one with the
element (or, read only, not at all), a written array at one index only, and no other return. A
pack is taken whole only when, at run time, its last element is in range, it crosses no multiple
of any divisor the indices divide or take the remainder by, and (CUDA) each address is aligned.
A template kernel's new kernel is the same template, from its `template <...>` line.
"""

from __future__ import annotations

from kerntune.engine.cxx import PACKED
from kerntune.engine.dtypes import DTYPES
from kerntune.engine.expressions import ExpressionError
from kerntune.engine.expressions import parse as parse_expression
from kerntune.engine.proposal import ParamProposal

from .cooperate import kernel_spans
from .kernel_tree import HALF_LOADS, HALF_STORES, index_slope, inline, source_tokens, thread_reads
from .lift import fresh_name
from .model import DIALECT, Span
from .model import parse_expression as parse_c
from . import passes
from .passes import Declined, Rewrite, RewriteContext


NAME = "elementwise"
# the ids the grid-stride loop reads, by what they are (agents/model.py's table spells them)
IDS = {"size": "blockDim", "group": "blockIdx", "local": "threadIdx", "groups": "gridDim"}

CUDA_HELPERS = """\
// kerntune: whole packs of N elements moved as 16-byte words (or one smaller word); C++ linkage
// even inside an extern "C" block
extern "C++" {
template <int BYTES> struct kt_word;
template <> struct kt_word<1> { typedef unsigned char type; };
template <> struct kt_word<2> { typedef unsigned short type; };
template <> struct kt_word<4> { typedef unsigned int type; };
template <> struct kt_word<8> { typedef uint2 type; };
template <> struct kt_word<16> { typedef uint4 type; };
template <int N, typename T> __device__ __forceinline__ bool kt_aligned(const T *p) {
    return (reinterpret_cast<size_t>(p) & ((sizeof(T) * N < 16 ? sizeof(T) * N : 16) - 1)) == 0;
}
template <int N, int STREAM, typename T> __device__ __forceinline__ void kt_load(T *dst, const T *src) {
    constexpr int bytes = sizeof(T) * N, w = bytes < 16 ? bytes : 16;
    typedef typename kt_word<w>::type W;
#pragma unroll
    for (int c = 0; c < bytes / w; ++c)
        reinterpret_cast<W *>(dst)[c] = STREAM ? __ldcs(reinterpret_cast<const W *>(src) + c)
                                               : reinterpret_cast<const W *>(src)[c];
}
template <int N, int STREAM, typename T> __device__ __forceinline__ void kt_store(T *dst, const T *src) {
    constexpr int bytes = sizeof(T) * N, w = bytes < 16 ? bytes : 16;
    typedef typename kt_word<w>::type W;
#pragma unroll
    for (int c = 0; c < bytes / w; ++c) {
        if (STREAM) __stcs(reinterpret_cast<W *>(dst) + c, reinterpret_cast<const W *>(src)[c]);
        else reinterpret_cast<W *>(dst)[c] = reinterpret_cast<const W *>(src)[c];
    }
}
}
"""

OPENCL_HELPERS = """\
// kerntune: whole packs of VEC elements moved with vloadN / vstoreN
#define KT_CAT_(a, b) a##b
#define KT_CAT(a, b) KT_CAT_(a, b)
#if {vec} == 1
#define KT_LOAD(dst, src) ((dst)[0] = *(src))
#define KT_STORE(dst, src) (*(dst) = (src)[0])
#else
#define KT_LOAD(dst, src) KT_CAT(vstore, {vec})(KT_CAT(vload, {vec})(0, (src)), 0, (dst))
#define KT_STORE(dst, src) KT_CAT(vstore, {vec})(KT_CAT(vload, {vec})(0, (src)), 0, (dst))
#endif
"""

OPENCL_HALF_HELPERS = """\
// kerntune: packs of half storage read and written as float, like vload_half / vstore_half
#if {vec} == 1
#define KT_LOAD_HALF(dst, src) ((dst)[0] = vload_half(0, (src)))
#define KT_STORE_HALF(dst, src) vstore_half((src)[0], 0, (dst))
#else
#define KT_LOAD_HALF(dst, src) KT_CAT(vstore, {vec})(KT_CAT(vload_half, {vec})(0, (src)), 0, (dst))
#define KT_STORE_HALF(dst, src) KT_CAT(vstore_half, {vec})(KT_CAT(vload, {vec})(0, (src)), 0, (dst))
#endif
"""


class ElementwisePass(passes.Pass):
    """The elementwise rewrite as a pass: it requires a thread per element, guarded, whose every
    access moves with the element one for one; its parameters VEC (vector), ITEMS (work), GRID
    (grid), CACHE (flag) and BOUNDS (bounds)."""

    name = NAME

    def requires(self, ctx: RewriteContext) -> str | None:
        return _unsafe(ctx) or None

    def apply(self, ctx: RewriteContext) -> Rewrite | Declined:
        try:
            return _rewrite(ctx)
        except _Decline as e:
            return Declined(NAME, str(e))


# the pass, called as a function of a RewriteContext (agents/rewrites.py registers it)
rewrite = ElementwisePass()


class _Decline(Exception):
    pass


def _unsafe(ctx: RewriteContext) -> str:
    a = ctx.analysis
    if a.kind != "elementwise":
        return f"the kernel is not elementwise ({a.reasons[0] if a.reasons else a.kind})"
    if a.guard is None:
        return f"no guard `if ({a.element} < n)` or `if ({a.element} >= n) return;` bounds the element"
    if any(not _inside(r, a.guard.span) for r in a.returns) or (a.guard.form == "if" and a.returns):
        return "it returns elsewhere than its guard"
    if a.guard.form == "loop":
        if a.returns:
            return "it returns inside its loop over the elements"
        if a.guard.span not in a.statements or a.statements[-1] != a.guard.span:
            return "statements follow its loop over the elements"
        body = a.loops[a.stride_loop].body
        if any(w == "break" for w, sp in source_tokens(ctx.source.encode("utf-8")[body.start:body.end].decode("utf-8"))):
            return "a `break` in its loop over the elements"
        return ""
    decl = next(t for t in a.thread_indices if t.name == a.element)
    if decl.span not in a.statements:
        return f"`{a.element}` is not declared at the top of the kernel's body"
    return ""


def _inside(inner: Span, outer: Span) -> bool:
    return outer.start <= inner.start and inner.end <= outer.end


def _rewrite(ctx: RewriteContext) -> Rewrite:
    # the analysis' spans are bytes of the source: the source is cut as bytes, each piece decoded
    a, src, cuda = ctx.analysis, ctx.source.encode("utf-8"), ctx.backend == "cuda"
    ids = {k: DIALECT[ctx.backend].id(word) for k, word in IDS.items()}
    taken = set(ctx.taken) | set(ctx.defaults)
    names = {}
    for base in ("VEC", "ITEMS", "GRID") + (("CACHE", "BOUNDS") if cuda else ()):
        names[base] = fresh_name(base, taken)
        taken.add(names[base])
    vec, items, grid_p = names["VEC"], names["ITEMS"], names["GRID"]
    dtypes = {arg.name: arg.dtype for arg in ctx.original.arguments}

    # The streams: each (array, index) moving one for one with the element. An access made on some
    # paths only stays as written: the original may skip it exactly where its index leaves the array
    # (`i < m ? a[i] : b[i - m]`), so a pack cannot read or write it whole.
    candidates: dict[tuple[str, str], list] = {}
    slopes = {}
    for x in a.accesses:
        s = index_slope(a, x.index)
        if s.slope == 1:
            candidates.setdefault((x.array, "".join(inline(a, x.index).split())), []).append(x)
            slopes[id(x)] = s
        elif s.slope != 0:
            raise _Decline(f"`{x.array}[{x.index}]` does not move with the element")
    every_path = (a.guard.span,) if a.guard.form in ("if", "loop") else ()
    streams = {key: xs for key, xs in candidates.items() if all(x.under == every_path for x in xs)}
    conditions = [c for xs in streams.values() for x in xs for c in slopes[id(x)].conditions]
    if not streams:
        raise _Decline("no array is read or written on every path through the element")
    widths = [DTYPES.get(dtypes.get(arr, ""), 0) for arr, _ in streams]
    if 0 in widths:
        raise _Decline("an array's element size is not known from the spec")
    # an array of vector elements (`float4 *a`, a float4 a thread): each element is a pack already,
    # and vloadN / 16-byte words of several such elements are no pack of its type
    # (a template kernel's arrays at the entry's instantiation: `T *a` as `float4 *a`)
    at = {x.name: x.ctype for x in ctx.model.signature.args} if ctx.model.signature.is_template else {}
    packed = next((arr for arr, _ in streams if at.get(arr, a.arg_types.get(arr, "")) in PACKED), None)
    bound = inline(a, a.guard.bound)
    if a.element in {w for w, _ in source_tokens(bound)} or thread_reads_text(bound):
        raise _Decline(f"the guard's bound `{a.guard.bound}` moves with the thread")

    # the launch: one block per BLOCK * VEC * ITEMS elements, or k blocks per multiprocessor
    if len(ctx.block) > 1 and any(b.strip() != "1" for b in ctx.block[1:]) or \
            len(ctx.grid) > 1 and any(g.strip() != "1" for g in ctx.grid[1:]):
        raise _Decline("the launch is not one-dimensional")
    count = _spec_expression(bound, ctx)
    block0 = ctx.block[0]
    chunks = f"ceil_div({count}, ({block0}) * {vec} * {items})"
    grid0 = f"min({chunks}, max(sm_count * {grid_p}, {chunks} * (1 - min({grid_p}, 1))))"
    new_grid = (grid0,) + tuple(ctx.grid[1:])
    defaults = {**ctx.defaults, vec: 1, items: 1, grid_p: 0}
    try:
        _same_launch(ctx, ctx.grid[0], grid0, defaults)
    except _Decline:
        if a.guard.form != "loop":
            raise
        # a grid-stride original launches the grid it chose; the rewritten loop strides over it too
        new_grid, grid_p = tuple(ctx.grid), None

    # the rewritten kernel
    head_start = src.rfind(b"\n", 0, a.span.start) + 1
    prefix = src[head_start:a.span.start].strip()
    if ctx.model.signature.is_template:
        # a template kernel: the new kernel is the same template, from its `template <...>` line (the
        # file's instantiations, explicit or its host code's launches, make both); its registers are
        # declared in the template's words (`T kt_r0[VEC]`), as the arguments are
        first = kernel_spans(ctx.source, ctx.model).span.start
        head_start = src.rfind(b"\n", 0, first) + 1
        if src[head_start:first].strip():
            raise _Decline("the kernel's template line shares its line with other code")
    elif prefix not in (b"", b'extern "C"'):
        raise _Decline("the kernel's declaration shares its line with other code")
    elif not prefix and src[:head_start].rstrip().endswith(b'extern "C"'):  # on a line of its own
        head_start = src[:head_start].rstrip().rindex(b'extern "C"')
    end = a.span.end
    original_text = _text(src, head_start, end)
    head = _text(src, head_start, a.body.start)
    bounds_param = None
    params = []
    if cuda and "__launch_bounds__" not in head and (block0.isidentifier() or block0.isdigit()):
        bounds_param = names["BOUNDS"]
        cut = len(_text(src, head_start, a.name_span.start))
        head = head[:cut] + f"__launch_bounds__({block0}, {bounds_param}) " + head[cut:]
    elem_decl = next(t for t in a.thread_indices if t.name == a.element)
    decl_text = _text(src, elem_decl.span.start, elem_decl.span.end)
    cut = decl_text.rfind(elem_decl.expr)
    decl = decl_text[:cut] + "kt_i0 + kt_k" + decl_text[cut + len(elem_decl.expr):]
    if a.guard.form == "loop":  # the element's code is the loop's body, the loop's test its guard
        before = [st for st in a.statements if st.end <= a.guard.span.start]
        body = a.loops[a.stride_loop].body
        braced = src[body.start:body.start + 1] == b"{"
        body_first, body_last = (body.start + 1, body.end - 1) if braced else (body.start, body.end)
        while body_first < body_last and src[body_first:body_first + 1] in (b" ", b"\t", b"\r", b"\n"):
            body_first += 1
        while body_last > body_first and src[body_last - 1:body_last] in (b" ", b"\t", b"\r", b"\n"):
            body_last -= 1
    else:
        before = [st for st in a.statements if st.end <= elem_decl.span.start]
        after = [st for st in a.statements if st.start >= elem_decl.span.end]
        body_first = after[0].start if after else a.body.end - 1
        body_last = after[-1].end if after else a.body.end - 1
    column = len(_text(src, src.rfind(b"\n", 0, body_first) + 1, body_first))  # in characters
    element_code = indented(_text(src, body_first, body_last), column, 20)
    if a.guard.form == "loop":
        element_code = f"if ({a.element} < {a.guard.bound}) {{\n{' ' * 24}{element_code}\n{' ' * 20}}}"

    # the pack's first element in the original's index type: `(int)kt_i0 / d` divides in 32 bits
    # where the original did (its indices fit, or the original would overflow too)
    words = [w for w, _ in source_tokens(decl_text)]
    head_words = words[:words.index(a.element)] if a.element in words else []
    etype = " ".join(w for w in head_words if w not in ("const", "register", "*"))
    first_element = f"(({etype})kt_i0)" if etype else "kt_i0"
    regs: list[str] = []
    loads: list[str] = []
    stores: list[str] = []
    checks = [f"kt_i0 + {vec} <= kt_n"]
    for operand, divisor in dict.fromkeys(conditions):
        op0 = inline(a, operand, {a.element: first_element})
        checks.append(f"(({op0}) % ({divisor})) + {vec} <= ({divisor})")
    replace: list[tuple[Span, str]] = []
    halves = False
    for n, ((arr, _), xs) in enumerate(streams.items()):
        ctype = a.arg_types.get(xs[0].array) or a.arg_types.get(xs[0].via, "")
        half = {x.call in HALF_LOADS | HALF_STORES for x in xs}
        if half == {True, False}:
            raise _Decline(f"`{arr}` is read both as half and through vload_half / vstore_half")
        if half == {True}:
            ctype, halves = "float", True  # vload_half gives floats; vstore_half rounds them
        if not ctype:
            raise _Decline(f"the element type of `{arr}` is not known")
        reg = f"kt_r{n}"
        first = inline(a, xs[0].index, {a.element: first_element})
        address = f"{arr} + ({first})"
        written = any(x.write for x in xs)
        read = any(x.read for x in xs)
        regs.append(f"__align__(16) {ctype} {reg}[{vec}];" if cuda else f"{ctype} {reg}[{vec}];")
        suffix = "_HALF" if half == {True} else ""
        if read:
            loads.append(f"kt_load<{vec}, {names['CACHE']}>({reg}, {address});" if cuda
                         else f"KT_LOAD{suffix}({reg}, {address});")
        if written:
            stores.append(f"kt_store<{vec}, {names['CACHE']}>({address}, {reg});" if cuda
                          else f"KT_STORE{suffix}({address}, {reg});")
        if cuda:
            checks.append(f"kt_aligned<{vec}>({address})")
        for x in xs:
            if x.call and x.value_span is not None:  # `__stcs(&y[i], v)`: the value goes to the register
                replace.append((Span(x.span.start, x.value_span.start), f"({reg}[kt_k] = ("))
                replace.append((Span(x.value_span.end, x.span.end), "))"))
            else:
                replace.append((x.span, f"{reg}[kt_k]"))
    vector_code = indented(_replaced(src, body_first, body_last, replace), column, 20)

    ind = "    "
    prelude = "".join(_text(src, st.start, st.end) + "\n" + ind for st in before)
    kernel = (
        f"{head}{{\n{ind}{prelude}"
        f"const long kt_n = (long)({bound});\n"
        f"{ind}const long kt_span = (long){ids['size']} * {items} * {vec};\n"
        f"{ind}for (long kt_base = (long){ids['group']} * kt_span; kt_base < kt_n; "
        f"kt_base += (long){ids['groups']} * kt_span) {{\n"
        f"#pragma unroll\n"
        f"{ind * 2}for (int kt_item = 0; kt_item < {items}; ++kt_item) {{\n"
        f"{ind * 3}const long kt_i0 = kt_base + ((long)kt_item * {ids['size']} + {ids['local']}) * {vec};\n"
        f"{ind * 3}if ({' && '.join(checks)}) {{\n"
        + "".join(f"{ind * 4}{r}\n" for r in regs + loads)
        + f"#pragma unroll\n{ind * 4}for (int kt_k = 0; kt_k < {vec}; ++kt_k) {{\n"
        f"{ind * 5}{decl}\n{ind * 5}{vector_code}\n{ind * 4}}}\n"
        + "".join(f"{ind * 4}{s}\n" for s in stores)
        + f"{ind * 3}}} else {{\n"
        f"{ind * 4}for (int kt_k = 0; kt_k < {vec}; ++kt_k) {{\n"
        f"{ind * 5}{decl}\n{ind * 5}{element_code}\n{ind * 4}}}\n"
        f"{ind * 3}}}\n{ind * 2}}}\n{ind}}}\n}}"
    )
    smallest = min(widths)
    top = min(16, max(1, 32 // smallest))
    vec_values = tuple(v for v in (1, 2, 4, 8, 16) if v <= top) if packed is None else (1,)
    vec_text = (f"elements per vector access (a {16 // smallest}-wide pack is 16 bytes); whole packs only, the tail "
                "element by element") if packed is None else \
        f"elements per vector access (1 only: `{packed}` holds {a.arg_types[packed]} elements, each a pack already)"
    params = [
        ParamProposal(vec, vec_values, 1, vec_text, "vector"),
        ParamProposal(items, (1, 2, 4, 8), 1, "packs per thread, a block's width apart", "work"),
    ]
    if grid_p is not None:
        params.append(ParamProposal(grid_p, (0, 1, 4, 16), 0, "0: a block per BLOCK * VEC * ITEMS elements; "
                                    "k: k blocks per multiprocessor, striding over the elements", "grid"))
    if cuda:
        params.append(ParamProposal(names["CACHE"], (0, 1), 0, "on or off: streaming loads and stores "
                                    "(__ldcs / __stcs), for data read or written once", "flag"))
    if bounds_param:
        params.append(ParamProposal(bounds_param, (0, 1, 2, 4), 0, f"blocks per multiprocessor the compiler "
                                    f"must fit: __launch_bounds__({block0}, k) (0: the thread count alone)", "bounds"))
    helpers = CUDA_HELPERS if cuda else OPENCL_HELPERS.format(vec=vec)
    if halves:
        helpers += OPENCL_HALF_HELPERS.format(vec=vec)
    # each parameter's default, then the rewritten kernel where one is off it (the passes' one wrapper)
    text = ("// kerntune: the elementwise rewrite; its parameters' defaults give the original kernel\n"
            + passes.defaults(params) + passes.guarded(params, helpers + kernel, original_text))
    new_source = _text(src, 0, head_start) + text + _text(src, end, len(src))

    what = [f"{len(streams)} streams" if len(streams) != 1 else "1 stream", f"{vec}-wide packs", f"{items} per thread",
            "grid-stride or one-shot grid" if grid_p is not None else "the original's grid, strided over"]
    if cuda:
        what.append("streaming cache hints")
    if bounds_param:
        what.append("launch bounds")
    pack = 16 // smallest
    first = {vec: tuple(v for v in vec_values if v in (1, pack)), items: (1, 2, 4)}
    if grid_p is not None:
        first[grid_p] = (0, 4)
    if cuda:
        first[names["CACHE"]] = (0, 1)
    if bounds_param:
        first[bounds_param] = (0,)
    if block0.isidentifier() and block0 in ctx.defaults:
        first[block0] = (128, 256, 512)
    return Rewrite(NAME, new_source, tuple(params), "elementwise: " + ", ".join(what), (), new_grid, None,
                   first=first)


def indented(code: str, column: int, indent: int) -> str:
    """Code cut from a kernel at `column`, its later lines moved to `indent` spaces (where they
    start with that much blank)."""
    lines = code.split("\n")
    out = [lines[0]]
    for line in lines[1:]:
        blank = len(line) - len(line.lstrip(" "))
        out.append(" " * indent + line[min(blank, column):] if line.strip() else line)
    return "\n".join(out)


def _replaced(src: bytes, start: int, end: int, edits: list[tuple[Span, str]]) -> str:
    """Bytes [start, end) of the source with `edits` (byte spans within them) made, as text: through
    the passes' one edit buffer, which refuses two that overlap."""
    region = passes.Edits(_text(src, start, end))
    try:
        for span, text in edits:
            region.replace((span.start - start, span.end - start), text)
    except passes.EditConflict:
        raise _Decline("two accesses overlap") from None
    return region.result()


def _text(src: bytes, start: int, end: int) -> str:
    """Bytes [start, end) of the source, as text."""
    return src[start:end].decode("utf-8")


def thread_reads_text(text: str) -> bool:
    """Whether an expression reads thread or block ids."""
    node = parse_c(text)
    return node is None or bool(thread_reads(node, ""))


def _spec_expression(bound: str, ctx: RewriteContext) -> str:
    """The guard's bound over the spec's problem names: each scalar argument replaced by its value."""
    values = {a.name: a.value.source for a in ctx.original.arguments if a.role == "scalar" and a.value is not None}
    node = parse_c(bound)
    if node is None:
        raise _Decline(f"the guard's bound `{bound}` cannot be read")
    return _spec_text(node, values, bound)


def _spec_text(node, values: dict[str, str], whole: str) -> str:
    t = node.type
    text = node.text.decode("utf-8", "replace")
    if t == "number_literal":
        digits = text.rstrip("uUlL")
        if digits.isdigit():
            return digits
    elif t == "identifier":
        if text in values:
            return f"({values[text]})"
    elif t == "parenthesized_expression":
        inner = [c for c in node.named_children if c.type != "comment"]
        if len(inner) == 1:
            return f"({_spec_text(inner[0], values, whole)})"
    elif t == "cast_expression":
        return _spec_text(node.child_by_field_name("value"), values, whole)
    elif t == "binary_expression":
        op = node.child_by_field_name("operator").text.decode()
        if op in ("+", "-", "*", "/", "%"):
            left = _spec_text(node.child_by_field_name("left"), values, whole)
            right = _spec_text(node.child_by_field_name("right"), values, whole)
            return f"{left} {'//' if op == '/' else op} {right}"  # C's integer division
    raise _Decline(f"the guard's bound `{whole}` is not arithmetic over the kernel's scalar arguments")


def _same_launch(ctx: RewriteContext, old: str, new: str, defaults: dict) -> None:
    """The new grid, at the defaults, launches what the old one did at every size of the spec."""
    try:
        a, b = parse_expression(old), parse_expression(new)
    except ExpressionError as e:
        raise _Decline(f"the launch cannot be read ({e})") from None
    device = ctx.limits.expression_names()
    for problem in (*ctx.original.problems, *ctx.original.verify_problems):
        env = {**device, **problem.values, **defaults}
        try:
            if a.evaluate(env) != b.evaluate(env):
                raise _Decline(f"the grid `{old}` is not one block per {ctx.block[0]} elements of the guard's "
                               f"bound at {problem.label()}")
        except (ExpressionError, ZeroDivisionError, KeyError) as e:
            raise _Decline(f"the launch cannot be evaluated at {problem.label()} ({e})") from None

