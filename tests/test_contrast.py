"""Why is row A faster than row B: the parameters that differ, times with their intervals,
resources, and the profiler's metrics with the largest differences first."""

from __future__ import annotations

from kerntune.engine.contrast import contrast, contrast_lines
from kerntune.engine.events import LeadersRetimed
from kerntune.engine.result import Resources, Result


def result(block: int, times: list[float], registers: int, spills: int = 0) -> Result:
    s = sorted(times)
    return Result(config={"BLOCK": block, "VEC": 4}, status="ok", times_us=tuple(times), median_us=s[len(s) // 2],
                  resources=Resources(registers=registers, shared_static=0, spills=spills), occupancy=0.5)


def test_two_rows_side_by_side_with_the_largest_metric_differences_first():
    a = result(256, [10.0 + 0.01 * i for i in range(20)], 32)
    b = result(64, [14.0 + 0.01 * i for i in range(20)], 40, spills=16)
    c = contrast(a, b, {"dram_pct": 90.0, "sm_pct": 30.0, "l2_hit_pct": 50.0, "stalls": {"long_scoreboard": 2.0}},
                 {"dram_pct": 60.0, "sm_pct": 31.0, "l2_hit_pct": 50.0, "stalls": {"long_scoreboard": 8.0}})
    assert c.params == (("BLOCK", 256, 64),)  # VEC is the same: not listed
    assert [m[0] for m in c.metrics] == ["stalls: long_scoreboard", "dram_pct", "sm_pct"]  # l2 equal: left out
    text = "\n".join(contrast_lines(c))
    assert "registers per thread" in text and "spilled bytes" in text
    assert c.verdict == "A is 1.396x faster by their own timings"  # 14.1 / 10.1


def test_overlapping_intervals_are_not_told_apart_and_paired_times_decide_when_there():
    a = result(256, [10.0, 10.5, 9.8, 10.2, 10.1, 9.9, 10.3, 10.0, 10.4, 9.7], 32)
    b = result(64, [10.1, 10.4, 9.9, 10.2, 10.0, 9.8, 10.3, 10.1, 10.5, 9.9], 32)
    assert "not told apart" in contrast(a, b).verdict
    lead = LeadersRetimed(0.0, configs=(dict(a.config), dict(b.config)), median_us=(10.0, 10.6),
                          speedup=(1.0, 1.0), low=(1.0, 1.0), high=(1.0, 1.0), tied=(True, False), fastest=0,
                          chosen=0, original=-1)
    c = contrast(a, b, leaders=lead)
    assert ("paired median us", "10", "10.6") in c.figures and c.verdict == "A is 1.060x faster in the paired re-timing"


def test_values_from_a_session_are_written_printable():
    a = Result(config={"MODE": "fast\x1b]0;owned\x07"}, status="ok", median_us=1.0, times_us=(1.0,))
    b = Result(config={"MODE": "slow"}, status="ok", median_us=2.0, times_us=(2.0,))
    text = "\n".join(contrast_lines(contrast(a, b)))
    assert "\x1b" not in text and "\x07" not in text and "\\x1b]0;owned\\x07" in text
