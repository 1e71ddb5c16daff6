"""Random input sets for a template at a problem size: every input and read-write buffer drawn
from a seed (never zeros), the scalars evaluated, and a pool that draws each set when first used.
"""

from __future__ import annotations

import math
import threading
from collections import abc
from concurrent.futures import Future
from typing import Any, Callable

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


def make_inputs(template: Template, problem: Problem, seed: int) -> Inputs:
    """Random inputs for every input and inout buffer; never zeros."""
    rng = np.random.default_rng(seed)
    host: dict[str, np.ndarray] = {}
    scalars: dict[str, Any] = {}
    for arg in template.arguments:
        if arg.role == "scalar":
            scalars[arg.name] = scalar_value(arg, problem)
            continue
        if arg.role == "output":
            continue
        shape = arg_shape(arg, problem)
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
        host[arg.name] = np.ascontiguousarray(data)
    return Inputs(seed, host, scalars)


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
