"""The kernel library on the OpenCL CPU device: every template's default and a random sample of
its feasible configurations verify against numpy, and its spaces prune what they must."""

import random
from dataclasses import replace

import pytest

from kerntune import templates
from kerntune.engine.device import DeviceLimits
from kerntune.engine.evaluate import Evaluator, TimingPolicy
from kerntune.engine.space import build_space
from kerntune.engine.template import load_template

FAST = TimingPolicy(warmup=1, min_repeats=3, max_repeats=3, target_s=0.001)
SMALL = {
    "silu_and_mul": {"tokens": 5, "d": 4096},
    "fused_add_rmsnorm": {"tokens": 5, "d": 4096},
    "merge_attn_states": {"tokens": 9, "heads": 4, "head_dim": 128},
    "matmul": {"M": 128, "N": 128, "K": 256},
    "softmax": {"tokens": 6, "vocab": 4000},
    "vector_add": {"n": 5000},
}
H100 = DeviceLimits(backend="cuda", name="H100-like", max_threads_per_block=1024, warp_size=32,
                    max_shared_per_block=48 * 1024, max_shared_per_block_optin=227 * 1024)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_library_configs_verify_on_the_cpu(opencl_backend, name):
    t = load_template(templates.path(name))
    problem = t.problem(None, SMALL[name])
    space = build_space(t, problem, opencl_backend.limits)
    ev = Evaluator(opencl_backend, t, problem, seed=2, timing=FAST)
    sample = random.Random(name).sample(list(space.configs), min(5, space.feasible))
    for config in [t.default_config(), *(c.as_dict() for c in sample)]:
        r = ev.evaluate(config)
        assert r.status == "ok", (config, r.message)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_library_kernels_tune_on_the_cpu_and_their_sessions_load(opencl_backend, tmp_path, name):
    """The whole pipeline on PoCL for every library kernel: a short random search, every result
    verified, the winner checked again on new inputs, the session written and read back."""
    from kerntune.engine.session import load_session
    from kerntune.engine.tune import TuneOptions, TuneRun

    t = load_template(templates.path(name))
    opts = TuneOptions(backend="opencl", strategy="random", budget=4, seed=3, overrides=SMALL[name],
                       session_path=tmp_path / "s.toml", timing=FAST, probe=False)
    out = TuneRun(t, opts).run()  # its own backend: the fixture only skips where OpenCL is missing
    assert [r.status for r in out.results] == ["ok"] * len(out.results) and len(out.results) == min(4, out.space.feasible)
    assert out.winner_ok is True
    assert load_session(out.session_path).best().median_us == out.best.median_us


def test_merge_attn_states_inputs_hold_empty_partials(opencl_backend):
    import numpy as np

    t = load_template(templates.path("merge_attn_states"))
    ev = Evaluator(opencl_backend, t, t.problem(None, {"tokens": 256}), seed=4, timing=FAST)
    inputs = ev.sets.pool(0)[0]
    both = np.isneginf(inputs.host["s_a"]) & np.isneginf(inputs.host["s_b"])
    assert both.any()  # the both-empty case is always exercised
    assert np.isneginf(inputs.expected["s_out"]).sum() == both.sum()


def test_matmul_space_prunes_by_shared_memory_and_threads():
    t = load_template(templates.path("matmul"))
    assert t.default_config() in [c.as_dict() for c in build_space(t, t.problem("2048"), H100).configs]
    # a device with 99 KiB of shared memory a block (sm_86): double-buffered deep tiles do not fit
    ampere = DeviceLimits(backend="cuda", name="sm_86-like", max_threads_per_block=1024, warp_size=32,
                          max_shared_per_block=48 * 1024, max_shared_per_block_optin=99 * 1024)
    space = build_space(t, t.problem("2048"), ampere)
    shared = "STAGES * BK * (BM + 4 + BN) * 4 <= max_shared_per_block_optin"
    assert space.pruned[shared] > 0
    assert space.pruned["(BM // WM) * (BN // WN) * 32 <= max_threads_per_block"] > 0
    for c in space.configs:
        assert c["STAGES"] * c["BK"] * (c["BM"] + 4 + c["BN"]) * 4 <= 99 * 1024
        assert (c["BM"] // c["WM"]) * (c["BN"] // c["WN"]) * 32 <= 1024


def test_rmsnorm_staging_needs_the_row_in_shared_memory():
    t = load_template(templates.path("fused_add_rmsnorm"))
    small = DeviceLimits(backend="cuda", name="small", max_shared_per_block=16 * 1024,
                         max_shared_per_block_optin=16 * 1024)
    space = build_space(t, t.problem(None, {"tokens": 4, "d": 8192}), small)
    assert all(c["STAGE"] == 0 for c in space.configs)
    assert space.pruned["STAGE == 0 or d * 4 <= max_shared_per_block_optin"] > 0


def test_softmax_keeps_the_row_on_chip_only_where_it_fits():
    t = load_template(templates.path("softmax"))
    h100 = DeviceLimits(backend="cuda", name="H100-like", max_threads_per_block=1024, warp_size=32,
                        max_shared_per_block=48 * 1024, max_shared_per_block_optin=227 * 1024,
                        max_regs_per_block=64 * 1024)
    llama2 = build_space(t, t.problem("llama-t2048"), h100)
    assert {c["KEEP"] for c in llama2.configs} == {0, 1, 2, 3}
    for c in llama2.configs:
        if c["KEEP"] == 3:
            assert 32000 <= c["BLOCK"] * c["VEC"] * c["ITEMS"] < 64000
            assert c["BLOCK"] * (c["VEC"] * c["ITEMS"] + 24) <= 64 * 1024
    # Llama 3's vocabulary: 501 KB a row fits neither a block's shared memory nor its registers
    llama3 = build_space(t, t.problem("llama3-t2048"), h100)
    assert {c["KEEP"] for c in llama3.configs} == {0, 1}
    assert llama3.pruned["KEEP != 2 or vocab // SPLIT * 4 <= max_shared_per_block_optin"] > 0
    assert llama3.pruned["KEEP != 3 or BLOCK * (VEC * ITEMS + 24) <= max_regs_per_block"] > 0
    assert llama3.pruned["SPLIT <= max_cluster_blocks"] > 0
    # with clusters of up to 8 blocks (compute capability 9.0) a row split 4 or 8 ways stays on chip
    hopper = replace(h100, max_cluster_blocks=8)
    on_chip = {(c["KEEP"], c["SPLIT"]) for c in build_space(t, t.problem("llama3-t2048"), hopper).configs
               if c["KEEP"] >= 2}
    assert on_chip == {(2, 4), (2, 8), (3, 4), (3, 8)}
    # a device that reports no register file (OpenCL) leaves the register copy to the other limits
    cpu = DeviceLimits(backend="opencl", name="cpu", max_threads_per_block=4096, warp_size=1,
                       max_shared_per_block=4 << 20, max_shared_per_block_optin=4 << 20)
    cpu_space = build_space(t, t.problem("llama3-t2048"), cpu)
    assert any(c["KEEP"] == 3 and c["BLOCK"] * c["VEC"] * c["ITEMS"] >= 128256 for c in cpu_space.configs)
    assert {c["SPLIT"] for c in cpu_space.configs} == {1}  # no clusters in OpenCL


@pytest.mark.parametrize("name", ["silu_and_mul", "fused_add_rmsnorm", "merge_attn_states", "matmul", "softmax"])
def test_library_templates_have_baselines_and_launch_them(name):
    t = load_template(templates.path(name))
    assert "cuda" in t.original_sources and t.original_block


def test_matmul_lanes_cover_each_block_tile_exactly_once():
    """The index arithmetic of kernel.cu and kernel.cl, for every feasible configuration: the
    block's threads, their warp tiles, sub-tiles and micro-tiles write every element of the
    BM x BN tile once (a config whose lanes overrun a sub-tile is infeasible, not wrong)."""
    import numpy as np

    t = load_template(templates.path("matmul"))
    space = build_space(t, t.problem("2048"), H100)
    assert space.feasible > 1000
    for c in space.configs:
        BM, BN, WM, WN, WNITER, TM, TN = (c[k] for k in ("BM", "BN", "WM", "WN", "WNITER", "TM", "TN"))
        wmiter = (WM * WN) // (32 * TM * TN * WNITER)
        wsubm, wsubn, lanes_n = WM // wmiter, WN // WNITER, WN // WNITER // TN
        tid = np.arange((BM // WM) * (BN // WN) * 32)
        warp, lane = tid // 32, tid % 32
        a0 = (warp // (BN // WN)) * WM + (lane // lanes_n) * TM
        b0 = (warp % (BN // WN)) * WN + (lane % lanes_n) * TN
        rows = (a0[:, None] + (np.arange(wmiter)[:, None] * wsubm + np.arange(TM)).ravel()[None, :])
        cols = (b0[:, None] + (np.arange(WNITER)[:, None] * wsubn + np.arange(TN)).ravel()[None, :])
        cells = (rows[:, :, None] * BN + cols[:, None, :]).ravel()
        assert cells.min() >= 0 and cells.max() < BM * BN, c
        assert np.array_equal(np.bincount(cells, minlength=BM * BN), np.ones(BM * BN, dtype=np.int64)), c
