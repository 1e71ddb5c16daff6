"""Shared test setup: a private cache directory, and `gpu` tests skipped without a CUDA device."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"


def _cuda_device() -> bool:
    try:
        from kerntune.engine.backends import cuda

        return cuda.device_count() > 0
    except Exception:
        return False


# Cases of a parametrized test that repeat what another case of it already covers, each costing
# 10-40 s on a 2-core machine: marked `slow`, which README's test command leaves out (so the suite
# fits in 5 minutes on 2 cores) and `python -m pytest -q -m slow` runs.
SLOW_CASES = {
    "test_builtin_cuda_templates_compile": ("softmax", "matmul", "merge_attn_states", "fused_add_rmsnorm_bf16",
                                            "silu_and_mul_bf16"),
    "test_library_configs_verify_on_the_cpu": ("matmul",),
    "test_library_kernels_tune_on_the_cpu_and_their_sessions_load": ("matmul",),
    "test_a_naive_elementwise_kernel_is_rewritten_gated_tuned_and_reverified_on_pocl": (
        "gelu", "residual_add", "silu_mul_f32", "adamw"),
    "test_a_naive_row_kernel_is_spread_over_lanes_gated_tuned_and_reverified_on_pocl": (
        "softmax_2pass", "softmax_3pass", "rmsnorm", "cross_entropy", "softmax_online", "layernorm"),
    # the tile through loops over the neighbourhood: conv_cols and stencil1d hold its every form
    "test_a_naive_cooperating_kernel_is_rewritten_gated_and_reproduced_on_pocl": ("stencil9", "conv_rows"),
    "test_the_cuda_rewrites_compile_at_several_values": ("conv_rows",),
    # the largest recorded sessions: the reader's every form is in the others
    "test_the_fast_reader_reads_every_recorded_session_as_tomllib_does": (
        "matmul-2048", "silu_and_mul-llama7b-t2048"),
}


def pytest_collection_modifyitems(config, items):
    slow = pytest.mark.slow
    for item in items:
        case = getattr(item, "callspec", None)
        named = set(map(str, case.params.values())) | set(case.id.split("-")) | {case.id} if case is not None else set()
        if named & set(SLOW_CASES.get(item.originalname, ())):
            item.add_marker(slow)
    if _cuda_device():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    cache = tmp_path_factory.getbasetemp() / "kerntune-cache"
    monkeypatch.setenv("KERNTUNE_CACHE_DIR", str(cache))


@pytest.fixture(scope="session")
def opencl_backend():
    pytest.importorskip("pyopencl")
    from kerntune.engine.backends import BackendError, open_backend

    try:
        b = open_backend("opencl")
    except BackendError as e:
        pytest.skip(f"no OpenCL device: {e}")
    yield b
    b.close()


@pytest.fixture
def hostile_dir(tmp_path):
    d = tmp_path / "hostile"
    shutil.copytree(DATA / "hostile", d)
    return d


needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
