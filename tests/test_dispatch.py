"""A dispatch set: the fewest configurations that keep every size within the tolerance of its own
best, never slower than the original there, and what it gains over one general configuration."""

from __future__ import annotations

import pytest

from kerntune.engine.dispatch import choose_dispatch

ORIGINAL, BIG, SMALL, BOTH = "orig", "big", "small", "both"
CONFIGS = {ORIGINAL: {"BLOCK": 1024}, BIG: {"BLOCK": 256}, SMALL: {"BLOCK": 64}, BOTH: {"BLOCK": 128}}
SIZES = ["decode", "prefill"]


def dispatch(times, general=ORIGINAL, tolerance=0.03):
    best = [min(t[i] for t in times.values() if t[i] is not None) for i in range(len(SIZES))]
    return choose_dispatch(SIZES, {k: CONFIGS[k] for k in times}, times, best, list(times[ORIGINAL]), general,
                           tolerance)


def test_sizes_that_want_different_configurations_get_one_each():
    # the SwiGLU case: BLOCK=256 is 1.14x at prefill but 0.79x at decode, so one general
    # configuration keeps the original (1.00x everywhere); the dispatch set keeps both gains
    times = {ORIGINAL: [10.0, 114.0], BIG: [12.66, 100.0], SMALL: [9.0, 130.0]}
    d = dispatch(times)
    assert [c["BLOCK"] for c in d.configs] == [64, 256]
    assert [(c.size, c.config["BLOCK"], c.time_us) for c in d.covers] == [("decode", 64, 9.0), ("prefill", 256, 100.0)]
    assert d.covered_by(0) == ["decode"] and d.covered_by(1) == ["prefill"]
    assert d.geomean == pytest.approx((10 / 9 * 114 / 100) ** 0.5)
    assert d.general_geomean == pytest.approx(1.0)  # the general configuration, the original here
    assert any("at prefill one general configuration is 14% slower" in n for n in d.notes)


def test_one_configuration_within_the_tolerance_everywhere_is_the_whole_set():
    times = {ORIGINAL: [10.0, 114.0], BIG: [9.9, 100.0], SMALL: [9.7, 130.0]}
    d = dispatch(times, general=BIG)
    # BIG is within 3% of decode's best (9.9 <= 1.03 * 9.7) and the best at prefill
    assert d.configs == ({"BLOCK": 256},) and {c.size for c in d.covers} == set(SIZES)
    assert d.geomean == d.general_geomean
    # with a tolerance of 1% it is not, and each size gets its own
    assert len(dispatch(times, general=BIG, tolerance=0.01).configs) == 2


def test_a_configuration_slower_than_the_original_never_covers_a_size():
    # BOTH is within 3% of the best at decode but slower than the original there: the original
    # (or the best) serves decode, never BOTH
    times = {ORIGINAL: [10.0, 114.0], BOTH: [10.2, 100.0], SMALL: [9.95, 130.0]}
    d = dispatch(times)
    decode = d.covers[0]
    assert decode.config != CONFIGS[BOTH] and decode.time_us <= 10.0
    for c in d.covers:
        assert c.original_us is None or c.time_us <= c.original_us


def test_a_configuration_not_verified_at_a_size_does_not_cover_it():
    times = {ORIGINAL: [10.0, 114.0], BIG: [None, 100.0], SMALL: [9.0, None]}
    d = dispatch(times)
    assert [c.config["BLOCK"] for c in d.covers] == [64, 256]
    assert choose_dispatch(SIZES, CONFIGS, times, [None, 100.0], [10.0, 114.0]) is None  # a size without a time
