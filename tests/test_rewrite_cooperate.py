"""The rewrites for kernels whose threads cooperate (agents/rewrite_contraction.py,
agents/rewrite_reduction.py) on the naive kernels of tests/data/naive: templated by the rules,
gated and re-verified on PoCL at other configurations, the defaults the original token for token,
the CUDA sources compiled with nvcc at several values, and the kernels they must refuse."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from kerntune.agents import affine
from kerntune.agents.kernel_tree import classify
from kerntune.agents.rewrite_contraction import read as read_contraction
from kerntune.agents.rewrite_reduction import read as read_reduction
from kerntune.agents.rewrites import RewriteContext
from kerntune.agents.rules import rules_template
from kerntune.agents.cooperate import Decline
from kerntune.engine.backends import cuda_toolchain as cuda
from kerntune.engine.device import DeviceLimits
from kerntune.engine.evaluate import Evaluator, TimingPolicy
from kerntune.engine.gate import check_proposal
from kerntune.engine.proposal import original_launch
from kerntune.engine.space import build_space
from kerntune.engine.template import load_template
from kerntune.engine.tune import TuneOptions, TuneRun

NAIVE = Path(__file__).resolve().parent / "data" / "naive"
CPU = DeviceLimits("opencl", "cpu", max_threads_per_block=4096, warp_size=1, sm_count=2, max_shared_per_block=65536)
GPU = DeviceLimits("cuda", "gpu", max_threads_per_block=1024, warp_size=32, sm_count=132,
                   max_shared_per_block=49152)
FAST = TimingPolicy(warmup=1, min_repeats=3, max_repeats=3, target_s=0.002)
# kernel -> (the rewrite, configurations away from the defaults that must give the original's outputs)
CASES = {
    "matmul_naive": ("contraction", ({"BK": 8, "BM": 32, "BN": 32, "TM": 4, "TN": 2, "STAGES": 2},
                                     {"BK": 4, "BM": 16, "BN": 64, "TM": 1, "TN": 8},
                                     {"BK": 8, "BM": 32, "BN": 16, "TM": 4, "TN": 2, "VEC": 4, "STAGES": 2})),
    "matmul_coalesced": ("contraction", ({"BK": 16, "BM": 64, "BN": 16, "TM": 8, "TN": 1},
                                         {"BK": 4, "BM": 16, "BN": 32, "TM": 2, "TN": 2, "VEC": 4})),
    "matmul_half": ("contraction", ({"BK": 8, "BM": 32, "BN": 32, "TM": 2, "TN": 4, "VEC": 4, "STAGES": 2},)),
    "matmul_batched": ("contraction", ({"BK": 8, "BM": 32, "BN": 16, "TM": 2, "TN": 2, "STAGES": 2, "VEC": 4},)),
    "reduce_nodivergence": ("reduction", ({"LANES": 16}, {"LANES": 8, "THREADS": 64, "GRID": 1})),
    "reduce_atomic": ("reduction", ({"GRID": 1, "THREADS_SIZE": 64, "ITEMS": 4}, {"GRID": 8})),
    "reduce_firstadd": ("reduction", ({"LANES": 32, "THREADS": 64, "GRID": 1},)),
    "stencil5": ("stencil", ({"ITEMS": 4}, {"ITEMS": 16, "RX": 2, "BLOCK": 8, "BLOCK_Y": 2}, {"TILE": 1},
                             {"TILE": 1, "ITEMS": 4, "RX": 4, "BLOCK": 8, "BLOCK_Y": 2})),
    "stencil9": ("stencil", ({"TILE": 1, "ITEMS": 2, "BLOCK": 4},)),
    "conv_rows": ("stencil", ({"TILE": 1, "BLOCK": 4, "BLOCK_Y": 2}, {"TILE": 1, "RX": 8, "BLOCK": 4, "BLOCK_Y": 1},
                              {"RX": 4, "BLOCK": 8})),
    "conv_cols": ("stencil", ({"ITEMS": 8}, {"TILE": 1, "ITEMS": 4})),
    "stencil1d": ("stencil", ({"TILE": 1}, {"TILE": 1, "ITEMS": 4, "BLOCK": 64}, {"ITEMS": 2})),
    # a batch of non-square matrices, scaled on the way: tiles smaller, as large and larger than the block
    "transpose": ("transpose", ({"TILE": 32, "ROWS": 4, "PAD": 0},)),
}


def context(source: str, entry: str, backend: str, limits: DeviceLimits, name: str) -> RewriteContext:
    t = replace(load_template(NAIVE / name), entry=entry)  # the spec of `name` for the kernel `entry`
    grid, block = original_launch(t, limits)
    return RewriteContext(t, backend, source, classify(source, entry), tuple(grid), tuple(block), {}, limits)


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_naive_cooperating_kernel_is_rewritten_gated_and_reproduced_on_pocl(name, tmp_path, opencl_backend):
    rewrite, configs = CASES[name]
    original = load_template(NAIVE / name)
    made = rules_template(original, "opencl", CPU)
    assert [r.name for r in made.applied.rewrites] == [rewrite]
    proposal = made.proposal
    assert any(n.startswith(f"rewrote the kernel: {rewrite}") for n in proposal.notes)
    problem = original.problem("small", {})
    verdict = check_proposal(original, proposal, tmp_path / "tpl", backend="opencl", device=0, problem=problem,
                             limits=CPU, timeout=120)
    assert verdict.ok, verdict.reason
    template = verdict.template
    ev = Evaluator(opencl_backend, template, template.problem("small", {}), seed=1, timing=FAST)
    for config in configs:
        ok, _, message = ev.reproduces_original({**template.default_config(), **config}, (3, 4))
        assert ok, (config, message)


# kernel -> (the rewrite's switch, the constant whose value lays out its grid or output)
LAID_OUT = {"matmul_coalesced": ("BK", "BLOCKSIZE"), "reduce_nodivergence": ("LANES", "BLOCK_SIZE")}


@pytest.mark.parametrize("name", sorted(LAID_OUT))
def test_a_constant_that_lays_out_the_grid_or_an_output_stays_and_the_original_path_verifies(name, tmp_path,
                                                                                           opencl_backend):
    """`ceil_div(M, 32)` rows of BLOCKSIZE, `out` of ceil_div(n, 256) partials: another BLOCKSIZE or
    block left rows or partials unwritten. With the rewrite switched off, every configuration of the
    space runs the original and gives its outputs."""
    switch, constant = LAID_OUT[name]
    original = load_template(NAIVE / name)
    limits = DeviceLimits("opencl", "cpu", max_threads_per_block=1024, warp_size=32, sm_count=2,
                          max_shared_per_block=49152)
    proposal = rules_template(original, "opencl", limits).proposal
    assert constant not in {p.name for p in proposal.parameters}
    verdict = check_proposal(original, proposal, tmp_path / "tpl", backend="opencl", device=0,
                             problem=original.problem("small", {}), limits=limits, timeout=120)
    assert verdict.ok, verdict.reason
    template = verdict.template
    problem = template.problem("small", {})
    off = [c.as_dict() for c in build_space(template, problem, limits).configs if c.as_dict()[switch] == 0]
    assert off
    ev = Evaluator(opencl_backend, template, problem, seed=1, timing=FAST)
    for config in off:
        result = ev.evaluate(config)
        assert result.status == "ok", (config, result.message)


@pytest.mark.slow
def test_the_rules_tune_a_naive_matrix_product_and_every_configuration_verifies(tmp_path):
    original = load_template(NAIVE / "matmul_naive")
    verdict = check_proposal(original, rules_template(original, "opencl", CPU).proposal, tmp_path / "tpl",
                             backend="opencl", device=0, problem=original.problem("small", {}), limits=CPU,
                             timeout=120)
    assert verdict.ok, verdict.reason
    run = TuneRun(verdict.template, TuneOptions(backend="opencl", problem="small", seed=5, timing=FAST,
                                                strategy="random", budget=5, probe=False,
                                                session_path=tmp_path / "tune.toml")).run()
    assert run.best is not None and run.winner_ok
    assert all(r.status == "ok" for r in run.results), [(r.config, r.status, r.message) for r in run.results]


def test_the_default_is_the_original_token_for_token_beside_the_tiled_kernel():
    t = load_template(NAIVE / "matmul_half")
    src = t.source_for("opencl")
    proposal = rules_template(t, "opencl", CPU, lift=False).proposal
    out = proposal.sources["opencl"]
    # the tile parameters are held at their defaults while BK = 0 runs the original
    assert "BK > 0 or (BM == 64 and BN == 64 and TM == 4 and TN == 4 and STAGES == 1 and VEC == 1)" in \
        proposal.constraints
    start = src.index("__kernel")
    kernel = src[start:src.index("\n}", start) + 2]
    assert out.index("#if BK > 0\n") < out.index("#else\n" + kernel + "\n#endif")
    assert "#ifndef BK\n#define BK 0\n#endif" in out
    # the operands are read as written, with the tile's coordinates; B^T walks k contiguously
    assert "vload_half(kt_r * K + kt_k, A)" in out and "vload_half(kt_c * K + kt_k, Bt)" in out
    assert "kt_bs[kt_i % BK][kt_i / BK] = kt_rb[kt_j];" in out  # B^T read along k, stored by column
    # VEC 4: four halves along k at a time, converted to float
    assert "const float4 kt_w = vload_half4(0, Bt + (kt_c * K + kt_k));" in out


def test_the_contraction_reads_the_operands_the_bounds_and_the_epilogue():
    src = (NAIVE / "matmul_coalesced" / "kernel.cu").read_text()
    c = read_contraction(context(src, "sgemm_coalesced", "cuda", GPU, "matmul_coalesced"))
    assert (c.r, c.c, c.k) == ("cRow", "cCol", "i")
    assert (c.m_spec, c.n_spec) == ("(M)", "(N)")
    assert c.x == "(A[kt_r * K + kt_k])" and c.y == "(B[kt_k * N + kt_c])"
    assert c.epilogue == ("C[kt_r * N + kt_c] = alpha * kt_v + beta * C[kt_r * N + kt_c];",)
    assert c.x_k_fast and not c.y_k_fast


BAD_CONTRACTIONS = {
    "loop nest": ("for (int k = 0; k < K; ++k) for (int j = 0; j < 2; ++j) s += A[r * K + k] * B[k * N + c];",
                  "not one loop"),
    "aliasing": ("for (int k = 0; k < K; ++k) s += C[r * K + k] * B[k * N + c];", "both an operand and the output"),
    "one operand": ("for (int k = 0; k < K; ++k) s += A[r * K + k] * 2.0f;", "two different coordinates"),
    "both coordinates": ("for (int k = 0; k < K; ++k) s += A[r * K + c] * B[k * N + c];", "both of the output"),
}


@pytest.mark.parametrize("case", sorted(BAD_CONTRACTIONS))
def test_the_contraction_refuses_what_it_cannot_prove(case):
    loop, why = BAD_CONTRACTIONS[case]
    src = ("__global__ void mm(const float *A, const float *B, float *C, int M, int N, int K) {\n"
           "    int r = blockIdx.y * blockDim.y + threadIdx.y;\n    int c = blockIdx.x * blockDim.x + threadIdx.x;\n"
           "    if (r < M && c < N) {\n        float s = 0.0f;\n        " + loop + "\n"
           "        C[r * N + c] = s;\n    }\n}\n")
    with pytest.raises(Decline, match=why):
        read_contraction(context(src, "mm", "cuda", GPU, "matmul_naive"))


def test_the_contraction_refuses_an_output_written_by_a_function_it_cannot_see_into():
    src = ("__device__ void put(float *p, int i, float v) { p[i] = v; }\n"
           "__device__ float get(const float *p, int i) { return p[i]; }\n"
           "__global__ void mm(const float *A, const float *B, float *C, int M, int N, int K) {\n"
           "    int r = blockIdx.y * blockDim.y + threadIdx.y;\n    int c = blockIdx.x * blockDim.x + threadIdx.x;\n"
           "    if (r < M && c < N) {\n        float s = 0.0f;\n"
           "        for (int k = 0; k < K; ++k) s += A[r * K + k] * B[k * N + c];\n        STORE;\n    }\n}\n")
    with pytest.raises(Decline, match="hands an array to `put`, which may write through it"):
        read_contraction(context(src.replace("STORE", "put(C, r * N + c, s)"), "mm", "cuda", GPU, "matmul_naive"))
    # a function reading through a const pointer is part of the epilogue, as written
    c = read_contraction(context(src.replace("STORE", "C[r * N + c] = s + get(A, 0)"), "mm", "cuda", GPU,
                                 "matmul_naive"))
    assert c.epilogue == ("C[kt_r * N + kt_c] = kt_v + get(A, 0);",)


TILED = (Path(__file__).resolve().parent.parent / "templates" / "matmul" / "baseline.cu").read_text()


def test_a_product_tiled_by_hand_is_read_as_the_contraction_its_tiles_compose_to():
    """The library's baseline: `As[ty][tx] = A[row * K + k0 + tx]`, `Bs[ty][tx] = B[(k0 + ty) * N +
    col]`, the sum over `As[ty][k] * Bs[k][tx]`: the slot read at (ty, k) is the one thread (ty, k)
    filled, so X is A at (row, k0 + k), the shared index kk = k0 + k; the launch bounds the output."""
    c = read_contraction(context(TILED, "matmul", "cuda", GPU, "matmul_naive"))
    assert (c.x, c.y, c.epilogue) == ("(A[(K * kt_r + kt_k)])", "(B[(N * kt_k + kt_c)])", ("C[(N * kt_r + kt_c)] = kt_v;",))
    assert c.k_cond == "((32 * (kt_k / (32)) - K) < 0)" and c.x_k_fast and not c.y_k_fast
    # a fill's bound the guard does not repeat says where the operand is loaded (zero elsewhere)
    bounded = TILED.replace("= A[(long)row * K + k0 + threadIdx.x];", "= row < M - 1 ? A[(long)row * K + k0 + threadIdx.x] : 0.0f;")
    got = read_contraction(context(bounded, "matmul", "cuda", GPU, "matmul_naive"))
    assert (got.x, got.x_load, got.y_load) == (c.x, "((1 - M + kt_r) < 0)", "")
    # a tile filled transposed (`As[tx][ty]`, its read `As[k][ty]`) holds the same products
    flipped = TILED.replace("As[threadIdx.y][threadIdx.x] = A[(long)row * K + k0 + threadIdx.x]",
                            "As[threadIdx.x][threadIdx.y] = A[(long)row * K + k0 + threadIdx.x]")
    flipped = flipped.replace("As[threadIdx.y][k]", "As[k][threadIdx.y]")
    assert read_contraction(context(flipped, "matmul", "cuda", GPU, "matmul_naive")).x == c.x


def test_a_products_tiles_through_macros_and_a_row_only_its_launch_knows():
    """The SDK's matrixMul fills `AS(ty, tx)` through `#define AS(i, j) As[(j) + (i) * BLOCK_SIZE]`
    (read as the preprocessor expands it; `(j) + (i)` is no cast) and writes C at
    `get_global_id(1) * get_global_size(0) + get_global_id(0)`, the launch's width; its rows are
    hA, which only the launch knows: the tiles keep its count of blocks and read the extent from
    their own grid, blocks past it returning first."""
    original = load_template(Path(__file__).resolve().parent / "data" / "published" / "oclsdk" / "matrixmul.toml")
    grid, block = original_launch(original, CPU)
    source = original.source_for("opencl")
    c = read_contraction(RewriteContext(original, "opencl", source, classify(source, "matrixMul"), tuple(grid),
                                        tuple(block), {}, CPU))
    assert (c.x, c.y) == ("(A[(kt_k + kt_r * wA)])", "(B[(kt_c + kt_k * wB)])")
    assert c.epilogue == ("C[(16 * ((wB) / 16) * kt_r + kt_c)] = kt_v;",)
    assert c.r_conds == ("kt_r < ((int)get_num_groups(1) * 16)",) and c.m_blocks == "hA // 16"
    assert c.exits == ("(int)get_group_id(1) * BM >= ((int)get_num_groups(1) * 16)",) and c.whole == ("BM >= 16",)
    # a variable in parentheses before a star or a sign is the variable, not a cast
    parens = TILED.replace("A[(long)row * K + k0 + threadIdx.x]", "A[(row) * K + (k0) + threadIdx.x]")
    assert read_contraction(context(parens, "matmul", "cuda", GPU, "matmul_naive")).x == "(A[(K * kt_r + kt_k)])"
    # a factor converted on its way into the product converts the operand's element
    half = TILED.replace("acc += As[threadIdx.y][k] *", "acc += __half2float(As[threadIdx.y][k]) *")
    assert read_contraction(context(half, "matmul", "cuda", GPU, "matmul_naive")).x == \
        "(__half2float((A[(K * kt_r + kt_k)])))"
    # a tile zeroed before the loop at its fill's slot (a tutorial's habit) is written again before any read
    zeroed = TILED.replace("    float acc = 0.f;", "    As[threadIdx.y][threadIdx.x] = 0.0f;\n    float acc = 0.f;")
    assert read_contraction(context(zeroed, "matmul", "cuda", GPU, "matmul_naive")).x == "(A[(K * kt_r + kt_k)])"
    with pytest.raises(Decline, match="at another slot than its fill"):
        read_contraction(context(zeroed.replace("As[threadIdx.y][threadIdx.x] = 0.0f;", "As[threadIdx.x][0] = 0.0f;"),
                                 "matmul", "cuda", GPU, "matmul_naive"))
    # the barrier that ends a step's sum may open the next step, before its fills
    first = TILED.replace("        __syncthreads();\n    }", "    }").replace(
        "for (int k0 = 0; k0 < K; k0 += 32) {", "for (int k0 = 0; k0 < K; k0 += 32) {\n        __syncthreads();")
    assert read_contraction(context(first, "matmul", "cuda", GPU, "matmul_naive")).y == "(B[(N * kt_k + kt_c)])"


@pytest.mark.parametrize("old, new, why", [
    # a read past the slots the block fills
    ("As[threadIdx.y][k] *", "As[threadIdx.y][k + 1] *", "reaches slots no thread of the block fills"),
    # the tiles step by 16 along K while the sum runs over 32 of each tile
    ("k0 += 32", "k0 += 16", "moves with the tiles' steps other than the shared index does"),
    # a slot threads of two planes of the block would write with different values
    ("k0 + threadIdx.x]", "k0 + threadIdx.x + threadIdx.z]", "which its slot does not name"),
    # the block's threads could still read a tile the next step overwrites
    ("        __syncthreads();\n    }", "    }", "no barrier between the fills and the sum, or none between"),
    # a tile declared narrower than its fill writes
    ("__shared__ float Bs[32][32];", "__shared__ float Bs[32][16];", "writes past its `\\[16\\]`"),
    # rows of the output overlapping under the guard
    ("C[(long)row * N + col] = acc;", "if (row < M && col < N) C[(long)row * (N - 1) + col] = acc;",
     "two threads write one element"),
    # every thread of a row writing one element
    ("C[(long)row * N + col] = acc;", "C[(long)row * N] = acc;", "not the thread's own output"),
    # a fill whose other branch is no zero
    ("As[threadIdx.y][threadIdx.x] = A[(long)row * K + k0 + threadIdx.x];",
     "if (row < M) As[threadIdx.y][threadIdx.x] = A[(long)row * K + k0 + threadIdx.x]; "
     "else As[threadIdx.y][threadIdx.x] = 1.0f;", "neither a tile's fill"),
    # both operands move with the blocks along x
    ("A[(long)row * K", "A[(long)(blockIdx.x * 32 + threadIdx.y) * K", "both operands move with the same block id"),
    # a tile's slot written by two threads
    ("As[threadIdx.y][threadIdx.x] =", "As[threadIdx.y][threadIdx.x + threadIdx.y] =",
     "two threads of a block write one slot"),
])
def test_a_hand_tiled_product_whose_tiles_do_not_compose_is_declined_with_the_reason(old, new, why):
    assert old in TILED
    with pytest.raises(Decline, match=why):
        read_contraction(context(TILED.replace(old, new), "matmul", "cuda", GPU, "matmul_naive"))


def test_the_reduction_proves_each_addressing_style_and_keeps_per_block_partials():
    for name in ("reduce_interleaved", "reduce_nodivergence", "reduce_sequential"):
        t = load_template(NAIVE / name)
        for backend in ("cuda", "opencl"):
            r = read_reduction(context(t.source_for(backend), t.entry, backend, GPU, name))
            assert (r.B, r.op, r.per_segment, r.bound) == (256, "sum", True, "n"), (name, backend)
            assert r.final == (f"{t.arguments[1].name}[kt_j] = kt_total;",)
    t = load_template(NAIVE / "reduce_atomic")
    r = read_reduction(context(t.source_for("cuda"), t.entry, "cuda", GPU, "reduce_atomic"))
    assert not r.per_segment and r.final == ("atomicAdd(out, kt_total);",)
    # two elements a thread at the load: the value read as written, a segment of 2 x 256 elements
    t = load_template(NAIVE / "reduce_firstadd")
    r = read_reduction(context(t.source_for("cuda"), t.entry, "cuda", GPU, "reduce_firstadd"))
    assert (r.flat, r.per, r.bound, r.B) == (False, 2, "n", 256)


# a thread's grid-stride loop before the tree (the CUDA samples' reduce6, and the loops people write
# after it): INIT, STEP and ACC replaced per case
LOOP = """__global__ void part(const float *in, float *out, int n) {
    __shared__ float s[256];
    int t = threadIdx.x;
    float v = INIT;
    for (int i = START; i < n; i += STEP) {
        ACC;
    }
    s[t] = v;
    __syncthreads();
    for (int k = 128; k > 0; k >>= 1) {
        if (t < k) s[t] += s[t + k];
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = s[0];
}
"""
PAIRS = {"INIT": "0.0f", "START": "blockIdx.x * 512 + t", "STEP": "512 * gridDim.x",
         "ACC": "v += in[i]; if (i + 256 < n) v += in[i + 256]"}
BAD_LOOPS = {
    "a step of its own": ({"STEP": "512"}, "not the 512 elements a block starts at times the launch's grid"),
    "a start not the block's": ({"START": "t * 4"}, "not at `blockIdx.x \\* R \\+ threadIdx.x`"),
    "a sum from one": ({"INIT": "1.0f"}, "from `1.0f`, not the sum's identity"),
    "an element reading the sum": ({"ACC": "v += v * in[i]"}, "reads `v` or its counter"),
    "a max before a sum": ({"INIT": "-INFINITY", "ACC": "v = fmaxf(v, in[i])"}, "takes a max, the tree a sum"),
    "two accumulators": ({"ACC": "v += in[i]; s[t] += in[i]"}, "not accumulate into one local"),
}


def loop_kernel(**changes) -> str:
    code = LOOP
    for word, text in {**PAIRS, **changes}.items():
        code = code.replace(word, text)
    return code


def test_a_grid_stride_loop_before_the_tree_is_each_blocks_share_of_the_runs():
    """reduce6's loop: a block starts at blockIdx.x * 512 + t and steps by 512 * gridDim.x, adding
    two elements a step; one step's value is read as a run's (two elements a thread, kept
    per block). A loop over one element a thread stepping by the whole grid reads flat."""
    r = read_reduction(context(loop_kernel(), "part", "cuda", GPU, "reduce_sequential"))
    assert (r.strided, r.per_segment, r.flat, r.per, r.bound) == (True, True, False, 2, "n")
    flat = loop_kernel(START="blockIdx.x * blockDim.x + t", STEP="blockDim.x * gridDim.x", ACC="v += in[i]")
    r = read_reduction(context(flat, "part", "cuda", GPU, "reduce_sequential"))
    assert (r.strided, r.flat, r.per) == (True, True, 1) and "".join(r.value.split()) == "((in[kt_i]))"


@pytest.mark.parametrize("case", sorted(BAD_LOOPS))
def test_the_reduction_refuses_a_loop_before_the_tree_it_cannot_keep(case):
    changes, why = BAD_LOOPS[case]
    with pytest.raises(Decline, match=why):
        read_reduction(context(loop_kernel(**changes), "part", "cuda", GPU, "reduce_sequential"))


def test_a_tree_whose_barrier_opens_each_step_and_a_loop_of_a_fixed_count_before_it_are_read():
    """The textbook's coarsened sum into one total: `for (stride = ...) { __syncthreads(); if (t <
    stride) ... }` with no barrier after the stores, and `for (tile = 1; tile < 8; ++tile)` adding
    a block's width apart before the tree: the loop's steps taken one after another, 8 elements a
    thread. A counter the loop's body changes is refused."""
    published = Path(__file__).resolve().parent / "data" / "published" / "textbook"
    coarse = load_template(published / "reduce_coarsened.toml")
    for backend in ("cuda", "opencl"):
        r = read_reduction(published_context(coarse, coarse.source_for(backend), backend))
        assert (r.op, r.per_segment, r.per, r.strided) == ("sum", False, 8, False), backend
    changed = coarse.source_for("cuda").replace("sum += input[i + tile * BLOCK_DIM];",
                                                "sum += input[i + tile * BLOCK_DIM]; tile += 1;")
    with pytest.raises(Decline, match="changes its counter `tile`"):
        read_reduction(published_context(coarse, changed, "cuda"))


def published_context(t, source: str, backend: str) -> RewriteContext:
    grid, block = original_launch(t, GPU)
    return RewriteContext(t, backend, source, classify(source, t.entry), tuple(grid), tuple(block), {}, GPU)


# OpenCL kernels with a loop before the tree on fewer groups than the elements' blocks, each
# reproduced on PoCL away from the original: (spec of tests/data/naive to start from, the source,
# a configuration)
STRIDED = {
    # a per-block max, accumulated in the thread's own slot of local memory over a while loop
    "a per-block max in the slot": ("reduce_sequential", """__kernel void reduce_sequential(
        __global const float *g_idata, __global float *g_odata, int n, __local float *sdata) {
    unsigned int tid = get_local_id(0);
    unsigned int i = get_group_id(0) * 256 + tid;
    sdata[tid] = -INFINITY;
    while (i < n) {
        sdata[tid] = fmax(sdata[tid], g_idata[i]);
        i += 256 * get_num_groups(0);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (unsigned int s = 128; s > 0; s >>= 1) {
        if (tid < s) sdata[tid] = fmax(sdata[tid], sdata[tid + s]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (tid == 0) g_odata[get_group_id(0)] = sdata[0];
}
""", {"ITEMS": 4, "THREADS": 64}),
    # the whole range's sum added atomically (a compare-and-swap loop), the loop striding by the
    # range's size, a local of one step
    "an atomic total over the range": ("reduce_atomic", (NAIVE / "reduce_atomic" / "kernel.cl").read_text().replace(
        "    int gid = get_global_id(0);\n    float v = 0.0f;\n    if (gid < n) v = x[gid];\n",
        "    float v = 0.0f;\n    for (int i = get_global_id(0); i < n; i += get_global_size(0)) {\n"
        "        const float e = x[i];\n        v += e;\n    }\n"), {"GRID": 1, "THREADS_SIZE": 64, "ITEMS": 4}),
}


@pytest.mark.parametrize("case", sorted(STRIDED))
def test_a_loop_before_the_tree_is_rewritten_and_reproduced_on_pocl(case, tmp_path, opencl_backend):
    import shutil

    name, source, config = STRIDED[case]
    assert "for (int i = get_global_id(0)" in source or "while (i < n)" in source  # the loop is there
    folder = tmp_path / name
    shutil.copytree(NAIVE / name, folder)
    (folder / "kernel.cl").write_text(source)
    toml = (folder / "kernel.toml").read_text().replace("ceil_div(n, 256)", "min(6, ceil_div(n, 256))")
    toml = toml.replace('sources = { cuda = "kernel.cu", opencl = "kernel.cl" }', 'sources = { opencl = "kernel.cl" }')
    if name == "reduce_sequential":  # a max per block: checked against the original's outputs
        toml = toml.replace('reference = "reference.py"\n', "")
    (folder / "kernel.toml").write_text(toml)
    original = load_template(folder)
    made = rules_template(original, "opencl", CPU)
    assert [r.name for r in made.applied.rewrites] == ["reduction"], made.applied.declined
    verdict = check_proposal(original, made.proposal, tmp_path / "tpl", backend="opencl", device=0,
                             problem=original.problem("small", {}), limits=CPU, timeout=120)
    assert verdict.ok, verdict.reason
    template = verdict.template
    ev = Evaluator(opencl_backend, template, template.problem("small", {}), seed=1, timing=FAST)
    ok, _, message = ev.reproduces_original({**template.default_config(), **config}, (3,))
    assert ok, (config, message)


# the vendors' OpenCL samples' last warp: the tree's last six levels without barriers, through a
# volatile alias of the local array
LAST_WARP = (NAIVE / "reduce_firstadd" / "kernel.cl").read_text().replace(
    "    for (unsigned int s = 256 / 2; s > 0; s >>= 1) {",
    "    for (unsigned int s = 256 / 2; s > 32; s >>= 1) {").replace(
    "    if (tid == 0) g_odata",
    "    if (tid < 32) {\n        volatile __local float *smem = sdata;\n"
    + "".join(f"        smem[tid] += smem[tid + {k}];\n" for k in (32, 16, 8, 4, 2, 1))
    + "    }\n    if (tid == 0) g_odata")
NVIDIA_CL = DeviceLimits("opencl", "NVIDIA H100 80GB HBM3", vendor="NVIDIA Corporation", warp_size=32, sm_count=132,
                         max_threads_per_block=1024, max_shared_per_block=49152, extra={"device_type": "gpu"})


def test_an_opencl_last_warp_without_barriers_is_taken_on_gpus_that_run_warps(tmp_path, opencl_backend):
    """OpenCL promises no lockstep: on a device that runs work-items apart (a CPU) the tree's last
    warp is declined as what it is; on NVIDIA's and AMD's GPUs, whose work-items run 32 or 64 at a
    time as the vendors' samples assume, it is taken and the plan says the original is a race
    there too. The rewrite's local-memory combine has a barrier at every step: on PoCL its
    configurations give the reference's sums (the original itself may not, its work-items run apart)."""
    import shutil

    from kerntune.engine.proposal import write_template

    assert "smem[tid] += smem[tid + 1];" in LAST_WARP
    folder = tmp_path / "spec"
    shutil.copytree(NAIVE / "reduce_firstadd", folder)
    (folder / "kernel.cl").write_text(LAST_WARP)
    original = load_template(folder)
    on_cpu = rules_template(original, "opencl", CPU)
    assert "reduction" not in [r.name for r in on_cpu.applied.rewrites]
    assert "which OpenCL does not promise" in {d.name: d.reason for d in on_cpu.applied.declined}["reduction"]
    made = rules_template(original, "opencl", NVIDIA_CL)
    assert [r.name for r in made.applied.rewrites] == ["reduction"], made.applied.declined
    assert "a barrier at every step" in made.applied.rewrites[0].description
    template = write_template(original, made.proposal, tmp_path / "tpl", CPU)
    ev = Evaluator(opencl_backend, template, template.problem("small", {}), seed=1, timing=FAST)
    result = ev.evaluate({**template.default_config(), "LANES": 32, "THREADS": 64, "GRID": 1})
    assert result.status == "ok", result.message


TREE = """__global__ void part(const float *in, float *out, int n) {
    __shared__ float s[256];
    int t = threadIdx.x;
    int i = blockIdx.x * 256 + t;
    s[t] = i < n ? in[i] : 0.0f;
    __syncthreads();
    for (int k = 128; k > 0; k >>= 1) {
        if (STEP) s[DST] += s[SRC];
        __syncthreads();
    }
    if (t == 0) FINAL;
}
"""
BAD_TREES = {
    "a slot counted twice": ("t < k", "t", "t + 1", "out[blockIdx.x] = s[0]", "written twice|read while"),
    "a slot left out": ("t < k && t > 0", "t", "t + k", "out[blockIdx.x] = s[0]", "does not gather"),
    "every block stores one place": ("t < k", "t", "t + k", "out[0] = s[0]", "not an atomic"),
    "outside the block": ("t < 2 * k", "t", "t + k", "out[blockIdx.x] = s[0]", "outside the block"),
}


@pytest.mark.parametrize("case", sorted(BAD_TREES))
def test_the_reduction_refuses_a_tree_that_does_not_sum_every_slot_once(case):
    step, dst, src, final, why = BAD_TREES[case]
    code = TREE.replace("STEP", step).replace("DST", dst).replace("SRC", src).replace("FINAL", final)
    with pytest.raises(Decline, match=why):
        read_reduction(context(code, "part", "cuda", GPU, "reduce_nodivergence"))


WARP_TAIL = """__global__ void part(const float *in, float *out, int n) {
    __shared__ float s[256];
    int t = threadIdx.x;
    int i = blockIdx.x * 256 + t;
    s[t] = i < n ? in[i] : 0.0f;
    __syncthreads();
    for (int k = 128; k > LAST; k >>= 1) {
        if (t < k) s[t] += s[t + k];
        __syncthreads();
    }
    if (t < LAST) {
        volatile float *v = s;
        for (int k = LAST; k > 0; k >>= 1) v[t] += v[t + k];
    }
    if (t == 0) out[blockIdx.x] = s[0];
}
"""
OPENCL_WORDS = {"__global__ void part(const float *in, float *out": "__kernel void part(__global const float *in, "
                "__global float *out", "__shared__": "__local", "threadIdx.x": "get_local_id(0)",
                "blockIdx.x": "get_group_id(0)", "__syncthreads()": "barrier(CLK_LOCAL_MEM_FENCE)",
                "volatile float": "volatile __local float"}


def test_a_last_warp_summed_without_barriers_is_read_as_lockstep_steps():
    """The samples' hand-unrolled last warp (a volatile pointer, no barrier between its steps) sums
    slot 0 right only while the warp's threads run in lockstep: CUDA's reduction takes it and says
    so in its plan; over two warps it is a race; OpenCL promises no lockstep."""
    r = read_reduction(context(WARP_TAIL.replace("LAST", "32"), "part", "cuda", GPU, "reduce_nodivergence"))
    assert (r.op, r.lockstep, r.B) == ("sum", True, 256)
    with pytest.raises(Decline, match="read while another thread writes"):
        read_reduction(context(WARP_TAIL.replace("LAST", "64"), "part", "cuda", GPU, "reduce_nodivergence"))
    # a warp's barrier between steps that leave the slots they read alone: no lockstep needed
    synced = WARP_TAIL.replace("LAST", "32").replace("v[t] += v[t + k];", "{ if (t < k) v[t] += v[t + k]; __syncwarp(); }")
    r = read_reduction(context(synced, "part", "cuda", GPU, "reduce_nodivergence"))
    assert (r.op, r.lockstep) == ("sum", False)
    code = WARP_TAIL.replace("LAST", "32")
    for cuda_word, opencl_word in OPENCL_WORDS.items():
        code = code.replace(cuda_word, opencl_word)
    with pytest.raises(Decline, match="lockstep, which OpenCL does not promise"):
        read_reduction(context(code, "part", "opencl", CPU, "reduce_nodivergence"))


def test_affine_reads_indices_as_polynomials():
    assert affine.slope("row * K + k", "k") == 1
    assert affine.slope("row * K + k", "row") is None  # K moves it, not a number
    assert affine.slope("(y - 1) * W + x + 1", "x") == 1
    assert affine.slope("2 * s * tid", "tid", {"s"}) is None
    assert affine.slope("4 * (t << 1)", "t") == 8
    p = affine.read("j * 256 + t").substitute("j", affine.Poly.const(2))
    assert p == affine.Poly.name("t") + affine.Poly.const(512)
    with pytest.raises(affine.NotAffine):
        affine.read("i / 2 + 1", {"i"})


CUDA_CONFIGS = {
    "matmul_naive": ({}, {"BK": 8, "BM": 128, "BN": 128, "TM": 8, "TN": 8, "STAGES": 2}, {"BK": 16, "BM": 64, "BN": 32, "TM": 2,
                                                                          "TN": 1},
                     {"BK": 8, "BM": 128, "BN": 128, "TM": 8, "TN": 8, "STAGES": 2, "VEC": 4},
                     {"BK": 16, "BM": 128, "BN": 64, "TM": 8, "TN": 4, "VEC": 4}),
    "matmul_half": ({"BK": 16, "BM": 128, "BN": 128, "TM": 8, "TN": 8, "STAGES": 2, "VEC": 4},
                    {"BK": 32, "BM": 128, "BN": 128, "TM": 8, "TN": 4, "MMA": 1},
                    {"BK": 16, "BM": 64, "BN": 32, "TM": 2, "TN": 4, "MMA": 1, "STAGES": 3},
                    {"BK": 32, "BM": 128, "BN": 128, "TM": 8, "TN": 8, "MMA": 1, "STAGES": 2},
                    {"BK": 32, "BM": 128, "BN": 64, "TM": 8, "TN": 4, "MMA": 1, "STAGES": 3}),
    "reduce_interleaved": ({"LANES": 32}, {"LANES": 8, "THREADS": 128, "GRID": 4}),
    "reduce_atomic": ({"GRID": 4}, {"GRID": 2, "THREADS_SIZE": 1024, "ITEMS": 8}),
    "stencil9": ({"ITEMS": 4}, {"ITEMS": 16, "BLOCK": 64}, {"TILE": 1, "ITEMS": 8}),
    "stencil1d": ({"TILE": 1, "ITEMS": 4}, {"ITEMS": 2}),
    "conv_rows": ({"TILE": 1, "ITEMS": 4, "BLOCK": 32, "BLOCK_Y": 8}, {"TILE": 1, "RX": 8, "BLOCK": 32, "BLOCK_Y": 1},
                  {"RX": 4, "ITEMS": 2}),
    "reduce_firstadd": ({"LANES": 16}, {"LANES": 8, "THREADS": 1024, "GRID": 2}),
    "transpose": ({"TILE": 32}, {"TILE": 64, "ROWS": 16, "PAD": 0}, {"TILE": 8, "ROWS": 2}),
}


@pytest.mark.skipif(cuda.find_nvcc() is None, reason="nvcc not found")
@pytest.mark.parametrize("name", sorted(CUDA_CONFIGS))
def test_the_cuda_rewrites_compile_at_several_values(name, tmp_path, monkeypatch):
    monkeypatch.setenv("KERNTUNE_CACHE_DIR", str(tmp_path))
    t = load_template(NAIVE / name)
    proposal = rules_template(t, "cuda", GPU).proposal
    src = proposal.sources["cuda"]
    defaults = {p.name: p.default for p in proposal.parameters}
    for config in CUDA_CONFIGS[name]:
        cubin, info, _ = cuda.compile_cubin(src, t.entry, {k: str(v) for k, v in {**defaults, **config}.items()})
        assert cubin and info.get("spill_stores", 0) == 0, (config, info)


def test_the_stencil_runs_the_body_as_written_for_several_rows_and_refuses_other_thread_ids():
    t = load_template(NAIVE / "stencil9")
    src = t.source_for("cuda")
    out = rules_template(t, "cuda", GPU, lift=False).proposal.sources["cuda"]
    assert "static __device__ __forceinline__ void kt_point(const float * __restrict__ in, const float * " \
           "__restrict__ w, float * __restrict__ out, int H, int W, const int kt_x, const int kt_y)" in out
    assert "int x = kt_x;" in out and "int y = kt_y;" in out
    body = src[src.index("if (x < W && y < H)"):src.rindex("}")]
    assert out.count(body) == 2  # the point function's and the original's, as written
    other = src.replace("if (x < W && y < H) {", "if (x < W && y < H && threadIdx.x > 0) {")
    from kerntune.agents.rewrite_stencil import rewrite as stencil
    declined = stencil(context(other, "stencil9", "cuda", GPU, "stencil9"))
    assert "other than through its coordinates" in declined.reason


GPU_KERNELS = ("matmul_naive", "matmul_coalesced", "matmul_half", "matmul_bf16", "matmul_batched", "reduce_interleaved", "reduce_nodivergence",
               "reduce_sequential", "reduce_firstadd", "reduce_atomic", "stencil5", "stencil9", "conv_rows",
               "conv_cols", "stencil1d", "embedding_gather", "transpose")


@pytest.mark.gpu
@pytest.mark.parametrize("name", GPU_KERNELS)
def test_on_cuda_the_rewritten_kernels_gate_and_every_tuned_configuration_verifies(name, tmp_path):
    from kerntune.engine.tune import resolve_device

    _, limits = resolve_device("cuda", 0)
    original = load_template(NAIVE / name)
    from rewrite_support import gates_and_tunes_on_cuda

    made = rules_template(original, "cuda", limits)
    assert made.applied.rewrites, made.why_none()
    gates_and_tunes_on_cuda(original, made.proposal, tmp_path, limits)


# tensor-core tiles of the half product: warp layouts, depths and tile shapes
# and the shared tiles in flight (STAGES: 1 waits on each step's copies, 2 and 3 rotate them)
MMA_CONFIGS = ({"BK": 32, "BM": 128, "BN": 128, "TM": 8, "TN": 4, "STAGES": 3},  # 61 KiB: past the static 48
               {"BK": 16, "BM": 64, "BN": 32, "TM": 2, "TN": 4, "STAGES": 1},
               {"BK": 32, "BM": 64, "BN": 128, "TM": 4, "TN": 8, "STAGES": 3},
               {"BK": 16, "BM": 16, "BN": 16, "TM": 2, "TN": 2, "STAGES": 3})


def test_the_half_product_offers_tensor_core_tiles_on_cuda_only():
    t = load_template(NAIVE / "matmul_half")
    cuda_names = {p.name for p in rules_template(t, "cuda", GPU).proposal.parameters}
    assert "MMA" in cuda_names
    from types import SimpleNamespace as NS

    from kerntune.agents.contraction_mma import declines

    half = NS(half=True, bf16=False)
    s = NS(acc_type="float", update="+=", acc_init="0.0f")
    assert declines("cuda", "9.0", s, (half, half)) == ""
    assert "no tensor cores" in declines("cuda", "6.1", s, (half, half))
    assert "CUDA's" in declines("opencl", "", s, (half, half))
    # a float product has no half operands to give the tensor cores; a sum updated otherwise
    assert "not one half element" in declines("cuda", "9.0", s, (half, NS(half=False, bf16=False)))
    assert declines("cuda", "9.0", NS(acc_type="float", update="+=", acc_init="bias[kt_c]"), (half, half)) == ""
    assert "updated by `-=`" in declines("cuda", "", NS(acc_type="float", update="-=", acc_init="0"), (half, half))


@pytest.mark.gpu
@pytest.mark.parametrize("sizes", ({}, {"M": 37, "N": 45, "K": 29}))
def test_on_cuda_the_tensor_core_tiles_reproduce_the_half_product(sizes, tmp_path):
    """Aligned rows (16-byte words staged) and odd ones (element by element), tails in every
    dimension: each warp layout gives the original's outputs within the calibrated tolerance."""
    from kerntune.engine.backends import open_backend
    from kerntune.engine.tune import resolve_device

    _, limits = resolve_device("cuda", 0)
    original = load_template(NAIVE / "matmul_half")
    made = rules_template(original, "cuda", limits)
    verdict = check_proposal(original, made.proposal, tmp_path / "tpl", backend="cuda", device=0,
                             problem=original.problem("small", {}), limits=limits, timeout=300)
    assert verdict.ok, verdict.reason
    template = verdict.template
    backend = open_backend("cuda", 0)
    try:
        ev = Evaluator(backend, template, template.problem("small", sizes), seed=1, timing=FAST)
        for config in MMA_CONFIGS:
            ok, _, message = ev.reproduces_original({**template.default_config(), **config, "MMA": 1}, (3, 4))
            assert ok, (config, message)
    finally:
        backend.close()


# the half product B transposed, tiled by hand: half tiles filled under bounds (zero converted to
# half past them), summed in float through conversions
HALF_TILED = """#include <cuda_fp16.h>
#define TILE 16

__global__ void matmul_half(const __half *A, const __half *Bt, __half *C, int M, int N, int K) {
    __shared__ __half As[TILE][TILE];
    __shared__ __half Bs[TILE][TILE];
    int tx = threadIdx.x, ty = threadIdx.y;
    int col = blockIdx.x * TILE + tx;
    int row = blockIdx.y * TILE + ty;
    float acc = 0.0f;
    for (int t = 0; t < (K + TILE - 1) / TILE; t++) {
        As[ty][tx] = (row < M && t * TILE + tx < K) ? A[row * K + t * TILE + tx] : __float2half(0.0f);
        Bs[ty][tx] = (blockIdx.x * TILE + ty < N && t * TILE + tx < K)
                         ? Bt[(blockIdx.x * TILE + ty) * K + t * TILE + tx] : __float2half(0.0f);
        __syncthreads();
        for (int k = 0; k < TILE; k++)
            acc += __half2float(As[ty][k]) * __half2float(Bs[tx][k]);
        __syncthreads();
    }
    if (row < M && col < N) C[row * N + col] = __float2half(acc);
}
"""


# 16 x 16 outputs a group, tiles 32 deep: each work-item copies two elements of each tile
DEEP_TILED = """__kernel void matmul_naive(__global const float *A, __global const float *B, __global float *C, int M, int N,
                           int K) {
    __local float As[16][32];
    __local float Bs[32][16];
    const int tr = get_local_id(0), tc = get_local_id(1);
    const int row = get_group_id(0) * 16 + tr, col = get_group_id(1) * 16 + tc;
    float sum = 0.0f;
    for (int k0 = 0; k0 < K; k0 += 32) {
        for (int i = 0; i < 32; i += 16) {
            As[tr][tc + i] = (row < M && k0 + tc + i < K) ? A[row * K + k0 + tc + i] : 0.0f;
            Bs[tr + i][tc] = (k0 + tr + i < K && col < N) ? B[(k0 + tr + i) * N + col] : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int k = 0; k < 32; ++k)
            sum += As[tr][k] * Bs[k][tc];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (row < M && col < N)
        C[row * N + col] = sum;
}
"""


def tiled_spec(folder: Path, naive: str, source: str, backend: str, *launch: tuple[str, str]) -> Path:
    """The naive spec `naive` over a hand-tiled `source` of one backend (its launch's lines
    replaced as `launch` says)."""
    shutil.copytree(NAIVE / naive, folder)
    (folder / ("kernel.cu" if backend == "cuda" else "kernel.cl")).write_text(source)
    toml = (folder / "kernel.toml").read_text().replace(
        'sources = { cuda = "kernel.cu", opencl = "kernel.cl" }',
        f'sources = {{ {backend} = "{"kernel.cu" if backend == "cuda" else "kernel.cl"}" }}')
    for old, new in launch:
        toml = toml.replace(old, new)
    (folder / "kernel.toml").write_text(toml)
    return folder


def deep_tiled_spec(folder: Path) -> Path:
    """matmul_naive's spec over DEEP_TILED (OpenCL only, groups of 16 x 16)."""
    return tiled_spec(folder, "matmul_naive", DEEP_TILED, "opencl",
                      ('grid = ["ceil_div(M, 32)", "ceil_div(N, 32)"]',
                       'grid = ["ceil_div(M, 16)", "ceil_div(N, 16)"]'),
                      ("block = [32, 32]", "block = [16, 16]"))


def tiled_reproduces(original, backend: str, device, limits, tmp_path, configs, fixed=None) -> None:
    """The rules give a hand-tiled product the contraction, its template passes the gate, and each
    configuration gives the original's outputs at odd sizes (M 37, N 45, K 29)."""
    made = rules_template(original, backend, limits)
    assert [r.name for r in made.applied.rewrites] == ["contraction"], made.why_none()
    verdict = check_proposal(original, made.proposal, tmp_path / "tpl", backend=backend, device=0,
                             problem=original.problem("small", {}), limits=limits, timeout=300)
    assert verdict.ok, verdict.reason
    ev = Evaluator(device, verdict.template, verdict.template.problem("small", {"M": 37, "N": 45, "K": 29}),
                   seed=1, timing=FAST)
    for config in configs:
        full = {**verdict.template.default_config(), **(fixed or {}), **config}
        ok, _, message = ev.reproduces_original(full, (3, 4))
        assert ok, (config, message)


def test_a_tile_each_thread_copies_several_elements_of_is_read_as_one_slot_a_copy(tmp_path):
    """`for (i = 0; i < 32; i += 16) As[tr][tc + i] = A[row * K + k0 + tc + i]`: the copy (tc, i / 16)
    fills slot tc + i, so the read `As[tr][k]` (k up to 31, past the 16 work-items along tc) is the
    copy whose tc + i is k, and A's element moves with tc + i as the slot does."""
    original = load_template(deep_tiled_spec(tmp_path / "spec"))
    grid, block = original_launch(original, CPU)
    c = read_contraction(RewriteContext(original, "opencl", DEEP_TILED, classify(DEEP_TILED, "matmul_naive"),
                                        tuple(grid), tuple(block), {}, CPU))
    assert (c.x, c.y) == ("(A[(K * kt_r + kt_k)])", "(B[(N * kt_k + kt_c)])")
    assert c.k_cond == "((32 * (kt_k / (32)) - K) < 0) && ((-K + kt_k) < 0)"
    # a copy whose element does not move as its slot does is refused
    with pytest.raises(Decline, match="moves with the copy that wrote it"):
        skew = DEEP_TILED.replace("A[row * K + k0 + tc + i]", "A[row * K + k0 + tc + 2 * i]")
        read_contraction(RewriteContext(original, "opencl", skew, classify(skew, "matmul_naive"), tuple(grid),
                                        tuple(block), {}, CPU))


@pytest.mark.slow
def test_on_pocl_a_tile_each_thread_copies_several_elements_of_gives_the_originals_outputs(tmp_path, opencl_backend):
    tiled_reproduces(load_template(deep_tiled_spec(tmp_path / "spec")), "opencl", opencl_backend, CPU, tmp_path,
                     ({"BK": 8, "BM": 16, "BN": 32, "TM": 2, "TN": 4},
                      {"BK": 16, "BM": 32, "BN": 16, "TM": 4, "TN": 2, "STAGES": 2, "VEC": 4}))


def half_tiled_spec(folder: Path) -> Path:
    """matmul_half's spec over HALF_TILED (CUDA only)."""
    return tiled_spec(folder, "matmul_half", HALF_TILED, "cuda")


def test_a_half_product_tiled_by_hand_is_offered_the_tensor_cores():
    """The fills' bounds on the shared index end the sum, the one on B's rows is the guard's on the
    output's columns (Bs[tx][k]: the slot thread (k, tx) filled, B's row blockIdx.x * TILE + tx);
    the operands are half elements converted to float, so MMA is offered."""
    from kerntune.agents.contraction_mma import declines
    from kerntune.agents.rewrite_contraction import vector_operands

    ctx = context(HALF_TILED, "matmul_half", "cuda", GPU, "matmul_half")
    c = read_contraction(ctx)
    assert (c.x, c.y) == ("(__half2float((A[(K * kt_r + kt_k)])))", "(__half2float((Bt[(K * kt_c + kt_k)])))")
    assert c.k_cond.endswith("&& ((-K + kt_k) < 0)") and (c.r_conds, c.c_conds) == (("kt_r < (M)",), ("kt_c < (N)",))
    assert c.epilogue == ("C[(N * kt_r + kt_c)] = __float2half(kt_v);",)
    assert declines("cuda", "9.0", c, vector_operands(ctx, c)) == ""


@pytest.mark.gpu
def test_on_cuda_a_half_product_tiled_by_hand_gates_and_its_tensor_core_tiles_reproduce_it(tmp_path):
    from kerntune.engine.backends import open_backend
    from kerntune.engine.tune import resolve_device

    _, limits = resolve_device("cuda", 0)
    backend = open_backend("cuda", 0)
    try:
        # on a Hopper card the warpgroup tiles too (MMA 2)
        hopper = ({"BK": 64, "BM": 128, "BN": 256, "TM": 4, "TN": 8, "STAGES": 3, "MMA": 2},
                  {"BK": 16, "BM": 64, "BN": 64, "TM": 4, "TN": 8, "STAGES": 1, "MMA": 2}) \
            if limits.compute_capability == "9.0" else ()
        tiled_reproduces(load_template(half_tiled_spec(tmp_path / "spec")), "cuda", backend, limits, tmp_path,
                         MMA_CONFIGS[:2] + ({"BK": 16, "BM": 64, "BN": 64, "TM": 4, "TN": 4, "VEC": 4, "MMA": 0},) + hopper,
                         {"MMA": 1})
    finally:
        backend.close()


@pytest.mark.gpu
@pytest.mark.parametrize("bar", ("block_sums", "reduce_total", "stencil5_tiled", "gather_rows", "conv_rows_tiled",
                                 "conv_cols_tiled", "stencil7_marched", "transpose_tiled"))
def test_on_cuda_the_hand_written_bars_verify(bar, tmp_path):
    bars = Path(__file__).resolve().parent.parent / "bench" / "bars"
    run = TuneRun(load_template(bars / bar), TuneOptions(backend="cuda", problem="small", seed=5, strategy="random",
                                                         budget=8, probe=False, session_path=tmp_path / "s.toml")).run()
    bad = [(r.config, r.status, r.message) for r in run.results if r.status not in ("ok", "pruned")]
    assert not bad and run.winner_ok
