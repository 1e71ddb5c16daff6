"""The reduction rewrite: a block's shared-memory tree reduction restructured into loads several
per thread, combined in registers, then across threads by warp shuffles (CUDA) or a local-memory
tree (OpenCL), keeping what the original computes.

What the analysis must show (else it declines with the reason):

- a one-dimensional block of B threads (a power of two, from the launch) and one shared array;
- first, each thread stores one value into its own slot (`s[tid] = i < n ? in[i] : 0`, or the
  slot set to the padding and then, under `if (i < n)`, to the value, directly or through a
  local), where `i` is the block's B elements in a run (`blockIdx.x * B + threadIdx.x` or
  `get_global_id(0)`): read symbolically, statement by statement, into one value `i < X ? E : P`;
  or a grid-stride loop of the thread's own before the tree (the samples' reduce6: from
  `blockIdx.x * R + threadIdx.x` by `R * gridDim.x` while `i < X`, combining elements into one
  accumulator from the operator's identity), read as one run's value, block j's partial being over
  the runs j, j + grid, ...;
- then a barrier and one loop, whose steps (simulated for every thread at B, every step's
  condition, destination and source evaluated) combine slots pairwise with `+`, a max or a min,
  never a slot another thread writes in the same step, ending with slot 0 holding every slot's
  value exactly once: interleaved, interleaved without divergence or sequential addressing alike;
- last, under `if (tid == 0)`, statements that read slot 0: either per block (they read the
  block's index: a partial result per block, kept per block), or an atomic accumulation into a
  fixed place (an `atomicAdd`, `atomic_add`, or a function of the file built on a compare-and-swap),
  which any grouping of the values may feed;
- the launch's grid is one block per B elements of the bound X (`ceil_div(X, B)`).

The new kernel (beside the original; its switch at 0 is the original token for token):

- per block over a grid-stride loop: the original's grid (its blocks are the partials), THREADS
  threads a block taking the block's runs ITEMS loads at a time;
- per block: LANES threads (8, 16 or 32) take a block's B elements (the original's segment), each
  B / LANES of them strided by LANES (coalesced), combine them in a register, then across the
  lanes; lane 0 runs the original's last statements for that segment. THREADS threads per block,
  GRID 0 a group per segment, else GRID blocks per multiprocessor striding over the segments;
- an atomic total: GRID blocks per multiprocessor of THREADS threads stride over all the elements,
  ITEMS loads in flight per thread, combine in registers, then across the block; one atomic per
  block (not one per B elements).

Floating-point sums are reordered: the result differs from the original's by rounding, which the
gate's tolerance (calibrated on the original's own error against the reference) admits; a max or
a min is exact.
"""

from __future__ import annotations

from dataclasses import dataclass

from kerntune.engine.expressions import ExpressionError
from kerntune.engine.expressions import parse as parse_expression
from kerntune.engine.proposal import ParamProposal

from . import affine
from .cooperate import (Decline, Dialect, ReadingPass, beside, body_of, entry_constants, expression_names,
                        fresh_names, header, is_pragma, kernel_spans, pinned, python_text, raw_text, reads_thread_ids, spec_scalars, spec_text,
                        substituted, with_names, within)
from .kernel_tree import span_of, syntax_nodes
from .model import ModelError, function_declarator, nodes, unwrap
from .passes import Rewrite, RewriteContext


NAME = "reduction"
ATOMIC_CALLS = {"sum": {"atomicAdd", "atomicAdd_block", "atomicAdd_system", "atomic_add", "atomic_fetch_add",
                        "atomic_fetch_add_explicit", "atom_add"},
                "max": {"atomicMax", "atomic_max", "atom_max", "atomic_fetch_max"},
                "min": {"atomicMin", "atomic_min", "atom_min", "atomic_fetch_min"}}
CAS_CALLS = ("atomicCAS", "atomic_cmpxchg", "atom_cmpxchg", "atomic_compare_exchange")
MAX_CALLS, MIN_CALLS = {"fmaxf", "fmax", "max", "__hmax"}, {"fminf", "fmin", "min", "__hmin"}
T_IDS = ("threadIdx.x", "get_local_id(0)")
J_IDS = ("blockIdx.x", "get_group_id(0)")
B_IDS = ("blockDim.x", "get_local_size(0)")


@dataclass(frozen=True)
class Reduction:
    """A block's tree reduction, read from the kernel."""

    B: int  # threads per block of the original: the elements of a segment
    op: str  # "sum", "max" or "min"
    combine: str  # over `$a` and `$b`
    elem_type: str  # of the shared array
    value: str  # an element's value over kt_i (the flat index), kt_j and kt_t
    padding: str  # what an element out of range counts as: the operator's identity
    bound: str  # kernel text X: a flat value reads kt_i < X; the segments are ceil(X / (per * B))
    flat: bool  # the value reads one element at the flat index kt_i = kt_j * B + kt_t, else it reads kt_j and kt_t
    per: int  # elements of X per thread of the original (2: each thread read two)
    final: tuple[str, ...]  # over kt_j (the segment) and kt_total
    per_segment: bool  # the last statements read the segment (partials per block)
    lockstep: bool = False  # the original's last steps rely on a warp's threads in lockstep
    # the threads' loop before the tree strides over runs of per * B elements by the launch's grid:
    # block j's partial is over the runs j, j + grid, ... (`value` is one run's, kt_j the run)
    strided: bool = False


@dataclass(frozen=True)
class Strided:
    """A thread's loop before the tree accumulating into one register (or its own slot) over a
    grid-stride run: `acc (op)= E` for each element the body names, the counter starting at
    `blockIdx.x * R + threadIdx.x` and stepping by `R * gridDim.x` while `i < X`."""

    acc: str  # the local or the shared array (its own slot) accumulated into
    start: str  # the counter's first value over kt_j and kt_t
    run: int  # R: elements a block's threads cover in one step
    bound: str  # X, kernel text
    terms: tuple[tuple[str, str], ...]  # (condition or "", element) each step combines, in order
    op: str  # "sum", "max" or "min"


LOOP_TOTAL = "kt_loop_total"  # the loop's accumulator after the loop, in the symbolic values
AFTER_LOOP = "kt_after_loop"  # the loop's counter after it: a value no later statement may read


class ReductionPass(ReadingPass):
    """The reduction rewrite as a pass: it requires the block's tree reduction `read` finds in the
    kernel (declined with the reason `read` gives otherwise)."""

    name = NAME

    def read(self, ctx: RewriteContext):
        return read(ctx)

    def emit(self, ctx: RewriteContext, found) -> Rewrite:
        return _rewrite(ctx, found)


# the pass, called as a function of a RewriteContext (agents/rewrites.py registers it)
rewrite = ReductionPass()


def read(ctx: RewriteContext) -> Reduction:
    """The tree reduction the kernel computes; Decline with the reason when it is none."""
    try:
        a = ctx.model
    except ModelError as e:
        raise Decline(str(e)) from None
    shared = a.shared_arrays() or [arg for arg in a.signature.args if arg.local]
    if not (shared and any(b.scope == "block" for b in a.barriers)):
        raise Decline("no shared-memory tree (barriers and shared memory)")
    B = _block_size(ctx)
    body = body_of(ctx.source, kernel_spans(ctx.source, a), whiles=True)
    text_of = body.text_of
    stmts = body.statements
    shared = _shared_arrays(ctx, a, body)
    if len(shared) != 1:
        raise Decline(f"{'no' if not shared else 'more than one'} shared array")
    S = shared[0]
    if len(body.guards) != 1:
        raise Decline("not one guard (`if (tid == 0)`) around the last statements")
    final_at = body.guard_at[0]
    barriers = [k for k, s in enumerate(stmts) if _is_barrier(ctx, s)]
    stores_end = barriers[0] if barriers else None
    tree_at = barriers[0] + 1 if barriers else final_at
    if not barriers:
        # a textbook's tree: each step's barrier first in the loop (`for (...) { __syncthreads();
        # if (t < stride) ... }`), so the first step's barrier ends the stores, as one before the loop would
        first = next((k for k, s in enumerate(stmts[:final_at]) if s.type == "for_statement"
                      and _barrier_first(ctx, s)), None)
        if first is not None:
            stores_end = tree_at = first
    loops = ("for_statement", "while_statement")
    if stores_end is None or sum(s.type in loops for s in stmts[:stores_end]) > 1 or any(
            s.type == "while_statement" for s in stmts[stores_end:]) or tree_at >= final_at or any(
            s.type not in ("for_statement", "if_statement") and not _is_barrier(ctx, s) and not is_pragma(s, text_of)
            for s in stmts[tree_at:final_at]):
        raise Decline("not: stores, one barrier, one loop, then the last statements under a guard")
    ids = {**{t: "kt_t" for t in T_IDS}, **{j: "kt_j" for j in J_IDS}, **{b: str(B) for b in B_IDS},
           "get_global_id(0)": f"(kt_j * {B} + kt_t)", "get_global_size(0)": f"({B} * get_num_groups(0))"}
    env, loop = _stores(ctx, a, stmts[:stores_end], text_of, S, ids)
    if S not in env:
        raise Decline(f"no thread stores its value into `{S}[tid]` before the barrier")
    op, combine, mirror, lockstep = _tree(ctx, stmts[tree_at:final_at], text_of, S, env, ids, B, ctx.backend)
    elem_type = _shared_type(ctx, a, body, S)
    padding = _identity(op, elem_type)
    if loop is not None:
        value, bound, per = _strided_value(ctx, loop, env[S], op, combine, padding, B)
        flat = False
        try:  # a run of B elements, one a thread: the flat index
            value, _, bound = _guarded_value(value, B, ctx)
            flat = True
        except Decline:
            pass
    else:
        try:
            value, _, bound = _guarded_value(env[S], B, ctx)
            flat, per = True, 1
            _same_grid(ctx, bound, B, 1)
        except Decline as why:
            value, flat = env[S], False
            bound, per = _bounds(ctx, value, B, why)
    final = tuple(_final(ctx, a, stmts[final_at:], text_of, S, env, ids, body.guards[0], mirror))
    if any(AFTER_LOOP in expression_names_stmt(f) for f in final):
        raise Decline("the last statements read the loop's counter after the loop")
    per_segment = any("kt_j" in expression_names_stmt(f) for f in final)
    if not per_segment:
        _atomic(ctx, final, op)
    if any(reads_thread_ids(f) or "kt_t" in expression_names_stmt(f) for f in final):
        raise Decline("the last statements read thread ids other than the block's index")
    if "$" in value:
        raise Decline("a `$` in the kernel's code")
    return Reduction(B, op, combine, elem_type, value, padding, bound, flat, per, final, per_segment, lockstep,
                     loop is not None)


def expression_names_stmt(text: str) -> set[str]:
    return {t(n) for n, t in syntax_nodes(text, ("identifier",))}


def _block_size(ctx) -> int:
    env = {**ctx.limits.expression_names(), **ctx.defaults}
    try:
        dims = [parse_expression(str(b)).evaluate(env) for b in ctx.block]
    except (ExpressionError, KeyError) as e:
        raise Decline(f"the block size is not known without the problem ({e})") from None
    if any(d != 1 for d in dims[1:]):
        raise Decline("a block of more than one dimension")
    B = dims[0]
    if not isinstance(B, int) or B < 2 or B & (B - 1):
        raise Decline(f"a block of {B} threads, not a power of two")
    return B


def _shared_arrays(ctx, a, body) -> list[str]:
    out = [arg.name for arg in a.signature.args if arg.local]
    # a pointer to the dynamic shared memory a helper hands out (`T *sdata = SharedMemory<T>();`)
    given = [arr.name for arr in a.shared_arrays() if arr.function == a.kernel.name and arr.name not in out]
    for s in body.statements:
        if s.type == "declaration" and any(w in _line_text(ctx.source, s).split() for w in ("__shared__", "__local",
                                                                                             "local")):
            for d in s.children_by_field_name("declarator"):
                node = d
                while node is not None and node.type not in ("identifier",):
                    node = node.child_by_field_name("declarator")
                if node is not None:
                    out.append(body.text_of(node))
    return list(dict.fromkeys(out + given))


def _line_text(source: str, node) -> str:
    """A statement's text from the start of its line: the words the syntax tree blanks
    (`__shared__`, `__local`) stand before the node's first character."""
    sp = span_of(source, node)
    raw = source.encode("utf-8")  # the spans are bytes
    return raw[raw.rfind(b"\n", 0, sp.start) + 1:sp.end].decode("utf-8")


def _shared_type(ctx, a, body, S: str) -> str:
    for arg in a.signature.args:
        if arg.name == S:
            return arg.ctype
    for s in body.statements:
        if s.type == "declaration" and S in raw_text(ctx.source, s):
            t = s.child_by_field_name("type")
            if t is not None:
                return body.text_of(t)
    return "float"


def _barrier_first(ctx, loop) -> bool:
    """Whether a loop's body begins with the block's barrier."""
    body = loop.child_by_field_name("body")
    first = next((c for c in body.named_children if c.type != "comment"), None) \
        if body is not None and body.type == "compound_statement" else body
    return first is not None and _is_barrier(ctx, first)


def _is_barrier(ctx, s, scope: str = "block") -> bool:
    """Whether a statement is a block's barrier (`__syncthreads()`, `barrier(...)`, a cooperative
    group's `cg::sync(block)`), or with scope "warp" a warp's (`__syncwarp()`, `tile.sync()`), as
    the kernel model reads barriers."""
    if s.type != "expression_statement":
        return False
    where = span_of(ctx.source, s)
    return any(b.scope == scope and within(b.span, where) for b in ctx.model.barriers)


def _target(node, text_of, S: str) -> str | None:
    """The name a statement assigns: a local, or S for `S[<own slot>]`."""
    if node.type == "identifier":
        return text_of(node)
    if node.type == "subscript_expression" and text_of(node.child_by_field_name("argument")) == S:
        return S
    return None


def _assignments(node, text_of) -> list:
    """The assignment expressions of a statement (a block of them)."""
    if node.type == "compound_statement":
        return [x for c in node.named_children if c.type != "comment" for x in _assignments(c, text_of)]
    if node.type == "expression_statement" and node.named_children:
        e = node.named_children[0]
        if e.type == "assignment_expression":
            return [e]
    raise Decline(f"`{' '.join(text_of(node).split())}` is not an assignment")


def _stores(ctx, a, stmts, text_of, S: str, ids) -> tuple[dict[str, str], Strided | None]:
    """Each local's and the own slot's value after the statements before the barrier, as
    expressions over thread ids, arguments and constants; and the thread's loop among them (a
    grid-stride accumulation: its accumulator's value after it is LOOP_TOTAL), if any."""
    env: dict[str, str] = {}
    loop = None

    def value(node) -> str:
        return substituted(node, text_of, {k: f"({v})" for k, v in env.items() if k != S}, ids)

    def own_slot(target_node) -> None:
        if target_node.type == "subscript_expression":
            idx = target_node.child_by_field_name("indices") or target_node.child_by_field_name("index")
            inner = [c for c in idx.named_children if c.type != "comment"] if idx is not None else []
            text = value(inner[0]) if inner else ""
            if python_text(text, {}) != "(kt_t)" and affine.slope(text, "kt_t") != 1 or \
                    affine.read(text).without("kt_t").terms:
                raise Decline(f"a thread stores into `{S}` at `{text}`, not its own slot")

    def take(s) -> None:
        if s.type == "declaration":
            for d in s.children_by_field_name("declarator"):
                if d.type == "init_declarator":
                    env[text_of(d.child_by_field_name("declarator"))] = value(d.child_by_field_name("value"))
            return
        cond = None
        targets = s
        if s.type == "if_statement":
            if s.child_by_field_name("alternative") is not None:
                raise Decline("an `else` among the stores")
            c = s.child_by_field_name("condition")
            cond = value([x for x in c.named_children if x.type != "comment"][0])
            targets = s.child_by_field_name("consequence")
        for e in _assignments(targets, text_of):
            left = e.child_by_field_name("left")
            name = _target(left, text_of, S)
            op = text_of(e.child_by_field_name("operator"))
            if name is None or op not in ("=", "+="):
                raise Decline(f"`{' '.join(text_of(e).split())}` is not a store of a local or the thread's slot")
            own_slot(left)
            new = value(e.child_by_field_name("right"))
            if op == "+=":
                if name not in env:
                    raise Decline(f"`{name}` is added to before it is set")
                new = f"({env[name]}) + ({new})"
            if cond is not None:
                if name not in env:
                    raise Decline(f"`{name}` is set under a condition only")
                new = f"({cond}) ? ({new}) : ({env[name]})"
            env[name] = new

    for s in stmts:
        if s.type not in ("for_statement", "while_statement"):
            take(s)
            continue
        counted = _counted(ctx, s, text_of, value)
        if counted is None:
            loop = _accumulated(ctx, s, text_of, S, env, value, own_slot)
            continue
        # a loop of a fixed count (the textbook's coarsening: `for (tile = 1; tile < 8; ++tile)
        # sum += input[i + tile * BLOCK_DIM]`): its steps taken one after another
        var, values, body = counted
        for v in values:
            env[var] = str(v)
            for st in body:
                take(st)
        env[var] = AFTER_LOOP
    return env, loop


def _counted(ctx, loop, text_of, value) -> tuple[str, list[int], list] | None:
    """(counter, its values, the body's statements) of a `for` loop whose counter runs over whole
    numbers the kernel's constants give (at most 64 of them) and whose body leaves the counter
    alone; None for any other loop."""
    if loop.type != "for_statement":
        return None
    init, cond, update = (loop.child_by_field_name(f) for f in ("initializer", "condition", "update"))
    if init is None or cond is None or update is None:
        return None
    if init.type == "declaration":
        d = init.child_by_field_name("declarator")
        if d is None or d.type != "init_declarator":
            return None
        var, start = text_of(d.child_by_field_name("declarator")), d.child_by_field_name("value")
    elif init.type == "assignment_expression" and text_of(init.child_by_field_name("operator")) == "=":
        var, start = text_of(init.child_by_field_name("left")), init.child_by_field_name("right")
    else:
        return None
    test = unwrap(cond)
    if test is None or test.type != "binary_expression" or text_of(test.child_by_field_name("left")).strip() != var:
        return None
    compare = text_of(test.child_by_field_name("operator"))
    if update.type == "update_expression":
        step = 1 if "++" in text_of(update) else -1
    elif update.type == "assignment_expression" and text_of(update.child_by_field_name("operator")) in ("+=", "-="):
        step = _block_form(ctx, value(update.child_by_field_name("right"))).number
        if step is not None and text_of(update.child_by_field_name("operator")) == "-=":
            step = -step
    else:
        return None
    if text_of(update.child_by_field_name("argument") or update.child_by_field_name("left")).strip() != var:
        return None
    first, bound = (_block_form(ctx, value(n)).number for n in (start, test.child_by_field_name("right")))
    if first is None or bound is None or not step:
        return None
    body = loop.child_by_field_name("body")
    stmts = [c for c in body.named_children if c.type != "comment"] if body.type == "compound_statement" else [body]
    if any(text_of(n.child_by_field_name("left") or n.child_by_field_name("argument")).strip() == var
           for st in stmts for n in nodes(st) if n.type in ("assignment_expression", "update_expression")):
        raise Decline(f"the loop before the tree changes its counter `{var}` in its body")
    holds = {"<": lambda v: v < bound, "<=": lambda v: v <= bound, ">": lambda v: v > bound,
             ">=": lambda v: v >= bound, "!=": lambda v: v != bound}.get(compare)
    if holds is None:
        return None
    values, v = [], first
    while holds(v):
        if len(values) == 64:
            raise Decline(f"the loop before the tree over `{var}` runs more than 64 times")
        values.append(v)
        v += step
    return var, values, stmts


def _accumulated(ctx, loop, text_of, S: str, env: dict[str, str], value, own_slot) -> Strided:
    """A thread's loop before the tree, read as a grid-stride accumulation (Strided), else Decline
    with what it is not; `env` then holds LOOP_TOTAL for the accumulator, AFTER_LOOP for the
    counter."""
    body = loop.child_by_field_name("body")
    stmts = [c for c in body.named_children if c.type != "comment"] if body.type == "compound_statement" else [body]
    if loop.type == "for_statement":
        init, update = loop.child_by_field_name("initializer"), loop.child_by_field_name("update")
        if init is not None and init.type == "declaration":
            d = init.child_by_field_name("declarator")
            if d is None or d.type != "init_declarator":
                raise Decline("the loop before the tree declares its counter without a value")
            env[text_of(d.child_by_field_name("declarator"))] = value(d.child_by_field_name("value"))
        elif init is not None and init.type == "assignment_expression" and \
                text_of(init.child_by_field_name("operator")) == "=":
            env[text_of(init.child_by_field_name("left"))] = value(init.child_by_field_name("right"))
        elif init is not None:
            raise Decline("the loop before the tree starts other than by setting its counter")
    else:
        if not stmts or stmts[-1].type != "expression_statement" or not stmts[-1].named_children:
            raise Decline("the loop before the tree does not end its body by stepping its counter")
        update, stmts = stmts[-1].named_children[0], stmts[:-1]
    cond = loop.child_by_field_name("condition")
    if update is None or cond is None:
        raise Decline("the loop before the tree has no condition or step")
    var, step = _counter_step(update, text_of)
    if var is None:
        raise Decline(f"the loop before the tree steps by `{' '.join(text_of(update).split())}`, not `i += step`")
    if var not in env:
        raise Decline(f"the loop's counter `{var}` has no value before the loop")
    start = env[var]
    run = _run(ctx, start)
    stride = _block_form(ctx, value(step))
    if not any(stride == affine.Poly.const(run) * affine.Poly.name(g) for g in ("(gridDim.x)", "(get_num_groups(0))")):
        raise Decline(f"the loop before the tree steps by `{' '.join(text_of(step).split())}`, not the {run} elements "
                      "a block starts at times the launch's grid (a grid-stride loop)")
    inner = [c for c in cond.named_children if c.type != "comment"]
    test = inner[0] if len(inner) == 1 else cond
    while test.type == "parenthesized_expression":
        test = [c for c in test.named_children if c.type != "comment"][0]
    op = text_of(test.child_by_field_name("operator")) if test.type == "binary_expression" else ""
    left, right = (test.child_by_field_name("left"), test.child_by_field_name("right")) if op else (None, None)
    if op == ">":
        left, right, op = right, left, "<"
    if op != "<" or text_of(left).strip() != var:
        raise Decline(f"the loop before the tree runs while `{' '.join(text_of(test).split())}`, not `{var} < n`")
    # what the body accumulates into, read as a name of its own wherever the body reads it
    targets = {_target(n.child_by_field_name("left"), text_of, S) for st in stmts for n in nodes(st)
               if n.type == "assignment_expression"}
    if len(targets) != 1 or None in targets:
        raise Decline("the loop before the tree does not accumulate into one local or the thread's slot")
    acc = targets.pop()
    if acc not in env:
        raise Decline(f"`{acc}` is accumulated into before it is set")
    first = env.pop(acc)
    del env[var]
    bound = value(right)
    terms, kind, scope = [], None, {}
    for st in stmts:
        if st.type == "declaration":  # a local of one step: its value inlined where it is read
            for d in st.children_by_field_name("declarator"):
                if d.type != "init_declarator":
                    raise Decline("a local of the loop before the tree is declared without a value")
                scope[text_of(d.child_by_field_name("declarator"))] = _in_step(value, d.child_by_field_name("value"),
                                                                                 env, var, start, scope)
            continue
        guard = ""
        if st.type == "if_statement":
            if st.child_by_field_name("alternative") is not None:
                raise Decline("an `else` in the loop before the tree")
            c = [x for x in st.child_by_field_name("condition").named_children if x.type != "comment"][0]
            guard = _in_step(value, c, env, var, start, scope)
            st = st.child_by_field_name("consequence")
            if st.type == "compound_statement" and len([c for c in st.named_children if c.type != "comment"]) == 1:
                st = [c for c in st.named_children if c.type != "comment"][0]
        e = st.named_children[0] if st.type == "expression_statement" and st.named_children else None
        if e is None or e.type != "assignment_expression":
            raise Decline(f"`{' '.join(text_of(st).split())[:60]}` in the loop before the tree is not an accumulation")
        if acc == S:
            own_slot(e.child_by_field_name("left"))
        got, element = _accumulation(e, text_of, acc)
        if kind is not None and got != kind:
            raise Decline("the loop before the tree combines its elements in more than one way")
        kind = got
        terms.append((guard, _in_step(value, element, env, var, start, scope)))
    if not _is_identity(first, kind):
        raise Decline(f"`{acc}` starts the loop before the tree from `{first}`, not the {kind}'s identity")
    read = set().union(*(expression_names(t) | (expression_names(g) if g else set()) for g, t in terms))
    if acc in read | expression_names(bound) or var in expression_names(bound):
        raise Decline(f"the loop before the tree reads `{acc}` or its counter other than to accumulate")
    env[acc] = LOOP_TOTAL
    env[var] = AFTER_LOOP
    return Strided(acc, start, run, bound, tuple(terms), kind)


def _counter_step(update, text_of):
    """(counter, the node of its step) of `i += step` or `i = i + step`; (None, None) otherwise."""
    if update.type != "assignment_expression":
        return None, None
    left, op, right = (update.child_by_field_name("left"), text_of(update.child_by_field_name("operator")),
                       update.child_by_field_name("right"))
    if left.type != "identifier":
        return None, None
    if op == "+=":
        return text_of(left), right
    if op == "=" and right.type == "binary_expression" and text_of(right.child_by_field_name("operator")) == "+" \
            and text_of(right.child_by_field_name("left")).strip() == text_of(left):
        return text_of(left), right.child_by_field_name("right")
    return None, None


def _run(ctx, start: str) -> int:
    """R of a counter starting at `blockIdx.x * R + threadIdx.x`: the elements a block's threads
    start a run of; Decline otherwise."""
    p = _block_form(ctx, start)
    run = p.coefficient("kt_j").number
    if run is None or run <= 0 or p.coefficient("kt_t").number != 1 or p.degree_in("kt_j") > 1 or \
            p.degree_in("kt_t") > 1 or p.without("kt_j").without("kt_t").terms:
        raise Decline(f"the loop before the tree starts at `{start}`, not at `blockIdx.x * R + threadIdx.x`")
    return run


def _in_step(value, node, env: dict[str, str], var: str, start: str, scope: dict[str, str]) -> str:
    """An expression of the loop's body as one step of it reads it: its counter at the step's
    first element (`start`, over the step's block kt_j), its locals inlined; Decline where it
    reads a local the loop changes."""
    saved = dict(env)
    env.update({var: start, **scope})
    try:
        return value(node)
    finally:
        env.clear()
        env.update(saved)


def _accumulation(e, text_of, target: str) -> tuple[str, object]:
    """("sum" | "max" | "min", the element's node) of `acc += E`, `acc = acc + E`, `acc = fmaxf(acc, E)`."""
    op, right = text_of(e.child_by_field_name("operator")), e.child_by_field_name("right")
    same = "".join(text_of(e.child_by_field_name("left")).split())

    def is_acc(n) -> bool:
        while n.type == "parenthesized_expression":
            n = [c for c in n.named_children if c.type != "comment"][0]
        return "".join(text_of(n).split()) == same
    if op == "+=":
        return "sum", right
    if op == "=" and right.type == "binary_expression" and text_of(right.child_by_field_name("operator")) == "+":
        a, b = right.child_by_field_name("left"), right.child_by_field_name("right")
        if is_acc(a):
            return "sum", b
        if is_acc(b):
            return "sum", a
    if op == "=" and right.type == "call_expression":
        fn = text_of(right.child_by_field_name("function"))
        args = [x for x in right.child_by_field_name("arguments").named_children if x.type != "comment"]
        kind = "max" if fn in MAX_CALLS else "min" if fn in MIN_CALLS else None
        if kind and len(args) == 2 and is_acc(args[0]):
            return kind, args[1]
        if kind and len(args) == 2 and is_acc(args[1]):
            return kind, args[0]
    raise Decline(f"`{' '.join(text_of(e).split())}` in the loop before the tree is not a sum, max or min into "
                  f"`{target}`")


def _is_identity(text: str, kind: str) -> bool:
    """Whether a start value is the identity of the combination: 0 for a sum (`0`, `0.0f`, `(T)0`),
    an infinity of the right sign for a max or min."""
    found = syntax_nodes(f"auto kt_e = ({text});", ("parenthesized_expression",))
    if not found:
        return False
    node, text_of = found[0]
    node = unwrap(node)
    if node is None:
        return False
    if kind == "sum":
        try:
            return node.type == "number_literal" and float(text_of(node).rstrip("fFlLuU")) == 0.0
        except ValueError:
            return False
    words = "".join(text_of(node).split())
    return words in (("-INFINITY", "-HUGE_VALF", "-HUGE_VAL") if kind == "max" else ("INFINITY", "HUGE_VALF", "HUGE_VAL"))


def _strided_value(ctx, loop: Strided, slot: str, op: str, combine: str, padding: str, B: int) \
        -> tuple[str, str, int]:
    """(one run's value over kt_j and kt_t, the bound, elements per thread) of a grid-stride loop
    whose total the thread stores in its slot: thread kt_t of the block that takes run kt_j adds
    the run's elements the body names while the run's first element is below the bound."""
    if "".join(slot.split()).strip("()") != LOOP_TOTAL:
        raise Decline("the thread's slot holds more than its loop's total")
    if loop.op != op:
        raise Decline(f"the loop before the tree takes a {loop.op}, the tree a {op}")
    if loop.run % B:
        raise Decline(f"a step of the loop before the tree covers {loop.run} elements a block, not a whole number "
                      f"of its {B} threads")
    if len(ctx.grid) > 1:
        device = ctx.limits.expression_names()
        for problem in (*ctx.original.problems, *ctx.original.verify_problems):
            env = {**device, **problem.values, **ctx.defaults}
            try:
                if any(parse_expression(g).evaluate(env) != 1 for g in ctx.grid[1:]):
                    raise Decline("a grid of more than one dimension")
            except (ExpressionError, KeyError) as e:
                raise Decline(f"the launch cannot be evaluated at {problem.label()} ({e})") from None
    total = None
    for guard, element in loop.terms:
        term = f"(({guard}) ? ({element}) : ({padding}))" if guard else f"({element})"
        total = term if total is None else "(" + combine.replace("$a", total).replace("$b", term) + ")"
    return f"(({loop.start}) < ({loop.bound})) ? ({total}) : ({padding})", loop.bound, loop.run // B


def _guarded_value(v: str, B: int, ctx) -> tuple[str, str, str]:
    """(value over kt_i, padding, bound X) from `cond ? E : P` with cond `kt_j * B + kt_t < X`."""
    found = syntax_nodes(f"auto kt_e = ({v});", ("parenthesized_expression",))
    node, text_of = found[0]
    while node.type == "parenthesized_expression" and len([c for c in node.named_children if c.type != "comment"]) == 1:
        node = [c for c in node.named_children if c.type != "comment"][0]
    if node.type != "conditional_expression":
        raise Decline("the stored value has no bound (`i < n ? x[i] : 0`): the elements past the launch are not known")
    cond = node.child_by_field_name("condition")
    while cond.type == "parenthesized_expression":
        cond = [c for c in cond.named_children if c.type != "comment"][0]
    if cond.type != "binary_expression" or text_of(cond.child_by_field_name("operator")) not in ("<", ">"):
        raise Decline(f"the stored value's condition `{text_of(cond)}` is not `i < n`")
    left, right = cond.child_by_field_name("left"), cond.child_by_field_name("right")
    if text_of(cond.child_by_field_name("operator")) == ">":
        left, right = right, left
    index, bound = text_of(left), text_of(right)
    if _block_form(ctx, index) != Poly_of(B):
        raise Decline(f"the elements a block reads (`{index}`) are not its {B} in a run")
    if {"kt_j", "kt_t"} & expression_names(bound) or reads_thread_ids(bound):
        raise Decline(f"the bound `{bound}` reads thread ids")
    # the value reads the element at the index the bound was proved on: name it by the flat index
    e_text = text_of(node.child_by_field_name("consequence")).replace(index, "kt_i")
    return e_text, text_of(node.child_by_field_name("alternative")), bound


def _identity(op: str, elem_type: str) -> str:
    """The value that changes nothing when combined: 0 for a sum; for a max or min of floats, an
    infinity."""
    if op == "sum":
        return "0"
    if elem_type in ("float", "double"):
        return "-INFINITY" if op == "max" else "INFINITY"
    raise Decline(f"a {op} of {elem_type} (no identity the rules know)")


def _bounds(ctx, value: str, B: int, why: Decline) -> tuple[str, int]:
    """For a value that reads the block and thread other than as one element in a run: a bound X
    its conditions compare with and the elements per thread `per` such that the launch's grid is
    ceil_div(X, per * B)."""
    names = expression_names(value)
    if reads_thread_ids(value) or not {"kt_j", "kt_t"} >= (names & {"kt_j", "kt_t", "kt_i"}):
        raise why
    candidates = []
    for node, text_of in syntax_nodes(f"auto kt_e = ({value});", ("binary_expression",)):
        op = text_of(node.child_by_field_name("operator"))
        if op in ("<", "<=", ">", ">="):
            side = node.child_by_field_name("right" if op in ("<", "<=") else "left")
            text = text_of(side)
            if not expression_names(text) & {"kt_j", "kt_t", "kt_i"} and text not in candidates:
                candidates.append(text)
    for bound in candidates:
        for per in (1, 2, 4, 8):
            try:
                _same_grid(ctx, bound, B, per)
                return bound, per
            except Decline:
                continue
    raise Decline(f"{why}; and no bound of its conditions makes the launch's grid one block per B, 2B, 4B or 8B "
                  "of its elements")


def _block_form(ctx, text: str) -> affine.Poly:
    """An index over the block (kt_j) and thread (kt_t) as a polynomial, the kernel's whole-number
    constants (its #defines, a template kernel's value arguments) put in."""
    try:
        p = affine.read(text, {"kt_j", "kt_t"})
    except affine.NotAffine as e:
        raise Decline(str(e)) from None
    for name, val in entry_constants(ctx).items():
        p = p.substitute(name, affine.Poly.const(val))
    return p


def Poly_of(B: int) -> affine.Poly:
    return affine.Poly.name("kt_j") * affine.Poly.const(B) + affine.Poly.name("kt_t")


@dataclass(frozen=True)
class _Step:
    """One combining assignment of the tree as each thread may take it: under `conds` (kernel text,
    all true for a thread that takes it), the loop counters at `bind`, locals of the loop's body."""

    conds: tuple[str, ...]
    bind: tuple[tuple[str, int], ...]
    locals: tuple[tuple[str, str], ...]
    dst: str
    src: str
    kind: tuple[str, str]
    mirror: str  # the local a `S[tid] = sum = sum + S[src]` step keeps equal to the slot, or ""


BARRIER, WARP_BARRIER = object(), object()  # a block's barrier, a warp's (`__syncwarp()`)
MAX_INLINE = 4  # calls into the file's functions followed within the tree


class _Tree:
    """Reads the statements after the first barrier into steps and barriers, in the order the
    threads take them: loops unrolled at their counters' values, levels under a condition that
    holds for no thread or every one (`if (blockSize >= 512)`) kept or left out, a call to one of
    the file's functions (`warpReduce(sdata, tid)`) followed into its body, its parameters read as
    their arguments."""

    def __init__(self, ctx, S: str, number, consts: dict[str, str]):
        self.ctx, self.S, self.number, self.consts = ctx, S, number, consts
        self.items: list = []

    def constant(self, text: str, bind: dict):
        """The condition's value where it reads no thread (None where it does)."""
        try:
            return self.number(text, bind)
        except Decline:
            return None

    def read(self, nodes, text_of, rename, conds, bind, locals_, depth=0) -> None:
        for n in nodes:
            if n.type == "comment" or is_pragma(n, text_of):  # a hint (`#pragma unroll`): the steps are read out
                continue
            if n.type == "compound_statement":
                self.read([c for c in n.named_children], text_of, rename, conds, bind, locals_, depth)
            elif n.type == "expression_statement" and _is_barrier(self.ctx, n):
                if conds:
                    raise Decline(f"a barrier under a condition of the thread (`{' '.join(conds[-1].split())}`)")
                self.items.append(BARRIER)
            elif n.type == "declaration":
                for d in n.children_by_field_name("declarator"):
                    if d.type != "init_declarator":
                        raise Decline(f"`{' '.join(text_of(n).split())}` declares a local with no value in the tree")
                    name = d.child_by_field_name("declarator")
                    while name.type != "identifier" and name.child_by_field_name("declarator") is not None:
                        name = name.child_by_field_name("declarator")
                    value = substituted(d.child_by_field_name("value"), text_of, rename)
                    if "".join(value.split()).strip("()") == self.S:
                        rename = {**rename, text_of(name): self.S}  # `volatile T *smem = sdata;`
                    else:
                        locals_ = locals_ + ((text_of(name), value),)
            elif n.type == "for_statement":
                self.loop(n, text_of, rename, conds, bind, locals_, depth)
            elif n.type == "if_statement":
                if n.child_by_field_name("alternative") is not None:
                    raise Decline("an `else` in the tree")
                c = [x for x in n.child_by_field_name("condition").named_children if x.type != "comment"][0]
                cond = substituted(c, text_of, rename)
                known = self.constant(cond, dict(bind))
                if known is None:
                    self.read([n.child_by_field_name("consequence")], text_of, rename, conds + (cond,), bind,
                              locals_, depth)
                elif known:
                    self.read([n.child_by_field_name("consequence")], text_of, rename, conds, bind, locals_, depth)
            elif n.type == "expression_statement" and _is_barrier(self.ctx, n, "warp"):
                self.items.append(WARP_BARRIER)
            elif n.type == "expression_statement" and n.named_children and \
                    n.named_children[0].type == "call_expression":
                self.call(n.named_children[0], text_of, rename, conds, bind, locals_, depth)
            elif n.type == "expression_statement":
                self.step(n, text_of, rename, conds, bind, locals_)
            else:
                raise Decline(f"`{' '.join(text_of(n).split())[:60]}` in the tree is not a loop, a condition, a "
                              "barrier or a combining step")

    def loop(self, n, text_of, rename, conds, bind, locals_, depth) -> None:
        init, cond = n.child_by_field_name("initializer"), n.child_by_field_name("condition")
        update = n.child_by_field_name("update")
        if init is None or cond is None or update is None:
            raise Decline("the tree's loop has no start, condition or step")
        if init.type == "declaration":
            d = init.child_by_field_name("declarator")
            var, start = text_of(d.child_by_field_name("declarator")), d.child_by_field_name("value")
        elif init.type == "assignment_expression":
            var, start = text_of(init.child_by_field_name("left")), init.child_by_field_name("right")
        else:
            raise Decline("the tree's loop does not start from a value")
        if update.type == "assignment_expression" and text_of(update.child_by_field_name("left")) == var:
            op = text_of(update.child_by_field_name("operator"))
            step_text = f"{var} {op[:-1]} ({text_of(update.child_by_field_name('right'))})" if op != "=" else \
                text_of(update.child_by_field_name("right"))
        elif update.type == "update_expression":
            step_text = f"{var} + 1" if "++" in text_of(update) else f"{var} - 1"
        else:
            raise Decline("the tree's loop steps other than by an assignment")
        inner = {k: v for k, v in rename.items() if k != var}
        now = self.number(substituted(start, text_of, inner), dict(bind))
        for _ in range(65):
            at = {**dict(bind), var: now}
            if not self.number(substituted(cond, text_of, inner), at):
                return
            self.read([n.child_by_field_name("body")], text_of, inner, conds, tuple(at.items()), locals_, depth)
            now = self.number(step_text, at)
        raise Decline("the tree's loop does not end within 64 steps")

    def call(self, e, text_of, rename, conds, bind, locals_, depth) -> None:
        fn = e.child_by_field_name("function")
        targs = []
        if fn.type == "template_function":
            targs = [substituted(a, text_of, rename) for a in fn.child_by_field_name("arguments").named_children
                     if a.type != "comment"]
            fn = fn.child_by_field_name("name")
        name = text_of(fn)
        args = [substituted(a, text_of, rename) for a in e.child_by_field_name("arguments").named_children
                if a.type != "comment"]
        if depth >= MAX_INLINE:
            raise Decline(f"the tree calls `{name}` more than {MAX_INLINE} functions deep")
        for f, f_text in syntax_nodes(self.ctx.source, ("function_definition",)):
            d = function_declarator(f)
            if d is None or f_text(d.child_by_field_name("declarator")) != name:
                continue
            params = []
            for p in d.child_by_field_name("parameters").named_children:
                if p.type != "parameter_declaration":
                    continue
                x = p.child_by_field_name("declarator")
                while x is not None and x.type != "identifier":
                    x = x.child_by_field_name("declarator")
                params.append(f_text(x) if x is not None else "")
            tparams = []
            if f.parent is not None and f.parent.type == "template_declaration":
                for p in f.parent.child_by_field_name("parameters").named_children:
                    x = p.child_by_field_name("declarator") or p.child_by_field_name("name")
                    tparams.append(f_text(x) if x is not None else "")
            if len(params) != len(args) or (targs and len(tparams) != len(targs)):
                raise Decline(f"`{name}` is called with other arguments than it takes")
            names = {**dict(zip(params, (f"({a})" for a in args))), **dict(zip(tparams, (f"({a})" for a in targs)))}
            for p, a in zip(params, args):
                if "".join(a.split()) == self.S:
                    names[p] = self.S
            self.read([f.child_by_field_name("body")], f_text, names, conds, bind, locals_, depth + 1)
            return
        raise Decline(f"the tree calls `{name}`, no function of the file")

    def step(self, n, text_of, rename, conds, bind, locals_) -> None:
        text = substituted(n, text_of, rename)
        found = syntax_nodes(f"void kt_f() {{ {text} }}", ("assignment_expression",))
        if not found or found[0][0].parent.type != "expression_statement":
            raise Decline(f"`{' '.join(text.split())[:60]}` in the tree is not an assignment combining two slots")
        e, t = found[0]
        left = e.child_by_field_name("left")
        if left.type != "subscript_expression" or t(left.child_by_field_name("argument")) != self.S:
            raise Decline(f"the tree's step does not write `{self.S}`")
        dst = _index(left, t)
        oper, right = t(e.child_by_field_name("operator")), e.child_by_field_name("right")
        mirror = ""
        if oper == "=" and right.type == "assignment_expression" and \
                right.child_by_field_name("left").type == "identifier":
            # `S[tid] = sum = sum + S[src]`: the step is `S[tid] = S[tid] + S[src]` where `sum` holds
            # the thread's slot (proved as the tree is taken)
            mirror = t(right.child_by_field_name("left"))
            own = f"{self.S}[{dst}]"
            inner = substituted(right, t, {mirror: own}, {})
            again = syntax_nodes(f"void kt_f() {{ {own} = {inner[inner.index('=', len(own)) + 1:].strip()}; }}"
                                 if t(right.child_by_field_name("operator")) == "=" else
                                 f"void kt_f() {{ {inner}; }}", ("assignment_expression",))
            if not again:
                raise Decline(f"`{' '.join(text.split())}` cannot be read as a step of the tree")
            right, t = again[0][0].child_by_field_name("right"), again[0][1]
            oper = t(again[0][0].child_by_field_name("operator"))
        src, kind = _source(right, t, self.S, oper, dst)
        self.items.append(_Step(conds, bind, locals_, dst, src, kind, mirror))


def _tree(ctx, stmts, text_of, S: str, env, ids, B: int, dialect: str) -> tuple[str, str, str, bool]:
    """The tree's combining operator, proved by taking every step for every thread; the local that
    holds slot 0's value at the end ("" for none: the samples' running sum, `S[tid] = sum = sum +
    S[tid + s]`, holds its slot's value while every step goes through it); and whether the last
    steps rely on a warp's threads in lockstep (no barrier between steps that read a slot another
    thread of the same warp writes: the hand-unrolled last warp)."""
    consts = {k: str(v) for k, v in entry_constants(ctx).items()}
    py_ids = {**ids, **consts}

    def number(text: str, extra: dict) -> int:
        try:
            return parse_expression(python_text(_env_text(text, env, extra), py_ids)).evaluate(extra)
        except (ExpressionError, KeyError) as e:
            raise Decline(f"`{' '.join(text.split())}` cannot be evaluated ({e})") from None

    tree = _Tree(ctx, S, number, consts)
    tree.read(stmts, text_of, {}, (), (), ())
    steps = [x for x in tree.items if isinstance(x, _Step)]
    if not steps:
        raise Decline("no step of the tree combines two slots")
    kinds = {x.kind[0] for x in steps}
    if len(kinds) != 1 or len({x.kind for x in steps}) != 1:
        raise Decline("the tree's steps combine slots with different operators")
    kind = steps[0].kind
    mirrors = {x.mirror for x in steps if x.mirror}
    if len(mirrors) > 1:
        raise Decline("the tree keeps more than one running value beside the slots")
    mirror = next(iter(mirrors), "")
    if mirror:
        if mirror not in env or "".join(env.get(S, "").split()) not in ("".join(env[mirror].split()),
                                                                        "(" + "".join(env[mirror].split()) + ")"):
            raise Decline(f"`{mirror}` does not hold the thread's slot of `{S}` when the tree starts")
        # every write of it in the tree is a step's `S[tid] = sum = ...` (taken or not)
        for st in stmts:
            for x, t in syntax_nodes(text_of(st), ("assignment_expression", "update_expression")):
                if t(x.child_by_field_name("left") or x.child_by_field_name("argument")) != mirror:
                    continue
                up = x.parent
                while up is not None and up.type == "parenthesized_expression":
                    up = up.parent
                if x.type != "assignment_expression" or up is None or up.type != "assignment_expression" or \
                        up.child_by_field_name("right") != x or \
                        up.child_by_field_name("left").type != "subscript_expression" or \
                        t(up.child_by_field_name("left").child_by_field_name("argument")) != S:
                    raise Decline(f"`{mirror}` changes in the tree other than as its slot's copy")
    combine = {"sum": "($a) + ($b)", "max": f"{kind[1]}($a, $b)", "min": f"{kind[1]}($a, $b)"}[kind[0]]
    content: list = [1 << t for t in range(B)]  # the elements each slot holds; None: one counted twice
    mirrored = True  # every write so far went through the mirror: it holds its thread's slot
    lockstep = False

    def close(phase: list, final: bool) -> None:
        """Checks a run of steps with no block barrier between them: a slot one thread writes that
        another reads or writes is a race across warps; within a warp it is ordered by a warp's
        barrier between the two (`__syncwarp()`), else only by the warp's threads in lockstep."""
        nonlocal lockstep
        writers: dict[int, set] = {}
        users: dict[int, set] = {}
        for st, t, d_i, s_i, sub in phase:
            writers.setdefault(d_i, set()).add((t, sub))
            users.setdefault(d_i, set()).add((t, sub))
            users.setdefault(s_i, set()).add((t, sub))
        if final:
            users.setdefault(0, set()).add((0, sub_phase))  # the last statements' thread reads slot 0
        for x, ws in writers.items():
            for t1, p1 in ws:
                for t2, p2 in users[x]:
                    if t1 == t2:
                        continue
                    if t1 // 32 != t2 // 32:
                        st = next(e[0] for e in phase if e[1] in (t1, t2))
                        raise Decline(f"at step {_where(st)} a slot is read while another thread writes it")
                    if p1 == p2:
                        lockstep = True

    taken: list = []
    sub_phase = 0
    for item in tree.items:
        if item is BARRIER:
            close(taken, False)
            taken = []
            continue
        if item is WARP_BARRIER:
            sub_phase += 1
            continue
        st = item
        if st.mirror and not mirrored:
            raise Decline(f"`{st.mirror}` no longer holds its thread's slot at step {_where(st)}")
        snapshot = list(content)
        writes: dict[int, int] = {}
        for t in range(B):
            scope = {**dict(st.bind), "kt_t": t}
            for name, val in st.locals:
                scope[name] = number(val, scope)
            if not all(number(c, scope) for c in st.conds):
                continue
            d_i, s_i = number(st.dst, scope), number(st.src, scope)
            if st.mirror and d_i != t:
                raise Decline(f"at step {_where(st)} thread {t} writes slot {d_i}, not its own, with `{st.mirror}`")
            if not (0 <= d_i < B and 0 <= s_i < B) or d_i in writes:
                raise Decline(f"at step {_where(st)} thread {t} combines slots {d_i} and {s_i}: outside the "
                              "block or written twice")
            writes[d_i] = s_i
            taken.append((st, t, d_i, s_i, sub_phase))
        if writes and not st.mirror:
            mirrored = False
        for d_i, s_i in writes.items():
            a, b = snapshot[d_i], snapshot[s_i]
            content[d_i] = None if a is None or b is None or a & b else a | b
    # the steps after the last barrier are followed by the last statements (thread 0 reads slot 0)
    close(taken, True)
    if content[0] is None:
        raise Decline("the tree counts a value twice in slot 0")
    if content[0] != (1 << B) - 1:
        raise Decline(f"the tree does not gather all {B} slots into slot 0")
    if lockstep and dialect != "cuda" and not in_warps(ctx.limits):
        raise Decline(f"the tree's last steps run without barriers, a warp's threads in lockstep, which OpenCL does "
                      f"not promise and {ctx.limits.name or 'this device'} does not do (only NVIDIA's and AMD's GPUs "
                      f"run their work-items 32 or 64 at a time)")
    return kind[0], combine, mirror if mirrored else "", lockstep


def in_warps(limits) -> bool:
    """Whether an OpenCL device runs its work-items in warps of at least 32 (NVIDIA's GPUs) or
    wavefronts of 64 (AMD's), as the vendors' own OpenCL samples assume in a last warp without
    barriers; OpenCL itself promises no such thing, and a CPU's runtime runs each work-item
    alone between barriers."""
    words = f"{limits.vendor} {limits.name}".lower()
    gpu = limits.extra.get("device_type", "gpu") == "gpu" and limits.warp_size >= 32
    return gpu and any(w in words for w in ("nvidia", "advanced micro devices", "amd"))


def _where(st: _Step) -> str:
    at = ", ".join(f"{k} = {v}" for k, v in st.bind)
    return f"`{st.dst} <- {st.src}`" + (f" ({at})" if at else "")


def _env_text(text: str, env, scope) -> str:
    """An expression with the locals of `env` (not those of `scope`) replaced by their values."""
    found = syntax_nodes(f"auto kt_e = ({text});", ("parenthesized_expression",))
    if not found:
        raise Decline(f"`{text}` cannot be read")
    node, text_of = found[0]
    return substituted(node, text_of, {k: f"({v})" for k, v in env.items() if k not in scope}, {})


def _index(sub, text_of) -> str:
    idx = sub.child_by_field_name("indices") or sub.child_by_field_name("index")
    inner = [c for c in idx.named_children if c.type != "comment"]
    return text_of(inner[0]) if inner else text_of(idx)


def _source(right, text_of, S: str, oper: str, dst: str) -> tuple[str, tuple[str, str]]:
    """The slot a step reads besides its destination, and its operator: ("sum", "+"), ("max", fn)."""
    def slot(n):
        while n.type == "parenthesized_expression":
            n = [c for c in n.named_children if c.type != "comment"][0]
        if n.type == "subscript_expression" and text_of(n.child_by_field_name("argument")) == S:
            return _index(n, text_of)
        return None
    same = "".join(dst.split())
    if oper == "+=":
        src = slot(right)
        if src is not None:
            return src, ("sum", "+")
    if oper == "=" and right.type == "binary_expression" and text_of(right.child_by_field_name("operator")) == "+":
        a, b = slot(right.child_by_field_name("left")), slot(right.child_by_field_name("right"))
        if a is not None and b is not None and "".join(a.split()) == same:
            return b, ("sum", "+")
        if a is not None and b is not None and "".join(b.split()) == same:
            return a, ("sum", "+")
    if oper == "=" and right.type == "call_expression":
        fn = text_of(right.child_by_field_name("function"))
        args = [x for x in right.child_by_field_name("arguments").named_children if x.type != "comment"]
        kind = "max" if fn in MAX_CALLS else "min" if fn in MIN_CALLS else None
        if kind and len(args) == 2:
            a, b = slot(args[0]), slot(args[1])
            if a is not None and b is not None and "".join(a.split()) == same:
                return b, (kind, fn)
            if a is not None and b is not None and "".join(b.split()) == same:
                return a, (kind, fn)
    raise Decline(f"the tree's step is not a sum, max or min of two slots of `{S}`")


def _final(ctx, a, stmts, text_of, S: str, env, ids, guard: str, mirror: str = ""):
    g = python_text(_env_text(guard, env, {}), ids)
    try:
        only_first = all(parse_expression(g).evaluate({"kt_t": t, "kt_j": 0}) == (t == 0) for t in range(64))
    except (ExpressionError, KeyError):
        only_first = False
    if not only_first:
        raise Decline(f"the last statements run under `{guard}`, not for the block's first thread alone")
    exprs = {**ids, f"{S}[0]": "kt_total"}
    # the first thread's copy of its slot is slot 0's value
    names = {**{k: f"({v})" for k, v in env.items() if k != S}, **({mirror: "kt_total"} if mirror else {})}
    for s in stmts:
        if s.type != "expression_statement":
            raise Decline("a last statement that is not an expression")
        text = substituted(s, text_of, names, exprs)
        if S in expression_names_stmt(text):
            raise Decline(f"a last statement reads `{S}` other than its slot 0")
        if "$" in text:
            raise Decline("a `$` in the kernel's code")
        yield " ".join(text.split())


def _atomic(ctx, final: tuple[str, ...], op: str) -> None:
    """The last statements (not per block) are one atomic accumulation into a fixed place."""
    if len(final) != 1:
        raise Decline("the block's result is not combined by one atomic")
    calls = syntax_nodes(final[0], ("call_expression",))
    if not calls:
        raise Decline("the block's result is written to one place by every block (not an atomic): a race")
    node, text_of = calls[0]
    fn = text_of(node.child_by_field_name("function"))
    if fn in ATOMIC_CALLS[op]:
        return
    for f, t in syntax_nodes(ctx.source, ("function_definition",)):
        d = function_declarator(f)
        if d is not None and t(d.child_by_field_name("declarator")) == fn:
            body = raw_text(ctx.source, f)
            if op == "sum" and any(c in body for c in CAS_CALLS) and "+" in body:
                return
    raise Decline(f"`{fn}` is not an atomic {op} the rules know")


def _same_grid(ctx, bound: str, B: int, per: int) -> None:
    """The launch's grid is one block per per * B elements of the bound."""
    spec = spec_text(bound, spec_scalars(ctx))
    device = ctx.limits.expression_names()
    try:
        want = parse_expression(f"ceil_div({spec}, {per * B})")
        have = parse_expression(ctx.grid[0])
    except ExpressionError as e:
        raise Decline(f"the launch cannot be read ({e})") from None
    for problem in (*ctx.original.problems, *ctx.original.verify_problems):
        env = {**device, **problem.values, **ctx.defaults}
        try:
            if want.evaluate(env) != have.evaluate(env) or any(
                    parse_expression(g).evaluate(env) != 1 for g in ctx.grid[1:]):
                raise Decline(f"the grid is not one block per {per * B} elements of `{bound}` at {problem.label()}")
        except (ExpressionError, KeyError) as e:
            raise Decline(f"the launch cannot be evaluated at {problem.label()} ({e})") from None


def _rewrite(ctx: RewriteContext, r: Reduction) -> Rewrite:
    d = Dialect.of(ctx.backend)
    spans = kernel_spans(ctx.source, ctx.model)
    head = header(ctx.source, spans)
    names = fresh_names(("LANES", "THREADS", "GRID", "ITEMS"), ctx.taken | set(ctx.defaults))
    spec_bound = spec_text(r.bound, spec_scalars(ctx))
    segments = f"ceil_div({spec_bound}, {r.per * r.B})"
    if r.per_segment and r.strided:
        # the launch's grid is the original's: its blocks are the partials, each over its
        # grid-stride share of the runs (the new kernel reads the grid as the original does)
        switch, off = names["ITEMS"], f"{names['ITEMS']} == 0"
        params = [ParamProposal(names["ITEMS"], (0, 1, 2, 4, 8), 0, "loads in flight per thread over the block's "
                                "grid-stride share (0: the original loop and tree)", "work"),
                  ParamProposal(names["THREADS"], (64, 128, 256, 512, 1024), 256, "threads per block", "threads")]
        constraints = [f"{switch} > 0 or {names['THREADS']} == 256",
                       f"{off} or {names['THREADS']} <= max_threads_per_block"]
        grid0 = ctx.grid[0]
        kernel = _strided_kernel(head, r, d)
        first = {names["ITEMS"]: (0, 2, 8), names["THREADS"]: (256, 1024)}
        what = (f"reduction: each block's partial {r.op} over its grid-stride share of the runs of {r.per * r.B} "
                f"elements (the original's grid kept: a partial per block), THREADS threads a block with ITEMS loads "
                f"in flight each, combined in registers then across the block")
        if r.op == "sum":
            what += ("; the sum in another order, so it differs from the original's by rounding, which the gate's "
                     "tolerance (calibrated on the original's own error against the reference) judges")
    elif r.per_segment:
        switch, off = names["LANES"], f"{names['LANES']} == 0"
        params = [ParamProposal(names["LANES"], (0, 8, 16, 32), 0, f"threads per segment of {r.B} elements "
                                "(0: the original tree)", "lanes"),
                  ParamProposal(names["THREADS"], (64, 128, 256, 512, 1024), 256, "threads per block", "threads"),
                  ParamProposal(names["GRID"], (0, 1, 2, 4, 8, 16), 0, "0: a group of LANES threads per segment; "
                                "k: k blocks per multiprocessor, striding over the segments", "grid")]
        constraints = [f"{switch} > 0 or ({names['THREADS']} == 256 and {names['GRID']} == 0)",
                       f"{off} or {names['THREADS']} % {names['LANES']} == 0",
                       f"{off} or {names['THREADS']} <= max_threads_per_block"]
        grid0 = (f"(ceil_div({segments}, {names['THREADS']} // {names['LANES']}) if {names['GRID']} == 0 else "
                 f"min(sm_count * {names['GRID']}, ceil_div({segments}, {names['THREADS']} // {names['LANES']}))) "
                 f"if {switch} > 0 else ({ctx.grid[0]})")
        kernel = _segment_kernel(head, r, d)
        first = {names["LANES"]: (0, 16, 32), names["THREADS"]: (128, 256, 512), names["GRID"]: (0, 4)}
        what = (f"reduction: each segment of {r.B} elements (a block's partial {r.op}) over LANES threads, combined "
                f"in registers then across the lanes, GRID blocks per multiprocessor")
    else:
        switch, off = names["GRID"], f"{names['GRID']} == 0"
        params = [ParamProposal(names["GRID"], (0, 1, 2, 4, 8, 16, 32), 0, "blocks per multiprocessor striding over "
                                "all the elements (0: the original tree, a block per "
                                f"{r.B} elements)", "grid"),
                  ParamProposal(names["THREADS"], (64, 128, 256, 512, 1024), 256, "threads per block", "threads"),
                  ParamProposal(names["ITEMS"], (1, 2, 4, 8), 1, "loads in flight per thread", "work")]
        constraints = [f"{switch} > 0 or ({names['THREADS']} == 256 and {names['ITEMS']} == 1)",
                       f"{off} or {names['THREADS']} <= max_threads_per_block"]
        grid0 = (f"min(sm_count * {switch}, ceil_div({spec_bound}, {names['THREADS']} * {names['ITEMS']})) "
                 f"if {switch} > 0 else ({ctx.grid[0]})")
        kernel = _total_kernel(head, r, d)
        first = {names["GRID"]: (0, 2, 8), names["THREADS"]: (256, 512), names["ITEMS"]: (1, 4)}
        what = (f"reduction: an atomic {r.op} of all the elements, GRID blocks per multiprocessor striding over them, "
                f"ITEMS loads in flight per thread, one atomic per block")
    if r.lockstep and d.name == "cuda":
        what += ("; the original's last steps run without barriers or __syncwarp, a warp's threads assumed in "
                 "lockstep: a race on Volta and later GPUs (independent thread scheduling), which the rewrite's "
                 "shuffles do not have")
    elif r.lockstep:
        what += ("; the original's last steps run without barriers, a warp's work-items assumed in lockstep, "
                 "which OpenCL does not promise (a race on NVIDIA's Volta and later GPUs, and wherever a runtime "
                 "runs work-items apart): the rewrite combines in local memory with a barrier at every step")
    constraints += pinned(ctx, off)
    for name, value in ctx.defaults.items():
        first[name] = (value,)
    kernel = with_names(kernel, names)
    block0 = f"{names['THREADS']} if {switch} > 0 else ({ctx.block[0]})"
    grid = (grid0,) + tuple(ctx.grid[1:])
    block = (block0,) + tuple(ctx.block[1:])
    source = beside(ctx.source, spans, f"{switch} > 0", params, "", kernel, NAME)
    return Rewrite(NAME, source, tuple(params), what, tuple(constraints), grid, block, first=first, helps="memory")


def _group_combine(r: Reduction, d: Dialect, width: str, var: str, scratch: str) -> str:
    """Code combining `var` across `width` consecutive threads (a power of two), leaving the
    group's total in `var` of every thread: shuffles in CUDA, local memory in OpenCL."""
    c = r.combine.replace("$a", var).replace("$b", "kt_o")
    if d.name == "cuda":
        return (f"#pragma unroll\n        for (int kt_off = ({width}) / 2; kt_off > 0; kt_off /= 2) {{\n"
                f"            const {r.elem_type} kt_o = __shfl_xor_sync(0xffffffffu, {var}, kt_off, {width});\n"
                f"            {var} = {c};\n        }}")
    return (f"{scratch}[kt_lid] = {var};\n        {d.barrier};\n"
            f"        for (int kt_off = ({width}) / 2; kt_off > 0; kt_off /= 2) {{\n"
            f"            if (kt_lid % ({width}) < kt_off) {{\n"
            f"                const {r.elem_type} kt_o = {scratch}[kt_lid + kt_off];\n"
            f"                {scratch}[kt_lid] = {r.combine.replace('$a', scratch + '[kt_lid]').replace('$b', 'kt_o')};\n"
            f"            }}\n            {d.barrier};\n        }}\n"
            f"        {var} = {scratch}[kt_lid - kt_lid % ({width})];\n        {d.barrier};")


def _parts(r: Reduction) -> list[str]:
    """The element's value as the terms its operator combines, each the operator's identity where
    the value's guard fails: `c ? (g[i] + (i + B < n ? g[i + B] : 0)) : 0` is `c ? g[i] : 0` and
    `c ? (i + B < n ? g[i + B] : 0) : 0`. Loaded one by one, the terms are all in flight before
    any is combined (a term's combine inside its guard would wait for its loads)."""
    calls = MAX_CALLS if r.op == "max" else MIN_CALLS if r.op == "min" else set()

    def split(node, text_of) -> list[str]:
        node = unwrap(node) or node
        if node.type == "conditional_expression" and \
                _is_identity(text_of(node.child_by_field_name("alternative")), r.op):
            cond = text_of(node.child_by_field_name("condition"))
            return [f"(({cond}) ? ({t}) : ({r.padding}))" for t in split(node.child_by_field_name("consequence"),
                                                                          text_of)]
        if r.op == "sum" and node.type == "binary_expression" and text_of(node.child_by_field_name("operator")) == "+":
            return split(node.child_by_field_name("left"), text_of) + split(node.child_by_field_name("right"), text_of)
        if node.type == "call_expression" and text_of(node.child_by_field_name("function")) in calls:
            args = [c for c in node.child_by_field_name("arguments").named_children if c.type != "comment"]
            if len(args) == 2:
                return split(args[0], text_of) + split(args[1], text_of)
        return [text_of(node)]

    found = syntax_nodes(f"auto kt_e = ({r.value});", ("parenthesized_expression",))
    if not found:
        return [r.value]
    node, text_of = found[0]
    return split(node, text_of)


def _load_parts(r: Reduction, slot: str, indent: str) -> tuple[int, str]:
    """(terms an element loads, the code storing them at kt_v[slot * terms + p]): through the flat
    guard for a flat value; the element's own guards otherwise."""
    T, parts = r.elem_type, _parts(r)
    lines = [f"const long kt_i = kt_j * {r.B} + kt_t;"] if r.flat else []
    for p, part in enumerate(parts):
        value = f"(kt_i < ({r.bound})) ? ({T})({part}) : ({T})({r.padding})" if r.flat else f"({T})({part})"
        lines.append(f"kt_v[({slot}) * {len(parts)} + {p}] = {value};")
    return len(parts), "\n".join(indent + line for line in lines)


def _combine_loaded(r: Reduction, count: str, indent: str) -> str:
    """Code folding the `count` values a thread loaded into kt_v into kt_acc. The loads come
    first, all of them, and the combine after: a combine right after each guarded load would wait
    for that load before the next one is issued (the guard is a branch), one load in flight."""
    acc = r.combine.replace("$a", "kt_acc").replace("$b", "kt_v[kt_u]")
    return f"{indent}#pragma unroll\n{indent}for (int kt_u = 0; kt_u < {count}; ++kt_u) kt_acc = {acc};"


def _segment_kernel(head: str, r: Reduction, d: Dialect) -> str:
    T = r.elem_type
    terms, element = _load_parts(r, "kt_u", "                ")
    final = "\n".join(f"                {f}" for f in r.final)
    scratch = f"    {d.shared} {T} kt_scratch[$THREADS];\n" if d.name == "opencl" else ""
    return f"""{head}
{{
{scratch}    const int kt_lid = {d.local_id};
    const int kt_lane = kt_lid % $LANES;
    const long kt_segments = ((long)({r.bound}) + {r.per * r.B - 1}) / {r.per * r.B};
    const long kt_per_block = $THREADS / $LANES;
    for (long kt_first = (long){d.group_id[0]} * kt_per_block; kt_first < kt_segments;
         kt_first += (long){d.num_groups} * kt_per_block) {{
        const long kt_j = kt_first + kt_lid / $LANES;
        {T} kt_acc = ({T})({r.padding});
        if (kt_j < kt_segments) {{
            {T} kt_v[{r.B} / $LANES * {terms}];
#pragma unroll
            for (int kt_u = 0; kt_u < {r.B} / $LANES; ++kt_u) {{
                const int kt_t = kt_u * $LANES + kt_lane;
{element}
            }}
{_combine_loaded(r, f"{r.B} / $LANES * {terms}", "            ")}
        }}
        {_group_combine(r, d, "$LANES", "kt_acc", "kt_scratch")}
        if (kt_j < kt_segments && kt_lane == 0) {{
            const {T} kt_total = kt_acc;
{final}
        }}
    }}
}}"""


def _across_block(r: Reduction, d: Dialect) -> str:
    """Code combining every thread's kt_acc across the block of $THREADS threads into the first
    thread's: shuffles within warps, then the warps' totals by the first warp (CUDA); a tree in
    local memory (OpenCL)."""
    T = r.elem_type
    if d.name == "cuda":
        across = (f"{_group_combine(r, d, '32', 'kt_acc', '')}\n"
                  f"    __shared__ {T} kt_warps[32];\n"
                  f"    if (kt_lid % 32 == 0) kt_warps[kt_lid / 32] = kt_acc;\n"
                  f"    __syncthreads();\n"
                  f"    if (kt_lid < 32) {{\n"
                  f"        kt_acc = kt_lid < $THREADS / 32 ? kt_warps[kt_lid] : ({T})({r.padding});\n"
                  f"        {_group_combine(r, d, '32', 'kt_acc', '')}\n"
                  f"    }}")
    else:
        across = _group_combine(r, d, "$THREADS", "kt_acc", "kt_scratch")
    return across


def _strided_kernel(head: str, r: Reduction, d: Dialect) -> str:
    """Per-block partials over a grid-stride share, the original's grid kept: block kt_block took
    the runs kt_block, kt_block + grid, ... below the runs the bound leaves, B threads a run; the
    new block's THREADS threads take those (run, thread) pairs in turn, ITEMS at a time."""
    T = r.elem_type
    final = "\n".join(f"        {f}" for f in r.final)
    run = r.per * r.B
    terms, element = _load_parts(r, "kt_u", "                ")
    scratch = f"    {d.shared} {T} kt_scratch[$THREADS];\n" if d.name == "opencl" else ""
    return f"""{head}
{{
{scratch}    const int kt_lid = {d.local_id};
    const long kt_block = (long){d.group_id[0]};
    const long kt_grid = (long){d.num_groups};
    const long kt_runs = ((long)({r.bound}) + {run - 1}) / {run};
    const long kt_pairs = kt_runs > kt_block ? (kt_runs - kt_block + kt_grid - 1) / kt_grid * {r.B} : 0;
    {T} kt_acc = ({T})({r.padding});
    for (long kt_base = kt_lid; kt_base < kt_pairs; kt_base += (long)$THREADS * $ITEMS) {{
        {T} kt_v[$ITEMS * {terms}];
#pragma unroll
        for (int kt_u = 0; kt_u < $ITEMS * {terms}; ++kt_u) kt_v[kt_u] = ({T})({r.padding});
#pragma unroll
        for (int kt_u = 0; kt_u < $ITEMS; ++kt_u) {{
            const long kt_q = kt_base + (long)kt_u * $THREADS;
            if (kt_q < kt_pairs) {{
                const long kt_j = kt_block + (kt_q / {r.B}) * kt_grid;
                const int kt_t = (int)(kt_q % {r.B});
{element}
            }}
        }}
{_combine_loaded(r, f"$ITEMS * {terms}", "        ")}
    }}
    {_across_block(r, d)}
    if (kt_lid == 0) {{
        const long kt_j = kt_block;
        const {T} kt_total = kt_acc;
{final}
    }}
}}"""


def _total_kernel(head: str, r: Reduction, d: Dialect) -> str:
    T = r.elem_type
    final = "\n".join(f"        {f}" for f in r.final)
    across = _across_block(r, d)
    scratch = f"    {d.shared} {T} kt_scratch[$THREADS];\n" if d.name == "opencl" else ""
    # kt_j and kt_t name the element's block and thread in the original, for a value that reads them
    used = expression_names(r.value)
    # a flat value reads elements below the bound; another one every thread of the original's blocks
    n_text = f"(long)({r.bound})" if r.flat else \
        f"(((long)({r.bound}) + {r.per * r.B - 1}) / {r.per * r.B}) * {r.B}"
    ids = (f"            const long kt_j = kt_i / {r.B};\n" if "kt_j" in used else "") + \
        (f"            const int kt_t = (int)(kt_i % {r.B});\n" if "kt_t" in used else "")
    parts = _parts(r)
    loads = "\n".join(f"            kt_v[kt_u * {len(parts)} + {p}] = (kt_i < kt_n) ? ({T})({part}) : ({T})({r.padding});"
                      for p, part in enumerate(parts))
    return f"""{head}
{{
{scratch}    const int kt_lid = {d.local_id};
    const long kt_n = {n_text};
    const long kt_stride = (long){d.num_groups} * $THREADS;
    {T} kt_acc = ({T})({r.padding});
    for (long kt_base = (long){d.group_id[0]} * $THREADS * $ITEMS + kt_lid; kt_base < kt_n;
         kt_base += kt_stride * $ITEMS) {{
        {T} kt_v[$ITEMS * {len(parts)}];
#pragma unroll
        for (int kt_u = 0; kt_u < $ITEMS; ++kt_u) {{
            const long kt_i = kt_base + (long)kt_u * $THREADS;
{ids}{loads}
        }}
{_combine_loaded(r, f"$ITEMS * {len(parts)}", "        ")}
    }}
    {across}
    if (kt_lid == 0) {{
        const {T} kt_total = kt_acc;
{final}
    }}
}}"""
