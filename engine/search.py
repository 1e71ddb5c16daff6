"""Search strategies: they propose configurations from a feasible space and receive results.

Every strategy proposes only configurations of the space it was given (so never an infeasible
one), never proposes one twice, and skips those already evaluated (a resumed session).
"""

from __future__ import annotations

import itertools
import math
import os
import random
import sys
from dataclasses import dataclass, replace
from typing import Any, Iterable, Protocol

from .energy import cost
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
    """Walk a fixed order of the space, skipping what is already done. Configurations are
    compared as they are (a tuple's hash), not by their text: formatting a key for every step of
    a walk through thousands of them is most of what the walk would cost."""

    name = ""

    def __init__(self, order: list[Config], done: Iterable[str] = ()):
        self._order = order
        done = set(done)
        self._done: set[Config] = {c for c in order if c.key in done} if done else set()
        self._pos = 0

    def propose(self) -> Config | None:
        while self._pos < len(self._order):
            c = self._order[self._pos]
            self._pos += 1
            if c not in self._done:
                self._done.add(c)
                return c
        return None

    def observe(self, config: Config, result: Result) -> None:
        self._done.add(config)

    @property
    def remaining(self) -> int:
        return sum(1 for c in self._order[self._pos:] if c not in self._done)


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


class ByObjective:
    """A strategy that minimises energy (or the energy-delay product) instead of time: the inner
    strategy, which learns from a result's median, sees each result with its cost in that place
    (engine/energy.py `cost`), and one without a cost as not ranked."""

    def __init__(self, inner: Strategy, objective: str):
        self.inner = inner
        self.objective = objective

    def __getattr__(self, name: str) -> Any:  # name, lookahead, ...: the inner strategy's
        return getattr(self.inner, name)

    def propose(self) -> Config | None:
        return self.inner.propose()

    def observe(self, config: Config, result: Result) -> None:
        self.inner.observe(config, replace(result, median_us=cost(result, self.objective)))


def make_strategy(name: str, space: Space, *, seed: int = 0, done: Iterable[str] = (),
                  first: Config | None = None) -> Strategy:
    """A strategy by name; `first` (the default configuration) is proposed before anything else."""
    if name == "grid":
        return GridSearch(space, done, first)
    if name == "random":
        return RandomSearch(space, seed, done, first)
    if name == "model":
        return ModelGuided(space, seed, done, first)
    if name == "local":
        return LocalSearch(space, seed, done, first)
    raise ValueError(f"unknown strategy {name!r} (known: {', '.join(STRATEGIES)})")


class _Places:
    """What the model-guided and the local search share: the space as a list, each configuration
    known by its place in it (a look-up, not a pass over the space), the places tried so far.

    The places tried are a bytearray (1 for tried), not a numpy array: the local search needs no
    numpy, and importing it was a tenth of a second of `kerntune simulate --strategy local`. The
    model-guided search reads the same bytes as a numpy array (`ModelGuided._mask`)."""

    def __init__(self, space: Space, seed: int, done: Iterable[str]):
        self.configs = list(space.configs)
        self.rng = random.Random(seed)
        self._at = {c: i for i, c in enumerate(self.configs)}
        self._by_key: dict[str, int] | None = None  # built only when a key is looked up
        self._tried = bytearray(len(self.configs))
        self._tried_count = 0
        self._marked: list[int] = []  # tried places, in order
        for k in done:
            i = self._index_of_key(k)
            if i is not None:
                self._mark(i)

    def _index(self, config: Config) -> int | None:
        i = self._at.get(config)
        return i if i is not None else self._index_of_key(config.key)

    def _index_of_key(self, key: str) -> int | None:
        if self._by_key is None:
            self._by_key = {c.key: i for i, c in enumerate(self.configs)}
        return self._by_key.get(key)

    def _mark(self, i: int) -> None:
        if not self._tried[i]:
            self._tried[i] = 1
            self._tried_count += 1
            self._marked.append(i)

    def _random_untried(self) -> int | None:
        n = len(self.configs)
        if self._tried_count >= n:
            return None
        for _ in range(64):
            i = self.rng.randrange(n)
            if not self._tried[i]:
                return i
        # the k-th untried place, k drawn over all of them (the places in order, as numpy's
        # flatnonzero gave them: the same draw gives the same place)
        k = self.rng.randrange(n - self._tried_count)
        return next(itertools.islice(itertools.compress(range(n), self._tried.translate(_UNTRIED)), k, None))


_UNTRIED = bytes.maketrans(b"\x00\x01", b"\x01\x00")  # the tried bytes turned into untried ones


def _features(configs: list[Config]):
    """Each configuration as a point in [0, 1]^d: log2 of positive numeric values, else the index
    of the value in its list, scaled per parameter over the space."""
    import numpy as np

    if not configs:
        return np.zeros((0, 0))
    cols = []
    for items in zip(*(c.items for c in configs)):  # one parameter's (name, value) in each config
        values = [v for _, v in items]
        if {type(v) for v in values} <= {int, float} and min(values) > 0:  # a bool is not a number
            col = np.log2(np.asarray(values, dtype=float))
        else:
            order = {v: i for i, v in enumerate(dict.fromkeys(sorted(values, key=str)))}
            col = np.asarray([order[v] for v in values], dtype=float)
        span = col.max() - col.min()
        cols.append((col - col.min()) / span if span > 0 else np.zeros_like(col))
    return np.stack(cols, axis=1)


_BLAS = None


def _import_numpy():
    """numpy, for the model. When the model is the first to import it, OpenBLAS starts its thread
    pool at one thread: the model runs BLAS on one thread anyway (`_one_blas_thread`), and starting
    the pool's other threads took 60 ms of `kerntune simulate --strategy model` on a 2-core
    machine. The setting holds for the import only (processes started later do not inherit it);
    one the user made is left as it is."""
    if "numpy" in sys.modules or "OPENBLAS_NUM_THREADS" in os.environ:
        import numpy
        return numpy
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    try:
        import numpy
    finally:
        del os.environ["OPENBLAS_NUM_THREADS"]
    return numpy


def _one_blas_thread():
    """A context in which BLAS (numpy's matrix products and factorisations) runs on one thread.

    The model's products are small (a few hundred rows at most), so a second thread only adds
    synchronisation, and where the cores are shared (compiling workers, other jobs) OpenBLAS's
    threads wait on each other: on a busy 2-core machine a batched Cholesky of 5 x 129 x 129
    took 8-85 ms on two threads against 0.5 ms on one."""
    global _BLAS
    if _BLAS is None:
        from threadpoolctl import ThreadpoolController

        _BLAS = ThreadpoolController()
    return _BLAS.limit(limits=1, user_api="blas")


def _kernel_rows(xa, sqa, x, sq, length: float):
    """Squared-exponential kernel between points `xa` and `x` (their squared norms given)."""
    import numpy as np

    d2 = np.clip(sqa[:, None] + sq[None, :] - 2.0 * (xa @ x.T), 0.0, None)
    return np.exp(-0.5 * d2 / length**2)


class _Posterior:
    """An exact Gaussian process on log-time over a fixed set of configurations (its columns) at
    one length scale, grown by blocks of observations.

    It keeps V = L^-1 K(observed, columns), L the Cholesky factor of the observed configurations'
    covariance. Adding k observations is one step of a blocked Cholesky: O(n k C) for n observed
    and C columns, one matrix product, against O(n^3 + n^2 C) to refit from scratch; the posterior
    mean and variance of every column follow in O(k C)."""

    def __init__(self, x, columns, length: float, noise: float, size: int, capacity: int = 16):
        import numpy as np

        self._np = np
        self.columns = columns
        self.pos = np.full(size, -1, dtype=np.int64)  # space index -> column, -1 if not a column
        self.pos[columns] = np.arange(columns.size)
        self.x = x[columns]
        self.sq = (self.x * self.x).sum(1)
        self.length = length
        self.noise = noise
        self.rows: list[int] = []  # the observed configurations (space indices), in order
        self.missing: list[int] = []  # observed configurations it could not take: not columns
        # room for `capacity` observations, allocated once: growing copies the whole of V
        self._v = np.empty((capacity, columns.size))
        self._y = np.empty((capacity, 2))  # (log-time, 1) of each observation
        self._z = np.empty((capacity, 2))  # L^-1 _y
        # V^T z: the posterior mean of standardised log-time combines the two (see `predict`)
        self.a = np.zeros((columns.size, 2))
        self.var = np.ones(columns.size)  # prior variance 1 minus what the observations explain

    @property
    def n(self) -> int:
        return len(self.rows)

    def has(self, i: int) -> bool:
        return self.pos[i] >= 0

    def add(self, idx: list[int], y) -> None:
        """Condition on the log-times `y` of configurations `idx` (all of them columns)."""
        np = self._np
        if not idx:
            return
        cols = self.pos[idx]
        n, k = self.n, len(idx)
        if n + k > self._v.shape[0]:
            cap = max(16, 2 * (n + k))
            for name in ("_v", "_y", "_z"):
                old = getattr(self, name)
                grown = np.empty((cap, old.shape[1]))
                grown[:n] = old[:n]
                setattr(self, name, grown)
        w = _kernel_rows(self.x[cols], self.sq[cols], self.x, self.sq, self.length)  # K(new, columns)
        y2 = np.stack([np.asarray(y, dtype=float), np.ones(k)], axis=1)
        rhs = y2
        if n:
            l = self._v[:n, cols]  # L^-1 K(observed, new): already kept, as these columns of V
            w -= l.T @ self._v[:n]
            rhs = y2 - l.T @ self._z[:n]
        # w's own block is now K(new, new) - l^T l: what the observed leave of the new points'
        # covariance; with the noise it is the new diagonal block of L L^T
        s = w[:, cols] + self.noise * np.eye(k)
        s = 0.5 * (s + s.T)
        if k == 1:  # one observation at a time, the common case: no factorisation to call
            d = math.sqrt(max(float(s[0, 0]), self.noise))  # the exact s is at least the noise
            v, z = w / d, rhs / d
        else:
            jitter = self.noise
            while True:
                try:
                    l22 = np.linalg.cholesky(s)
                    break
                except np.linalg.LinAlgError:  # only rounding: the exact s is at least noise * I
                    s += jitter * np.eye(k)
                    jitter *= 10
            # the new rows of V and z are l22^-1 (w, rhs): inverting the small k x k factor once
            # and multiplying is much cheaper than a general solve with C right-hand sides
            inv = np.linalg.inv(l22)
            v, z = inv @ w, inv @ rhs
        self._v[n:n + k] = v
        self._y[n:n + k] = y2
        self._z[n:n + k] = z
        self.a += v.T @ z
        self.var -= (v * v).sum(0)
        self.rows.extend(idx)

    def predict(self):
        """Posterior mean and standard deviation of every column, and the best observed value,
        in units of the observed log-times standardised."""
        np = self._np
        y = self._y[:self.n, 0]
        mu, sd = y.mean(), y.std() or 1.0
        mean = (self.a[:, 0] - mu * self.a[:, 1]) / sd
        return mean, np.sqrt(np.clip(self.var, 1e-12, None)), (y.min() - mu) / sd


def _evidences(x, y, lengths: tuple[float, ...], noise: float):
    """Log marginal likelihood (up to a constant) of standardised `y` at points `x` under the
    squared-exponential kernel at each length scale, from one batched Cholesky factorisation.

    K bordered by y, [[K, y], [y^T, c]], has as its last Cholesky pivot c - y^T K^-1 y, the
    quadratic term, so no triangular solve is needed (numpy has none; its general solve on small
    matrices is slow, ~12 ms at 128 points where BLAS threads compete for two cores). c = |y|^2 /
    noise + 1 exceeds y^T K^-1 y because K >= noise * I."""
    import numpy as np

    n = len(y)
    sq = (x * x).sum(1)
    d2 = np.clip(sq[:, None] + sq[None, :] - 2.0 * (x @ x.T), 0.0, None)
    c = float(y @ y) / noise + 1.0
    m = np.empty((len(lengths), n + 1, n + 1))
    for j, length in enumerate(lengths):
        m[j, :n, :n] = np.exp(-0.5 * d2 / length**2)
    m[:, :n, :n] += noise * np.eye(n)
    m[:, :n, n] = y
    m[:, n, :n] = y
    m[:, n, n] = c
    try:
        diag = np.diagonal(np.linalg.cholesky(m), axis1=1, axis2=2)
    except np.linalg.LinAlgError:  # rounding at some scale: that one is out, the others count
        fits = np.full(len(lengths), -np.inf)
        for j in range(len(lengths)):
            try:
                d = np.diagonal(np.linalg.cholesky(m[j]))
            except np.linalg.LinAlgError:
                continue
            fits[j] = -0.5 * (c - d[n] ** 2) - np.log(d[:n]).sum()
        return fits
    return -0.5 * (c - diag[:, n] ** 2) - np.log(diag[:, :n]).sum(1)


class ModelGuided(_Places):
    """Bayesian optimisation over the feasible configurations: a Gaussian process on the
    log-time of the configurations that ran, with expected improvement choosing the next among
    those not yet evaluated. Figures: bench/results/search-cpu.md.

    It starts from the default configuration and a space-filling design (`_spread_untried`). A configuration
    that failed is never proposed again but stays out of the time model: the fastest
    configurations tend to sit at the edge of the resource limits (the largest tiles that still
    fit), beside ones that fail, and a failure counted as "much slower" (twice the slowest, as
    this model once did) steers it away from that edge. On the recorded matmul space (22% of it
    fails) that took a median of 858.5 evaluations to come within 3% of the best (20 seeds);
    leaving failures out, 190.5 (40 seeds, random start). Weighting the improvement by a failure
    model fitted on nearby outcomes did worse (232-688 by its length scale), for the same reason.

    A proposal costs O(n C) for n observations in the model and C configurations scored, not the
    O(n^3 + n^2 C) of a refit: the model is updated incrementally (`_Posterior`), 0.4 ms at
    n = 350 on matmul's 3876 configurations (the refit took 130 ms at 300 observations, 700 ms
    at 1000). What would need a refit (another length scale, fewer observations, other
    configurations to score) is built beside the model, `block` observations per proposal, and
    replaces it once caught up, so no single proposal pays for a whole refit. Bounds: at most
    `max_train` observations in the model (past that, the best quarter and the most recent
    quarter are kept; on matmul the median is 160 with the bound and without it, 40 seeds), and
    in a space larger than `pool`, a random pool of that many untried configurations is scored."""

    name = "model"

    LENGTHS = (0.15, 0.25, 0.4, 0.7, 1.2)
    # Configurations out at once after the start: the device's queue and a compile ahead of it
    # (compiling takes a few times as long as measuring), not a dozen compile processes' worth.
    WINDOW = 6
    NOISE = 1e-3
    # The length scale that best explains the most recent FIT_ROWS observations (marginal
    # likelihood) is re-chosen at every observation up to 32, then every REFIT_EVERY: by then the
    # evidence moves slowly; the 5 fits of 128 points cost ~0.5 ms on one CPU core.
    FIT_ROWS = 128
    REFIT_EVERY = 8

    def __init__(self, space: Space, seed: int = 0, done: Iterable[str] = (), first: Config | None = None,
                 initial: int = 0, *, max_train: int = 512, pool: int = 8192, block: int = 16,
                 window: int = WINDOW):
        super().__init__(space, seed, done)
        np = self._np = _import_numpy()
        self._mask = np.frombuffer(self._tried, dtype=np.bool_)  # the places tried, as numpy sees them
        self.x = _features(self.configs)
        n = len(self.configs)
        self._pool_rng = np.random.default_rng(seed)
        self.max_train, self.pool, self.block = max(8, max_train), max(8, pool), max(1, block)
        self.window = max(1, window)
        self._all = np.arange(n)
        self._sq = (self.x * self.x).sum(1)
        self._gap = None  # squared distance of each configuration to the nearest tried one
        self._gap_upto = 0  # how many of _marked _gap has taken in
        self.obs: dict[int, float | None] = {}  # log-time, None for a failure
        self._ranked = 0
        self._fresh: list[int] = []  # observed, not yet given to the models
        self.initial = initial or min(n, max(4, min(10, n // 50)))
        self._first = self._index(first) if first is not None else None
        self._gp: _Posterior | None = None
        self._next: _Posterior | None = None  # the model being built to replace _gp
        self._queue: list[int] = []  # what _next still has to take, in order
        self._fitted_at = 0

    # -- the Strategy protocol --

    def propose(self) -> Config | None:
        if self._tried_count >= len(self.configs):
            return None
        with _one_blas_thread():
            if self._tried_count < self.initial or self._ranked < 2:
                i = self._spread_untried()
            else:
                i = self._best_candidate()
        self._mark(i)
        return self.configs[i]

    def observe(self, config: Config, result: Result) -> None:
        i = self._index(config)
        if i is None:
            return
        self._mark(i)
        if i in self.obs:
            return  # the model takes each configuration once
        self.obs[i] = math.log(result.median_us) if result.ranked else None
        self._ranked += result.ranked
        self._fresh.append(i)

    @property
    def lookahead(self) -> int | None:
        """How many configurations it wants out at once (engine/driver.py): any number for its
        start (the default configuration and the space-filling design need no result), then `window`, so that
        each proposal is made from the results of all but the last few. A run compiling ahead in
        a dozen processes kept 28 out: with a budget of 30, every proposal was made before the
        first result came back, and the model never chose one."""
        return None if self._tried_count < self.initial else self.window

    @property
    def model_size(self) -> int:
        """Observations the time model is conditioned on now (at most `max_train`)."""
        return self._gp.n if self._gp is not None else 0

    # -- proposals --

    def _spread_untried(self) -> int:
        """The start: the default configuration, then each time the untried configuration farthest from all
        tried ones (maximin, ties at random). Such a design covers the space's extremes, where the
        fastest configurations often lie (widest vectors, largest tiles, most work per thread):
        on the recorded spaces it needs a median of 6 evaluations (200 seeds) where random starts
        needed 16 (silu_and_mul) and 27 (softmax), and 160 instead of 190.5 on matmul (40 seeds).
        It costs the same `initial` evaluations as random picks."""
        np = self._np
        if self._first is not None and not self._tried[self._first]:
            return self._first
        if not self._marked:
            return self._random_untried()
        if self._gap is None:
            self._gap = np.full(len(self.configs), np.inf)
        step = max(1, (1 << 22) // len(self.configs))  # distances held at once: ~4M
        for s in range(self._gap_upto, len(self._marked), step):
            t = self._marked[s:s + step]
            d2 = self._sq[:, None] + self._sq[t][None, :] - 2.0 * (self.x @ self.x[t].T)
            np.minimum(self._gap, d2.min(1), out=self._gap)
        self._gap_upto = len(self._marked)
        gap = np.where(self._mask, -np.inf, self._gap)
        top = np.flatnonzero(gap >= gap.max() - 1e-12)
        return int(top[self.rng.randrange(top.size)])

    def _best_candidate(self) -> int:
        np = self._np
        self._sync()
        open_ = ~self._mask[self._gp.columns]
        if not open_.any() and self._next is not None:
            self._feed(len(self._queue))  # the model being built scores other configurations
            open_ = ~self._mask[self._gp.columns]
        if not open_.any():
            return self._random_untried()
        mean, sd, best = self._gp.predict()
        z = (best - mean) / sd
        ei = sd * (z * _ncdf(z) + np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi))
        ei[~open_] = -np.inf
        top = np.flatnonzero(ei >= ei.max() - 1e-12)
        return int(self._gp.columns[top[self.rng.randrange(top.size)]])

    # -- keeping the models up to date --

    def _ran(self, idx: list[int]) -> list[int]:
        return [i for i in idx if self.obs[i] is not None]

    def _give(self, gp: _Posterior, idx: list[int]) -> None:
        ran = self._ran(idx)
        take = [i for i in ran if gp.has(i)]
        gp.missing.extend(i for i in ran if not gp.has(i))
        gp.add(take, [self.obs[i] for i in take])

    def _sync(self) -> None:
        fresh, self._fresh = self._fresh, []
        if self._gp is None:
            rows = self._ran(list(self.obs))
            if len(rows) > self.max_train:
                rows = self._kept(rows)
            self._gp = self._new_model(rows, self._length(rows))
            self._fitted_at = len(rows)
            for s in range(0, len(rows), 256):
                self._give(self._gp, rows[s:s + 256])
            return
        self._give(self._gp, fresh)
        if self._next is not None:
            self._queue.extend(self._ran(fresh))
        gp = self._gp
        n = gp.n
        slack = self.max_train // 8
        if n >= self.max_train - slack and (
                self._next is None or self._next.n + len(self._queue) > self.max_train // 2 + slack):
            # early enough that the smaller model catches up (half of max_train, `block` a
            # proposal) before this one reaches the bound; it replaces a rebuild at full size
            rows = self._kept(gp.rows + gp.missing)
            self._start(rows, self._length(rows))
        elif self._next is None:
            if self._pool_stale(gp):
                self._start(gp.rows + gp.missing, gp.length)
            elif n != self._fitted_at and (n <= 32 or n - self._fitted_at >= self.REFIT_EVERY):
                self._fitted_at = n
                length = self._length(gp.rows)
                if length != gp.length:
                    self._start(gp.rows, length)
        if self._next is not None:
            # a small model is built at once (early on, a new length scale applies at once); a
            # model may not outgrow its bound while its replacement is being built
            whole = len(self._queue) <= self.block or gp.n >= self.max_train
            self._feed(len(self._queue) if whole else self.block)

    def _start(self, rows: list[int], length: float) -> None:
        self._next = self._new_model(rows, length)
        self._queue = list(rows)

    def _feed(self, count: int) -> None:
        take, self._queue = self._queue[:count], self._queue[count:]
        self._give(self._next, take)
        if not self._queue:
            self._gp, self._next = self._next, None
            self._fitted_at = self._gp.n

    def _new_model(self, rows: list[int], length: float) -> _Posterior:
        return _Posterior(self.x, self._columns(rows), length, self.NOISE, len(self.configs),
                          capacity=self.max_train + 2 * self.block)

    def _columns(self, rows: list[int]):
        """The configurations a new model scores: all of them, or in a space larger than the
        pool, the observed ones, the proposed ones still to be observed, the current model's
        untried ones (what it may still propose while the new one is built), and random untried
        ones up to the pool's size."""
        np = self._np
        n = len(self.configs)
        if n <= self.pool:
            return self._all
        keep = self._mask.copy()
        if self._gp is not None:
            keep[self._gp.columns] = True
        rest = np.flatnonzero(~keep)
        room = self.pool - int((~self._mask[keep]).sum())
        if room > 0 and rest.size:
            keep[self._pool_rng.choice(rest, size=min(room, rest.size), replace=False)] = True
        return np.flatnonzero(keep)

    def _pool_stale(self, gp: _Posterior) -> bool:
        """In a space larger than the pool: observations outside it, or few untried left in it."""
        if gp.columns is self._all:
            return False
        open_in_pool = int((~self._mask[gp.columns]).sum())
        open_outside = len(self.configs) - self._tried_count - open_in_pool
        return bool(gp.missing) or (open_outside > 0 and open_in_pool < self.pool // 4)

    def _kept(self, rows: list[int]) -> list[int]:
        """The observations a model past its bound keeps: the best quarter of `max_train` (the
        model's detail where it matters) and the most recent ones up to half of it."""
        keep = set(sorted(rows, key=lambda i: self.obs[i])[:self.max_train // 4])
        for i in reversed(rows):
            if len(keep) >= self.max_train // 2:
                break
            keep.add(i)
        return [i for i in rows if i in keep]

    def _length(self, rows: list[int]) -> float:
        """The length scale that best explains the most recent observations (marginal likelihood)."""
        np = self._np
        rows = rows[-self.FIT_ROWS:]
        y = np.asarray([self.obs[i] for i in rows])
        ys = (y - y.mean()) / (y.std() or 1.0)
        return self.LENGTHS[int(np.argmax(_evidences(self.x[rows], ys, self.LENGTHS, self.NOISE)))]


def _ncdf(z):
    """The standard normal CDF, vectorised (Abramowitz and Stegun 7.1.26, error < 1.5e-7)."""
    import numpy as np

    x = np.abs(z) / math.sqrt(2.0)
    t = 1.0 / (1.0 + 0.3275911 * x)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    erf = 1.0 - poly * np.exp(-x * x)
    return 0.5 * (1.0 + np.sign(z) * erf)


class LocalSearch(_Places):
    """Hill climbing from the best so far: try the neighbours that change one parameter to the
    next value in its list; when none is better, restart from a random untried configuration.

    Configurations are handled by their place in the space: a step costs a few dictionary
    look-ups, not a pass over the space."""

    name = "local"

    def __init__(self, space: Space, seed: int = 0, done: Iterable[str] = (), first: Config | None = None):
        super().__init__(space, seed, done)
        self.times: dict[int, float] = {}
        self.center: int | None = self._index(first) if first is not None else None
        self.queue: list[int] = []
        # each parameter's values in order, and each value's place in that order
        self._order: list[tuple[list, dict]] = []
        if self.configs:
            for j in range(len(self.configs[0].items)):
                vals = sorted({c.items[j][1] for c in self.configs}, key=lambda v: (str(type(v)), v))
                self._order.append((vals, {v: p for p, v in enumerate(vals)}))

    def _neighbours(self, c: int) -> list[int]:
        out = []
        items = self.configs[c].items
        for j, (vals, place) in enumerate(self._order):
            p = place[items[j][1]]
            for q in (p - 1, p + 1):
                if 0 <= q < len(vals):
                    n = self._at.get(Config(items[:j] + ((items[j][0], vals[q]),) + items[j + 1:]))
                    if n is not None and not self._tried[n]:
                        out.append(n)
        self.rng.shuffle(out)
        return out

    def propose(self) -> Config | None:
        while True:
            if self.center is None or not self._tried[self.center]:
                if self.center is not None:
                    c = self.center
                else:
                    c = self._random_untried()
                    if c is None:
                        return None
                    self.center = c
                self._mark(c)
                return self.configs[c]
            while self.queue:
                c = self.queue.pop(0)
                if not self._tried[c]:
                    self._mark(c)
                    return self.configs[c]
            nxt = self._neighbours(self.center)
            if nxt:
                self.queue = nxt
                continue
            self.center = None  # a local optimum: restart

    def observe(self, config: Config, result: Result) -> None:
        i = self._index(config)
        if i is None:
            return
        self._mark(i)
        if not result.ranked:
            return
        self.times[i] = result.median_us
        if self.center is None or result.median_us < self.times.get(self.center, math.inf):
            self.center = i
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
