"""The stencil rewrite: several points per thread down one axis, for a kernel in which each thread
computes the point of a two-dimensional grid its global ids name (a stencil, a convolution's pass,
any map over a grid whose neighbours it reads).

What the analysis must show (else it declines with the reason):

- two coordinates, `x = blockIdx.x * blockDim.x + threadIdx.x` and `y = ... .y` (or
  `get_global_id(0)` and `(1)`), and no other read of thread or block ids;
- a guard at the top of the body bounding `y` (`if (x >= W || y >= H) return;` or the body
  inside `if (x < W && y < H)`), so a point past the grid does nothing whichever thread reaches it;
- no barrier, shared memory or atomic.

The new kernel (beside the original under `#if ITEMS > 1`; ITEMS = 1 is the original token for
token) runs the original body, as written, as a function of the point, ITEMS times per thread for
ITEMS consecutive rows (`y = (blockIdx.y * blockDim.y + threadIdx.y) * ITEMS + r`), unrolled; a
`return` in the body ends that point only. The pointers reach it as `__restrict__` (OpenCL
`restrict`): each array argument is a buffer of its own, so the compiler may keep the rows one
point loads for the next point's neighbours in registers instead of loading them again. The grid
shrinks by ITEMS along y; everything a point computes is the original's arithmetic, so the
results are the original's bit for bit.
"""

from __future__ import annotations


from kerntune.engine.proposal import ParamProposal

from .cooperate import (Decline, Dialect, beside, fresh_names, guard_parts, header, raw_text,
                        reads_thread_ids, spec_scalars, spec_text, with_names)
from .kernel_tree import span_of, syntax_nodes
from .passes import Declined, Rewrite, RewriteContext


NAME = "stencil"


def rewrite(ctx: RewriteContext) -> Rewrite | Declined:
    """The stencil rewrite of the context's kernel, or why it does not apply."""
    try:
        return _rewrite(ctx)
    except Decline as e:
        return Declined(NAME, str(e))


def _coordinates(a) -> tuple:
    """The x and y thread indices: global ids of dimensions 0 and 1."""
    coords = {}
    for t in a.thread_indices:
        dims = {d for _, d in t.reads}
        if not t.is_global or len(dims) != 1:
            raise Decline(f"`{t.name}` is made from thread ids but is not a global index of one dimension")
        d = dims.pop()
        if d in coords:
            raise Decline(f"two coordinates of dimension {d}")
        coords[d] = t
    if set(coords) != {0, 1}:
        raise Decline("not a point of a two-dimensional grid (x and y from the global ids of dimensions 0 and 1)")
    return coords[0], coords[1]


def _function(ctx, a):
    for node, text_of in syntax_nodes(ctx.source, ("function_definition",)):
        body = node.child_by_field_name("body")
        if body is not None and span_of(ctx.source, body) == a.body:
            return node, text_of
    raise Decline("the kernel's body cannot be found in its syntax tree")


def _y_bound(body, text_of, y: str, x: str) -> str:
    """The bound of y that the guard at the top of the body sets."""
    items = [c for c in body.named_children if c.type != "comment"]
    for i, s in enumerate(items):
        if s.type == "declaration":
            continue
        if s.type != "if_statement" or s.child_by_field_name("alternative") is not None:
            break
        cond = text_of(s.child_by_field_name("condition"))
        then = s.child_by_field_name("consequence")
        named = [c for c in then.named_children if c.type != "comment"]
        returns = then.type == "return_statement" or (then.type == "compound_statement" and len(named) == 1
                                                      and named[0].type == "return_statement")
        if not returns and i != len(items) - 1:
            break
        for _, var, bound in guard_parts(f"!{cond}" if returns else cond, {x, y}):
            if var == y and bound is not None:
                return bound
        break
    raise Decline(f"no guard at the top of the body bounds `{y}` (`if ({x} >= W || {y} >= H) return;`)")


def _rewrite(ctx: RewriteContext) -> Rewrite:
    a = ctx.analysis
    if a.signature.is_template:
        raise Decline("a template kernel")
    if a.barriers or a.shared or a.atomics:
        raise Decline("its threads already cooperate (barriers, shared memory or atomics)")
    cx, cy = _coordinates(a)
    fn, text_of = _function(ctx, a)
    body = fn.child_by_field_name("body")
    rest = ctx.source[a.body.start:a.body.end]
    for t in (cx, cy):
        rest = rest.replace(ctx.source[t.span.start:t.span.end], "")
    if reads_thread_ids(rest):
        raise Decline("the body reads thread or block ids other than through its two coordinates")
    if "$" in rest:
        raise Decline("a `$` in the kernel's code")
    bound = _y_bound(body, text_of, cy.name, cx.name)
    rows = spec_text(bound, spec_scalars(ctx))
    d = Dialect.of(ctx.backend)
    names = fresh_names(("ITEMS",), ctx.taken | set(ctx.defaults))
    items = names["ITEMS"]
    # the body as a function of the point: each coordinate's initialiser becomes the point's value
    text = ctx.source[a.body.start:a.body.end]
    for t, value in sorted(((cx, "kt_x"), (cy, "kt_y")), key=lambda p: -p[0].span.start):
        decl = ctx.source[t.span.start:t.span.end]
        init = decl.rfind(t.expr)
        if init < 0:
            raise Decline(f"the declaration of `{t.name}` cannot be rewritten")
        start = t.span.start - a.body.start + init
        text = text[:start] + value + text[start + len(t.expr):]
    params, args = _parameters(fn, ctx, d)
    qualifier = "static __device__ __forceinline__ void" if d.name == "cuda" else "static inline void"
    point = f"{qualifier} kt_point({', '.join(params + ['const int kt_x', 'const int kt_y'])})\n{text}\n"
    call = ", ".join(args + ["kt_x", "kt_y0 + kt_r"])
    gx = "blockIdx.x * blockDim.x + threadIdx.x" if d.name == "cuda" else "(int)get_global_id(0)"
    gy = "blockIdx.y * blockDim.y + threadIdx.y" if d.name == "cuda" else "(int)get_global_id(1)"
    kernel = (f"{header(ctx.source, a)}\n{{\n    const int kt_x = {gx};\n    const int kt_y0 = ({gy}) * $ITEMS;\n"
              f"#pragma unroll\n    for (int kt_r = 0; kt_r < $ITEMS; ++kt_r) kt_point({call});\n}}")
    kernel = with_names(kernel, names)
    param = ParamProposal(items, (1, 2, 4, 8, 16), 1, "points per thread down the y axis, consecutive rows "
                                                      "(1: the original kernel)", "work")
    block_y = ctx.block[1] if len(ctx.block) > 1 else "1"
    grid = list(ctx.grid)
    grid[1] = f"ceil_div({rows}, ({block_y}) * {items}) if {items} > 1 else ({grid[1]})"
    source = beside(ctx.source, a, f"{items} > 1", [param], point, kernel, NAME)
    first = {items: (1, 4, 8)}
    return Rewrite(NAME, source, (param,), f"stencil: ITEMS points per thread down the y axis, pointers "
                   f"restricted so neighbouring rows stay in registers", (), tuple(grid), None, first=first,
                   helps="memory")


def _parameters(fn, ctx, d: Dialect) -> tuple[list[str], list[str]]:
    """The kernel's parameters as the point function declares them (pointers restricted) and
    the names that pass them on."""
    decl = fn.child_by_field_name("declarator")
    while decl is not None and decl.type != "function_declarator":
        decl = decl.child_by_field_name("declarator")
    if decl is None:
        raise Decline("the kernel's parameters cannot be read")
    out, names = [], []
    restrict = "__restrict__" if d.name == "cuda" else "restrict"
    after = None  # where the text before a parameter starts: the words the tree blanks (__global) included
    for p in decl.child_by_field_name("parameters").children:
        if p.type != "parameter_declaration":
            after = span_of(ctx.source, p).end if p.type in ("(", ",") else after
            continue
        end = span_of(ctx.source, p).end
        text = " ".join((ctx.source[after:end] if after is not None else raw_text(ctx.source, p)).split())
        node = p.child_by_field_name("declarator")
        while node is not None and node.type != "identifier":
            node = node.child_by_field_name("declarator")
        if node is None:
            raise Decline(f"the parameter `{text}` has no name")
        arg = next((x for x in ctx.analysis.signature.args if x.name == node.text.decode()), None)
        if arg is not None and arg.pointer and not arg.local and "restrict" not in text:
            star = text.rfind("*")
            text = text[:star + 1] + f" {restrict} " + text[star + 1:].lstrip()
        out.append(text)
        names.append(node.text.decode())
    return out, names
