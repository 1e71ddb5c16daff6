"""Spaces: value lists x constraints x device limits, with the count each rule pruned."""

from dataclasses import replace

from kerntune import templates
from kerntune.engine.device import DeviceLimits
from kerntune.engine.space import build_space, geometry
from kerntune.engine.template import load_template

GPU = DeviceLimits(backend="cuda", name="test gpu", max_threads_per_block=1024, warp_size=32,
                   max_shared_per_block=48 * 1024, max_shared_per_block_optin=227 * 1024)


def test_space_prunes_configs_over_the_thread_limit():
    t = load_template(templates.path("vector_add"))
    small = replace(GPU, max_threads_per_block=256, max_block_dims=(256, 256, 64))
    space = build_space(t, t.problem(), small)
    assert space.total == 24
    assert space.feasible == 16  # BLOCK 512 and 1024 are gone, 4 ITEMS values each
    assert space.pruned == {"threads per block > 256": 8}
    assert all(c["BLOCK"] <= 256 for c in space.configs)


def test_space_counts_each_constraint_that_pruned():
    t = load_template(templates.path("silu_and_mul"))
    p = t.problem(None, {"tokens": 4, "d": 100})  # 100 % 8 != 0, and BLOCK * VEC <= 200 binds
    space = build_space(t, p, GPU)
    assert space.total == 1440
    assert space.pruned["d % VEC == 0"] == 5 * 3 * 3 * 2 * 2 * 2  # VEC = 8
    by_hand = sum(
        1
        for b in (64, 128, 256, 512, 1024)
        for v in (1, 2, 4)
        if b * v > 200
    ) * 3 * 3 * 2 * 2 * 2
    assert space.pruned["BLOCK * VEC <= 2 * d"] == by_hand
    assert space.pruned["SPLIT == 0 or (ROWS == 1 and UNROLL == 1)"] > 0
    assert space.feasible + sum(space.pruned.values()) == space.total
    for c in space.configs:
        assert 100 % c["VEC"] == 0 and c["BLOCK"] * c["VEC"] <= 200


def test_warp_size_from_the_device_reaches_constraints():
    t = load_template(templates.path("vector_add"))
    wide = replace(GPU, warp_size=64)
    space = build_space(t, t.problem(), wide)
    assert space.pruned == {"BLOCK % warp_size == 0": 4}  # BLOCK = 32 fails


def test_geometry_follows_the_launch_expressions():
    t = load_template(templates.path("silu_and_mul"))
    geo = geometry(t, {"BLOCK": 256, "VEC": 8, "ROWS": 4, "UNROLL": 1, "FAST_EXP": 0, "STREAM": 0, "SPLIT": 0},
                   t.problem(None, {"tokens": 10, "d": 4096}), GPU)
    assert geo.grid == (3, 1, 1) and geo.block == (256, 1, 1)
