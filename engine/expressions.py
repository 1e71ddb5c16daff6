"""Safe arithmetic and boolean expressions over parameter and problem names.

Templates and session files carry small expressions (`BLOCK * VEC <= d`, `ceil_div(n, BLOCK)`).
They are parsed with `ast`, checked against a whitelist, and turned into closures that our own
code evaluates. Nothing is ever handed to `eval`, `exec` or a shell, and every failure is an
`ExpressionError`.
"""

from __future__ import annotations

import ast
import math
import operator
from dataclasses import dataclass
from typing import Callable, Mapping

Number = int | float | bool
Env = Mapping[str, Number]

MAX_SOURCE = 2000  # characters
MAX_DEPTH = 60  # nesting of the parsed tree
MAX_INT_BITS = 256  # integers beyond this are refused (guards `**` and `<<` blow-ups)
MAX_EXPONENT = 256


class ExpressionError(ValueError):
    """An expression that cannot be parsed, is not allowed, or cannot be evaluated."""


class NonFiniteError(ExpressionError):
    """An expression whose value (or a step of it) is infinite or not a number: a size, a
    count or a bound that no configuration can have."""


def _ceil_div(a: Number, b: Number) -> int:
    a, b = _as_int(a, "ceil_div"), _as_int(b, "ceil_div")
    if b == 0:
        raise ExpressionError("ceil_div by zero")
    return -((-a) // b)


def _round_up(a: Number, m: Number) -> int:
    return _ceil_div(a, m) * _as_int(m, "round_up")


def _log2(a: Number) -> Number:
    if isinstance(a, bool) or a <= 0:
        raise ExpressionError(f"log2 of {a!r} is undefined")
    if isinstance(a, int) and a & (a - 1) == 0:
        return a.bit_length() - 1
    return math.log2(a)


def _is_pow2(a: Number) -> bool:
    return isinstance(a, int) and not isinstance(a, bool) and a > 0 and a & (a - 1) == 0


def _as_int(v: Number, where: str) -> int:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    raise ExpressionError(f"{where} needs whole numbers, got {v!r}")


def _min(*args: Number) -> Number:
    if not args:
        raise ExpressionError("min needs at least one argument")
    return min(args)


def _max(*args: Number) -> Number:
    if not args:
        raise ExpressionError("max needs at least one argument")
    return max(args)


def _abs(a: Number) -> Number:
    return abs(a)


FUNCTIONS: dict[str, tuple[Callable[..., Number], int, int]] = {
    # name: (function, fewest arguments, most arguments)
    "min": (_min, 1, 16),
    "max": (_max, 1, 16),
    "ceil_div": (_ceil_div, 2, 2),
    "round_up": (_round_up, 2, 2),
    "log2": (_log2, 1, 1),
    "is_pow2": (_is_pow2, 1, 1),
    "abs": (_abs, 1, 1),
}

CONSTANTS: dict[str, Number] = {"true": True, "false": False, "True": True, "False": False}


def _check_number(v: object) -> Number:
    if isinstance(v, bool):
        return v
    if isinstance(v, int):
        if v.bit_length() > MAX_INT_BITS:
            raise ExpressionError("integer result too large")
        return v
    if isinstance(v, float):
        if not math.isfinite(v):
            raise NonFiniteError(f"the value is {v}, not a finite number")
        return v
    raise ExpressionError(f"not a number: {type(v).__name__}")


def _div(a: Number, b: Number) -> Number:
    if b == 0:
        raise ExpressionError("division by zero")
    return a / b


def _floordiv(a: Number, b: Number) -> Number:
    if b == 0:
        raise ExpressionError("division by zero")
    return a // b


def _mod(a: Number, b: Number) -> Number:
    if b == 0:
        raise ExpressionError("modulo by zero")
    return a % b


def _pow(a: Number, b: Number) -> Number:
    if isinstance(b, (int, float)) and abs(b) > MAX_EXPONENT:
        raise ExpressionError("exponent too large")
    if isinstance(a, (int, float)) and isinstance(b, int) and abs(a) > 2**64 and b > 1:
        raise ExpressionError("power too large")
    if a == 0 and b < 0:
        raise ExpressionError("zero to a negative power")
    r = a**b
    if isinstance(r, complex):
        raise ExpressionError("power has no real value")
    return r


def _shift(op: Callable[[int, int], int]) -> Callable[[Number, Number], Number]:
    def f(a: Number, b: Number) -> Number:
        a, b = _as_int(a, "shift"), _as_int(b, "shift")
        if b < 0 or b > MAX_INT_BITS:
            raise ExpressionError("shift count out of range")
        return op(a, b)

    return f


def _bitwise(op: Callable[[int, int], int]) -> Callable[[Number, Number], Number]:
    def f(a: Number, b: Number) -> Number:
        return op(_as_int(a, "bitwise operator"), _as_int(b, "bitwise operator"))

    return f


BINOPS: dict[type, Callable[[Number, Number], Number]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: _div,
    ast.FloorDiv: _floordiv,
    ast.Mod: _mod,
    ast.Pow: _pow,
    ast.LShift: _shift(operator.lshift),
    ast.RShift: _shift(operator.rshift),
    ast.BitAnd: _bitwise(operator.and_),
    ast.BitOr: _bitwise(operator.or_),
    ast.BitXor: _bitwise(operator.xor),
}

COMPARES: dict[type, Callable[[Number, Number], bool]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}

_Fn = Callable[[Env], Number]


@dataclass(frozen=True)
class Expression:
    """A parsed, whitelisted expression; call `evaluate(env)` with the names it uses."""

    source: str
    names: frozenset[str]
    _fn: _Fn

    def evaluate(self, env: Env) -> Number:
        try:
            return _check_number(self._fn(env))
        except ExpressionError as e:
            raise type(e)(f"{e} in `{self.source}`") from None
        except (ArithmeticError, ValueError, TypeError, RecursionError, MemoryError) as e:
            raise ExpressionError(f"cannot evaluate `{self.source}`: {e}") from None

    def __str__(self) -> str:
        return self.source


def parse(source: object) -> Expression:
    """Parse and check an expression; raises ExpressionError for anything outside the whitelist."""
    if isinstance(source, bool):
        source = "true" if source else "false"
    if isinstance(source, (int, float)):
        value = _check_number(source)
        return Expression(str(source), frozenset(), lambda env: value)
    if not isinstance(source, str):
        raise ExpressionError(f"expected an expression string, got {type(source).__name__}")
    text = source.strip()
    if not text:
        raise ExpressionError("empty expression")
    if len(text) > MAX_SOURCE:
        raise ExpressionError(f"expression longer than {MAX_SOURCE} characters")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as e:
        raise ExpressionError(f"cannot parse `{text}`: {e.msg}") from None
    except (ValueError, RecursionError, MemoryError) as e:
        raise ExpressionError(f"cannot parse `{text}`: {type(e).__name__}") from None
    names: set[str] = set()
    fn = _build(tree.body, names, 0, text)
    return Expression(text, frozenset(names), fn)


def evaluate(source: object, env: Env) -> Number:
    """Parse and evaluate in one step."""
    return parse(source).evaluate(env)


def expression_words(source: str) -> frozenset[str]:
    """The names an expression reads and its numbers as written (`ceil_div(n, 256)`: n, 256);
    none where it does not parse."""
    return frozenset(w for w, _ in _words(source))


def renamed(source: str, word: str, text: str) -> str:
    """The expression with every use of the name or number `word` written as `text` (read with
    Python's parser, as the expression itself is: never by matching its characters); as it was
    where it does not parse."""
    raw = source.encode("utf-8")
    for start, end in sorted((span for w, span in _words(source) if w == word), reverse=True):
        raw = raw[:start] + text.encode("utf-8") + raw[end:]
    return raw.decode("utf-8")


def _words(source: str) -> list[tuple[str, tuple[int, int]]]:
    """Each name and number of an expression as written, with its span in bytes of its UTF-8 text."""
    try:
        tree = ast.parse(source, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    raw = source.encode("utf-8")
    starts = [0]
    for line in raw.split(b"\n")[:-1]:
        starts.append(starts[-1] + len(line) + 1)
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) or (isinstance(n, ast.Constant) and isinstance(n.value, (int, float))):
            start, end = starts[n.lineno - 1] + n.col_offset, starts[n.end_lineno - 1] + n.end_col_offset
            out.append((raw[start:end].decode("utf-8"), (start, end)))  # ast's offsets are bytes
    return out


def _build(node: ast.AST, names: set[str], depth: int, text: str) -> _Fn:
    if depth > MAX_DEPTH:
        raise ExpressionError(f"expression nested too deeply: `{text[:60]}`")
    d = depth + 1
    if isinstance(node, ast.Constant):
        v = node.value
        if isinstance(v, (bool, int, float)):
            _check_number(v)
            return lambda env: v
        raise ExpressionError(f"only numbers are allowed, not {type(v).__name__} in `{text}`")
    if isinstance(node, ast.Name):
        name = node.id
        if name in CONSTANTS:
            c = CONSTANTS[name]
            return lambda env: c
        names.add(name)

        def lookup(env: Env) -> Number:
            try:
                return env[name]
            except KeyError:
                raise ExpressionError(f"unknown name `{name}`") from None

        return lookup
    if isinstance(node, ast.BinOp):
        op = BINOPS.get(type(node.op))
        if op is None:
            raise ExpressionError(f"operator {type(node.op).__name__} not allowed in `{text}`")
        left, right = _build(node.left, names, d, text), _build(node.right, names, d, text)
        return lambda env: _check_number(op(left(env), right(env)))
    if isinstance(node, ast.UnaryOp):
        operand = _build(node.operand, names, d, text)
        if isinstance(node.op, ast.USub):
            return lambda env: -operand(env)
        if isinstance(node.op, ast.UAdd):
            return lambda env: +operand(env)
        if isinstance(node.op, ast.Not):
            return lambda env: not operand(env)
        if isinstance(node.op, ast.Invert):
            return lambda env: ~_as_int(operand(env), "~")
        raise ExpressionError(f"operator not allowed in `{text}`")
    if isinstance(node, ast.BoolOp):
        parts = [_build(v, names, d, text) for v in node.values]
        if isinstance(node.op, ast.And):
            return lambda env: all(p(env) for p in parts)
        return lambda env: any(p(env) for p in parts)
    if isinstance(node, ast.Compare):
        first = _build(node.left, names, d, text)
        ops = []
        for op_node, comp in zip(node.ops, node.comparators):
            op = COMPARES.get(type(op_node))
            if op is None:
                raise ExpressionError(f"comparison {type(op_node).__name__} not allowed in `{text}`")
            ops.append((op, _build(comp, names, d, text)))

        def compare(env: Env) -> bool:
            a = first(env)
            for op, rhs in ops:
                b = rhs(env)
                if not op(a, b):
                    return False
                a = b
            return True

        return compare
    if isinstance(node, ast.IfExp):
        test = _build(node.test, names, d, text)
        yes, no = _build(node.body, names, d, text), _build(node.orelse, names, d, text)
        return lambda env: yes(env) if test(env) else no(env)
    if isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
            fname = node.func.id if isinstance(node.func, ast.Name) else "?"
            raise ExpressionError(
                f"function `{fname}` not allowed in `{text}` (allowed: {', '.join(sorted(FUNCTIONS))})"
            )
        if node.keywords:
            raise ExpressionError(f"keyword arguments not allowed in `{text}`")
        func, lo, hi = FUNCTIONS[node.func.id]
        if not lo <= len(node.args) <= hi:
            raise ExpressionError(f"{node.func.id} takes {lo}..{hi} arguments in `{text}`")
        args = [_build(a, names, d, text) for a in node.args]
        return lambda env: func(*(a(env) for a in args))
    raise ExpressionError(f"{type(node).__name__} not allowed in `{text}`")
