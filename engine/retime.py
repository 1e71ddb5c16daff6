"""Paired, interleaved re-timing of the leaders with the original, and the verdict it supports.

Each configuration's own timing is careful, but two configurations timed a minute apart were not
timed under the same conditions: a clock that moved, another process, a warmer device. At the end
of a run the leaders (the fastest, every configuration whose timing interval overlaps it, at
least the three fastest) and the original (the template's default configuration) are timed again
together, in the worker: in each round every one of them is timed in turn, in an order drawn anew
each round, on the same input sets (each launch on a changed copy, as every timed launch is), each
with the protocol's own timing (engine/timing.py `measure`: the cache flushed, the outputs
poisoned and timed launches checked), so a re-timing launch looks to a kernel exactly like any
other.

What each round gives is a ratio per configuration (the original's time over its time, in that
round), and the verdict comes from the ratios, never from times taken apart:

- a speedup is the median of its per-round ratios, with a 95% interval from their order
  statistics (the binomial interval of the median: no assumption about the shape of the noise);
- a configuration is *tied* with the fastest when the interval of its per-round ratio to the
  fastest reaches within MARGIN of 1 (the two cannot be told apart); programs built to the same
  binary are tied whatever their times;
- among tied configurations the one reported is the original when it is among them, else the
  simplest: the fewest parameters changed from the default, then the smallest steps along the
  parameters' value lists, then the configuration's text; the same choice on every run;
- a configuration is reported over the original only when its speedup's interval lies above
  1 + MARGIN: ties need not chain (A tied with the fastest, the original tied with A but not with
  the fastest), and a gain that cannot be told from 2% is not worth changing the user's kernel.
"""

from __future__ import annotations

import hashlib
import math
import random
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, Sequence

from .result import Rejected, Result, config_key

# Rounds of the paired re-timing, and the fewest that give a 95% interval of the median (with 6,
# the smallest and the largest ratio hold the median with 96.9% confidence).
ROUNDS = 10
MIN_ROUNDS = 6
# Configurations re-timed besides the original: the fastest three at least, at most this many.
TOP = 3
MAX_LEADERS = 8
# Two configurations whose paired ratio may be within this fraction of 1 are not told apart.
MARGIN = 0.02
# Device time the re-timing spends, spread over its rounds and configurations (seconds), and the
# launches timed per configuration in a round (their median is the round's time).
BUDGET_S = 0.5
MIN_LAUNCHES = 3
MAX_LAUNCHES = 25
CONFIDENCE = 0.95


# the statistics -------------------------------------------------------------------------------

def median_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """(low, median, high): the median of `values` with the order statistics' interval that holds
    the true median with at least `confidence` (the widest, min to max, when there are too few)."""
    xs = sorted(values)
    n = len(xs)
    if n == 0:
        raise ValueError("no values")
    mid = xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])
    k = _rank(n, confidence)
    return xs[k - 1], mid, xs[n - k]


def _rank(n: int, confidence: float) -> int:
    """The largest k (1-based) such that [x(k), x(n+1-k)] holds the median with `confidence`
    (1 when even the smallest and the largest do not)."""
    k, below = 1, 0.5**n  # below: P(Binomial(n, 1/2) <= k - 1)
    while k + 1 <= (n + 1) // 2:
        wider = below + math.comb(n, k) * 0.5**n  # P(B <= k): [x(k+1), x(n-k)] misses twice that
        if 1 - 2 * wider < confidence:
            break
        k, below = k + 1, wider
    return k


def ratios(numerators: Sequence[float], denominators: Sequence[float]) -> list[float]:
    """Per-round ratios of two configurations' times (rounds where either has no time are left out)."""
    return [a / b for a, b in zip(numerators, denominators) if a > 0 and b > 0]


def simplicity(config: Mapping[str, Any], default: Mapping[str, Any],
               values: Mapping[str, Sequence[Any]]) -> tuple:
    """How far a configuration is from the default, smallest first: the number of parameters
    changed, then the steps along each parameter's value list, then its text (so that the order
    is total and the same on every run)."""
    changed = sum(1 for k, v in config.items() if default.get(k) != v)
    steps = 0
    for k, v in config.items():
        listed = list(values.get(k, ()))
        if v in listed and default.get(k) in listed:
            steps += abs(listed.index(v) - listed.index(default[k]))
        elif default.get(k) != v:
            steps += 1
    return changed, steps, config_key(config)


# which configurations are re-timed --------------------------------------------------------------

def timing_interval(r: Result) -> tuple[float, float]:
    """A result's own interval of its median time, from its raw times."""
    if len(r.times_us) >= 2:
        low, _, high = median_interval(r.times_us)
        return low, high
    return r.median_us or 0.0, r.median_us or 0.0


def measure_cost_s(r: Result, launches: int) -> float:
    """Seconds one timing of `launches` launches of a configuration takes, checks and restores
    included, from its own timing (time_s over its launches and warm-up)."""
    return r.time_s * (launches + 1) / max(len(r.times_us) + 1, 1)


def affordable(lead: Sequence[Result], wall_s: float, original: Result | None = None,
               launches: int = MIN_LAUNCHES) -> list[Result]:
    """The leaders that MIN_ROUNDS rounds can time within `wall_s`: the TOP fastest and the
    original always, the others while the rounds' cost stays within it."""
    keep, cost = [], 0.0
    for i, r in enumerate(lead):
        c = measure_cost_s(r, launches) * MIN_ROUNDS
        if i < TOP or r is original or cost + c <= wall_s:
            keep.append(r)
            cost += c
    return keep


def leaders(ranked: Sequence[Result], original: Result | None,
            simplest: Callable[[Mapping[str, Any]], Any] | None = None) -> list[Result]:
    """The configurations to re-time, fastest first: the fastest, every one that its own timing
    cannot show slower by more than MARGIN (its interval, or its fastest launch, reaches within
    MARGIN of the fastest's interval: a disturbance only ever adds time, and the paired verdict
    ties what is within MARGIN), at least the TOP fastest, at most MAX_LEADERS; then the
    original when it is not among them. When measurements were disturbed (a result says so),
    one run's order says little: the MAX_LEADERS fastest are re-timed.

    When more configurations cannot be shown slower than MAX_LEADERS holds (a memory-bound
    kernel, where many saturate the bandwidth), the TOP fastest are kept and the places left go
    to the simplest of the others by `simplest` (engine/retime.py `simplicity`), not to those
    that happened to measure a little faster: the configuration reported among tied ones is the
    simplest, so it must be re-timed whichever of its near-equals the noise put ahead."""
    if not ranked:
        return [original] if original is not None else []
    _, best_high = timing_interval(ranked[0])
    top = MAX_LEADERS if any(r.disturbed for r in ranked) else TOP

    reach = best_high * (1 + MARGIN)  # within the margin a tie allows, a configuration may be tied

    def close(r: Result) -> bool:
        return timing_interval(r)[0] <= reach or (r.min_us is not None and r.min_us <= reach)

    candidates = [r for i, r in enumerate(ranked) if i < top or close(r)]
    if len(candidates) > MAX_LEADERS and simplest is not None:
        rest = sorted(candidates[TOP:], key=lambda r: simplest(r.config))[:MAX_LEADERS - TOP]
        keep = {id(r) for r in candidates[:TOP] + rest}
        chosen = [r for r in candidates if id(r) in keep]
    else:
        chosen = candidates[:MAX_LEADERS]
    if original is not None and all(config_key(r.config) != config_key(original.config) for r in chosen):
        chosen.append(original)
    return chosen


# in the worker --------------------------------------------------------------------------------

@dataclass(frozen=True)
class PairedRequest:
    """What the worker is asked to re-time: configurations (the original among them), their
    estimated times (to size the launches), rounds and the device time to spend."""

    configs: tuple[Mapping[str, Any], ...]
    estimates_us: tuple[float, ...]
    rounds: int = ROUNDS
    budget_s: float = BUDGET_S
    # Wall-clock seconds the rounds may take (checks, poisoning and restores included): no round
    # starts past it once MIN_ROUNDS are done.
    wall_s: float = 60.0


def launches_per_round(estimates_us: Sequence[float], rounds: int, budget_s: float) -> int:
    """Timed launches of each configuration in each round, from the device time to spend."""
    per_round = max(sum(max(e, 1e-3) for e in estimates_us), 1e-3)
    n = int(budget_s * 1e6 / (rounds * per_round))
    return max(MIN_LAUNCHES, min(MAX_LAUNCHES, n))


def paired_rounds(ev: Any, request: PairedRequest, held: Mapping[str, Any],
                  disturbed: Callable[[float, float], str] | None = None) -> dict[str, Any]:
    """Time the request's configurations round-robin, in the worker.

    `ev` is the worker's Evaluator, `held` the loaded kernels by configuration key (the modules
    they were timed in; the others are compiled again), `disturbed(t0, t1)` says what disturbed
    the device between two moments ("" when nothing did). Each round times every configuration
    in a new random order with the protocol's own timing (`ev.measure`) at a fixed launch count.
    Rounds run until `rounds` quiet ones or twice as many in all. Returns plain data:
    {"times": {key: [per-round median us]}, "quiet": [bool per round], "disturbances": [str],
     "failed": {key: (status, why)}, "digests": {key: hex}, "launches": n}."""
    from .backends import CompileError, LaunchError
    from .expressions import ExpressionError
    from .space import launch_geometry

    configs = [dict(c) for c in request.configs]
    keys = [config_key(c) for c in configs]
    failed: dict[str, tuple[str, str]] = {}
    kernels: dict[str, tuple[Any, Any]] = {}
    digests: dict[str, str] = {}
    # a backend whose builds say what was built
    build = ev.backend.build if ev.backend.capabilities.build else None
    for key, config in zip(keys, configs):
        try:
            geo = launch_geometry(ev.template, config, ev.problem, ev.backend.limits)
            kernel = held.get(key)
            if kernel is None:
                kernel = ev.compile(config)
            kernels[key] = (kernel, geo)
            if build is not None:
                digests[key] = program_digest(build(ev.source, ev.template.entry, _defines(config), ev.options)[0])
        except (CompileError, LaunchError, ExpressionError) as e:
            failed[key] = ("compile_error", str(e))
    # never more a round than the run's own timing takes in all (`--repeats N` fixes that)
    n = min(launches_per_round(request.estimates_us, request.rounds, request.budget_s),
            max(MIN_LAUNCHES, ev.timing.max_repeats))
    policy = replace(ev.timing, warmup=1, min_repeats=n, max_repeats=n, precision=0.0)
    rng = random.Random(random.SystemRandom().randrange(1 << 62))
    times: dict[str, list[float]] = {k: [] for k in keys}
    quiet: list[bool] = []
    disturbances: list[str] = []
    saved = ev.timing
    ev.timing = policy
    started = round_started = time.monotonic()
    try:
        while sum(quiet) < request.rounds and len(quiet) < 2 * request.rounds:
            order = [k for k in keys if k in kernels and k not in failed]
            if not order:
                break
            rng.shuffle(order)
            t0 = time.monotonic()
            last = t0 - (round_started if quiet else t0)
            if len(quiet) >= MIN_ROUNDS and t0 - started + last > request.wall_s:
                break  # the time the run gave the rounds is spent
            round_started = t0
            this: dict[str, float] = {}
            for key in order:
                kernel, geo = kernels[key]
                try:
                    measured = ev.measure(kernel, geo)
                except Rejected as e:
                    failed[key] = (e.status, f"{e.message} (while re-timed with the leaders)")
                    continue
                except LaunchError as e:
                    failed[key] = ("launch_error", f"{e} (while re-timed with the leaders)")
                    continue
                this[key] = _median(measured)
            why = disturbed(t0, time.monotonic()) if disturbed is not None else ""
            quiet.append(not why)
            disturbances.append(why)
            for key in keys:
                times[key].append(this.get(key, 0.0))
    finally:
        ev.timing = saved
    # a configuration that failed keeps no times: it is not part of the verdict
    summary = disturbed(started, time.monotonic()) if disturbed is not None and not all(quiet) else ""
    return {"times": {k: v for k, v in times.items() if k not in failed}, "quiet": quiet,
            "disturbances": disturbances, "summary": summary, "failed": failed, "digests": digests,
            "launches": n}


def _defines(config: Mapping[str, Any]) -> dict[str, str]:
    from .space import compiler_defines

    return compiler_defines(config)


def program_digest(binary: bytes) -> str:
    """A short digest of a compiled program: equal digests, the same program."""
    return hashlib.sha256(binary).hexdigest()[:16]


def _median(xs: Sequence[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


# the verdict ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Verdict:
    """What the paired times say: each re-timed configuration's paired median time, its speedup
    over the original with a 95% interval, whether it is tied with the fastest; which one is
    reported and why."""

    configs: tuple[Mapping[str, Any], ...]
    median_us: tuple[float, ...]
    speedup: tuple[float, ...]  # over the original, the median of per-round ratios (0: no original)
    low: tuple[float, ...]
    high: tuple[float, ...]
    tied: tuple[bool, ...]  # cannot be told apart from the fastest (the fastest included)
    fastest: int
    chosen: int
    original: int  # -1: the original was not re-timed
    reason: str
    rounds: int
    quiet_rounds: int
    launches: int
    identical: tuple[tuple[int, ...], ...] = ()  # groups of configurations built to the same program


def verdict(configs: Sequence[Mapping[str, Any]], times: Mapping[str, Sequence[float]], original_key: str | None,
            default: Mapping[str, Any], values: Mapping[str, Sequence[Any]], quiet: Sequence[bool],
            digests: Mapping[str, str] | None = None, launches: int = 0) -> Verdict | None:
    """The verdict from the worker's paired times (`paired_rounds`); None when fewer than two
    configurations have times."""
    keep_quiet = sum(quiet) >= MIN_ROUNDS
    rows = [i for i, q in enumerate(quiet) if q or not keep_quiet]
    timed = [(dict(c), [times[config_key(c)][i] for i in rows]) for c in configs if config_key(c) in times]
    timed = [(c, t) for c, t in timed if t and all(x > 0 for x in t)]
    if len(timed) < 2:
        return None
    keys = [config_key(c) for c, _ in timed]
    medians = [_median(t) for _, t in timed]
    orig = keys.index(original_key) if original_key in keys else -1
    # the fastest by paired times: the one whose per-round ratio to every other is smallest in median
    fastest = min(range(len(timed)), key=lambda i: (medians[i], keys[i]))
    best_times = timed[fastest][1]
    digests = digests or {}
    tied = []
    for i, (_, t) in enumerate(timed):
        if i == fastest:
            tied.append(True)
            continue
        same = digests.get(keys[i]) is not None and digests.get(keys[i]) == digests.get(keys[fastest])
        low, _, _ = median_interval(ratios(t, best_times))
        tied.append(same or low <= 1 + MARGIN)
    speedup, lows, highs = [], [], []
    for i, (_, t) in enumerate(timed):
        if orig < 0:
            speedup.append(0.0), lows.append(0.0), highs.append(0.0)
            continue
        if i == orig:
            speedup.append(1.0), lows.append(1.0), highs.append(1.0)
            continue
        lo, mid, hi = median_interval(ratios(timed[orig][1], t))
        speedup.append(mid), lows.append(lo), highs.append(hi)
    group = [i for i, t in enumerate(tied) if t]
    if orig >= 0 and tied[orig]:
        chosen = orig
    else:
        chosen = min(group, key=lambda i: simplicity(timed[i][0], default, values))
    reason = _reason(len(group), chosen, fastest, orig)
    if orig >= 0 and chosen != orig and lows[chosen] <= 1 + MARGIN:
        # Ties need not chain: the simplest of those tied with the fastest may itself be within the
        # margin of the original, which the fastest was not. A configuration is reported over the
        # original only when its own speedup is told apart from 1 by more than the margin, so the
        # same original is reported whichever of the near-equal ones a run happened to find fastest.
        reason = (f"the reported candidate's speedup over the original ({lows[chosen]:.3f}x at the low end of "
                  f"its 95% interval) is within {MARGIN:.0%} of 1: the original is reported")
        chosen = orig
    same: dict[str, list[int]] = {}
    for i, k in enumerate(keys):
        if k in digests:
            same.setdefault(digests[k], []).append(i)
    identical = tuple(tuple(g) for g in same.values() if len(g) > 1)
    return Verdict(tuple(c for c, _ in timed), tuple(medians), tuple(speedup), tuple(lows), tuple(highs),
                   tuple(tied), fastest, chosen, orig, reason, len(rows), sum(quiet), launches, identical)


def _reason(tied: int, chosen: int, fastest: int, orig: int) -> str:
    if tied == 1:
        return "the fastest in paired times, told apart from every other"
    others = f"{tied - 1} other{'s' if tied > 2 else ''}"
    if chosen == orig:
        return (f"tied with {others} (paired times within {MARGIN:.0%} at 95% confidence): the original is "
                "among them, and is reported")
    if chosen == fastest:
        return (f"tied with {others} (paired times within {MARGIN:.0%} at 95% confidence); reported as the "
                "simplest of them (fewest parameters changed from the default)")
    return (f"tied with the fastest and {tied - 2} more (paired times within {MARGIN:.0%} at 95% confidence); "
            "reported as the simplest of them (fewest parameters changed from the default)")
