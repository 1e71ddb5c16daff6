"""Kernels written to fool the verifier, on the OpenCL CPU device: each is caught with its own
status, none is ever ranked, the honest configurations stay ok, and a winner that fails its
final check is never reported."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from kerntune.agents.lift import lift_template
from kerntune.engine.backends import GUARD_BYTES
from kerntune.engine.evaluate import POISONS, Evaluator, Rejected, TimingPolicy
from kerntune.engine.proposal import write_template
from kerntune.engine.session import load_session
from kerntune.engine.space import build_space, odd_problem
from kerntune.engine.template import load_template, parse_template

from cheats import CHEATS, check_statuses
from test_cli import QUICK, kerntune

DATA = Path(__file__).resolve().parent / "data"

# --repeats 5 (three warm-up launches, five timed) keeps MODE 11's launches within its honest 12
# during the evaluation: 4 verification runs, 3 warm-up, 5 timed.


def test_every_cheat_is_caught_and_the_honest_winner_is_reported(tmp_path):
    session = tmp_path / "cheats.toml"
    r = kerntune("tune", str(CHEATS), "--session", str(session), *QUICK)
    assert r.returncode == 0, r.stderr
    s = load_session(session)
    check_statuses(s.results())
    summary = s.summary()
    assert summary["best"]["config"]["MODE"] == 0
    assert summary["failed"] == {"wrong_result": 8, "out_of_bounds": 2, "wrote_input": 1}
    assert "verifying also at n=4095" in r.stdout
    shown = json.loads(kerntune("show", str(session), "--json").stdout)
    assert shown["best"]["config"]["MODE"] == 0 and shown["failed"]["wrong_result"] == 8
    finished = s.finished()
    assert finished.best["MODE"] == 0


def test_a_run_whose_only_configuration_changes_after_its_timing_reports_none_and_fails(tmp_path):
    """MODE 11 is honest for every launch of its verification and timing: launched again and
    again (it leads), it is caught, and the run has no winner."""
    d = tmp_path / "cheats"
    shutil.copytree(CHEATS, d)
    spec = d / "kernel.toml"
    spec.write_text(spec.read_text().replace("values = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]\ndefault = 0",
                                             "values = [11]\ndefault = 11"))
    session = tmp_path / "s.toml"
    r = kerntune("tune", str(d), "--session", str(session), *QUICK)
    assert r.returncode != 0
    # the leaders' launches again and again catch it, or a timed launch of a measurement taken again
    assert ("no configuration passed its final check" in r.stdout + r.stderr
            or "no configuration was verified" in r.stderr)
    s = load_session(session)
    assert s.best() is None and s.summary()["best"] is None
    assert [x.status for x in s.results()] == ["wrong_result"]
    assert s.finished().best == {}


@pytest.mark.parametrize("mode", [1, 4])
def test_a_kernel_that_tests_for_the_poison_is_caught_every_time(opencl_backend, mode):
    """Each configuration's checked runs use every poison at least once, in a random order."""
    t = load_template(CHEATS)
    for _ in range(6):
        ev = Evaluator(opencl_backend, t, t.problem(), timing=TimingPolicy(warmup=1, min_repeats=3, max_repeats=3))
        r = ev.evaluate({"MODE": mode, "THREADS": 64})
        assert r.status == "wrong_result" and "never written" in r.message


def test_timed_launches_are_checked_where_a_kernel_cannot_tell(opencl_backend):
    t = load_template(CHEATS)
    ev = Evaluator(opencl_backend, t, t.problem(), timing=TimingPolicy(warmup=1, min_repeats=40, max_repeats=40))
    checked = ev.timer.checked_launches(40)
    assert 39 in checked and any(10 <= k < 20 for k in checked)
    many = ev.timer.checked_launches(10**5)
    assert len(many) == 16 and many[-1] == 10**5 - 1  # at most 16, the last always
    assert set(POISONS) == {"nan", "bits", "plausible"}


def test_the_engine_adds_an_odd_verification_size_that_keeps_every_config_feasible(opencl_backend):
    t = load_template(CHEATS)
    p = t.problem()
    space = build_space(t, p, opencl_backend.limits)
    assert odd_problem(t, p, space.configs, opencl_backend.limits).values == {"n": 4095}
    odd = t.problem(None, {"n": 4095})
    assert odd_problem(t, odd, build_space(t, odd, opencl_backend.limits).configs, opencl_backend.limits) is None


def test_inputs_are_compared_byte_for_byte(opencl_backend):
    t = load_template(CHEATS)
    ev = Evaluator(opencl_backend, t, t.problem(), timing=TimingPolicy(warmup=1, min_repeats=3, max_repeats=3))
    r = ev.evaluate({"MODE": 9, "THREADS": 64})
    assert r.status == "wrote_input" and "4096 of 4096 elements differ" in r.message
    assert np.isfinite(ev.sets.pool(0)[0].host["a"]).all()


def test_a_memcheck_report_reads_as_a_count_and_the_first_finding():
    from kerntune.engine.sanitize import parse_report

    report = """========= COMPUTE-SANITIZER
========= Invalid __global__ write of size 4 bytes
=========     at cheats+0x1b0
=========     by thread (63,0,0) in block (63,0,0)
=========     Address 0x7f5a2c000400 is out of bounds
=========
========= ERROR SUMMARY: 1 error
"""
    errors, first = parse_report(report)
    assert errors == 1
    assert first.startswith("Invalid __global__ write of size 4 bytes; at cheats+0x1b0; by thread (63,0,0)")
    assert parse_report("========= ERROR SUMMARY: 0 errors\n") == (0, "")
    assert parse_report("no summary at all")[0] == -1


def test_no_odd_size_is_added_where_the_originals_own_launch_covers_whole_blocks(opencl_backend, tmp_path):
    """The textbook tiled matmul launches `N // 16` blocks: an odd N would fail the original, so the
    engine adds none for it; a template's own grid dividing with `//` never earns that."""
    t = load_template(DATA / "tiles" / "matmul")
    p = t.problem()
    limits = opencl_backend.limits
    assert odd_problem(t, p, build_space(t, p, limits).configs, limits) is None
    made = write_template(t, lift_template(t, "opencl", limits).proposal, tmp_path / "tpl", limits)
    assert [e.source for e in made.original_grid] == ["N // 16", "N // 16"]
    assert odd_problem(made, p, build_space(made, p, limits).configs, limits) is None
    # the cheats' template with a grid that drops the tail still gets its odd size
    cheat = load_template(CHEATS)
    text = cheat.spec_text.replace("ceil_div(n, THREADS)", "n // THREADS")
    assert text != cheat.spec_text
    dropped = parse_template(text, cheat.spec_path, cheat.sources)
    q = dropped.problem()
    assert odd_problem(dropped, q, build_space(dropped, q, limits).configs, limits).values == {"n": 4095}


def test_a_template_keeps_the_sizes_its_originals_spec_requires(opencl_backend, tmp_path):
    """The worklog's tiled product checks no bound: its spec says `K % 32 == 0`. Its template's
    tiles take any K, but the original is the template's default, so the requirement stays and the
    engine's odd verification size leaves K a multiple of 32 (K - 1 gave the original NaNs)."""
    from kerntune.agents.rules import rules_template

    t = load_template(DATA / "published" / "sgemm" / "sgemm_shared.toml")
    limits = opencl_backend.limits
    made = write_template(t, rules_template(t, "opencl", limits).proposal, tmp_path / "tpl", limits)
    assert {"M % 32 == 0", "N % 32 == 0", "K % 32 == 0"} <= {c.text for c in made.constraints}
    p = made.problem("small", {})
    odd = odd_problem(made, p, build_space(made, p, limits).configs, limits)
    assert odd is None or odd.values["K"] % 32 == 0


def test_whole_blocks_are_told_from_a_ceiling():
    from kerntune.engine.expressions import parse
    from kerntune.engine.space import whole_blocks_only

    for grid, whole in (("N // 16", True), ("(N + 16 - 1) // 16", False), ("ceil_div(N, 16)", False),
                        ("N", False), ("64", False), ("(N // 32) * 2", True), ("max(1, N // 1024)", False)):
        assert whole_blocks_only(parse(grid), {"N": 64}, "N") is whole, grid
    assert not whole_blocks_only(parse("N // 16"), {"N": 64, "M": 8}, "M")


# the second round (tests/data/cheats/rows, sums): one evaluator per template, on PoCL


@pytest.fixture(scope="module")
def pocl():
    from kerntune.engine.backends import open_backend

    return open_backend("opencl", 0)


def _evaluator(backend, path, **timing):
    t = load_template(path)
    ev = Evaluator(backend, t, t.problem(), seed=5, timing=TimingPolicy(warmup=1, min_repeats=10, max_repeats=10, **timing))
    ev.prepare()
    ev.calibrate()
    return ev


def test_softmax_cheats_on_inputs_they_cannot_guess_and_memoisers_are_caught(pocl):
    from cheats import ROWS, ROWS_EXPECTED, check_round2

    ev = _evaluator(pocl, ROWS)
    assert ev.sets.hard is not None and set(ev.sets.hard[1].kinds) == {"large", "outlier", "equal", "tiny"}
    results = [ev.evaluate({"MODE": m, "THREADS": 64}) for m in [0, *ROWS_EXPECTED]]
    check_round2(results, ROWS_EXPECTED)
    assert all("large, outlier" in r.message for r in results if r.config["MODE"] in (1, 2, 3))


def test_a_memoiser_is_caught_on_the_timed_launches_alone(pocl):
    """Every timed launch runs on a set no earlier launch saw; a kernel that keeps its last output
    keyed on a few sampled inputs returns it stale and fails there."""
    from cheats import ROWS

    ev = _evaluator(pocl, ROWS)
    seen = []
    timed = pocl.timed

    def watch(kernel, geo, args, flush):  # each timed launch's input, as the kernel finds it
        x = np.empty(64 * 256, dtype=np.float32)
        pocl.download(ev.buffers.of(0)["x"].raw, x, GUARD_BYTES)
        seen.append(x.tobytes())
        return timed(kernel, geo, args, flush)

    for mode, caught in ((0, False), (4, True)):
        config = {"MODE": mode, "THREADS": 64}
        kernel, geo = ev.compile(config), ev.checks.geometry(config, ev.problem)
        ev.checks.arm()
        ev.timer.used_variants = set()
        seen.clear()
        pocl.timed = watch
        try:
            ev.measure(kernel, geo)
            assert not caught
            # every counted launch (1 warm-up, 10 timed) on its own input; a checked launch that
            # repeats a changed set (more checks than changed sets) is launched but not counted
            assert len(set(seen)) >= 11
        except Rejected as e:
            assert caught and "timed launch" in e.message
        finally:
            pocl.timed = timed


def test_row_sums_in_another_order_pass_and_wrong_racy_or_out_of_bounds_ones_fail(pocl):
    from cheats import SUMS, SUMS_EXPECTED, check_round2

    ev = _evaluator(pocl, SUMS)
    results = [ev.evaluate({"MODE": m, "SPLIT": 1}) for m in (0, *SUMS_EXPECTED)]
    check_round2(results, SUMS_EXPECTED)
    read_past = next(r for r in results if r.config["MODE"] == 4)
    assert "NaN" in read_past.message  # the guard after an input holds NaN
    # a stray write into what the checks compare with is found before a failure is recorded
    assert ev.intact()
    inputs = ev.sets.pool(0)[0]
    pocl.upload(inputs.device["x"], inputs.host["x"][::-1].copy())
    assert not ev.intact()
    pocl.upload(inputs.device["x"], inputs.host["x"])
    assert ev.intact()


def test_a_write_far_past_an_output_faults_in_its_worker_and_frames_no_one():
    """On a CPU device every buffer sits in unmapped address space: the sums' far writer (2 MiB
    past `s`, beyond the guard regions) takes SIGSEGV in the worker instead of landing in its
    input sets or references, and the honest configuration measured after it stays ok."""
    from cheats import SUMS, SUMS_FAR
    from kerntune.engine.worker import Worker, WorkerSpec

    t = load_template(SUMS)
    p = t.problem()
    spec = WorkerSpec("opencl", 0, str(t.spec_path), t.spec_text, dict(t.sources), p.name, dict(p.values), seed=1)
    with Worker(spec, config_timeout=120) as w:
        modes = (SUMS_FAR, 0)
        for mode in modes:
            w.submit({"MODE": mode, "SPLIT": 1})
        results = [w.result() for _ in modes]
        if not w.info.get("fenced"):
            pytest.skip(f"this OpenCL runtime does not use the host memory it is given: {w.info.get('unfenced')}")
    assert [r.status for r in results] == ["crashed", "ok"], [r.message for r in results]
    assert "read or wrote outside its buffers" in results[0].message


def test_a_runtime_that_copies_the_host_memory_it_is_given_is_told_apart():
    from kerntune.engine.backends.host_memory import uses_host_memory

    def using(host):
        return host

    def copying(host):
        return host.copy()

    def fill(buf, byte):
        buf[:] = byte

    def read(buf):
        return buf.copy()

    assert uses_host_memory(fill, read, using) == ""
    assert "keeps a buffer's data apart" in uses_host_memory(fill, read, copying)

    def copied_on_write(host):  # the device's writes reach the host, the host's do not reach it
        class Mirror:
            def __init__(self):
                self.data = host.copy()

        return Mirror()

    def fill_both(buf, byte):
        buf.data[:] = byte
        host_of[0][:] = byte

    host_of = []

    def over(host):
        host_of[:] = [host]
        return copied_on_write(host)

    assert "copies the host memory" in uses_host_memory(fill_both, lambda b: b.data.copy(), over)


def test_buffers_past_a_limit_on_the_address_space_are_the_runtimes_own_and_it_is_said():
    import subprocess
    import sys

    code = ("import resource\n"
            "resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))\n"
            "from kerntune.engine.backends import open_backend\n"
            "b = open_backend('opencl', 0)\n"
            "fenced = b.fenced\n"
            "kept = [b.alloc(1 << 20) for _ in range(40)]\n"
            "print(fenced, b.unfenced)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    if done.stdout.startswith("True"):
        assert "the address space for fenced buffers ran out" in done.stdout, done.stdout


def test_one_bad_element_of_the_original_opens_no_tolerance():
    from kerntune.engine.compare import Expected, compare
    from kerntune.engine.checks import widening
    from kerntune.engine.template import Argument

    rng = np.random.default_rng(1)
    ref = rng.standard_normal(4096).astype(np.float32)
    arg = Argument("y", "float32", "output")
    original = ref.copy()
    original[7] *= 1.02  # one element far off, the rest exact
    default = Expected(ref, "float32", arg)
    from kerntune.engine.compare import ratios

    r = ratios(original, default)
    scale, spare = widening(r, float(r.max()))
    assert scale == 1.0 and spare[0] == 1 / 4096
    check = Expected(ref, "float32", arg, scale, spare=spare)
    assert compare("y", original, check)[1] == ""  # the original passes
    assert compare("y", ref * np.float32(1.02), check)[1]  # 2% wrong everywhere fails
    few = ref.copy()
    few[[3, 99]] *= 1.01
    assert compare("y", few, check)[1] == ""  # a few elements beyond, no further out


def test_hard_inputs_hold_every_kind_in_rows_of_their_own():
    from kerntune.engine.inputs import make_hard_inputs

    t = load_template(DATA / "cheats" / "rows")
    x = make_hard_inputs(t, t.problem(), 3, ("large", "outlier", "equal", "tiny")).host["x"]
    assert np.abs(x).max() > 1000
    assert any(np.all(row == row[0]) for row in x)
    assert (np.signbit(x) & (x == 0)).any() and ((x != 0) & (np.abs(x) < np.finfo(np.float32).tiny)).any()
    assert any((np.abs(row) > 1000).sum() == 1 for row in x)  # one outlier in a row
