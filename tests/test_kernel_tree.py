"""Kernels read as syntax trees: ownership, loops, accumulators, accesses and the classification."""

from pathlib import Path

import pytest

from kerntune.agents.kernel_tree import KernelTreeError, analyse, classify, index_slope, inline, slope

HERE = Path(__file__).resolve().parent
BYO = HERE / "data" / "byo"


def read(*parts: str) -> str:
    return (HERE.parent.joinpath(*parts)).read_text()


@pytest.mark.parametrize("path", ["tests/data/byo/gelu/gelu.cu", "tests/data/byo/gelu/gelu.cl"])
def test_a_thread_per_element_with_a_guard_is_an_elementwise_map(path):
    a = classify(read(*path.split("/")))
    assert a.kind == "elementwise" and a.element == "i"
    assert a.guard is not None and (a.guard.var, a.guard.bound, a.guard.form) == ("i", "N", "if")
    assert {(x.array, x.index, x.read, x.write) for x in a.accesses} == {("inp", "i", True, False),
                                                                          ("out", "i", False, True)}
    assert a.launch_dims == {0} and a.loops == ()
    assert a.arrays() == {"inp": (True, False), "out": (False, True)}


def test_an_optimizer_update_with_an_early_return_is_elementwise_and_its_arrays_are_read_and_written():
    a = classify(read("tests", "data", "byo", "adamw", "adamw.cu"))
    assert a.kind == "elementwise" and a.guard.form == "return" and a.guard.bound == "num_parameters"
    assert a.arrays()["params_memory"] == (True, True) and a.arrays()["grads_memory"] == (True, False)


def test_a_thread_per_row_with_loops_over_the_row_is_rowwise_with_its_sums():
    a = classify(read("tests", "data", "byo", "layernorm", "layernorm.cu"))
    assert a.kind == "rowwise" and a.element == "idx"
    assert [(lp.var, lp.start, lp.bound, lp.step) for lp in a.loops] == [("i", "0", "C", "1")] * 3
    assert all(lp.hot and lp.trip is None for lp in a.loops)
    assert [(c.var, c.op, c.loop) for c in a.accumulators] == [("m", "sum", 0), ("v", "sum", 1)]
    # reads through a local pointer name the argument, with the pointer's offset
    x = [x for x in a.accesses if x.array == "inp"][0]
    assert x.via == "x" and x.offset == "idx * C" and x.index == "idx * C + (i)" and x.loop == 0
    assert slope(a, x.index, "i") == 1 and slope(a, x.index) is None


SOFTMAX = """
__global__ void softmax(float *out, const float *inp, int N, int C) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= N) return;
    float m = -1e30f;
    for (int j = 0; j < C; j++) { m = fmaxf(m, inp[row * C + j]); }
    float s = 0.0f;
    for (int j = 0; j < C; j++) { float e = expf(inp[row * C + j] - m); out[row * C + j] = e; s += e; }
    for (int j = 0; j < C; j++) out[row * C + j] /= s;
}
"""


def test_the_max_then_sum_of_exp_pair_is_found():
    a = classify(SOFTMAX)
    assert a.kind == "rowwise"
    assert [(c.var, c.op) for c in a.accumulators] == [("m", "max"), ("s", "sum")]
    assert a.softmax_pairs == (("m", "s"),)
    last = [x for x in a.accesses if x.loop == 2]
    assert {(x.read, x.write) for x in last} == {(True, True)}  # `/=` reads and writes


def test_cooperating_threads_and_a_hard_coded_thread_count_are_neither_and_said_so():
    a = classify(read("templates", "matmul", "baseline.cu"))
    assert a.kind == "neither" and a.barriers and a.shared
    assert a.launch_dims == {0, 1}
    src = ("__global__ void k(float *o, const float *x, int n) {\n"
           "  int i = blockIdx.x * 256 + threadIdx.x;\n  if (i < n) o[i] = x[i];\n}\n")
    k = classify(src)
    assert k.fixed_threads == (256,) and k.kind == "elementwise"


def test_an_array_used_through_a_cast_is_never_called_elementwise():
    a = classify(read("tests", "data", "byo", "silu_mul_bf16", "silu_mul.cu"))
    assert a.kind == "neither" and "out" in a.opaque


def test_helper_loops_are_told_from_the_kernels_own_and_unroll_pragmas_are_tied_to_their_loop():
    src = ("__device__ float h(float x) {\n#pragma unroll 4\n  for (int k = 0; k < 8; ++k) x += k;\n  return x;\n}\n"
           "__global__ void k(float *o, const float *x, int n) {\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
           "  if (i < n) {\n    float s = 0.f;\n#pragma unroll 2\n    for (int k = 0; k < 4; ++k) s += h(x[i]);\n"
           "    o[i] = s;\n  }\n}\n")
    a = classify(src)
    assert [(lp.function, lp.in_kernel, lp.trip) for lp in a.helper_loops] == [("h", False, 8)]
    assert [(lp.function, lp.trip, lp.hot) for lp in a.loops] == [("k", 4, True)]
    pragma = a.loops[0].pragma
    assert src[pragma.start:pragma.end].strip() == "#pragma unroll 2"


def test_index_slopes_through_div_and_mod_carry_their_conditions():
    src = ("__global__ void k(float *o, const float *x, int d, int n) {\n"
           "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  int t = i / d;\n  int j = i % d;\n"
           "  if (i < n) o[i] = x[t * 2 * d + j] * x[t * 2 * d + d + j];\n}\n")
    a = classify(src)
    assert a.kind == "elementwise"
    s = index_slope(a, "t * 2 * d + d + j")
    assert s.slope == 1 and set(s.conditions) == {("i", "d")}
    assert slope(a, "2 * i") is None and slope(a, "t") == 0
    assert inline(a, "t * 2 * d + j", {"i": "p"}) == "(p / d) * 2 * d + (p % d)"


def test_no_kernel_is_one_clear_error():
    with pytest.raises(KernelTreeError, match="no __global__ or __kernel"):
        classify("int f(int x) { return x; }")
    with pytest.raises(KernelTreeError, match="no kernel named nope"):
        classify(SOFTMAX, "nope")
    assert analyse("") == []


def test_an_index_through_a_local_that_changes_is_not_known_to_move_with_the_element():
    src = ("__global__ void k(float *o, const float *x, int n, int off0) {\n"
           "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    int off = off0;\n    if (n > 5) off += 1;\n"
           "    int j = i + off;\n    if (i < n) o[i] = x[j];\n}\n")
    a = classify(src)
    assert a.changing == {"off"} and slope(a, "j") is None and slope(a, "i + off0") == 1
    assert a.kind == "neither"


def test_a_kernel_the_parser_cannot_read_whole_is_neither_and_says_where():
    src = ("__global__ void k(float *o, const float *x, int n) {\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
           "    if (i < n) o[i] = x[i] @ 2;\n}\n")
    a = classify(src)
    assert a.kind == "neither" and a.reasons == ("the parser could not read line 3 of it",)
