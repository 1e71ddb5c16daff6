"""Kernel signatures: a small C declaration parser of our own.

It reads a CUDA `__global__` or OpenCL `__kernel` function from source text — nothing is compiled
or run — and tells, for each argument, its type, whether it is a pointer, whether what it points
to is const, and whether the body writes or reads through it (directly or through a local pointer
made from it: `half8 *o = reinterpret_cast<half8 *>(out + t * d); o[i] = r;` writes `out`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from .template import TemplateError

# Element types that map to kerntune dtypes; the keys are the type's words, qualifiers removed.
CTYPES = {
    "half": "float16", "__half": "float16", "_Float16": "float16", "__fp16": "float16",
    "__nv_bfloat16": "bfloat16", "nv_bfloat16": "bfloat16", "__bf16": "bfloat16",
    "float": "float32", "double": "float64",
    "int": "int32", "signed": "int32", "signed int": "int32", "int32_t": "int32",
    "unsigned": "uint32", "unsigned int": "uint32", "uint": "uint32", "uint32_t": "uint32",
    "long": "int64", "long int": "int64", "long long": "int64", "long long int": "int64", "int64_t": "int64",
    "unsigned long": "uint64", "unsigned long int": "uint64", "unsigned long long": "uint64", "ulong": "uint64",
    "size_t": "uint64", "uint64_t": "uint64",
    "short": "int16", "short int": "int16", "int16_t": "int16",
    "char": "int8", "signed char": "int8", "int8_t": "int8",
    "unsigned char": "uint8", "uchar": "uint8", "uint8_t": "uint8",
}
INTEGER_DTYPES = ("int8", "uint8", "int16", "int32", "uint32", "int64", "uint64")
QUALIFIERS = {"const", "volatile", "__restrict__", "__restrict", "restrict", "__global", "global",
              "__constant", "constant", "__private", "private", "struct", "__grid_constant__"}
_ATTRIBUTES = {"__launch_bounds__", "__attribute__", "__declspec", "__maxnreg__", "__cluster_dims__"}
_NOT_NAMES = {"void", "extern", "static", "inline", "__inline__", "__forceinline__", "__noinline__",
              "__device__", "__host__", "__kernel", "kernel", "__global__", "__global", "template"}


class SignatureError(TemplateError):
    """No kernel, or a declaration this parser cannot read; the message is one line."""


@dataclass(frozen=True)
class KernelArg:
    """One declared argument and what the body does with it."""

    name: str
    ctype: str  # the element type's words, qualifiers removed ("__half", "unsigned int")
    pointer: bool
    const: bool  # the pointee is const (or in OpenCL's __constant space)
    written: bool = False
    read: bool = False
    local: bool = False  # an OpenCL __local pointer: workspace, not a buffer

    @property
    def dtype(self) -> str | None:
        return CTYPES.get(self.ctype)

    @property
    def role(self) -> str:
        """scalar, input, output (written, never read) or inout (written and read)."""
        if not self.pointer:
            return "scalar"
        if self.const or not self.written:
            return "input"
        return "inout" if self.read else "output"


@dataclass(frozen=True)
class KernelSignature:
    """A kernel function: its name, dialect, arguments, launch hint and body text."""

    name: str
    dialect: str  # "cuda" or "opencl"
    args: tuple[KernelArg, ...]
    block_hint: tuple[int, ...] = ()  # from __launch_bounds__(N) or reqd_work_group_size(x, y, z)
    body: str = ""

    def arg(self, name: str) -> KernelArg:
        for a in self.args:
            if a.name == name:
                return a
        raise KeyError(name)


def strip_code(source: str) -> str:
    """Comments, string and character literals and preprocessor lines blanked out (line breaks kept)."""
    out: list[str] = []
    i, n = 0, len(source)
    line_start = True
    while i < n:
        c = source[i]
        if line_start and c in " \t":
            out.append(c)
            i += 1
            continue
        if line_start and c == "#":  # a directive, with its continuation lines
            j = i
            while j < n:
                k = source.find("\n", j)
                if k < 0:
                    k = n
                if k > 0 and source[k - 1] == "\\" and k < n:
                    j = k + 1
                    continue
                break
            out.append(re.sub(r"[^\n]", " ", source[i:k]))
            i = k
            continue
        line_start = c == "\n"
        if source.startswith("//", i):
            k = source.find("\n", i)
            k = n if k < 0 else k
            out.append(" " * (k - i))
            i = k
        elif source.startswith("/*", i):
            k = source.find("*/", i + 2)
            k = n if k < 0 else k + 2
            out.append(re.sub(r"[^\n]", " ", source[i:k]))
            i = k
        elif c in "\"'":
            j = i + 1
            while j < n and source[j] != c and source[j] != "\n":
                j += 2 if source[j] == "\\" else 1
            out.append(c + " " * max(j - i - 1, 0) + (c if j < n else ""))
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _matching(text: str, start: int, open_: str = "(", close: str = ")") -> int:
    """The index of the bracket closing the one at `start` (-1 if unbalanced)."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == open_:
            depth += 1
        elif text[i] == close:
            depth -= 1
            if depth == 0:
                return i
    return -1


def parse_kernels(source: str) -> list[KernelSignature]:
    """Every kernel defined in the source, in order; argument types named through a typedef are
    given as the type it names (as compiled with no -D options)."""
    text = strip_code(source)
    names = typedefs(source)
    kernels = []
    for m in re.finditer(r"\b(__global__|__kernel|kernel)\b", text):
        dialect = "cuda" if m.group(1) == "__global__" else "opencl"
        sig = _parse_at(text, m.end(), dialect)
        if sig is not None:
            if names:
                sig = replace(sig, args=tuple(replace(a, ctype=names.get(a.ctype, a.ctype)) for a in sig.args))
            kernels.append(sig)
    return kernels


_DIRECTIVE = re.compile(r"#\s*(ifdef|ifndef|if|elif|else|endif|define|undef)\b\s*(.*)")


def _if_value(expr: str, defined: set[str]) -> bool:
    """An #if condition over `defined(X)` and 0/1; anything else counts as true."""
    e = re.sub(r"defined\s*\(?\s*(\w+)\s*\)?", lambda m: "1" if m.group(1) in defined else "0", expr)
    e = e.split("//")[0].strip()
    m = re.fullmatch(r"(!?)\s*([01])", e)
    if m:
        return (m.group(2) == "1") != bool(m.group(1))
    return True


def active_lines(source: str) -> list[str]:
    """The lines the preprocessor keeps with no -D options: #ifdef, #ifndef, #if defined(...),
    #elif, #else and #endif over the macros the file defines itself. Nothing is evaluated."""
    defined: set[str] = set()
    stack: list[tuple[bool, bool]] = []  # (enclosing group active, a branch already taken)
    active, out = True, []
    for line in source.splitlines():
        m = _DIRECTIVE.match(line.strip())
        if not m:
            if active:
                out.append(line)
            continue
        d, rest = m.group(1), m.group(2).strip()
        word = rest.split("(")[0].split()[0] if rest.split() else ""
        if d in ("ifdef", "ifndef", "if"):
            cond = (word in defined if d == "ifdef" else word not in defined if d == "ifndef"
                    else _if_value(rest, defined))
            stack.append((active, cond))
            active = active and cond
        elif d == "elif" and stack:
            parent, taken = stack[-1]
            cond = not taken and _if_value(rest, defined)
            stack[-1] = (parent, taken or cond)
            active = parent and cond
        elif d == "else" and stack:
            parent, taken = stack[-1]
            stack[-1] = (parent, True)
            active = parent and not taken
        elif d == "endif" and stack:
            active = stack.pop()[0]
        elif active and d == "define" and word:
            defined.add(word)
        elif active and d == "undef":
            defined.discard(word)
    return out


def typedefs(source: str) -> dict[str, str]:
    """`typedef TYPE NAME;` of the active source: NAME -> TYPE's words, chains followed."""
    text = strip_code("\n".join(active_lines(source)))
    found: dict[str, str] = {}
    for m in re.finditer(r"\btypedef\s+([A-Za-z_][\w\s]*?)\s+([A-Za-z_]\w*)\s*;", text):
        words = [w for w in m.group(1).split() if w not in QUALIFIERS]
        if words:
            found[m.group(2)] = " ".join(words)
    for _ in range(8):  # typedefs of typedefs
        found = {k: found.get(v, v) for k, v in found.items()}
    return found


def parse_kernel(source: str, entry: str | None = None, where: str = "source") -> KernelSignature:
    """The kernel named `entry`, or the only (first) kernel of the source."""
    kernels = parse_kernels(source)
    if not kernels:
        raise SignatureError(f"{where}: no __global__ or __kernel function found")
    if entry is None:
        return kernels[0]
    for k in kernels:
        if k.name == entry:
            return k
    raise SignatureError(f"{where}: no kernel named {entry!r} (found {', '.join(k.name for k in kernels)})")


def _parse_at(text: str, pos: int, dialect: str) -> KernelSignature | None:
    hint: tuple[int, ...] = ()
    ident = re.compile(r"\s*([A-Za-z_]\w*|[^\sA-Za-z_])")
    i = pos
    name = None
    while i < len(text):
        m = ident.match(text, i)
        if m is None:
            return None
        tok = m.group(1)
        i = m.end()
        if tok in _ATTRIBUTES:
            j = text.find("(", i)
            k = _matching(text, j) if j >= 0 else -1
            if k < 0:
                return None
            inner = text[j + 1:k]
            nums = re.search(r"reqd_work_group_size\s*\(\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)", inner)
            if nums:
                hint = tuple(int(x) for x in nums.groups())
            elif tok == "__launch_bounds__":
                first = inner.split(",")[0].strip()
                if first.isdigit():
                    hint = (int(first),)
            i = k + 1
            continue
        if tok in ("{", ";", "}", "="):
            return None  # not a function definition (a declaration, or `kernel` used as a word)
        if re.match(r"[A-Za-z_]", tok) and tok not in _NOT_NAMES and re.match(r"\s*\(", text[i:]):
            name = tok
            break
    if name is None:
        return None
    j = text.find("(", i)
    k = _matching(text, j)
    if k < 0:
        raise SignatureError(f"kernel {name}: unbalanced parentheses in its argument list")
    body_start = re.compile(r"\s*(\{|;)").match(text, k + 1)
    if body_start is None or body_start.group(1) != "{":
        return None  # a prototype
    b = body_start.end() - 1
    e = _matching(text, b, "{", "}")
    if e < 0:
        raise SignatureError(f"kernel {name}: unbalanced braces in its body")
    body = text[b + 1:e]
    args = [_parse_arg(p, name) for p in _split_params(text[j + 1:k])]
    args = _analyse(args, body, dialect)
    return KernelSignature(name, dialect, tuple(args), hint, body)


def _split_params(text: str) -> list[str]:
    parts, depth, cur = [], 0, []
    for c in text:
        if c in "(<[":
            depth += 1
        elif c in ")>]":
            depth -= 1
        if c == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    last = "".join(cur).strip()
    if last and last != "void":
        parts.append(last)
    return [p.strip() for p in parts if p.strip()]


def _parse_arg(text: str, kernel: str) -> KernelArg:
    tokens = re.findall(r"[A-Za-z_]\w*|\*|\[|&", text)
    words = [t for t in tokens if re.match(r"[A-Za-z_]", t)]
    if not words:
        raise SignatureError(f"kernel {kernel}: cannot read the argument `{text}`")
    name = words[-1]
    pointer = "*" in tokens or "[" in tokens
    first_star = tokens.index("*") if "*" in tokens else len(tokens)
    before = tokens[:first_star]
    const = "const" in before or "__constant" in before or "constant" in before
    local = "__local" in tokens or "local" in tokens
    type_words = [w for w in words[:-1] if w not in QUALIFIERS and w not in ("__local", "local")]
    if not type_words:
        raise SignatureError(f"kernel {kernel}: the argument `{text}` has no type")
    return KernelArg(name, " ".join(type_words), pointer, const, local=local)


_ASSIGN = re.compile(r"\s*(?:(?:[-+*/%&|^]|<<|>>)=|=(?!=)|\+\+|--)")


def _analyse(args: list[KernelArg], body: str, dialect: str) -> list[KernelArg]:
    """Which pointer arguments the body writes and reads, through themselves or local aliases."""
    names = {a.name: {a.name} for a in args if a.pointer}
    # local pointers made from an argument: `T *p = ...arg...;` (also `auto p = ...`)
    decls = [(m.group(1), m.group(2)) for m in re.finditer(
        r"(?=(?:\*\s*(?:(?:__restrict__|__restrict|restrict|const)\s*)*|\bauto\s+)([A-Za-z_]\w*)\s*=(?!=)([^;]*))",
        body)]
    changed = True
    while changed:
        changed = False
        for alias, rhs in decls:
            for arg, group in names.items():
                if alias not in group and any(re.search(rf"\b{re.escape(g)}\b", rhs) for g in group):
                    group.add(alias)
                    changed = True
    out = []
    for a in args:
        if not a.pointer:
            out.append(a)
            continue
        w = r = False
        for n in names[a.name]:
            nw, nr = _uses(body, n)
            w, r = w or nw, r or nr
        out.append(KernelArg(a.name, a.ctype, a.pointer, a.const, w, r, a.local))
    return out


def _uses(body: str, n: str) -> tuple[bool, bool]:
    """(written, read) through the pointer named n."""
    written = read = False
    word = re.escape(n)
    for m in re.finditer(rf"(?<![\w.>])(?:{word}\s*\[|\*\s*\(\s*{word}\b|\*\s*{word}\b)", body):
        start = m.start()
        if body[start] == "*":
            # unary only: `a * b` is a product
            prev = body[:start].rstrip()[-1:] if body[:start].strip() else ""
            if prev and (prev.isalnum() or prev in "_)]"):
                continue
            if body[m.end() - 1] == "(" or m.group(0).replace(" ", "").startswith("*("):
                j = body.find("(", start)
                end = _matching(body, j)
            else:
                end = m.end() - 1
        else:
            j = body.find("[", start)
            end = _matching(body, j, "[", "]")
        if end < 0:
            continue
        follow = _ASSIGN.match(body, end + 1)
        if follow is not None:
            written = True
            if follow.group(0).strip() not in ("=",):
                read = True  # +=, ++: a read as well
        else:
            read = True
    for call in re.finditer(r"\b(vstore\w*|vload\w*|__st\w+|__ld\w+|atomic\w*|atom_\w+)\s*\(", body):
        j = body.find("(", call.start())
        k = _matching(body, j)
        if k < 0:
            continue
        args = _split_params(body[j + 1:k])
        if not args:
            continue
        fn = call.group(1)
        # OpenCL's vload/vstore take the pointer last, CUDA's __ld/__st and atomics first
        target = args[-1] if fn.startswith(("vstore", "vload")) else args[0]
        if not re.search(rf"\b{word}\b", target):
            continue
        if fn.startswith(("vstore", "__st")):
            written = True
        elif fn.startswith(("vload", "__ld")):
            read = True
        else:
            written = read = True
    return written, read
