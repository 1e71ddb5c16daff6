"""A matrix product already tiled by hand in shared memory, read as the contraction it computes, so
the contraction pass (agents/rewrite_contraction.py) can write its own tiles beside it.

The kernels people write after the naive product: a block of threads walks the shared index in
steps; at each step every thread copies one element of each operand into a shared tile (zero
where it falls outside), the block meets at a barrier, each thread sums the products of a row of
one tile and a column of the other into its own output, and the block meets again:

    for (int ph = 0; ph < Width / TILE; ++ph) {            // or: bk += TILE, or a <= aEnd with a += aStep
        Mds[ty][tx] = M[Row * Width + ph * TILE + tx];      // each tile filled from one operand
        Nds[ty][tx] = N[(ph * TILE + ty) * Width + Col];
        __syncthreads();
        for (int k = 0; k < TILE; ++k) sum += Mds[ty][k] * Nds[k][tx];
        __syncthreads();
    }
    P[Row * Width + Col] = sum;

What the reading proves on the kernel model and its syntax (else it declines with the reason):

- two static shared tiles, block barriers only (no atomics, shuffles or warp barriers), one loop
  over the steps at the top of the body and no guard before it;
- the step's body is the tiles' fills (`S[i][j] = G;`, or under an `if` with zero in its `else`;
  or a loop of them, each thread copying several elements, its variable a multiple of a copy's id),
  a barrier, the inner loop (`for (k = 0; k < D; ++k)` updating one sum by the product of one
  element of each tile), a barrier; pointers moved only by `p += e` before the loop or in the
  step's body (`A += BLOCKSIZE`), none of them an output;
- each fill's slot is a mixed-radix number in the thread's local ids (`ty, tx`; `tid / 32,
  tid % 32`), so each slot has one writer; each read of the tile in the inner loop is split along
  the same digits, each digit within the writer's range (the thread that wrote it exists), and
  the fill's value reads no local id its slot does not name (else two threads would write one
  slot with different values);
- the composed element, the fill's value with the writer's ids replaced by the read's digits, the
  pointers' moves and the step loop's variables put in (`ph = n`, `a = aBegin + aStep * n`), reads
  the global shared index `kk = n * D + k` only (the step's n and the inner k cancel), one local
  id and one block id on each side: the output's row `r = br * T + lr` and column, each tile's
  side T equal to the block's extent along that id;
- the statements after the loop (and their guard) write at indices of r and c only.

The contraction handed on: X and Y the composed elements over `kt_r`/`kt_c` and `kt_k` (through
any conversion the sum applies to a tile's element, `__half2float(As[ty][k])`); the sum's range
the step loop's condition at `n = kt_k / D` and the fills' bounds on the shared index (the zero a
fill puts past the end is no product at all); the output's bounds the guard's, or the original
launch's extent where no guard names a coordinate (the tiles stop where the original's threads
stop), or, where only the launch knows that extent, the tiled kernel's own grid of the original's
count of blocks.

Read as the compiler reads them: the file's function-like macros expanded (the SDK's
`AS(ty, tx)`), a variable in parentheses before a sign or a star as the variable (`(j) + (i)`,
which the parser alone takes for a cast), the launch's words as the original launch makes them
(`blockDim.x` its number, `get_global_id(1)` a block's id times it plus the local id).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kerntune.engine.expressions import ExpressionError
from kerntune.engine.expressions import parse as parse_expression

from . import affine
from .cooperate import (Decline, body_of, entry_constants, expression_names, inlined, is_pragma, kernel_spans,
                        launch_extent,
                        product_update, reads_thread_ids, spec_scalars, spec_text, strip_parens, substituted)
from .kernel_tree import span_of, syntax_nodes
from .model import Poly

N = "kt_n"  # the step loop's iteration, 0, 1, ...
ZEROS = frozenset({"0", "0.0", "0.f", "0.0f", "0.F", "0.0F", "0.", "0e0", "0.0e0"})
LOCAL, BLOCK = "local", "block"


@dataclass(frozen=True)
class Atom:
    """A thread id the reading knows: a local id (`threadIdx.y`, `tid / 32`, `tid % 32`) with the
    values it takes in a block, or a block id."""

    kind: str  # LOCAL or BLOCK
    dim: int
    op: str = ""  # "/" or "%" of the local id by `by`, "" for the id itself
    by: int = 0
    extent: int = 0  # a local atom's values: 0 .. extent - 1


@dataclass
class Fill:
    tile: str
    slot: list[str]  # each dimension's index as written
    value: str
    cond: str | None  # the fill's condition (the value where it holds, zero elsewhere)
    node: object
    position: int  # in the step's body
    # a loop around the fill (each thread copying several elements): its variable as a multiple of
    # a copy's own id (`i` = 16 * kt_fill0 for `for (i = 0; i < 32; i += 16)`)
    loops: dict = field(default_factory=dict)


def _named(node) -> list:
    return [c for c in node.named_children if c.type not in ("comment",)]


def _line(node) -> int:
    return node.start_point[0] + 1


class Reading:
    """The state of one reading of a kernel: its model, the whole numbers it may name, the launch."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.a = ctx.model
        self.numbers = {**entry_constants(ctx), **{k: v for k, v in self.a.defines.items()}}
        self.block = self._launch(ctx.block)
        self.atoms: dict[str, Atom] = {}
        self.loop_vars: dict[str, Poly] = {}  # the step loop's variables, each at iteration kt_n
        self.moves_before: dict[str, Poly] = {}  # pointer -> its move before the loop
        self.moves_step: list[tuple[str, Poly, int]] = []  # (pointer, move, position in the step's body)

    def _launch(self, dims) -> list[int | None]:
        env = {**self.ctx.limits.expression_names(), **self.ctx.defaults, **self.numbers}
        out = []
        for d in dims:
            try:
                v = parse_expression(str(d)).evaluate(env)
            except (ExpressionError, KeyError):
                v = None
            out.append(v if isinstance(v, int) and not isinstance(v, bool) else None)
        return out

    # names, atoms and polynomials ---------------------------------------------------------------

    def value(self, name: str) -> int | None:
        """A name's whole-number value where the file, the entry or the lifts give it."""
        if name in self.numbers:
            return self.numbers[name]
        inner = name[1:-1] if name.startswith("(") and name.endswith(")") else name
        if inner.strip().lstrip("-").isdigit():
            return int(inner)
        try:
            v = parse_expression(inner).evaluate(self.numbers)
        except (ExpressionError, KeyError, SyntaxError):
            return None
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    def number(self, p: Poly) -> int | None:
        total = 0
        for m, c in p.terms:
            v = c
            for n in m:
                got = self.value(n)
                if got is None:
                    return None
                v *= got
            total += v
        return total

    def atom(self, name: str) -> Atom | None:
        """The thread id an opaque name of a polynomial is; None for a name that reads no id.
        Decline for one that reads the launch in another way (`blockDim.x`, `get_global_id(0)`)."""
        if name in self.atoms:
            return self.atoms[name]
        if not reads_thread_ids(name):
            return None
        found = syntax_nodes(f"auto kt_e = {name};", ("parenthesized_expression",))
        node = strip_parens(found[0][0]) if found else None
        got = self._id(node, found[0][1]) if node is not None else None
        if got is None and node is not None and node.type == "binary_expression":
            op = found[0][1](node.child_by_field_name("operator"))
            inner = self._id(strip_parens(node.child_by_field_name("left")), found[0][1])
            by = self.value(" ".join(found[0][1](node.child_by_field_name("right")).split()))
            if op in ("/", "%") and inner is not None and inner.kind == LOCAL and by:
                extent = self.block[inner.dim] if inner.dim < len(self.block) else None
                if extent is None or extent % by:
                    raise Decline(f"`{name.strip('()')}` splits a block of {extent or 'unknown'} threads "
                                  f"into rows of {by}: not whole rows")
                got = Atom(LOCAL, inner.dim, op, by, by if op == "%" else extent // by)
        if got is None:
            raise Decline(f"`{name.strip('()')}` reads the launch other than by a thread's or a block's id")
        self.atoms[name] = got
        return got

    def _id(self, node, text_of) -> Atom | None:
        if node is None:
            return None
        while node.type == "cast_expression":
            node = strip_parens(node.child_by_field_name("value"))
        text = "".join(text_of(node).split())
        for kind, cuda, ocl in ((LOCAL, "threadIdx", "get_local_id"), (BLOCK, "blockIdx", "get_group_id")):
            for d in range(3):
                if text in (f"{cuda}.{'xyz'[d]}", f"{ocl}({d})"):
                    if kind == BLOCK:
                        return Atom(BLOCK, d)
                    extent = self.block[d] if d < len(self.block) else 1
                    if extent is None:
                        raise Decline(f"the block's extent along dimension {d} is not known")
                    return Atom(LOCAL, d, extent=extent)
        return None

    def poly(self, text: str, keep: dict[str, str] | None = None) -> Poly:
        """An expression of the kernel as a polynomial: its locals inlined, the step loop's
        variables at iteration kt_n, thread ids as atoms (opaque names)."""
        rename = {v: v for v in self.loop_vars} | (keep or {})
        try:
            p = affine.read(self.launch_text(self.expand(inlined(self.a, self.uncast(self.expand(text)), rename))))
        except affine.NotAffine as e:
            raise Decline(str(e)) from None
        left = p.names() & (set(self.a.locals) | set(self.a.changing)) - set(rename.values())
        if left:
            raise Decline(f"`{' '.join(text.split())}` reads `{sorted(left)[0]}` where it cannot be read")
        for v, at in self.loop_vars.items():
            p = p.substitute(v, at)
        for name in p.names():
            launch = self._launch_word(name)
            if launch is not None:
                p = p.substitute(name, launch)
        for name in p.names():
            self.atom(name)
        return p

    def launch_text(self, text: str) -> str:
        """An expression with the words that read the launch's shape (`blockDim.x`, `get_global_id(1)`,
        inside a bound `(K + blockDim.x - 1) / blockDim.x` too) as the original launch makes them."""
        if not reads_thread_ids(text):
            return text
        node, text_of = _wrapped(text)
        exprs = {}
        for n, t in syntax_nodes(f"auto kt_e = ({text});", ("field_expression", "call_expression")):
            key = "".join(t(n).split())
            if key not in exprs:
                got = self._launch_word(f"({t(n)})")
                if got is not None:
                    exprs[key] = render(got)
        return substituted(node, text_of, {}, exprs) if exprs else text

    def uncast(self, text: str) -> str:
        """An expression with a variable in parentheses before a sign or a star read as the
        variable, not as a cast: `(tx) + (ty) * 16` is tx plus (ty) * 16 where tx is no type (the
        parser alone reads a cast of `+(ty)`)."""
        known = set(self.a.locals) | set(self.a.changing) | {x.name for x in self.a.signature.args} | \
            set(self.numbers) | set(self.loop_vars)
        for _ in range(16):
            found = syntax_nodes(f"auto kt_e = ({text});", ("cast_expression",))
            hit = None
            for node, t in found:
                kind = node.child_by_field_name("type")
                value = node.child_by_field_name("value")
                if kind is not None and t(kind).strip() in known and value is not None and \
                        value.type in ("unary_expression", "pointer_expression"):
                    hit = (node, t, t(kind).strip(), value)
                    break
            if hit is None:
                return text
            node, t, name, value = hit
            raw = f"auto kt_e = ({text});".encode("utf-8")
            op = value.child_by_field_name("operator")
            operand = value.child_by_field_name("argument")
            new = f"{name} {t(op)} {t(operand)}"
            whole = (raw[:node.start_byte].decode("utf-8") + new + raw[node.end_byte:].decode("utf-8"))
            text = whole[len("auto kt_e = ("):-len(");")]
        return text

    def expand(self, text: str, wrap: tuple[str, str] = ("auto kt_e = (", ");")) -> str:
        """`text` (an expression, or a statement with `wrap` around it) with the file's
        function-like macros expanded as the preprocessor does, each parameter of the body replaced
        by its argument as written (`AS(ty, k)` with `#define AS(i, j) As[(j) + (i) * B]`)."""
        macros = self.a.macros
        for _ in range(8):  # a macro calling another: a few levels, never without end
            found = [(n, t) for n, t in syntax_nodes(wrap[0] + text + wrap[1], ("call_expression",))
                     if n.child_by_field_name("function").type == "identifier"
                     and t(n.child_by_field_name("function")) in macros]
            if not found:
                return text
            raw = (wrap[0] + text + wrap[1]).encode("utf-8")
            out, at = [], 0
            for node, t in found:
                if node.start_byte < at:
                    continue  # inside a call expanded already: its turn comes next time round
                params, body = macros[t(node.child_by_field_name("function"))]
                args = [t(x) for x in _named(node.child_by_field_name("arguments"))]
                if len(args) != len(params):
                    raise Decline(f"`{t(node)}` calls a macro with {len(args)} arguments, not {len(params)}")
                values = dict(zip(params, args))
                b_raw = body.encode("utf-8")
                pieces, b_at = [], 0
                for ident, bt in syntax_nodes(f"auto kt_e = ({body});", ("identifier", "type_identifier")):
                    start = ident.start_byte - len(b"auto kt_e = (")
                    if bt(ident) in values and 0 <= start:
                        # a parameter the body already wraps in parentheses (`(j) + (i) * B`, which
                        # the parser may take for a cast) keeps its argument one expression
                        up = ident.parent
                        wrapped = up is not None and up.type in ("parenthesized_expression", "type_descriptor")
                        value = f"({values[bt(ident)]})" if wrapped else values[bt(ident)]
                        pieces += [b_raw[b_at:start].decode("utf-8"), value]
                        b_at = start + len(bt(ident).encode("utf-8"))
                expanded = "".join(pieces) + b_raw[b_at:].decode("utf-8")
                out += [raw[at:node.start_byte].decode("utf-8"), expanded]
                at = node.end_byte
            whole = "".join(out) + raw[at:].decode("utf-8")
            text = whole[len(wrap[0]):len(whole) - len(wrap[1])]
        raise Decline(f"`{' '.join(text.split())}` expands macros more than eight levels deep")

    def _launch_word(self, name: str) -> Poly | None:
        """What the original launch makes of a word that reads its shape: a block's extent its
        number, a global id its block's id times that plus the local id, the grid's extents the
        spec's launch over the kernel's arguments; None for any other name."""
        if not reads_thread_ids(name):
            return None
        found = syntax_nodes(f"auto kt_e = {name};", ("parenthesized_expression",))
        node = strip_parens(found[0][0]) if found else None
        while node is not None and node.type == "cast_expression":
            node = strip_parens(node.child_by_field_name("value"))
        if node is None:
            return None
        text = "".join(found[0][1](node).split())
        cuda = self.a.dialect == "cuda"
        for d in range(3):
            local = f"(threadIdx.{'xyz'[d]})" if cuda else f"(get_local_id({d}))"
            group = f"(blockIdx.{'xyz'[d]})" if cuda else f"(get_group_id({d}))"
            block = self.block[d] if d < len(self.block) else 1
            if text in (f"blockDim.{'xyz'[d]}", f"get_local_size({d})", f"get_global_id({d})", f"gridDim.{'xyz'[d]}",
                        f"get_num_groups({d})", f"get_global_size({d})"):
                if block is None:
                    raise Decline(f"`{text}` reads the block's extent along dimension {d}, which is not known")
            if text in (f"blockDim.{'xyz'[d]}", f"get_local_size({d})"):
                return Poly.const(block)
            if text == f"get_global_id({d})":
                return Poly.name(group) * Poly.const(block) + Poly.name(local)
            if text in (f"gridDim.{'xyz'[d]}", f"get_num_groups({d})", f"get_global_size({d})"):
                if d >= len(self.ctx.grid):
                    return Poly.const(1 if "size" not in text else block)
                per = str(block) if text.startswith("get_global_size") else "1"
                try:
                    _, c_text = launch_extent(self.ctx, d, per, spec_scalars(self.ctx), text)
                except Decline:
                    raise Decline(f"`{text}` reads the launch's grid, `{self.ctx.grid[d]}`, which the kernel's "
                                  f"arguments do not give") from None
                return Poly.name(f"({c_text})")
        return None

    def atoms_of(self, p: Poly, kind: str | None = None) -> set[str]:
        return {n for n in p.names() if (a := self.atom(n)) is not None and (kind is None or a.kind == kind)}


def divide(p: Poly, by: Poly) -> Poly | None:
    """p / by where `by` is one term and divides every term of p; None otherwise."""
    if len(by.terms) != 1:
        return None
    (mono, coeff), = by.terms
    out: dict = {}
    for m, c in p.terms:
        rest = list(m)
        for n in mono:
            if n not in rest:
                return None
            rest.remove(n)
        if c % coeff:
            return None
        out[tuple(rest)] = out.get(tuple(rest), 0) + c // coeff
    return Poly._make(out)


def render(p: Poly) -> str:
    """A polynomial as C."""
    if p.is_zero:
        return "0"
    parts = []
    for m, c in p.terms:
        body = " * ".join(m)
        parts.append(f"{c}" if not m else body if c == 1 else f"-{body}" if c == -1 else f"{c} * {body}")
    return "(" + " + ".join(parts).replace("+ -", "- ") + ")"


def substitute(p: Poly, values: dict[str, Poly]) -> Poly:
    """Every name of `values` replaced at once (a swap of two names stays a swap)."""
    temp = {n: f"kt_tmp{i}" for i, n in enumerate(values)}
    for n, t in temp.items():
        p = p.substitute(n, Poly.name(t))
    for n, t in temp.items():
        p = p.substitute(t, values[n])
    return p


# the kernel's statements ---------------------------------------------------------------------------

def _advance(node, text_of, pointers) -> tuple[str, str] | None:
    """(pointer, its move as a signed expression) of a statement `p += e;` or `p -= e;`."""
    if node.type != "expression_statement" or not _named(node):
        return None
    e = strip_parens(_named(node)[0])
    if e.type != "assignment_expression":
        return None
    left = text_of(e.child_by_field_name("left")).strip()
    op = text_of(e.child_by_field_name("operator"))
    if left not in pointers or op not in ("+=", "-="):
        return None
    right = text_of(e.child_by_field_name("right"))
    return left, right if op == "+=" else f"-({right})"


def _barrier(node, text_of, barriers) -> bool:
    if node.type != "expression_statement" or not _named(node):
        return False
    e = strip_parens(_named(node)[0])
    return e.type == "call_expression" and text_of(e.child_by_field_name("function")).strip() in barriers


def _element(node, text_of) -> tuple[str, list[str]] | None:
    """(array, each dimension's index) of `S[i][j]` or `S[e]`."""
    node = strip_parens(node)
    dims = []
    while node.type == "subscript_expression":
        idx = node.child_by_field_name("indices") or node.child_by_field_name("index")
        inner = _named(idx) if idx is not None and idx.type == "subscript_argument_list" else [idx]
        if len(inner) != 1 or inner[0] is None:
            return None
        dims.insert(0, text_of(inner[0]))
        node = strip_parens(node.child_by_field_name("argument"))
    if node.type != "identifier" or not dims:
        return None
    return text_of(node).strip(), dims


def _assignment(node, text_of, tiles) -> tuple[str, list[str], str] | None:
    """(tile, slot, value) of a statement `S[...] = value;` into a shared tile."""
    if node.type == "compound_statement" and len(_named(node)) == 1:
        node = _named(node)[0]
    if node.type != "expression_statement" or not _named(node):
        return None
    e = strip_parens(_named(node)[0])
    if e.type != "assignment_expression" or text_of(e.child_by_field_name("operator")) != "=":
        return None
    got = _element(e.child_by_field_name("left"), text_of)
    if got is None or got[0] not in tiles:
        return None
    return got[0], got[1], text_of(e.child_by_field_name("right"))


CONVERSIONS = ("__float2", "__int2", "__uint2", "__double2", "__short2", "convert_")


def _zero(text: str) -> bool:
    """Whether an expression is zero: a literal, or one cast or converted (`(float)0`,
    `__float2half(0.0f)`, OpenCL's `convert_half(0)`)."""
    found = syntax_nodes(f"auto kt_e = ({text});", ("parenthesized_expression",))
    if not found:
        return False
    node, text_of = found[0]
    for _ in range(8):
        node = strip_parens(node)
        if node.type == "cast_expression":
            node = node.child_by_field_name("value")
        elif node.type == "call_expression" and len(_named(node.child_by_field_name("arguments"))) == 1 and \
                text_of(node.child_by_field_name("function")).strip().startswith(CONVERSIONS):
            node = _named(node.child_by_field_name("arguments"))[0]
        else:
            break
    return "".join(text_of(node).split()) in ZEROS


def _fill(node, text_of, tiles, position) -> Fill | None:
    """A tile's fill: `S[..] = G;`, `if (c) S[..] = G; else S[..] = 0;` (or the other way round),
    `S[..] = c ? G : 0;`."""
    got = _assignment(node, text_of, tiles)
    if got is not None:
        tile, slot, value = got
        found = syntax_nodes(f"auto kt_e = ({value});", ("parenthesized_expression",))
        v = strip_parens(found[0][0]) if found else None
        if v is not None and v.type == "conditional_expression":
            then, other = (found[0][1](v.child_by_field_name(f)) for f in ("consequence", "alternative"))
            cond = found[0][1](v.child_by_field_name("condition"))
            if _zero(other):
                return Fill(tile, slot, then, cond, node, position)
            if _zero(then):
                return Fill(tile, slot, other, f"!({cond})", node, position)
        return Fill(tile, slot, value, None, node, position)
    if node.type != "if_statement" or node.child_by_field_name("alternative") is None:
        return None
    cond = node.child_by_field_name("condition")
    inner = _named(cond)
    cond_text = text_of(inner[0]) if cond.type == "condition_clause" and len(inner) == 1 else text_of(cond)
    alt = node.child_by_field_name("alternative")
    if alt.type == "else_clause":
        alt = _named(alt)[0] if _named(alt) else alt
    then = _assignment(node.child_by_field_name("consequence"), text_of, tiles)
    other = _assignment(alt, text_of, tiles)
    if then is None or other is None or then[0] != other[0] or \
            ["".join(d.split()) for d in then[1]] != ["".join(d.split()) for d in other[1]]:
        return None
    if _zero(other[2]):
        return Fill(then[0], then[1], then[2], cond_text, node, position)
    if _zero(then[2]):
        return Fill(then[0], then[1], other[2], f"!({cond_text})", node, position)
    return None


def _for_parts(node, text_of) -> tuple[list[tuple[str, str]], object, list]:
    """A for loop's variables with their starts, its condition, and its updates (nodes)."""
    starts = []
    init = node.child_by_field_name("initializer")
    if init is not None and init.type == "declaration":
        for d in init.children_by_field_name("declarator"):
            if d.type != "init_declarator":
                raise Decline(f"the loop at line {_line(node)} declares `{text_of(d)}` without a start")
            starts.append((text_of(d.child_by_field_name("declarator")).strip(), text_of(d.child_by_field_name("value"))))
    elif init is not None:
        exprs = [init]
        while exprs and exprs[0].type == "comma_expression":
            e = exprs.pop(0)
            exprs[:0] = [e.child_by_field_name("left"), e.child_by_field_name("right")]
        for e in exprs:
            e = strip_parens(e)
            if e.type != "assignment_expression" or text_of(e.child_by_field_name("operator")) != "=":
                raise Decline(f"the loop at line {_line(node)} starts with `{text_of(e)}`, no variable's start")
            starts.append((text_of(e.child_by_field_name("left")).strip(), text_of(e.child_by_field_name("right"))))
    updates = []
    u = node.child_by_field_name("update")
    stack = [u] if u is not None else []
    while stack:
        e = strip_parens(stack.pop(0))
        if e.type == "comma_expression":
            stack[:0] = [e.child_by_field_name("left"), e.child_by_field_name("right")]
        else:
            updates.append(e)
    return starts, node.child_by_field_name("condition"), updates


def _step(e, text_of) -> tuple[str, str]:
    """(variable, what one iteration adds) of `v += e`, `v -= e`, `++v`, `v++`."""
    if e.type == "update_expression":
        var = text_of(e.child_by_field_name("argument")).strip()
        return var, "1" if "++" in text_of(e) else "-1"
    if e.type == "assignment_expression" and text_of(e.child_by_field_name("operator")) in ("+=", "-="):
        right = text_of(e.child_by_field_name("right"))
        sign = text_of(e.child_by_field_name("operator")) == "-="
        return text_of(e.child_by_field_name("left")).strip(), f"-({right})" if sign else right
    raise Decline(f"the loop's update `{text_of(e)}` does not step a variable by a fixed amount")


def _comparison(node, text_of) -> tuple[str, str, str]:
    node = strip_parens(node)
    if node.type == "condition_clause" and len(_named(node)) == 1:
        node = strip_parens(_named(node)[0])
    ops = {"<", "<=", ">", ">="}
    if node.type != "binary_expression" or text_of(node.child_by_field_name("operator")) not in ops:
        raise Decline(f"the loop's condition `{text_of(node)}` is not one comparison")
    return (text_of(node.child_by_field_name("left")), text_of(node.child_by_field_name("operator")),
            text_of(node.child_by_field_name("right")))


def conjuncts(text: str) -> list[tuple[str, str, str]]:
    """The comparisons a condition holds for (`a < b && c <= d`, `!(a >= b || ...)`), each (left,
    operator, right) with `<` or `<=`... as written; Decline for any other condition."""
    found = syntax_nodes(f"auto kt_e = ({text});", ("parenthesized_expression",))
    if not found:
        raise Decline(f"the condition `{text}` cannot be read")
    node, text_of = found[0]
    flip = {"<": ">=", "<=": ">", ">": "<=", ">=": "<"}
    out = []

    def walk(n, negated):
        n = strip_parens(n)
        if n.type == "unary_expression" and text_of(n.child_by_field_name("operator")) == "!":
            return walk(n.child_by_field_name("argument"), not negated)
        if n.type == "binary_expression":
            op = text_of(n.child_by_field_name("operator"))
            if op == ("||" if negated else "&&"):
                walk(n.child_by_field_name("left"), negated)
                walk(n.child_by_field_name("right"), negated)
                return
            if op in flip:
                out.append((text_of(n.child_by_field_name("left")), flip[op] if negated else op,
                            text_of(n.child_by_field_name("right"))))
                return
        raise Decline(f"the condition's part `{' '.join(text_of(n).split())}` is not a comparison")
    walk(node, False)
    return out


# the reading ---------------------------------------------------------------------------------------

def _flat(node) -> list:
    """A compound statement's statements, nested blocks flattened, comments and pragmas left out."""
    out = []
    for s in _named(node) if node.type == "compound_statement" else [node]:
        if s.type == "compound_statement":
            out += _flat(s)
        elif s.type not in ("preproc_call", "comment"):
            out.append(s)
    return out


def _wrapped(text: str):
    found = syntax_nodes(f"auto kt_e = ({text});", ("parenthesized_expression",))
    if not found:
        raise Decline(f"`{' '.join(text.split())}` cannot be read")
    return found[0]


class Tiled(Reading):
    """The reading of a hand-tiled product (the module's docstring says what it proves)."""

    def read(self) -> dict:
        a, ctx = self.a, self.ctx
        if a.parse_error:  # what the parser could not read may hide a write or a barrier
            raise Decline(a.parse_error)
        if a.atomics or a.shuffles:
            raise Decline("its threads also combine by atomics or shuffles, not only through shared tiles")
        if any(b.scope != "block" for b in a.barriers) or not a.barriers:
            raise Decline("its threads meet other than at the block's barriers around shared tiles")
        tiles = a.shared_arrays()
        self.tiles = {t.name for t in tiles}
        if len(tiles) != 2 or any(t.dynamic for t in tiles) or set(a.shared) - self.tiles:
            raise Decline("its shared memory is not two static tiles (one of each operand)")
        body = body_of(ctx.source, kernel_spans(ctx.source, a))
        text_of = self.text_of = body.text_of
        stmts = body.statements
        loops = [s for s in stmts if s.type == "for_statement"]
        if len(loops) != 1:
            raise Decline("not one loop over the tiles' steps in the kernel's body")
        at = stmts.index(loops[0])
        if any(g <= at for g in body.guard_at):
            raise Decline("a guard before the tiles' loop (the threads it stops would miss the block's barriers)")
        self.pointers = set(a.pointers)
        early = []  # tiles' slots written before the loop (a tutorial's zeroing)
        for s in stmts[:at]:
            moved = _advance(s, text_of, self.pointers)
            written = _assignment(*self._expanded(s), self.tiles) if s.type == "expression_statement" else None
            if moved:
                self.moves_before[moved[0]] = self.moves_before.get(moved[0], Poly()) + self._invariant(moved[1])
            elif written:
                early.append((written, _line(s)))
            elif s.type != "declaration" and not is_pragma(s, text_of):
                raise Decline(f"a statement before the tiles' loop that declares nothing and moves no pointer "
                              f"(line {_line(s)})")
        self._steps(loops[0])
        fills, inner = self._step_body(loops[0])
        for (tile, slot, _), line in early:
            # the same thread writes the same slot again in the first step, before any read: dead
            fill = fills[tile]
            if fill.loops or ["".join(x.split()) for x in slot] != ["".join(x.split()) for x in fill.slot]:
                raise Decline(f"`{tile}` is written before the tiles' loop (line {line}) at another slot than its fill")
        k, depth, acc, factors, update = self._inner(inner)
        self.k = k
        self.depth = depth
        reads = []
        for f in factors:
            reads.append(self._factor(self.expand(f)))
        if len({t for t, _, _ in reads}) != 2:
            raise Decline("the product does not read one element of each tile")
        operands = [{**self._operand(fills[t], dims), "around": around} for t, dims, around in reads]
        return self._contraction(operands, stmts[at + 1:], body, at, acc, update)

    def _factor(self, text: str) -> tuple[str, list[str], tuple[str, str]]:
        """(tile, the read's indices, the text around the element) of a factor of the sum: one
        element of a tile, as itself or through conversions that read nothing else
        (`__half2float(As[ty][k])`, `(float)As[ty][k]`)."""
        node, t_of = _wrapped(text)
        got = _element(node, t_of)
        if got is not None and got[0] in self.tiles:
            return got[0], got[1], ("", "")
        found = [(n, t) for n, t in syntax_nodes(f"auto kt_e = ({text});", ("subscript_expression",))
                 if (e := _element(n, t)) is not None and e[0] in self.tiles
                 and not (n.parent.type == "subscript_expression" and n.parent.child_by_field_name("argument") == n)]
        if len(found) == 1:
            n, t = found[0]
            raw = f"auto kt_e = ({text});".encode("utf-8")
            before = raw[len(b"auto kt_e = ("):n.start_byte].decode("utf-8")
            after = raw[n.end_byte:len(raw) - len(b");")].decode("utf-8")
            rest = expression_names(before + "kt_tile" + after) - {"kt_tile"}
            calls = {t2(c.child_by_field_name("function")) for c, t2 in
                     syntax_nodes(f"auto kt_e = ({before}kt_tile{after});", ("call_expression",))}
            if not rest - calls and not reads_thread_ids(before + after):
                e = _element(n, t)
                return e[0], e[1], (before, after)
        raise Decline(f"the product's factor `{' '.join(text.split())}` is not an element of a shared tile")

    def _expanded(self, node):
        """A statement with the file's function-like macros expanded (the node itself, and its
        text function, where it calls none), read anew."""
        text = self.text_of(node)
        out = self.expand(text, ("void kt_f() { ", " }"))
        if out == text:
            return node, self.text_of
        found = [(n, t) for n, t in syntax_nodes(f"void kt_f() {{ {out} }}", ("compound_statement",))]
        statements = _named(found[0][0]) if found else []
        if len(statements) != 1:
            raise Decline(f"the statement at line {_line(node)} is no statement once its macros are expanded")
        return statements[0], found[0][1]

    def _invariant(self, text: str) -> Poly:
        p = self.poly(text)
        if self.atoms_of(p, LOCAL) or N in p.names():
            raise Decline(f"a pointer moves by `{' '.join(text.split())}`, which differs between threads or steps")
        return p

    def _steps(self, loop) -> None:
        """The step loop's variables at iteration kt_n, and its condition over kt_n."""
        text_of = self.text_of
        starts, cond, updates = _for_parts(loop, text_of)
        steps = dict(_step(u, text_of) for u in updates)
        if not starts or set(steps) != {v for v, _ in starts}:
            raise Decline("the tiles' loop does not step each variable it starts by a fixed amount")
        at = {v: self.poly(s0) + self._invariant(steps[v]) * Poly.name(N) for v, s0 in starts}
        for v, p in at.items():
            if self.atoms_of(p, LOCAL):
                raise Decline(f"the tiles' loop starts `{v}` at a value that differs between a block's threads")
        self.loop_vars = at
        if cond is None:
            raise Decline("the tiles' loop has no condition")
        left, op, right = _comparison(cond, text_of)
        d = self.poly(left) - self.poly(right)
        if op in (">", ">="):
            d, op = -d, {">": "<", ">=": "<="}[op]
        slope = self.number(d.coefficient(N)) if d.degree_in(N) == 1 else None
        if slope is None or slope <= 0 or self.atoms_of(d):
            raise Decline(f"the tiles' loop condition `{' '.join(text_of(cond).split())}` does not end the steps "
                          f"at a bound the block's threads share")
        self.loop_cond = (d, op)

    def _step_body(self, loop):
        """The tiles' fills (one each) and the inner loop, in the order fills, barrier, inner
        loop, barrier; the pointers' moves in between."""
        barriers = {b.call for b in self.a.barriers}
        fills: dict[str, Fill] = {}
        inner, inner_at, meets = None, -1, []
        for i, written in enumerate(_flat(loop.child_by_field_name("body"))):
            line = _line(written)
            s, text_of = (written, self.text_of) if written.type == "for_statement" else self._expanded(written)
            moved = _advance(s, text_of, self.pointers)
            if moved:
                self.moves_step.append((moved[0], self._invariant(moved[1]), i))
                continue
            if _barrier(s, text_of, barriers):
                meets.append(i)
                continue
            if s.type == "declaration":
                continue
            if s.type == "for_statement":
                copies = self._fill_loop(s, i)
                if copies:
                    for f in copies:
                        if f.tile in fills:
                            raise Decline(f"the tile `{f.tile}` is filled by more than one statement")
                        fills[f.tile] = f
                    continue
                if inner is not None:
                    raise Decline(f"more than one loop in the tiles' loop (line {line})")
                inner, inner_at = s, i
                continue
            f = _fill(s, text_of, self.tiles, i)
            if f is None:
                raise Decline(f"a statement in the tiles' loop that is neither a tile's fill, a barrier, a pointer's "
                              f"move nor the loop over the tiles (line {line})")
            if f.tile in fills:
                raise Decline(f"the tile `{f.tile}` is filled by more than one statement")
            fills[f.tile] = f
        if inner is None or set(fills) != self.tiles:
            raise Decline("the tiles' loop does not fill both tiles and sum over them in a loop")
        if len(meets) != len(self.a.barriers):
            raise Decline("a barrier outside the tiles' loop's body (the block meets where the tiles do not ask it)")
        first, last = min(f.position for f in fills.values()), max(f.position for f in fills.values())
        # the barrier that keeps a step's fills from the last step's sum: after the sum, or first in
        # the step (before its fills)
        if not any(last < m < inner_at for m in meets) or not any(m > inner_at or m < first for m in meets):
            raise Decline("the tiles' loop has no barrier between the fills and the sum, or none between the sum "
                          "and the next step's fills")
        return fills, inner

    def _fill_loop(self, loop, position: int) -> list[Fill]:
        """The fills of a loop in the step whose body is only fills (each thread copying several
        elements: `for (i = 0; i < 32; i += 16) As[ty][tx + i] = ...`), its variable a multiple of a
        copy's own id; [] for any other loop."""
        body = [self._expanded(x) for x in _flat(loop.child_by_field_name("body"))]
        fills = [_fill(x, t, self.tiles, position) for x, t in body]
        if not fills or None in fills:
            return []
        starts, cond, updates = _for_parts(loop, self.text_of)
        if len(starts) != 1 or len(updates) != 1 or cond is None:
            raise Decline(f"the loop of fills at line {_line(loop)} does not run one variable from 0 by a step")
        var, start = starts[0]
        left, op, right = _comparison(cond, self.text_of)
        stepped, step = _step(updates[0], self.text_of)
        numbers = [self.number(self.poly(x)) for x in (start, right, step)]
        if left.strip() != var or op != "<" or stepped != var or None in numbers or numbers[0] != 0 or numbers[2] <= 0:
            raise Decline(f"the loop of fills at line {_line(loop)} does not run `{var}` from 0 by a fixed step to a "
                          f"bound the file fixes")
        name = f"kt_fill{len([a for a in self.atoms if a.startswith('kt_fill')])}"
        self.atoms[name] = Atom(LOCAL, 10 + len(self.atoms), extent=-(-numbers[1] // numbers[2]))
        for f in fills:
            f.loops = {var: Poly.const(numbers[2]) * Poly.name(name)}
        return fills

    def fill_poly(self, fill: Fill, text: str) -> Poly:
        """An expression of a fill as a polynomial, the variable of a loop around it a multiple of
        the copy's id."""
        p = self.poly(text, {v: v for v in fill.loops})
        for v, at in fill.loops.items():
            p = p.substitute(v, at)
        return p

    def _inner(self, inner):
        text_of = self.text_of
        starts, cond, updates = _for_parts(inner, text_of)
        if len(starts) != 1 or len(updates) != 1 or cond is None:
            raise Decline("the loop over the tiles does not run one variable from a start to a bound")
        k, start = starts[0]
        if self.poly(start, {k: k}).number != 0 or _step(updates[0], text_of) != (k, "1"):
            raise Decline(f"the loop over the tiles does not run `{k}` from 0 by one")
        left, op, right = _comparison(cond, text_of)
        if left.strip() != k or op != "<":
            raise Decline(f"the loop over the tiles does not run `{k}` up to a bound (`{k} < D`)")
        depth = self.poly(right)
        if self.atoms_of(depth) or N in depth.names() or not (self.number(depth) or 0) > 0:
            raise Decline(f"the loop over the tiles runs `{k}` to `{right.strip()}`, no depth the file fixes")
        span = span_of(self.ctx.source, inner)
        here = [i for i, lp in enumerate(self.a.loops) if lp.span == span]
        sums = [x for x in self.a.accumulators if x.var not in self.pointers]
        if len(sums) != 1 or sums[0].op != "sum" or not here or sums[0].loop != here[0]:
            raise Decline("the loop over the tiles does not carry one sum")
        acc = sums[0]
        update, factors = product_update(inner, acc.var, text_of)
        if len(factors) != 2:
            raise Decline("the sum's update is not the product of two elements")
        return k, depth, acc, factors, update

    # composing a tile's read with its fill ----------------------------------------------------------

    def _digits(self, slot: Poly, tile: str) -> list[tuple[str, Poly, int, int]]:
        """A fill's slot along one dimension as a mixed-radix number in the thread's local ids:
        (atom, its weight, the weight's value, the atom's extent), lightest first; Decline where
        two threads could write one slot."""
        out = []
        rest = slot
        for name in sorted(self.atoms_of(slot)):
            atom = self.atom(name)
            weight = slot.coefficient(name)
            if atom.kind != LOCAL or slot.degree_in(name) != 1 or self.atoms_of(weight):
                raise Decline(f"the fill of `{tile}` writes at a slot that is not a sum of the thread's local ids")
            value = self.number(weight)
            if value is None or value <= 0:
                raise Decline(f"the fill of `{tile}` weighs `{name.strip('()')}` by `{weight}`, no positive number "
                              f"the file fixes")
            out.append((name, weight, value, atom.extent))
            rest = rest - weight * Poly.name(name)
        if not rest.is_zero or not out:
            raise Decline(f"the fill of `{tile}` writes at a slot that is not a sum of the thread's local ids")
        out.sort(key=lambda d: d[2])
        if out[0][2] != 1 or any(hi[2] < lo[2] * lo[3] for lo, hi in zip(out, out[1:])):
            raise Decline(f"two threads of a block write one slot of `{tile}`")
        return out

    def _independent(self, names, what: str) -> None:
        """Local ids that vary apart: of different dimensions, or a row and column of one (`t / 32`,
        `t % 32`)."""
        by_dim: dict[int, list[Atom]] = {}
        for n in names:
            atom = self.atom(n)
            by_dim.setdefault(atom.dim, []).append(atom)
        for atoms in by_dim.values():
            if len(atoms) > 1 and not (len(atoms) == 2 and {x.op for x in atoms} == {"/", "%"}
                                       and atoms[0].by == atoms[1].by):
                raise Decline(f"{what} reads one local id in two ways that do not vary apart")

    def _range(self, p: Poly, what: str) -> tuple[int, int]:
        """The least and greatest values of a polynomial over the reader's local ids and the inner
        loop's variable."""
        lo = hi = 0
        for m, c in p.terms:
            moving = [n for n in m if n == self.k or self.atom(n) is not None]
            rest = self.number(Poly(((tuple(n for n in m if n not in moving), c),)))
            if rest is None or len(moving) > 1:
                raise Decline(f"{what} is not a sum of the thread's ids and the loop's variable with weights the "
                              f"file fixes")
            if not moving:
                lo, hi = lo + rest, hi + rest
                continue
            n = moving[0]
            top = (self.number(self.depth) if n == self.k else self.atom(n).extent) - 1
            if self.atom(n) is not None and self.atom(n).kind != LOCAL:
                raise Decline(f"{what} reads the block's id")
            lo, hi = lo + min(0, rest * top), hi + max(0, rest * top)
        return lo, hi

    def _solve(self, fill: Fill, dims: list[str]) -> tuple[dict[str, str], dict[str, Poly]]:
        """Which copy filled the slot read: each of the writer's ids (renamed apart from the
        reader's, `kt_w0`...) as a function of the read. The read is split along the slot's digits
        where each part stays within its digit's range; else, where the slot's digits cover a
        range without gaps, the lightest digit takes the rest of the read (the fill's value must
        then move with the slot's digits as the slot does: the others cancel)."""
        if len(dims) != len(fill.slot):
            raise Decline(f"`{fill.tile}` is read with {len(dims)} indices and filled with {len(fill.slot)}")
        array = next(x for x in self.a.shared_arrays() if x.name == fill.tile)
        if len(array.dims) != len(dims):
            raise Decline(f"`{fill.tile}` is declared with {len(array.dims)} dimensions and read with {len(dims)}")
        rename: dict[str, str] = {}
        values: dict[str, Poly] = {}
        for w, r, size, declared in zip(fill.slot, dims, array.sizes or (None,) * len(dims), array.dims):
            digits = self._digits(self.fill_poly(fill, w), fill.tile)
            size = size if size is not None else self.number(self.poly(declared)) if declared else None
            if size is None or sum(d[2] * (d[3] - 1) for d in digits) >= size:
                raise Decline(f"the fill of `{fill.tile}` writes past its `[{declared}]`"
                              if size is not None else f"`{fill.tile}`'s size `[{declared}]` is not known")
            for name, *_ in digits:
                if name in rename:
                    raise Decline(f"the fill of `{fill.tile}` names `{name.strip('()')}` in two of its indices")
                rename[name] = f"kt_w{len(rename)}"
            read = self.poly(r, {self.k: self.k})
            what = f"the read `{fill.tile}[{' '.join(r.split())}]`"
            try:
                parts = self._split(read, digits, what)
            except Decline:
                dense = digits[0][1].number == 1 and all(hi[2] == lo[2] * lo[3] for lo, hi in zip(digits, digits[1:]))
                lo, hi = self._range(read, what)
                if not dense or lo < 0 or hi >= digits[-1][2] * digits[-1][3]:
                    raise
                rest = Poly()
                for name, weight, _, _ in digits[1:]:
                    rest = rest + weight * Poly.name(rename[name])
                parts = [read - rest] + [Poly.name(rename[name]) for name, *_ in digits[1:]]
            for (name, *_), part in zip(digits, parts):
                values[rename[name]] = part
        self._independent(rename, f"the fill of `{fill.tile}`")
        return rename, values

    def _split(self, read: Poly, digits, what: str) -> list[Poly]:
        """The read split along the slot's digits, each part within its digit's range."""
        parts = [Poly() for _ in digits]
        for m, c in read.terms:
            term = Poly(((m, c),))
            rest = self.number(Poly(((tuple(n for n in m if n != self.k and self.atom(n) is None), c),)))
            heavy = [i for i, d in enumerate(digits) if rest is not None and rest % d[2] == 0]
            got = divide(term, digits[heavy[-1]][1]) if heavy else None
            if got is None:
                raise Decline(f"{what} does not split along the fill's slot")
            parts[heavy[-1]] = parts[heavy[-1]] + got
        for (_, _, _, extent), part in zip(digits, parts):
            lo, hi = self._range(part, what)
            if lo < 0 or hi >= extent:
                raise Decline(f"{what} reaches slots no thread of the block fills")
        return parts

    def _offset(self, array: str, position: int | None) -> Poly:
        """How far `array` has moved where it is read: its moves before the loop, a step's moves
        per step, and this step's moves before `position` (None: after the loop)."""
        out = self.moves_before.get(array, Poly())
        for p, move, i in self.moves_step:
            if p != array:
                continue
            if position is None:
                raise Decline(f"`{array}` moves in the tiles' loop and is used after it")
            out = out + move * Poly.name(N) + (move if i < position else Poly())
        return out

    def _globals(self, text: str) -> list[tuple[str, str, str]]:
        """(the element as written without spaces, its array, its index) of each element of a
        pointer argument an expression reads or writes."""
        out = []
        for node, text_of in syntax_nodes(f"auto kt_e = ({text});", ("subscript_expression",)):
            got = _element(node, text_of)
            if got is not None and got[0] in self.pointers:
                if len(got[1]) != 1:
                    raise Decline(f"`{text_of(node)}` indexes a pointer twice")
                out.append(("".join(text_of(node).split()), got[0], got[1][0]))
        return out

    def canon(self, p: Poly) -> Poly:
        """The polynomial with every name the file, the entry or the lifts give a number replaced by
        it (`BLOCK_SIZE` and the 16 its launch says are one)."""
        for name in p.names():
            v = self.value(name) if self.atom(name) is None and name not in (N, "kt_k", "kt_r", "kt_c") else None
            if v is not None:
                p = p.substitute(name, Poly.const(v))
        return p

    def settle(self, p: Poly, values: dict[str, Poly]) -> Poly:
        """`values` put in; where thread ids or the step are left, the same with the names of known
        value as their numbers (the ids may cancel only then)."""
        q = substitute(p, values)
        if self.atoms_of(q) or N in q.names():
            q = self.canon(substitute(self.canon(p), {k: self.canon(v) for k, v in values.items()}))
        return q

    def _composed(self, p: Poly, writer: tuple[dict[str, str], dict[str, Poly]], what: str) -> Poly:
        rename, values = writer
        for name, temp in rename.items():
            p = p.substitute(name, Poly.name(temp))
        p = self.settle(p, values)
        if set(rename.values()) & p.names():
            raise Decline(f"{what} moves with the copy that wrote it other than its slot does")
        p = self.settle(p, {self.k: Poly.name("kt_k") - Poly.name(N) * self.depth})
        if N in p.names():
            raise Decline(f"{what} moves with the tiles' steps other than the shared index does")
        return p

    def _operand(self, fill: Fill, dims: list[str]) -> dict:
        """A tile's element as read in the sum: the fill's value at the thread that wrote the slot,
        each global element's index over the reader's ids, the block's ids and `kt_k`."""
        writer = self._solve(fill, dims)
        elements = []
        for key, array, index in self._globals(fill.value):
            p = self.fill_poly(fill, index) + self._offset(array, fill.position)
            extra = self.atoms_of(p, LOCAL) - set(writer[0])
            if extra:
                raise Decline(f"the fill of `{fill.tile}` reads `{sorted(extra)[0].strip('()')}`, which its slot does "
                              f"not name: threads writing one slot would write different values")
            elements.append((key, array, self._composed(p, writer, f"the element `{fill.tile}` holds")))
        if not elements:
            raise Decline(f"the fill of `{fill.tile}` reads no element of an argument")
        conds = []
        for left, op, right in conjuncts(fill.cond) if fill.cond else []:
            d = self.fill_poly(fill, left) - self.fill_poly(fill, right)
            if self.atoms_of(d, LOCAL) - set(writer[0]):
                raise Decline(f"the fill of `{fill.tile}` tests an id its slot does not name")
            conds.append((self._composed(d, writer, f"the fill's condition of `{fill.tile}`"), op))
        return {"tile": fill.tile, "value": fill.value, "elements": elements, "conds": conds}

    # the contraction ----------------------------------------------------------------------------------

    def _coordinate(self, operand: dict, side: str) -> tuple[str, str, Poly]:
        """(local id, block id, the tile's side) of the output coordinate an operand reads: its
        global index reads one local id and one block id, `br * T + lr`, T the block's extent
        along the local id."""
        polys = [p for _, _, p in operand["elements"]]
        local = set().union(*(self.atoms_of(p, LOCAL) for p in polys))
        block = set().union(*(self.atoms_of(p, BLOCK) for p in polys))
        if len(local) != 1 or len(block) != 1:
            raise Decline(f"the operand `{operand['tile']}` holds does not read one local id and one block id "
                          f"(the output's {side} and its tile)")
        lr, br = local.pop(), block.pop()
        side_of = divide(polys[0].coefficient(br), polys[0].coefficient(lr))
        if side_of is None or self.number(side_of) != self.atom(lr).extent:
            raise Decline(f"the operand `{operand['tile']}` holds moves with the block's id other than by a tile "
                          f"of the block's threads")
        return lr, br, side_of

    def _locals(self, text: str, cmap: dict[str, Poly], keep: set[str]) -> dict[str, str]:
        """The kernel's locals an expression reads (but `keep`) that are functions of the output's
        coordinates alone, as those functions."""
        return {name: render(p) for name in expression_names(text) & set(self.a.locals) - keep
                if (p := self._named_as(name, cmap)) is not None}

    def _text(self, node, text_of, cmap: dict[str, Poly], position: int | None, rename: dict[str, str],
              what: str) -> str:
        """A statement or expression with every element of an argument at its index over the
        output's coordinates, its locals inlined, `rename` renamed; Decline where thread ids stay."""
        text = text_of(node)
        exprs = {}
        for key, array, index in self._globals(text):
            p = self.settle(self.poly(index) + self._offset(array, position), cmap)
            if self.atoms_of(p) or {N, self.k} & p.names():
                raise Decline(f"{what} reads `{key}` at an index that is not the output's own")
            exprs[key] = f"{array}[{render(p)}]"
        keep = set(rename) | self.declared
        out = substituted(node, text_of, {**self._locals(text, cmap, keep), **rename}, exprs)
        names = {t(n) for n, t in syntax_nodes(f"void kt_f() {{ {out} }}", ("identifier",))}
        if reads_thread_ids(out) or names & ((set(self.a.changing) | set(self.a.locals) | self.tiles
                                              | set(self.loop_vars)) - keep - {"kt_v"}):
            raise Decline(f"{what} reads the thread's ids, a tile or a value the loops change")
        return " ".join(out.split())

    def _contraction(self, operands, after, body, at, acc, update) -> dict:
        a = self.a
        x, y = operands
        row, col = self._coordinate(x, "row"), self._coordinate(y, "column")
        if row[1] == col[1]:
            raise Decline("both operands move with the same block id")
        self._independent({row[0], col[0]}, "the product")
        after, writes = self._after(after, acc, operands)
        # the output walks contiguously along the coordinate that is its `c` (the tiles' columns)
        (lr, br, t_r), (lc, bc, t_c) = row, col
        probe = {lr: Poly.name("kt_p") - Poly.name(br) * t_r, lc: Poly.name("kt_q") - Poly.name(bc) * t_c}
        w_index = self.settle(self.poly(writes[0].index) + self._offset(writes[0].array, None), probe)
        if self.number(w_index.coefficient("kt_p")) == 1 and self.number(w_index.coefficient("kt_q")) != 1:
            x, y, row, col = y, x, col, row
        coords = {"kt_r": row, "kt_c": col}
        cmap = {lr: Poly.name(name) - Poly.name(br) * t for name, (lr, br, t) in coords.items()}
        bounds, limits = self._guards(body, at, cmap)
        for w in writes:  # each thread writes its own output: an index that moves with both coordinates
            index = self.settle(self.poly(w.index) + self._offset(w.array, None), cmap)
            if any(index.degree_in(n) != 1 or index.coefficient(n).is_zero for n in ("kt_r", "kt_c")):
                raise Decline(f"`{w.array}` is written at `{' '.join(w.index.split())}`, not the thread's own output")
            for fast, slow in (("kt_c", "kt_r"), ("kt_r", "kt_c")):
                # a row of outputs longer than the step between rows: two threads write one element
                gap = index.coefficient(slow) - limits[fast] if fast in limits else None
                if self.number(index.coefficient(fast)) == 1 and gap is not None and (gap.number or 0) < 0:
                    raise Decline(f"`{w.array}` is written at `{' '.join(w.index.split())}`, where the guard's rows "
                                  f"overlap: two threads write one element")
        specs, conds, more = self._extents(bounds, limits, coords)
        values, loads, k_parts = self._values(x, y, cmap, {(d, op) for coord in bounds for d, op, _ in bounds[coord]})
        epilogue = tuple(self._text(s, self.text_of, cmap, None, {acc.var: "kt_v"}, f"the statement at line {_line(s)}")
                         for s in after)
        init = "0"
        if acc.init:
            init = inlined(a, acc.init, {})
            if reads_thread_ids(init):
                raise Decline(f"the sum starts at `{acc.init}`, which differs between threads")
        names = {coord: next((n for n in sorted(a.locals) if self._named_as(n, cmap) == Poly.name(coord)), coord[-1])
                 for coord in ("kt_r", "kt_c")}
        tiles = " and ".join(f"`{op_['tile']}`" for op_ in (x, y))
        return dict(r=names["kt_r"], c=names["kt_c"], r_type="int", c_type="int", k=self.k, k_type="int", start="0",
                    k_cond=self._k_cond("kt_k", k_parts), r_conds=tuple(conds["kt_r"]), c_conds=tuple(conds["kt_c"]),
                    m_spec=specs["kt_r"], n_spec=specs["kt_c"], acc_type=a.types.get(acc.var) or "float",
                    acc_init=init, x=values[0], y=values[1], x_load=loads[0], y_load=loads[1], update=update,
                    epilogue=epilogue,
                    kb_cond=self._k_cond("kt_kb", k_parts), **more,
                    tiled=f"the hand-written tiles {tiles} composed with their fills")

    def _after(self, after, acc, operands) -> tuple[list, list]:
        """The statements after the loop the tiles' epilogue runs (a local made from what the
        threads share is read where it is used, its declaration dropped; one made from the sum
        is kept), and the writes of the arguments, all among them and none into an operand."""
        a, text_of = self.a, self.text_of
        declared = {s: {text_of(d.child_by_field_name("declarator") if d.type == "init_declarator" else d).strip()
                        for d in s.children_by_field_name("declarator")} for s in after if s.type == "declaration"}
        after = [s for s in after if not (s in declared and declared[s] <= set(a.locals) and acc.var not in
                                          expression_names(" ".join(a.locals[n] for n in declared[s])))]
        self.declared = set().union(set(), *(declared[s] for s in after if s in declared))
        for s in after:
            if s.type not in ("declaration", "expression_statement") or _advance(s, text_of, self.pointers):
                raise Decline(f"a statement after the tiles' loop that is neither a declaration nor an expression "
                              f"(line {_line(s)})")
        writes = [w for w in a.accesses if w.write and w.space == "global"]
        spans = [span_of(self.ctx.source, s) for s in after]
        read = {arr for op in operands for _, arr, _ in op["elements"]}
        for w in writes:
            if not any(w.span.within(sp) for sp in spans):
                raise Decline(f"`{w.array}` is written inside the tiles' loop or before it")
            if w.array in read:
                raise Decline(f"`{w.array}` is both an operand and the output")
        if not writes:
            raise Decline("nothing is written after the tiles' loop")
        return after, writes

    def _guards(self, body, at: int, cmap: dict[str, Poly]):
        """Each part of the guard after the loop as (difference, operator, condition) on the one
        coordinate it bounds, and each coordinate's first upper bound."""
        bounds: dict[str, list] = {"kt_r": [], "kt_c": []}
        limits: dict[str, Poly] = {}
        for g, g_at in zip(body.guards, body.guard_at):
            if any(s.type != "declaration" for s in body.statements[at + 1:g_at]):
                raise Decline("a statement after the tiles' loop runs outside the output's guard")
            for left, op, right in conjuncts(g):
                d = self.settle(self.poly(left) - self.poly(right), cmap)
                coord = [n for n in ("kt_r", "kt_c") if n in d.names()]
                weight = self.number(d.coefficient(coord[0])) if len(coord) == 1 and d.degree_in(coord[0]) == 1 else None
                if weight not in (1, -1) or self.atoms_of(d) or {"kt_k", N} & d.names():
                    raise Decline(f"the guard's part `{' '.join(left.split())} {op} {' '.join(right.split())}` "
                                  f"bounds no coordinate of the output")
                if weight == -1:
                    d, op = -d, {"<": ">", "<=": ">=", ">": "<", ">=": "<="}[op]
                bound = Poly.name(coord[0]) - d
                bounds[coord[0]].append((d, op, f"{coord[0]} {op} {render(bound)}"))
                if op in ("<", "<=") and coord[0] not in limits:
                    limits[coord[0]] = bound + (Poly.const(1) if op == "<=" else Poly())
        return bounds, limits

    def _extents(self, bounds, limits, coords):
        """Each coordinate's extent over the spec's names and its conditions in the tiles: the
        guard's; else the original launch's extent; else, where only the launch knows it (the
        samples' hA, no argument), the tiles' grid keeps the original's count of blocks along it,
        the tiled kernel reads the extent from its own launch and its blocks past it return first."""
        scalars = spec_scalars(self.ctx)
        specs, conds, more = {}, {}, {"whole": [], "m_blocks": "", "n_blocks": "", "exits": []}
        for coord, (local, block, _) in coords.items():
            conds[coord] = [c for _, _, c in bounds[coord]]
            if coord in limits:
                specs[coord] = spec_text(render(limits[coord]), scalars)
                continue
            dim, extent = self.atom(block).dim, self.atom(local).extent
            try:
                specs[coord], c_text = launch_extent(self.ctx, dim, str(extent), scalars, coord[-1])
                conds[coord].append(f"{coord} < {c_text}")
                continue
            except Decline:
                if dim >= len(self.ctx.grid):
                    raise
            side, tile = (1, "BM") if coord == "kt_r" else (0, "BN")
            cuda = self.ctx.backend == "cuda"
            count = f"gridDim.{'xy'[side]}" if cuda else f"get_num_groups({side})"
            group = f"blockIdx.{'xy'[side]}" if cuda else f"get_group_id({side})"
            bound = f"((int){count} * {extent})"
            specs[coord] = f"({self.ctx.grid[dim]}) * ({extent})"
            more["m_blocks" if coord == "kt_r" else "n_blocks"] = self.ctx.grid[dim]
            conds[coord].append(f"{coord} < {bound}")
            more["exits"].append(f"(int){group} * {tile} >= {bound}")
            more["whole"].append(f"{tile} >= {extent}")
        return specs, conds, {k: tuple(v) if isinstance(v, list) else v for k, v in more.items()}

    def _values(self, x, y, cmap, guarded) -> tuple[list[str], list[str], list]:
        """Each operand's element over kt_r or kt_c and kt_k, where it is loaded, and the fills'
        bounds on the shared index that end the sum: a bound both fills carry (past it the original
        adds zeros); one the guard repeats is the tiles' own zero; any other says where the operand's
        element is loaded (zero elsewhere, as the fill puts it)."""
        kept = []
        for op_ in (x, y):
            mine = []
            for d, op in op_["conds"]:
                d = self.settle(d, cmap)
                if self.atoms_of(d):
                    raise Decline(f"the fill's condition of `{op_['tile']}` reads ids other than the output's")
                if (d, op) not in guarded:
                    mine.append((d, op))
            kept.append(mine)
        k_parts = []
        for d, op in kept[0]:
            slope = self.number(d.coefficient("kt_k")) if d.degree_in("kt_k") == 1 else None
            if (d, op) in kept[1] and op in ("<", "<=") and slope and slope > 0 and not {"kt_r", "kt_c"} & d.names():
                k_parts.append((d, op))
        values, loads = [], []
        for op_, coord in ((x, "kt_r"), (y, "kt_c")):
            mine = [c for c in kept[0 if coord == "kt_r" else 1] if c not in k_parts]
            node, t_of = _wrapped(op_["value"])
            exprs = {}
            for key, arr, p in op_["elements"]:
                p = self.settle(p, cmap)
                if self.atoms_of(p):
                    raise Decline(f"the operand `{op_['tile']}` holds reads ids other than the output's")
                exprs[key] = f"{arr}[{render(p)}]"
            text = substituted(node, t_of, {}, exprs)
            if reads_thread_ids(text) or expression_names(text) & (set(self.a.locals) | set(self.a.changing)):
                raise Decline(f"the value filled into `{op_['tile']}` reads more than elements of the arguments")
            if any(op_["around"]):
                text = f"({op_['around'][0]}{text}{op_['around'][1]})"
            # the fill's other bounds: where the element is loaded (zero elsewhere, as the fill's)
            load = " && ".join(f"({render(d)} {o} 0)" for d, o in mine)
            if ("kt_c" if coord == "kt_r" else "kt_r") in expression_names(f"{text} + ({load or 0})"):
                raise Decline(f"the operand `{op_['tile']}` holds reads both coordinates of the output")
            values.append(" ".join(text.split()))
            loads.append(load)
        return values, loads, k_parts

    def _k_cond(self, name: str, k_parts) -> str:
        """The shared index's range over `name`: the step loop's condition at step `name / D`, and
        the fills' bounds on the shared index."""
        d, op = self.loop_cond
        d = d.substitute(N, Poly.name(f"({name} / {render(self.depth)})"))
        parts = [f"{render(d)} {op} 0"] + [f"{render(p.substitute('kt_k', Poly.name(name)))} {o} 0"
                                          for p, o in k_parts]
        return " && ".join(f"({p})" for p in parts)

    def _named_as(self, name: str, cmap: dict[str, Poly]) -> Poly | None:
        """A local of the kernel over the output's coordinates, where it is one."""
        try:
            p = self.settle(self.poly(name), cmap)
        except Decline:
            return None
        return None if self.atoms_of(p) else p


def read(ctx) -> dict:
    """The contraction a hand-tiled product computes, as the fields of the contraction pass's
    reading (all but which index each operand walks contiguously); Decline with the reason."""
    return Tiled(ctx).read()
