"""Index expressions as polynomials over names: what the cooperating-thread rewrites prove with.

An index as written (`row * K + k`, `(y - 1) * W + x`, `2 * s * tid`) is read from its syntax tree
into a polynomial whose variables are the names it reads and whose coefficients are whole
numbers. A part the polynomial cannot hold (a call, a division, a remainder, a shift, a
conditional) becomes one opaque term, named by its text, as long as none of the variables a
caller asks about occurs inside it; otherwise the index is not affine in them and the reading
fails. From the polynomial a rewrite reads how an index moves with a variable (its coefficient:
1 for a contiguous walk), whether it moves at all, and whether two indices are the same.
"""

from __future__ import annotations

from .kernel_tree import syntax_nodes
from .model import Poly  # the kernel model's polynomials: whole coefficients over names

class NotAffine(ValueError):
    """An expression that cannot be read as a polynomial in the names asked about; one line."""


def read(text: str, watched: frozenset[str] | set[str] = frozenset()) -> Poly:
    """`text` as a polynomial. Parts it cannot hold become opaque names (their text); a part that
    reads one of `watched` and is not a sum, difference or product raises NotAffine."""
    found = syntax_nodes(f"auto kt_e = ({text});", ("parenthesized_expression",))
    if not found:
        raise NotAffine(f"`{text}` cannot be read")
    node, text_of = found[0]
    inner = [c for c in node.named_children if c.type != "comment"]
    if len(inner) != 1:
        raise NotAffine(f"`{text}` cannot be read")
    return _poly(inner[0], text_of, frozenset(watched))


def _poly(node, text_of, watched: frozenset[str]) -> Poly:
    t = node.type
    if t == "number_literal":
        digits = text_of(node).rstrip("uUlL")
        if digits.isdigit():
            return Poly.const(int(digits))
        if digits.lower().startswith("0x"):
            return Poly.const(int(digits, 16))
    elif t == "identifier":
        return Poly.name(text_of(node))
    elif t == "parenthesized_expression":
        inner = [c for c in node.named_children if c.type != "comment"]
        if len(inner) == 1:
            return _poly(inner[0], text_of, watched)
    elif t == "cast_expression":
        kind = text_of(node.child_by_field_name("type"))
        if any(w in kind for w in ("int", "long", "size_t", "unsigned", "short")):
            return _poly(node.child_by_field_name("value"), text_of, watched)
    elif t == "unary_expression":
        op = text_of(node.child_by_field_name("operator"))
        if op in ("-", "+"):
            p = _poly(node.child_by_field_name("argument"), text_of, watched)
            return -p if op == "-" else p
    elif t == "binary_expression":
        op = text_of(node.child_by_field_name("operator"))
        if op in ("+", "-", "*"):
            left = _poly(node.child_by_field_name("left"), text_of, watched)
            right = _poly(node.child_by_field_name("right"), text_of, watched)
            return left + right if op == "+" else left - right if op == "-" else left * right
        if op == "<<":
            shift = _poly(node.child_by_field_name("right"), text_of, watched).number
            if shift is not None and 0 <= shift < 63:
                return _poly(node.child_by_field_name("left"), text_of, watched) * Poly.const(1 << shift)
    text = " ".join(text_of(node).split())
    reads = _identifiers(node, text_of)
    if reads & watched:
        raise NotAffine(f"`{text}` is not a sum of products in {', '.join(sorted(reads & watched))}")
    return Poly.name(f"({text})")


def _identifiers(node, text_of) -> set[str]:
    out, stack = set(), [node]
    while stack:
        n = stack.pop()
        if n.type == "identifier":
            out.add(text_of(n))
        stack.extend(n.children)
    return out


def slope(text: str, var: str, watched: frozenset[str] | set[str] = frozenset()) -> int | None:
    """How far the index moves when `var` moves by one: a whole number, or None when that depends
    on other names, the index is not linear in `var`, or it cannot be read."""
    try:
        p = read(text, set(watched) | {var})
    except NotAffine:
        return None
    if p.degree_in(var) > 1:
        return None
    return p.coefficient(var).number
