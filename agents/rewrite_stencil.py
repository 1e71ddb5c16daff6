"""The stencil rewrite, for a kernel in which each thread computes the point of a one-, two- or
three-dimensional grid its global ids name (a stencil, a convolution's pass, any map over a grid
whose neighbours it reads): a halo tile in shared memory, and several points per thread along
one axis.

What the analysis (on agents/model.py's KernelModel) must show, else it declines with the reason:

- the coordinates `x = blockIdx.x * blockDim.x + threadIdx.x` (and `y = ... .y`, `z = ... .z`), or
  `get_global_id(0)` (and `(1)`, `(2)`), and no other read of thread or block ids;
- a guard at the top of the body bounding the axis the points walk (`if (x >= W || y >= H)
  return;` or the body inside `if (x < W && y < H)`), so a point past the grid does nothing;
- no barrier, shared memory or atomic already;
- for the tile: an input the kernel never writes, read at `x * sx + y * sy + base` moved by whole
  numbers along x and y (`in[(y - 1) * W + x]`, `in[y * W + xx]` with `xx = x + k` for a loop
  `k = -R..R` whose bounds are numbers or #defines), strides and base over scalar arguments and
  #defines, and its size in the spec's shape over scalar arguments. A one-dimensional grid must
  read such neighbours (else it is no stencil).

The new kernel (beside the original under `#if`; ITEMS = 1 and TILE = 0 are the original token for
token) runs the original body, as written, as a function of the point, ITEMS times per thread:
ITEMS consecutive rows in two dimensions (`y = (blockIdx.y * blockDim.y + threadIdx.y) * ITEMS +
r`, pointers restricted so the rows one point loads stay in registers for the next), ITEMS
consecutive planes along z in three (no tile there), ITEMS blocks' worth of columns in one (`x = (blockIdx.x * ITEMS + r) * blockDim.x + threadIdx.x`). With TILE = 1
the block first loads every element of each tiled input its points can read (the block's points
and the halo the reads' offsets reach) into shared memory, each element whose flat index lies in
the array, then meets at a barrier; a tiled read then takes the tile's copy of the very element
the original reads. Every value a point computes is the original's arithmetic on the original's
values, so the results are the original's bit for bit; a read the analysis cannot place stays a
read of global memory.
"""

from __future__ import annotations

import math

from dataclasses import dataclass, replace

from kerntune.engine.proposal import ParamProposal

from . import affine
from .cooperate import (Decline, Dialect, beside, expression_names, fresh_names, header, inlined,
                        kernel_parameters, kernel_spans, lone_model, reads_thread_ids, spec_scalars, spec_text,
                        substituted, template_parameters, top_guard, with_names)
from .kernel_tree import span_of, syntax_nodes
from .model import DIALECT, ELEMENT_BYTES, KernelModel, Poly, declarator_name
from .model import nodes as model_nodes
from .passes import Declined, Pass, Rewrite, RewriteContext
from .syntax import cut


NAME = "stencil"
MAX_HALO = 16  # elements a tile reaches past the block's points on one side
MAX_TILES = 4  # inputs staged in shared memory
MAX_PLANES = 4  # planes a 3-D march keeps in registers on each side of the point


class StencilPass(Pass):
    """The stencil rewrite as a pass: what it requires (a thread per point of a 1-D or 2-D grid,
    threads that do not cooperate, neighbours read at fixed offsets) is read as it is rewritten,
    and declined there with the reason."""

    name = NAME

    def apply(self, ctx: RewriteContext) -> Rewrite | Declined:
        try:
            return _rewrite(ctx)
        except Decline as e:
            return Declined(NAME, str(e))


# the pass, called as a function of a RewriteContext (agents/rewrites.py registers it)
rewrite = StencilPass()


@dataclass(frozen=True)
class TiledRead:
    """A read the tile serves: its span (bytes of the source) and its offset from the point."""

    span: tuple[int, int]
    dx: str  # over the loops' variables
    dy: str
    dz: str = "0"  # a read of the thread's own column along z (3-D): the plane it reaches


@dataclass(frozen=True)
class Placed:
    """A read at the point's neighbour: the index's strides along x, y and z, its offsets along
    each (whole numbers, and the loops' variables with their ranges), and the rest of it."""

    strides: tuple  # (gx, gy, gz): Polys, None for an axis the grid lacks
    offsets: tuple  # per axis: (whole number, [(coefficient, loop variable, its range)])
    base: Poly

    def text(self, axis: int) -> str:
        const, terms = self.offsets[axis]
        return _offset([(c, v) for c, v, _ in terms], const)

    def extent(self, axis: int) -> tuple[int, int]:
        const, terms = self.offsets[axis]
        return _extent([(c, r) for c, _, r in terms], const)

    def fixed(self, axis: int) -> int | None:
        """Its offset along the axis where no loop's variable moves it."""
        const, terms = self.offsets[axis]
        return None if terms else const


@dataclass(frozen=True)
class Tile:
    """An input staged in shared memory: element (gx, gy) of the tile is array[gx * sx + gy * sy + base]."""

    array: str
    ctype: str
    sx: str
    sy: str
    base: str
    count: str  # the array's elements, over the kernel's scalars
    reads: tuple[TiledRead, ...]
    # a 3-D grid's march along z: the plane's stride, the reads of the thread's own column (the
    # registers hold it), and that column's offset from the point in the plane
    sz: str = "0"
    column_reads: tuple[TiledRead, ...] = ()
    column: tuple[int, int] = (0, 0)


@dataclass(frozen=True)
class ZLoop:
    """A thread's loop over the planes of its column (`for (int k = 1; k < nz - 1; k++)`): its
    variable, its first plane and its condition over the march's plane kt_z (kernel text over
    scalar arguments and #defines), and the spans (bytes) the point function rewrites so that the
    loop runs its body once, at the plane kt_z, where the original's loop reaches it."""

    var: str
    start: str
    condition: str  # over kt_z
    start_span: tuple[int, int]
    condition_span: tuple[int, int]
    condition_text: str  # as written


@dataclass(frozen=True)
class Halo:
    x0: int = 0
    x1: int = 0
    y0: int = 0
    y1: int = 0
    z0: int = 0  # planes below and above the point a 3-D march keeps in registers
    z1: int = 0

    def cover(self, other: "Halo") -> "Halo":
        return Halo(*(max(a, b) for a, b in zip(self.extents, other.extents)))

    @property
    def extents(self) -> tuple[int, ...]:
        return (self.x0, self.x1, self.y0, self.y1, self.z0, self.z1)

    @property
    def any(self) -> bool:
        return any(self.extents)

    @staticmethod
    def around(ex: tuple[int, int], ey: tuple[int, int] = (0, 0), ez: tuple[int, int] = (0, 0)) -> "Halo":
        """The halo offsets from ex[0] to ex[1] along x (and so on) reach."""
        return Halo(max(0, -ex[0]), max(0, ex[1]), max(0, -ey[0]), max(0, ey[1]), max(0, -ez[0]), max(0, ez[1]))


def block_size(ctx: RewriteContext) -> dict[str, Poly]:
    """What a block's size along x and y is, as the kernel's indices read it: `blockDim`, or the
    launch's literal or parameter where the kernel writes that instead (`blockIdx.x * 16`, the
    lifted `blockIdx.x * BLOCK`)."""
    out = {}
    for d, dim in enumerate("xyz"):
        b = ctx.block[d].strip() if d < len(ctx.block) else "1"
        own = (Poly.of(int(b)),) if b.isdigit() else (Poly.of(b),) if b.isidentifier() else ()
        out[dim] = (Poly.of(f"blockDim.{dim}"),) + own
    return out


def _coordinates(model: KernelModel, blocks: dict[str, tuple]) -> tuple:
    """The x thread index (dimension 0), the y one (dimension 1, None on a one-dimensional grid)
    and the z one (dimension 2, None but on a three-dimensional grid), each with the whole number
    it adds to the global id (`... + threadIdx.x + 1`)."""
    coords = {}
    for t in model.thread_indices:
        got = _global(t.form, blocks)
        if got is None:
            raise Decline(f"`{t.name}` is made from thread ids but is not a global index of one dimension")
        d, offset = got
        if d in coords:
            raise Decline(f"two coordinates of dimension {d}")
        coords[d] = (t, offset)
    if set(coords) not in ({0, 1, 2}, {0, 1}, {0}):
        raise Decline("not a point of a grid of one, two or three dimensions (x, y and z from the global ids of "
                      "dimensions 0, 1 and 2)")
    return coords[0], coords.get(1), coords.get(2)


def _global(form, blocks: dict[str, tuple]) -> tuple[int, int] | None:
    """(dimension, offset) of `blockIdx * blockDim + threadIdx + offset`, the offset a whole number >= 0."""
    if form is None or len(form.coeffs) != 2 or form.const.number is None or form.const.number < 0:
        return None
    for d, dim in enumerate("xyz"):
        if form.coeff(f"threadIdx.{dim}") == Poly.of(1) and form.coeff(f"blockIdx.{dim}") in blocks[dim]:
            return d, form.const.number
    return None


def _function(ctx, a):
    for node, text_of in syntax_nodes(ctx.source, ("function_definition",)):
        body = node.child_by_field_name("body")
        if body is not None and span_of(ctx.source, body) == a.body:
            return node, text_of
    raise Decline("the kernel's body cannot be found in its syntax tree")


def _bound(body, text_of, var: str, coords: set[str]) -> str:
    """The bound of `var` that the guard at the top of the body sets."""
    items = [c for c in body.named_children if c.type != "comment"]
    example = " || ".join(f"{c} >= {'W' if i == 0 else 'H'}" for i, c in enumerate(sorted(coords)))
    found = top_guard(items, coords)
    for _, v, bound in found[1] if found is not None else ():
        if v == var and bound is not None:
            return bound
    raise Decline(f"no guard at the top of the body bounds `{var}` (`if ({example}) return;`)")


# the tile -----------------------------------------------------------------------------------------------

def _c_text(p: Poly, names: set[str]) -> str | None:
    """A polynomial as C over the kernel's names (long arithmetic); None when it reads another name."""
    if not p.names() <= names:
        return None
    if p.is_zero:
        return "0"
    parts = []
    for m, c in p.terms:
        factors = ([f"(long){c}"] if c != 1 or not m else []) + [f"(long){n}" for n in m]
        parts.append(" * ".join(factors))
    return "(" + " + ".join(parts) + ")"


def _lead(p: Poly):
    """The monomial of a polynomial that is no number, and its coefficient (highest degree first)."""
    best = None
    for m, c in p.terms:
        if m and (best is None or len(m) > len(best[0])):
            best = (m, c)
    return best


def _split(k: Poly, sx: Poly, sy: Poly | None) -> tuple[int, int, Poly] | None:
    """k = a * sx + b * sy + rest with whole a and b, `rest` holding neither stride; None when the
    strides are not a contiguous axis (stride 1) and another."""
    one = Poly.of(1)
    if sy is None:
        if sx != one:
            return None
        a = k.number if k.number is not None else dict(k.terms).get((), 0)
        return a, 0, k - Poly.of(a)
    if sx == one or sy == one:
        unit, other = (sx, sy) if sx == one else (sy, sx)
        v = _whole(k, other)
        if v is None:
            return None
        rem = k - other * Poly.of(v)
        u = dict(rem.terms).get((), 0)
        rest = rem - Poly.of(u)
        return (u, v, rest) if sx == one else (v, u, rest)
    return None


def _range(model: KernelModel, lp) -> tuple[int, int] | None:
    """The values a loop's variable takes: numbers (or #defines) between its start and bound."""
    if lp.kind != "for" or not lp.var or lp.start_form is None or lp.bound_form is None:
        return None
    if lp.start_form.coeffs or lp.bound_form.coeffs:
        return None
    s, b = (f.const.evaluate(model.defines) for f in (lp.start_form, lp.bound_form))
    if s is None or b is None:
        return None
    if lp.compare in ("<", "<="):
        hi = b if lp.compare == "<=" else b - 1
        return (s, hi) if lp.update in ("++", "+=") and s <= hi else None
    if lp.compare in (">", ">="):
        lo = b if lp.compare == ">=" else b + 1
        return (lo, s) if lp.update in ("--", "-=") and lo <= s else None
    return None


def _offset(terms: list[tuple[int, str]], const: int) -> str:
    out = str(const)
    for c, var in terms:
        out += f" + ({c}) * {var}" if c != 1 else f" + {var}"
    return out


def _extent(terms: list[tuple[int, tuple[int, int]]], const: int) -> tuple[int, int]:
    lo = hi = const
    for c, (a, b) in terms:
        lo += min(c * a, c * b)
        hi += max(c * a, c * b)
    return lo, hi


def _assigned_in(model: KernelModel, var: str, span) -> bool:
    """Whether the loop's variable is assigned in its body (the header's update aside)."""
    raw = model.source.encode("utf-8")[span.start:span.end].decode("utf-8", "replace")
    for node, text_of in syntax_nodes("void kt_f() {" + raw + "}", ("assignment_expression", "update_expression")):
        target = node.child_by_field_name("left") or node.child_by_field_name("argument")
        if target is not None and text_of(target).strip("() ") == var:
            return True
    return False


def _count(ctx, arg: str, scalars: dict[str, str], defines) -> str | None:
    """The array's elements as C over the kernel's scalar arguments, from the spec's shape (a size
    the source #defines under the problem's name is read as the macro: the kernel indexes by it)."""
    spec = next((x for x in ctx.original.arguments if x.name == arg), None)
    if spec is None or not spec.shape:
        return None
    by_problem = {name: name for name in defines}
    by_problem.update({v.strip(): k for k, v in scalars.items() if v.strip().isidentifier()})
    factors = []
    for dim in spec.shape:
        try:
            p = affine.read(dim.source)
        except affine.NotAffine:
            return None
        parts = []
        for monomial, coeff in p.terms:
            if any(n not in by_problem for n in monomial):
                return None
            parts.append(" * ".join(([f"(long){coeff}"] if coeff != 1 or not monomial else [])
                                    + [f"(long){by_problem[n]}" for n in monomial]))
        factors.append("(" + (" + ".join(parts) or "0") + ")")
    return " * ".join(factors)


def tiles(ctx: RewriteContext, model: KernelModel, two_d: bool, blocks: dict[str, tuple], three_d: bool = False,
          plane: int = 0, zvar: str | None = None) -> tuple[list[Tile], Halo, str]:
    """The inputs worth staging in shared memory, the halo around the block's points they need,
    and why none is when none is. On a 3-D grid the tile is the point's plane's (`plane` past the
    z global id: `k = get_global_id(2) + 1`), and the reads of the thread's own column at any plane
    (`in[idx ± nx * ny]`) are the registers' of its march."""
    scalars_c = {a.name for a in model.signature.args if not a.pointer} | set(model.defines)
    scalars = spec_scalars(ctx)
    written = {x.array for x in model.accesses if x.write} | {c.array for c in model.atomics}
    args = {a.name: a for a in model.signature.args}
    hints = DIALECT[model.dialect].loads
    marching = three_d or zvar is not None  # a plane's tile and the column's planes in registers
    out, halo, why = [], Halo(), "no input is read at its neighbours' points (`in[(y - 1) * W + x]`)"
    for array in dict.fromkeys(x.array for x in model.accesses if x.space == "global" and x.read):
        arg = args.get(array)
        if arg is None or not arg.pointer or arg.local or array in written:
            continue
        if arg.ctype not in ELEMENT_BYTES or (ctx.backend == "opencl" and arg.ctype in ("half", "__half")):
            continue
        placed, layout = [], None
        for x in model.accesses_of(array):
            form = x.expr.affine if x.expr is not None else None
            if form is None or (x.call and x.call not in hints) or x.function != model.name or x.write:
                continue
            got = _read(model, x, form, two_d, blocks, three_d, zvar)
            if isinstance(got, str):
                if got:
                    why = f"`{array}[{' '.join(x.index.split())}]` {got}"
                continue
            if layout is None:
                layout = (got.strides, got.base)
            elif layout != (got.strides, got.base):
                continue  # another layout or base: this read stays a read of global memory
            placed.append(((x.span.start, x.span.end), got))
        column = _column([p for _, p in placed], plane) if marching else (0, 0)
        reads, column_reads, h = [], [], Halo()
        for span, got in placed:
            if marching and (got.fixed(0), got.fixed(1)) == column:
                column_reads.append(TiledRead(span, got.text(0), got.text(1), got.text(2)))
                h = h.cover(Halo.around((column[0],) * 2, (column[1],) * 2, got.extent(2)))
            elif got.fixed(2) == (plane if marching else 0):
                reads.append(TiledRead(span, got.text(0), got.text(1)))
                h = h.cover(Halo.around(got.extent(0), got.extent(1)))
            # else: a read off the column at another plane stays a read of global memory
        if not (reads or column_reads) or not h.any:
            continue
        # a 3-D grid's points may lie past the global ids (`k = get_global_id(2) + 1`): neighbours
        # are reads at more than one place around the point
        if marching and len({tuple(got.extent(axis) for axis in range(3)) for _, got in placed}) < 2 \
                and all(lo == hi for _, got in placed for lo, hi in (got.extent(axis) for axis in range(3))):
            continue
        if marching:  # the column's point of the tile's plane: the thread's own, written from its registers
            h = h.cover(Halo.around((column[0],) * 2, (column[1],) * 2, (plane, plane)))
        if max(h.x0, h.x1, h.y0, h.y1) > MAX_HALO:
            why = f"`{array}` is read more than {MAX_HALO} points away"
            continue
        if max(h.z0, h.z1) > MAX_PLANES:
            why = f"`{array}` is read more than {MAX_PLANES} planes away"
            continue
        (gx, gy, gz), base = layout
        texts = [_c_text(p, scalars_c) for p in (gx, gy if gy is not None else Poly(), base,
                                                 gz if gz is not None else Poly())]
        count = _count(ctx, array, scalars, model.defines)
        if any(t is None for t in texts) or count is None:
            why = (f"the size or layout of `{array}` is not known to the kernel (its shape over the scalar "
                   f"arguments, strides over scalars and #defines)")
            continue
        out.append(Tile(array, arg.ctype, texts[0], texts[1], texts[2], count, tuple(reads), texts[3],
                        tuple(column_reads), column))
        halo = halo.cover(h)
        if len(out) == MAX_TILES:
            break
    return out, halo, why


def _column(placed: list[Placed], plane: int) -> tuple[int, int]:
    """The offset in the plane of the column a 3-D march keeps in registers: where most reads at
    other planes lie (`in[idx - nx * ny]`: the point's own), else where most reads of the point's
    plane at a fixed place do (the point itself, as a rule)."""
    at = [(p.fixed(0), p.fixed(1), p.extent(2) != (plane, plane)) for p in placed]
    for off_plane in (True, False):
        got = [(x, y) for x, y, z in at if x is not None and y is not None and z == off_plane]
        if got:
            return max(dict.fromkeys(got), key=got.count)
    return (0, 0)


def _whole(k: Poly, stride: Poly) -> int | None:
    """How many whole strides k holds: by the stride's leading term, or the nearest whole number
    where the stride is a number (> 1); None where the leading term does not divide."""
    if stride.number is not None:
        n = stride.number
        return (dict(k.terms).get((), 0) + n // 2) // n if n > 1 else None
    lead = _lead(stride)
    got = dict(k.terms).get(lead[0], 0)
    return None if got % lead[1] else got // lead[1]


def _split3(k: Poly, sx: Poly, sy: Poly | None, sz: Poly | None) -> tuple[int, int, int, Poly] | None:
    """k = a * sx + b * sy + c * sz + rest, the plane's stride (sz) taken out first (by its
    leading term, or the nearest whole number of planes where it is a number), then _split."""
    c = 0
    if sz is not None:
        c = _whole(k, sz)
        if c is None:
            return None
        k = k - sz * Poly.of(c)
    parts = _split(k, sx, sy)
    return None if parts is None else (parts[0], parts[1], c, parts[2])


def _read(model: KernelModel, x, form, two_d: bool, blocks: dict[str, tuple], three_d: bool = False,
          zvar: str | None = None):
    """Where a read lies from the point (a Placed); else why not ("" for a read that does not move
    with the point at all, a coefficient or a table). With `zvar` the point's z is that loop's
    variable (a thread per column looping over z): a read that does not move with it is none."""
    axes = "xyz"[:3 if three_d else 2 if two_d else 1]
    g = [form.coeff(f"threadIdx.{a}") for a in axes]
    if all(c.is_zero for c in g) or (zvar is not None and form.coeff(zvar).is_zero):
        return ""
    for a, c in zip(axes, g):
        if c.is_zero or form.coeff(f"blockIdx.{a}") not in [c * b for b in blocks[a]]:
            return f"does not move with {a} as the point does"
    strides = tuple(g) + ((form.coeff(zvar),) if zvar is not None else ()) + (None,) * (3 - len(g))
    strides = strides[:3]
    three_d = three_d or zvar is not None
    loops = {lp.var: lp for lp in model.nest(x.loop) if lp.var}
    allowed = {f"{w}.{a}" for a in axes for w in ("threadIdx", "blockIdx")} | ({zvar} if zvar else set())
    terms: tuple[list, list, list] = ([], [], [])
    for sym, coeff in form.coeffs:
        if sym in allowed:
            continue
        lp = loops.get(sym)
        if lp is None or not lp.in_kernel:
            return f"moves with `{sym}`, no loop of the kernel's own"
        if _assigned_in(model, sym, lp.body):
            return f"moves with `{sym}`, which the loop's body assigns"
        rng = _range(model, lp)
        if rng is None:
            return f"moves with `{sym}`, whose loop's bounds are not numbers or #defines"
        parts = _split3(coeff, *strides)
        if parts is None or not parts[3].is_zero:
            return f"moves with `{sym}` other than by whole points along {'x, y and z' if three_d else 'x and y'}"
        for axis in range(3):
            if parts[axis]:
                terms[axis].append((parts[axis], sym, rng))
    parts = _split3(form.const, *strides)
    if parts is None:
        return "has no stride of one along x or y"
    return Placed(strides, tuple((parts[i], terms[i]) for i in range(3)), parts[3])


# the rewrite --------------------------------------------------------------------------------------------------

def _bound_names(ctx: RewriteContext) -> dict[str, str]:
    """What a guard's bound may read, over the spec's names: the scalar arguments' values, a
    parameter made before this rewrite (its own name), a whole-number #define of the file (its
    value: `k < nz - RADIUS`)."""
    out = {name: str(value) for name, value in ctx.model.defines.items()}
    out.update({name: name for name in ctx.defaults if name in out})
    out.update(spec_scalars(ctx))
    return out


def _z_loop(ctx: RewriteContext, model: KernelModel, fn, text_of) -> ZLoop | None:
    """The one loop of a 2-D grid's body over its column's planes, where the body is the loop's
    (every access inside it), its steps one plane up, its bounds the same for every thread, and
    nothing it assigns carried from one plane to the next; None otherwise."""
    top = [lp for lp in model.loops if lp.in_kernel and lp.depth == 0]
    if len(top) != 1:
        return None
    lp = top[0]
    if lp.kind != "for" or not lp.var or lp.compare not in ("<", "<=") or not (
            lp.update == "++" or (lp.update == "+=" and lp.step.strip() == "1")):
        return None
    if any(not (lp.span.start <= x.span.start and x.span.end <= lp.span.end)
           for x in model.accesses if x.function == model.name):
        return None
    node, text_of = next(((n, t) for n, t in syntax_nodes(ctx.source, ("for_statement",))
                          if span_of(ctx.source, n) == lp.span), (None, text_of))
    if node is None:
        return None
    init, cond, body = (node.child_by_field_name(f) for f in ("initializer", "condition", "body"))
    if init is not None and init.type == "declaration":
        d = init.child_by_field_name("declarator")
        value = d.child_by_field_name("value") if d is not None and d.type == "init_declarator" else None
    elif init is not None and init.type == "assignment_expression":
        value = init.child_by_field_name("right")
    else:
        value = None
    if value is None or cond is None or body is None:
        return None
    # what the march may read: the kernel's scalar arguments and the file's #defines
    known = {a.name for a in model.signature.args if not a.pointer} | set(model.defines) | {lp.var}
    start, test = text_of(value), text_of(cond)
    if not (expression_names(start) | expression_names(test)) <= known or lp.var in expression_names(start):
        return None
    # a `break`, `return` or `goto` ends the column's later planes too: the march would still run them
    if any(n.type in ("break_statement", "return_statement", "goto_statement") for n in model_nodes(body)):
        return None
    # a value the loop assigns that lives across its planes (declared outside it) is carried
    declared = {lp.var} | {declarator_name(n.child_by_field_name("declarator"))[0] for n in model_nodes(body)
                           if n.type in ("declaration", "init_declarator") and n.child_by_field_name("declarator")}
    for n in model_nodes(body):
        target = n.child_by_field_name("left") if n.type == "assignment_expression" else \
            n.child_by_field_name("argument") if n.type == "update_expression" else None
        if target is not None and target.type == "identifier" and text_of(target) not in declared:
            return None
        if target is not None and target.type == "identifier" and text_of(target) == lp.var:
            return None
    condition = substituted(cond, text_of, {lp.var: "kt_z"})
    sv, sc = span_of(ctx.source, value), span_of(ctx.source, cond)
    return ZLoop(lp.var, start, condition, (sv.start, sv.end), (sc.start, sc.end), test)


def _compile_time(text: str, ctx: RewriteContext) -> bool:
    t = text.strip()
    return t.isdigit() or t in ctx.defaults


def _rewrite(ctx: RewriteContext) -> Rewrite:
    model = lone_model(ctx)
    a = kernel_spans(ctx.source, model)
    blocks = block_size(ctx)
    (cx, ox), y, z = _coordinates(model, blocks)
    cy, oy = y if y is not None else (None, 0)
    cz, oz = z if z is not None else (None, 0)
    two_d, three_d = cy is not None, cz is not None
    fn, text_of = _function(ctx, a)
    body = fn.child_by_field_name("body")
    rest = cut(ctx.source, a.body.start, a.body.end)
    for t in (cx, cy, cz):
        if t is not None:
            rest = rest.replace(cut(ctx.source, t.span.start, t.span.end), "")
    if reads_thread_ids(rest):
        raise Decline(f"the body reads thread or block ids other than through its coordinate{'s' if two_d else ''}")
    if "$" in rest:
        raise Decline("a `$` in the kernel's code")
    coords = {cx.name} | ({cy.name} if two_d else set()) | ({cz.name} if three_d else set())
    walk = cz if three_d else cy if two_d else cx  # the axis the points of one thread walk
    # the points a thread walks past the guard's bound do nothing: the grid may cover the bound
    # itself (a coordinate's offset only shrinks what it must cover)
    # a bound held in a local (`int N = B * T * C; if (idx < N)`) is read through it
    extent = spec_text(inlined(model, _bound(body, text_of, walk.name, coords), {}), _bound_names(ctx))
    block = list(ctx.block) + ["1"] * (3 - len(ctx.block))
    found, halo, no_tile = tiles(ctx, model, two_d, blocks, three_d, oz)
    # a thread per column looping over z (`for (k = 1; k < nz - 1; k++)`): its planes marched the same way
    zloop = _z_loop(ctx, model, fn, text_of) if two_d and not three_d and not found else None
    if zloop is not None:
        found, halo, no_tile = tiles(ctx, model, two_d, blocks, False, 0, zloop.var)
        if not found:
            zloop = None
    marching = three_d or zloop is not None
    if not all(_compile_time(b, ctx) for b in block[:3 if three_d else 2]):
        found, no_tile = [], "the block's size is not a parameter or a number"
    if not two_d and not found:
        raise Decline(f"a one-dimensional grid whose points read no neighbours: {no_tile}")
    d = Dialect.of(ctx.backend)
    across = _across(body, text_of, cx.name, coords, ctx) if two_d else None
    names = fresh_names(("ITEMS", "TILE") + (("RX",) if across is not None else ()), ctx.taken | set(ctx.defaults))
    items, tile, rx = names["ITEMS"], names["TILE"], names.get("RX")
    # the body as a function of the point: each coordinate's initialiser becomes the point's value
    points = [(cx, "kt_x" + (f" + {ox}" if ox else ""))] + ([(cy, "kt_y" + (f" + {oy}" if oy else ""))] if two_d else []) \
        + ([(cz, "kt_z" + (f" + {oz}" if oz else ""))] if three_d else [])
    plain, tiled = _bodies(ctx, a, points, found, two_d, halo, zloop)
    params, args = _parameters(fn, ctx, d, model)
    qualifier = "static __device__ __forceinline__ void" if d.name == "cuda" else "static inline void"
    point = params + ["const int kt_x"] + (["const int kt_y"] if two_d else []) + (["const int kt_z"] if three_d else [])
    local = "" if d.name == "cuda" else "__local "
    restrict = "__restrict__" if d.name == "cuda" else "restrict"
    # a template kernel's tiles in the template's own words (`real`), which every instantiation makes
    tile_bytes = sum(ELEMENT_BYTES[t.ctype] for t in found)  # at the entry's instantiation
    words = {arg.name: arg.ctype for arg in model.signature.generic_args}
    found = [replace(t, ctype=words.get(t.array, t.ctype)) for t in found]
    tile_params = [f"{local}const {t.ctype} *{restrict} kt_s{i}" for i, t in enumerate(found)]
    tile_params += [f"const {t.ctype} *kt_c{i}" for i, t in enumerate(found) if marching]  # the column's planes
    if zloop is not None:
        tile_params = ["const int kt_z"] + tile_params
    tile_params += ["const int kt_ox"] + (["const int kt_oy"] if two_d else [])
    helpers = f"{qualifier} kt_point({', '.join(point)})\n{plain}\n"
    if found:
        helpers = (f"#if $TILE > 0\n{_tile_macros(halo, block, two_d, rx is not None, marching)}"
                   f"{qualifier} kt_point({', '.join(point + tile_params)})\n{tiled}\n#else\n{helpers}#endif\n")
    kernel = with_names(_kernel(ctx, a, d, args, found, halo, block, two_d, rx is not None, three_d, oz, zloop),
                        names)
    helpers = with_names(helpers, names)
    tparams = template_parameters(ctx.source, model)
    if tparams:
        # a template kernel: the point's function is the same template, called at the kernel's arguments
        helpers = helpers.replace(f"{qualifier} kt_point(", f"template {tparams}\n{qualifier} kt_point(")
        kernel = kernel.replace("kt_point(", f"kt_point<{', '.join(model.signature.template_params)}>(")
    walks = "z, consecutive planes" if three_d else "y, consecutive rows" if two_d else "x, a block apart"
    # a 3-D tile's march amortises the planes it loads ahead of its first point over a longer run
    marches = (1, 2, 4, 8, 16, 32, 64) if three_d and found else (1, 2, 4, 8, 16)
    params_out = [ParamProposal(items, marches, 1, f"points per thread along {walks} (1: the original "
                                "kernel)", "work")]
    switch = f"{items} > 1"
    if rx is not None:
        params_out.append(ParamProposal(rx, (1, 2, 4, 8), 1, "points per thread along x, a block's width apart "
                                        "(1: the original kernel)", "work"))
        switch += f" || {rx} > 1"
    if found:
        params_out.append(ParamProposal(tile, (0, 1), 0, "1: the block's inputs and their halo staged in shared "
                                        "memory first" + (", a plane at a time, the thread's column along z in "
                                                          "registers" if marching else ""), "tile"))
        switch += f" || {tile} > 0"
    grid = list(ctx.grid)
    if three_d:
        grid[2] = f"ceil_div({extent}, ({block[2]}) * {items}) if {items} > 1 else ({grid[2]})"
        if rx is not None:
            grid[0] = f"ceil_div({across}, ({block[0]}) * {rx}) if {rx} > 1 else ({grid[0]})"
    elif two_d:
        grid[1] = f"ceil_div({extent}, ({block[1]}) * {items}) if {items} > 1 else ({grid[1]})"
        if rx is not None:
            grid[0] = f"ceil_div({across}, ({block[0]}) * {rx}) if {rx} > 1 else ({grid[0]})"
    else:
        grid[0] = f"ceil_div({extent}, ({block[0]}) * {items}) if {items} > 1 else ({grid[0]})"
    source = beside(ctx.source, a, switch, params_out, helpers, kernel, NAME)
    first = {items: (1, 4, 8)}
    constraints = []
    what = (f"stencil: ITEMS points per thread along {'z' if three_d else 'y' if two_d else 'x'}, pointers "
            f"restricted so neighbouring {'planes' if three_d else 'rows' if two_d else 'points'} stay in registers")
    # a march along z with the tile loops over its planes (not unrolled); without, every point is unrolled
    unrolled = f"{tile} > 0 or " if three_d and found else ""
    if rx is not None:
        first[rx] = (1, 4, 8)
        constraints.append(f"{unrolled}{rx} * {items} <= 32")
        what += "; RX points per thread along x, a block's width apart"
    elif unrolled:
        constraints.append(f"{unrolled}{items} <= 16")
    if found:
        first[tile] = (0, 1)
        if three_d:  # the march's length; the tile wants a block of one plane, its threads the plane's
            first[items] = (1, 8, 32)
            if block[2].strip() in ctx.defaults:
                first[block[2].strip()] = (1, ctx.defaults[block[2].strip()])
        # the first round spends its configurations along the axis the neighbourhood runs: points
        # along an axis with no halo share no loads (the separable convolution's other pass)
        if two_d and rx is not None and halo.x0 + halo.x1 == 0 and halo.y0 + halo.y1 > 0:
            first[rx], first[items] = (1,), (1, 4, 8, 16)
        elif two_d and rx is not None and halo.y0 + halo.y1 == 0 and halo.x0 + halo.x1 > 0:
            first[items] = (1,)
        # the lifted block's other shapes: beside the rewrite's values the first round would measure
        # the original's shape alone (the far ends of two thread counts overflow a block), so where
        # those values leave room (a separable pass's, not a 2-D neighbourhood's) it also measures
        # a warp's width across and a few rows: the rows' halo amortised over ITEMS, not over rows
        bx, by = block[0].strip(), block[1].strip() if two_d else ""
        if two_d and bx != by and bx in ctx.defaults and by in ctx.defaults \
                and math.prod(len(v) for v in first.values()) <= 12:
            first[bx], first[by] = (32,), (4,)
        elements = _tile_elements(halo, block, items, two_d, rx, marching)
        constraints.append(f"{tile} == 0 or {elements} * {tile_bytes} <= max_shared_per_block")
        if zloop is not None:  # the march takes the loop's planes; its rows are the block's own
            constraints.append(f"{tile} == 0 or {items} == 1")
        what += (f"; TILE 1 stages {', '.join(t.array for t in found)} with a halo of "
                 f"{halo.x0}/{halo.x1}{f' x {halo.y0}/{halo.y1}' if two_d else ''} in shared memory")
        if marching:
            what += (f" a plane at a time, each thread marching {'ITEMS' if three_d else 'its loop' + chr(39) + 's'} "
                     f"planes along z with its column's {halo.z0}/{halo.z1} planes below and above in registers")
    elif two_d:
        what += f" (no tile: {no_tile})"
    return Rewrite(NAME, source, tuple(params_out), what, tuple(constraints), tuple(grid), None, first=first,
                   helps="memory")


def _tile_elements(h: Halo, block: list[str], items: str, two_d: bool, rx: str | None, three_d: bool = False) -> str:
    if three_d:  # a plane's tile for each of the block's planes of threads
        width = f"({block[0]}) * {rx}" if rx is not None else f"({block[0]})"
        return f"({block[2]}) * (({block[1]}) + {h.y0 + h.y1}) * ({width} + {h.x0 + h.x1})"
    if two_d:
        width = f"({block[0]}) * {rx}" if rx is not None else f"({block[0]})"
        return f"(({block[1]}) * {items} + {h.y0 + h.y1}) * ({width} + {h.x0 + h.x1})"
    return f"(({block[0]}) * {items} + {h.x0 + h.x1})"


def _tile_macros(h: Halo, block: list[str], two_d: bool, across: bool, three_d: bool = False) -> str:
    per = " * $RX" if across else ""
    width = f"(({block[0]}){per} + {h.x0 + h.x1})" if two_d else f"(({block[0]}) * $ITEMS + {h.x0 + h.x1})"
    height = f"(({block[1]}){'' if three_d else ' * $ITEMS'} + {h.y0 + h.y1})" if two_d else "1"
    return f"#define KT_TW {width}\n#define KT_TH {height}\n"


def _bodies(ctx, a, coords, found: list[Tile], two_d: bool, halo: Halo = Halo(),
            zloop: ZLoop | None = None) -> tuple[str, str]:
    """The kernel's body as the point function runs it: reading global memory, and reading the
    tiles (and a 3-D march's registers: kt_c holds the column's planes from z - halo.z0 up)."""
    start = a.body.start
    edits = []
    for t, value in coords:
        first, last = t.span.start, t.span.end
        decl = cut(ctx.source, first, last).encode("utf-8")  # bytes, as the spans are
        init = decl.rfind(t.expr.encode("utf-8"))
        if init < 0:
            raise Decline(f"the declaration of `{t.name}` cannot be rewritten")
        edits.append((first + init, first + init + len(t.expr.encode("utf-8")), value))
    tile_edits = list(edits)
    for i, t in enumerate(found):
        for r in t.reads:
            where = f"(kt_y + ({r.dy}) - kt_oy) * KT_TW + " if two_d else ""
            tile_edits.append((r.span[0], r.span[1], f"kt_s{i}[{where}(kt_x + ({r.dx}) - kt_ox)]"))
        for r in t.column_reads:
            tile_edits.append((r.span[0], r.span[1], f"kt_c{i}[({r.dz}) + {halo.z0}]"))
    if zloop is not None and found:  # the column's loop runs once, at the march's plane, where it reaches it
        tile_edits.append((*zloop.start_span, "kt_z"))
        tile_edits.append((*zloop.condition_span, f"({zloop.condition_text}) && {zloop.var} == kt_z"))

    def apply(changes) -> str:
        text = cut(ctx.source, start, a.body.end).encode("utf-8")
        for s, e, new in sorted(changes, key=lambda c: -c[0]):
            text = text[:s - start] + new.encode("utf-8") + text[e - start:]
        return text.decode("utf-8")
    spans = sorted((s, e) for s, e, _ in tile_edits)
    if any(e1 > s2 for (_, e1), (s2, _) in zip(spans, spans[1:])):
        raise Decline("a read the tile would serve overlaps a coordinate's declaration")
    return apply(edits), apply(tile_edits)


def _kernel(ctx, a, d: Dialect, args: list[str], found: list[Tile], halo: Halo, block: list[str],
            two_d: bool, across: bool, three_d: bool = False, plane: int = 0, zloop: ZLoop | None = None) -> str:
    cuda = d.name == "cuda"
    gid = tuple(d.group_id) if cuda else tuple(f"(int)get_group_id({i})" for i in range(3))
    lid = ("threadIdx.x", "threadIdx.y", "threadIdx.z") if cuda else tuple(f"(int)get_local_id({i})" for i in range(3))
    dim = ("blockDim.x", "blockDim.y", "blockDim.z") if cuda else tuple(f"(int)get_local_size({i})" for i in range(3))
    call = ", ".join(args + ["kt_x"] + (["kt_y", "kt_z0 + kt_r"] if three_d else ["kt_y0 + kt_r"] if two_d else []))
    if three_d:  # ITEMS consecutive planes along z at the thread's (x, y)
        plain = (f"    const int kt_y = {gid[1]} * {dim[1]} + {lid[1]};\n"
                 f"    const int kt_z0 = ({gid[2]} * {dim[2]} + {lid[2]}) * $ITEMS;\n"
                 + _across_loop(f"{gid[0]} * {dim[0]} + {lid[0]}", f"({gid[0]} * $RX + kt_q) * {dim[0]} + {lid[0]}",
                                call, across))
        if not found:
            return f"{header(ctx.source, a)}\n{{\n{plain}}}"
        return (f"{header(ctx.source, a)}\n{{\n#if $TILE > 0\n{_march(d, args, found, halo, block, across, plane)}"
                f"#else\n{plain}#endif\n}}")
    if two_d:
        plain = (f"    const int kt_y0 = ({gid[1]} * {dim[1]} + {lid[1]}) * $ITEMS;\n"
                 + _across_loop(f"{gid[0]} * {dim[0]} + {lid[0]}", f"({gid[0]} * $RX + kt_q) * {dim[0]} + {lid[0]}",
                                call, across))
    else:
        plain = (f"#pragma unroll\n    for (int kt_r = 0; kt_r < $ITEMS; ++kt_r) {{\n"
                 f"        const int kt_x = ({gid[0]} * $ITEMS + kt_r) * {dim[0]} + {lid[0]};\n"
                 f"        kt_point({call});\n    }}\n")
    if not found:
        return f"{header(ctx.source, a)}\n{{\n{plain}}}"
    if zloop is not None:  # the column's loop marched a plane at a time through the tile and registers
        return (f"{header(ctx.source, a)}\n{{\n#if $TILE > 0\n{_march(d, args, found, halo, block, across, 0, zloop)}"
                f"#else\n{plain}#endif\n}}")
    gid = ("(int)blockIdx.x", "(int)blockIdx.y") if cuda else gid
    lid = ("(int)threadIdx.x", "(int)threadIdx.y") if cuda else lid
    bx, by = (f"({b})" for b in block[:2])
    shared = "".join(f"    {d.shared} {t.ctype} kt_s{i}[KT_TH * KT_TW];\n" for i, t in enumerate(found))
    loads = "".join(f"        const long kt_f{i} = (long)(kt_ox + kt_i % KT_TW) * {t.sx} + "
                    f"(long)(kt_oy + kt_i / KT_TW) * {t.sy} + {t.base};\n"
                    f"        if (kt_f{i} >= 0 && kt_f{i} < {t.count}) kt_s{i}[kt_i] = {t.array}[kt_f{i}];\n"
                    for i, t in enumerate(found))
    tile_args = [f"kt_s{i}" for i in range(len(found))] + ["kt_ox"] + (["kt_oy"] if two_d else [])
    tcall = ", ".join(args + ["kt_x"] + (["kt_y0 + kt_r"] if two_d else []) + tile_args)
    if two_d:
        origin = (f"    const int kt_ox = {gid[0]} * ({bx}{' * $RX' if across else ''}) - {halo.x0};\n"
                  f"    const int kt_oy = {gid[1]} * ({by} * $ITEMS) - {halo.y0};\n")
        points = (f"    const int kt_y0 = ({gid[1]} * {by} + {lid[1]}) * $ITEMS;\n"
                  + _across_loop(f"{gid[0]} * {bx} + {lid[0]}", f"({gid[0]} * $RX + kt_q) * {bx} + {lid[0]}",
                                 tcall, across))
    else:
        origin = f"    const int kt_ox = {gid[0]} * ({bx} * $ITEMS) - {halo.x0};\n    const int kt_oy = 0;\n"
        points = (f"#pragma unroll\n    for (int kt_r = 0; kt_r < $ITEMS; ++kt_r) {{\n"
                  f"        const int kt_x = ({gid[0]} * $ITEMS + kt_r) * {bx} + {lid[0]};\n"
                  f"        kt_point({tcall});\n    }}\n")
    return (f"{header(ctx.source, a)}\n{{\n#if $TILE > 0\n{shared}{origin}"
            f"    for (int kt_i = {lid[1]} * {bx} + {lid[0]}; kt_i < KT_TH * KT_TW; kt_i += {bx} * {by}) {{\n{loads}    }}\n"
            f"    {d.barrier};\n{points}#else\n{plain}#endif\n}}")


def _march(d: Dialect, args: list[str], found: list[Tile], halo: Halo, block: list[str], across: bool,
           plane: int = 0, zloop: ZLoop | None = None) -> str:
    """The 2.5-D scheme of a 3-D grid: each thread of a (BLOCK x BLOCK_Y) plane of threads marches
    ITEMS consecutive planes along z (a block of several planes of threads: each its own run of
    planes, its own tile). It keeps its column's planes z - z0 .. z + z1 in registers (`kt_c`,
    one load a plane: the one ahead), and at each plane writes its own point's value into the
    plane's tile, the block loading the halo around them, meets at a barrier, computes its points
    from the tile and the registers, and moves its registers down a plane. Every register and tile
    element holds the element of the flat index it stands for, loaded only where that index lies in
    the array (a clamped index elsewhere, a value no point reads). The tile holds the points' plane,
    `plane` past the z global id. With `zloop` (a thread per column looping over z) the block marches
    the loop's planes instead, from its first while its condition holds: the same planes for every
    thread of the block."""
    cuda = d.name == "cuda"
    gid = ("(int)blockIdx.x", "(int)blockIdx.y", "(int)blockIdx.z") if cuda else d.group_id
    lid = (("(int)threadIdx.x", "(int)threadIdx.y", "(int)threadIdx.z") if cuda
           else tuple(f"(int)get_local_id({i})" for i in range(3)))
    bx, by, bz = (f"({b})" for b in block[:3])
    rx = "$RX" if across else "1"
    nq = halo.z0 + halo.z1 + 1
    area = "KT_TH * KT_TW"

    def column(i: int, t: Tile, z: str, m: str, indent: str) -> str:  # the column's element of plane z
        return (f"{indent}{{\n{indent}    const long kt_g = (long)(kt_x + ({t.column[0]})) * {t.sx} + (long)(kt_y + "
                f"({t.column[1]})) * {t.sy} + (long)({z}) * {t.sz} + {t.base};\n"
                f"{indent}    kt_c{i}[kt_q][{m}] = {t.array}[kt_g < 0 ? 0 : kt_g >= {t.count} ? {t.count} - 1 : kt_g];\n"
                f"{indent}}}\n")

    def columns(body: str, indent: str = "        ", x: bool = True) -> str:  # the thread's RX columns
        at = f"{indent}    const int kt_x = ({gid[0]} * {rx} + kt_q) * {bx} + {lid[0]};\n" if x else ""
        return f"#pragma unroll\n{indent}for (int kt_q = 0; kt_q < {rx}; ++kt_q) {{\n{at}{body}{indent}}}\n"
    out = "".join(f"    {d.shared} {t.ctype} kt_s{i}[{bz} * {area}];\n" for i, t in enumerate(found))
    out += (f"    const int kt_ox = {gid[0]} * ({bx} * {rx}) - {halo.x0};\n"
            f"    const int kt_oy = {gid[1]} * {by} - {halo.y0};\n"
            f"    const int kt_y = {gid[1]} * {by} + {lid[1]};\n"
            + (f"    const int kt_z0 = {zloop.start};\n" if zloop is not None else
               f"    const int kt_z0 = ({gid[2]} * {bz} + {lid[2]}) * $ITEMS;\n"))
    out += "".join(f"    {t.ctype} kt_c{i}[{rx}][{nq}];\n" for i, t in enumerate(found))
    if nq > 1:  # the planes below the first point's, and up to the one before the first load ahead
        out += columns(f"#pragma unroll\n        for (int kt_m = 0; kt_m < {nq - 1}; ++kt_m) {{\n"
                       + "".join(column(i, t, f"kt_z0 - {halo.z0} + kt_m", "kt_m", "            ")
                                 for i, t in enumerate(found)) + "        }\n", "    ")
    loads = ""
    at = "kt_z" if zloop is not None else f"({gid[2]} * {bz} + kt_i / ({area})) * $ITEMS + kt_p + {plane}"
    for i, t in enumerate(found):
        cx, cy = halo.x0 + t.column[0], halo.y0 + t.column[1]
        loads += (f"        for (int kt_i = ({lid[2]} * {by} + {lid[1]}) * {bx} + {lid[0]}; kt_i < {bz} * {area}; "
                  f"kt_i += {bx} * {by} * {bz}) {{\n"
                  f"            const int kt_e = kt_i % ({area});\n"
                  f"            const int kt_u = kt_e % KT_TW - {cx}, kt_v = kt_e / KT_TW - {cy};\n"
                  f"            if (kt_u >= 0 && kt_u < {bx} * {rx} && kt_v >= 0 && kt_v < {by}) continue;  "
                  f"// a thread's own point: from its registers\n"
                  f"            const long kt_f = (long)(kt_ox + kt_e % KT_TW) * {t.sx} + (long)(kt_oy + kt_e / KT_TW) * "
                  f"{t.sy} + (long)({at}) * {t.sz} + {t.base};\n"
                  f"            if (kt_f >= 0 && kt_f < {t.count}) kt_s{i}[kt_i] = {t.array}[kt_f];\n        }}\n")
    own = "".join(f"            kt_s{i}[{lid[2]} * {area} + ({lid[1]} + {halo.y0 + t.column[1]}) * KT_TW + kt_q * {bx} + "
                  f"{lid[0]} + {halo.x0 + t.column[0]}] = kt_c{i}[kt_q][{halo.z0 + plane}];\n" for i, t in enumerate(found))
    tile_args = ([f"kt_s{i} + {lid[2]} * {area}" for i in range(len(found))]
                 + [f"kt_c{i}[kt_q]" for i in range(len(found))] + ["kt_ox", "kt_oy"])
    call = ", ".join(args + ["kt_x", "kt_y", "kt_z"] + tile_args)
    shift = "".join(f"                kt_c{i}[kt_q][kt_m] = kt_c{i}[kt_q][kt_m + 1];\n" for i in range(len(found)))
    out += ((f"    for (int kt_z = kt_z0; {zloop.condition}; ++kt_z) {{\n" if zloop is not None else
             f"    for (int kt_p = 0; kt_p < $ITEMS; ++kt_p) {{\n        const int kt_z = kt_z0 + kt_p;\n")
            + columns("".join(column(i, t, f"kt_z + {halo.z1}", str(nq - 1), "            ")
                              for i, t in enumerate(found)))
            + f"        {d.barrier};  // every point of the plane before has read the tiles\n"
            + columns(own, x=False) + loads + f"        {d.barrier};\n"
            + columns(f"            kt_point({call});\n")
            + (columns(f"#pragma unroll\n            for (int kt_m = 0; kt_m < {nq - 1}; ++kt_m) {{\n{shift}"
                       f"            }}\n", x=False) if nq > 1 else "")
            + "    }\n")
    return out


def _across_loop(x: str, x_q: str, call: str, across: bool) -> str:
    """A thread's points of a 2-D grid: ITEMS consecutive rows at its x (`x`), or, with RX, at each
    of its RX columns a block's width apart (`x_q`, over kt_q)."""
    if not across:
        return (f"    const int kt_x = {x};\n"
                f"#pragma unroll\n    for (int kt_r = 0; kt_r < $ITEMS; ++kt_r) kt_point({call});\n")
    return (f"#pragma unroll\n    for (int kt_q = 0; kt_q < $RX; ++kt_q) {{\n        const int kt_x = {x_q};\n"
            f"#pragma unroll\n        for (int kt_r = 0; kt_r < $ITEMS; ++kt_r) kt_point({call});\n    }}\n")


def _across(body, text_of, var: str, coords: set[str], ctx: RewriteContext) -> str | None:
    """The bound the guard sets on x, over the spec's sizes: the grid's columns RX points a thread
    cover (None where the guard bounds no x: no RX then)."""
    try:
        return spec_text(inlined(ctx.model, _bound(body, text_of, var, coords), {}), _bound_names(ctx))
    except Decline:
        return None


def _parameters(fn, ctx, d: Dialect, model: KernelModel) -> tuple[list[str], list[str]]:
    """The kernel's parameters as the point function declares them (pointers restricted) and
    the names that pass them on."""
    out, names = [], []
    restrict = "__restrict__" if d.name == "cuda" else "restrict"
    for text, name in kernel_parameters(ctx.source, fn):
        arg = next((x for x in model.signature.args if x.name == name), None)
        if arg is not None and arg.pointer and not arg.local and "restrict" not in text:
            star = text.rfind("*")
            text = text[:star + 1] + f" {restrict} " + text[star + 1:].lstrip()
        out.append(text)
        names.append(name)
    return out, names
