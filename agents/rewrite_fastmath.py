"""FAST_MATH: the kernel's math calls made through the hardware's fast approximate functions.

An exponential-bound kernel (an online softmax, once its row is on chip) spends its time in the
accurate `expf`; the hardware's approximation (`__expf` in CUDA, `native_exp` in OpenCL) is a few
instructions. One parameter:

- `FAST_MATH`: 0 calls the functions as written, 1 their fast forms, at every call site the syntax
  tree finds in the kernel and the functions it calls (the earlier rewrites' helpers included).

CUDA: the float functions only (`expf` -> `__expf`, `logf`, `log2f`, `log10f`, `sinf`, `cosf`,
`tanf`, `powf`, `exp10f`; `std::expf` as well); `exp` and `log` of a double are not touched, and
`exp2f` has no faster form. OpenCL: `exp`, `log`, `exp2`, `log2`, `exp10`, `log10`, `sin`, `cos`,
`tan`, `sqrt`, `rsqrt`, `powr` -> `native_*`, only where the syntax tree shows the arguments are
float (the declarations of the names they read, float literals, float casts); a double or a value
whose type it cannot tell keeps the accurate function.

Each call site becomes `KT_FAST(expf, __expf)(x)`, a macro that gives back the original name when
FAST_MATH is 0, so the default is the original token for token once the preprocessor has run.
"""

from __future__ import annotations

from dataclasses import dataclass
from kerntune.engine.proposal import ParamProposal
from kerntune.engine.cxx import type_words

from .kernel_tree import source_tokens, syntax_nodes
from .lift import insert_after_prelude, fresh_name
from .model import DIALECT, ModelError, base_name, build, function_name
from .passes import Declined, Edits, Pass, Rewrite, RewriteContext, defaults
from . import syntax as sx


NAME = "fast_math"
# compiler options that already make every math call its fast form: FAST_MATH would change nothing
FAST_OPTIONS = {"--use_fast_math", "-use_fast_math", "-cl-fast-relaxed-math", "-cl-unsafe-math-optimizations"}
# the math calls with a fast form, and that form (agents/model.py's dialect table)
CUDA_FAST = DIALECT["cuda"].fast
OPENCL_FAST = DIALECT["opencl"].fast
# OpenCL builtins whose result has the type of their arguments (gentype): a call of one is as float
# as what it is called on
GENTYPE = set(OPENCL_FAST) | {f"native_{n}" for n in OPENCL_FAST} | {
    "pow", "pown", "fabs", "fmax", "fmin", "max", "min", "mad", "fma", "tanh", "sinh", "cosh", "atan", "asin",
    "acos", "atan2", "floor", "ceil", "round", "trunc", "clamp", "mix", "cbrt", "expm1", "log1p", "copysign",
    "fmod", "hypot", "erf", "erfc"}
INTEGER_TYPES = {"int", "uint", "unsigned", "unsigned int", "long", "ulong", "unsigned long", "short", "ushort",
                 "unsigned short", "char", "uchar", "unsigned char", "bool", "size_t", "long long", "int32_t",
                 "uint32_t", "int64_t", "uint64_t"}


@dataclass(frozen=True)
class Site:
    """A math call the rewrite switches: its callee as written, where it stands, and the fast name."""

    start: int  # the callee's span in bytes of the source
    end: int
    slow: str  # as written: `expf`, `std::expf`
    fast: str


@dataclass(frozen=True)
class Calls:
    """A source's math calls: those with a fast form, and those left as written (each with why)."""

    sites: tuple[Site, ...]
    kept: tuple[str, ...] = ()  # "exp at line 12 (a double)"

    def counts(self) -> dict[tuple[str, str], int]:
        out: dict[tuple[str, str], int] = {}
        for s in self.sites:
            key = (s.slow, s.fast)
            out[key] = out.get(key, 0) + 1
        return out

    def switched(self) -> str:
        """The switches in words: `expf -> __expf (3 calls), logf -> __logf (1 call)`."""
        return ", ".join(f"{slow} -> {fast} ({n} call{'s' if n != 1 else ''})" for (slow, fast), n in self.counts().items())


def fast_calls(source: str, entry: str, dialect: str) -> Calls:
    """The calls of the kernel `entry` and the functions it calls that have a fast form."""
    table = CUDA_FAST if dialect == "cuda" else OPENCL_FAST
    fns = [n for n, _ in syntax_nodes(source, ("function_definition",))]
    by_name: dict[str, list] = {}
    for fn in fns:
        by_name.setdefault(function_name(fn), []).append(fn)
    # the kernel (each copy the passes before left of it under #if) and what it calls: the kernel
    # model's reading of each copy
    by_body = {(fn.child_by_field_name("body").start_byte, fn.child_by_field_name("body").end_byte): fn
               for fn in fns if fn.child_by_field_name("body") is not None}
    reached: dict[int, object] = {}
    for copy in by_name.get(base_name(entry), []):
        try:
            m = build(source, entry, copy.start_byte)
        except ModelError:  # not a kernel the model reads (a host function of that name, say): its own calls
            reached[copy.start_byte] = copy
            continue
        for f in m.functions:
            node = by_body.get((f.body.start, f.body.end))
            if node is not None:
                reached[node.start_byte] = node
    globals_ = _declarations([n for n, _ in syntax_nodes(source, ("declaration",)) if not _in_function(n)])
    raw = source.encode("utf-8")
    sites, kept = [], []
    for fn in sorted(reached.values(), key=lambda f: f.start_byte):
        types = None
        for call in (c for c in sx.walk(fn) if c.type == "call_expression"):
            callee = call.child_by_field_name("function")
            name = _math_name(callee)
            if name not in table or name in by_name:  # a function of the file's own by that name is not the builtin
                continue
            if dialect == "opencl":
                if types is None:
                    types = {**globals_, **_declarations(list(sx.walk(fn)))}
                args = call.child_by_field_name("arguments")
                kinds = [_kind(a, types, by_name) for a in (args.named_children if args is not None else [])
                         if a.type != "comment"]
                kind = _combine(kinds) if kinds else None
                if kind != "float":
                    why = "a double" if kind == "double" else "a half" if kind == "half" else \
                        "an integer" if kind == "int" else "a value of a type the syntax does not tell"
                    kept.append(f"{name} at line {call.start_point[0] + 1} ({why})")
                    continue
            sites.append(Site(callee.start_byte, callee.end_byte,
                              raw[callee.start_byte:callee.end_byte].decode("utf-8"), table[name]))
    return Calls(tuple(sites), tuple(kept))


def _math_name(callee) -> str:
    """The name a call calls when it is a plain function or one of `std::` (or `::`); '' otherwise."""
    if callee is None:
        return ""
    if callee.type == "identifier":
        return sx.text(callee)
    if callee.type == "qualified_identifier":
        scope, name = callee.child_by_field_name("scope"), callee.child_by_field_name("name")
        if (scope is None or sx.text(scope) == "std") and name is not None and name.type == "identifier":
            return sx.text(name)
    return ""


def _in_function(node) -> bool:
    while node is not None and node.type != "function_definition":
        node = node.parent
    return node is not None


def _declarations(nodes: list) -> dict[str, tuple[str, int] | None]:
    """Each name the nodes declare (parameters and variables): (its type's words, how many pointer
    or array levels), or None where it is declared twice with different types."""
    out: dict[str, tuple[str, int] | None] = {}
    for n in nodes:
        if n.type not in ("declaration", "parameter_declaration"):
            continue
        words = type_words(n.child_by_field_name("type"))
        for d in n.children_by_field_name("declarator"):
            name, depth = _declarator(d)
            if name:
                seen = out.get(name, (words, depth))
                out[name] = (words, depth) if name not in out or seen == (words, depth) else None
    return out


def _declarator(d) -> tuple[str, int]:
    depth = 0
    while d is not None and d.type != "identifier":
        if d.type in ("pointer_declarator", "array_declarator"):
            depth += 1
        elif d.type not in ("init_declarator", "reference_declarator", "parenthesized_declarator"):
            return "", 0
        inner = d.child_by_field_name("declarator")
        if inner is None and d.type in ("reference_declarator", "parenthesized_declarator"):
            inner = next((c for c in d.named_children if c.type != "type_qualifier"), None)
        d = inner
    return (sx.text(d) if d is not None else ""), depth


def _type_kind(words: str) -> str | None:
    """float (or a float vector), double, half, int, or None for a type the words do not tell."""
    for kind in ("float", "double", "half"):
        if words == kind or (words.startswith(kind) and words[len(kind):] in ("2", "3", "4", "8", "16")):
            return kind
    return "int" if words in INTEGER_TYPES else None


def _combine(kinds: list) -> str | None:
    """The type of arithmetic on values of these kinds (float with an integer stays float)."""
    if None in kinds:
        return None
    for kind in ("double", "half", "float"):
        if kind in kinds:
            return kind if kind != "half" or set(kinds) <= {"half", "int"} else None
    return "int"


def _kind(node, types: dict, functions: dict) -> str | None:
    """The kind of value an expression has, from the declarations of the names it reads; None when
    the syntax does not tell (a macro, a field, a call of an unknown function)."""
    node = sx.strip(node)
    t = node.type
    if t == "number_literal":
        text = sx.text(node).lower()
        if text.startswith("0x"):
            return ("float" if text.endswith("f") else "double") if "p" in text else "int"
        if any(c in text for c in ".e"):
            return "half" if text.endswith("h") else "float" if text.endswith("f") else "double"
        return "int"
    if t == "identifier":
        decl = types.get(sx.text(node))
        return _type_kind(decl[0]) if decl is not None and decl[1] == 0 else None
    if t == "subscript_expression":
        levels, base = 0, node
        while base.type == "subscript_expression":
            levels, base = levels + 1, sx.strip(base.child_by_field_name("argument"))
        decl = types.get(sx.text(base)) if base.type == "identifier" else None
        return _type_kind(decl[0]) if decl is not None and decl[1] == levels else None
    if t == "unary_expression":
        op = sx.text(node.child_by_field_name("operator"))
        return _kind(node.child_by_field_name("argument"), types, functions) if op in ("-", "+") else None
    if t == "binary_expression":
        op = sx.text(node.child_by_field_name("operator"))
        if op not in ("+", "-", "*", "/"):
            return None
        return _combine([_kind(node.child_by_field_name(s), types, functions) for s in ("left", "right")])
    if t == "conditional_expression":
        return _combine([_kind(node.child_by_field_name(s), types, functions) for s in ("consequence", "alternative")])
    if t == "cast_expression":
        return _type_kind(type_words(node.child_by_field_name("type")))
    if t == "call_expression":
        callee = node.child_by_field_name("function")
        name = sx.text(callee) if callee is not None and callee.type == "identifier" else ""
        args = node.child_by_field_name("arguments")
        if name in GENTYPE and name not in functions and args is not None and args.named_child_count:
            return _combine([_kind(a, types, functions) for a in args.named_children if a.type != "comment"])
        defs = functions.get(name, [])
        returns = {type_words(f.child_by_field_name("type")) for f in defs}
        return _type_kind(returns.pop()) if len(returns) == 1 else None
    return None


def built_fast(template, backend: str) -> str:
    """The option the spec builds the backend's source with that makes math fast already, or ''."""
    return next((o for o in template.compile_options.get(backend, ()) if o in FAST_OPTIONS), "")


class FastMathPass(Pass):
    """FAST_MATH (a flag) over the math calls of the source so far: it runs after every other pass
    (`after = ("*",)`), and requires a spec that does not build with fast math already."""

    name = NAME
    after = ("*",)

    def requires(self, ctx: RewriteContext) -> str | None:
        fast = built_fast(ctx.original, ctx.backend)
        return f"the spec already builds with {fast}: its math calls take their fast forms" if fast else None

    def apply(self, ctx: RewriteContext) -> Rewrite | Declined:
        return _switched(ctx)


def _switched(ctx: RewriteContext) -> Rewrite | Declined:
    """FAST_MATH over the context's source, or why the kernel has nothing for it."""
    calls = fast_calls(ctx.source, ctx.original.entry, ctx.backend)
    taken = set(ctx.taken) | set(ctx.defaults) | {w for w, _ in source_tokens(ctx.source)}
    param, macro = _fresh("FAST_MATH", taken), _fresh("KT_FAST", taken)
    guard = defaults([_param(param)])
    if not calls.sites:
        elsewhere = [b for b in sorted(ctx.original.sources) if b != ctx.backend
                     and fast_calls(ctx.original.source_for(b), ctx.original.entry, b).sites]
        if elsewhere and ctx.backend != ctx.limits.backend:
            # the template is for another backend whose source has such calls: this one takes the
            # parameter, which changes nothing here, rather than leave the template
            text = (f"// kerntune: {param} has no call to switch in this source (the {', '.join(elsewhere)} "
                    f"source's calls take their fast forms)\n{guard}")
            return Rewrite(NAME, insert_after_prelude(ctx.source, text), (_param(param),),
                           f"fast math: none of the {ctx.backend} source's calls has a fast form ({param} changes "
                           "nothing there)")
        names = ", ".join(CUDA_FAST if ctx.backend == "cuda" else OPENCL_FAST)
        kept = f"; left as written: {', '.join(calls.kept)}" if calls.kept else ""
        on = "" if ctx.backend == "cuda" else " on float values"
        return Declined(NAME, f"the kernel calls none of {names}{on}{kept}")
    edits = Edits(ctx.source)
    for site in calls.sites:
        edits.replace((site.start, site.end), f"{macro}({site.slow}, {site.fast})")
    out = edits.result()
    text = (f"// kerntune: {param} 1 calls the hardware's fast approximate math functions, 0 those written\n"
            f"{guard}#if {param}\n#define {macro}(slow, fast) fast\n#else\n#define {macro}(slow, fast) slow\n#endif\n")
    kept = f"; left as written: {', '.join(calls.kept)}" if calls.kept else ""
    return Rewrite(NAME, insert_after_prelude(out, text), (_param(param),),
                   f"fast math ({param}): {calls.switched()}{kept}")


def _param(name: str) -> ParamProposal:
    return ParamProposal(name, (0, 1), 0, "on or off: the hardware's fast approximate math functions (__expf, "
                         "native_exp, ...) in place of the accurate ones", "flag")



def _fresh(name: str, taken: set[str]) -> str:
    """`name`, else KT_name, KT_name_2, ... (not the lifts' name_SIZE: this is no size)."""
    return fresh_name(name, taken | {f"{name}_SIZE"})


# the pass, called as a function of a RewriteContext (agents/rewrites.py registers it last)
rewrite = FastMathPass()
