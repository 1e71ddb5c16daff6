"""The launches a CUDA file makes of its kernels: `kernel<<<grid, block>>>(args)` in host code.

C++'s grammar does not know the triple chevrons; the signature reader blanks each launch's
`<<<...>>>` (offsets kept) so that the call parses as a call, and keeps what it held here. For
`kerntune init`, a launch is read back into the spec's [launch] over the kernel's own scalar
arguments: the grid and block expressions, with the launching function's local constants
(`const int block_size = 128;`), the file's integer #defines and the host variables passed to the
kernel (by position: `gelu<<<g, b>>>(out, inp, N)` reads the host's `N` as the kernel's third
argument) put in, `CEIL_DIV(a, b)` and its spellings as `ceil_div(a, b)`, C's integer `/` as `//`.
Nothing is evaluated: what cannot be expressed over the problem names is left for the user, with
the launch as the file wrote it beside it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .cxx import CTYPES, LAUNCH, PACKED

_TOKEN = re.compile(r"[A-Za-z_]\w*(?:::\w+)*|\d+[uUlL]*|<<|>>|\S")
CEIL_DIVS = {"ceil_div", "CEIL_DIV", "cdiv", "CDIV", "div_up", "DIV_UP", "DIVUP", "divUp", "iDivUp", "ceildiv",
             "CeilDiv", "ceilDiv", "DIV_ROUND_UP", "div_round_up", "cuda::ceil_div"}
FUNCTIONS = {"ceil_div", "min", "max"}
MINMAX = {f"{scope}{name}": name.lower() for scope in ("", "std::", "cuda::std::", "::")
          for name in ("min", "max", "MIN", "MAX")}


@dataclass(frozen=True)
class HostLaunch:
    """One `<<<...>>>` launch of a kernel, as the file wrote it, with what its expressions read."""

    callee: str  # the kernel's plain name
    config: tuple[str, ...]  # grid, block[, shared bytes[, stream]] as written
    args: tuple[str, ...]  # the call's arguments as written
    line: int
    locals: dict[str, str] = field(default_factory=dict)  # the launching function's `name = value` before it
    macros: dict[str, str] = field(default_factory=dict)  # the file's object-like #defines

    def written(self) -> str:
        return f"<<<{', '.join(self.config)}>>>"


def split_top(text: str) -> list[str]:
    """Comma-separated parts at the top level of brackets."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch in "([{<" and ch != "<":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur.strip())
    return parts


def dims(expr: str, launch: HostLaunch) -> list[str]:
    """A grid or block expression's dimensions: `dim3(a, b)` (directly, or a local made so) gives
    two, anything else one."""
    e = expr.strip()
    for _ in range(4):
        if re.fullmatch(r"[A-Za-z_]\w*", e) and e in launch.locals:
            e = launch.locals[e].strip()
        else:
            break
    m = re.fullmatch(r"(?:dim3)?\s*[({]\s*(.*?)\s*[)}]", e, re.DOTALL) if e.startswith(("dim3", "{")) else None
    if m is not None:
        got = split_top(m.group(1))
        while len(got) > 1 and got[-1].strip() in ("1", "1u", "1U"):
            got.pop()
        return got
    return [e]


def over_problem(expr: str, launch: HostLaunch, params: list[str], problem_names: set[str]) -> str | None:
    """`expr` over the problem names, or None when it reads anything else."""
    by_position = {a.strip(): p for a, p in zip(launch.args, params) if re.fullmatch(r"[A-Za-z_]\w*", a.strip())}
    text = _SIZEOF.sub(_sizeof, expr)
    for _ in range(6):  # locals and macros, a few levels deep
        tokens = _TOKEN.findall(text)
        changed = False
        out = []
        for t in tokens:
            if t in problem_names or t in FUNCTIONS or t in MINMAX or t in CEIL_DIVS:
                out.append(t)
            elif t in launch.locals and launch.locals[t].strip() != t and t not in by_position:
                out.append(f"({launch.locals[t]})")
                changed = True
            elif t in by_position:
                out.append(by_position[t])
                changed = changed or by_position[t] != t
            elif t in launch.macros and launch.macros[t].strip() and launch.macros[t].strip() != t:
                out.append(f"({launch.macros[t]})")
                changed = True
            else:
                out.append(t)
        text = " ".join(out)
        if not changed:
            break
    tokens = _TOKEN.findall(text)
    result = []
    for t in tokens:
        if t in CEIL_DIVS:
            result.append("ceil_div")
        elif t in MINMAX:
            result.append(MINMAX[t])
        elif re.fullmatch(r"\d+[uUlL]*", t):
            result.append(t.rstrip("uUlL"))
        elif t in ("static_cast", "int", "unsigned", "size_t", "long"):
            return None  # a cast: left for the user
        elif t == "/":
            result.append("//")
        elif re.fullmatch(r"[A-Za-z_]\w*(?:::\w+)*", t):
            if t not in problem_names and t not in FUNCTIONS and t != "ceil_div":
                return None
            result.append(t)
        elif t in ("<<", ">>") or t in "+-*%(),":
            result.append(t)
        else:
            return None
    return _tidy(" ".join(result))


_SIZEOF = re.compile(r"sizeof\s*\(\s*([A-Za-z_][\w ]*?)\s*\)")


def _sizeof(m: re.Match) -> str:
    """`sizeof(float)` as 4: the element types the signature reader knows; as written otherwise."""
    from .template import DTYPES

    words = " ".join(w for w in m.group(1).split() if w not in ("const", "volatile"))
    if words in CTYPES:
        return str(DTYPES[CTYPES[words]])
    if words in PACKED:
        return str(DTYPES[PACKED[words][0]] * PACKED[words][1])
    return m.group(0)


def _tidy(text: str) -> str:
    """Spacing as people write it, redundant parentheses around a name or number dropped."""
    text = re.sub(r"\(\s*([A-Za-z_]\w*|\d+)\s*\)", r"\1", text)
    text = re.sub(r"\s*,\s*", ", ", text)
    text = re.sub(r"\(\s+", "(", text)
    text = re.sub(r"\s+\)", ")", text)
    text = re.sub(r"(\w)\s+\(", r"\1(", text)
    text = re.sub(r"\s+", " ", text).strip()
    while text.startswith("(") and text.endswith(")") and _balanced(text[1:-1]):
        text = text[1:-1].strip()
    return text


def _balanced(text: str) -> bool:
    depth = 0
    for ch in text:
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth < 0:
            return False
    return depth == 0
