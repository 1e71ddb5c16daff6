"""Energy as an objective: the Pareto front of time against energy, the search minimising the
objective's cost, and one line where there is no energy counter."""

from __future__ import annotations

from kerntune.engine.energy import best_by, cost, pareto
from kerntune.engine.result import Result
from kerntune.engine.search import ByObjective
from kerntune.tui.words import front_lines

from cli_support import one_line_error


def r(block: int, us: float, uj: float | None) -> Result:
    return Result(config={"BLOCK": block}, status="ok", median_us=us, times_us=(us,),
                  energy_j=None if uj is None else uj * 1e-6)


RESULTS = [r(64, 10.0, 50.0), r(128, 8.0, 60.0), r(256, 7.0, 90.0), r(512, 9.0, 70.0), r(1024, 12.0, 40.0),
           r(32, 6.0, None), Result(config={"BLOCK": 16}, status="wrong_result")]


def test_the_pareto_front_keeps_what_nothing_beats_in_both_time_and_energy():
    front = pareto(RESULTS)
    # 512 (9 us, 70 uJ) is beaten by 128 (8 us, 60 uJ); 32 has no energy; 16 is not verified
    assert [x.config["BLOCK"] for x in front] == [256, 128, 64, 1024]
    assert best_by(RESULTS, "energy").config == {"BLOCK": 1024}
    assert best_by(RESULTS, "edp").config == {"BLOCK": 128}  # 8 us x 60 uJ is the least product
    assert cost(RESULTS[5], "energy") is None and cost(RESULTS[5], "time") == 6.0
    text = "\n".join(front_lines(RESULTS, "edp"))
    assert "the fastest 7 us, 90 uJ per launch: BLOCK=256" in text
    assert "the most frugal 12 us, 40 uJ per launch: BLOCK=1024" in text and "best by edp" in text
    assert front_lines([r(64, 10.0, None)], "time") == []


def test_a_search_for_energy_sees_each_result_by_its_energy():
    seen = []

    class Inner:
        name = "probe"

        def propose(self):
            return None

        def observe(self, config, result):
            seen.append((result.median_us, result.ranked))

    s = ByObjective(Inner(), "energy")
    s.observe(None, RESULTS[0])
    s.observe(None, RESULTS[5])  # no energy: not ranked for the search
    assert seen == [(50.0 * 1e-6, True), (None, False)] and s.name == "probe"


def test_an_energy_objective_without_an_energy_counter_is_one_line(capsys):
    err = one_line_error(capsys, ["tune", "vector_add", "--objective", "energy", "--backend", "opencl",
                                  "--headless", "--budget", "1"])
    assert "no energy counter on the opencl backend" in err
