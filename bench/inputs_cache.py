"""What the agent loop's inputs cache saves each round after the first: per library template and
size, the seconds to draw one input set and to run its numpy reference, and with the cache the
seconds to read the input set back and to find (hash the inputs) and read its outputs back.
`python bench/inputs_cache.py` (best of three, one input set)."""

from __future__ import annotations

import time

from kerntune import templates
from kerntune.engine.inputs import make_inputs
from kerntune.engine.inputs_cache import cached_inputs, cached_reference, inputs_cache
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


def main() -> None:
    print("| template | size | draw inputs s | reference s | cached: inputs s | cached: outputs s | saved per set |")
    print("|---|---|---|---|---|---|---|")
    for name, size in CASES:
        t = load_template(templates.path(name))
        problem = t.problem(size)
        inputs = make_inputs(t, problem, 1)
        given = {**inputs.host, **inputs.scalars}
        fn = t.load_reference()
        draw = seconds(lambda: make_inputs(t, problem, 1))
        plain = seconds(lambda: fn(dict(given), dict(problem.values)))
        with inputs_cache():
            cached_inputs(make_inputs, t, problem, 1)  # the first round draws and stores
            read = seconds(lambda: cached_inputs(make_inputs, t, problem, 1))
            ref = cached_reference(fn, t.reference_path, t.reference_function)
            ref(dict(given), dict(problem.values))  # and computes and stores
            again = seconds(lambda: ref(dict(given), dict(problem.values)))
        print(f"| {name} | {problem.label()} | {draw:.3f} | {plain:.3f} | {read:.3f} | {again:.3f} | "
              f"{draw + plain - read - again:.2f} s |")


if __name__ == "__main__":
    main()
