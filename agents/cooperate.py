"""What the rewrites for kernels whose threads cooperate share: the kernel's body as a list of
straight-line statements under its guards, renaming and inlining in statements, a bound read
over the spec's problem names, and the two dialects' words for ids, barriers and shared memory.

The rewrites that use it (agents/rewrite_contraction.py, agents/rewrite_reduction.py) each emit
a whole new kernel beside the original under `#if`, so the original stays token for token at the
parameters' defaults; this module reads the original, it never edits it.
"""

from __future__ import annotations

import ast

from dataclasses import dataclass, field

from kerntune.engine.proposal import ParamProposal

from . import affine
from .kernel_tree import KernelAnalysis, Span, inline, source_tokens, span_of, syntax_nodes
from .lift import fresh_name
from .model import ModelError, function_declarator
from .passes import Declined, Pass, Rewrite
from .syntax import cut, text

FMA_CALLS = {"fmaf", "fma", "__fmaf_rn", "__fma_rn", "mad"}
THREAD_WORDS = {"threadIdx", "blockIdx", "blockDim", "gridDim", "get_global_id", "get_local_id", "get_group_id",
                "get_local_size", "get_num_groups", "get_global_size", "get_global_offset", "warpSize"}


class Decline(Exception):
    """A rewrite that does not apply; the message says why in one phrase."""


class ReadingPass(Pass):
    """A cooperating pass that requires what its reading of the kernel finds: `read(ctx)` gives it
    (a contraction, a tree reduction) or raises Decline with the reason; `emit(ctx, found)` writes
    the rewrite. The reading is made once a context, for `requires` and `apply` both."""

    def __init__(self):
        self._read: tuple = (None, None)  # (the context, what `read` found in it)

    def read(self, ctx):
        raise NotImplementedError

    def emit(self, ctx, found):
        raise NotImplementedError

    def requires(self, ctx) -> str | None:
        try:
            self._read = (ctx, self.read(ctx))
        except Decline as e:
            return str(e)
        return None

    def apply(self, ctx) -> Rewrite | Declined:
        try:
            return self.emit(ctx, self._read[1] if self._read[0] is ctx else self.read(ctx))
        except Decline as e:
            return Declined(self.name, str(e))


@dataclass(frozen=True)
class Dialect:
    """The words a generated kernel needs, in CUDA or OpenCL."""

    name: str
    shared: str
    barrier: str
    local_id: str  # of dimension 0
    group_id: tuple[str, str, str]
    num_groups: str  # of dimension 0
    fma: str

    @staticmethod
    def of(backend: str) -> "Dialect":
        if backend == "cuda":
            return Dialect("cuda", "__shared__", "__syncthreads()", "threadIdx.x",
                           ("blockIdx.x", "blockIdx.y", "blockIdx.z"), "gridDim.x", "fmaf")
        return Dialect("opencl", "__local", "barrier(CLK_LOCAL_MEM_FENCE)", "(int)get_local_id(0)",
                       ("(int)get_group_id(0)", "(int)get_group_id(1)", "(int)get_group_id(2)"),
                       "(int)get_num_groups(0)", "fma")


@dataclass
class Body:
    """A kernel body read as straight-line statements: the guards around them (each a condition
    under which the thread goes on), and the statements in order, blocks flattened."""

    function: object  # the function_definition node
    text_of: object  # node -> its text
    guards: list[str] = field(default_factory=list)  # conditions as written, each true for a working thread
    statements: list = field(default_factory=list)
    guard_at: list[int] = field(default_factory=list)  # for each guard, the statements before it


@dataclass(frozen=True)
class KernelSpans:
    """Where the model's kernel and its body stand, in bytes of the source: what `header` and
    `beside` read."""

    span: Span
    body: Span


def lone_model(ctx):
    """The kernel model of the context's source, for a rewrite that makes threads cooperate: Decline
    with the reason where the model cannot be read or the threads already cooperate."""
    try:
        model = ctx.model
    except ModelError as e:
        raise Decline(str(e)) from None
    if model.cooperates:
        raise Decline("its threads already cooperate (barriers, shared memory, atomics or shuffles)")
    return model


def kernel_spans(source: str, model) -> KernelSpans:
    """The kernel's spans; a template kernel's from its `template <...>` line, so the kernel written
    beside it is the same template (its instantiations name both)."""
    span = model.kernel.span
    if model.signature.is_template:
        around = [sp for sp in (span_of(source, n) for n, _ in syntax_nodes(source, ("template_declaration",)))
                  if sp.start <= span.start and span.end <= sp.end]
        if around:
            span = Span(max(sp.start for sp in around), span.end)
    return KernelSpans(span, model.kernel.body)


def template_parameters(source: str, model) -> str:
    """A template kernel's template parameter list as written (`<typename real, int R>`), for a
    helper function written as the same template; "" for a kernel that is none."""
    if not model.signature.is_template:
        return ""
    span = model.kernel.span
    around = [(n, t) for n, t in syntax_nodes(source, ("template_declaration",))
              if span_of(source, n).start <= span.start and span.end <= span_of(source, n).end]
    if not around:
        raise Decline("the template kernel's `template <...>` line cannot be read")
    node, text_of = max(around, key=lambda x: x[0].start_byte)
    return " ".join(text_of(node.child_by_field_name("parameters")).split())


def kernel_parameters(source: str, fn) -> list[tuple[str, str]]:
    """Each parameter of a function definition as written (the words the syntax tree blanks, such
    as `__global`, included; comments left out) with its name, for a function declared with the
    kernel's own parameters; Decline where one cannot be read."""
    decl = function_declarator(fn)
    if decl is None:
        raise Decline("the kernel's parameters cannot be read")
    out = []
    after = None  # where the text before a parameter starts: after `(`, a comma or a comment
    for p in decl.child_by_field_name("parameters").children:
        if p.type != "parameter_declaration":
            after = span_of(source, p).end if p.type in ("(", ",", "comment") else after
            continue
        end = span_of(source, p).end
        text = " ".join((cut(source, after, end) if after is not None else raw_text(source, p)).split())
        node = p.child_by_field_name("declarator")
        while node is not None and node.type != "identifier":
            node = node.child_by_field_name("declarator")
        if node is None:
            raise Decline(f"the parameter `{text}` has no name")
        out.append((text, node.text.decode()))
    return out


def body_of(source: str, a: KernelAnalysis, whiles: bool = False) -> Body:
    """The analysed kernel's body, flattened; Decline when it holds a return other than a guard's,
    an `if` with statements after it, or an `else`, or (unless `whiles`) a while loop."""
    for node, text_of in syntax_nodes(source, ("function_definition",)):
        body = node.child_by_field_name("body")
        if body is not None and span_of(source, body) == a.body:
            out = Body(node, text_of)
            _flatten(body, out, whiles)
            return out
    raise Decline("the kernel's body cannot be found in its syntax tree")


def named_children(node) -> list:
    """A node's named children, comments left out."""
    return [c for c in node.named_children if c.type != "comment"]


def _flatten(block, out: Body, whiles: bool = False) -> None:
    items = named_children(block)
    for i, s in enumerate(items):
        if s.type == "compound_statement":
            _flatten(s, out, whiles)
            continue
        if s.type == "if_statement" and s.child_by_field_name("alternative") is None:
            cond = if_condition(s, out.text_of)
            then = s.child_by_field_name("consequence")
            if bare_return(then):
                out.guards.append(f"!({cond})")
                out.guard_at.append(len(out.statements))
                continue
            if i == len(items) - 1:
                out.guards.append(cond)
                out.guard_at.append(len(out.statements))
                if then.type == "compound_statement":
                    _flatten(then, out, whiles)
                else:
                    out.statements.append(then)
                continue
        if s.type == "return_statement" or (s.type == "if_statement" and _returns(s)):
            raise Decline("it returns other than from a guard at its top")
        if s.type in ("do_statement", "switch_statement", "goto_statement") or (s.type == "while_statement"
                                                                               and not whiles):
            raise Decline(f"its body holds control flow other than one guard and loops (line "
                          f"{s.start_point[0] + 1})")
        out.statements.append(s)


def _returns(node) -> bool:
    stack = [node]
    while stack:
        n = stack.pop()
        if n.type == "return_statement":
            return True
        stack.extend(n.children)
    return False


def if_condition(if_node, text_of) -> str:
    """An if's condition as written, without its parentheses."""
    cond = if_node.child_by_field_name("condition")
    inner = named_children(cond)
    return text_of(inner[0]) if cond.type == "condition_clause" and len(inner) == 1 else text_of(cond)


def bare_return(node) -> bool:
    """Whether a statement is `return;` alone (in braces or not)."""
    if node.type == "return_statement":
        return not named_children(node)
    return node.type == "compound_statement" and len(named_children(node)) == 1 and bare_return(named_children(node)[0])


def expression_names(text: str) -> set[str]:
    """The identifiers of an expression."""
    return {text_of(n) for n, text_of in syntax_nodes(f"auto kt_e = ({text});", ("identifier",))} - {"kt_e"}


def reads_thread_ids(text: str) -> bool:
    """Whether an expression reads thread or block ids or the launch's shape."""
    return bool(expression_names(text) & THREAD_WORDS) or any(w in text for w in THREAD_WORDS)


def substituted(node, text_of, mapping: dict[str, str], exprs: dict[str, str] | None = None) -> str:
    """A statement's or expression's text with the identifiers of `mapping` replaced (field names
    and called functions never), and the ids, calls and subscripts whose text (spaces left out) is a
    key of `exprs` (`blockIdx.x`, `get_group_id(0)`, `sdata[0]`) replaced whole."""
    src = node.text
    base = node.start_byte
    out, pos = [], 0
    stack, idents = [node], []
    exprs = exprs or {}
    while stack:
        n = stack.pop()
        if n.type in ("field_expression", "call_expression", "subscript_expression") and \
                "".join(text_of(n).split()) in exprs:
            idents.append(n)
            continue
        if n.type == "identifier":
            parent = n.parent
            if not (parent is not None and parent.type == "call_expression"
                    and parent.child_by_field_name("function") == n):
                idents.append(n)
            continue
        if n.type == "field_expression":
            stack.append(n.child_by_field_name("argument"))
            continue
        stack.extend(n.children)
    for n in sorted(idents, key=lambda n: n.start_byte):
        name = text_of(n) if n.type == "identifier" else "".join(text_of(n).split())
        new = mapping.get(name) if n.type == "identifier" else exprs.get(name)
        if new is None:
            continue
        out.append(src[pos:n.start_byte - base].decode("utf-8", "replace"))
        out.append(new)
        pos = n.end_byte - base
    out.append(src[pos:].decode("utf-8", "replace"))
    return "".join(out)


def inlined(a: KernelAnalysis, text: str, rename: dict[str, str]) -> str:
    """An expression with the kernel's single-assignment locals replaced by their initialisers and
    the names of `rename` renamed; Decline when a local assigned more than once remains."""
    out = inline(a, text, rename)
    left = (expression_names(out) & (set(a.changing) | set(a.locals))) - set(rename.values())
    if left:
        raise Decline(f"`{' '.join(text.split())}` reads {', '.join(sorted(left))}, assigned more than once")
    return out


def spec_text(bound: str, scalars: dict[str, str]) -> str:
    """A bound over the kernel's scalar arguments as an expression over the spec's problem names
    (each scalar replaced by its value); Decline when it is anything but a sum of products."""
    try:
        p = affine.read(bound)
    except affine.NotAffine as e:
        raise Decline(str(e)) from None
    terms = []
    for monomial, coeff in p.terms:
        factors = [str(coeff)] if coeff != 1 or not monomial else []
        for n in monomial:
            if n not in scalars:
                raise Decline(f"the bound `{bound}` reads `{n}`, no scalar argument with a value in the spec")
            factors.append(f"({scalars[n]})")
        terms.append(" * ".join(factors))
    return " + ".join(terms) or "0"


def spec_scalars(ctx) -> dict[str, str]:
    """Each scalar argument of the spec with a value, and that value over the problem names."""
    return {a.name: a.value.source for a in ctx.original.arguments if a.role == "scalar" and a.value is not None}


def defaults_block(params: list[ParamProposal] | tuple[ParamProposal, ...]) -> str:
    """The `#ifndef NAME / #define NAME default / #endif` lines of the parameters."""
    return "".join(f"#ifndef {p.name}\n#define {p.name} {p.default}\n#endif\n" for p in params)


def beside(source: str, a: KernelAnalysis, switch: str, params, helpers: str, kernel: str, what: str) -> str:
    """The source with the new kernel beside the original: `#if switch` the new one, `#else` the
    original as written, the parameters' defaults ahead of both."""
    original = cut(source, a.span.start, a.span.end)
    return (cut(source, 0, a.span.start) + f"// kerntune: the {what} rewrite; its parameters' defaults give the "
            f"original kernel\n{defaults_block(params)}#if {switch}\n{helpers}{kernel}\n#else\n{original}\n#endif"
            + cut(source, a.span.end))


def header(source: str, a: KernelAnalysis) -> str:
    """The kernel's declaration as written, up to its body's brace."""
    return cut(source, a.span.start, a.body.start).rstrip()


def unbounded_header(source: str, a: KernelAnalysis) -> str:
    """The kernel's declaration as written without its launch attributes (`__launch_bounds__(...)`,
    an `__attribute__((...))` holding `reqd_work_group_size`): for a new kernel launched with a
    block of its own, which the original's attributes would refuse."""
    text = header(source, a)
    tokens = source_tokens(text)
    cuts = []
    for i, (word, span) in enumerate(tokens):
        if word not in ("__launch_bounds__", "__attribute__") or i + 1 >= len(tokens) or tokens[i + 1][0] != "(":
            continue
        depth, j = 0, i + 1
        while j < len(tokens):
            depth += {"(": 1, ")": -1}.get(tokens[j][0], 0)
            if depth == 0:
                break
            j += 1
        inside = {w for w, _ in tokens[i + 1:j]}
        if j < len(tokens) and (word == "__launch_bounds__" or "reqd_work_group_size" in inside):
            cuts.append((span.start, tokens[j][1].end))
    for start, end in reversed(cuts):
        text = cut(text, 0, start) + cut(text, end)
    return text


def pinned(ctx, switch_off: str) -> list[str]:
    """Constraints holding the parameters made before this rewrite (the lifted block size...) at
    their defaults while the rewrite's kernel runs: it does not read them."""
    return [f"{switch_off} or {name} == {value!r}" for name, value in ctx.defaults.items()
            if isinstance(value, (int, float)) and not isinstance(value, bool)]


def within(inner: Span, outer: Span) -> bool:
    return outer.start <= inner.start and inner.end <= outer.end


def python_text(text: str, ids: dict[str, str]) -> str:
    """A C integer expression as the engine's expression syntax (`&&` as `and`, `/` as `//`), the
    ids and calls whose text (spaces left out) is a key of `ids` replaced by their values; Decline
    for anything else (a call, a cast to a float, an array)."""
    found = syntax_nodes(f"auto kt_e = ({text});", ("parenthesized_expression",))
    if not found:
        raise Decline(f"`{text}` cannot be read")
    node, text_of = found[0]
    return _py(node, text_of, ids)


PY_OPS = {"&&": "and", "||": "or", "/": "//"}


def _py(node, text_of, ids: dict[str, str]) -> str:
    t = node.type
    whole = "".join(text_of(node).split())
    if whole in ids:
        return f"({ids[whole]})"
    if t == "number_literal":
        digits = whole.rstrip("uUlL")
        if digits.isdigit():
            return digits
    elif t in ("identifier", "true", "false"):
        return whole
    elif t in ("parenthesized_expression", "condition_clause"):
        inner = named_children(node)
        if len(inner) == 1:
            return f"({_py(inner[0], text_of, ids)})"
    elif t == "cast_expression":
        kind = text_of(node.child_by_field_name("type"))
        if any(w in kind for w in ("int", "long", "size_t", "unsigned", "short")):
            return _py(node.child_by_field_name("value"), text_of, ids)
    elif t == "unary_expression":
        op = text_of(node.child_by_field_name("operator"))
        arg = _py(node.child_by_field_name("argument"), text_of, ids)
        if op in ("-", "+", "~"):
            return f"({op}{arg})"
        if op == "!":
            return f"(not {arg})"
    elif t == "binary_expression":
        op = text_of(node.child_by_field_name("operator"))
        left = _py(node.child_by_field_name("left"), text_of, ids)
        right = _py(node.child_by_field_name("right"), text_of, ids)
        if op in ("+", "-", "*", "/", "%", "<<", ">>", "&", "|", "^", "&&", "||", "<", "<=", ">", ">=", "==", "!="):
            return f"({left} {PY_OPS.get(op, op)} {right})"
    elif t == "conditional_expression":
        c, a, b = (_py(node.child_by_field_name(f), text_of, ids) for f in ("condition", "consequence", "alternative"))
        return f"({a} if {c} else {b})"
    raise Decline(f"`{' '.join(text_of(node).split())}` is not integer arithmetic over known values")


def raw_text(source: str, node) -> str:
    """A node's text as written (the CUDA and OpenCL words the syntax tree blanks included)."""
    sp = span_of(source, node)
    return cut(source, sp.start, sp.end)


def with_names(template: str, names: dict[str, str]) -> str:
    """Generated code whose parameters are written `$NAME`, each replaced by the name it takes in
    this template (a fresh one where the kernel's source already uses NAME)."""
    for name in sorted(names, key=len, reverse=True):
        template = template.replace("$" + name, names[name])
    return template


def fresh_names(wanted: tuple[str, ...], taken) -> dict[str, str]:
    """A name for each parameter a rewrite adds that neither the source nor the spec uses."""
    out: dict[str, str] = {}
    for name in wanted:
        out[name] = fresh_name(name, set(taken) | set(out.values()))
    return out


def constants(ctx) -> dict[str, int]:
    """Names of whole-number value the kernel may read: the file's `#define NAME 256` lines, and
    the parameters made before this rewrite at their defaults (which win)."""
    out: dict[str, int] = {}
    for node, text_of in syntax_nodes(ctx.source, ("preproc_def",)):
        name, value = node.child_by_field_name("name"), node.child_by_field_name("value")
        if name is None or value is None:
            continue
        digits = text_of(value).strip().rstrip("uUlL")
        if digits.isdigit():
            out[text_of(name)] = int(digits)
    out.update({k: v for k, v in ctx.defaults.items() if isinstance(v, int) and not isinstance(v, bool)})
    return out


def entry_constants(ctx) -> dict[str, int]:
    """The whole numbers the kernel may read (cooperate.constants), and a template kernel's value
    parameters at the entry's arguments (`reduce5<float, 256>`: blockSize 256)."""
    out = constants(ctx)
    # a `#define blockSize blockSize_SIZE` a lift left naming its parameter
    for node, text_of in syntax_nodes(ctx.source, ("preproc_def",)):
        name, value = node.child_by_field_name("name"), node.child_by_field_name("value")
        if name is not None and value is not None and text_of(value).strip() in out:
            out.setdefault(text_of(name), out[text_of(value).strip()])
    # the spec's build options define what the file's `#ifndef` defaults leave (-DblockSize=256)
    for option in ctx.original.compile_options.get(ctx.backend, ()):
        name, _, digits = option[2:].partition("=") if option.startswith("-D") else ("", "", "")
        if name.strip().isidentifier() and digits.strip().rstrip("uUlL").isdigit():
            out[name.strip()] = int(digits.strip().rstrip("uUlL"))
    params = ctx.model.signature.template_params
    entry = ctx.original.entry
    if params and "<" in entry:
        args = [w.strip() for w in entry[entry.index("<") + 1:entry.rindex(">")].split(",")]
        for param, arg in zip(params, args):
            digits = arg.rstrip("uUlL")
            if digits.isdigit() and param not in out:
                out[param] = int(digits)
    return out


def is_pragma(node, text_of) -> bool:
    """Whether a statement of a body is a `#pragma` line (`#pragma unroll` before a loop), or an
    `#if` choosing between such lines (the lifts' `#if UNROLL > 0 ... #pragma unroll UNROLL`): a hint
    to the compiler, which a rewrite that writes its own loops may leave out."""
    if node.type in ("preproc_if", "preproc_ifdef", "preproc_else", "preproc_elif"):
        condition = node.child_by_field_name("condition")
        inner = [c for c in node.named_children if c != condition and c.type not in ("comment", "identifier")]
        return all(is_pragma(c, text_of) for c in inner)
    if node.type != "preproc_call":
        return False
    directive = node.child_by_field_name("directive")
    return directive is not None and text_of(directive).strip() == "#pragma"


def strip_parens(node):
    """The expression inside any parentheses around it."""
    while node.type == "parenthesized_expression":
        inner = named_children(node)
        if len(inner) != 1:
            break
        node = inner[0]
    return node


def top_guard(items: list, coords: set[str]) -> tuple[int, list] | None:
    """The guard at the top of a body's statements `items` (declarations before it): `if (c) {...}`
    as the last statement, or `if (c) return;`, as (its position, `guard_parts` of the condition
    under which a thread goes on); None where no such `if` stands there first."""
    for i, s in enumerate(items):
        if s.type == "declaration":
            continue
        if s.type != "if_statement" or s.child_by_field_name("alternative") is not None:
            return None
        cond = text(s.child_by_field_name("condition"))
        then = s.child_by_field_name("consequence")
        named = named_children(then)
        returns = then.type == "return_statement" or (then.type == "compound_statement" and len(named) == 1
                                                      and named[0].type == "return_statement")
        if not returns and i != len(items) - 1:
            return None
        return i, list(guard_parts(f"!{cond}" if returns else cond, coords))
    return None


def guard_parts(guard: str, coords: set[str]):
    """(condition for a working thread, coordinate, bound or None) for each part of a guard; a part
    on anything but one coordinate declines."""
    try:
        node, text_of = syntax_nodes(f"auto kt_e = ({guard});", ("parenthesized_expression",))[0]
    except IndexError:
        raise Decline(f"the guard `{guard}` cannot be read") from None
    node = strip_parens(node)
    negated = False
    if node.type == "unary_expression" and text_of(node.child_by_field_name("operator")) == "!":
        negated, node = True, strip_parens(node.child_by_field_name("argument"))
    joiner = "||" if negated else "&&"
    parts = []

    def split(n):
        n = strip_parens(n)
        if n.type == "binary_expression" and text_of(n.child_by_field_name("operator")) == joiner:
            split(n.child_by_field_name("left"))
            split(n.child_by_field_name("right"))
        else:
            parts.append(n)
    split(node)
    flip = {"<": ">=", "<=": ">", ">": "<=", ">=": "<"}
    mirror = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}
    for p in parts:
        if p.type != "binary_expression" or text_of(p.child_by_field_name("operator")) not in flip:
            raise Decline(f"the guard's part `{text_of(p)}` is not a comparison")
        op = text_of(p.child_by_field_name("operator"))
        left, right = text_of(p.child_by_field_name("left")).strip(), text_of(p.child_by_field_name("right")).strip()
        if negated:
            op = flip[op]
        if left not in coords and right in coords:
            left, right, op = right, left, mirror[op]
        if left not in coords:
            raise Decline(f"the guard's part `{text_of(p)}` bounds no coordinate of the output")
        bound = right if op == "<" else f"{right} + 1" if op == "<=" else None
        yield f"{left} {op} {right}", left, bound


def product_update(loop_node, acc: str, text_of) -> tuple[str, list[str]]:
    """The update's form ("+=", "-=" or the fma function) and the factors of its product."""
    body = loop_node.child_by_field_name("body")
    stmts = [c for c in body.named_children if c.type != "comment"] if body.type == "compound_statement" else [body]
    updates = []
    for s in stmts:
        if s.type == "declaration":
            continue
        if s.type != "expression_statement":
            raise Decline("the loop's body holds more than locals and the sum's update")
        updates.append(s)
    if len(updates) != 1:
        raise Decline("the loop's body updates more than the sum")
    e = strip_parens(updates[0].named_children[0])
    if e.type != "assignment_expression" or text_of(e.child_by_field_name("left")).strip() != acc:
        raise Decline("the loop's statement is not the sum's update")
    op = text_of(e.child_by_field_name("operator"))
    right = strip_parens(e.child_by_field_name("right"))
    if op in ("+=", "-="):
        return op, product_factors(right, text_of)
    if op == "=" and right.type == "binary_expression" and text_of(right.child_by_field_name("operator")) == "+":
        lhs, rhs = right.child_by_field_name("left"), right.child_by_field_name("right")
        if text_of(lhs).strip() == acc:
            return "+=", product_factors(strip_parens(rhs), text_of)
        if text_of(rhs).strip() == acc:
            return "+=", product_factors(strip_parens(lhs), text_of)
    if op == "=" and right.type == "call_expression":
        fn = text_of(right.child_by_field_name("function"))
        args = [x for x in right.child_by_field_name("arguments").named_children if x.type != "comment"]
        if fn in FMA_CALLS and len(args) == 3 and text_of(args[2]).strip() == acc:
            return fn, [text_of(args[0]), text_of(args[1])]
    raise Decline("the sum is not updated by a product (`acc += x * y`, `acc = fma(x, y, acc)`)")


def product_factors(node, text_of) -> list[str]:
    node = strip_parens(node)
    if node.type == "binary_expression" and text_of(node.child_by_field_name("operator")) == "*":
        return product_factors(node.child_by_field_name("left"), text_of) + \
            product_factors(node.child_by_field_name("right"), text_of)
    return [text_of(node)]


def c_integer(node, names: dict[str, str]) -> str:
    """A launch expression (whole numbers, sizes, + - * //, ceil_div) as C integer arithmetic over
    the kernel's names (the sizes are never negative, so C's `/` is Python's `//`)."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return str(node.value)
    if isinstance(node, ast.Name):
        if node.id not in names:
            raise ValueError(f"`{node.id}` is no scalar argument of the kernel")
        return f"({names[node.id]})"
    if isinstance(node, ast.BinOp) and type(node.op) in (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv):
        op = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "/"}[type(node.op)]
        return f"({c_integer(node.left, names)} {op} {c_integer(node.right, names)})"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "ceil_div" \
            and len(node.args) == 2 and not node.keywords:
        x, y = (c_integer(n, names) for n in node.args)
        return f"(({x} + {y} - 1) / {y})"
    raise ValueError(f"`{ast.unparse(node)}` is not whole-number arithmetic")


def launch_extent(ctx, d: int, per_block: str, scalars: dict[str, str], coordinate: str) -> tuple[str, str]:
    """The threads (or outputs) the original's launch covers along dimension `d`, `per_block` a
    block: over the spec's problem names and as C over the kernel's scalar arguments; Decline when
    the launch reads a size no scalar argument carries."""
    if d >= len(ctx.grid):
        raise Decline(f"no guard bounds `{coordinate}` and the launch has no dimension {d}")
    spec = f"({ctx.grid[d]}) * ({per_block})"
    by_problem = {v.strip(): k for k, v in scalars.items() if v.strip().isidentifier()}
    values = {k: str(v) for k, v in ctx.defaults.items() if isinstance(v, int) and not isinstance(v, bool)}
    try:
        c_text = c_integer(ast.parse(spec, mode="eval").body, {**values, **by_problem})
    except (SyntaxError, ValueError) as e:
        raise Decline(f"no guard bounds `{coordinate}`, and the launch's extent `{spec}` is not C: {e}") from None
    return spec, c_text
