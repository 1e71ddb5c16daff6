"""Search strategies: they propose configurations from a feasible space and receive results.

Every strategy proposes only configurations of the space it was given (so never an infeasible
one), never proposes one twice, and skips those already evaluated (a resumed session).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Iterable, Protocol

from .result import Result
from .space import Config, Space

STRATEGIES = ("grid", "random", "model", "local")


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


class Seeded:
    """Another strategy, after a list of configurations tried first: the best ones of a search
    at another problem size, say. The inner strategy learns from them like from its own; what it
    proposes again is skipped."""

    def __init__(self, inner: Strategy, configs: Iterable[Config], done: Iterable[str] = ()):
        self.inner = inner
        self.name = getattr(inner, "name", "")
        skip = set(done)
        self._queue = [c for c in configs if c.key not in skip]
        self._proposed: set[str] = set()

    def propose(self) -> Config | None:
        while self._queue:
            c = self._queue.pop(0)
            if c.key not in self._proposed:
                self._proposed.add(c.key)
                return c
        while (c := self.inner.propose()) is not None and c.key in self._proposed:
            pass
        return c

    def observe(self, config: Config, result: Result) -> None:
        self.inner.observe(config, result)

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


def make_strategy(name: str, space: Space, *, seed: int = 0, done: Iterable[str] = (),
                  first: Config | None = None) -> Strategy:
    """A strategy by name; `first` (the baseline) is proposed before anything else."""
    if name == "grid":
        return GridSearch(space, done, first)
    if name == "random":
        return RandomSearch(space, seed, done, first)
    if name == "model":
        return ModelGuided(space, seed, done, first)
    if name == "local":
        return LocalSearch(space, seed, done, first)
    raise ValueError(f"unknown strategy {name!r} (known: {', '.join(STRATEGIES)})")


def _features(space: Space) -> tuple[list[Config], "np.ndarray"]:
    """Each configuration as a point in [0, 1]^d: log2 of positive numeric values, else the index
    of the value in its list, scaled per parameter over the space."""
    import numpy as np

    configs = list(space.configs)
    if not configs:
        return configs, np.zeros((0, 0))
    names = [k for k, _ in configs[0].items]
    cols = []
    for j, name in enumerate(names):
        values = [c.items[j][1] for c in configs]
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in values):
            col = np.log2(np.asarray(values, dtype=float))
        else:
            order = {v: i for i, v in enumerate(dict.fromkeys(sorted(values, key=str)))}
            col = np.asarray([order[v] for v in values], dtype=float)
        span = col.max() - col.min()
        cols.append((col - col.min()) / span if span > 0 else np.zeros_like(col))
    return configs, np.stack(cols, axis=1)


class ModelGuided:
    """Bayesian optimisation over the feasible configurations: a Gaussian process on log-time,
    with expected improvement choosing the next configuration among those not yet evaluated.

    It starts from the baseline and a few random configurations, and treats a failed
    configuration as much slower than the slowest seen so that the model steers away from it."""

    name = "model"

    def __init__(self, space: Space, seed: int = 0, done: Iterable[str] = (), first: Config | None = None,
                 initial: int = 0):
        import numpy as np

        self._np = np
        self.configs, self.x = _features(space)
        self.index = {c.key: i for i, c in enumerate(self.configs)}
        self.rng = random.Random(seed)
        self.tried: set[int] = {self.index[k] for k in done if k in self.index}
        self.obs: dict[int, float | None] = {}
        n = len(self.configs)
        self.initial = initial or min(n, max(4, min(10, n // 50)))
        order = list(range(n))
        self.rng.shuffle(order)
        if first is not None and first.key in self.index:
            order.remove(self.index[first.key])
            order.insert(0, self.index[first.key])
        self._seed_order = [i for i in order if i not in self.tried]
        self._d2 = None

    def propose(self) -> Config | None:
        if len(self.tried) >= len(self.configs):
            return None
        ranked = [v for v in self.obs.values() if v is not None]
        if len(self.tried) < self.initial or len(ranked) < 2:
            while self._seed_order:
                i = self._seed_order.pop(0)
                if i not in self.tried:
                    self.tried.add(i)
                    return self.configs[i]
        i = self._best_candidate()
        self.tried.add(i)
        return self.configs[i]

    def observe(self, config: Config, result: Result) -> None:
        i = self.index.get(config.key)
        if i is None:
            return
        self.tried.add(i)
        self.obs[i] = math.log(result.median_us) if result.ranked else None

    LENGTHS = (0.15, 0.25, 0.4, 0.7, 1.2)

    def _best_candidate(self) -> int:
        np = self._np
        if self._d2 is None:
            sq = (self.x * self.x).sum(1)
            self._d2 = np.clip(sq[:, None] + sq[None, :] - 2 * self.x @ self.x.T, 0, None)
        seen = np.asarray(list(self.obs))
        ranked = [v for v in self.obs.values() if v is not None]
        worst = max(ranked) + math.log(2.0)
        y = np.asarray([self.obs[i] if self.obs[i] is not None else worst for i in seen])
        ys = (y - y.mean()) / (y.std() or 1.0)
        cand = np.asarray([i for i in range(len(self.configs)) if i not in self.tried])
        if cand.size == 0:
            return next(i for i in range(len(self.configs)) if i not in self.tried)
        d2 = self._d2[np.ix_(seen, seen)]
        # the length scale that best explains what has been seen (marginal likelihood)
        best_fit = None
        for length in self.LENGTHS:
            K = np.exp(-0.5 * d2 / length**2) + 1e-3 * np.eye(seen.size)
            try:
                L = np.linalg.cholesky(K)
            except np.linalg.LinAlgError:
                continue
            alpha = np.linalg.solve(L.T, np.linalg.solve(L, ys))
            fit = -0.5 * ys @ alpha - np.log(np.diag(L)).sum()
            if best_fit is None or fit > best_fit[0]:
                best_fit = (fit, length, L, alpha)
        if best_fit is None:
            return int(cand[self.rng.randrange(cand.size)])
        _, length, L, alpha = best_fit
        Ks = np.exp(-0.5 * self._d2[np.ix_(cand, seen)] / length**2)
        mean = Ks @ alpha
        v = np.linalg.solve(L, Ks.T)
        sd = np.sqrt(np.clip(1.0 - np.sum(v * v, axis=0), 1e-12, None))
        z = (ys.min() - mean) / sd
        ei = sd * (z * _ncdf(z) + np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi))
        top = np.flatnonzero(ei >= ei.max() - 1e-12)
        return int(cand[top[self.rng.randrange(top.size)]])


def _ncdf(z):
    """The standard normal CDF, vectorised (Abramowitz and Stegun 7.1.26, error < 1.5e-7)."""
    import numpy as np

    x = np.abs(z) / math.sqrt(2.0)
    t = 1.0 / (1.0 + 0.3275911 * x)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    erf = 1.0 - poly * np.exp(-x * x)
    return 0.5 * (1.0 + np.sign(z) * erf)


class LocalSearch:
    """Hill climbing from the best so far: try the neighbours that change one parameter to the
    next value in its list; when none is better, restart from a random untried configuration."""

    name = "local"

    def __init__(self, space: Space, seed: int = 0, done: Iterable[str] = (), first: Config | None = None):
        self.rng = random.Random(seed)
        self.configs = list(space.configs)
        self.by_key = {c.key: c for c in self.configs}
        self.tried: set[str] = set(done)
        self.times: dict[str, float] = {}
        self.center: Config | None = first if first is not None and first.key in self.by_key else None
        self.queue: list[Config] = []
        self.values = {}
        if self.configs:
            for j, (name, _) in enumerate(self.configs[0].items):
                self.values[name] = sorted({c.items[j][1] for c in self.configs}, key=lambda v: (str(type(v)), v))

    def _neighbours(self, c: Config) -> list[Config]:
        out = []
        d = c.as_dict()
        for name, vals in self.values.items():
            i = vals.index(d[name])
            for j in (i - 1, i + 1):
                if 0 <= j < len(vals):
                    n = Config.of({**d, name: vals[j]})
                    if n.key in self.by_key and n.key not in self.tried:
                        out.append(self.by_key[n.key])
        self.rng.shuffle(out)
        return out

    def propose(self) -> Config | None:
        while True:
            if self.center is None or self.center.key not in self.tried:
                if self.center is not None and self.center.key not in self.tried:
                    c = self.center
                else:
                    rest = [c for c in self.configs if c.key not in self.tried]
                    if not rest:
                        return None
                    c = self.rng.choice(rest)
                    self.center = c
                self.tried.add(c.key)
                return c
            while self.queue:
                c = self.queue.pop(0)
                if c.key not in self.tried:
                    self.tried.add(c.key)
                    return c
            nxt = self._neighbours(self.center)
            if nxt:
                self.queue = nxt
                continue
            self.center = None  # a local optimum: restart

    def observe(self, config: Config, result: Result) -> None:
        self.tried.add(config.key)
        if not result.ranked:
            return
        self.times[config.key] = result.median_us
        if self.center is None or result.median_us < self.times.get(self.center.key, math.inf):
            self.center = config
            self.queue = []  # move: look around the new best


@dataclass(frozen=True)
class StopRules:
    """When a search stops, whatever the strategy: evaluations, seconds, close enough to the
    speed of light, or no improvement for `patience` evaluations (0 turns a rule off)."""

    budget: int = 0
    seconds: float = 0.0
    sol_target: float = 0.0
    patience: int = 0

    def reason(self, evaluated: int, elapsed: float, best_sol_fraction: float | None,
               since_improvement: int) -> str | None:
        if self.budget and evaluated >= self.budget:
            return f"budget of {self.budget} evaluations reached"
        if self.seconds and elapsed >= self.seconds:
            return f"time limit of {self.seconds:g} s reached"
        if self.sol_target and best_sol_fraction is not None and best_sol_fraction >= self.sol_target:
            return f"within {100 * (1 - self.sol_target):.0f}% of the speed of light"
        if self.patience and since_improvement >= self.patience:
            return f"no improvement in {self.patience} evaluations"
        return None
