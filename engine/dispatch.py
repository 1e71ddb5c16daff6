"""A dispatch set: the fewest configurations that keep every size served within a tolerance of
its own best.

One general configuration for every size loses speed where the sizes want different shapes (a
decode size of 64 tokens and a prefill size of 2048). A dispatch set ships one configuration
per group of sizes instead: a configuration *covers* a size when it was verified there, its time
is within the tolerance of the size's best, and it is no slower than the original there. The set
is the smallest whose members cover every size (exhaustively, among each size's leaders and the
original); among sets of that size, the best geometric mean of speedups over the original, then
the least total time. Each size is then served by the member fastest there.

Plain data in and out (engine/campaign.py gives the times its sessions hold), so that it can be
computed again from any recording.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

TOLERANCE = 0.03
# Past this many subsets of one size the search goes greedy (each step the configuration that
# covers the most sizes not yet covered).
MAX_SUBSETS = 200_000


@dataclass(frozen=True)
class Cover:
    """One size served by the dispatch set: the member that serves it and the times it is judged on."""

    size: str
    config: Mapping[str, Any]
    member: int  # its index in DispatchSet.configs
    time_us: float
    best_us: float
    original_us: float | None
    general_us: float | None


@dataclass(frozen=True)
class DispatchSet:
    """The configurations shipped, which size each serves, and what it gains over one general
    configuration (geometric means of speedups over the original)."""

    tolerance: float
    configs: tuple[Mapping[str, Any], ...]
    covers: tuple[Cover, ...]
    geomean: float | None
    general_geomean: float | None
    notes: tuple[str, ...] = ()

    def covered_by(self, member: int) -> list[str]:
        return [c.size for c in self.covers if c.member == member]


def choose_dispatch(sizes: Sequence[str], candidates: Mapping[str, Mapping[str, Any]],
                    times: Mapping[str, Sequence[float | None]], best: Sequence[float | None],
                    original: Sequence[float | None], general: str | None = None,
                    tolerance: float = TOLERANCE) -> DispatchSet | None:
    """The dispatch set over `sizes`. `candidates` maps a configuration's key to it, `times[key]`
    gives its verified median at each size (None where it was not verified), `best` each size's
    fastest verified time, `original` the original's (None where it has none), `general` the
    key of the general configuration. None when a size has no verified time at all."""
    n = len(sizes)
    if n == 0 or any(b is None for b in best):
        return None

    def covers(key: str, i: int) -> bool:
        t = times[key][i]
        return t is not None and t <= (1 + tolerance) * best[i] and (original[i] is None or t <= original[i])

    cover_sets = {key: frozenset(i for i in range(n) if covers(key, i)) for key in candidates}
    keys = sorted((k for k, c in cover_sets.items() if c), key=lambda k: (-len(cover_sets[k]), k))
    everything = frozenset(range(n))

    def score(chosen: Sequence[str]) -> tuple:
        served = [min((times[k][i] for k in chosen if i in cover_sets[k]), default=math.inf) for i in range(n)]
        return (-geomean([original[i] / t if original[i] else best[i] / t for i, t in enumerate(served)]),
                sum(served), sorted(chosen))

    found: list[str] | None = None
    for k in range(1, n + 1):
        if math.comb(len(keys), k) > MAX_SUBSETS:
            found = _greedy(keys, cover_sets, everything)
            break
        sets = [list(c) for c in itertools.combinations(keys, k) if frozenset().union(*(cover_sets[x] for x in c))
                == everything]
        if sets:
            found = min(sets, key=score)
            break
    if not found:
        return None
    members = sorted(found, key=lambda k: min(cover_sets[k]))
    out = []
    for i, size in enumerate(sizes):
        m = min((j for j, k in enumerate(members) if i in cover_sets[k]), key=lambda j: times[members[j]][i])
        out.append(Cover(size, dict(candidates[members[m]]), m, float(times[members[m]][i]), float(best[i]),
                         original[i], times[general][i] if general is not None else None))
    speedups = [(c.original_us or c.best_us) / c.time_us for c in out]
    general_speedups = [(c.original_us or c.best_us) / c.general_us if c.general_us else 0.0 for c in out]
    notes = []
    if general is not None and len(members) > 1:
        for c in out:
            if c.general_us and c.general_us > c.time_us:
                notes.append(f"at {c.size} one general configuration is {c.general_us / c.time_us - 1:.0%} slower "
                             "than the dispatch set")
    return DispatchSet(tolerance, tuple(dict(candidates[k]) for k in members), tuple(out), geomean(speedups),
                       geomean(general_speedups) if general is not None else None, tuple(notes))


def _greedy(keys: Sequence[str], cover_sets: Mapping[str, frozenset], everything: frozenset) -> list[str]:
    chosen: list[str] = []
    left = set(everything)
    while left:
        k = max(keys, key=lambda x: (len(cover_sets[x] & left), -keys.index(x)))
        if not cover_sets[k] & left:
            break
        chosen.append(k)
        left -= cover_sets[k]
    return chosen


def geomean(values: Sequence[float]) -> float:
    """The geometric mean of positive values (0 when one is not)."""
    if not values or any(v <= 0 or not math.isfinite(v) for v in values):
        return 0.0
    return math.exp(sum(math.log(v) for v in values) / len(values))
