"""What the inputs cache saves a worker after the first that used an input set (a later round of
the agent loop, a later run with the same seed): per library template and size, the seconds to
draw one input set and to run its numpy reference, and with the cache the seconds to read the
input set back (memory-mapped, then every byte read once, as the uploads do) and to find its
outputs by the set's name and read them. `python bench/inputs_cache.py` (best of three, one input
set, in a cache folder of its own)."""

from __future__ import annotations

import os
import tempfile
import time

import numpy as np

from kerntune import templates
from kerntune.engine.inputs import Inputs, make_inputs
from kerntune.engine.inputs_cache import ENV, cached_inputs
from kerntune.engine.template import load_template

CASES = (("vector_add", "16M"), ("silu_and_mul", "llama7b-t2048"), ("fused_add_rmsnorm", "llama7b-t2048"),
         ("softmax", "llama-t2048"), ("merge_attn_states", None))


def seconds(fn, repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def read_all(arrays) -> None:
    """Every byte read once (a memory-mapped array costs nothing until then)."""
    for v in arrays.values():
        a = np.asarray(v)
        if a.ndim:
            a.view(np.uint8).sum(dtype=np.uint64)


def main() -> None:
    print("| template | size | draw inputs s | reference s | cached: inputs s | cached: outputs s | saved per set |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="inputs-cache-bench-") as folder:
        os.environ[ENV] = folder
        for name, size in CASES:
            t = load_template(templates.path(name))
            problem = t.problem(size)
            ref = t.load_reference()
            sizes = dict(problem.values)
            inputs = make_inputs(t, problem, 1)
            given = {**inputs.host, **inputs.scalars}
            draw = seconds(lambda: make_inputs(t, problem, 1))
            plain = seconds(lambda: ref.raw(dict(given), sizes))
            drawn = cached_inputs(make_inputs, t, problem, 1, Inputs)  # drawn and stored
            ref.store(drawn.key, sizes, ref.raw({**drawn.host, **drawn.scalars}, sizes))
            read = seconds(lambda: read_all(cached_inputs(make_inputs, t, problem, 1, Inputs).host))
            again = seconds(lambda: read_all(ref.stored(drawn.key, sizes)))
            print(f"| {name} | {problem.label()} | {draw:.3f} | {plain:.3f} | {read:.3f} | {again:.3f} | "
                  f"{draw + plain - read - again:.2f} s |", flush=True)


if __name__ == "__main__":
    main()
