"""What the verifier must find in tests/data/cheats, one expectation per MODE, shared by the
OpenCL tests and the CUDA ones (tests/test_gpu.py)."""

from __future__ import annotations

from pathlib import Path

CHEATS = Path(__file__).resolve().parent / "data" / "cheats"

# MODE -> (status, words the message must hold)
EXPECTED = {
    1: ("wrong_result", "never written"),
    2: ("wrong_result", "never written"),
    3: ("wrong_result", "never written"),
    4: ("wrong_result", "never written"),
    5: ("wrong_result", "timed launch"),
    6: ("wrong_result", "timed launch"),
    7: ("out_of_bounds", "after its end of `c`"),
    8: ("out_of_bounds", "before its start of `c`"),
    9: ("wrote_input", "input `a`"),
    10: ("wrong_result", "odd:n=4095"),
    # caught by whichever later check of its launches comes first: the leaders' launches again and
    # again, the final check, or a timed launch of a measurement taken again (engine/disturb.py)
    11: ("wrong_result", ("launched again and again", "failed its final check", "timed launch")),
}


def check_statuses(results) -> None:
    """Every honest configuration ok, every cheat caught with its own status; none ranked."""
    seen = {}
    for r in results:
        mode = r.config["MODE"]
        if mode == 0:
            assert r.status == "ok", r.message
            continue
        status, words = EXPECTED[mode]
        said = any(w in r.message for w in words) if isinstance(words, tuple) else words in r.message
        assert (r.status, said) == (status, True), (mode, r.status, r.message)
        assert not r.ranked
        seen[mode] = r.status
    assert set(seen) == set(EXPECTED)


# The second round: tests/data/cheats/rows (softmax) and tests/data/cheats/sums (row sums).
# MODE -> status wherever it runs; the races of sums (2, 3) show only where blocks or warps really
# run side by side: they are checked on the GPU only, and honest ones stay ok anyway. Its far
# writer (SUMS_FAR) faults: on a CPU device it takes SIGSEGV in the worker (the address space
# around every buffer is unmapped), on CUDA compute-sanitizer's memcheck finds it; it is run
# through a worker, never in the test's own process.
ROWS = CHEATS / "rows"
SUMS = CHEATS / "sums"
ROWS_EXPECTED = {1: "wrong_result", 2: "wrong_result", 3: "wrong_result", 4: "wrong_result",
                 5: "ok", 6: "wrong_result"}
SUMS_EXPECTED = {1: "wrong_result", 4: "wrong_result", 6: "wrong_result"}
SUMS_FAR = 5
SUMS_ON_GPU = {**SUMS_EXPECTED, 2: "wrong_result", 3: "wrong_result"}


def check_round2(results, expected) -> None:
    """Honest configurations ok, every cheat in `expected` with its status and never ranked."""
    for r in results:
        mode = r.config["MODE"]
        if mode == 0:
            assert r.status == "ok", r.message
        elif mode in expected:
            assert r.status == expected[mode], (mode, r.status, r.message)
            assert r.ranked == (expected[mode] == "ok")
