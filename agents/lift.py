"""The rules generator's rewriting: literals of the original kernel lifted into template parameters.

What is lifted, each into a parameter whose default is the literal, so that the default
configuration is the original kernel token for token:

- `#define NAME value` (an integer, with a name that says what it tunes: BLOCK, VEC, TILE, ...)
  becomes `#ifndef NAME / #define NAME value / #endif`;
- `constexpr int name = value;` (or `const int name = value;` outside every function) takes its
  value from a parameter of its own, and is a named constant the launch follows like a #define;
- `#pragma unroll N` takes its count from a parameter (through `_Pragma`, since `#pragma unroll`
  does not expand macros); a bare `#pragma unroll` gets one whose value 0 keeps it as written;
- an integer literal that the kernel's one explicit instantiation gives a non-type template
  parameter with such a name (`template __global__ void k<float, 128>(...)` for
  `template <typename T, int BLOCK>`) takes its value from a macro of another name (a macro named
  BLOCK would rewrite the template's own parameter list);
- the launch's block size (a literal of the spec's `block`, and the same literal in
  `__launch_bounds__` / `reqd_work_group_size` and in the grid) becomes a parameter too, the same
  parameter as a constant above that holds the kernel's thread count; in a launch of several
  dimensions each dimension follows the constant of its value the kernel reads (a tiled
  transpose's block is `(TILE_DIM, BLOCK_ROWS)`), and a grid that divides by that value counts
  tiles of the parameter in every dimension (`ceil_div(height, TILE_DIM)`).

Value ranges come from the device's limits; constraints keep every configuration correct (a
parameter that divides a problem size, `d / VEC`, must divide it exactly; a loop from 0 to one
parameter in steps of another, `j < TILE_DIM; j += BLOCK_ROWS`, needs the step to divide it) or
compilable (static shared arrays sized by parameters within the device's shared memory per block).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from kerntune.engine import cxx
from kerntune.engine.device import DeviceLimits
from kerntune.engine.expressions import ExpressionError
from kerntune.engine.expressions import parse as parse_expression
from kerntune.engine.proposal import ParamProposal, TemplateProposal, original_launch
from kerntune.engine.signature import CTYPES, PACKED
from kerntune.engine.template import DEVICE_NAMES, DTYPES, Template

from .model import ModelError, build, integer
from .kernel_tree import (ExplicitInstantiation, KernelAnalysis, KernelTreeError, Span, analyse, explicit_instantiations,
                          source_tokens, span_of, syntax_nodes, tree_reductions)
from .syntax import cut, line_of

# Names that say what a literal tunes, by kind. A #define or constexpr with another name (N_HEADS,
# PI, WARP_SIZE) is part of what the kernel computes and is left alone.
KINDS = (
    ("threads", re.compile(r"(^|_)(BLOCK|THREADS?|NT|WG|WORK_?GROUP|LOCAL_SIZE|BLOCK_?SIZE|BLOCK_?DIM|TPB)(_|$)")),
    ("vector", re.compile(r"(^|_)(VEC|VECTOR|VW|WIDTH|PACK|LANES)(_|$|\d)")),
    ("unroll", re.compile(r"(^|_)UNROLL(_|$)")),
    ("flag", re.compile(r"(^|_)(USE|ENABLE|FAST|HAS|WITH)(_|$)")),
    ("tile", re.compile(r"(^|_)(TILE|B[MNK]|T[MNK]|ROWS|COLS|ITEMS|PER_THREAD|CHUNK|STAGES|WARPS|SPLIT)(_|$|\d)")),
)
NEVER = re.compile(r"WARP_?SIZE|^WARP$")
PRAGMA_HELPER = (
    "// `#pragma unroll N` does not expand macros; _Pragma on a stringised argument does.\n"
    "#define KERNTUNE_PRAGMA_(x) _Pragma(#x)\n"
    "#define KERNTUNE_PRAGMA(x) KERNTUNE_PRAGMA_(x)\n"
)


@dataclass(frozen=True)
class Edit:
    """Replace the bytes [start, end) of the source with text."""

    start: int
    end: int
    text: str


@dataclass(frozen=True)
class Lift:
    """A literal that becomes a parameter; `key` identifies it across a kernel's two dialects."""

    key: str
    name: str
    kind: str
    default: int
    origin: str
    risk: int  # higher: likelier to change results; dropped first after a rejection
    edits: tuple[Edit, ...] = ()
    guard: bool = True  # a guard must be added (not for a #define rewritten in place)
    pragma: bool = False  # needs the _Pragma helper
    launch: bool = False  # the spec's block (and maybe grid) uses it
    bare: bool = False  # a bare `#pragma unroll`: 0 keeps it as written
    reads: str = ""  # the name the code reads the value by, when not `name` (a template parameter, a #define)
    alias: tuple[Edit, ...] = ()  # a #define's edits that make it read a parameter of another name, "{name}"


def kind_of(name: str, value: int) -> str | None:
    """What a named literal tunes, from its name; None when its name says it is not a knob."""
    upper = _snake(name).upper()
    if NEVER.search(upper):
        return None
    if re.search(r"(^|_)TILE(_|$|\d)", upper):
        return "tile"  # TILE_WIDTH is a tile's side, not a vector's width
    for kind, pattern in KINDS:
        if pattern.search(upper):
            if kind == "flag" and value not in (0, 1):
                return "tile"
            return kind
    return None


def _snake(name: str) -> str:
    name = re.sub(r"^k(?=[A-Z])", "", name)  # kBlockSize -> BlockSize
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name)


def macro_name(name: str) -> str:
    """The macro that carries a constexpr's value: BLOCK_SIZE for kBlockSize, kept apart from it."""
    upper = _snake(name).upper()
    return upper if upper != name else f"{name}_VALUE"


def find_lifts(source: str, analyses: list[KernelAnalysis] | None = None, entry: str | None = None) -> list[Lift]:
    """Every liftable literal in one source, in order, read from its syntax tree; with `entry`,
    the literal template arguments of the explicit instantiation it loads too.

    `#pragma unroll` counts are lifted only on the kernels' own loops (a loop of a function the
    kernel calls is left as written: partial unrolling there spills more than it gains); a source
    with no kernel to analyse has them all lifted."""
    if analyses is None:
        analyses = analyse(source)
    hot = {lp.pragma for a in analyses for lp in a.loops if lp.pragma is not None and lp.hot}
    lifts: list[Lift] = []
    unrolls = 0
    lines = _Lines(source)
    for node in directives(source):
        if node.kind == "define":
            kind = kind_of(node.name, node.value)
            if kind is None:
                continue
            edits = () if node.guarded else (Edit(*lines.whole(node.span), _guard(node.name, node.value, node.comment)),)
            lifts.append(Lift(f"define:{node.name}:{node.value}", node.name, kind, node.value,
                              f"`#define {node.name} {node.value}` (line {lines.number(node.span.start)})", 1, edits,
                              guard=False, alias=(Edit(node.value_span.start, node.value_span.end, "{name}"),)))
        elif node.kind == "unroll":
            if analyses and node.span not in hot:
                continue
            unrolls += 1
            name = "UNROLL" if unrolls == 1 else f"UNROLL_{unrolls}"
            start, end = lines.whole(node.span)
            line = cut(source, start, end)
            indent = line[:len(line) - len(line.lstrip(" \t"))]
            nl = "\n" if line.endswith("\n") else ""
            where = f"(line {lines.number(node.span.start)})"
            if node.value is not None:
                text = f"{indent}KERNTUNE_PRAGMA(unroll {name}){nl}"
                lifts.append(Lift(f"unroll:{unrolls}:{node.value}", name, "unroll", node.value,
                                  f"`#pragma unroll {node.value}` {where}", 0, (Edit(start, end, text),), pragma=True))
            else:
                text = (f"#if {name} > 0\n{indent}KERNTUNE_PRAGMA(unroll {name})\n#else\n"
                        f"{line.rstrip(chr(10))}\n#endif" + nl)
                lifts.append(Lift(f"unroll:{unrolls}:bare", name, "unroll", 0, f"`#pragma unroll` {where}", 0,
                                  (Edit(start, end, text),), pragma=True, bare=True))
        elif node.kind == "constexpr":
            kind = kind_of(node.name, node.value)
            if kind is None:
                continue
            name = macro_name(node.name)
            lifts.append(Lift(f"constexpr:{node.name}:{node.value}", name, kind, node.value,
                              f"`{node.words} {node.name} = {node.value}` (line {lines.number(node.span.start)})", 2,
                              (Edit(node.value_span.start, node.value_span.end, name),), reads=node.name))
    inst, _ = entry_instantiation(source, entry) if entry else (None, "")
    words = {w for w, _ in source_tokens(source)} if inst is not None else set()
    for arg in inst.literals if inst is not None else ():
        kind = kind_of(arg.param, arg.value)
        if kind is None or arg.ctype.split()[-1] not in _INTEGER_TYPES:
            continue
        name = fresh_name(arg.param, words | {lf.name for lf in lifts})
        lifts.append(Lift(f"template:{arg.param}:{arg.value}", name, kind, arg.value,
                          f"the template argument {arg.param} = {arg.value} of `{inst.kernel}{inst.text}` "
                          f"(line {lines.number(arg.span.start)})", 1, (Edit(arg.span.start, arg.span.end, name),),
                          reads=arg.param))
    return lifts


def entry_instantiation(source: str, entry: str) -> tuple[ExplicitInstantiation | None, str]:
    """The explicit instantiation that `entry` loads, when its template arguments can become
    parameters: the kernel's only one, named by the kernel's name alone (an entry that spells
    them, `k<float, 128>`, names another kernel once they change). Otherwise None, and why in
    words ("" when the kernel has no template argument with a tunable name)."""
    base = entry.split("<")[0].split("::")[-1].strip()
    found = explicit_instantiations(source, base)
    if not any(kind_of(a.param, a.value) for i in found for a in i.literals):
        return None, ""
    if "<" in entry:
        return None, (f"the entry `{entry}` spells its template arguments, so it would name another kernel once "
                      "they are parameters: they are left alone (name the kernel without them to tune them)")
    if len(found) > 1:
        return None, f"{base} has {len(found)} explicit instantiations: their template arguments are left alone"
    return found[0], ""


@dataclass(frozen=True)
class Directive:
    """A literal the rules may lift: a `#define`, a `#pragma unroll` or a `constexpr` integer."""

    kind: str  # "define", "unroll" or "constexpr"
    name: str
    value: int | None
    span: Span  # the directive or the declaration
    value_span: Span = Span(0, 0)
    guarded: bool = False  # a #define already inside `#ifndef NAME`
    comment: str = ""  # a comment after a #define's value
    words: str = ""  # a constant's `constexpr` or `const`


def directives(source: str) -> list[Directive]:
    """The #defines of an integer, `#pragma unroll` lines and integer constexpr declarations of a
    source, in order, from its syntax tree."""
    out = []
    for node, text in syntax_nodes(source, ("preproc_def", "preproc_call", "declaration")):
        if node.type == "preproc_def":
            name = text(node.child_by_field_name("name"))
            value_node = node.child_by_field_name("value")
            value, comment = _define_value(text(value_node) if value_node is not None else "")
            if value is None:
                continue
            parent = node.parent
            guarded = parent is not None and parent.type == "preproc_ifdef" and \
                text(parent.children[0]).endswith("ifndef") and text(parent.child_by_field_name("name")) == name
            vs = span_of(source, value_node)
            body = cut(source, vs.start, vs.end)
            lead = len(body) - len(body.lstrip())
            digits = body.lstrip().split("/")[0].split()[0]
            out.append(Directive("define", name, value, span_of(source, node),
                                 Span(vs.start + lead, vs.start + lead + len(digits)), guarded=guarded,
                                 comment=comment))
        elif node.type == "preproc_call":
            if text(node.child_by_field_name("directive")) != "#pragma":
                continue
            words = text(node.child_by_field_name("argument")).split()
            if not words or words[0] != "unroll" or len(words) > 2:
                continue
            count = integer(words[1]) if len(words) == 2 else None
            if len(words) == 2 and count is None:
                continue  # `#pragma unroll N` with a macro or an expression: already a choice
            out.append(Directive("unroll", "", count, span_of(source, node)))
        elif node.type == "declaration":
            words = [text(c) for c in node.children if c.type in ("type_qualifier", "storage_class_specifier")]
            # `const int TILE_DIM = 32;` outside every function is a constant expression in C++,
            # as the transpose post writes its tile (inside a function it may be any value)
            file_scope = node.parent is not None and node.parent.type in ("translation_unit", "declaration_list")
            if "constexpr" not in words and not ("const" in words and file_scope):
                continue
            type_words = text(node.child_by_field_name("type")).split()
            if not type_words or type_words[-1] not in _INTEGER_TYPES:
                continue
            decl = node.child_by_field_name("declarator")
            if decl is None or decl.type != "init_declarator":
                continue
            value = decl.child_by_field_name("value")
            number = integer(text(value)) if value is not None and value.type == "number_literal" else None
            target = decl.child_by_field_name("declarator")
            if number is None or target is None or target.type != "identifier":
                continue
            digits = text(value).rstrip("uUlL")
            vs = span_of(source, value)
            out.append(Directive("constexpr", text(target), number, span_of(source, node),
                                 Span(vs.start, vs.start + len(digits)),
                                 words="constexpr" if "constexpr" in words else "const"))
    return out


_INTEGER_TYPES = {"int", "unsigned", "long", "short", "size_t", "int32_t", "uint32_t", "int64_t", "uint64_t", "auto"}


def _define_value(arg: str) -> tuple[int | None, str]:
    """The integer a #define's value is, and the comment after it."""
    body, comment = arg, ""
    for mark in ("//", "/*"):
        at = body.find(mark)
        if at >= 0:
            body, comment = body[:at], arg[at:].strip()
            break
    words = body.split()
    return (integer(words[0]) if len(words) == 1 else None), comment


class _Lines:
    """Line numbers and whole-line spans (bytes) of a source."""

    def __init__(self, source: str):
        self.raw = source.encode("utf-8")

    def number(self, offset: int) -> int:
        return self.raw.count(b"\n", 0, offset) + 1

    def whole(self, span: Span) -> tuple[int, int]:
        start = self.raw.rfind(b"\n", 0, span.start) + 1
        end = self.raw.find(b"\n", max(span.end - 1, span.start))
        return start, (len(self.raw) if end < 0 else end + 1)


def _guard(name: str, value: int, comment: str) -> str:
    head = f"{comment}\n" if comment else ""
    return f"{head}#ifndef {name}\n#define {name} {value}\n#endif\n"


def launch_sites(source: str, literal: int) -> tuple[list[Edit], list[int]]:
    """`__launch_bounds__(L)` and `reqd_work_group_size(L, 1, 1)` sites of the block literal L,
    and the literals of any such attribute that differ from L."""
    edits, others = [], []
    for attribute, values, spans in launch_attributes(source):
        if attribute == "reqd_work_group_size" and values[1:] != (1, 1):
            continue
        if values[0] == literal:
            edits.append(Edit(spans[0].start, spans[0].end, "{name}"))
        else:
            others.append(values[0])
    return edits, others


def launch_attributes(source: str) -> list[tuple[str, tuple[int, ...], tuple[Span, ...]]]:
    """Each `__launch_bounds__(N, ...)` and `reqd_work_group_size(X, Y, Z)` of the source: its
    literal values and their spans, from the source's tokens."""
    tokens = source_tokens(source)
    out = []
    for i, (word, _) in enumerate(tokens):
        if word not in ("__launch_bounds__", "reqd_work_group_size") or i + 2 >= len(tokens) or tokens[i + 1][0] != "(":
            continue
        values, spans, j = [], [], i + 2
        while j < len(tokens) and tokens[j][0] != ")":
            if tokens[j][0] != ",":
                number = integer(tokens[j][0])
                if number is None:
                    values = []
                    break
                values.append(number)
                spans.append(tokens[j][1])
            j += 1
        want = 3 if word == "reqd_work_group_size" else None
        if values and (want is None or len(values) == want):
            out.append((word, tuple(values), tuple(spans)))
    return out


def apply(source: str, lifts: list[Lift], launches: list[tuple[str, int]] = (),
          launch_edits: list[Edit] = ()) -> str:
    """The source with the lifts' edits (and the launch's, their text already named) made and the
    defaults set at the top; `launches` are the launch's (name, default) that no lift declares."""
    edits = [e for lift in lifts for e in lift.edits] + list(launch_edits)
    raw = source.encode("utf-8")
    for e in sorted(edits, key=lambda e: e.start, reverse=True):  # bytes of the source
        raw = raw[:e.start] + e.text.encode("utf-8") + raw[e.end:]
    out = raw.decode("utf-8")
    guards = [(n, v) for n, v in launches if all(lf.name != n for lf in lifts)]
    guards += [(lf.name, lf.default) for lf in lifts if lf.guard]
    head = ""
    if guards:
        head += ("// kerntune: parameters lifted from the original's literals; the defaults reproduce it.\n"
                 + "".join(f"#ifndef {n}\n#define {n} {v}\n#endif\n" for n, v in guards))
    if any(lf.pragma for lf in lifts):
        head += PRAGMA_HELPER
    if not head:
        return out
    return insert_after_prelude(out, head)


def insert_after_prelude(source: str, text: str) -> str:
    """After the leading comments and #include lines (and #if groups of includes, typedefs and
    defines, such as one choosing the element type): before anything that could use a parameter."""
    (root, _), = syntax_nodes(source, ("translation_unit",)) or [(None, None)]
    end = first = None
    for node in (root.children if root is not None else []):
        if node.type == "comment":
            continue
        if node.type == "preproc_include" or (node.type in ("preproc_if", "preproc_ifdef") and _declarations_only(node)):
            end = span_of(source, node).end
            continue
        first = span_of(source, node).start
        break
    raw = source.encode("utf-8")  # the spans are bytes
    if end is not None:
        pos = raw.find(b"\n", end)
        pos = len(raw) if pos < 0 else pos + 1
    elif first is not None:
        pos = raw.rfind(b"\n", 0, first) + 1
    else:
        pos = len(raw)
    before = raw[:pos].decode("utf-8")
    if before and not before.endswith("\n"):
        before += "\n"
    last = before[:-1].rsplit("\n", 1)[-1] if before else ""
    return before + ("\n" if last.strip() else "") + text + raw[pos:].decode("utf-8")


# what a prelude's #if group may hold: includes, typedefs, defines and nested groups of them
_PRELUDE = {"preproc_include", "type_definition", "alias_declaration", "preproc_def", "preproc_function_def",
            "preproc_call", "comment", "preproc_else", "preproc_elif", "preproc_elifdef", "preproc_if",
            "preproc_ifdef"}


def _declarations_only(group) -> bool:
    condition = group.child_by_field_name("condition")
    name = group.child_by_field_name("name")
    for child in group.named_children:
        if (condition is not None and child.id == condition.id) or (name is not None and child.id == name.id):
            continue
        if child.type not in _PRELUDE:
            return False
        if child.type in ("preproc_if", "preproc_ifdef", "preproc_else", "preproc_elif", "preproc_elifdef") \
                and not _declarations_only(child):
            return False
    return True


# value ranges ----------------------------------------------------------------------------------

def values_for(kind: str, default: int, limits: DeviceLimits, bare: bool = False) -> tuple[int, ...]:
    """The values a parameter of this kind takes on this device (the default always among them)."""
    if kind == "threads":
        low = max(32, limits.warp_size)
        vals = {1 << k for k in range(5, 16) if low <= 1 << k <= limits.max_threads_per_block}
    elif kind == "vector":
        d = max(default, 1)  # its divisors and multiples, up to 16 lanes
        vals = {v for v in (1, 2, 4, 8, 16) if (d % v == 0 or v % d == 0) and v <= 4 * d}
    elif kind == "unroll":
        vals = {0, 1, 2, 4} if bare else {1, 2, 4, 8}
    elif kind == "flag":
        vals = {0, 1}
    else:
        vals = {v for v in (default // 4, default // 2, default, default * 2, default * 4) if v >= 1}
    vals.add(default)
    return tuple(sorted(vals))


def shared_budget(source: str, names: dict[str, str]) -> str | None:
    """`bytes of the static shared arrays <= max_shared_per_block` when any of them is sized by a
    parameter (`__shared__ float tile[TILE_DIM][TILE_DIM + 1]`): a configuration past the limit
    would only fail to compile. `names`: the name the code reads each parameter by, to the
    parameter's. None when no array is sized by one, or one's size or element type is unknown."""
    terms: dict[int, list[str]] = {}  # by the function declaring them (each kernel has its own limit)
    sized: set[int] = set()
    blanked, dialect, marks = cxx.blank(source.encode("utf-8"))
    marked = marks.shared if dialect == "cuda" else marks.local  # __shared__, or __local / local
    for node, text in syntax_nodes(source, ("declaration",)):
        # the declaration comes right after the word (the parsed text has it blanked)
        if not any(m < node.start_byte and not blanked[m:node.start_byte].strip() for m in marked):
            continue
        kind = node.child_by_field_name("type")
        words = " ".join(w for w in text(kind).split() if w not in ("const", "volatile", "unsigned")) \
            if kind is not None else ""
        unsigned = kind is not None and "unsigned" in text(kind).split()
        ctype = ("unsigned " + words if unsigned and words else "unsigned" if unsigned else words)
        size = DTYPES.get(CTYPES.get(ctype, "")) or (DTYPES[PACKED[ctype][0]] * PACKED[ctype][1]
                                                    if ctype in PACKED else None)
        fn = node.parent
        while fn is not None and fn.type != "function_definition":
            fn = fn.parent
        home = fn.start_byte if fn is not None else -1
        for decl in node.children_by_field_name("declarator"):
            dims = []
            while decl is not None and decl.type == "array_declarator":
                dims.append(decl.child_by_field_name("size"))
                decl = decl.child_by_field_name("declarator")
            if not dims:
                continue
            if size is None or any(d is None for d in dims):
                return None  # an element type of unknown size, or `extern __shared__ x[]`
            exprs = []
            for d in dims:
                tokens = [text(t) for t in cxx.leaves(d)]
                if any(t[0].isalpha() or t[0] == "_" or (t[0].isdigit() and not t.isdigit())
                       for t in tokens if t not in names):
                    return None  # sized by a name that is not a parameter, or a number Python does not read
                if any(t in names for t in tokens):
                    sized.add(home)
                exprs.append("(" + " ".join(names.get(t, t) for t in tokens) + ")")
            terms.setdefault(home, []).append(" * ".join([str(size)] + exprs))
    if not sized:
        return None
    return " and ".join(" + ".join(terms[h]) + " <= max_shared_per_block" for h in terms if h in sized)


def file_shared_budget(source: str, params: Iterable[str], parts: Iterable[str]) -> str | None:
    """`shared_budget` of a file's other kernels (`parts`, their text), compiled with the kernel:
    an array of theirs sized by a parameter (the transpose post's `tile[TILE_DIM][TILE_DIM]` beside
    the naive kernel being tuned) fails the file's build past the limit as the kernel's own would.
    A name the file (`source`) gives a parameter's value (`#define TILE_DIM TILE_DIM_SIZE`, `const
    int TILE_DIM = TILE_DIM_VALUE;`) reads as the parameter."""
    names = {p: p for p in params}
    for node, text in syntax_nodes(source, ("preproc_def", "init_declarator")):
        if node.type == "preproc_def":
            name, value = node.child_by_field_name("name"), node.child_by_field_name("value")
        else:
            name, value = node.child_by_field_name("declarator"), node.child_by_field_name("value")
        if name is not None and value is not None and text(value).strip() in names and text(name).isidentifier():
            names.setdefault(text(name), names[text(value).strip()])
    budgets = [b for part in parts if (b := shared_budget(part, names)) is not None]
    return " and ".join(budgets) if budgets else None


def loop_steps(source: str, names: dict[str, str], bound: str) -> list[str]:
    """`BOUND % STEP == 0` for each loop `for (j = 0; j < BOUND; j += STEP)` over two parameters
    (`names`: the name the code reads each by, to the parameter's): the block's rows covering a
    tile of TILE_DIM rows BLOCK_ROWS at a time reach past the tile when the step does not divide it."""
    out = []
    for node, text in syntax_nodes(source, ("for_statement",)):
        cond, update = node.child_by_field_name("condition"), node.child_by_field_name("update")
        if cond is None or update is None or cond.type != "binary_expression" \
                or text(cond.child_by_field_name("operator")) not in ("<", "<="):
            continue
        right = cond.child_by_field_name("right")
        if right is None or right.type != "identifier" or names.get(text(right)) != bound:
            continue
        if update.type == "assignment_expression" and text(update.child_by_field_name("operator")) == "+=":
            step = update.child_by_field_name("right")
            if step is not None and step.type == "identifier" and text(step) in names and names[text(step)] != bound:
                out.append(f"{bound} % {names[text(step)]} == 0")
    return list(dict.fromkeys(out))


def divisibility(source: str, name: str, sizes: dict[str, str], parameter: str | None = None) -> list[str]:
    """`p % NAME == 0` for each `scalar / NAME` (or `% NAME`) whose scalar is the problem size p;
    `parameter`, when the code reads the parameter by another name (a template parameter), names it."""
    out = []
    for node, text in syntax_nodes(source, ("binary_expression",)):
        if text(node.child_by_field_name("operator")) not in ("/", "%"):
            continue
        left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
        if right.type == "identifier" and text(right) == name and left.type == "identifier":
            size = sizes.get(text(left))
            if size is not None:
                out.append(f"{size} % {parameter or name} == 0")
    return list(dict.fromkeys(out))


# the proposal ----------------------------------------------------------------------------------

@dataclass
class Lifted:
    """What the rules made of an original: the proposal, and what was lifted and left alone."""

    proposal: TemplateProposal | None
    lifts: list[Lift] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class LaunchLift:
    """A literal of the launch's block in one dimension, lifted into a parameter."""

    dim: int
    name: str
    literal: int
    in_grid: bool  # the grid divides by it too
    grid_dims: tuple[int, ...] = ()  # the grid's dimensions where its literal becomes the parameter


DIM_NAMES = ("BLOCK", "BLOCK_Y", "BLOCK_Z")


def lift_template(original: Template, backend: str, limits: DeviceLimits, dropped: set[str] = frozenset()) -> Lifted:
    """The rules' template of `original`, for `backend` first; lifts named in `dropped` are left out."""
    notes: list[str] = []
    if original.parameters:
        return Lifted(_as_is(original), [], [f"{original.name} is already a template with "
                                             f"{len(original.parameters)} parameters: kept as it is"])
    primary = original.source_for(backend)
    grid, block = original_launch(original, limits)
    backends = [backend] + [b for b in sorted(original.sources) if b != backend]
    every = {b: _analyses(original.source_for(b), original.entry) for b in backends}
    analyses = every[backend]
    _, why = entry_instantiation(primary, original.entry)
    if why:
        notes.append(why)
    taken = _words(original) | set(original.problem_names) | set(DEVICE_NAMES)
    # a #define named as a C++ template parameter, or as a constexpr or const of either dialect
    # (`#define TILE_DIM 32` in OpenCL, `const int TILE_DIM = 32;` in CUDA), reads a macro of another name
    cpp = {p for found in every.values() for a in found for p in a.signature.template_params}
    cpp |= {d.name for b in backends for d in directives(original.source_for(b)) if d.kind == "constexpr"}
    lifts = _unique_names(find_lifts(primary, analyses, original.entry), taken, cpp)
    lifts = [lf for lf in lifts if lf.name not in dropped]
    # a #define the spec's build options set (`-DblockSize=256` over `#ifndef blockSize`): the
    # option's value is the one compiled, whatever the parameter says
    optioned = {o[2:].split("=")[0].strip() for o in original.compile_options.get(backend, ()) if o.startswith("-D")}
    overridden = [lf for lf in lifts if lf.key.split(":")[0] == "define" and lf.key.split(":")[1] in optioned]
    if overridden:
        notes.append(f"left {', '.join(lf.origin for lf in overridden)} as written: the spec's build options "
                     f"define {'it' if len(overridden) == 1 else 'them'}")
        lifts = [lf for lf in lifts if lf not in overridden]
    # a file of several kernels: a constant only the others (or the host code) read is none of
    # this kernel's parameters
    read = _entry_words(primary, original.entry)
    if read is not None:  # the spec's launch and shapes read it too (a template's own parameter)
        read = set(read) | {w for e in [*grid, *block, *(x.source for a in original.arguments for x in a.shape)]
                            for w in re.findall(r"[A-Za-z_]\w*", str(e))}
    # an overridable default holding the launch's block size is the launch's (a template's own
    # `#ifndef BLOCK / #define BLOCK 256` beside a block of 256: the block lifts into it, once)
    launch_sizes = {v for e in block if (v := integer(str(e).strip())) is not None}
    overridable = _overridable(primary)
    unread = [lf for lf in lifts if read is not None and lf.key.split(":")[0] in ("define", "constexpr")
              and lf.key.split(":")[1] not in read
              and not (lf.key.split(":")[1] in overridable and lf.default in launch_sizes)]
    if unread:
        notes.append(f"left {', '.join(lf.origin for lf in unread)} as written: the kernel does not read "
                     f"{'it' if len(unread) == 1 else 'them'}")
        lifts = [lf for lf in lifts if lf not in unread]
    first: list[str] = []
    launches = _launch_lifts(original, primary, analyses, grid, block, lifts, taken, dropped, first)
    fixed = _fixed_by_layout(original, primary, _entry(analyses, original.entry), grid, lifts, launches, notes)
    if fixed:
        lifts = [lf for lf in lifts if lf.name not in fixed]
        launches = _launch_lifts(original, primary, analyses, grid, block, lifts, taken, set(dropped) | fixed, notes)
    else:
        notes += first

    sources: dict[str, str] = {}
    matched: dict[str, dict[str, Lift]] = {}  # per backend, its own site of each lift, by name
    for b in backends:
        src = original.source_for(b)
        mine_analyses = every[b]
        found = find_lifts(src, mine_analyses, original.entry)
        mine = lifts if b == backend else _match(lifts, found)
        if mine is None:
            have = {lf.name for lf in lifts if _counterpart(lf, found) is not None}
            missing = sorted({lf.name for lf in lifts} - have)
            notes.append(f"the {b} source has no {', '.join(missing)} to lift: the template is for "
                         f"{', '.join(sorted(sources))} only")
            continue
        matched[b] = {lf.name: lf for lf in mine}
        edits, why = _launch_edits(src, launches, _entry(mine_analyses, original.entry))
        if why:
            if b == backend:
                notes.append(why + ": the block size is left alone")
                launches = []
                edits = []
            else:
                notes.append(f"the {b} source: {why}: the template is for {backend} only")
                continue
        sources[b] = apply(src, mine, [(lw.name, lw.literal) for lw in launches], edits)
    chosen = list(lifts)
    params: list[ParamProposal] = []
    sizes = {a.name: a.value.source for a in original.arguments
             if a.role == "scalar" and a.value is not None and a.value.source in original.problem_names}
    constraints: list[str] = []
    for lw in reversed(launches):
        if all(lf.name != lw.name for lf in chosen):
            origin = "the launch's block size" + (f" in dimension {'xyz'[lw.dim]}" if len(block) > 1 else "")
            chosen.insert(0, Lift(f"launch:{lw.dim}", lw.name, "threads", lw.literal, origin,
                                  3 if lw.in_grid else 1, launch=True))
    for lf in chosen:
        desc = {
            "threads": "threads per block",
            "vector": "elements per vector access",
            "unroll": ("unroll count (0 = as written: a bare #pragma unroll)" if lf.bare else "unroll count"),
            "flag": "on or off",
        }.get(lf.kind, "size")
        dim = next((lw.dim for lw in launches if lw.name == lf.name), 0)
        values = values_for(lf.kind, lf.default, limits, lf.bare) if dim == 0 and (len(launches) < 2 or lf.kind != "threads") \
            else _dim_values(lf.default, limits)
        params.append(ParamProposal(lf.name, values, lf.default, f"{desc}; from {lf.origin}", lf.kind))
        for b, src in sources.items():
            own = matched[b].get(lf.name, lf)
            constraints += divisibility(src, own.reads or own.name, sizes, lf.name)
            constraints += loop_steps(src, {(m.reads or m.name): m.name for m in matched[b].values()}
                                      | {lw.name: lw.name for lw in launches}, lf.name)
            names, dims = _halved(every[b], original.entry)
            if (own.reads or own.name) in names or any(lw.name == lf.name and lw.dim in dims for lw in launches):
                constraints.append(f"is_pow2({lf.name})")  # a tree reduction halves from it
    constraints += _multiples(original, [lf for lf in chosen if _constant(lf.key) is not None])
    if len(launches) > 1:
        constraints.append(" * ".join(lw.name for lw in launches) + " <= max_threads_per_block")
    for b, src in sources.items():
        budget = shared_budget(src, {(m.reads or m.name): m.name for m in matched[b].values()}
                               | {lw.name: lw.name for lw in launches})
        if budget is not None:
            constraints.append(budget)
    new_block, new_grid = list(block), list(grid)
    for lw in launches:
        new_block[lw.dim] = _replace_literal(block[lw.dim], lw.literal, lw.name)
        for d in lw.grid_dims or ((lw.dim,) if lw.in_grid else ()):
            new_grid[d] = _replace_literal(new_grid[d], lw.literal, lw.name)
            # whole blocks only (`M // 32`: a kernel without bounds checks): another block must
            # divide the size too, or the last rows go unwritten
            whole = _floor_divided(grid[d], lw.literal)
            if whole is not None:
                constraints.append(f"({whole}) % {lw.name} == 0")
    # a grid in steps of a #define made from a lifted one (ceil_div(width, 28) for OUT_TILE_DIM
    # (IN_TILE_DIM - 2 * 2)) takes the #define's value over the parameter, at least 1
    derived, defines = _derived_defines(primary, original.entry)
    body = _body_words(primary, _entry(analyses, original.entry)) if _entry(analyses, original.entry) else None
    for lf in chosen:
        if _constant(lf.key) is None:
            continue
        for name, d in _grid_steps(derived, lf, list(grid), body):
            words = _in_spec_words(d, lf.reads or lf.name, derived, defines, lf.name)
            if words is None:
                continue
            for k, g in enumerate(grid[:3]):
                if _divides_by(g, d.value):
                    new_grid[k] = _replace_literal(new_grid[k], d.value, words)
            constraints.append(f"{words} >= 1")
            notes.append(f"the launch's grid covers the outputs in steps of {d.value}, `{name}`, made from "
                         f"{lf.origin}: the grid follows {lf.name} through it")
    # dynamic shared memory sized by the block (`256 * 4` for a float a thread) follows its parameter
    shared = original.shared_bytes.source if original.shared_bytes is not None else None
    literals = [lw.literal for lw in launches]
    for lw in launches:
        if shared is not None and literals.count(lw.literal) == 1:
            shared = _replace_literal(shared, lw.literal, lw.name)
    if shared is not None and original.shared_bytes is not None and shared != original.shared_bytes.source:
        notes.append(f"the launch's dynamic shared memory `{original.shared_bytes.source}` follows the block size: "
                     f"`{shared}`")
    else:
        shared = None
    for lf in chosen:
        notes.append(f"lifted {lf.origin} into {lf.name}")
    params = _verifiable(original, params, constraints, notes)
    if not params:
        return Lifted(None, [], notes + ["nothing to lift: no #define, constexpr, template argument, #pragma "
                                         "unroll count or launch literal with a tunable name"])
    proposal = TemplateProposal(
        sources=sources,
        parameters=tuple(params),
        constraints=tuple(dict.fromkeys(constraints)),
        grid=tuple(new_grid),
        block=tuple(new_block),
        shared_bytes=shared,
        summary=(f"rules: {len(params)} literal{'s' if len(params) != 1 else ''} lifted into "
                 f"parameter{'s' if len(params) != 1 else ''} ({', '.join(p.name for p in params)})"),
        notes=tuple(notes),
    )
    return Lifted(proposal, chosen, notes)


def _analyses(source: str, entry: str) -> list[KernelAnalysis]:
    """The kernels of a source, analysed; none when it cannot be read (the lifts then go by names)."""
    try:
        return analyse(source)
    except (KernelTreeError, ValueError):
        return []


def _halved(analyses: list[KernelAnalysis], entry: str) -> tuple[frozenset[str], frozenset[int]]:
    """What the entry kernel's tree reductions halve from (kernel_tree.tree_reductions)."""
    kernel = _entry(analyses, entry)
    return tree_reductions(kernel) if kernel is not None else (frozenset(), frozenset())


def _entry(analyses: list[KernelAnalysis], entry: str) -> KernelAnalysis | None:
    base = entry.split("<")[0].split("::")[-1]
    return next((a for a in analyses if a.name == base), None)


def _launch_lifts(original: Template, source: str, analyses: list[KernelAnalysis], grid: list[str],
                  block: list[str], lifts: list[Lift], taken: set[str], dropped: set[str] | frozenset[str],
                  notes: list[str]) -> list[LaunchLift]:
    """The block's literals to lift, a dimension each: every dimension the kernel reads, and none
    whose literal the kernel's body also uses as a number (a hard-coded thread count) beyond the
    global index, where it is lifted with the block."""
    kernel = _entry(analyses, original.entry)
    out: list[LaunchLift] = []
    several = sum(1 for b in block if b.strip() not in ("1", "(1)")) > 1
    for dim, expr in enumerate(block[:3]):
        literal = _block_literal(expr, dim, several)
        if literal is None:
            continue
        if kernel is not None and dim not in kernel.launch_dims:
            if dim > 0:
                continue
        # a buffer whose size counts blocks (a partial result a block) would keep the original's
        # size while the block changes: the spec's shapes hold problem sizes only, so it stays
        counting = [a.name for a in original.arguments for e in a.shape if _literal_positions(e.source, literal)]
        if counting:
            notes.append(f"the shape of `{counting[0]}` holds the block's {literal}: the block size in dimension "
                         f"{'xyz'[dim]} is left alone (a shape cannot follow a parameter), and so is a thread "
                         "count of that value")
            lifts[:] = [lf for lf in lifts if not (lf.kind == "threads" and lf.default == literal)]
            continue
        shuffle = _warp_only(source, original.entry) if dim == 0 and not several and literal <= 64 else None
        if shuffle:
            notes.append(f"the kernel's threads combine their values by warp shuffles (`{shuffle}`) and by nothing "
                         f"else in a block of {literal} threads, one warp: the block size is left alone (in a "
                         "larger block each warp would combine only its own values)")
            continue
        held = _constants_holding(source, kernel, original.entry, literal, lifts)
        if held:
            notes.append(f"the kernel takes {literal} threads from {held}: the block size in dimension "
                         f"{'xyz'[dim]} is left alone")
            continue
        if kernel is not None:
            # the literal as the block's count in this dimension's global index is lifted with it;
            # the same number anywhere else (another dimension's index too) is a count it may assume
            fixed = {s for _, s, d in kernel.fixed_spans if d == dim}
            inside = kernel.body
            body = [sp for word, sp in source_tokens(source)
                    if inside.start <= sp.start < inside.end and integer(word) == literal and sp not in fixed]
            if body:
                line = line_of(source, body[0].start)
                notes.append(f"the kernel's body uses {literal} itself (line {line}), as a thread count it may "
                             f"assume: the block size in dimension {'xyz'[dim]} is left alone")
                continue
        same = [lf for lf in lifts if lf.kind == "threads" and lf.default == literal] if dim == 0 else []
        # a named constant of the same value that the body reads (`#define TILE_DIM 32` with a
        # block of 32, `BLOCK_ROWS 8` with 8 in y): the kernel maps its threads by it, so the
        # block follows it, and a grid that divides by it (the tiles) follows it too
        named = [lf for lf in lifts if _constant(lf.key) is not None and lf.default == literal
                 and (kernel is None or (lf.reads or lf.name) in _body_words(source, kernel))]
        tied = same or named
        # several elements a thread, counted by no constant the block follows (`ceil_div(n, 512)`
        # blocks of 256 threads): the grid and the shapes would not follow the block
        # (a grid that divides by the block itself follows it, whatever else it divides by:
        # `ceil_div(n / 64, 8)` blocks of 8)
        along = grid[dim] if dim < len(grid) else ""
        multiple = (None if _divides_by(along, literal) else _multiple_of(along, literal)) or (None if tied else next(
            (m for a in original.arguments for e in a.shape if (m := _multiple_of(e.source, literal))), None))
        if tied and any(lf.default == multiple and _constant(lf.key) is not None
                        and (kernel is None or (lf.reads or lf.name) in _body_words(source, kernel)) for lf in lifts):
            multiple = None  # tiles of another constant the grid follows (a transpose's TILE_DIM rows, BLOCK_ROWS a step)
        if multiple:
            notes.append(f"the launch counts {multiple} elements a block of {literal} threads: the block size in "
                         f"dimension {'xyz'[dim]} is left alone (the grid and the shapes would not follow it)"
                         + (f", and so is {tied[0].origin}, which the kernel takes its thread count from"
                            if tied else ""))
            # a constant the kernel maps its threads by (`input[i + BLOCK_DIM]` for the block's
            # second element) moves with the block or not at all
            lifts[:] = [lf for lf in lifts if lf not in tied]
            continue
        if tied:
            name = tied[0].name
            notes.append(f"the launch's block of {literal} threads"
                         + (f" in dimension {'xyz'[dim]}" if several else "")
                         + f" is {name} too: the kernel takes its thread count from {tied[0].origin}")
        elif dim == 0:
            name = fresh_name(DIM_NAMES[0], taken | {lf.name for lf in lifts})
        else:
            name = fresh_name(DIM_NAMES[dim], taken | {lf.name for lf in lifts} | {lw.name for lw in out})
        if name in dropped:
            continue
        grid_dims = tuple(d for d, g in enumerate(grid[:3]) if (d == dim and _literal_positions(g, literal))
                          or (named and not same and d != dim and _divides_by(g, literal)))
        out.append(LaunchLift(dim, name, literal, dim in grid_dims, grid_dims))
    return out


def _fixed_by_layout(original: Template, source: str, kernel: KernelAnalysis | None, grid: list[str],
                     lifts: list[Lift], launches: list[LaunchLift], notes: list[str]) -> set[str]:
    """The lifts and launch lifts that must stay at their values because the grid is laid out by
    them: a named constant the body reads that a grid dimension divides by without the launch
    carrying it along (`ceil_div(M, 32)` rows of BLOCKSIZE on a block of 1024: another value, or
    another block, and the grid no longer covers the outputs), with the block of that dimension."""
    body = _body_words(source, kernel) if kernel is not None else None
    carried = {(lw.name, d) for lw in launches for d in (lw.grid_dims or ((lw.dim,) if lw.in_grid else ()))}
    derived, defines = _derived_defines(source, original.entry)
    out: set[str] = set()
    untied: set[int] = set()
    for lf in lifts:
        if _constant(lf.key) is None or (body is not None and (lf.reads or lf.name) not in body):
            continue
        dims = [d for d, g in enumerate(grid[:3]) if _divides_by(g, lf.default) and (lf.name, d) not in carried]
        steps = f"{lf.default}, {lf.origin}, which the block does not follow"
        # steps of a #define computed from it (`OUT_TILE_DIM (IN_TILE_DIM - 2 * MASK_OFFSET)`, a
        # grid of ceil_div(width, 28)): the grid follows it where its value can be said in the
        # spec's words over the parameter (lift_template writes it), else another value moves the
        # steps and the grid stays
        for name, d in ([] if dims else _grid_steps(derived, lf, grid, body)):
            if _in_spec_words(d, lf.reads or lf.name, derived, defines, lf.name) is None:
                dims = [k for k, g in enumerate(grid[:3]) if _divides_by(g, d.value)]
                steps = f"{d.value}, `{name}`, which is made from {lf.origin} and which the grid cannot follow"
                break
        if dims:
            out.add(lf.name)
            untied |= set(dims)
            notes.append(f"the launch's grid covers the outputs in steps of {steps}: {lf.name} and the block size "
                         f"in dimension {'xyz'[dims[0]]} are left alone")
    # the entry's template arguments, which no lift moves (`sgemm<32>` mapping a block of 1024
    # threads by BLOCKSIZE 32 onto ceil_div(M, 32) rows): the block follows them no more
    params = kernel.signature.template_params if kernel is not None else ()
    entry = original.entry
    args = [w for w in entry[entry.index("<") + 1:entry.rindex(">")].split(",")] if params and "<" in entry else []
    for param, arg in zip(params, args):
        value = integer(arg)
        if value is None or value < 2 or (body is not None and param not in body):
            continue
        dims = [d for d, g in enumerate(grid[:3]) if _divides_by(g, value)]
        if dims:
            untied |= set(dims)
            notes.append(f"the launch's grid covers the outputs in steps of {value}, the template argument {param} "
                         f"of `{entry}`, which the block does not follow: the block size in dimension "
                         f"{'xyz'[dims[0]]} is left alone")
    out |= {lw.name for lw in launches if lw.dim in untied}
    return out


def _warp_only(source: str, entry: str) -> str | None:
    """The first warp shuffle of a kernel (or what it calls) whose threads share nothing else: no
    shared memory, no block barrier, no atomic; None otherwise."""
    try:
        model = build(source, entry)
    except ModelError:
        return None
    if not model.shuffles or model.atomics or model.shared_arrays() or any(b.scope == "block" for b in model.barriers):
        return None
    return model.shuffles[0].name


def _multiples(original: Template, constants: list[Lift]) -> list[str]:
    """`size % NAME == 0` for each constraint of the spec `size % L == 0` whose L is a lifted
    constant's value: the spec says the kernel needs its sizes in whole tiles of the constant
    (a tiled product's `wA % 16 == 0` for `#define BLOCK_SIZE 16`), so another tile needs sizes
    in whole tiles of it."""
    out = []
    for c in original.constraints:
        try:
            node = ast.parse(c.text, mode="eval").body
        except SyntaxError:
            continue
        if not (isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Eq)
                and isinstance(node.left, ast.BinOp) and isinstance(node.left.op, ast.Mod)
                and isinstance(node.left.right, ast.Constant) and isinstance(node.comparators[0], ast.Constant)
                and node.comparators[0].value == 0):
            continue
        size = ast.unparse(node.left.left)
        out += [f"({size}) % {lf.name} == 0" for lf in constants if lf.default == node.left.right.value]
    return out


@dataclass(frozen=True)
class Derived:
    """A #define whose value is integer arithmetic over other #defines (`OUT_TILE_DIM
    ((IN_TILE_DIM) - 2 * (MASK_OFFSET))`)."""

    value: int
    reads: frozenset[str]  # the #defines it reads, through one another
    words: tuple[str, ...]  # its value's tokens as written, comments left out


def _verifiable(original: Template, params: list[ParamProposal], constraints: list[str],
                notes: list[str]) -> list[ParamProposal]:
    """The parameters with the values a constraint over that parameter and the problem sizes
    alone rules out at one of the spec's verification sizes left out (`(Width) % TILE_WIDTH == 0`
    with a verification size of 48: TILE_WIDTH 32 could run at 4096 but never be verified)."""
    sizes = set(original.problem_names)
    out = []
    for p in params:
        own = []
        for c in constraints:
            try:
                e = parse_expression(c)
            except ExpressionError:
                continue
            if p.name in e.names and e.names <= sizes | {p.name}:
                own.append(e)
        kept = []
        for v in p.values:
            try:
                ok = v == p.default or all(e.evaluate({**pr.values, p.name: v}) for e in own
                                           for pr in original.verify_problems)
            except ExpressionError:
                ok = True
            if ok:
                kept.append(v)
        if len(kept) < len(p.values):
            gone = [v for v in p.values if v not in kept]
            notes.append(f"{p.name} {', '.join(map(str, gone))} left out: the spec's verification sizes "
                         f"({', '.join(pr.name for pr in original.verify_problems)}) do not admit "
                         f"{'it' if len(gone) == 1 else 'them'}")
            p = replace(p, values=tuple(kept))
        out.append(p)
    return out


def _derived_defines(source: str, entry: str) -> tuple[dict[str, Derived], dict[str, int]]:
    """The file's #defines whose value the kernel model computes from other #defines, by name,
    and the value of every integer #define."""
    try:
        values = dict(build(source, entry).defines)
    except ModelError:
        return {}, {}
    reads: dict[str, set[str]] = {}
    words: dict[str, tuple[str, ...]] = {}
    for node, text_of in syntax_nodes(source, ("preproc_def",)):
        name, value = node.child_by_field_name("name"), node.child_by_field_name("value")
        if name is not None and value is not None and integer(text_of(value).strip()) is None:
            words[text_of(name)] = tuple(w for w, _ in source_tokens(text_of(value)))
            reads[text_of(name)] = {w for w in words[text_of(name)] if w.isidentifier()}
    for name in reads:  # through one another
        todo = list(reads[name])
        while todo:
            more = reads.get(todo.pop(), set()) - reads[name]
            reads[name] |= more
            todo += more
    return {name: Derived(values[name], frozenset(reads[name]), words[name]) for name in reads if name in values}, values


def _grid_steps(derived: dict[str, Derived], lf: Lift, grid: list[str], body: set[str] | None):
    """The derived #defines made from a lifted constant, read by the kernel, whose value a grid
    dimension divides by: (name, Derived) pairs."""
    for name, d in derived.items():
        if (lf.reads or lf.name) in d.reads and d.value > 1 and (body is None or name in body) \
                and any(_divides_by(g, d.value) for g in grid[:3]):
            yield name, d


def _in_spec_words(derived: Derived, name: str, derived_all: dict[str, Derived], values: dict[str, int],
                   parameter: str) -> str | None:
    """A derived #define's value as a spec expression over the parameter that `name` (a lifted
    #define) becomes, every other #define put in as its number: None where it reads anything
    but + - * / % and parentheses over numbers and #defines, or where the expression does not give
    the #define's value at the parameter's default (C's `/` truncates, the spec's `//` floors)."""
    out = []
    for w in derived.words:
        if not w:
            continue
        if w == name:
            out.append(parameter)
        elif w in derived_all and name in derived_all[w].reads:
            inner = _in_spec_words(derived_all[w], name, derived_all, values, parameter)
            if inner is None:
                return None
            out.append(f"({inner})")
        elif w in values:
            out.append(str(values[w]) if values[w] >= 0 else f"({values[w]})")
        elif integer(w) is not None:
            out.append(str(integer(w)))
        elif w in ("+", "-", "*", "%", "(", ")"):
            out.append(w)
        elif w == "/":
            out.append("//")
        else:
            return None
    text = ""
    for w in out:
        text += w if not text or text.endswith("(") or w == ")" else " " + w
    try:
        got = parse_expression(text).evaluate({parameter: values[name]})
    except (ExpressionError, KeyError, ZeroDivisionError):
        return None
    return text if got == derived.value else None


def _overridable(source: str) -> set[str]:
    """The parameters of a template kerntune wrote: the macros of a defaults block (`#ifndef X`
    then `#define X ...`, one after another under a `// kerntune:` comment). A file's own
    `#ifndef` defaults (a tutorial's block size for the host to set) are not among them."""
    out = set()
    for node, text_of in syntax_nodes(source, ("preproc_ifdef",)):
        name = node.child_by_field_name("name")
        if name is None or not text_of(node).lstrip().startswith("#ifndef"):
            continue
        before = node.prev_named_sibling
        while before is not None and before.type == "preproc_ifdef":
            before = before.prev_named_sibling
        if before is None or before.type != "comment" or not text_of(before).startswith("// kerntune:"):
            continue
        first = next((c for c in node.named_children if c.type not in ("identifier", "comment")), None)
        inner = first.child_by_field_name("name") if first is not None and first.type == "preproc_def" else None
        if inner is not None and text_of(inner) == text_of(name):
            out.add(text_of(name))
    return out


def _entry_words(source: str, entry: str) -> set[str] | None:
    """The words the entry kernel and the functions it calls read, with those of the macros they
    use (transitively); None when the kernel cannot be read."""
    try:
        model = build(source, entry)
    except ModelError:
        return None
    raw = source.encode("utf-8")
    spans = [f.span for f in model.functions]
    # a template's header reads words too (`template <int B = NT>`)
    spans += [span_of(source, n) for n, _ in syntax_nodes(source, ("template_declaration",))
              if any(sp.start <= f.span.start and f.span.end <= sp.end for sp in [span_of(source, n)]
                     for f in model.functions)]
    words: set[str] = set()
    for sp in spans:
        words |= {w for w, _ in source_tokens(raw[sp.start:sp.end].decode("utf-8", "replace"))}
    macros: dict[str, set[str]] = {}
    for node, text_of in syntax_nodes(source, ("preproc_def", "preproc_function_def")):
        name, value = node.child_by_field_name("name"), node.child_by_field_name("value")
        if name is not None:
            macros.setdefault(text_of(name), set()).update(
                w for w, _ in source_tokens(text_of(value)) if value is not None)
    todo = list(words & set(macros))
    while todo:
        for w in macros.pop(todo.pop(), set()) - words:
            words.add(w)
            if w in macros:
                todo.append(w)
    return words


def _body_words(source: str, kernel: KernelAnalysis) -> set[str]:
    inside = kernel.body
    return {w for w, sp in source_tokens(source) if inside.start <= sp.start < inside.end}


def _divides_by(expr: str, literal: int) -> bool:
    """Whether a grid expression divides a size by `literal` (`ceil_div(height, 32)`, `(n + 31) / 32`)."""
    compact = expr.replace(" ", "")
    return any(compact[:a].endswith("/") or re.search(r"ceil_div\([^,()]*,$", compact[:a])
               for a, _ in _literal_positions(compact, literal))


def _constants_holding(source: str, kernel: KernelAnalysis | None, entry: str, literal: int,
                       lifts: list[Lift]) -> str:
    """A constant of the kernel that holds the block's thread count and is not lifted with it (a
    template argument `k<256>`, a `#define` or `constexpr` of that value the body reads), in words;
    "" when there is none."""
    if "<" in entry and any(integer(w) == literal for w, _ in source_tokens(entry[entry.index("<"):])):
        return f"its template argument ({entry})"
    if kernel is None:
        return ""
    lifted = {lf.name for lf in lifts} | {lf.key.split(":")[1] for lf in lifts if lf.key.count(":") >= 2}
    names = {d.name for d in directives(source) if d.kind in ("define", "constexpr") and d.value == literal}
    names |= {param for inst in kernel.signature.instantiations for param, words in inst.args
              if integer(words) == literal}
    held = sorted((names & _body_words(source, kernel)) - lifted)
    return f"`{held[0]}`" if held else ""


def _launch_edits(source: str, launches: list[LaunchLift], kernel: KernelAnalysis | None) -> tuple[list[Edit], str]:
    """The edits that put the launch parameters into a source's launch attributes and into its
    global index where it hard-codes the block (`blockIdx.x * 256 + threadIdx.x`), or why not."""
    edits: list[Edit] = []
    for attribute, values, spans in launch_attributes(source):
        for lw in launches:
            if attribute == "__launch_bounds__" and lw.dim > 0:
                continue
            if attribute == "__launch_bounds__" and len(launches) > 1:
                return [], "a __launch_bounds__ on a launch of several dimensions"
            if lw.dim >= len(values):
                continue
            if values[lw.dim] != lw.literal:
                return [], (f"the launch attribute says {values[lw.dim]} threads but the spec launches "
                            f"{lw.literal}")
            edits.append(Edit(spans[lw.dim].start, spans[lw.dim].end, lw.name))
    if kernel is not None:
        for value, span, dim in kernel.fixed_spans:
            lw = next((x for x in launches if x.dim == dim and x.literal == value), None)
            if lw is not None:
                edits.append(Edit(span.start, span.end, lw.name))
    return edits, ""


def _dim_values(default: int, limits: DeviceLimits) -> tuple[int, ...]:
    """Thread counts of one dimension of a launch of several: powers of two to 1024, within a
    factor of 8 of the default, and 1 always (a block one thread wide in a dimension: a row of
    threads of the other)."""
    vals = {1 << k for k in range(0, 11) if 1 << k <= limits.max_threads_per_block} | {default}
    return tuple(sorted(v for v in vals if v == 1 or max(1, default // 8) <= v <= default * 8))


def _as_is(t: Template) -> TemplateProposal:
    return TemplateProposal(
        sources=dict(t.sources),
        parameters=tuple(t.parameters),
        constraints=tuple(c.text for c in t.constraints),
        grid=tuple(e.source for e in t.grid),
        block=tuple(e.source for e in t.block),
        shared_bytes=t.shared_bytes.source if t.shared_bytes is not None else None,
        summary="the template as given",
    )


def _block_literal(expr: str, dim: int = 0, several: bool = False) -> int | None:
    """The thread count literal of one dimension of the block: `256`, or the cap in
    `min(d / 8, 1024)`; a multiple of 32 in the first dimension of a one-dimensional block, a bare
    number more than 1 in a block of several dimensions."""
    found = [int(x) for x in _numbers(expr)]
    if dim == 0 and not several:
        found = [x for x in found if x >= 32 and x % 32 == 0]
    else:
        found = [x for x in found if x > 1] if expr.strip().isdigit() else []
    return max(found) if found else None


def _numbers(expr: str) -> list[str]:
    return [expr[a:b] for a, b in _literal_positions(expr, None)]


def _floor_divided(expr: str, literal: int) -> str | None:
    """`E` of a launch expression that is `E // literal` (whole blocks of `literal`), else None."""
    try:
        node = ast.parse(expr.strip(), mode="eval").body
    except SyntaxError:
        return None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.FloorDiv) and \
            isinstance(node.right, ast.Constant) and node.right.value == literal:
        return ast.unparse(node.left)
    return None


def _multiple_of(expr: str, literal: int) -> int | None:
    """A number the expression divides by that is a whole multiple (2x or more) of `literal`."""
    for i, j in _literal_positions(expr, None):
        value = int(expr[i:j])
        if value > literal and value % literal == 0 and _divides_by(expr, value):
            return value
    return None


def _literal_positions(expr: str, literal: int | None) -> list[tuple[int, int]]:
    """Where integer literals (all, or those equal to `literal`) stand in a launch expression."""
    out, i = [], 0
    while i < len(expr):
        if expr[i].isdigit() and (i == 0 or not (expr[i - 1].isalnum() or expr[i - 1] in "_.")):
            j = i
            while j < len(expr) and expr[j].isdigit():
                j += 1
            if j == len(expr) or not (expr[j].isalnum() or expr[j] in "_."):
                if literal is None or int(expr[i:j]) == literal:
                    out.append((i, j))
            i = j
        else:
            i += 1
    return out


def _replace_literal(expr: str, literal: int, name: str) -> str:
    for a, b in reversed(_literal_positions(expr, literal)):
        expr = expr[:a] + name + expr[b:]
    return expr


def _words(t: Template) -> set[str]:
    return {word for src in t.sources.values() for word, _ in source_tokens(src) if word.isidentifier()}


def fresh_name(name: str, taken: set[str] | frozenset[str]) -> str:
    """`name`, or a variant of it that `taken` does not hold."""
    sized = () if name.endswith(("_SIZE", "SIZE")) else (f"{name}_SIZE",)  # never VEC_SIZE_SIZE
    for candidate in (name, *sized, f"KT_{name}"):
        if candidate not in taken:
            return candidate
    n = 2
    while f"KT_{name}_{n}" in taken:
        n += 1
    return f"KT_{name}_{n}"


def _unique_names(lifts: list[Lift], taken: set[str], cpp: set[str] | frozenset[str] = frozenset()) -> list[Lift]:
    """Names for the lifts that add a macro: never one the source already uses for something else.
    A #define keeps its own name, unless a C++ template parameter has it (`template <int BLOCK>`
    in the other dialect): it then reads a parameter of a fresh name."""
    out, used = [], set()
    for lf in lifts:
        if lf.key.startswith("define:") and lf.name not in cpp:
            used.add(lf.name)
            out.append(lf)
            continue
        fresh = lf.key.startswith("define:") or lf.name in taken or lf.name in used
        name = fresh_name(lf.reads or lf.name, taken | used) if fresh else lf.name
        used.add(name)
        out.append(_renamed(lf, name))
    return out


def _renamed(lf: Lift, name: str) -> Lift:
    """The lift with its parameter called `name`: a #define then reads it (`#define BLOCK BLOCK_SIZE`)."""
    if name == lf.name:
        return lf
    if lf.key.startswith("define:"):
        return replace(lf, name=name, edits=tuple(replace(e, text=e.text.format(name=name)) for e in lf.alias),
                       guard=True, reads=lf.reads or lf.name)
    return replace(lf, name=name, edits=tuple(replace(e, text=e.text.replace(lf.name, name)) for e in lf.edits))


def _constant(key: str) -> str | None:
    """`NAME:value` of a named constant's lift (a #define, a constexpr or file-scope const, or a
    template argument): the same constant in two dialects, whichever way each spells it."""
    kind, _, rest = key.partition(":")
    return rest if kind in ("define", "constexpr", "template") else None


def _counterpart(wanted: Lift, found: list[Lift]) -> Lift | None:
    """The lift of `found` at the same literal as `wanted` (in another dialect), if any."""
    same = [lf for lf in found if lf.key == wanted.key]
    if not same and _constant(wanted.key) is not None:
        same = [lf for lf in found if _constant(lf.key) == _constant(wanted.key)]
    return same[0] if same else None


def _match(wanted: list[Lift], found: list[Lift]) -> list[Lift] | None:
    """The other dialect's own sites for the same lifts, renamed alike; None if one is missing."""
    out = []
    for w in wanted:
        f = _counterpart(w, found)
        if f is None:
            return None
        out.append(_renamed(f, w.name))
    return out
