"""A spec's expressions (launch geometry, constraints) written as C++ that computes the same values.

engine/expressions.py evaluates them in Python: integers of any size, `/` exact division, `//`
and `%` rounding toward minus infinity, `and`/`or` giving a truth value. The C++ here computes
in `double`, which holds every integer below 2^53 exactly, so that each operation gives what
Python gives for the sizes kernels have: `//` is floor of the quotient, `%` takes the divisor's
sign, `ceil_div` rounds up. The expression is first parsed and checked by engine/expressions.py
(the same whitelist); names are replaced by what the caller maps them to (a literal, a field).
"""

from __future__ import annotations

import ast
from typing import Callable

from .expressions import COMPARES, CONSTANTS, FUNCTIONS, ExpressionError, parse

# The helpers the translated expressions call, defined once in the file that uses them.
PRELUDE = """\
static inline double kt_floordiv(double a, double b) { return std::floor(a / b); }
static inline double kt_mod(double a, double b) { return a - b * std::floor(a / b); }
static inline double kt_ceil_div(double a, double b) { return -std::floor(-a / b); }
static inline double kt_round_up(double a, double m) { return kt_ceil_div(a, m) * m; }
static inline double kt_min(double a) { return a; }
template <typename... T> static inline double kt_min(double a, double b, T... rest) { return kt_min(a < b ? a : b, rest...); }
static inline double kt_max(double a) { return a; }
template <typename... T> static inline double kt_max(double a, double b, T... rest) { return kt_max(a > b ? a : b, rest...); }
static inline double kt_is_pow2(double a) {
    long long v = (long long)a;
    return (double)(a > 0 && (double)v == a && (v & (v - 1)) == 0);
}
static inline long long kt_int(double a) { return (long long)a; }
"""

_BINARY = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}
_INTEGER = {ast.LShift: "<<", ast.RShift: ">>", ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^"}
_COMPARE = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}
_CALLS = {"min": "kt_min", "max": "kt_max", "ceil_div": "kt_ceil_div", "round_up": "kt_round_up",
          "log2": "std::log2", "is_pow2": "kt_is_pow2", "abs": "std::fabs"}
assert set(_CALLS) == set(FUNCTIONS) and set(_COMPARE) == set(COMPARES)


def to_cpp(source: object, name: Callable[[str], str]) -> str:
    """The expression as a C++ expression of type double; `name(n)` gives the C++ text of a name
    (raising ExpressionError for one it does not know)."""
    expr = parse(source)  # the whitelist, the depth and the size limits: one reader for both
    return _cpp(ast.parse(expr.source, mode="eval").body, name)


def _num(v: object) -> str:
    if isinstance(v, bool):
        return "1.0" if v else "0.0"
    if isinstance(v, int):
        return f"{float(v)!r}"
    return repr(float(v))  # type: ignore[arg-type]


def _cpp(node: ast.AST, name: Callable[[str], str]) -> str:
    if isinstance(node, ast.Constant):
        return _num(node.value)
    if isinstance(node, ast.Name):
        return _num(CONSTANTS[node.id]) if node.id in CONSTANTS else f"(double)({name(node.id)})"
    if isinstance(node, ast.BinOp):
        a, b = _cpp(node.left, name), _cpp(node.right, name)
        op = type(node.op)
        if op in _BINARY:
            return f"({a} {_BINARY[op]} {b})"
        if op is ast.FloorDiv:
            return f"kt_floordiv({a}, {b})"
        if op is ast.Mod:
            return f"kt_mod({a}, {b})"
        if op is ast.Pow:
            return f"std::pow({a}, {b})"
        return f"(double)(kt_int({a}) {_INTEGER[op]} kt_int({b}))"
    if isinstance(node, ast.UnaryOp):
        a = _cpp(node.operand, name)
        if isinstance(node.op, ast.USub):
            return f"(-{a})"
        if isinstance(node.op, ast.UAdd):
            return a
        if isinstance(node.op, ast.Not):
            return f"(double)(!({a}))"
        return f"(double)(~kt_int({a}))"
    if isinstance(node, ast.BoolOp):
        joiner = " && " if isinstance(node.op, ast.And) else " || "
        return "(double)(" + joiner.join(f"({_cpp(v, name)} != 0.0)" for v in node.values) + ")"
    if isinstance(node, ast.Compare):
        parts, left = [], _cpp(node.left, name)
        for op, comp in zip(node.ops, node.comparators):
            right = _cpp(comp, name)
            parts.append(f"({left} {_COMPARE[type(op)]} {right})")
            left = right
        return "(double)(" + " && ".join(parts) + ")"
    if isinstance(node, ast.IfExp):
        return f"(({_cpp(node.test, name)}) != 0.0 ? {_cpp(node.body, name)} : {_cpp(node.orelse, name)})"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return f"{_CALLS[node.func.id]}({', '.join(_cpp(a, name) for a in node.args)})"
    raise ExpressionError(f"{type(node).__name__} cannot be written as C++")  # parse() let it through
