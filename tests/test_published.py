"""Kernels as people publish them (tests/data/published: files of several kernels in the styles of
a matrix-product worklog, the CUDA samples' reduction, a GPT-2 trainer, finite-difference codes),
each spec naming one kernel of its file: the rules pick the pass the kernel's class calls for, or
decline with the reason that names what is missing; on PoCL each template passes the gate and
gives the reference's outputs away from its defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from kerntune.agents.rules import rules_template
from kerntune.engine.device import DeviceLimits
from kerntune.engine.template import load_template
from rewrite_support import gated_on_pocl

PUBLISHED = Path(__file__).resolve().parent / "data" / "published"
CPU = DeviceLimits("opencl", "cpu", max_threads_per_block=4096, warp_size=1, sm_count=2, max_shared_per_block=65536)

# spec -> (the rewrites the rules apply on OpenCL, configurations away from the defaults that must
# give the original's outputs)
OPENCL = {
    "sgemm/sgemm_naive": (["contraction"], ({"BK": 8, "BM": 32, "BN": 16, "TM": 4, "TN": 2, "VEC": 4},)),
    "sgemm/sgemm_coalesce": (["contraction"], ({"BK": 4, "BM": 16, "BN": 32, "TM": 2, "TN": 2, "STAGES": 2},)),
    "sgemm/mygemm1": (["contraction"], ({"BK": 8, "BM": 32, "BN": 64, "TM": 4, "TN": 4, "VEC": 4, "STAGES": 2},
                                        {"BK": 16, "BM": 64, "BN": 16, "TM": 8, "TN": 1})),
    "reduction/reduce0": (["reduction"], ({"LANES": 16},)),
    "reduction/reduce1": (["reduction"], ({"LANES": 8, "THREADS": 64, "GRID": 1},)),
    "reduction/reduce2": (["reduction"], ({"LANES": 32, "GRID": 2},)),
    "reduction/reduce3": (["reduction"], ({"LANES": 16, "THREADS": 128},)),
    "reduction/reduce5": (["reduction"], ({"LANES": 32, "THREADS": 64, "GRID": 1},)),
    # the grid-stride loop before the tree, accumulated in the work-item's slot: each group's share
    "reduction/reduce6": (["reduction"], ({"ITEMS": 4, "THREADS": 64}, {"ITEMS": 1, "THREADS": 1024})),
    "stencils/heat_step": (["stencil"], ({"ITEMS": 4, "RX": 2}, {"TILE": 1, "ITEMS": 2, "RX": 2})),
    "stencils/jacobi_step": (["stencil"], ({"ITEMS": 2, "RX": 4}, {"TILE": 1, "ITEMS": 4})),
    # a column's loop over z marched through a plane's tile
    "stencils/stencil7_zloop": (["stencil"], ({"ITEMS": 4}, {"TILE": 1, "RX": 2, "BLOCK": 8, "BLOCK_Y": 2})),
    # the 2.5-D march: a plane's tile, the column's planes in registers
    "stencils/stencil7": (["stencil"], ({"ITEMS": 4}, {"ITEMS": 2, "RX": 2, "BLOCK": 8, "BLOCK_Z": 2},
                                        {"TILE": 1, "ITEMS": 8, "RX": 2, "BLOCK_Z": 1},
                                        {"TILE": 1, "ITEMS": 2, "BLOCK": 8, "BLOCK_Y": 2, "BLOCK_Z": 2})),
    # a thread per (b, t) over the channels, through local pointers into the arrays (`out + b * T * C +
    # t * C`, the token's row `wte + ix * C`): the row spread over lanes, kept and moved in packs
    "llm/encoder1": (["rowwise", "rowwise_keep"], ({"LANES": 16, "BLOCK": 16},
                                                   {"LANES": 16, "BLOCK": 16, "KEEP": 8, "VEC": 4},
                                                   {"LANES": 1, "KEEP": 4, "VEC": 2})),
    # the element-per-thread encoder: `*out_btc = *wte_ix + *wpe_tc` through local pointers into
    # the arrays, the token's row `ix` read where the pack's (b, t) stays
    "llm/encoder2": (["elementwise"], ({"VEC": 4, "ITEMS": 2}, {"VEC": 2, "GRID": 2})),
    "llm/gelu": (["elementwise"], ({"VEC": 4, "ITEMS": 2},)),
    # the trainer's matmul: each sum starts at the bias of its own output (`float val = bias[oc]`)
    "llm/matmul1": (["contraction"], ({"BK": 8, "BM": 32, "BN": 16, "TM": 4, "TN": 2, "VEC": 4},)),
    # a textbook's chapters: the product a thread per element; the tiled ones the lifts take
    # (TILE_WIDTH with the block, the grid and the sizes in whole tiles); the convolution's mask in
    # constant memory, its offset `#define MASK_OFFSET (MASK_DIM / 2)`; the tiled convolution's grid
    # in steps of OUT_TILE_DIM, made from IN_TILE_DIM
    "textbook/matmul": (["contraction"], ({"BK": 8, "BM": 32, "BN": 32, "TM": 4, "TN": 4, "VEC": 4},)),
    # products tiled by hand: each tile's fill composed with its read gives the contraction's operands
    "textbook/matmul_tiled": (["contraction"], ({"TILE_WIDTH": 8}, {"BK": 8, "BM": 32, "BN": 16, "TM": 4, "TN": 2})),
    # the fills' zeros past Width bound the shared index; the guard bounds the outputs
    "textbook/matmul_tiled_bounds": (["contraction"], ({"TILE_WIDTH": 32},
                                                        {"BK": 8, "BM": 16, "BN": 32, "TM": 2, "TN": 4, "VEC": 4})),
    # the worklog's chunks through pointers moved at each step (`A += BLOCKSIZE`)
    "sgemm/sgemm_shared": (["contraction"], ({"BK": 16, "BM": 32, "BN": 64, "TM": 4, "TN": 4, "VEC": 4,
                                             "STAGES": 2},)),
    # column-major, the tiles filled transposed (`Asub[col][row]`)
    "sgemm/mygemm2": (["contraction"], ({"BK": 8, "BM": 16, "BN": 32, "TM": 2, "TN": 4, "VEC": 4},)),
    "textbook/conv2d": (["stencil"], ({"TILE": 1, "ITEMS": 2, "RX": 2},)),
    "textbook/conv2d_tiled": ([], ({"IN_TILE_DIM": 16},)),
    "textbook/stencil1d": ([], ({"BLOCK_SIZE": 64},)),
    "textbook/stencil1d_global": (["stencil"], ({"TILE": 1, "ITEMS": 4},)),
    # the letter histogram: atomics on the global bins privatised per block, several letters a thread;
    # the privatised one's bins counted over more letters a block
    "textbook/histo": (["histogram"], ({"PRIVATE": 1, "COPIES": 4, "ITEMS": 4, "GRID": 1, "BLOCK": 64},
                                       {"ITEMS": 2, "STRIDED": 0})),
    "textbook/histo_private": (["histogram"], ({"BLOCK": 64, "ITEMS": 8, "STRIDED": 0, "GRID": 2, "COPIES": 8},)),
    # the textbook's coarsened threads: CFACTOR consecutive letters, or the letters a grid apart
    "textbook/histo_contiguous": (["histogram"], ({"ITEMS": 4, "GRID": 1, "BLOCK": 32}, {"ITEMS": 2, "STRIDED": 0})),
    "textbook/histo_interleaved": (["histogram"], ({"ITEMS": 16, "STRIDED": 0, "BLOCK": 128, "COPIES": 2},)),
    # the textbook's segmented sum: the barrier first in each step of the tree, an atomic a block
    "textbook/reduce_segmented": (["reduction"], ({"GRID": 2, "THREADS": 128, "ITEMS": 2},)),
    # the coarsened threads first add 8 elements in a loop of a fixed count
    "textbook/reduce_coarsened": (["reduction"], ({"GRID": 1, "THREADS": 64, "ITEMS": 4},)),
    # the transpose post's steps: TILE_DIM x BLOCK_ROWS blocks, the grid in tiles of TILE_DIM (the
    # #defines read parameters of other names: the CUDA file's constants are `const int TILE_DIM`)
    "transpose/transpose_nobank": ([], ({"TILE_DIM_SIZE": 16, "BLOCK_ROWS_SIZE": 4},)),
    "transpose/transpose_bounds": (["transpose"], ({"TILE_DIM_SIZE": 16, "BLOCK_ROWS_SIZE": 2},
                                                  {"TILE": 32, "ROWS": 4, "PAD": 0})),
    # the naive transpose, its tile's rows a loop over `j`: staged through a tile of another side
    "transpose/transpose_naive": (["transpose"], ({"TILE": 16, "ROWS": 4}, {"TILE": 64, "ROWS": 16})),
    # OpenCL SDK samples: float4 elements, a float4 tree in __local memory, AS/BS sub-matrices
    "oclsdk/dotproduct": (["elementwise"], ({"ITEMS": 4, "GRID": 1},)),
    "oclsdk/reducefloat4": (["reduction"], ({"LANES": 16, "THREADS": 128},)),
    # the tiles through the AS/BS macros, the output at get_global_id(1) * get_global_size(0) + ...
    "oclsdk/matrixmul": (["contraction"], ({"BLOCK_SIZE": 8}, {"BK": 8, "BM": 32, "BN": 16, "TM": 4, "TN": 2})),
}


def spec(name: str) -> Path:
    return PUBLISHED / f"{name}.toml"


@pytest.mark.parametrize("name", sorted(OPENCL))
def test_a_published_kernel_is_rewritten_gated_and_reproduced_on_pocl(name, tmp_path, opencl_backend):
    rewrites, configs = OPENCL[name]
    original = load_template(spec(name))
    made = rules_template(original, "opencl", CPU)
    assert [r.name for r in made.applied.rewrites] == rewrites, made.why_none()
    template, ev = gated_on_pocl(original, made.proposal, tmp_path, CPU, opencl_backend)
    for config in configs:
        # checked against the reference: PoCL miscompiles reduce0's original itself (its tree's
        # barrier in a loop bounded by get_local_size(0)), so the gate's comparison with the
        # original's outputs is PoCL's bug there, not the template's
        result = ev.evaluate({**template.default_config(), **config})
        assert result.status == "ok", (config, result.message)


# spec -> (backend, the pass that declines, what its reason names)
DECLINED = {
}


@pytest.mark.parametrize("name", sorted(DECLINED))
def test_a_published_kernel_no_pass_fits_is_declined_with_what_is_missing(name):
    backend, rewrite, why = DECLINED[name]
    made = rules_template(load_template(spec(name)), backend, CPU)
    assert rewrite not in [r.name for r in made.applied.rewrites]
    reasons = {d.name: d.reason for d in made.applied.declined}
    assert why in reasons[rewrite], reasons


def test_a_block_whose_grid_counts_several_elements_a_thread_is_not_lifted():
    """reduce3 adds two elements a thread: ceil_div(n, 512) blocks of 256 threads. Another block
    would leave the grid and the partials' count as they are (half the input summed): the block
    stays, and says why."""
    made = rules_template(load_template(spec("reduction/reduce3")), "opencl", CPU)
    assert "BLOCK" not in {p.name for p in made.proposal.parameters}
    assert any("counts 512 elements a block of 256 threads" in n for n in made.lifted.notes)


GPU = DeviceLimits("cuda", "gpu", max_threads_per_block=1024, warp_size=32, sm_count=132, max_shared_per_block=49152)
# spec -> (the rewrites the rules apply on CUDA, configurations compiled with nvcc beside the defaults)
CUDA = {
    "sgemm/sgemm_naive": (["contraction"], ({"BK": 8, "BM": 128, "BN": 128, "TM": 8, "TN": 8, "STAGES": 2, "VEC": 4},)),
    "sgemm/sgemm_coalesce": (["contraction"], ({"BK": 16, "BM": 64, "BN": 64, "TM": 4, "TN": 4, "VEC": 4},)),
    "reduction/reduce0": (["reduction"], ({"LANES": 32},)),
    "reduction/reduce1": (["reduction"], ({"LANES": 8, "THREADS": 128, "GRID": 4},)),
    "reduction/reduce2": (["reduction"], ({"LANES": 16, "GRID": 2},)),
    "reduction/reduce4": (["reduction"], ({"LANES": 32, "THREADS": 512},)),
    "reduction/reduce5": (["reduction"], ({"LANES": 16, "GRID": 4},)),
    "reduction/reduce6": (["reduction"], ({"ITEMS": 8, "THREADS": 1024}, {"ITEMS": 1, "THREADS": 64})),
    "stencils/heat_step": (["stencil"], ({"ITEMS": 4, "RX": 2}, {"TILE": 1, "ITEMS": 4})),
    # a template kernel (`template <typename real>`, run as double): the point's function is the same template
    "stencils/heat_step_t": (["stencil"], ({"ITEMS": 4, "RX": 2}, {"TILE": 1, "ITEMS": 2, "RX": 2})),
    "stencils/stencil7_zloop": (["stencil"], ({"ITEMS": 4}, {"TILE": 1, "RX": 2, "BLOCK_Y": 4})),
    "stencils/stencil7": (["stencil"], ({"ITEMS": 8, "RX": 2}, {"TILE": 1, "ITEMS": 32, "RX": 2, "BLOCK_Z": 1},
                                        {"TILE": 1, "ITEMS": 16, "BLOCK_Y": 8, "BLOCK_Z": 1})),
    "llm/encoder1": (["rowwise", "rowwise_keep"], ({"LANES": 32}, {"LANES": 8, "KEEP": 8, "VEC": 4})),
    "llm/encoder2": (["elementwise"], ({"VEC": 4, "ITEMS": 2, "CACHE": 1},)),
    "llm/softmax4": (["fast_math"], ({"BLOCK": 128, "FAST_MATH": 1},)),  # cg::reduce over tiles of 32
    "samples/vectoradd": (["elementwise"], ({"VEC": 4, "ITEMS": 2},)),
    "textbook/reduce_segmented": (["reduction"], ({"GRID": 4, "THREADS": 512, "ITEMS": 4},)),
    "textbook/matmul": (["contraction"], ({"BK": 16, "BM": 64, "BN": 64, "TM": 4, "TN": 4, "VEC": 4},)),
    # products tiled by hand: the worklog's chunks through moved pointers, the textbook's phases, the
    # samples' template (the output's rows only its launch knows: the tiles divide them)
    "sgemm/sgemm_shared": (["contraction"], ({"BK": 16, "BM": 128, "BN": 128, "TM": 8, "TN": 8, "STAGES": 2,
                                              "VEC": 4},)),
    "textbook/matmul_tiled_bounds": (["contraction"], ({"BK": 32, "BM": 64, "BN": 64, "TM": 4, "TN": 4, "VEC": 4},)),
    "samples/matrixmul": (["contraction"], ({"BK": 16, "BM": 128, "BN": 64, "TM": 8, "TN": 4, "VEC": 4},)),
    "llm/matmul1": (["contraction"], ({"BK": 16, "BM": 64, "BN": 32, "TM": 4, "TN": 4},)),  # a bias to start from
    # the mask a `__constant__` array of the file, the tile in shared memory beside it
    "textbook/conv2d": (["stencil"], ({"TILE": 1, "ITEMS": 2, "RX": 2},)),
    "textbook/conv2d_tiled": ([], ({"IN_TILE_DIM": 16},)),
    "textbook/reduce_coarsened": (["reduction"], ({"GRID": 4, "THREADS": 512, "ITEMS": 8},)),
    "textbook/histo": (["histogram"], ({"PRIVATE": 1, "COPIES": 32, "ITEMS": 8, "GRID": 4}, {"ITEMS": 4, "STRIDED": 0})),
    "textbook/histo_private": (["histogram"], ({"ITEMS": 16, "GRID": 8, "COPIES": 4},)),
    "textbook/histo_contiguous": (["histogram"], ({"ITEMS": 4, "STRIDED": 0, "GRID": 2},)),
    "textbook/histo_interleaved": (["histogram"], ({"ITEMS": 8, "GRID": 16},)),
    # a book's byte histogram: a while loop over the grid's stride, its shared bins a bin a thread
    "byexample/histo_global": (["histogram"], ({"PRIVATE": 1, "COPIES": 2, "ITEMS": 4, "THREADS": 512},)),
    "byexample/histo_shared": (["histogram"], ({"COPIES": 4, "ITEMS": 8, "GRID": 4, "THREADS": 1024},)),
    "transpose/transpose_nobank": ([], ({"TILE_DIM_VALUE": 16, "BLOCK_ROWS_VALUE": 4},)),
    "transpose/transpose_naive": (["transpose"], ({"TILE": 32}, {"TILE": 64, "ROWS": 16, "PAD": 0})),
}


@pytest.mark.parametrize("name", sorted(CUDA))
def test_a_published_cuda_kernel_is_rewritten_and_compiles_with_nvcc(name, tmp_path, monkeypatch):
    from kerntune.engine.backends import cuda_toolchain as cuda

    if cuda.find_nvcc() is None:
        pytest.skip("nvcc not found")
    monkeypatch.setenv("KERNTUNE_CACHE_DIR", str(tmp_path))
    rewrites, configs = CUDA[name]
    original = load_template(spec(name))
    made = rules_template(original, "cuda", GPU)
    assert [r.name for r in made.applied.rewrites] == rewrites, made.why_none()
    source = made.proposal.sources["cuda"]
    defaults = {p.name: p.default for p in made.proposal.parameters}
    for config in ({}, *configs):
        cubin, info, _ = cuda.compile_cubin(source, original.entry, {k: str(v) for k, v in {**defaults, **config}.items()})
        assert cubin and info.get("spill_stores", 0) == 0, (config, info)


def test_a_template_kernel_is_rewritten_as_the_same_template():
    """The CUDA samples' `template <class T> reduce0`, its shared memory from the `SharedMemory<T>`
    helper and its barrier a cooperative group's: the reduction's kernel is written beside it as the
    same template (the file's instantiations make both), in T."""
    made = rules_template(load_template(spec("reduction/reduce0")), "cuda", GPU)
    source = made.proposal.sources["cuda"]
    new = source[source.index("#if LANES > 0"):source.index("#else", source.index("#if LANES > 0"))]
    assert "template <class T>\n__global__ void reduce0(T *g_idata, T *g_odata, unsigned int n)" in new
    assert "T kt_acc = (T)(0);" in new and "SharedMemory" not in new
    assert source.count("template <class T>\n__global__ void reduce0(") == 2  # the original's, as written


def test_a_template_stencil_is_written_in_the_templates_words_at_the_entrys_instantiation():
    """heat_step_t<double>: the point's function is the same template, its tile `real`, and the
    shared-memory constraint counts the double's 8 bytes (the file instantiates float first)."""
    made = rules_template(load_template(spec("stencils/heat_step_t")), "cuda", GPU)
    source = made.proposal.sources["cuda"]
    assert "template <typename real>\nstatic __device__ __forceinline__ void kt_point(" in source
    assert "__shared__ real kt_s0[" in source and "kt_point<real>(" in source
    assert any(c.endswith("* 8 <= max_shared_per_block") for c in made.proposal.constraints), made.proposal.constraints


def test_a_define_the_build_options_set_is_not_lifted():
    """reduction.cl's `#ifndef blockSize / #define blockSize 256`, the spec building it with
    -DblockSize=256: a parameter there would change nothing the compiler sees."""
    made = rules_template(load_template(spec("reduction/reduce5")), "opencl", CPU)
    assert not any("blockSize" in p.name for p in made.proposal.parameters)
    assert any("`#define blockSize 256` (line" in n and "the spec's build options define it" in n
               for n in made.lifted.notes)


def test_a_block_mapped_by_a_template_argument_is_not_lifted():
    """`sgemm_global_mem_coalesce<32>` maps a block of 1024 threads onto ceil_div(M, 32) x
    ceil_div(N, 32) tiles through its template argument: another block leaves outputs unwritten."""
    made = rules_template(load_template(spec("sgemm/sgemm_coalesce")), "cuda", GPU)
    assert "BLOCK" not in {p.name for p in made.proposal.parameters}
    assert any("the template argument BLOCKSIZE of `sgemm_global_mem_coalesce<32>`" in n for n in made.lifted.notes)


def test_a_constant_only_the_files_other_kernels_read_is_not_lifted():
    """sgemm.cl's BLOCKSIZE is the coalesced and shared-memory kernels', heat.cu's BLOCK_X and
    BLOCK_Y its host code's: none is a parameter of a kernel that never reads it."""
    made = rules_template(load_template(spec("sgemm/sgemm_naive")), "opencl", CPU)
    assert "BLOCKSIZE" not in {p.name for p in made.proposal.parameters}
    assert any("left `#define BLOCKSIZE 32` (line 4) as written: the kernel does not read it" in n
               for n in made.lifted.notes)
    made = rules_template(load_template(spec("stencils/heat_step")), "cuda", GPU)
    assert not {"BLOCK_X", "BLOCK_Y"} & {p.name for p in made.proposal.parameters}
    made = rules_template(load_template(spec("sgemm/sgemm_coalesce")), "opencl", CPU)
    assert "BLOCKSIZE" not in {p.name for p in made.proposal.parameters}  # read, and laying out the grid


COOPERATIVE = """#include <cooperative_groups.h>
namespace cg = cooperative_groups;
__global__ void k(float *x) {
    cg::thread_block block = cg::this_thread_block();
    auto tile = cg::tiled_partition<32>(block);
    x[threadIdx.x] = 1.0f;
    SYNC;
}
"""


@pytest.mark.parametrize("sync, scope", [("cg::sync(block)", "block"), ("block.sync()", "block"),
                                         ("cg::this_thread_block().sync()", "block"), ("tile.sync()", "warp"),
                                         ("cg::sync(tile)", "warp")])
def test_a_cooperative_groups_barrier_is_the_blocks_or_a_tiles(sync, scope):
    from kerntune.agents.model import build

    model = build(COOPERATIVE.replace("SYNC", sync), "k")
    assert [(b.call, b.scope) for b in model.barriers] == [("sync", scope)] and model.cooperates


def test_a_dereferenced_local_pointer_into_an_array_is_the_element_it_points_at():
    """`float *o = out + b * n + c; *o = *p + 1.0f;`: pointer arithmetic then a dereference reads
    and writes one element, at the offset the local pointer carries; `*(x + i)` too."""
    from kerntune.agents.model import build

    source = ("__global__ void k(float *out, const float *x, int n) {\n"
              "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    int b = i / n, c = i % n;\n"
              "    float *o = out + b * n + c;\n    const float *p = x + c;\n    *o = *p + *(x + i);\n}\n")
    got = {(a.array, "".join(a.index.split()), a.read, a.write, a.via) for a in build(source, "k").accesses}
    assert got == {("out", "b*n+c+(0)", False, True, "o"), ("x", "c+(0)", True, False, "p"),
                   ("x", "i", True, False, "")}


def test_a_function_of_the_file_called_sync_is_no_barrier():
    from kerntune.agents.model import build

    source = ("__device__ void sync(float *x, int i) { x[i] = 0.0f; }\n"
              "__global__ void k(float *x) {\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    sync(x, i);\n}\n")
    assert not build(source, "k").barriers


GPU_KERNELS = ("sgemm/sgemm_naive", "sgemm/sgemm_coalesce", "reduction/reduce0", "reduction/reduce1",
               "reduction/reduce2", "reduction/reduce3", "reduction/reduce4", "reduction/reduce5", "reduction/reduce6",
               "stencils/heat_step",
               "stencils/heat_step_t", "stencils/jacobi_step",
               "stencils/stencil7", "stencils/stencil7_zloop", "llm/encoder1", "llm/encoder2", "llm/layernorm1",
               "llm/softmax1", "llm/gelu", "llm/residual", "llm/matmul1", "llm/crossentropy1", "llm/softmax3", "llm/softmax4",
               "textbook/matmul", "textbook/matmul_tiled", "textbook/matmul_tiled_bounds", "textbook/conv2d",
               "textbook/conv2d_tiled", "textbook/stencil1d", "textbook/stencil1d_global", "textbook/histo",
               "textbook/histo_private", "textbook/histo_contiguous", "textbook/histo_interleaved",
               "byexample/histo_global", "byexample/histo_shared", "transpose/copy", "transpose/transpose_naive", "transpose/transpose_coalesced",
               "transpose/transpose_nobank", "transpose/transpose_bounds", "samples/vectoradd",
               "textbook/reduce_segmented", "textbook/reduce_coarsened", "sgemm/sgemm_shared", "samples/matrixmul")


@pytest.mark.gpu
@pytest.mark.parametrize("name", GPU_KERNELS)
def test_on_cuda_a_published_kernels_template_gates_and_every_tuned_configuration_verifies(name, tmp_path):
    from rewrite_support import gates_and_tunes_on_cuda

    from kerntune.engine.tune import resolve_device

    _, limits = resolve_device("cuda", 0)
    original = load_template(spec(name))
    made = rules_template(original, "cuda", limits)
    assert made.proposal is not None, made.why_none()
    gates_and_tunes_on_cuda(original, made.proposal, tmp_path, limits)


RUNNING = """__global__ void part(const float *in, float *out, int n) {
    __shared__ float s[256];
    int t = threadIdx.x;
    int i = blockIdx.x * 256 + t;
    float v = i < n ? in[i] : 0.0f;
    s[t] = STORED;
    __syncthreads();
    for (int k = 128; k > 0; k >>= 1) {
        if (t < k) STEP;
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = v;
}
"""


@pytest.mark.parametrize("stored, step, why", [
    ("v", "s[t] = v = v + s[t + k]", None),
    ("v", "s[t] = v += s[t + k]", None),
    ("2.0f * v", "s[t] = v = v + s[t + k]", "does not hold the thread's slot"),
    ("v", "s[t] = v = v + s[t + k], v += 1.0f", "is not an assignment|changes in the tree"),
    ("v", "s[t ^ 1] = v = v + s[t + k]", "not its own"),
])
def test_a_running_sum_beside_the_shared_array_is_the_threads_slot_or_declined(stored, step, why):
    """The samples' reduce3 keeps each thread's sum in a register as it writes its slot
    (`s[t] = v = v + s[t + k]`): the register is the slot only when it held the slot's value at the
    barrier, changes nowhere else and writes the thread's own slot; the first thread's copy is then
    the block's total."""
    from kerntune.agents.cooperate import Decline
    from kerntune.agents.kernel_tree import classify
    from kerntune.agents.rewrite_reduction import read
    from kerntune.agents.rewrites import RewriteContext
    from kerntune.engine.proposal import original_launch

    source = RUNNING.replace("STORED", stored).replace("STEP", step)
    from dataclasses import replace

    t = replace(load_template(Path(__file__).resolve().parent / "data" / "naive" / "reduce_sequential"), entry="part")
    grid, block = original_launch(t, GPU)
    ctx = RewriteContext(t, "cuda", source, classify(source, "part"), tuple(grid), tuple(block), {}, GPU)
    if why is None:
        r = read(ctx)
        assert r.op == "sum" and r.final == ("out[kt_j] = kt_total;",)
    else:
        with pytest.raises(Decline, match=why):
            read(ctx)


def test_an_index_through_a_function_like_macro_is_read_as_the_preprocessor_expands_it():
    """heat.cu's `u[IDX(i + 1, j)]` with `#define IDX(i, j) ((j) * nx + (i))`: the index is
    (j) * nx + (i + 1), so the stencil's tile serves the read. An argument goes in as written, as
    the preprocessor puts it: `AT(i + 1, 2)` with `#define AT(r, c) r * W + c` is i + 1 * W + 2."""
    from kerntune.agents.model import build

    model = build((PUBLISHED / "stencils" / "heat.cu").read_text(), "heat_step")
    forms = {str(x.expr.affine) for x in model.accesses if x.array == "u"}
    assert "(blockDim.x) * blockIdx.x + (blockDim.y * nx) * blockIdx.y + threadIdx.x + (nx) * threadIdx.y + 1" in forms
    source = ("#define AT(r, c) r * W + c\n__global__ void k(const float *x, float *y, int W) {\n"
              "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    y[i] = x[AT(i + 1, 2)];\n}\n")
    read = next(x for x in build(source, "k").accesses if x.array == "x")
    assert str(read.expr.affine) == "(blockDim.x) * blockIdx.x + threadIdx.x + 2 + W"
    made = rules_template(load_template(spec("stencils/jacobi_step")), "opencl", CPU)
    assert "TILE" in {p.name for p in made.proposal.parameters}


def test_a_tutorials_kernel_without_bounds_checks_is_bounded_by_its_launch():
    """mygemm.cl's myGEMM1 checks no bound and runs on M // 32 x N // 32 groups of 32 x 32: the
    contraction's tiles stop where the original's threads stop, and the lifted block divides the
    sizes (another block of a floor-divided grid leaves the last rows unwritten)."""
    made = rules_template(load_template(spec("sgemm/mygemm1")), "opencl", CPU)
    assert [r.name for r in made.applied.rewrites] == ["contraction"]
    source = made.proposal.sources["opencl"]
    assert "(kt_r < (((N) / (32)) * (32)))" in source and "(kt_c < (((M) / (32)) * (32)))" in source
    assert {"(M) % BLOCK == 0", "(N) % BLOCK_Y == 0"} <= set(made.proposal.constraints)


def test_a_macro_that_doubles_at_every_level_is_not_expanded_without_end():
    """`A39(i)` calls A38 twice, and so on down: 2^39 expansions. The model expands a bounded
    number of macro calls per index and reads the rest as no affine index (the read stays global)."""
    from kerntune.agents.model import build

    macros = "#define A0(x) (x)\n" + "".join(f"#define A{i}(x) A{i - 1}(x) + A{i - 1}(x)\n" for i in range(1, 40))
    source = macros + ("__global__ void k(const float *a, float *b) {\n"
                       "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    b[i] = a[A39(i)];\n}\n")
    read = next(x for x in build(source, "k").accesses if x.array == "a")
    assert read.expr.affine is None
    assert next(x for x in build(source.replace("A39(i)", "A3(i)"), "k").accesses
                if x.array == "a").expr.affine is not None  # eight calls: expanded


def test_a_define_of_arithmetic_over_defines_is_the_number_the_preprocessor_makes():
    """`#define MASK_OFFSET (MASK_DIM / 2)` is 2 where MASK_DIM is 5: the convolution's reads
    `in[(row - MASK_OFFSET + i) * width + ...]` move by numbers, so its tile is offered. C's
    division truncates; `(TILE) - 2 * (R)` is a difference (the parser alone reads a cast)."""
    from kerntune.agents.model import build, define_value

    model = build((PUBLISHED / "textbook" / "textbook.cu").read_text(), "convolution_2D_const")
    assert model.defines["MASK_OFFSET"] == 2 and model.defines["OUT_TILE_DIM"] == 28
    assert define_value("(-7 / 2)", {}) == -3 and define_value("(A) - 2 * (B)", {"A": 32, "B": 2}) == 28
    assert define_value("A % 3 + (1 << A)", {"A": 4}) == 17 and define_value("X + 1", {}) is None
    made = rules_template(load_template(spec("textbook/conv2d")), "opencl", CPU)
    assert "TILE" in {p.name for p in made.proposal.parameters}


def test_a_grid_in_steps_of_a_define_made_from_a_lifted_one_follows_it(tmp_path):
    """The tiled convolution's blocks of IN_TILE_DIM threads cover OUT_TILE_DIM = IN_TILE_DIM - 4
    outputs a side, on a grid of ceil_div(width, 28): IN_TILE_DIM is lifted with the grid in steps of
    its OUT_TILE_DIM. Where that value cannot be said in the spec's words (a shift), the grid cannot
    follow and IN_TILE_DIM stays."""
    made = rules_template(load_template(spec("textbook/conv2d_tiled")), "opencl", CPU)
    assert made.proposal.grid[0] == "ceil_div(width, ((IN_TILE_DIM) - 2 * (2)))"
    assert "((IN_TILE_DIM) - 2 * (2)) >= 1" in made.proposal.constraints
    folder = tmp_path / "textbook"
    folder.mkdir()
    for f in ("conv2d_tiled.toml", "reference.py", "textbook.cu"):
        (folder / f).write_text((PUBLISHED / "textbook" / f).read_text())
    source = (PUBLISHED / "textbook" / "textbook.cl").read_text()
    (folder / "textbook.cl").write_text(source.replace("((IN_TILE_DIM) - 2 * (MASK_OFFSET))",
                                                       "(((IN_TILE_DIM) - 2 * (MASK_OFFSET)) << 0)"))
    made = rules_template(load_template(folder / "conv2d_tiled.toml"), "opencl", CPU)
    assert made.proposal is None or "IN_TILE_DIM" not in {p.name for p in made.proposal.parameters}
    assert any("`OUT_TILE_DIM`" in n and "the grid cannot follow" in n for n in made.lifted.notes), made.lifted.notes


def test_sizes_in_whole_tiles_of_a_lifted_constant_and_only_values_the_verification_sizes_admit():
    """The SDK's matrixMul walks wA in steps of BLOCK_SIZE (`a <= aEnd; a += aStep`) and the spec
    says `wA % 16 == 0`: another BLOCK_SIZE needs wA in whole tiles of it too. A value no
    verification size admits (32 with wA = 80) could run at 4096 but never be verified: left out."""
    made = rules_template(load_template(spec("oclsdk/matrixmul")), "opencl", CPU)
    assert {"(wA) % BLOCK_SIZE == 0", "(hA) % BLOCK_SIZE == 0", "(wB) % BLOCK_SIZE == 0"} <= set(
        made.proposal.constraints)
    values = next(p.values for p in made.proposal.parameters if p.name == "BLOCK_SIZE")
    assert 16 in values and 8 in values and 32 not in values
    assert any(n.startswith("BLOCK_SIZE 32, 64") and "verification sizes" in n for n in made.lifted.notes)


def test_a_block_of_one_warp_that_combines_by_shuffles_only_is_not_lifted():
    """softmax_forward_kernel3 runs a warp per row, its block 32 threads, the row's max and sum
    combined by `__shfl_down_sync` and broadcast from lane 0: in a block of 64 each warp would
    combine its own half of the row. softmax_forward_kernel4 maps a warp per row through
    cooperative groups' tiles of 32 in any block: its block is lifted."""
    made = rules_template(load_template(spec("llm/softmax3")), "cuda", GPU)
    assert "BLOCK" not in {p.name for p in made.proposal.parameters}
    assert any("by warp shuffles (`__shfl" in n and "a block of 32 threads, one warp" in n
               for n in made.lifted.notes), made.lifted.notes
    made = rules_template(load_template(spec("llm/softmax4")), "cuda", GPU)
    assert "BLOCK" in {p.name for p in made.proposal.parameters}


def test_an_array_of_vector_elements_takes_no_wider_packs():
    """`__global const float4 *a`, a float4 a work-item: vload8 of a float4 pointer does not
    compile and 16-byte words of several float4s are no pack of one; VEC stays 1."""
    made = rules_template(load_template(spec("oclsdk/dotproduct")), "opencl", CPU)
    vec = next(p for p in made.proposal.parameters if p.name == "VEC")
    assert vec.values == (1,) and "float4" in vec.description


def test_a_sum_that_starts_from_a_value_at_the_output_starts_there_in_the_tiles():
    """The trainer's matmul_forward_kernel1 starts each sum at `bias[oc]`: the tiles' sums start
    at the bias of their own output, never of the thread's original coordinates."""
    made = rules_template(load_template(spec("llm/matmul1")), "opencl", CPU)
    source = made.proposal.sources["opencl"]
    start = next(line for line in source.splitlines() if "kt_acc[kt_m][kt_n] = " in line)
    assert "get_global_id" not in start and "get_group_id" not in start, start


def test_a_file_scope_const_is_a_named_constant_the_launch_and_the_other_dialect_follow():
    """The transpose post's `const int TILE_DIM = 32;` and `const int BLOCK_ROWS = 8;`: the block
    (32, 8) and the grid's tiles follow them as they follow a #define, and the OpenCL file's
    `#define TILE_DIM 32` reads the same parameter (never a macro named as the CUDA constant,
    which would rewrite its declaration)."""
    original = load_template(spec("transpose/transpose_nobank"))
    for backend, limits, name in (("cuda", GPU, "TILE_DIM_VALUE"), ("opencl", CPU, "TILE_DIM_SIZE")):
        made = rules_template(original, backend, limits)
        assert made.proposal.block[0] == name and made.proposal.grid == (f"n // {name}",) * 2
        assert f"const int TILE_DIM = {name};" in made.proposal.sources["cuda"]
        assert f"#define TILE_DIM {name}" in made.proposal.sources["opencl"]


def test_a_block_that_covers_more_elements_than_threads_through_its_constant_stays():
    """The textbook's segmented sum: blocks of BLOCK_DIM threads each add 2 * BLOCK_DIM elements
    (`input[i + BLOCK_DIM]`), a grid of ceil_div(n, 512): another BLOCK_DIM, with the block, would
    leave the grid's 512 and sum half the input (or a quarter). Both stay as written; the
    Kogge-Stone scan's block is its SECTION_SIZE, which decides what it computes: nothing to lift."""
    from kerntune.agents.lift import lift_template

    for name in ("textbook/reduce_segmented", "textbook/reduce_coarsened"):
        lifted = lift_template(load_template(spec(name)), "opencl", CPU)
        assert lifted.proposal is None
        assert any("a block of 256 threads" in n and "`#define BLOCK_DIM 256`" in n for n in lifted.notes)
    lifted = lift_template(load_template(spec("textbook/scan")), "cuda", GPU)
    assert lifted.proposal is None and any("512 threads from `SECTION_SIZE`" in n for n in lifted.notes)


def test_a_sample_whose_tile_is_the_entrys_template_argument_keeps_it_and_says_why():
    """The CUDA samples' `MatrixMulCUDA<32>`: its tile, its block (32, 32) and its grid's steps
    are the template argument the entry names; another value would name another kernel, so
    nothing is lifted, and the notes say so (name the kernel without its arguments to tune them)."""
    made = rules_template(load_template(spec("samples/matrixmul")), "cuda", GPU)
    assert made.lifted.proposal is None and [r.name for r in made.applied.rewrites] == ["contraction"]
    assert any("spells its template arguments" in n for n in made.lifted.notes)
    assert any("the template argument BLOCK_SIZE of `MatrixMulCUDA<32>`" in n for n in made.lifted.notes)


def test_the_files_other_kernels_tiles_bound_a_parameter_that_sizes_them():
    """The naive transpose reads no shared memory, but the file's coalesced kernels size their tiles
    by TILE_DIM and are built with it: past the device's shared memory (128: 64 KiB a tile) every
    configuration would fail to compile, so each kernel's tiles bound the parameter."""
    for backend, limits, name in (("cuda", GPU, "TILE_DIM_VALUE"), ("opencl", CPU, "TILE_DIM_SIZE")):
        made = rules_template(load_template(spec("transpose/transpose_bounds")), backend, limits)
        # (the transpose pass's own tile is its kernel's budget, TILE_DIM held at 32 while it runs)
        budget = [c for c in made.proposal.constraints if "max_shared_per_block" in c and name in c]
        assert budget == [f"4 * ({name}) * ({name}) <= max_shared_per_block and "
                          f"4 * ({name} + 1) * ({name}) <= max_shared_per_block"], budget
