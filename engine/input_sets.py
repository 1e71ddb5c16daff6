"""The input sets of one evaluation, with their references (engine/evaluate.py's Evaluator checks
and times on them).

- each verification size has a pool of sets drawn from the run's seed, each when first used (or
  ahead, in threads), its outputs from the numpy reference (kept in the inputs cache) or, without
  one, from the default configuration run on the device (`default_outputs`); configurations
  rotate through the pool;
- the tolerance of every set's outputs follows what the calibration found about the original
  (`scale`, `spare`, shared with the Evaluator, which fills them);
- the timed launches' changed sets (`variants`): sets of the tuning size's pool with a few
  elements changed, their references computed ahead;
- the hard set (`hard`) every configuration is checked on, once the calibration made it;
- `drawn()`: every set made so far, with its checksum, for the checks that nothing changed them.
"""

from __future__ import annotations

import functools
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from .compare import TOLERANCE, Expected
from .inputs import InputPool, Inputs, arg_shape, changed, make_inputs, mutation_values, random_change
from .inputs_cache import cached_inputs
from .template import Argument, Problem, Template, np_dtype

# Changed input sets with references computed ahead, for the checked timed launches (at most
# VARIANTS, their reference outputs within VARIANT_BYTES)
VARIANTS = 8
VARIANT_BYTES = 1 << 30


class ReferenceFailed(RuntimeError):
    """The template's reference raised, or ran past its time limit, on an input set: no
    configuration can be checked on that set, and none is to blame."""


class InputSets:
    """Every verification size's input sets and references, the timed launches' changed sets and
    the hard set."""

    def __init__(self, template: Template, problems: tuple[Problem, ...], seed: int, pool_size: int,
                 reference: Callable[..., Mapping[str, np.ndarray]] | None,
                 default_outputs: Callable[[Inputs, int], dict[str, np.ndarray]],
                 scale: dict[str, float], spare: dict[str, tuple[float, float]]):
        self.template = template
        self.problems = problems
        self.seed = seed
        self.pool_size = pool_size
        self.reference = reference
        self.default_outputs = default_outputs  # without a reference: the default configuration's outputs
        self.scale = scale  # outputs whose default tolerance the calibration widened
        self.spare = spare  # outputs where the original has a few elements beyond it
        self.pools: dict[int, InputPool] = {}
        self.hard: tuple[int, Inputs] | None = None  # the hard set: (size, set)
        self.next = 0  # where the next configuration's sets start in each pool
        self._change_values: dict[str, np.ndarray] | None = None
        self._variant_pool: InputPool | None = None

    def pool(self, which: int) -> InputPool:
        """Verification size `which`'s pool, its sets drawn when first used."""
        if which not in self.pools:
            problem = self.problems[which]
            base = (self.seed * 1_000_003 + which * 7919) & 0x7FFFFFFF
            # drawn once per loop run (engine/inputs_cache.py): every round's worker reads them back
            self.pools[which] = InputPool(
                lambda k, problem=problem, base=base, which=which: self.with_reference(
                    cached_inputs(make_inputs, self.template, problem, base + k, Inputs), which),
                self.pool_size)
        return self.pools[which]

    def with_reference(self, inputs: Inputs, which: int) -> Inputs:
        """`inputs` with its outputs' references and their checks (the calibrated tolerance)."""
        problem = self.problems[which]
        outputs = [a for a in self.template.arguments if a.is_output]
        works: dict[str, np.ndarray] = {}  # each output in the comparisons' working precision
        if self.reference is not None:
            sizes = dict(problem.values)
            # A set from the inputs cache: its outputs found by its name there, as the checks use
            # them (in the output's dtype, and in the working precision: converting a large float16
            # output costs more than reading it), or computed and kept so.
            stored, store = getattr(self.reference, "stored", None), getattr(self.reference, "store", None)
            keyed = inputs.key is not None and stored is not None and store is not None
            name = _prepared_name(inputs.key, outputs) if keyed else ""
            found = stored(name, sizes) if keyed else None
            if found is not None and all(a.name in found for a in outputs):
                for a in outputs:
                    inputs.expected[a.name] = found[a.name].reshape(arg_shape(a, problem))
                    if f"{a.name}.work" in found:
                        works[a.name] = found[f"{a.name}.work"]
            else:
                given = {**{k: v.copy() for k, v in inputs.host.items()}, **inputs.scalars}
                try:
                    expected = (self.reference.raw if keyed else self.reference)(given, sizes)
                except Exception as e:  # the reference is the template author's code
                    raise ReferenceFailed(f"the template's reference failed: {type(e).__name__}: {e}") from None
                for a in outputs:
                    if not isinstance(expected, Mapping) or a.name not in expected:
                        raise RuntimeError(f"the template's reference returned no `{a.name}`")
                    inputs.expected[a.name] = (np.asarray(expected[a.name]).astype(np_dtype(a.dtype), copy=False)
                                               .reshape(arg_shape(a, problem)))
                    check = Expected(inputs.expected[a.name], a.dtype, a)
                    if not check.exact:
                        works[a.name] = check.values
                if keyed:
                    store(name, sizes, {**{a.name: inputs.expected[a.name] for a in outputs},
                                        **{f"{k}.work": v for k, v in works.items()}})
        else:
            inputs.expected = self.default_outputs(inputs, which)
        for a in outputs:
            check = Expected(inputs.expected[a.name], a.dtype, a, self.scale.get(a.name, 1.0), values=works.get(a.name),
                             spare=self.spare.get(a.name, (0.0, 1.0)))
            if self.reference is not None:
                _check_finite(a, check.values, inputs, problem)
            inputs.checks[a.name] = check
        inputs.checksum = checksum(inputs)
        return inputs

    def fresh(self, which: int, seed: int) -> Inputs:
        """A new set at size `which` from `seed`, with its references (never cached)."""
        return self.with_reference(make_inputs(self.template, self.problems[which], seed), which)

    def rotating(self, which: int, count: int) -> list[Inputs]:
        """The `count` sets the next configuration is checked with: the pool's next ones in turn
        (never the last configuration's), waited for where they are still being drawn ahead."""
        pool = self.pool(which)
        n = min(count, len(pool))
        start = self.next % len(pool)
        return [pool[(start + k) % len(pool)] for k in range(n)]

    def side_by_side(self, fn: Callable[[Any], Any], jobs: list) -> Any:
        """fn over jobs, in threads where drawing a set is host work only (a numpy reference);
        without one the default runs on the device for each set, and a device context belongs
        to the thread that made it: one after the other there."""
        return threads().map(fn, jobs) if self.reference is not None else map(fn, jobs)

    def draw_ahead(self) -> None:
        """The rest of every verification size's pool, drawn now in other threads (only with a
        numpy reference: without one a set's reference is a launch on this thread's device
        context)."""
        if self.reference is None:
            return
        for which in range(len(self.problems)):
            self.pool(which).draw_ahead(threads().submit)

    def stop_drawing(self) -> None:
        """Drop the draws ahead not started (the worker is ending)."""
        for pool in self.pools.values():
            pool.cancel_ahead()

    def plausible(self, which: int, name: str, inputs: Inputs) -> np.ndarray | None:
        """Another input set's correct output: finite values of the right size and kind."""
        # Only sets already drawn: drawing one can run the default configuration on the shared
        # buffers (no numpy reference), which must never happen between a restore and a launch.
        pool = self.pools.get(which)
        for other in pool.drawn() if pool is not None else ():
            if other is not inputs and name in other.expected:
                return other.expected[name]
        return None

    def recalibrated(self) -> None:
        """The sets drawn so far take the tolerance the calibration found (later ones get it when drawn)."""
        outputs = [a for a in self.template.arguments if a.is_output]
        for pool in self.pools.values():
            for inputs in pool.drawn():
                for a in outputs:
                    inputs.checks[a.name] = inputs.checks[a.name].rescaled(
                        a, self.scale.get(a.name, 1.0), self.spare.get(a.name, (0.0, 1.0)))

    def drawn(self) -> list[Inputs]:
        """Every set made so far: the pools', the changed sets', the hard set."""
        pools = list(self.pools.values()) + ([self._variant_pool] if self._variant_pool is not None else [])
        sets = [x for pool in pools for x in pool.drawn()]
        if self.hard is not None:
            sets.append(self.hard[1])
        return sets

    # the timed launches' changed sets, at the tuning size (0) ------------------------------------------
    def change_values(self) -> dict[str, np.ndarray]:
        """The values every change of an input is taken from (from the run's seed: the changed
        sets' references can be kept in the inputs cache)."""
        if self._change_values is None:
            rng = np.random.default_rng([self.seed & 0x7FFFFFFF, 0xC4A9])
            self._change_values = mutation_values(self.template, self.problems[0], rng)
        return self._change_values

    def variants(self, output_bytes: int) -> InputPool:
        """Changed input sets at the tuning size, each with its reference, for the checked timed
        launches: as many as VARIANTS (within VARIANT_BYTES of reference outputs, `output_bytes`
        a set), each a set of the pool with a change like the unchecked launches' (engine/inputs.py)."""
        if self._variant_pool is None:
            self._variant_pool = InputPool(self._draw_variant, max(2, min(VARIANTS, VARIANT_BYTES // max(1, output_bytes))))
        return self._variant_pool

    def _draw_variant(self, k: int) -> Inputs:
        pool = self.pool(0)
        base = pool[k % len(pool)]
        values = self.change_values()
        change = random_change(base, values, np.random.default_rng([self.seed & 0x7FFFFFFF, 0x7A21, k]))
        variant = Inputs(base.seed, changed(base, values, change), base.scalars)
        if base.key is not None:
            variant.key = base.key + "|changed|" + ";".join(f"{n}:{x[0]},{x[1]},{x[2]}" for n, x in sorted(change.items()))
        self.with_reference(variant, 0)
        # its inputs are its base's, changed in the working buffers only
        variant.host, variant.device, variant.change, variant.base = base.host, base.device, change, base
        variant.checksum = checksum(variant)
        return variant


def checksum(inputs: Inputs) -> int:
    """A checksum of an input set's host arrays and references (Evaluator.intact): the exclusive
    or of their 8-byte words (fast; any single changed word changes it), and of their tails."""
    total = 0
    for arrays in (inputs.host, inputs.expected, {k: c.values for k, c in inputs.checks.items()}):
        for name in sorted(arrays):
            raw = np.ascontiguousarray(arrays[name]).reshape(-1).view(np.uint8)
            whole = raw.size // 8 * 8
            total ^= int(np.bitwise_xor.reduce(raw[:whole].view(np.uint64))) if whole else 0
            total ^= int.from_bytes(raw[whole:].tobytes(), "little") ^ (raw.size << 3)
    return total


def _prepared_name(key: str, outputs: Sequence[Argument]) -> str:
    """The name an input set's prepared outputs are kept under: its own, and each output's dtype."""
    return key + "|prepared|" + ",".join(f"{a.name}:{a.dtype}" for a in outputs)


@functools.lru_cache(maxsize=1)
def threads() -> ThreadPoolExecutor:
    """Threads that draw input sets and their references side by side, and build the original
    for calibration while they do."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return ThreadPoolExecutor(max_workers=max(2, min(8, cores)), thread_name_prefix="kerntune-inputs")


def _check_finite(a: Argument, values: np.ndarray, inputs: Inputs, problem: Problem) -> None:
    """A reference with NaN or Inf where every input is finite is an error (it would leave those
    elements unchecked), unless the spec says the output may hold them (`nonfinite = true`).
    `values`: the output in the comparisons' working precision (Expected.values)."""
    if a.nonfinite_ok or a.dtype not in TOLERANCE:
        return
    bad = ~np.isfinite(values)
    if not bad.any():
        return
    infinite = [k for k, v in inputs.host.items() if v.dtype.kind == "f" or v.dtype.name == "bfloat16"
                if not np.isfinite(v.astype(np.float32, copy=False)).all()]
    if infinite:
        return
    i = int(np.flatnonzero(bad.ravel())[0])
    inputs_named = ", ".join(f"`{k}`" for k in inputs.host) or "none"
    raise RuntimeError(
        f"the template's reference gives {int(bad.sum())} non-finite values of `{a.name}` (first at {i}) "
        f"at {problem.label()} from finite inputs ({inputs_named}): give those inputs a range that keeps "
        f"the reference finite (`init`, `range` in [[arg]]), or set `nonfinite = true` on `{a.name}`")
