"""Helpers over tree-sitter syntax trees of kernels (engine/cxx.py's parse), shared by the rules'
analyses and rewrites: a node's text, its parts, and where it stands."""

from __future__ import annotations

import functools
from typing import Mapping

from kerntune.engine.cxx import blank, leaves, parser, text

__all__ = ["text", "strip", "walk", "names", "line", "within", "same", "call_name", "call_args", "target",
           "element", "compact", "uses", "cut", "line_of"]


def strip(node):
    """The expression inside one or more pairs of parentheses."""
    while node is not None and node.type == "parenthesized_expression" and node.named_child_count == 1:
        node = node.named_children[0]
    return node


def walk(node):
    """Every node under a node (itself first), in source order."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(n.children))


def names(node) -> set[str]:
    """The identifiers a node's text uses."""
    return {text(n) for n in walk(node) if n.type == "identifier"}


def line(node) -> int:
    """The 1-based line a node starts on."""
    return node.start_point[0] + 1


def within(node, ancestor) -> bool:
    return ancestor.start_byte <= node.start_byte and node.end_byte <= ancestor.end_byte


def same(a, b) -> bool:
    return a.start_byte == b.start_byte and a.end_byte == b.end_byte and a.type == b.type


def call_name(call) -> str:
    """The name a call calls when it is a plain identifier, else ""."""
    fn = call.child_by_field_name("function")
    return text(fn) if fn is not None and fn.type == "identifier" else ""


def call_args(call) -> list:
    args = call.child_by_field_name("arguments")
    return list(args.named_children) if args is not None else []


def target(n):
    """What an assignment or an increment writes, else None."""
    if n.type == "assignment_expression":
        return strip(n.child_by_field_name("left"))
    if n.type == "update_expression":
        return strip(n.child_by_field_name("argument"))
    return None


def element(node):
    """(array name, its index expression) of an element access: p[i], *(p + i), or a vload/vstore."""
    node = strip(node)
    if node.type == "subscript_expression":
        arg = strip(node.child_by_field_name("argument"))
        idx = node.child_by_field_name("indices") or node.child_by_field_name("index")
        return (text(arg) if arg.type == "identifier" else ""), idx
    if node.type == "pointer_expression" and text(node.child_by_field_name("operator")) == "*":
        inner = strip(node.child_by_field_name("argument"))
        if inner.type == "binary_expression" and text(inner.child_by_field_name("operator")) == "+":
            left = strip(inner.child_by_field_name("left"))
            return (text(left) if left.type == "identifier" else ""), inner.child_by_field_name("right")
        return (text(inner) if inner.type == "identifier" else ""), None
    if node.type == "call_expression" and call_name(node).startswith(("vload", "vstore")):
        args = call_args(node)
        if len(args) >= 2:
            p = strip(args[-1])
            return (text(p) if p.type == "identifier" else ""), args[-2]
    return None


def compact(node, rename: Mapping[str, str] | None = None) -> str:
    """A node's tokens joined with nothing between them (comments left out), each token named in
    `rename` replaced: two expressions written alike but for their spacing read the same."""
    rename = rename or {}
    return "".join(rename.get(text(n), text(n)) for n in leaves(node))


def uses(code: str, name: str) -> bool:
    """Whether a piece of C or C++ code (statements, a body) has `name` among its tokens."""
    root = parser().parse(blank(code.encode("utf-8"))[0]).root_node
    return any(text(n) == name for n in leaves(root))


@functools.lru_cache(maxsize=16)
def _encoded(source: str) -> bytes:
    return source.encode("utf-8")


def cut(source: str, start: int, end: int | None = None) -> str:
    """Bytes [start, end) of a source, as text: every span of the kernel model and the syntax trees
    is bytes of the source as written (`end` None: to the source's end)."""
    return _encoded(source)[start:end].decode("utf-8")


def line_of(source: str, offset: int) -> int:
    """The 1-based line of a byte of a source."""
    return _encoded(source).count(b"\n", 0, offset) + 1
