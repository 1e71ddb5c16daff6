"""Random input sets for a template at a problem size: every input and read-write buffer drawn
from a seed (never zeros), the scalars evaluated, and a pool that draws each set when first used.
"""

from __future__ import annotations

import math
import threading
from collections import abc
from concurrent.futures import Future
from typing import Any, Callable, Mapping

import numpy as np

from .compare import Expected
from .expressions import ExpressionError
from .template import Argument, Problem, Template, np_dtype


class Inputs:
    """One random input set for a problem, with its reference outputs."""

    def __init__(self, seed: int, host: dict[str, np.ndarray], scalars: dict[str, Any]):
        self.seed = seed
        self.host = host
        self.scalars = scalars
        self.expected: dict[str, np.ndarray] = {}
        self.checks: dict[str, Expected] = {}
        self.device: dict[str, Any] = {}  # pristine copies on the device, uploaded once
        self.key: str | None = None  # its name in the inputs cache (engine/inputs_cache.py), if it has one
        self.kinds: tuple[str, ...] = ()  # the hard kinds of its rows (make_hard_inputs), if any
        self.change: dict[str, tuple[int, int, int]] = {}  # a variant's change of its base set
        self.base: Inputs | None = None  # a variant's base set
        self.checksum: int | None = None  # of its arrays and references, once prepared (Evaluator.intact)


def arg_shape(arg: Argument, problem: Problem) -> tuple[int, ...]:
    """A buffer argument's shape at a problem size; ExpressionError when not whole or negative."""
    shape = []
    for e in arg.shape:
        v = e.evaluate(problem.values)
        if isinstance(v, float):
            if not v.is_integer():
                raise ExpressionError(f"shape of {arg.name} is not whole: {v}")
            v = int(v)
        if v < 0:
            raise ExpressionError(f"shape of {arg.name} is negative: {v}")
        shape.append(int(v))
    return tuple(shape)


def arg_nbytes(arg: Argument, problem: Problem) -> int:
    """A buffer argument's size in bytes at a problem size."""
    return math.prod(arg_shape(arg, problem)) * np_dtype(arg.dtype).itemsize


def scalar_value(arg: Argument, problem: Problem) -> Any:
    """A scalar argument's value at a problem size, in its own dtype."""
    assert arg.value is not None
    return np_dtype(arg.dtype).type(arg.value.evaluate(problem.values))


def draw(arg: Argument, problem: Problem, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Values of an input argument from its usual distribution (its `init` and range), in its dtype."""
    low, high = arg.bounds(problem.values)
    if arg.init == "randint":
        data = rng.integers(math.ceil(low), math.ceil(high), size=shape)
    elif (arg.init in ("uniform", "positive") and np_dtype(arg.dtype).itemsize <= 4
          and (low <= 0 or np.float32(low) > 0)):
        # drawn in single precision, the widest the buffer keeps (half the work of doubles)
        data = rng.random(size=shape, dtype=np.float32)
        data *= np.float32(high - low)
        data += np.float32(low)
        np.clip(data, np.float32(low), np.nextafter(np.float32(high), np.float32(low)), out=data)
    elif arg.init in ("uniform", "positive"):
        data = rng.uniform(low, high, size=shape)
    else:
        data = rng.standard_normal(size=shape, dtype=np.float32)
    data = data.astype(np_dtype(arg.dtype), copy=False)
    if arg.inf_fraction:
        data[rng.random(size=shape) < arg.inf_fraction] = -np.inf
    return data


def make_inputs(template: Template, problem: Problem, seed: int) -> Inputs:
    """Random inputs for every input and inout buffer; never zeros."""
    rng = np.random.default_rng(seed)
    host: dict[str, np.ndarray] = {}
    scalars: dict[str, Any] = {}
    for arg in template.arguments:
        if arg.role == "scalar":
            scalars[arg.name] = scalar_value(arg, problem)
        elif arg.role != "output":
            host[arg.name] = np.ascontiguousarray(draw(arg, problem, rng, arg_shape(arg, problem)))
    return Inputs(seed, host, scalars)


# Input sets a kernel right only for kerntune's usual draws (small, centred values) fails on:
# large magnitudes; one large element at a random place in each row (a maximum that only the
# whole row finds); rows of one value; signed zeros and denormals; the ends of a declared range.
# Each is checked against the original kernel before use (Evaluator.calibrate): a kind the
# reference cannot compute, or the original itself gets wrong, is left out of the run.
HARD_KINDS = ("large", "outlier", "equal", "tiny", "extremes")
# How large "large" is, by dtype: far past where exp() overflows without a shift (88 in float32),
# well inside what the dtype holds
LARGE = {"float16": 32.0, "bfloat16": 2048.0, "float32": 2048.0, "float64": 1e5}


def hard_kinds(arg: Argument) -> tuple[str, ...]:
    """The hard kinds that apply to an input argument: magnitudes only where it has no range."""
    if arg.init == "randint":
        return ("equal", "extremes")
    if arg.init == "normal":
        return ("large", "outlier", "equal", "tiny")
    return ("outlier", "equal", "tiny", "extremes")


def _hard_rows(kind: str, arg: Argument, problem: Problem, rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    """`rows` rows of `cols` values of one hard kind, in float64 (or int64), within the argument's range."""
    dt = np_dtype(arg.dtype)
    bounded = arg.init != "normal"
    low, high = arg.bounds(problem.values)
    if arg.init == "randint":
        lo, hi = math.ceil(low), math.ceil(high) - 1
        if kind == "equal":
            return np.repeat(rng.integers(lo, hi + 1, size=(rows, 1)), cols, axis=1)
        return np.where(rng.random((rows, cols)) < 0.5, lo, hi).astype(np.int64)
    top = float(np.nextafter(dt.type(high), dt.type(low))) if bounded else 0.0
    base = draw(arg, problem, rng, (rows, cols)).astype(np.float64)
    scale = LARGE.get(arg.dtype, 2048.0)
    if kind == "large":
        return rng.standard_normal((rows, cols)) * scale
    if kind == "outlier":
        where = rng.integers(0, cols, size=rows)
        base[np.arange(rows), where] = top if bounded else scale * 8.0
        return base
    if kind == "equal":
        return np.repeat(base[:, :1], cols, axis=1)
    if kind == "extremes":
        return np.where(rng.random((rows, cols)) < 0.5, float(dt.type(low)), top)
    # tiny: signed zeros, denormals of the argument's dtype, and small normal values
    tiny = float(np.finfo(np.float32 if arg.dtype == "bfloat16" else dt).smallest_subnormal)
    pick = rng.integers(0, 4, size=(rows, cols))
    sign = np.where(rng.random((rows, cols)) < 0.5, -1.0, 1.0)
    values = np.select([pick == 0, pick == 1, pick == 2],
                       [0.0, sign * tiny * rng.integers(1, 64, size=(rows, cols)), base * 1e-3], sign * 0.0)
    if bounded:
        values = np.clip(values, low, top)
    return values


def make_hard_inputs(template: Template, problem: Problem, seed: int, kinds: tuple[str, ...]) -> Inputs:
    """An input set whose rows (the last dimension; segments of a one-row input) are of the hard
    `kinds` and of the usual draw, in a random order: a kernel cannot tell from a few elements
    which rows are hard."""
    inputs = make_inputs(template, problem, seed)
    rng = np.random.default_rng(seed ^ 0x5EED_4A2D)
    for arg in template.arguments:
        if arg.name not in inputs.host:
            continue
        data = inputs.host[arg.name]
        mine = [k for k in kinds if k in hard_kinds(arg)]
        if not mine or data.size == 0:
            continue
        shape = data.shape
        cols = shape[-1] if len(shape) >= 2 and data.size // shape[-1] >= 2 * len(mine) else 0
        if not cols:  # one row: segments of it
            cols = max(1, data.size // (2 * len(mine) + 2))
        rows = data.size // cols
        flat = data.reshape(-1).copy()
        labels = (["normal"] + mine) * (rows // (len(mine) + 1) + 1)
        order = rng.permutation(rows)
        # the first row is of the usual draw: a kernel that looks at its first elements to decide
        # whether the input is unusual sees nothing unusual
        first, usual = int(np.flatnonzero(order == 0)[0]), 0
        order[first], order[usual] = order[usual], order[first]
        for kind in mine:
            picked = np.array([r for r, j in zip(order, range(rows)) if labels[j] == kind], dtype=np.int64)
            if picked.size == 0:
                continue
            values = _hard_rows(kind, arg, problem, rng, picked.size, cols)
            block = flat[:rows * cols].reshape(rows, cols)
            block[picked] = values.astype(data.dtype)
        inputs.host[arg.name] = np.ascontiguousarray(flat.reshape(shape))
    inputs.kinds = tuple(kinds)
    return inputs


# Timed launches run on inputs no earlier launch of the configuration saw: before each one a few
# elements of every input change (a run of MUTATED elements at a random place), outside the timed
# region. The launches that are checked use changes whose reference was computed ahead
# (`Variant`), the others changes drawn on the spot from the same distribution: a kernel cannot
# tell them apart, and one that keeps its last output keyed on its input returns it stale.
MUTATED = 8
MUTATION_VALUES = 256  # values drawn per input, the runs are taken from


def mutation_values(template: Template, problem: Problem, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """For every input buffer, MUTATION_VALUES values drawn from its own distribution."""
    return {a.name: np.ascontiguousarray(draw(a, problem, rng, (MUTATION_VALUES,)))
            for a in template.arguments if a.role in ("input", "inout")}


def random_change(inputs: "Inputs", values: Mapping[str, np.ndarray],
                  rng: np.random.Generator) -> dict[str, tuple[int, int, int]]:
    """A change of `inputs`: for each buffer, (first element changed, first of `values` taken, count)."""
    out = {}
    for name, data in inputs.host.items():
        count = min(MUTATED, data.size)
        if count == 0 or name not in values:
            continue
        out[name] = (int(rng.integers(0, data.size - count + 1)),
                     int(rng.integers(0, MUTATION_VALUES - count + 1)), count)
    return out


def changed(inputs: "Inputs", values: Mapping[str, np.ndarray], change: Mapping[str, tuple[int, int, int]]) -> dict[str, np.ndarray]:
    """The host arrays of `inputs` with a change made (copies of the changed ones only)."""
    host = dict(inputs.host)
    for name, (at, src, count) in change.items():
        data = host[name].copy()
        data.reshape(-1)[at:at + count] = values[name][src:src + count]
        host[name] = data
    return host


class InputPool(abc.Sequence):
    """A verification size's input sets, each drawn (with its reference outputs) when first used,
    or ahead of use in other threads (`draw_ahead`)."""

    def __init__(self, draw: Callable[[int], Inputs], size: int):
        self._draw = draw
        self._items: list[Inputs | None] = [None] * size
        self._ahead: dict[int, Future] = {}  # sets being drawn in other threads
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self._items)))]
        i = i if i >= 0 else len(self._items) + i
        if self._items[i] is None:
            with self._lock:
                future = self._ahead.pop(i, None)
            # a set drawn ahead is waited for (its failure raised here, as drawing it here would)
            self._items[i] = future.result() if future is not None and not future.cancelled() else self._draw(i)
        return self._items[i]

    def ready(self, i: int) -> bool:
        """Whether set `i` can be had without waiting: drawn, or drawn ahead and done."""
        if self._items[i] is not None:
            return True
        with self._lock:
            future = self._ahead.get(i)
        return future is not None and future.done() and not future.cancelled() and future.exception() is None

    def draw_ahead(self, submit: Callable[..., Future]) -> None:
        """Every set not drawn yet, drawn by `submit(fn, i)` (an executor's) in other threads."""
        with self._lock:
            for i, item in enumerate(self._items):
                if item is None and i not in self._ahead:
                    self._ahead[i] = submit(self._draw, i)

    def cancel_ahead(self) -> None:
        """Drop the draws ahead that have not started."""
        with self._lock:
            for future in self._ahead.values():
                future.cancel()

    def drawn(self) -> list[Inputs]:
        return [x for x in self._items if x is not None]
