"""Hopper's warpgroup tensor-core tiles of a half product summed in float (MMA = 2): offered on
compute capability 9.0 alone, built for sm_90a, and on an H100 or H200 every layout of the operands
(each walked along the depth or along its rows or columns) gives the original's outputs at aligned
and odd sizes."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest

from kerntune.agents.rules import rules_template
from kerntune.engine.backends import cuda_toolchain as cuda
from kerntune.engine.device import DeviceLimits
from kerntune.engine.evaluate import Evaluator, TimingPolicy
from kerntune.engine.gate import check_proposal
from kerntune.engine.space import build_space
from kerntune.engine.template import load_template

NAIVE = Path(__file__).resolve().parent / "data" / "naive"
HOPPER = DeviceLimits("cuda", "H100-like", compute_capability="9.0", max_threads_per_block=1024, warp_size=32,
                      sm_count=132, max_regs_per_block=65536, max_shared_per_block=48 * 1024,
                      max_shared_per_block_optin=227 * 1024)
FAST = TimingPolicy(warmup=1, min_repeats=3, max_repeats=3, target_s=0.002)

# (A's element, its shape, B's element, its shape, the reference's product) for each layout: A as
# M x K (walked along the depth) or K x M (along its rows), B as N x K or K x N
LAYOUTS = {
    "nt": ("A[row * K + k]", '["M", "K"]', "B[col * K + k]", '["N", "K"]', "a @ b.T"),
    "nn": ("A[row * K + k]", '["M", "K"]', "B[k * N + col]", '["K", "N"]', "a @ b"),
    "tn": ("A[k * M + row]", '["K", "M"]', "B[col * K + k]", '["N", "K"]', "a.T @ b.T"),
    "tt": ("A[k * M + row]", '["K", "M"]', "B[k * N + col]", '["K", "N"]', "a.T @ b"),
}


def layout_spec(folder: Path, layout: str) -> Path:
    """matmul_half's spec (CUDA) with its operands laid out as `layout` says."""
    a, a_shape, b, b_shape, product = LAYOUTS[layout]
    shutil.copytree(NAIVE / "matmul_half", folder)
    (folder / "kernel.cl").unlink()
    (folder / "kernel.cu").write_text(
        "#include <cuda_fp16.h>\n\n"
        "__global__ void matmul_half(const __half *A, const __half *B, __half *C, int M, int N, int K) {\n"
        "    int col = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "    int row = blockIdx.y * blockDim.y + threadIdx.y;\n"
        "    if (row >= M || col >= N) return;\n"
        "    float acc = 0.0f;\n"
        "    for (int k = 0; k < K; k++)\n"
        f"        acc += __half2float({a}) * __half2float({b});\n"
        "    C[row * N + col] = __float2half(acc);\n"
        "}\n")
    toml = (folder / "kernel.toml").read_text()
    toml = toml.replace('sources = { cuda = "kernel.cu", opencl = "kernel.cl" }', 'sources = { cuda = "kernel.cu" }')
    toml = toml.replace('name = "Bt"', 'name = "B"')
    toml = toml.replace('shape = ["M", "K"]', f"shape = {a_shape}", 1).replace('shape = ["N", "K"]', f"shape = {b_shape}", 1)
    (folder / "kernel.toml").write_text(toml)
    (folder / "reference.py").write_text(
        "import numpy as np\n\n\n"
        "def reference(inputs, sizes):\n"
        "    a, b = inputs['A'].astype(np.float64), inputs['B'].astype(np.float64)\n"
        f"    return {{'C': {product}}}\n")
    return folder


# the half product as often published: 64-bit sizes and indices, B column-major (N x K), the loop
# under `#pragma unroll` (which the lifts make a parameter, UNROLL), the sum started from a double
SIMT = """#include <cuda_fp16.h>

__global__ void simtNaiveKernel(const half *__restrict__ A, const half *__restrict__ B, half *__restrict__ C, size_t M,
                                size_t N, size_t K) {
    size_t row = threadIdx.y + blockDim.y * blockIdx.y;
    size_t col = threadIdx.x + blockDim.x * blockIdx.x;

    if (row < M && col < N) {
        float tmp = 0.0;
#pragma unroll
        for (size_t i = 0; i < K; ++i) {
            tmp += __half2float(A[row * K + i]) * __half2float(B[i + col * K]);
        }

        C[row * N + col] = __float2half(tmp);
    }
}
"""


def simt_spec(folder: Path) -> Path:
    """SIMT over matmul_half's spec (CUDA), its sizes 64-bit."""
    layout_spec(folder, "nt")
    (folder / "kernel.cu").write_text(SIMT)
    toml = (folder / "kernel.toml").read_text().replace('entry = "matmul_half"', 'entry = "simtNaiveKernel"')
    (folder / "kernel.toml").write_text(toml.replace('dtype = "int32"', 'dtype = "uint64"'))
    return folder


def test_a_product_under_a_pragma_with_64_bit_indices_takes_the_warpgroup_tiles(tmp_path):
    made = rules_template(load_template(simt_spec(tmp_path / "spec")), "cuda", HOPPER)
    assert [r.name for r in made.applied.rewrites] == ["contraction"], made.why_none()
    values = {p.name: p.values for p in made.proposal.parameters}
    assert values["MMA"] == (0, 1, 2) and "UNROLL" in values
    assert "const size_t kt_r = kt_r0 + BM - 1;" in made.proposal.sources["cuda"]  # the whole-tile test


def test_on_a_hopper_device_the_half_product_offers_warpgroup_tiles(tmp_path):
    t = load_template(NAIVE / "matmul_half")
    made = rules_template(t, "cuda", HOPPER).proposal
    values = {p.name: p.values for p in made.parameters}
    assert values["MMA"] == (0, 1, 2) and 64 in values["BK"]
    assert any("MMA != 2" in c for c in made.constraints)
    # elsewhere (an older card, or one whose capability is unknown) the warp fragments alone
    from kerntune.agents.contraction_wgmma import declines

    assert declines("9.0") == "" and "sm_90a" in declines("8.0") and "unknown" in declines("")
    # the engine builds the whole space (a product of 1,296,000, walked by its constraints), and
    # it holds the wide tiles
    from kerntune.engine.proposal import write_template

    template = write_template(t, made, tmp_path / "tpl", HOPPER)
    space = build_space(template, template.problem("4096", {}), HOPPER)
    assert space.total == math.prod(len(p.values) for p in template.parameters)
    assert space.feasible + sum(space.pruned.values()) == space.total
    wide = [c.as_dict() for c in space.configs if c["MMA"] == 2]
    assert {"BM": 128, "BN": 256, "BK": 64, "STAGES": 3} in [{k: c[k] for k in ("BM", "BN", "BK", "STAGES")}
                                                             for c in wide]
    assert all(c["BN"] in (64, 128, 256) and c["BM"] % 64 == 0 for c in wide)


@pytest.mark.parametrize("layout", ["nt", pytest.param("tt", marks=pytest.mark.slow)])
def test_the_warpgroup_tiles_build_for_sm_90a_only(layout, tmp_path):
    if cuda.find_nvcc() is None and not cuda.nvrtc_version():
        pytest.skip("no CUDA compiler")
    original = load_template(layout_spec(tmp_path / "spec", layout))
    made = rules_template(original, "cuda", HOPPER).proposal
    source = made.sources["cuda"]
    config = {"BM": 128, "BN": 256, "BK": 64, "STAGES": 3, "MMA": 2, "TM": 4, "TN": 8}
    _, info, _ = cuda.compile_cubin(source, "matmul_half", {k: str(v) for k, v in config.items()}, (), "sm_90a")
    assert info.get("spill_stores", 0) == 0
    with pytest.raises(cuda.CompileError, match="sm_90a"):
        cuda.compile_cubin(source, "matmul_half", {k: str(v) for k, v in config.items()}, (), "sm_90")


def test_a_bfloat16_product_takes_the_tensor_cores_where_the_device_has_them_for_it():
    t = load_template(NAIVE / "matmul_bf16")
    made = rules_template(t, "cuda", HOPPER).proposal
    assert {p.name: p.values for p in made.parameters}["MMA"] == (0, 1, 2)
    source = made.sources["cuda"]
    assert "m64n256k16.f32.bf16.bf16" in source and "__nv_bfloat16, nvcuda::wmma::row_major" in source
    assert "__bfloat1622float2" in source  # VEC 4 loads four as two pairs
    from types import SimpleNamespace as NS

    from kerntune.agents.contraction_mma import declines

    bf16, half = NS(half=True, bf16=True), NS(half=True, bf16=False)
    s = NS(acc_type="float", update="+=", acc_init="0.0f")
    assert declines("cuda", "8.0", s, (bf16, bf16)) == ""
    assert "no bfloat16 tensor cores" in declines("cuda", "7.5", s, (bf16, bf16))
    assert "the other a bfloat16" in declines("cuda", "9.0", s, (half, bf16))


def test_a_hopper_device_builds_for_sm_90a():
    assert cuda.device_arch("9.0") == "sm_90a"
    assert cuda.device_arch("8.9") == "sm_89"
    assert cuda.device_arch("") == "sm_90"


# warpgroups of one to four, every width, depths 16 (32-byte swizzle) to 64 (128-byte), one to three stages
WG_CONFIGS = ({"BM": 128, "BN": 256, "BK": 64, "STAGES": 3},
              {"BM": 64, "BN": 64, "BK": 16, "STAGES": 1},
              {"BM": 128, "BN": 128, "BK": 32, "STAGES": 2},
              {"BM": 256, "BN": 128, "BK": 64, "STAGES": 2},
              {"BM": 64, "BN": 256, "BK": 32, "STAGES": 3})


@pytest.mark.gpu
@pytest.mark.parametrize("layout", sorted(LAYOUTS) + ["bf16", "simt"])
def test_on_hopper_the_warpgroup_tiles_reproduce_the_half_product(layout, tmp_path):
    """Aligned rows (16-byte copies) and odd ones (element by element), tails in every dimension,
    several steps and blocks: each tile gives the original's outputs within the tolerance; and
    the bfloat16 product (A as M x K, B as K x N) on both kinds of tensor-core tiles."""
    from kerntune.engine.backends import open_backend
    from kerntune.engine.tune import resolve_device

    _, limits = resolve_device("cuda", 0)
    if limits.compute_capability != "9.0":
        pytest.skip(f"compute capability {limits.compute_capability}: no warpgroup instructions")
    original = load_template(NAIVE / "matmul_bf16" if layout == "bf16" else simt_spec(tmp_path / "spec")
                             if layout == "simt" else layout_spec(tmp_path / "spec", layout))
    made = rules_template(original, "cuda", limits)
    verdict = check_proposal(original, made.proposal, tmp_path / "tpl", backend="cuda", device=0,
                             problem=original.problem("small", {}), limits=limits, timeout=300)
    assert verdict.ok, verdict.reason
    template = verdict.template
    backend = open_backend("cuda", 0)
    try:
        for sizes in ({}, {"M": 37, "N": 45, "K": 29}, {"M": 328, "N": 392, "K": 264}):
            ev = Evaluator(backend, template, template.problem("small", sizes), seed=1, timing=FAST)
            fragments = (({"BM": 64, "BN": 128, "BK": 32, "STAGES": 2, "MMA": 1},) if layout == "bf16" else ())
            for config in WG_CONFIGS + fragments:
                full = {**template.default_config(), "MMA": 2, "TM": 4, "TN": 8, **config}
                ok, _, message = ev.reproduces_original(full, (3, 4))
                assert ok, (sizes, config, message)
    finally:
        backend.close()


def test_a_compiler_without_an_architecture_specific_target_builds_for_the_plain_one(tmp_path, monkeypatch):
    """No toolkit knows `sm_75a`: as with a toolkit older than `sm_90a`, the build falls back to the
    plain architecture (kernels that need the specific features stop at their own `#error`)."""
    if cuda.find_nvcc() is None and not cuda.nvrtc_version():
        pytest.skip("no CUDA compiler")
    monkeypatch.setenv("KERNTUNE_CACHE_DIR", str(tmp_path))
    cubin, _, _ = cuda.compile_cubin("__global__ void k(float *x) { x[0] = 1.0f; }", "k", {}, (), "sm_75a")
    assert cubin
    with pytest.raises(cuda.CompileError, match="not a preprocessor name"):
        cuda.compile_cubin("__global__ void k() {}", "k", {"-o": "1"}, (), "sm_75a")
