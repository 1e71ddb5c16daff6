"""Finding a kernel in a cubin by the name its author wrote.

A C++ `__global__` function is stored under its mangled name (`_ZN3ops4geluIfEEvPT_PKS1_i`), an
`extern "C"` one under its plain name. kerntune reads the cubin's symbol table (pyelftools): a
kernel is a function symbol marked as an entry point (STO_CUDA_ENTRY in `st_other`). Each name is
demangled by the C++ runtime's own demangler (`cxxfilt`, which calls `__cxa_demangle`), and the
demangled text is split into its qualified name, template arguments and parameter types. The
user's name matches a kernel by its plain name (`gelu`), its qualified name (`ops::gelu`), an
instantiation (`gelu<float>`, `ops::gelu<float>`), or its mangled symbol. Nothing here reads the
source.
"""

from __future__ import annotations

import functools
import io
from dataclasses import dataclass

from . import CompileError

# st_other bit nvcc sets on kernel entry points (cuobjdump shows it as STO_ENTRY)
STO_CUDA_ENTRY = 0x10


@dataclass(frozen=True)
class KernelSymbol:
    """One kernel of a cubin: its symbol and what the demangled name says."""

    symbol: str  # as stored; what the driver's module.get_function needs
    demangled: str  # the whole demangled text, or the symbol for an extern "C" kernel
    name: str  # qualified name without template arguments: "ops::gelu"
    template_args: str = ""  # "<float, 4>", or "" for a non-template
    params: str = ""  # "(float*, float const*, int)"

    @property
    def display(self) -> str:
        """How the kernel reads in a message and in `entry`: its name and its instantiation."""
        return self.name + self.template_args


def entry_symbols(cubin: bytes) -> list[str]:
    """The names of a cubin's kernel entry points, in symbol-table order."""
    try:
        from elftools.common.exceptions import ELFError
        from elftools.elf.elffile import ELFFile
    except ImportError as e:  # pragma: no cover - a dependency of kerntune
        raise CompileError(f"pyelftools is needed to read a cubin's kernels ({e})") from None
    try:
        elf = ELFFile(io.BytesIO(cubin))
        table = elf.get_section_by_name(".symtab")
        if table is None:
            return []
        raw = table.data()
        size = table["sh_entsize"] or (24 if elf.elfclass == 64 else 16)
        # st_other's offset in an Elf64_Sym is 5, in an Elf32_Sym 13
        other_at = 5 if elf.elfclass == 64 else 13
        names = []
        for i, sym in enumerate(table.iter_symbols()):
            if sym["st_info"]["type"] != "STT_FUNC" or not sym.name:
                continue
            if raw[i * size + other_at] & STO_CUDA_ENTRY:
                names.append(sym.name)
        return names
    except (ELFError, IndexError, ValueError) as e:
        raise CompileError(f"cannot read the cubin's symbol table: {e}") from None


@functools.lru_cache(maxsize=4096)
def demangle(symbol: str) -> str:
    """The demangled form of an Itanium C++ name; a plain (extern "C") name as it is."""
    if not symbol.startswith("_Z"):
        return symbol
    try:
        import cxxfilt
    except ImportError as e:  # pragma: no cover - a dependency of kerntune
        raise CompileError(f"cxxfilt is needed to read C++ kernel names ({e})") from None
    try:
        return cxxfilt.demangle(symbol)
    except cxxfilt.Error:  # not a valid C++ name after all, or no C++ runtime to demangle with
        return symbol


def _close(text: str, end: int, open_: str, close: str) -> int:
    """Scanning back from the `close` bracket at `end`, the index of the bracket that opens it."""
    depth = 0
    for i in range(end, -1, -1):
        if text[i] == close:
            depth += 1
        elif text[i] == open_:
            depth -= 1
            if depth == 0:
                return i
    return -1


def split_demangled(symbol: str, text: str) -> KernelSymbol:
    """A demangled function name split into name, template arguments and parameter types.

    `void ops::gelu<float, 4>(float*, float const*, int)` has the qualified name `ops::gelu`,
    the template arguments `<float, 4>` and the parameters `(float*, float const*, int)`; a
    template function's demangled name starts with its return type, which is dropped.
    """
    head, params = text, ""
    if text.endswith(")"):
        start = _close(text, len(text) - 1, "(", ")")
        if start > 0:
            head, params = text[:start], text[start:]
    targs = ""
    if head.endswith(">"):
        start = _close(head, len(head) - 1, "<", ">")
        if start > 0:
            head, targs = head[:start], head[start:]
    # the return type, before the last space outside brackets ("(anonymous namespace)" has one)
    depth, cut = 0, -1
    for i, c in enumerate(head):
        if c in "(<":
            depth += 1
        elif c in ")>":
            depth -= 1
        elif c == " " and depth == 0:
            cut = i
    return KernelSymbol(symbol, text, head[cut + 1:], targs, params)


def kernels(cubin: bytes) -> list[KernelSymbol]:
    """Every kernel of a cubin, its name demangled and split."""
    return [split_demangled(s, demangle(s)) for s in entry_symbols(cubin)]


def _squash(text: str) -> str:
    return "".join(text.split())


def matches(kernel: KernelSymbol, wanted: str) -> bool:
    """Whether the name a user wrote designates this kernel (see the module's note)."""
    w = wanted.strip()
    if w == kernel.symbol or _squash(w) == _squash(kernel.demangled):
        return True
    name, targs = w, ""
    if w.endswith(">"):
        start = _close(w, len(w) - 1, "<", ">")
        if start > 0:
            name, targs = w[:start], w[start:]
    name = name.strip()
    if name.startswith("::"):
        name = name[2:]
    same_name = kernel.name == name or kernel.name.endswith("::" + name)
    return same_name and (not targs or _same_arguments(targs, kernel.template_args))


def _arguments(targs: str) -> list[str]:
    """A template's arguments `<float, 4>` as they stand between its top-level commas, squashed."""
    inner, out, depth, start = _squash(targs)[1:-1], [], 0, 0
    for i, c in enumerate(inner):
        if c in "<([":
            depth += 1
        elif c in ">)]":
            depth -= 1
        elif c == "," and depth == 0:
            out.append(inner[start:i])
            start = i + 1
    return out + [inner[start:]] if inner else out


def _number(arg: str) -> int | None:
    """An integer template argument's value as the demangler may write it (`32u`, `4l`,
    `(unsigned char)3`, `0x10`); None for a type or anything else."""
    if arg.startswith("(") and ")" in arg:
        arg = arg[arg.index(")") + 1:]  # the demangler's cast to a narrow type
    negative = arg.startswith("-")
    digits = arg.lstrip("-").rstrip("uUlL")
    try:
        value = int(digits, 0)
    except ValueError:
        return None
    return -value if negative else value


def _same_arguments(wanted: str, found: str) -> bool:
    """Whether the template arguments written in `entry` are the instantiation's: a number the
    same number however the demangler spells its type (`<32>` is the `<32u>` of an unsigned
    parameter), anything else the same text."""
    a, b = _arguments(wanted), _arguments(found)
    return len(a) == len(b) and all(
        x == y or (_number(x) is not None and _number(x) == _number(y)) for x, y in zip(a, b))


def _listing(found: list[KernelSymbol]) -> str:
    """Kernels by name, sorted; overloads of one name with their parameter types."""
    names = [k.display for k in found]
    return ", ".join(sorted(k.display + (k.params if names.count(k.display) > 1 else "") for k in found))


def resolve(found: list[KernelSymbol], wanted: str) -> KernelSymbol:
    """The one kernel `wanted` names; CompileError (one line) listing the kernels otherwise."""
    chosen = [k for k in found if matches(k, wanted)]
    if len(chosen) == 1:
        return chosen[0]
    if len(chosen) > 1:
        # `gelu` is also an exact plain name beside `ops::gelu`: the exact one wins
        exact = [k for k in chosen if k.name == wanted.strip() and not k.template_args]
        if len(exact) == 1:
            return exact[0]
        raise CompileError(
            f"{wanted!r} names {len(chosen)} kernels: {_listing(chosen)}; "
            "set [kernel] entry to one of them")
    if not found:
        raise CompileError(
            f"the program has no kernel named {wanted!r}: it defines no __global__ function "
            "(a template kernel needs an explicit instantiation, e.g. "
            f"`template __global__ void {wanted.split('<')[0]}<float>(...);`)")
    raise CompileError(f"the program has no kernel named {wanted!r}; it has "
                       f"{_listing(found)}")


def resolve_entry(cubin: bytes, wanted: str) -> KernelSymbol:
    """The kernel of a cubin that `wanted` names, by reading the cubin's own symbols."""
    return resolve(kernels(cubin), wanted)
