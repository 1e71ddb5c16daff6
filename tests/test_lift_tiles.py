"""A tiled kernel's block is the tile: the CUDA samples' transpose, whose block is (TILE_DIM,
BLOCK_ROWS) and whose grid counts tiles of TILE_DIM, lifted so that every configuration of its
space is one the kernel computes correctly."""

from __future__ import annotations

from pathlib import Path

import pytest

from kerntune.agents.lift import lift_template, loop_steps, shared_budget
from kerntune.engine.backends import cuda
from kerntune.engine.device import DeviceLimits
from kerntune.engine.evaluate import Evaluator, TimingPolicy
from kerntune.engine.gate import check_proposal
from kerntune.engine.proposal import write_template
from kerntune.engine.space import build_space
from kerntune.engine.template import load_template

TRANSPOSE = Path(__file__).resolve().parent / "data" / "byo" / "transpose"
GPU = DeviceLimits("cuda", "gpu", max_threads_per_block=1024, warp_size=32, sm_count=132,
                   max_shared_per_block=48 * 1024)
CPU = DeviceLimits("opencl", "cpu", max_threads_per_block=4096, warp_size=1)


def test_the_block_follows_the_tile_and_the_grid_counts_tiles_in_both_dimensions():
    for backend, limits in (("cuda", GPU), ("opencl", CPU)):
        lifted = lift_template(load_template(TRANSPOSE), backend, limits)
        p = lifted.proposal
        assert [q.name for q in p.parameters] == ["TILE_DIM", "BLOCK_ROWS"], backend
        assert p.block == ("TILE_DIM", "BLOCK_ROWS")
        assert p.grid == ("ceil_div(width, TILE_DIM)", "ceil_div(height, TILE_DIM)")
        assert "TILE_DIM % BLOCK_ROWS == 0" in p.constraints
        assert "4 * (TILE_DIM + 1) * (TILE_DIM) <= max_shared_per_block" in p.constraints
        assert any("block of 32 threads in dimension x is TILE_DIM too" in n for n in lifted.notes)
        assert any("block of 8 threads in dimension y is BLOCK_ROWS too" in n for n in lifted.notes)


def test_a_tile_past_the_static_shared_memory_is_not_in_the_space(tmp_path):
    t = load_template(TRANSPOSE)
    template = write_template(t, lift_template(t, "cuda", GPU).proposal, tmp_path / "tpl", GPU)
    tiles = {c.as_dict()["TILE_DIM"] for c in build_space(template, template.problem(), GPU).configs}
    assert tiles == {8, 16, 32, 64}  # 128 x 129 floats is 66 KB, past 48 KB


def test_loop_steps_and_shared_budget_read_only_parameters():
    src = """
__global__ void k(float *o, int n) {
    __shared__ float a[T][T + 1];
    __shared__ double b[R];
    for (int j = 0; j < T; j += R) o[j] = a[j][0] + b[0];
    for (int j = 0; j < n; j += R) o[j] = 0;
}"""
    names = {"T": "T", "R": "R"}
    assert loop_steps(src, names, "T") == ["T % R == 0"]
    assert loop_steps(src, names, "R") == []
    assert shared_budget(src, names) == "4 * (T + 1) * (T) + 8 * (R) <= max_shared_per_block"
    assert shared_budget(src, {"T": "T"}) is None  # b's size is not a parameter: unknown, no bound
    assert shared_budget(src.replace("float a", "struct S a"), names) is None  # an element of unknown size


def test_every_configuration_of_the_lifted_opencl_twin_transposes(tmp_path, opencl_backend):
    t = load_template(TRANSPOSE)
    problem = t.problem(None, {"width": 77, "height": 33})
    verdict = check_proposal(t, lift_template(t, "opencl", CPU).proposal, tmp_path / "tpl", backend="opencl",
                             device=0, problem=problem, limits=CPU, timeout=120)
    assert verdict.ok, verdict.reason
    template = verdict.template
    ev = Evaluator(opencl_backend, template, template.problem(None, {"width": 77, "height": 33}), seed=1,
                   timing=TimingPolicy(warmup=1, min_repeats=3, max_repeats=3, target_s=0.002))
    configs = [c.as_dict() for c in build_space(template, problem, CPU).configs if c.as_dict()["TILE_DIM"] <= 32]
    assert len(configs) >= 10
    for config in configs:
        ok, _, message = ev.reproduces_original(config, (3,))
        assert ok, (config, message)


MATMUL = Path(__file__).resolve().parent / "data" / "tiles" / "matmul"


def test_a_square_tile_is_both_dimensions_of_the_block_and_every_tile_multiplies(tmp_path, opencl_backend):
    for backend, limits in (("cuda", GPU), ("opencl", CPU)):
        p = lift_template(load_template(MATMUL), backend, limits).proposal
        assert [(q.name, q.values) for q in p.parameters] == [("TILE_WIDTH", (4, 8, 16, 32, 64))], backend
        assert p.block == ("TILE_WIDTH", "TILE_WIDTH") and p.grid == ("N // TILE_WIDTH", "N // TILE_WIDTH")
        assert {"N % TILE_WIDTH == 0", "TILE_WIDTH * TILE_WIDTH <= max_threads_per_block"} <= set(p.constraints)
    t = load_template(MATMUL)
    problem = t.problem(None, {"N": 64})
    verdict = check_proposal(t, lift_template(t, "opencl", CPU).proposal, tmp_path / "tpl", backend="opencl",
                             device=0, problem=problem, limits=CPU, timeout=120)
    assert verdict.ok, verdict.reason
    ev = Evaluator(opencl_backend, verdict.template, verdict.template.problem(None, {"N": 64}), seed=1,
                   timing=TimingPolicy(warmup=1, min_repeats=3, max_repeats=3, target_s=0.002))
    tiles = [c.as_dict() for c in build_space(verdict.template, problem, CPU).configs]
    assert [c["TILE_WIDTH"] for c in tiles] == [4, 8, 16, 32, 64]
    for config in tiles[:4]:
        ok, _, message = ev.reproduces_original(config, (3,))
        assert ok, (config, message)


@pytest.mark.skipif(cuda.find_nvcc() is None, reason="nvcc not found")
def test_the_lifted_cuda_tiles_compile_at_every_tile(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNTUNE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("KERNTUNE_COMPILER", "nvcc")
    for spec, defines in ((MATMUL, ({"TILE_WIDTH": "8"}, {"TILE_WIDTH": "32"})),
                          (TRANSPOSE, ({"TILE_DIM": "16", "BLOCK_ROWS": "4"}, {"TILE_DIM": "64", "BLOCK_ROWS": "16"}))):
        t = load_template(spec)
        src = lift_template(t, "cuda", GPU).proposal.sources["cuda"]
        for d in defines:
            cuda.compile_cubin(src, t.entry, d, (), "sm_90")
