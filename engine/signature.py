"""Kernel signatures and argument roles, read from source with tree-sitter's C++ grammar.

A CUDA `__global__` or OpenCL `__kernel` function is found in source text — nothing is compiled
or run — and for each argument kerntune tells its type, whether it is a pointer, whether what it
points to is const, and what the body does with it: written (directly, through a cast pointer
`reinterpret_cast<float4 *>(out)[i] = v` or `*(T *)(out + i) = v`, through a local pointer made
from it, through a vector type's `v.store(out + i)` or another function of the file, which is read
for what it does with its own parameters) and whether it is read before the kernel writes it.

The grammar is C++'s; the CUDA and OpenCL words it does not know (`__global__`, `__device__`,
`__launch_bounds__(...)`, `__kernel`, `__global`, `__local`, ...) are blanked out, as tokens of
a first parse, before the parse that is read. Preprocessor conditionals are parsed in all their
branches: the branch the file selects by itself (its own #defines, and the -D options given;
other names are 0, as in the C preprocessor) gives the types, and a kernel's body is read in
every branch. What cannot be read is said in `notes`, one phrase each, and reading goes on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable, Iterator, Mapping, Sequence

from .cxx import CTYPES, PACKED, QUALIFIERS, SKIPPED
from .cxx import Marks as _Marks
from .cxx import blank as _blank
from .cxx import callee as _callee
from .cxx import code_nodes as _walk
from .cxx import first_error as _first_error
from .cxx import int_literal as _int
from .cxx import leaves as _leaves
from .cxx import parser as _parser
from .cxx import text as _text
from .cxx import type_words as _words
from .host_launch import HostLaunch, split_top
from .template import TemplateError

# Names the CUDA headers give to types, as the demangler spells them.
CUDA_SPELLING = {"half": "__half", "nv_bfloat16": "__nv_bfloat16", "half2": "__half2",
                 "nv_bfloat162": "__nv_bfloat162"}
INTEGER_DTYPES = ("int8", "uint8", "int16", "int32", "uint32", "int64", "uint64")

_CASTS = {"reinterpret_cast", "static_cast", "const_cast", "__builtin_assume_aligned"}


class SignatureError(TemplateError):
    """No kernel, or a kernel that cannot be used as it is; the message is one line."""


@dataclass(frozen=True)
class KernelArg:
    """One declared argument and what the body does with it."""

    name: str
    ctype: str  # the element type's words, qualifiers removed ("__half", "unsigned int")
    pointer: bool
    const: bool  # the pointee is const (or in OpenCL's __constant space)
    written: bool = False
    read: bool = False  # read before the kernel writes it (values it did not write itself)
    local: bool = False  # an OpenCL __local pointer: workspace, not a buffer

    @property
    def dtype(self) -> str | None:
        if self.ctype in CTYPES:
            return CTYPES[self.ctype]
        return PACKED[self.ctype][0] if self.ctype in PACKED else None

    @property
    def packed(self) -> int:
        """How many elements one value of the argument's type holds (float4: 4)."""
        return PACKED[self.ctype][1] if self.ctype in PACKED else 1

    @property
    def role(self) -> str:
        """scalar, input, output (written, never read before written) or inout."""
        if not self.pointer:
            return "scalar"
        if self.const or not self.written:
            return "input"
        return "inout" if self.read else "output"


@dataclass(frozen=True)
class Instantiation:
    """An explicit instantiation of a template kernel: its arguments as written, and by parameter."""

    text: str  # "<float, 4>"
    args: tuple[tuple[str, str], ...]  # (template parameter, its argument's words)


@dataclass(frozen=True)
class KernelSignature:
    """A kernel function: its name, dialect, arguments, launch hint, body and what was not read."""

    name: str
    dialect: str  # "cuda" or "opencl"
    args: tuple[KernelArg, ...]
    block_hint: tuple[int, ...] = ()  # from __launch_bounds__(N) or reqd_work_group_size(x, y, z)
    body: str = ""
    template_params: tuple[str, ...] = ()  # a template kernel's parameters, in order
    instantiations: tuple[Instantiation, ...] = ()
    notes: tuple[str, ...] = ()  # what could not be read, one phrase each
    qualified: str = ""  # with its namespaces: "ops::gelu"
    generic_args: tuple[KernelArg, ...] = ()  # a template's arguments as declared (types `T`)
    launches: tuple[HostLaunch, ...] = ()  # the file's host code's launches of it
    # its parameter declarations as written (default arguments left out), for an instantiation
    parameters_written: tuple[str, ...] = ()
    # the explicit instantiation `parse_kernel` wrote for an entry the file does not instantiate
    added_instantiation: str = ""
    # the file's `__constant__` arrays it reads that the host fills (no initializer): (name, element
    # type's words, element count as written)
    constants: tuple[tuple[str, str, str], ...] = ()
    # the dynamic shared memory it declares, as written: `extern __shared__ float s[]` in its body
    # or outside every kernel (CUDA), a `__local` pointer argument (OpenCL); "" for none
    dynamic_shared: str = ""

    @property
    def is_template(self) -> bool:
        return bool(self.template_params)

    @property
    def entry(self) -> str:
        """The name that loads it: the plain name (a template's one instantiation: its template
        arguments can then become parameters), or its instantiation where the name alone may
        name several kernels: several instantiations, or host code launching it (each launch
        instantiates its own)."""
        if len(self.instantiations) > 1 or self.launches and self.instantiations and self.instantiations[0].text:
            return self.name + self.instantiations[0].text
        return self.name

    def arg(self, name: str) -> KernelArg:
        for a in self.args:
            if a.name == name:
                return a
        raise KeyError(name)

    def instantiate(self, inst: Instantiation) -> "KernelSignature":
        """The signature with the template's type parameters replaced by an instantiation's types."""
        types = dict(inst.args)
        generic = self.generic_args or self.args
        return replace(self, args=tuple(replace(a, ctype=types.get(a.ctype, a.ctype)) for a in generic),
                       generic_args=generic)


# parsing ---------------------------------------------------------------------------------------

# the preprocessor ------------------------------------------------------------------------------

class _Pre:
    """Which preprocessor branches the file selects by itself, and its object-like macros."""

    def __init__(self, defines: Mapping[str, str]):
        self.macros: dict[str, str] = dict(defines)
        self.notes: list[str] = []

    def value(self, node) -> int | None:
        t = node.type
        if t == "number_literal":
            return _int(_text(node))
        if t == "char_literal":
            inner = _text(node)[1:-1]
            return ord(inner) if len(inner) == 1 else None
        if t == "identifier":
            v = self.macros.get(_text(node))
            if v is None:
                return 0  # an undefined name is 0, as in the C preprocessor
            return _int(v.strip()) if _int(v.strip()) is not None else None
        if t == "preproc_defined":
            names = [c for c in node.children if c.type == "identifier"]
            return int(bool(names) and _text(names[0]) in self.macros)
        if t == "parenthesized_expression":
            inner = [c for c in node.named_children if c.type != "comment"]
            return self.value(inner[0]) if inner else None
        if t == "unary_expression":
            v = self.value(node.child_by_field_name("argument"))
            op = _text(node.child_by_field_name("operator"))
            if v is None:
                return None
            return {"!": int(not v), "-": -v, "+": v, "~": ~v}.get(op)
        if t == "binary_expression":
            op = _text(node.child_by_field_name("operator"))
            a = self.value(node.child_by_field_name("left"))
            if op in ("&&", "||") and a is not None and (a == 0) == (op == "&&"):
                return int(op == "||")  # short-circuit
            b = self.value(node.child_by_field_name("right"))
            if a is None or b is None:
                return None
            ops = {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b,
                   "/": lambda: int(a / b) if b else None, "%": lambda: a % b if b else None,
                   "<": lambda: int(a < b), ">": lambda: int(a > b), "<=": lambda: int(a <= b),
                   ">=": lambda: int(a >= b), "==": lambda: int(a == b), "!=": lambda: int(a != b),
                   "&&": lambda: int(bool(a and b)), "||": lambda: int(bool(a or b)),
                   "&": lambda: a & b, "|": lambda: a | b, "^": lambda: a ^ b,
                   "<<": lambda: a << b, ">>": lambda: a >> b}
            return ops[op]() if op in ops else None
        if t == "conditional_expression":
            c = self.value(node.child_by_field_name("condition"))
            if c is None:
                return None
            return self.value(node.child_by_field_name("consequence" if c else "alternative"))
        return None

    def condition(self, node) -> bool:
        """Whether a conditional group's branch is taken; an unreadable one counts as taken."""
        t = node.type
        if t in ("preproc_ifdef",):
            name = _text(node.child_by_field_name("name"))
            ifndef = _text(node.children[0]).endswith("ifndef")
            return (name in self.macros) != ifndef
        if t == "preproc_elifdef":
            name = _text(node.child_by_field_name("name"))
            return (name in self.macros) != _text(node.children[0]).endswith("elifndef")
        cond = node.child_by_field_name("condition")
        v = self.value(cond) if cond is not None else None
        if v is None:
            self.notes.append(f"could not evaluate `#{_text(node.children[0]).lstrip('#')} "
                              f"{' '.join(_text(cond).split())}`; read its first branch")
            return True
        return bool(v)


_CONDITIONALS = ("preproc_if", "preproc_ifdef", "preproc_elif", "preproc_elifdef")


def _active(node, pre: _Pre) -> Iterator:
    """The top-level items of the branches the file selects, in order; #defines recorded as met."""
    for child in node.children:
        t = child.type
        if t in _CONDITIONALS:
            alt = child.child_by_field_name("alternative")
            if pre.condition(child):
                yield from _active_branch(child, alt, pre)
            elif alt is not None:
                if alt.type == "preproc_else":
                    yield from _active(alt, pre)
                else:
                    yield from _active(_Wrap(alt), pre)
        elif t == "preproc_def":
            name = _text(child.child_by_field_name("name"))
            value = child.child_by_field_name("value")
            pre.macros[name] = _text(value).strip() if value is not None else "1"
            yield child
        elif t == "preproc_call" and _text(child.child_by_field_name("directive")) == "#undef":
            pre.macros.pop(_text(child.child_by_field_name("argument")).strip(), None)
        elif t in ("namespace_definition", "linkage_specification"):
            yield child
            body = child.child_by_field_name("body")
            if body is not None:
                yield from _active(body if body.type == "declaration_list" else _Wrap(body), pre)
        else:
            yield child


class _Wrap:
    """An #elif node seen as a group holding only itself, so `_active` takes its condition."""

    def __init__(self, node):
        self.children = [node]


def _active_branch(group, alt, pre: _Pre) -> Iterator:
    for c in group.children:
        if alt is not None and c.id == alt.id:
            break
        if c.type in ("#if", "#ifdef", "#ifndef", "#elif", "#elifdef", "#elifndef", "#endif", "#else") or (
                c == group.child_by_field_name("condition") or c == group.child_by_field_name("name")):
            continue
        yield from _active(_Wrap(c), pre)


# arguments -------------------------------------------------------------------------------------

def _declarator_name(node) -> tuple[str, bool, bool]:
    """(name, is a pointer or array, the pointer itself is const) of a parameter declarator."""
    pointer = False
    while node is not None:
        t = node.type
        if t in ("identifier", "field_identifier", "type_identifier"):
            return _text(node), pointer, False
        if t in ("pointer_declarator", "array_declarator", "abstract_pointer_declarator",
                 "abstract_array_declarator"):
            pointer = True
        inner = node.child_by_field_name("declarator")
        if inner is None:
            named = [c for c in node.named_children if c.type != "type_qualifier"]
            inner = named[-1] if named else None
        node = inner
    return "", pointer, False


def _param(node, marks: _Marks, types: Mapping[str, str], notes: list[str]) -> KernelArg | None:
    decl = node.child_by_field_name("declarator")
    name, pointer, _ = _declarator_name(decl)
    ctype = _words(node.child_by_field_name("type"))
    if not name:
        notes.append(f"an argument without a name (`{' '.join(_text(node).split())}`)")
        return None
    ctype = types.get(ctype, ctype)
    if decl is not None and decl.type == "reference_declarator":
        notes.append(f"argument {name} is a reference")
    const = any(c.type == "type_qualifier" and _text(c) == "const" for c in node.children)
    span = range(marks.head(node), node.end_byte)
    const = const or any(o in span for o in marks.constant)
    local = any(o in span for o in marks.local)
    return KernelArg(name, ctype, pointer, const and pointer, local=local)


# reads and writes ------------------------------------------------------------------------------

_STORE_WORDS = ("store", "vstore", "__st", "st_global", "write")
_LOAD_WORDS = ("load", "vload", "__ld", "ld_global", "read", "fetch")


class _Flow:
    """Reads and writes through pointers, in evaluation order, for one function body."""

    def __init__(self, aliases: dict[str, set], functions: Mapping[str, object], memo: dict, depth: int,
                 notes: list[str]):
        self.aliases = aliases  # a local or parameter name -> the tracked pointers it points into
        self.refs: dict[str, set] = {}  # a reference bound to an element -> the pointers
        self.first: dict = {}  # tracked pointer -> "read" or "write", whichever came first
        self.written: set = set()
        self.read: set = set()
        self.functions = functions
        self.memo = memo  # what each function of the file does with its parameters, once read
        self.depth = depth
        self.notes = notes

    def event(self, targets: Iterable, kind: str) -> None:
        for t in targets:
            self.first.setdefault(t, kind)
            (self.written if kind == "write" else self.read).add(t)

    def points_into(self, e) -> set:
        """The tracked pointers an expression's value points into."""
        if e is None:
            return set()
        t = e.type
        if t == "identifier":
            return set(self.aliases.get(_text(e), ()))
        if t in ("parenthesized_expression", "comma_expression"):
            named = [c for c in e.named_children if c.type != "comment"]
            return self.points_into(named[-1]) if named else set()
        if t == "cast_expression":
            return self.points_into(e.child_by_field_name("value"))
        if t == "call_expression" and _callee(e.child_by_field_name("function")) in _CASTS:
            args = e.child_by_field_name("arguments").named_children
            return self.points_into(args[0]) if args else set()
        if t == "binary_expression" and _text(e.child_by_field_name("operator")) in ("+", "-"):
            return self.points_into(e.child_by_field_name("left")) | self.points_into(e.child_by_field_name("right"))
        if t == "pointer_expression" and _text(e.child_by_field_name("operator")) == "&":
            return self.element_of(e.child_by_field_name("argument"))
        if t == "conditional_expression":
            return self.points_into(e.child_by_field_name("consequence")) | \
                self.points_into(e.child_by_field_name("alternative"))
        if t == "assignment_expression":
            return self.points_into(e.child_by_field_name("right"))
        return set()

    def element_of(self, e) -> set:
        """The tracked pointers an lvalue expression is an element of (`out[i]`, `*p`, `p->x`)."""
        if e is None:
            return set()
        t = e.type
        if t == "subscript_expression":
            return self.points_into(e.child_by_field_name("argument"))
        if t == "pointer_expression" and _text(e.child_by_field_name("operator")) == "*":
            return self.points_into(e.child_by_field_name("argument"))
        if t == "field_expression":
            if _text(e.child_by_field_name("operator")) == "->":
                return self.points_into(e.child_by_field_name("argument"))
            return self.element_of(e.child_by_field_name("argument"))
        if t == "parenthesized_expression":
            named = e.named_children
            return self.element_of(named[-1]) if named else set()
        if t == "identifier":
            return set(self.refs.get(_text(e), ()))
        return set()

    # visiting
    def visit(self, node) -> None:
        t = node.type
        if t in SKIPPED:
            return
        if t == "assignment_expression":
            left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
            self.visit(right)
            op = _text(node.child_by_field_name("operator"))
            target = self.element_of(left)
            if target:
                if op != "=":
                    self.event(target, "read")
                self.event(target, "write")
                self.visit_inside(left)
            else:
                if left is not None and left.type == "identifier" and _text(left) in self.aliases:
                    self.aliases[_text(left)] = self.aliases[_text(left)] | self.points_into(right)
                self.visit(left) if left is not None else None
            return
        if t == "update_expression":
            arg = node.child_by_field_name("argument")
            target = self.element_of(arg)
            if target:
                self.event(target, "read")
                self.event(target, "write")
                self.visit_inside(arg)
            elif arg is not None:
                self.visit(arg)
            return
        if t in ("subscript_expression", "field_expression") or (
                t == "pointer_expression" and _text(node.child_by_field_name("operator")) == "*"):
            self.event(self.element_of(node), "read")
            self.visit_inside(node)
            return
        if t == "pointer_expression":  # &x[i]: an address, not a read
            arg = node.child_by_field_name("argument")
            if self.element_of(arg):
                self.visit_inside(arg)
            elif arg is not None:
                self.visit(arg)
            return
        if t == "call_expression":
            self.call(node)
            return
        if t in ("declaration", "condition_declaration"):
            self.declaration(node)
            return
        for c in node.children:
            self.visit(c)

    def visit_inside(self, node) -> None:
        """The parts of an element expression other than the element itself (its indices)."""
        if node is None:
            return
        if node.type in ("field_expression", "parenthesized_expression") and not (
                node.type == "field_expression" and _text(node.child_by_field_name("operator")) == "->"):
            inner = node.child_by_field_name("argument") if node.type == "field_expression" else (
                node.named_children[-1] if node.named_children else None)
            if inner is not None and self.element_of(inner):
                self.visit_inside(inner)
                return
        for c in node.children:
            self.visit(c)

    def declaration(self, node) -> None:
        for d in node.children_by_field_name("declarator"):
            if d.type != "init_declarator":
                continue
            inner, value = d.child_by_field_name("declarator"), d.child_by_field_name("value")
            if value is None:
                continue
            if value.type in ("initializer_list", "argument_list"):
                named = value.named_children
                value_expr = named[0] if len(named) == 1 else None
            else:
                value_expr = value
            if inner is not None and inner.type == "reference_declarator" and self.element_of(value_expr):
                self.visit_inside(value_expr)  # binds a name to the element: no read yet
            else:
                self.visit(value)
            name, pointer, _ = _declarator_name(inner)
            if not name or value_expr is None:
                continue
            if inner.type == "reference_declarator":
                target = self.element_of(value_expr)
                if target:
                    self.refs[name] = target
                elif self.points_into(value_expr):
                    self.aliases[name] = self.points_into(value_expr)
            elif pointer or _text(node.child_by_field_name("type")) == "auto":
                into = self.points_into(value_expr)
                if into:
                    self.aliases[name] = into

    def call(self, node) -> None:
        fn = node.child_by_field_name("function")
        name = _callee(fn)
        args_node = node.child_by_field_name("arguments")
        args = [a for a in args_node.named_children if a.type != "comment"] if args_node is not None else []
        for a in args:
            self.visit(a)
        if fn is not None and fn.type == "field_expression":
            self.visit(fn.child_by_field_name("argument"))
        passed = [(i, self.points_into(a)) for i, a in enumerate(args)]
        passed = [(i, p) for i, p in passed if p]
        if not passed or name in _CASTS:
            return
        effects = _param_effects(self.functions.get(name), self.functions, self.memo, self.depth + 1)
        low = name.lower()
        for i, into in passed:
            if effects is not None and i < len(effects):
                first, w, r = effects[i]
                order = [first] + [k for k in ("read", "write") if k != first and (w if k == "write" else r)]
                for kind in order:
                    if kind:
                        self.event(into, kind)
            elif low.startswith("atomic") or low.startswith("atom_"):
                self.event(into, "read")
                self.event(into, "write")
            elif low in ("memcpy", "memcpy_async", "__builtin_memcpy", "memmove"):
                self.event(into, "write" if i == 0 else "read")
            elif low in ("memset", "__builtin_memset"):
                self.event(into, "write")
            elif low.startswith(_STORE_WORDS) or "store" in low:
                # OpenCL's vstore takes the pointer last; other stores write the pointers they get
                self.event(into, "write")
            elif low.startswith(_LOAD_WORDS) or "load" in low:
                self.event(into, "read")
            else:
                self.notes.append(f"cannot tell what `{name or _text(fn)}` does with a pointer it is passed; "
                                  "counted as a write")
                self.event(into, "write")


def _param_effects(fn, functions: Mapping[str, object], memo: dict,
                   depth: int) -> list[tuple[str, bool, bool]] | None:
    """For a function of the file: (first access, written, read before written) of each parameter."""
    if fn is None or depth > 6:
        return None
    key = (fn.start_byte, fn.end_byte)
    if key in memo:
        return memo[key]
    memo[key] = None  # a recursive call, while the function is read, is an unknown
    decl = _function_declarator(fn)
    params = decl.child_by_field_name("parameters") if decl is not None else None
    names = []
    for p in params.named_children if params is not None else []:
        if p.type in ("parameter_declaration", "optional_parameter_declaration"):
            names.append(_declarator_name(p.child_by_field_name("declarator"))[0])
    flow = _Flow({n: {i} for i, n in enumerate(names) if n}, functions, memo, depth, [])
    body = fn.child_by_field_name("body")
    if body is not None:
        flow.visit(body)
    memo[key] = [(flow.first.get(i, ""), i in flow.written, flow.first.get(i) == "read") for i in range(len(names))]
    return memo[key]


def _function_declarator(fn):
    d = fn.child_by_field_name("declarator")
    while d is not None and d.type != "function_declarator":
        d = d.child_by_field_name("declarator")
    return d


def _functions(root) -> dict[str, object]:
    """Every function defined in the file (free functions, methods, templates), by plain name."""
    found: dict[str, object] = {}
    stack = [root]
    while stack:
        n = stack.pop()
        if n.type == "function_definition":
            d = _function_declarator(n)
            if d is not None:
                found.setdefault(_callee(d.child_by_field_name("declarator")), n)
            continue
        stack.extend(n.children)
    return found


# kernels ---------------------------------------------------------------------------------------

def _typedef(node, types: dict[str, str]) -> None:
    if node.type == "type_definition":
        base = _words(node.child_by_field_name("type"))
        for d in node.children_by_field_name("declarator"):
            name, pointer, _ = _declarator_name(d)
            if name and not pointer:
                types[name] = types.get(base, base)
    elif node.type == "alias_declaration":
        t = node.child_by_field_name("type")
        base = _words(t.child_by_field_name("type") if t is not None and t.type == "type_descriptor" else t)
        name = _text(node.child_by_field_name("name"))
        if name:
            types[name] = types.get(base, base)


def _template_params(node) -> tuple[str, ...]:
    plist = node.child_by_field_name("parameters")
    out = []
    for p in plist.named_children if plist is not None else []:
        if p.type in ("type_parameter_declaration", "optional_type_parameter_declaration",
                      "variadic_type_parameter_declaration"):
            ident = p.child_by_field_name("name") or next(
                (c for c in p.named_children if c.type == "type_identifier"), None)
            out.append(_text(ident))
        elif p.type in ("parameter_declaration", "optional_parameter_declaration"):
            out.append(_declarator_name(p.child_by_field_name("declarator"))[0])
    return tuple(out)


def _instantiation(node, params: tuple[str, ...], kernel_args: list[KernelArg],
                   types: Mapping[str, str]) -> tuple[str, Instantiation] | None:
    """(kernel name, instantiation) of `template __global__ void k<float>(float *, ...);`."""
    decl = _function_declarator(node)
    if decl is None:
        return None
    target = decl.child_by_field_name("declarator")
    while target is not None and target.type == "qualified_identifier":  # `ns::k<float>` written outside ns
        target = target.child_by_field_name("name")
    name = _callee(target)
    values: dict[str, str] = {}
    if target is not None and target.type == "template_function":
        targs = target.child_by_field_name("arguments")
        for p, a in zip(params, [c for c in targs.named_children if c.type != "comment"]):
            values[p] = _words(a.child_by_field_name("type")) if a.type == "type_descriptor" else " ".join(
                _text(a).split())
    # type parameters the argument list leaves to deduction: from the declared parameter types
    plist = decl.child_by_field_name("parameters")
    declared = [p for p in plist.named_children if p.type == "parameter_declaration"] if plist is not None else []
    for ka, p in zip(kernel_args, declared):
        if ka.ctype in params and ka.ctype not in values:
            values[ka.ctype] = _words(p.child_by_field_name("type"))
    values = {k: CUDA_SPELLING.get(types.get(v, v), types.get(v, v)) for k, v in values.items()}
    if any(p not in values for p in params):
        return name, Instantiation("", tuple(values.items()))
    return name, Instantiation("<" + ", ".join(values[p] for p in params) + ">", tuple(values.items()))


def _qualified(node, root) -> str:
    parts = []
    p = node.parent
    while p is not None and p.id != root.id:
        if p.type == "namespace_definition":
            n = p.child_by_field_name("name")
            if n is not None:
                parts.append(_text(n))
        p = p.parent
    return "::".join(reversed(parts))


def parse_kernels(source: str, defines: Mapping[str, str] | None = None,
                  folders: Sequence[Path] = ()) -> list[KernelSignature]:
    """Every kernel defined in the source, in order, with the types its typedefs (and those of the
    headers it includes with `#include "..."`, found in `folders`) and explicit instantiations
    give; never raises on source it cannot fully read (see `notes`)."""
    blanked, dialect, marks = _blank(source.encode("utf-8"))
    tree = _parser().parse(blanked)
    root = tree.root_node
    pre = _Pre(defines or {})
    functions = _functions(root)
    types: dict[str, str] = included_types(source, folders, defines) if folders else {}
    found: list[tuple[object, object]] = []  # (function_definition, enclosing template_declaration)
    instantiations = []
    for item in _active(root, pre):
        t = item.type
        if t == "preproc_def":
            _type_macro(item, types)
        elif t in ("type_definition", "alias_declaration"):
            _typedef(item, types)
        elif t == "function_definition":
            found.append((item, None))
        elif t == "template_declaration":
            inner = next((c for c in item.named_children if c.type == "function_definition"), None)
            if inner is not None:
                found.append((inner, item))
        elif t == "template_instantiation":
            instantiations.append(item)
    notes = list(dict.fromkeys(pre.notes))
    kernels = []
    bodies: list[tuple[int, int]] = []
    memo: dict = {}
    for fn, template in found:
        body = fn.child_by_field_name("body")
        start = marks.head(fn)  # the blanked words before it (`__global__ void`) are whitespace now
        if body is None or not any(start <= o < body.start_byte for o in marks.kernels):
            continue  # not a kernel: a __device__ or host function
        kernels.append(_kernel(fn, start, template, root, dialect, marks, types, functions, memo, instantiations, notes))
        bodies.append((body.start_byte, body.end_byte))
        kernels[-1] = replace(kernels[-1], parameters_written=_parameters_written(source.encode("utf-8"), fn))
    shared = _extern_shared(source.encode("utf-8"), root, marks)
    host_filled = _constant_arrays(root, marks, bodies, types)
    for i, k in enumerate(kernels):
        start, end = bodies[i]
        words = _reached_words(functions, start, end, root)
        mine = [text for at, name, text in shared
                if start <= at < end or not any(a <= at < b for a, b in bodies) and name in words]
        local = [a for a in k.args if a.local]
        dynamic = mine[0] if mine else (f"__local {local[0].ctype} *{local[0].name}" if local else "")
        constants = tuple(c for at, c in host_filled if c[0] in words)
        kernels[i] = replace(k, dynamic_shared=dynamic, constants=constants)
    launches = _host_launches(source.encode("utf-8"), root, marks, pre.macros)
    kernels = [replace(k, launches=tuple(x for x in launches if x.callee == k.name)) for k in kernels]
    if root.has_error:
        bad = _first_error(root)
        if bad is not None:
            line = bad.start_point[0] + 1
            note = f"could not parse line {line} (`{' '.join(_text(bad).split())[:60]}`)"
            kernels = [replace(k, notes=k.notes + (note,)) for k in kernels]
    return kernels


def _parameters_written(src: bytes, fn) -> tuple[str, ...]:
    """A function's parameter declarations as the file writes them, default arguments left out."""
    decl = _function_declarator(fn)
    plist = decl.child_by_field_name("parameters") if decl is not None else None
    out = []
    for p in plist.named_children if plist is not None else []:
        if p.type not in ("parameter_declaration", "optional_parameter_declaration"):
            continue
        end = p.end_byte
        default = p.child_by_field_name("default_value")
        if default is not None:
            end = src.rfind(b"=", p.start_byte, default.start_byte)
        out.append(" ".join(src[p.start_byte:end].decode("utf-8", "replace").split()))
    return tuple(out)


def _template_arguments(text: str) -> list[str]:
    """`<float, Vec<int, 4>, 128>` -> ["float", "Vec<int, 4>", "128"]: split at the top level."""
    inner, parts, depth, cur = text.strip()[1:-1], [], 0, ""
    for ch in inner:
        depth += {"<": 1, "(": 1, "[": 1, ">": -1, ")": -1, "]": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return [p for p in [*parts, cur.strip()] if p]


def _substituted(text: str, values: Mapping[str, str]) -> str:
    """A parameter declaration with the template's parameter names replaced by their arguments,
    token by token (read from the declaration's syntax tree)."""
    wrapped = f"void kt_f({text});".encode("utf-8")
    spans = [(leaf.start_byte, leaf.end_byte, values[_text(leaf)]) for leaf in _leaves(_parser().parse(wrapped).root_node)
             if leaf.type in ("identifier", "type_identifier") and _text(leaf) in values]
    out = wrapped
    for a, b, v in reversed(spans):
        out = out[:a] + v.encode("utf-8") + out[b:]
    return out.decode("utf-8")[len("void kt_f("):-2]


def _instantiation_for(sig: KernelSignature, entry: str, where: str) -> KernelSignature:
    """A template kernel instantiated as `entry` names it (`ns::k<float, 128>`) where the file has
    no such explicit instantiation: the declaration to add is kept in `added_instantiation`."""
    args = _template_arguments(entry[entry.index("<"):])
    if len(args) != len(sig.template_params):
        raise SignatureError(f"{where}: {entry} gives {len(args)} template argument{'s' if len(args) != 1 else ''}; "
                             f"{sig.name} takes {len(sig.template_params)} ({', '.join(sig.template_params)})")
    values = dict(zip(sig.template_params, args))
    inst = Instantiation("<" + ", ".join(args) + ">",
                         tuple((p, CUDA_SPELLING.get(v, v)) for p, v in values.items()))
    params = ", ".join(_substituted(p, values) for p in sig.parameters_written)
    line = f"template __global__ void {sig.qualified or sig.name}{inst.text}({params});"
    return replace(sig, instantiations=(inst,), added_instantiation=line).instantiate(inst)


def _constant_arrays(root, marks: _Marks, bodies: list[tuple[int, int]],
                     types: Mapping[str, str]) -> list[tuple[int, tuple[str, str, str]]]:
    """The file's `__constant__` arrays outside every kernel with no initializer (the host fills
    them, `cudaMemcpyToSymbol`): where, and (name, element type's words, element count)."""
    out = []
    for at in marks.cuda_constant:
        if any(a <= at < b for a, b in bodies):
            continue
        first = at  # the word is blanked: the declaration starts at the next word
        while first < len(marks.text) and marks.text[first:first + 1].isspace():
            first += 1
        node = root.descendant_for_byte_range(first, first)
        while node is not None and node.type != "declaration":
            node = node.parent
        if node is None:
            continue
        d = node.child_by_field_name("declarator")
        if d is None or d.type != "array_declarator":
            continue  # a scalar, or one with an initializer (init_declarator): not the host's
        name = d.child_by_field_name("declarator")
        size = d.child_by_field_name("size")
        ctype = _words(node.child_by_field_name("type"))
        out.append((at, (_text(name), types.get(ctype, ctype), " ".join(_text(size).split()) if size else "")))
    return out


def _extern_shared(src: bytes, root, marks: _Marks) -> list[tuple[int, str, str]]:
    """Each `extern __shared__` declaration of the file (dynamic shared memory): where, the name it
    declares, and its text."""
    out = []
    for at in marks.shared:
        node = root.descendant_for_byte_range(at, at)
        while node is not None and node.type != "declaration":
            node = node.parent
        if node is None or node.start_byte > at:
            continue
        if any(c.type == "storage_class_specifier" and _text(c) == "extern" for c in node.children):
            text = src[at:node.end_byte].decode("utf-8", "replace")
            start = src.rfind(b"extern", node.start_byte, at + 1)
            if start >= 0:
                text = src[start:node.end_byte].decode("utf-8", "replace")
            d = node.child_by_field_name("declarator")
            while d is not None and d.type != "identifier":
                d = d.child_by_field_name("declarator")
            out.append((at, _text(d), " ".join(text.split())))
    return out


def _reached_words(functions: Mapping[str, object], start: int, end: int, root) -> set[str]:
    """The identifiers of the body at start..end and of the functions it calls, transitively."""
    body = root.descendant_for_byte_range(start, end - 1)
    words: set[str] = set()
    todo, seen = [body], set()
    while todo:
        node = todo.pop()
        if node is None or node.start_byte in seen:
            continue
        seen.add(node.start_byte)
        for leaf in _leaves(node):
            if leaf.type == "identifier" and _text(leaf) not in words:
                words.add(_text(leaf))
                todo.append(functions.get(_text(leaf)))
    return words


def _host_launches(src: bytes, root, marks: _Marks, macros: Mapping[str, str]) -> list[HostLaunch]:
    """Each `<<<...>>>` launch of the file: the kernel it launches, its arguments, and the constants
    of the function that launches it declared before it."""
    out = []
    for start, end, config in marks.launches:
        callee = re.search(rb"([A-Za-z_][\w:]*)\s*(<[^;{}()]*>)?\s*$", src[max(0, start - 300):start])
        rest = re.match(rb"\s*\(", src[end:])
        if callee is None or rest is None:
            continue
        depth, j = 0, end + rest.end() - 1
        while j < len(src):
            depth += {40: 1, 41: -1}.get(src[j], 0)
            if depth == 0:
                break
            j += 1
        args = split_top(src[end + rest.end():j].decode("utf-8", "replace"))
        fn = _enclosing_function(root, start)
        found: dict[str, str] = {}
        for decl in _descendants(fn, "declaration") if fn is not None else []:
            if decl.start_byte >= start:
                continue
            for d in decl.children_by_field_name("declarator"):
                if d.type == "function_declarator" and _words(decl.child_by_field_name("type")) == "dim3":
                    # `dim3 block(TILE, TILE);` reads as a function declaration to the grammar
                    params = d.child_by_field_name("parameters")
                    inner = d.child_by_field_name("declarator")
                    if params is not None and inner is not None and inner.type == "identifier":
                        found[_text(inner)] = "dim3(" + " ".join(_text(params).split())[1:-1] + ")"
                    continue
                if d.type != "init_declarator":
                    continue
                name, value = d.child_by_field_name("declarator"), d.child_by_field_name("value")
                if name is None or value is None or name.type != "identifier":
                    continue
                text = " ".join(_text(value).split())
                if value.type in ("argument_list", "initializer_list"):  # dim3 grid(a, b) / grid{a, b}
                    text = "dim3(" + text[1:-1] + ")"
                found[_text(name)] = text
        name = callee.group(1).decode("utf-8", "replace").split("::")[-1]
        out.append(HostLaunch(name, tuple(split_top(config)), tuple(args), src.count(b"\n", 0, start) + 1,
                              found, dict(macros)))
    return out


def _enclosing_function(root, offset: int):
    node, found = root, None
    while True:
        inner = next((c for c in node.children if c.start_byte <= offset < c.end_byte), None)
        if inner is None:
            return found
        if inner.type == "function_definition":
            found = inner
        node = inner


def _descendants(node, kind: str) -> list:
    out, stack = [], [node]
    while stack:
        n = stack.pop()
        if n.type == kind:
            out.append(n)
        stack.extend(reversed(n.children))
    return out


def _kernel(fn, head, template, root, dialect, marks, types, functions, memo, instantiations, file_notes) -> KernelSignature:
    decl = _function_declarator(fn)
    name = _callee(decl.child_by_field_name("declarator")) if decl is not None else ""
    notes = list(file_notes)
    args: list[KernelArg] = []
    plist = decl.child_by_field_name("parameters") if decl is not None else None
    for p in plist.named_children if plist is not None else []:
        if p.type in ("parameter_declaration", "optional_parameter_declaration"):
            a = _param(p, marks, types, notes)
            if a is not None:
                args.append(a)
        elif p.type == "variadic_parameter_declaration" or _text(p) == "...":
            notes.append("a variadic argument list")
    body = fn.child_by_field_name("body")
    flow = _Flow({a.name: {a.name} for a in args if a.pointer}, functions, memo, 0, notes)
    if body is not None:
        flow.visit(body)
    args = [replace(a, written=a.name in flow.written, read=flow.first.get(a.name) == "read") if a.pointer else a
            for a in args]
    hint = next((h for o, h in marks.hints if head <= o < (body or fn).start_byte), ())
    params = _template_params(template) if template is not None else ()
    insts = []
    for node in instantiations:
        got = _instantiation(node, params, args, types)
        if got is not None and got[0] == name and params:
            insts.append(got[1])
    sig = KernelSignature(name, dialect, tuple(args), hint, _text(body)[1:-1] if body is not None else "",
                          params, tuple(insts), tuple(dict.fromkeys(notes)),
                          "::".join(x for x in (_qualified(fn, root), name) if x))
    if insts and insts[0].text:
        sig = sig.instantiate(insts[0])
    return sig


def typedefs(source: str, defines: Mapping[str, str] | None = None) -> dict[str, str]:
    """`typedef TYPE NAME;`, `using NAME = TYPE;` and `#define NAME TYPE` of the branches the file
    selects: NAME -> TYPE's words."""
    blanked, _, _ = _blank(source.encode("utf-8"))
    root = _parser().parse(blanked).root_node
    types: dict[str, str] = {}
    for item in _active(root, _Pre(defines or {})):
        if item.type in ("type_definition", "alias_declaration"):
            _typedef(item, types)
        elif item.type == "preproc_def":
            _type_macro(item, types)
    return types


def _type_macro(item, types: dict[str, str]) -> None:
    value = item.child_by_field_name("value")
    words = _text(value).split() if value is not None else []
    if words and " ".join(words) in CTYPES | PACKED:  # `#define floatX float`: a type
        types[_text(item.child_by_field_name("name"))] = " ".join(words)


INCLUDE_DEPTH = 8
INCLUDE_BYTES = 4 << 20  # a header larger than this is not read for its types


def included_types(source: str, folders: Sequence[Path], defines: Mapping[str, str] | None = None,
                   depth: int = INCLUDE_DEPTH, seen: set[Path] | None = None) -> dict[str, str]:
    """The types (typedefs, `using`, `#define NAME TYPE`) of the headers the source includes with
    `#include "..."`, each looked for in `folders` in order (the including file's folder first),
    and of the headers they include in turn; a header not found is skipped."""
    seen = set() if seen is None else seen
    types: dict[str, str] = {}
    if depth <= 0:
        return types
    root = _parser().parse(source.encode("utf-8")).root_node
    for node in _walk(root):
        if node.type != "preproc_include":
            continue
        path = node.child_by_field_name("path")
        if path is None or path.type != "string_literal":
            continue
        name = _text(path)[1:-1]
        for folder in folders:
            found = (Path(folder) / name)
            try:
                if not found.is_file() or found.stat().st_size > INCLUDE_BYTES:
                    continue
                found = found.resolve()
                if found in seen:
                    break
                seen.add(found)
                text = found.read_text(encoding="utf-8", errors="replace")
            except (OSError, ValueError):
                continue
            types.update(included_types(text, [found.parent, *folders], defines, depth - 1, seen))
            types.update(typedefs(text, defines))
            break
    return types


def parse_kernel(source: str, entry: str | None = None, where: str = "source",
                 defines: Mapping[str, str] | None = None, folders: Sequence[Path] = ()) -> KernelSignature:
    """The kernel named `entry` (plain, qualified or with its template arguments), or the first;
    the headers the source includes are looked for in `folders` for their types.

    A template kernel with no explicit instantiation is an error naming the instantiation to add."""
    kernels = parse_kernels(source, defines, folders)
    if not kernels:
        raise SignatureError(f"{where}: no __global__ or __kernel function found")
    chosen = kernels[0]
    if entry is not None:
        base = entry.split("<")[0].strip().lstrip(":")
        named = [k for k in kernels if k.name == base or k.qualified == base or k.qualified.endswith("::" + base)]
        if not named:
            raise SignatureError(f"{where}: no kernel named {entry!r} (found {', '.join(k.name for k in kernels)})")
        chosen = named[0]
        if "<" in entry:
            want = "".join(entry[entry.index("<"):].split())
            inst = [i for i in chosen.instantiations if "".join(i.text.split()) == want]
            if inst:
                chosen = replace(chosen, instantiations=(inst[0],) + tuple(
                    i for i in chosen.instantiations if i is not inst[0])).instantiate(inst[0])
            elif chosen.is_template and chosen.dialect == "cuda":
                chosen = _instantiation_for(chosen, entry, where)
    if chosen.is_template and not any(i.text for i in chosen.instantiations):
        raise SignatureError(f"{where}: kernel {chosen.name} is a template with no explicit instantiation; "
                             f"add one after it, e.g. `{_suggest(chosen)}`")
    return chosen


def _suggest(sig: KernelSignature) -> str:
    """An explicit instantiation of a template kernel, with float for every type parameter."""
    types = {p: "float" for p in sig.template_params}
    targs = ", ".join("float" if any(a.ctype == p for a in sig.args) else "/* value */"
                      for p in sig.template_params)
    params = ", ".join(("const " if a.const else "") + types.get(a.ctype, a.ctype) + (" *" if a.pointer else "")
                       for a in sig.args)
    return f"template __global__ void {sig.name}<{targs}>({params});"


# index arrays: integer inputs whose values index another buffer ---------------------------------

# Sizes whose name says they count the rows an index selects (vocabulary, classes, experts).
_ROW_COUNT_NAME = re.compile(r"^(v|n_?vocab\w*|vocab\w*|\w*_vocab(_size)?|num_embeddings|n_?classes|num_classes|"
                             r"n_?experts|num_experts)$", re.IGNORECASE)
_LOADS = ("__ldg", "__ldcs", "__ldca", "__ldcg", "__ldlu", "__ldcv")


@dataclass(frozen=True)
class IndexUse:
    """An integer input whose values index another buffer (`table[ids[t] * dim + c]`), and the size
    they stay under: from a comparison in the kernel (`id < vocab`) or a size's name (`vocab`)."""

    name: str
    indexes: str
    bound: str = ""
    why: str = ""  # how the bound was found, in words


def index_uses(sig: KernelSignature) -> dict[str, IndexUse]:
    """The kernel's index arrays, read from its body with tree-sitter: integer pointer arguments
    whose loaded values (directly, or through locals holding them) appear in another buffer's
    subscript."""
    ints = {a.name for a in sig.args if a.pointer and a.dtype in INTEGER_DTYPES}
    if not ints or not sig.body:
        return {}
    buffers = {a.name for a in sig.args if a.pointer}
    sizes = [a.name for a in sig.args if not a.pointer and a.dtype in INTEGER_DTYPES]
    root = _parser().parse(("void __kerntune_body() {" + sig.body + "}").encode("utf-8")).root_node
    nodes = list(_walk(root))
    carries: dict[str, str] = {}  # a local -> the index array whose loaded value it holds
    into: dict[str, str] = {}  # a local pointer -> the argument it points into (`ids + b * T`)

    def array(e) -> str:
        """The pointer argument an identifier is, or a local pointer into ("" when neither)."""
        if e is None or e.type != "identifier":
            return ""
        name = _text(e)
        return name if name in buffers else into.get(name, "")

    def source(e) -> str:
        """The index array whose value the expression is ("" when none)."""
        while e is not None:
            t = e.type
            if t == "subscript_expression":
                got = array(e.child_by_field_name("argument"))
                return got if got in ints else ""
            if t == "identifier":
                return carries.get(_text(e), "")
            if t == "cast_expression":
                e = e.child_by_field_name("value")
            elif t == "parenthesized_expression":
                e = e.named_children[-1] if e.named_children else None
            elif t == "pointer_expression" and _text(e.child_by_field_name("operator")) == "*":
                inner = e.child_by_field_name("argument")
                got = _pointer_into(inner, ints) or array(inner)
                return got if got in ints else ""
            elif t == "call_expression" and _callee(e.child_by_field_name("function")) in _LOADS + tuple(_CASTS):
                args = e.child_by_field_name("arguments").named_children
                if not args:
                    return ""
                if _callee(e.child_by_field_name("function")) in _LOADS:
                    return _pointer_into(args[0], ints)
                e = args[0]
            else:
                return ""
        return ""

    indexed: dict[str, str] = {}
    for _ in range(3):  # locals holding a loaded index, through a chain of assignments
        for n in nodes:
            if n.type == "init_declarator":
                name, pointer, _ = _declarator_name(n.child_by_field_name("declarator"))
                value = n.child_by_field_name("value")
                got = source(value)
                if name and not pointer and got:
                    carries[name] = got
                elif name and pointer and value is not None:
                    base = _pointer_into(value, buffers | set(into))
                    if base:
                        into[name] = into.get(base, base)
                        for sub in _walk(value):  # `table + ids[t] * C`: the index moves the pointer
                            idx = source(sub)
                            if idx and idx != into[name]:
                                indexed.setdefault(idx, into[name])
            elif n.type == "assignment_expression" and _text(n.child_by_field_name("operator")) == "=":
                left = n.child_by_field_name("left")
                got = source(n.child_by_field_name("right"))
                if left is not None and left.type == "identifier" and got:
                    carries[_text(left)] = got
    bounds: dict[str, str] = {}
    for n in nodes:
        if n.type == "subscript_expression":
            target = array(n.child_by_field_name("argument"))
            index = n.child_by_field_name("indices") or n.child_by_field_name("index")
            if target in buffers and index is not None:
                for sub in _walk(index):
                    got = source(sub)
                    if got and got != target:
                        indexed.setdefault(got, target)
        elif n.type == "binary_expression":
            op = _text(n.child_by_field_name("operator"))
            left, right = n.child_by_field_name("left"), n.child_by_field_name("right")
            for value, size, ops in ((left, right, ("<", ">=")), (right, left, (">", "<="))):
                if op in ops and size is not None and size.type == "identifier" and _text(size) in sizes:
                    got = source(value)
                    if got:
                        bounds.setdefault(got, _text(size))
    out = {}
    for name, target in indexed.items():
        if name in bounds:
            out[name] = IndexUse(name, target, bounds[name], f"the kernel compares them with {bounds[name]}")
            continue
        named = [s for s in sizes if _ROW_COUNT_NAME.match(s)]
        if len(named) == 1:
            out[name] = IndexUse(name, target, named[0], f"{named[0]}, by its name, counts {target}'s rows")
        else:
            out[name] = IndexUse(name, target)
    return out


def _pointer_into(e, names: set) -> str:
    """`&ids[t]` or `ids + t`: the named array the pointer points into ("" when none)."""
    if e is None:
        return ""
    if e.type == "pointer_expression" and _text(e.child_by_field_name("operator")) == "&":
        inner = e.child_by_field_name("argument")
        if inner is not None and inner.type == "subscript_expression":
            arg = inner.child_by_field_name("argument")
            return _text(arg) if arg is not None and _text(arg) in names else ""
    if e.type == "binary_expression" and _text(e.child_by_field_name("operator")) == "+":
        for side in (e.child_by_field_name("left"), e.child_by_field_name("right")):
            if side is not None and side.type == "identifier" and _text(side) in names:
                return _text(side)
    if e.type == "identifier" and _text(e) in names:
        return _text(e)
    return ""
