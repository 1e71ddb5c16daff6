"""Helpers over tree-sitter syntax trees of kernels, shared by the row-wise rewrite's two stages."""

from __future__ import annotations


def _t(node) -> str:
    return node.text.decode("utf-8", "replace") if node is not None else ""


def _strip(node):
    while node is not None and node.type == "parenthesized_expression" and node.named_child_count == 1:
        node = node.named_children[0]
    return node


def _walk(node):
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(n.children))


def _names(node) -> set[str]:
    return {_t(n) for n in _walk(node) if n.type == "identifier"}


def _line(node) -> int:
    return node.start_point[0] + 1


def _within(node, ancestor) -> bool:
    return ancestor.start_byte <= node.start_byte and node.end_byte <= ancestor.end_byte


def _same(a, b) -> bool:
    return a.start_byte == b.start_byte and a.end_byte == b.end_byte and a.type == b.type


def _callee(call) -> str:
    fn = call.child_by_field_name("function")
    return _t(fn) if fn is not None and fn.type == "identifier" else ""


def _args(call) -> list:
    args = call.child_by_field_name("arguments")
    return list(args.named_children) if args is not None else []


def _target(n):
    if n.type == "assignment_expression":
        return _strip(n.child_by_field_name("left"))
    if n.type == "update_expression":
        return _strip(n.child_by_field_name("argument"))
    return None


def _element(node):
    """(array name, its index expression) of an element access: p[i], *(p + i), or a vload/vstore."""
    node = _strip(node)
    if node.type == "subscript_expression":
        arg = _strip(node.child_by_field_name("argument"))
        idx = node.child_by_field_name("indices") or node.child_by_field_name("index")
        return (_t(arg) if arg.type == "identifier" else ""), idx
    if node.type == "pointer_expression" and _t(node.child_by_field_name("operator")) == "*":
        inner = _strip(node.child_by_field_name("argument"))
        if inner.type == "binary_expression" and _t(inner.child_by_field_name("operator")) == "+":
            left = _strip(inner.child_by_field_name("left"))
            return (_t(left) if left.type == "identifier" else ""), inner.child_by_field_name("right")
        return (_t(inner) if inner.type == "identifier" else ""), None
    if node.type == "call_expression" and _callee(node).startswith(("vload", "vstore")):
        args = _args(node)
        if len(args) >= 2:
            p = _strip(args[-1])
            return (_t(p) if p.type == "identifier" else ""), args[-2]
    return None
