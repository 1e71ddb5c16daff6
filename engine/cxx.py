"""C and C++ syntax for kernels: tree-sitter's C++ grammar, with the CUDA and OpenCL words blanked.

What every reader of kernel source shares (engine/signature.py for arguments and roles,
agents/model.py for the kernel model the rules' passes work on): the parser, the words each
dialect adds to C++ and how they are blanked before the parse that is read (byte offsets are
kept, so a node's span is a span of the source as written), the element types kerntune knows,
and small helpers over syntax nodes (a node's text, a call's callee, the first parse error).
Nothing here compiles or runs code.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Iterator


LAUNCH = re.compile(rb"<<<([^;]*?)>>>")  # a host launch's chevrons, within one statement

# Element types that map to kerntune dtypes; the keys are the type's words, qualifiers removed.
CTYPES = {
    "half": "float16", "__half": "float16", "_Float16": "float16", "__fp16": "float16",
    "__nv_bfloat16": "bfloat16", "nv_bfloat16": "bfloat16", "__bf16": "bfloat16",
    "float": "float32", "double": "float64",
    "int": "int32", "signed": "int32", "signed int": "int32", "int32_t": "int32",
    "unsigned": "uint32", "unsigned int": "uint32", "uint": "uint32", "uint32_t": "uint32",
    "long": "int64", "long int": "int64", "long long": "int64", "long long int": "int64", "int64_t": "int64",
    "unsigned long": "uint64", "unsigned long int": "uint64", "unsigned long long": "uint64", "ulong": "uint64",
    "unsigned long long int": "uint64", "size_t": "uint64", "uint64_t": "uint64",
    "short": "int16", "short int": "int16", "int16_t": "int16",
    "char": "int8", "signed char": "int8", "int8_t": "int8",
    "unsigned char": "uint8", "uchar": "uint8", "uint8_t": "uint8",
}
# Packed vector types: the dtype of their elements and how many one holds. A buffer of them is
# described in elements (a `__nv_bfloat162 *` of n pairs is 2n bfloat16).
PACKED = {
    "float2": ("float32", 2), "float4": ("float32", 4), "double2": ("float64", 2),
    "__half2": ("float16", 2), "half2": ("float16", 2),
    "__nv_bfloat162": ("bfloat16", 2), "nv_bfloat162": ("bfloat16", 2),
    "int2": ("int32", 2), "int4": ("int32", 4),
}

QUALIFIERS = {"const", "volatile", "__restrict__", "__restrict", "restrict", "struct", "typename",
              "signed_", "constexpr", "std"}

# CUDA and OpenCL words C++ does not know, blanked before the parse that is read
CUDA_WORDS = {"__global__", "__device__", "__host__", "__forceinline__", "__noinline__", "__shared__",
               "__constant__", "__managed__", "__grid_constant__", "__inline__"}
OPENCL_WORDS = {"__kernel", "kernel", "__global", "global", "__local", "local", "__constant", "constant",
                 "__private", "private", "__read_only", "read_only", "__write_only", "write_only"}
WITH_PARENS = {"__launch_bounds__", "__cluster_dims__", "__maxnreg__", "__attribute__", "__declspec",
                "__align__", "__builtin_align__",
                "KERNTUNE_PRAGMA"}  # the rules' own `#pragma unroll N` through _Pragma (agents/lift.py)
KERNEL_WORDS = {"__global__", "__kernel", "kernel"}
LOCAL_WORDS = {"__local", "local"}
CONSTANT_WORDS = {"__constant", "constant"}

SKIPPED = {"comment", "string_literal", "raw_string_literal", "char_literal", "system_lib_string"}



@functools.lru_cache(maxsize=1)
def parser():
    try:
        import tree_sitter_cpp
        from tree_sitter import Language, Parser
    except ImportError as e:  # pragma: no cover - a dependency of kerntune
        # (a dependency of kerntune's; no error of ours, so that engine/template.py can read includes)
        raise ImportError(f"tree-sitter and tree-sitter-cpp are needed to read kernels ({e})") from None
    return Parser(Language(tree_sitter_cpp.language()))


def leaves(node) -> Iterator:
    """The tokens under a node in order, comments and literals' insides left out."""
    return (n for n in code_nodes(node) if n.child_count == 0)


@dataclass
class Marks:
    """What the blanked words said, by byte offset."""

    kernels: list[int] = field(default_factory=list)  # offsets of __global__ / __kernel
    local: list[int] = field(default_factory=list)
    constant: list[int] = field(default_factory=list)
    shared: list[int] = field(default_factory=list)  # offsets of __shared__
    cuda_constant: list[int] = field(default_factory=list)  # offsets of __constant__
    hints: list[tuple[int, tuple[int, ...]]] = field(default_factory=list)
    launches: list[tuple[int, int, str]] = field(default_factory=list)  # `<<<...>>>`: start, end, what it holds
    text: bytes = b""  # the blanked source

    def head(self, node) -> int:
        """Where a node's text starts once the blanked words before it are counted in."""
        start = node.start_byte
        while start > 0 and self.text[start - 1:start].isspace():
            start -= 1
        return start



def int_literal(text: str) -> int | None:
    """An integer literal's value (`256`, `0x100`, `256u`); None for anything else."""
    t = text.rstrip("uUlL")
    try:
        return int(t, 0)
    except ValueError:
        return None


@functools.lru_cache(maxsize=64)
def blank(src: bytes) -> tuple[bytes, str, Marks]:
    """The source with the CUDA and OpenCL words blanked (offsets kept), its dialect and marks
    (one source is read by every pass and analysis in turn: kept, and never changed by a caller)."""
    tree = parser().parse(src)
    toks = [l for l in leaves(tree.root_node) if l.type not in ("preproc_arg",)]
    words = [l.text.decode("utf-8", "replace") for l in toks]
    cuda = "__global__" in words
    opencl = not cuda and ("__kernel" in words or any(
        w == "kernel" and i + 1 < len(words) and words[i + 1] in ("void", "__attribute__")
        for i, w in enumerate(words)))
    known = CUDA_WORDS | (OPENCL_WORDS if opencl else set())  # `kernel` is a C++ name in CUDA
    out = bytearray(src)
    marks = Marks()
    i = 0
    while i < len(toks):
        leaf, w = toks[i], words[i]
        if w in WITH_PARENS and i + 1 < len(toks) and words[i + 1] == "(":
            depth, j = 0, i + 1
            while j < len(toks):
                depth += {"(": 1, ")": -1}.get(words[j], 0)
                if depth == 0:
                    break
                j += 1
            inner = words[i + 2:j]
            hint: tuple[int, ...] = ()
            if "reqd_work_group_size" in inner:
                k = inner.index("reqd_work_group_size")
                nums = [int_literal(t) for t in inner[k + 2:k + 7:2]]
                if len(nums) == 3 and all(n is not None for n in nums):
                    hint = tuple(nums)  # type: ignore[arg-type]
            elif w == "__launch_bounds__" and inner and int_literal(inner[0]) is not None and (
                    len(inner) == 1 or inner[1] == ","):
                hint = (int_literal(inner[0]),)  # type: ignore[assignment]
            if hint:
                marks.hints.append((leaf.start_byte, hint))
            end = toks[min(j, len(toks) - 1)].end_byte
            out[leaf.start_byte:end] = b" " * (end - leaf.start_byte)
            i = j + 1
            continue
        if w in known:
            if w in KERNEL_WORDS:
                marks.kernels.append(leaf.start_byte)
            elif w in LOCAL_WORDS:
                marks.local.append(leaf.start_byte)
            elif w in CONSTANT_WORDS:
                marks.constant.append(leaf.start_byte)
            elif w == "__shared__":
                marks.shared.append(leaf.start_byte)
            elif w == "__constant__":
                marks.cuda_constant.append(leaf.start_byte)
            out[leaf.start_byte:leaf.end_byte] = b" " * (leaf.end_byte - leaf.start_byte)
        i += 1
    for m in LAUNCH.finditer(src):  # host code's `kernel<<<grid, block>>>(...)`: parsed as a call
        marks.launches.append((m.start(), m.end(), m.group(1).decode("utf-8", "replace")))
        out[m.start():m.end()] = b" " * (m.end() - m.start())
    marks.text = bytes(out)
    return marks.text, ("opencl" if opencl else "cuda"), marks


def text(node) -> str:
    return node.text.decode("utf-8", "replace") if node is not None else ""


def type_words(node) -> str:
    """A type node's words, qualifiers removed: `const unsigned int` -> `unsigned int`."""
    if node is None:
        return ""
    if node.type == "qualified_identifier":
        return type_words(node.child_by_field_name("name"))
    if node.type == "template_type":
        return " ".join(text(node).split())
    parts = text(node).replace("*", " ").replace("&", " ").split()
    return " ".join(p for p in parts if p not in QUALIFIERS)



def callee(fn) -> str:
    """The plain name of the function a call calls (`v.store`, `ns::f<T>` and `f` give store, f, f)."""
    while fn is not None:
        t = fn.type
        if t in ("identifier", "field_identifier", "type_identifier"):
            return text(fn)
        if t == "field_expression":
            fn = fn.child_by_field_name("field")
        elif t in ("qualified_identifier", "template_function", "template_method"):
            fn = fn.child_by_field_name("name")
        elif t == "parenthesized_expression":
            fn = fn.named_children[0] if fn.named_children else None
        else:
            return ""
    return ""



def first_error(node):
    stack = [node]
    while stack:
        n = stack.pop()
        if n.type == "ERROR" or n.is_missing:
            return n
        if n.has_error:
            stack.extend(reversed(n.children))
    return None



def code_nodes(node) -> Iterator:
    """Every node under a node (itself first) in source order, comments and literals left out."""
    stack = [node]
    while stack:
        n = stack.pop()
        if n.type in SKIPPED:
            continue
        yield n
        stack.extend(reversed(n.children))


# What a CUDA source computes on the tensor cores through: the warp-matrix API (`nvcuda::wmma`,
# mma.h), its builtins, and inline PTX's mma / wgmma instructions; CUTLASS and CuTe headers
TENSOR_NAMES = frozenset({"wmma", "nvcuda", "mma_sync", "load_matrix_sync", "store_matrix_sync"})
TENSOR_PREFIXES = ("__hmma", "__imma", "__bmma", "__dmma", "__mma_")
TENSOR_PTX = ("mma.", "wgmma.", "ldmatrix.")
TENSOR_HEADERS = ("mma.h", "cutlass/", "cute/", "cuda/barrier")


@functools.lru_cache(maxsize=64)
def may_use_tensor_cores(source: str) -> bool:
    """Whether a CUDA source names anything that computes on the tensor cores (read from its
    syntax tree: identifiers, inline assembly's strings, includes), in any #if branch."""
    if any(name.startswith(TENSOR_HEADERS[1:]) or name.rsplit("/", 1)[-1] == TENSOR_HEADERS[0]
           for _, name in includes(source)):
        return True
    stack = [parser().parse(source.encode("utf-8", "replace")).root_node]
    while stack:
        n = stack.pop()
        if n.type == "comment":
            continue
        if n.type in ("identifier", "field_identifier", "namespace_identifier", "type_identifier"):
            name = text(n)
            if name in TENSOR_NAMES or name.startswith(TENSOR_PREFIXES):
                return True
        elif n.type in ("string_literal", "raw_string_literal", "concatenated_string"):
            if any(word.startswith(TENSOR_PTX) for word in re.split(r'[\s";{}]+', text(n))):
                return True
            continue
        stack.extend(n.children)
    return False


def includes(source: str) -> list[tuple[str, str]]:
    """Every `#include` of a source, in #if branches too, as (kind, name): kind `quoted`
    (`"x.h"`), `system` (`<x.h>`) or `computed` (a macro's value, unknown until preprocessed);
    the name as written, without its quotes or brackets."""
    out = []
    stack = [parser().parse(source.encode("utf-8", "replace")).root_node]
    while stack:
        n = stack.pop()
        if n.type == "preproc_include":
            path = n.child_by_field_name("path")
            if path is not None and path.type == "string_literal":
                out.append(("quoted", text(path)[1:-1]))
            elif path is not None and path.type == "system_lib_string":
                out.append(("system", text(path)[1:-1]))
            else:
                out.append(("computed", text(path)))
            continue
        if n.type in SKIPPED:
            continue
        stack.extend(reversed(n.children))
    return out
