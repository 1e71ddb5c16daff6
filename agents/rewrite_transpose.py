"""The transpose rewrite, for a kernel in which each thread moves elements of a 2-D array into
another whose fast axis is the other one (`odata[x * width + (y + j)] = idata[(y + j) * width + x]`:
reads coalesced, writes a row apart, or the other way round): the element staged through a tile in
shared (OpenCL local) memory, so that both the reads and the writes run along their array's rows.

What the analysis (on agents/model.py's KernelModel) must show, else it declines with the reason:

- no barrier, shared memory, atomic or shuffle already;
- one store, `out[W] = value;`, of an array the kernel never reads, under ifs without else, an
  `if (...) return;` outside every loop and counting loops (`for (j = 0; j < 32; j += 8)`, start 0,
  a step and a bound the file's constants give) and nothing else: no other statement than
  declarations of locals assigned once;
- a read in `value` of an array the kernel never writes, `in[R]`, its index and the store's affine
  in the thread's ids and the loops' variables, with their fast axes swapped: every symbol moves R
  by m and W by m * sW (a symbol of the read's fast axis U), or W by m and R by m * sR (of the
  write's fast axis V), m a whole number, or it is a block id of neither (a batch: `blockIdx.z`);
- along U and along V, the symbols tile the axis exactly as the original launch runs them: sorted by
  m, each one's m the product of the extents of those below (a thread id's extent the block's size,
  a loop's its trip count), topped by one block id (so a block of the original covers E points of
  the axis and the grid's blocks cover E times as many), the two block ids of different dimensions.

The new kernel (beside the original under `#if`; TILE = 0 is the original token for token) gives
each block a TILE x TILE tile of points (U, V) (the grid along U's and V's block dimensions follows
the tile: E / TILE times the original's blocks where TILE divides E, the original's count where E
divides TILE, blocks past the points returning at once). Its TILE x ROWS threads copy the tile's
elements, each TILE / ROWS of them, from `in` into the tile with consecutive threads along U (the
read's rows), meet at a barrier, and write them with consecutive threads along V (the write's
rows), the tile read down a column (PAD 1 pads its rows by one element against bank conflicts). A
point is the original thread and iteration whose ids and loop variables its U and V decompose into;
it is read and written only where the original launch reaches it and the original's guards hold at
it, and the store is the original's, as written, with those ids put in: the values are the
original's bit for bit, for any size.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, replace

from kerntune.engine.proposal import ParamProposal

from .cooperate import Decline, Dialect, ReadingPass, bare_return, beside, expression_names, fresh_names, \
    if_condition, kernel_spans, lone_model, named_children, pinned, spec_scalars, strip_parens, substituted, \
    unbounded_header, with_names
from .kernel_tree import span_of, syntax_nodes
from .model import DIALECT, ELEMENT_BYTES, Access, Affine, KernelModel, Poly, declarator_name, define_value
from .passes import Rewrite, RewriteContext
from .syntax import cut

NAME = "transpose"
TILES = (8, 16, 32, 64)
ROWS = (1, 2, 4, 8, 16, 32)
DIMS = "xyz"
BLOCK = "blockIdx."


@dataclass(frozen=True)
class Digit:
    """One symbol of an axis: a thread id, a loop's variable or the block id on top, and how it
    builds the axis's coordinate: `mult` times its count (a loop's value is its count times `step`)."""

    symbol: str
    mult: int
    extent: int | None  # None: the block id (the grid's extent)
    step: int = 1
    ctype: str = ""  # a loop variable's type as declared

    def value(self, var: str, top: int) -> str:
        """Its value at the point whose coordinate along the axis is `var` (`top`: the block's E)."""
        if self.extent is None:
            return f"({var} / {top})"
        if self.extent == 1:
            return "0"
        count = f"({var} % {self.extent})" if self.mult == 1 else f"({var} / {self.mult} % {self.extent})"
        return f"({count} * {self.step})" if self.step != 1 else count


@dataclass(frozen=True)
class Axis:
    """The read's (U) or the write's (V) fast axis: its digits and the points a block covers along it."""

    digits: tuple[Digit, ...]
    dim: int  # the launch dimension of its block id
    extent: int  # E

    def symbols(self) -> set[str]:
        return {d.symbol for d in self.digits}


@dataclass(frozen=True)
class Transpose:
    """What the rewrite moves: the store's text, the staged read, the two axes, the guards."""

    store: str  # the assignment as written, locals inlined
    array: str  # the array it writes
    staged: Access
    staged_key: str  # the staged read's text, locals inlined, spaces left out
    read_text: str  # the same, as written with spaces
    u: Axis
    v: Axis
    guards: tuple[str, ...]  # conditions (locals inlined) under which the original stores
    ctype: str  # the staged array's element type, as declared
    bytes: int
    block: tuple[int, int, int]  # the original block's size, in numbers
    loops: dict  # loop variable -> its Digit
    flat: "Flat | None" = None  # a thread per element of a one-dimensional launch (u and v unused)
    starts: tuple = ()  # (loop variable, the thread id it starts at) of loops over the block's threads


@dataclass(frozen=True)
class Flat:
    """A thread per element of a one-dimensional launch whose row and column are its flat index
    divided by and modulo a width (`r = i / W; c = i % W`): the points are (row, column)."""

    width: str  # W as the kernel writes it
    width_spec: str  # W over the spec's problem names
    threads: int  # the original block's threads
    count: str  # the original's blocks, counted in the kernel from its arguments
    grid: str  # the same over the spec's problem names
    col_is_u: bool  # the read runs along the column (else along the row)


class TransposePass(ReadingPass):
    name = NAME

    def read(self, ctx: RewriteContext) -> Transpose:
        return _read(ctx)

    def emit(self, ctx: RewriteContext, found: Transpose) -> Rewrite:
        return _rewrite(ctx, found)


# the pass, called as a function of a RewriteContext (agents/rewrites.py registers it)
rewrite = TransposePass()


# reading ---------------------------------------------------------------------------------------------

def constants(ctx: RewriteContext, model: KernelModel) -> dict[str, int]:
    """Every name of known whole-number value: the file's #defines, the parameters made so far at
    their defaults, and file-scope `const` / `constexpr` integers over those (`const int TILE_DIM =
    TILE_DIM_VALUE;` once lifted)."""
    known = dict(model.defines)
    known.update({k: v for k, v in ctx.defaults.items() if isinstance(v, int) and not isinstance(v, bool)})
    for node, text_of in syntax_nodes(ctx.source, ("declaration",)):
        if node.parent is None or node.parent.type not in ("translation_unit", "declaration_list"):
            continue
        words = {text_of(c) for c in node.children if c.type in ("type_qualifier", "storage_class_specifier")}
        decl = node.child_by_field_name("declarator")
        if not words & {"const", "constexpr"} or decl is None or decl.type != "init_declarator":
            continue
        target, value = decl.child_by_field_name("declarator"), decl.child_by_field_name("value")
        if target is None or value is None or target.type != "identifier":
            continue
        got = define_value(text_of(value), known)
        if got is not None:
            known[text_of(target)] = got
    return known


def _number(p: Poly, known: dict[str, int]) -> int | None:
    for name in p.names():
        if name in known:
            p = p.substitute(name, Poly.of(known[name]))
    return p.number


def _known(p: Poly, known: dict[str, int]) -> Poly:
    for name in p.names():
        if name in known:
            p = p.substitute(name, Poly.of(known[name]))
    return p


def _block(ctx: RewriteContext, known: dict[str, int]) -> tuple[int, int, int]:
    out = []
    for d in range(3):
        text = ctx.block[d].strip() if d < len(ctx.block) else "1"
        got = define_value(text, known)
        if got is None or got < 1:
            raise Decline(f"the block's size `{text}` is not a number the file's constants give")
        out.append(got)
    return tuple(out)


def _function(ctx: RewriteContext, model: KernelModel):
    for node, text_of in syntax_nodes(ctx.source, ("function_definition",)):
        body = node.child_by_field_name("body")
        if body is not None and span_of(ctx.source, body) == model.kernel.body:
            return body, text_of
    raise Decline("the kernel's body cannot be found in its syntax tree")


class _Shape:
    """The body read as guards and counting loops around one store."""

    def __init__(self, ctx: RewriteContext, model: KernelModel, text_of):
        self.ctx, self.model, self.text_of = ctx, model, text_of
        self.guards: list[str] = []
        self.loops: list[int] = []  # model loop indices around the store
        self.store = None
        self.loop_spans = {(lp.span.start, lp.span.end): i for i, lp in enumerate(model.loops)}

    def walk(self, node, guards: list[str], loops: list[int], top: bool = False) -> None:
        """`top`: the body's own statements, where `if (...) return;` guards every later one."""
        t = node.type
        line = node.start_point[0] + 1
        if t == "compound_statement":
            for s in named_children(node):
                self.walk(s, guards, loops, top)
            top = False
        elif t == "declaration":
            for decl in node.children_by_field_name("declarator"):
                name, _ = declarator_name(decl)
                if name not in self.model.locals:
                    raise Decline(f"`{name}` (line {line}) is not a local assigned once")
        elif t == "expression_statement":
            inner = named_children(node)
            if not inner:
                return
            e = inner[0]
            if e.type != "assignment_expression" or self.text_of(e.child_by_field_name("operator")) != "=":
                raise Decline(f"its statement at line {line} is not the store nor a local assigned once")
            if self.store is not None:
                raise Decline("it stores more than once")
            self.store, self.guards, self.loops = e, list(guards), list(loops)
        elif t == "if_statement":
            if node.child_by_field_name("alternative") is not None:
                raise Decline(f"an if with an else (line {line})")
            cond = if_condition(node, self.text_of)
            then = node.child_by_field_name("consequence")
            if bare_return(then):
                if not top:
                    raise Decline(f"a return (line {line}) other than in an if among the body's own statements")
                if self.store is None:
                    guards.append(f"!({cond})")
                return
            self.walk(then, guards + [cond], loops)
        elif t == "for_statement":
            span = span_of(self.ctx.source, node)
            i = self.loop_spans.get((span.start, span.end))
            if i is None:
                raise Decline(f"the loop at line {line} cannot be read")
            self.walk(node.child_by_field_name("body"), guards, loops + [i])
        elif t in ("empty_statement",):
            return
        else:
            raise Decline(f"its body holds {t.replace('_', ' ')} (line {line}), not only guards, counting loops "
                          "and one store")


def _loop_digit(model: KernelModel, i: int, known: dict[str, int]) -> tuple[int, int, str]:
    """(step, trip count, the thread id it starts at or "") of a counting loop from 0 by a whole step
    to a whole bound, or of a loop over a block's threads (`for (j = threadIdx.y; j < 32; j +=
    blockDim.y)`, the bound a whole number of steps, so every thread runs it as often)."""
    lp = model.loops[i]
    forms = (lp.start_form, lp.step_form, lp.bound_form)
    start_id = ""
    if lp.role == "thread-stride" and lp.start_form is not None and len(lp.start_form.coeffs) == 1 and \
            lp.start_form.coeffs[0][0].startswith("threadIdx.") and lp.start_form.coeffs[0][1].number == 1:
        start_id = lp.start_form.coeffs[0][0]
    if lp.kind != "for" or lp.role not in ("serial", "thread-stride") or lp.compare not in ("<", "<=") or \
            lp.update not in ("+=", "++") or any(f is None or (f.coeffs and f is not lp.start_form) for f in forms) \
            or (lp.role == "thread-stride") != bool(start_id):
        raise Decline(f"the loop over `{lp.var}` does not count up by a step to a bound")
    start, step, bound = (_number(f.const, known) for f in forms)
    if start != 0 or step is None or step < 1 or bound is None:
        raise Decline(f"the loop over `{lp.var}` does not run from 0 by a whole step to a whole bound")
    bound += 1 if lp.inclusive or lp.compare == "<=" else 0
    if start_id and (bound % step or step != known.get("blockDim." + start_id[-1])):
        raise Decline(f"the loop over `{lp.var}` steps by other than the block's threads or to no whole number of "
                      "steps")
    return step, max(0, (bound + step - 1) // step), start_id


def _axes(read: Access, write: Access, extents: dict[str, tuple[int, int]], known: dict[str, int],
          types: dict, starts: dict[str, str]) -> tuple[Axis, Axis, set[str]]:
    """U (the read's fast axis) and V (the write's) from the two indices, and the batch's block
    ids; Decline with the reason where they are not a transposition."""
    r, w = read.expr.affine if read.expr else None, write.expr.affine if write.expr else None
    if r is None or w is None:
        raise Decline(f"`{(read if r is None else write).index}` is not affine in the thread's ids and loops")
    # a loop over the block's threads, j = threadIdx.y + step * count: its variable stands for the count
    for var, tid in starts.items():
        r, w = (f + Affine.of(tid, True).scale(f.coeff(var)) for f in (r, w))
    symbols = sorted(r.symbols() | w.symbols())
    pairs = {s: (_known(r.coeff(s), known), _known(w.coeff(s), known)) for s in symbols}
    unit_r = [s for s in symbols if pairs[s][0].number == 1]
    unit_w = [s for s in symbols if pairs[s][1].number == 1]
    if not unit_r or not unit_w:
        raise Decline(f"the {'read' if not unit_r else 'store'} moves along no axis element by element")
    if set(unit_r) & set(unit_w):
        raise Decline("the read and the store move along the same axis: no transposition")
    s_w = {str(pairs[s][1]) for s in unit_r}
    s_r = {str(pairs[s][0]) for s in unit_w}
    if len(s_w) > 1 or len(s_r) > 1:
        raise Decline("the read's fast axis moves the store by more than one stride")
    sw, sr = pairs[unit_r[0]][1], pairs[unit_w[0]][0]
    if sw.is_zero or sr.is_zero:
        raise Decline("the store or the read does not move along the other's fast axis")
    u, v, batch = [], [], set()
    for s in symbols:
        a, b = pairs[s]
        if a.number is not None and a.number > 0 and b == a * sw:
            u.append((s, a.number))
        elif b.number is not None and b.number > 0 and a == b * sr:
            v.append((s, b.number))
        elif s.startswith(BLOCK):
            batch.add(s)
        else:
            raise Decline(f"`{s}` moves the read by {a} and the store by {b}: along neither fast axis")
    return _axis(u, "the read's", extents, types), _axis(v, "the store's", extents, types), batch


def _axis(digits: list[tuple[str, int]], which: str, extents: dict[str, tuple[int, int]], types: dict) -> Axis:
    blocks = [(s, m) for s, m in digits if s.startswith(BLOCK)]
    if len(blocks) != 1:
        raise Decline(f"{which} fast axis is spread over {len(blocks)} block ids, not one")
    out, run = [], 1
    lower = [d for d in digits if not d[0].startswith(BLOCK)]
    for s, m in sorted(lower, key=lambda d: d[1] * extents.get(d[0], (1, 0))[0]):
        step, n = extents[s] if s in extents else (1, 0)
        if not n:
            raise Decline(f"`{s}` has no extent the launch gives")
        mult = m * step
        if n > 1 and mult != run:
            raise Decline(f"{which} fast axis is not tiled exactly by its ids and loops (`{s}` moves it by {mult} "
                          f"where {run} comes next)")
        out.append(Digit(s, mult if n > 1 else 1, n, step, types.get(s, "")))
        run *= n
    symbol, m = blocks[0]
    if m != run:
        raise Decline(f"a block moves {which} fast axis by {m} where its threads cover {run}")
    return Axis(tuple(out) + (Digit(symbol, m, None),), DIMS.index(symbol[-1]), run)


def _typed_locals(model: KernelModel) -> dict[str, str]:
    """Each scalar local assigned once -> its initialiser with the locals before it put in, cast to
    its declared type (`int c = blockIdx.x * blockDim.x + threadIdx.x` is an int, not unsigned)."""
    out: dict[str, str] = {}
    for name, init in model.locals.items():
        kind = model.types.get(name, "")
        if name in model.scalars and kind and kind.split()[-1] != "auto":
            out[name] = f"(({kind})({model.inline(init, out)}))"
    return out


def _occurrences(value: str, key: str) -> set[str]:
    """How the element whose text (spaces left out) is `key` is read in the expression `value`:
    "always" where every evaluation of `value` reads it, "conditional" where a `?:`, `&&` or `||`
    may skip it (the tile's copy of it would be loaded where the original reads nothing)."""
    found = syntax_nodes(f"auto kt_e = ({value});", ("subscript_expression", "call_expression"))
    out = set()
    for node, text_of in found:
        if "".join(text_of(node).split()) != key:
            continue
        kind, up = "always", node.parent
        while up is not None and up.type != "declaration":
            if up.type == "conditional_expression" or (
                    up.type == "binary_expression" and text_of(up.child_by_field_name("operator")) in ("&&", "||")):
                kind = "conditional"
            up = up.parent
        out.add(kind)
    return out


def _split(text: str):
    """(operator, left, right) of a division or modulo `left / right`, `left % right`; else None."""
    found = syntax_nodes(f"auto kt_e = ({text});", ("parenthesized_expression",))
    if not found:
        return None
    node, text_of = found[0]
    node = strip_parens(node)
    if node.type != "binary_expression" or text_of(node.child_by_field_name("operator")) not in ("/", "%"):
        return None
    return (text_of(node.child_by_field_name("operator")), text_of(node.child_by_field_name("left")).strip(),
            text_of(node.child_by_field_name("right")).strip())


def _flat(ctx: RewriteContext, model: KernelModel, known: dict[str, int], block: tuple, loops) -> tuple | None:
    """(Flat without its axes' order, the row's local, the column's local) where the kernel is a
    thread per element of a one-dimensional launch splitting its flat index by a width; else None."""
    if model.launch_dims != frozenset({0}) or loops or block[1] != 1 or block[2] != 1:
        return None
    halves: dict[tuple[str, str], dict[str, str]] = {}  # (flat index, width) -> {"/": row, "%": column}
    for name, init in model.locals.items():
        got = _split(init)
        if got is None or name not in model.scalars:
            continue
        op, left, width = got
        form = model.index(model.inline(left)).affine
        if form is None or form.symbols() != {"threadIdx.x", "blockIdx.x"} or not form.const.is_zero or \
                _known(form.coeff("threadIdx.x"), known).number != 1 or \
                _known(form.coeff("blockIdx.x"), known).number != block[0]:
            continue
        halves.setdefault((model.inline(left), width), {})[op] = name
    scalars = spec_scalars(ctx)
    for (_, width), both in halves.items():
        if set(both) != {"/", "%"}:
            continue
        spec = f"({scalars[width]})" if width in scalars else str(known[width]) if width in known else None
        count = grid_count(ctx.grid[0], ctx, known)
        if spec is None or count is None:
            return None
        return Flat(width, spec, block[0], count, ctx.grid[0], True), both["/"], both["%"]
    return None


def _flat_axes(read: Access, write: Access, flat: Flat, row: str, col: str, model: KernelModel,
               known: dict[str, int]) -> bool:
    """Whether the read runs along the column (True) or the row (False), the store along the other;
    Decline with the reason otherwise."""
    rename = {row: "kt_R", col: "kt_C"}
    width = Poly.of(known[flat.width]) if flat.width in known else Poly.of(flat.width)

    def form(index: str) -> Poly:
        f = model.index(model.inline(index, rename)).affine
        if f is None or f.symbols() - {"threadIdx.x", "blockIdx.x"}:
            raise Decline(f"`{index}` is not affine in the element's row and column")
        k = _known(f.coeff("threadIdx.x"), known).number
        if k is None or _known(f.coeff("blockIdx.x"), known) != Poly.of(k * flat.threads):
            raise Decline(f"`{index}` reads the thread's index other than as the element's")
        out = _known(f.const, known) + Poly.of(k) * (Poly.of("kt_R") * width + Poly.of("kt_C"))
        if out.degree_in("kt_R") > 1 or out.degree_in("kt_C") > 1 or \
                {"kt_R", "kt_C"} & (out.coefficient("kt_R").names() | out.coefficient("kt_C").names()):
            raise Decline(f"`{index}` is not affine in the element's row and column")
        return out
    r, w = form(read.index), form(write.index)
    rr, rc, wr, wc = (p.coefficient(n) for p in (r, w) for n in ("kt_R", "kt_C"))
    if rc.number == 1 and wr.number == 1 and not rr.is_zero and not wc.is_zero:
        return True
    if rr.number == 1 and wc.number == 1 and not rc.is_zero and not wr.is_zero:
        return False
    raise Decline("the read and the store do not run along swapped axes of the element's row and column")


def _read(ctx: RewriteContext) -> Transpose:
    model = lone_model(ctx)
    writes = [a for a in model.accesses if a.write]
    if len(writes) != 1 or writes[0].space != "global" or writes[0].read:
        raise Decline("not one store of a plain element of global memory")
    write = writes[0]
    if any(a.array == write.array and a.read for a in model.accesses) or write.array in model.opaque:
        raise Decline(f"`{write.array}` is read as well as written")
    d = DIALECT[ctx.backend]
    for fn in model.functions[1:]:
        if any(w in cut(ctx.source, fn.body.start, fn.body.end) for w in d.ids):
            raise Decline(f"the function `{fn.name}` it calls reads thread or block ids")
    known = constants(ctx, model)
    block = _block(ctx, known)
    known.update({f"blockDim.{DIMS[k]}": block[k] for k in range(3)})
    body, text_of = _function(ctx, model)
    shape = _Shape(ctx, model, text_of)
    shape.walk(body, [], [], top=True)
    if shape.store is None:
        raise Decline("it stores nothing")
    st = span_of(ctx.source, shape.store)
    if not (st.start <= write.span.start and write.span.end <= st.end):
        raise Decline("its store is not the element it writes")
    extents: dict[str, tuple[int, int]] = {f"threadIdx.{DIMS[k]}": (1, block[k]) for k in range(3)}
    loops = {}
    starts = {}  # a loop over the block's threads -> the thread id it starts at
    for i in shape.loops:
        step, trip, start_id = _loop_digit(model, i, known)
        extents[model.loops[i].var] = (step, trip)
        loops[model.loops[i].var] = i
        if start_id:
            starts[model.loops[i].var] = start_id
    typed = _typed_locals(model)
    value = model.inline(cut(ctx.source, shape.store.child_by_field_name("right").start_byte,
                             shape.store.child_by_field_name("right").end_byte), typed)
    flat = _flat(ctx, model, known, block, loops)
    found, why = None, "no read in the stored value of an array the kernel never writes"
    for a in model.accesses:
        if not a.read or a.write or a.space not in ("global", "constant") or \
                any(b.array == a.array and b.write for b in model.accesses):
            continue
        text = model.inline(cut(ctx.source, a.span.start, a.span.end), typed)
        key = "".join(text.split())
        where = _occurrences(value, key)
        if not where:
            continue
        if "conditional" in where:
            why = f"the stored value reads `{a.array}` only on one side of a condition (`?:`, `&&`, `||`)"
            continue
        try:
            if flat is not None:
                flat = (replace(flat[0], col_is_u=_flat_axes(a, write, *flat, model, known)),) + flat[1:]
                u, v = Axis((), 0, 0), Axis((), 1, 0)
            else:
                u, v, _ = _axes(a, write, extents, known, model.types, starts)
        except Decline as e:
            why = str(e)
            continue
        found = (a, key, text, u, v)
        break
    if found is None:
        raise Decline(why)
    a, key, text, u, v = found
    if flat is not None:
        pass
    elif u.dim == v.dim:
        raise Decline("both fast axes are spread over blocks of one launch dimension")
    for var in loops:
        if var not in u.symbols() | v.symbols():
            raise Decline(f"the loop over `{var}` moves neither index")
    moving = u.symbols() | v.symbols()
    for word, dim in model.ids if flat is None else ():
        if word == "threadIdx" and f"threadIdx.{DIMS[dim]}" not in moving and block[dim] > 1:
            raise Decline(f"it reads threadIdx.{DIMS[dim]} other than in its indices")
        if word == "blockIdx" and dim in (u.dim, v.dim) and f"blockIdx.{DIMS[dim]}" not in moving:
            raise Decline(f"it reads blockIdx.{DIMS[dim]} other than in its indices")
    ctype = model.arg_types.get(a.array, "")
    generic = {g.name: g.ctype for g in model.signature.generic_args}
    inst = {g.name: g.ctype for g in model.signature.args}
    size = ELEMENT_BYTES.get(inst.get(a.array, ctype))
    if not ctype or size is None:
        raise Decline(f"the element type of `{a.array}` is not known")
    store = model.inline(cut(ctx.source, st.start, st.end), typed)
    guards = tuple(model.inline(g, typed) for g in shape.guards)
    left = set()
    for t in (store,) + guards:
        left |= (expression_names(t) & (set(model.changing) | set(model.locals))) - set(loops)
    if left:
        raise Decline(f"it reads {', '.join(sorted(left))}, assigned more than once")
    return Transpose(store, write.array, a, key, text, u, v, guards, generic.get(a.array, ctype), size, block,
                     {var: next(dg for ax in (u, v) for dg in ax.digits if dg.symbol == var) for var in loops},
                     flat[0] if flat is not None else None, tuple(starts.items()))


# writing ---------------------------------------------------------------------------------------------

def _ids(ctx: RewriteContext, t: Transpose) -> dict[str, str]:
    """Each id as written (spaces left out) -> its value at the point (kt_u, kt_v), in the id's type."""
    d = DIALECT[ctx.backend]
    cuda = ctx.backend == "cuda"
    cast = "unsigned int" if cuda else "size_t"
    value: dict[tuple[str, int], str] = {}
    if t.flat is not None:  # the element's flat index kt_f, of the original's one dimension
        value = {("threadIdx", 0): f"(kt_f % {t.flat.threads})", ("blockIdx", 0): f"(kt_f / {t.flat.threads})",
                 ("blockIdx", 1): "0", ("blockIdx", 2): "0"}
    for ax, var in ((t.u, "kt_u"), (t.v, "kt_v")):
        for dg in ax.digits:
            if "." in dg.symbol:
                word, dim = dg.symbol.split(".")
                value[(word, DIMS.index(dim))] = dg.value(var, ax.extent)
    out = {}
    for k in range(3):
        own = {"threadIdx": value.get(("threadIdx", k), "0"), "blockDim": str(t.block[k])}
        if ("blockIdx", k) in value:
            own["blockIdx"] = value[("blockIdx", k)]
        if k in (t.u.dim, t.v.dim):
            own["gridDim"] = "kt_gu" if k == t.u.dim else "kt_gv"
        for word, v in own.items():
            out["".join(d.id(word, k).split())] = f"(({cast})({v}))"
        if not cuda:
            block = own.get("blockIdx", f"get_group_id({k})")
            out[f"get_global_id({k})"] = f"((size_t)({block}) * {t.block[k]} + (size_t)({own['threadIdx']}))"
            grid = own.get("gridDim", f"get_num_groups({k})")
            out[f"get_global_size({k})"] = f"((size_t)({grid}) * {t.block[k]})"
    return out


C_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "/", ast.Mod: "%"}


def grid_count(expr: str, ctx: RewriteContext, known: dict[str, int]) -> str | None:
    """The launch's count of blocks `expr` (the spec's expression over problem names and parameters)
    as C over the kernel's own scalar arguments, where each problem name it reads is the value of
    one (`ceil_div(cols, BLOCK)` with `int cols` given `cols`: `((cols + 16 - 1) / 16)`, the
    parameters at their defaults); None where it reads anything else."""
    args = {}
    for arg in ctx.original.arguments:
        if arg.role == "scalar" and arg.value is not None and arg.value.source.strip().isidentifier() \
                and arg.dtype.startswith(("int", "uint")):
            args.setdefault(arg.value.source.strip(), arg.name)
    try:
        return "(int)" + _c_count(ast.parse(expr, mode="eval").body, args, known)
    except (SyntaxError, KeyError):
        return None


def _c_count(n, args: dict[str, str], known: dict[str, int]) -> str:
    if isinstance(n, ast.Constant) and type(n.value) is int:
        return str(n.value)
    if isinstance(n, ast.Name) and (n.id in args or n.id in known):
        return f"({args[n.id]})" if n.id in args else str(known[n.id])
    if isinstance(n, ast.BinOp) and type(n.op) in C_OPS:
        return f"({_c_count(n.left, args, known)} {C_OPS[type(n.op)]} {_c_count(n.right, args, known)})"
    if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and not n.keywords and len(n.args) == 2:
        x, y = (_c_count(v, args, known) for v in n.args)
        if n.func.id == "ceil_div":
            return f"(({x} + {y} - 1) / {y})"
        if n.func.id in ("min", "max"):
            return f"({x} {'<' if n.func.id == 'min' else '>'} {y} ? {x} : {y})"
    raise KeyError(ast.dump(n))


def _at_point(text: str, ids: dict[str, str], loops: dict[str, str], staged: dict[str, str] | None = None) -> str:
    """An expression of the original with the point's ids and loop values put in (and the staged read
    replaced by the tile's element)."""
    found = syntax_nodes(f"auto kt_e = ({text});", ("parenthesized_expression",))
    if not found:
        raise Decline(f"`{' '.join(text.split())}` cannot be read")
    node, text_of = found[0]
    return substituted(node, text_of, loops, {**ids, **(staged or {})})


def _rewrite(ctx: RewriteContext, t: Transpose) -> Rewrite:
    model = ctx.model
    d = Dialect.of(ctx.backend)
    a = kernel_spans(ctx.source, model)
    names = fresh_names(("TILE", "ROWS", "PAD"), ctx.taken | set(ctx.defaults))
    tile, rows, pad = names["TILE"], names["ROWS"], names["PAD"]
    ids = _ids(ctx, t)
    loops = {}  # each loop variable -> its value at the point, in its type
    starts = dict(t.starts)
    for var, dg in t.loops.items():
        value = dg.value('kt_u' if dg in t.u.digits else 'kt_v', 0)
        if var in starts:  # j = threadIdx.y + step * count
            tid = next((x, ax) for ax in (t.u, t.v) for x in ax.digits if x.symbol == starts[var]) \
                if any(x.symbol == starts[var] for ax in (t.u, t.v) for x in ax.digits) else None
            value = f"({tid[0].value('kt_u' if tid[1] is t.u else 'kt_v', 0)} + {value})" if tid else value
        loops[var] = f"(({dg.ctype or 'int'})({value}))"
    lx, ly = ("(int)threadIdx.x", "(int)threadIdx.y") if d.name == "cuda" else \
        ("(int)get_local_id(0)", "(int)get_local_id(1)")
    guard = " && ".join(f"({_at_point(g, ids, loops)})" for g in t.guards) or "1"
    read = _at_point(t.read_text, ids, loops)
    store = _at_point(t.store, ids, loops, {t.staged_key: f"kt_tile[{lx}][kt_r]"})
    grid_word = DIALECT[ctx.backend].id
    grid = list(ctx.grid) + ["1"] * (3 - len(ctx.grid))
    known = constants(ctx, model)
    # the original's blocks along each axis: counted from the kernel's own arguments as the spec's
    # grid counts them, else from the grid, which holds E / TILE tiles of them where TILE divides E
    if t.flat is None:
        counted = {ax.dim: grid_count(grid[ax.dim], ctx, known) for ax in (t.u, t.v)}
        blocks = {ax.dim: counted[ax.dim] or f"(int){grid_word('gridDim', ax.dim)} / ({ax.extent} > $TILE ? "
                                            f"{ax.extent} / $TILE : 1)" for ax in (t.u, t.v)}
        head = f"""    const int kt_gu = {blocks[t.u.dim]};
    const int kt_gv = {blocks[t.v.dim]};
    const int kt_ue = kt_gu * {t.u.extent};
    const int kt_ve = kt_gv * {t.v.extent};
    const int kt_u0 = (int){grid_word('blockIdx', t.u.dim)} * $TILE;
    const int kt_v0 = (int){grid_word('blockIdx', t.v.dim)} * $TILE;
    if (kt_u0 >= kt_ue || kt_v0 >= kt_ve)
        return;
"""
        point, inside = "", "kt_u < kt_ue && kt_v < kt_ve"
    else:  # (row, column) points; the element is the original's where its flat index is launched
        wide = "long long" if d.name == "cuda" else "long"
        col, row = ("kt_u", "kt_v") if t.flat.col_is_u else ("kt_v", "kt_u")
        head = f"""    const int kt_gu = {t.flat.count};  // the original's blocks
    const int kt_gv = 1;
    const {wide} kt_n = ({wide})kt_gu * {t.flat.threads};
    const int kt_w = (int)({t.flat.width});
    const int kt_u0 = (int){grid_word('blockIdx', 0)} * $TILE;
    const int kt_v0 = (int){grid_word('blockIdx', 1)} * $TILE;
"""
        point = f"        const {wide} kt_f = ({wide}){row} * kt_w + {col};\n"
        inside = f"{col} < kt_w && kt_f < kt_n"
        counted = {0: "", 1: ""}
    kernel = f"""{unbounded_header(ctx.source, a)}
{{
    {d.shared} {t.ctype} kt_tile[$TILE][$TILE + $PAD];
{head}    // read along the input's rows: consecutive threads, consecutive points along U
    for (int kt_r = {ly}; kt_r < $TILE; kt_r += $ROWS) {{
        const int kt_u = kt_u0 + {lx};
        const int kt_v = kt_v0 + kt_r;
{point}        if ({inside} && {guard})
            kt_tile[kt_r][{lx}] = {read};
    }}
    {d.barrier};
    // write along the output's rows: consecutive threads, consecutive points along V
    for (int kt_r = {ly}; kt_r < $TILE; kt_r += $ROWS) {{
        const int kt_u = kt_u0 + kt_r;
        const int kt_v = kt_v0 + {lx};
{point}        if ({inside} && {guard})
            {store};
    }}
}}"""
    if "$" in cut(ctx.source, a.span.start, a.span.end):
        raise Decline("a `$` in the kernel's code")
    kernel = with_names(kernel, names)
    tiles = tuple(x for x in TILES if t.flat is not None or all(counted[ax.dim] or x % ax.extent == 0 or
                                                                ax.extent % x == 0 for ax in (t.u, t.v)))
    if not tiles:
        raise Decline(f"no tile of {', '.join(map(str, TILES))} divides or is a multiple of the blocks' "
                      f"{t.u.extent} x {t.v.extent} points")
    params = [ParamProposal(tile, (0,) + tiles, 0, "the side of the tile staged in shared memory (0: the original "
                            "kernel)", "tile"),
              ParamProposal(rows, ROWS, 8, "rows of threads a block: each moves TILE / ROWS elements", "threads"),
              ParamProposal(pad, (0, 1), 1, "1: the tile's rows one element longer, against bank conflicts", "flag")]
    off = f"{tile} == 0"
    constraints = [f"{tile} > 0 or ({rows} == 8 and {pad} == 1)",  # unread by the original
                   f"{off} or {tile} % {rows} == 0",
                   f"{off} or {tile} * {rows} <= max_threads_per_block",
                   f"{off} or {tile} * ({tile} + {pad}) * {t.bytes} <= max_shared_per_block"] + pinned(ctx, off)
    block = list(ctx.block) + ["1"] * (3 - len(ctx.block))
    new_grid = list(grid)
    for ax in (t.u, t.v) if t.flat is None else ():
        g = grid[ax.dim]
        tiled = f"ceil_div(({g}) * {ax.extent}, {tile})" if counted[ax.dim] else f"({g}) * max(1, {ax.extent} // {tile})"
        new_grid[ax.dim] = f"({tiled}) if {tile} > 0 else ({g})"
    if t.flat is not None:  # the columns' tiles and the rows' (as many rows as the original's elements fill)
        f = t.flat
        cols, rows_ = f"ceil_div({f.width_spec}, {tile})", f"ceil_div(ceil_div(({f.grid}) * {f.threads}, {f.width_spec}), {tile})"
        along_u, along_v = (cols, rows_) if f.col_is_u else (rows_, cols)
        new_grid[0] = f"({along_u}) if {tile} > 0 else ({grid[0]})"
        new_grid[1] = f"({along_v}) if {tile} > 0 else ({grid[1]})"
    new_block = [f"{tile} if {tile} > 0 else ({block[0]})", f"{rows} if {tile} > 0 else ({block[1]})",
                 f"1 if {tile} > 0 else ({block[2]})"]
    n = max(len(ctx.grid), len(ctx.block), max(t.u.dim, t.v.dim) + 1, 2)
    source = beside(ctx.source, a, f"{tile} > 0", params, "", kernel, NAME)
    first = {tile: tuple(x for x in (0, 32, 64) if x in (0,) + tiles), rows: (4, 8), pad: (0, 1)}
    for name, value in ctx.defaults.items():
        first[name] = (value,)
    what = (f"transpose: TILE x TILE tiles of `{t.staged.array}` staged in shared memory, read along its rows "
            f"and written along `{t.array}`'s, "
            f"TILE x ROWS threads a block, PAD 1 padding the tile's rows, any size")
    return Rewrite(NAME, source, tuple(params), what, tuple(constraints), tuple(new_grid[:n]), tuple(new_block[:n]),
                   first=first, helps="memory")
