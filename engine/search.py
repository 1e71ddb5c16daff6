"""Search strategies: they propose configurations from a feasible space and receive results.

Every strategy proposes only configurations of the space it was given (so never an infeasible
one), never proposes one twice, and skips those already evaluated (a resumed session).
"""

from __future__ import annotations

import random
from typing import Iterable, Protocol

from .result import Result
from .space import Config, Space

STRATEGIES = ("grid", "random")


class Strategy(Protocol):
    name: str

    def propose(self) -> Config | None:
        """The next configuration to evaluate, or None when the strategy is done."""

    def observe(self, config: Config, result: Result) -> None:
        """Learn from a result."""


class _Ordered:
    """Walk a fixed order of the space, skipping what is already done."""

    name = ""

    def __init__(self, order: list[Config], done: Iterable[str] = ()):
        self._order = order
        self._done = set(done)
        self._pos = 0

    def propose(self) -> Config | None:
        while self._pos < len(self._order):
            c = self._order[self._pos]
            self._pos += 1
            if c.key not in self._done:
                self._done.add(c.key)
                return c
        return None

    def observe(self, config: Config, result: Result) -> None:
        self._done.add(config.key)

    @property
    def remaining(self) -> int:
        return sum(1 for c in self._order[self._pos:] if c.key not in self._done)


class GridSearch(_Ordered):
    """Every feasible configuration, in the order of the template's value lists."""

    name = "grid"

    def __init__(self, space: Space, done: Iterable[str] = (), first: Config | None = None):
        order = list(space.configs)
        if first is not None and first in order:
            order.remove(first)
            order.insert(0, first)
        super().__init__(order, done)


class RandomSearch(_Ordered):
    """A seeded random permutation of the feasible configurations."""

    name = "random"

    def __init__(self, space: Space, seed: int = 0, done: Iterable[str] = (), first: Config | None = None):
        order = list(space.configs)
        random.Random(seed).shuffle(order)
        if first is not None and first in order:
            order.remove(first)
            order.insert(0, first)
        super().__init__(order, done)


def make_strategy(name: str, space: Space, *, seed: int = 0, done: Iterable[str] = (),
                  first: Config | None = None) -> Strategy:
    """A strategy by name; `first` (the baseline) is proposed before anything else."""
    if name == "grid":
        return GridSearch(space, done, first)
    if name == "random":
        return RandomSearch(space, seed, done, first)
    raise ValueError(f"unknown strategy {name!r} (known: {', '.join(STRATEGIES)})")
