"""On a CUDA device: the built-in templates tune with every result verified, and hostile kernels
end with the right status while the run goes on."""

from pathlib import Path

import pytest

from kerntune import templates
from kerntune.engine.backends import pick_auto
from kerntune.engine.evaluate import TimingPolicy
from kerntune.engine.session import load_session
from kerntune.engine.template import load_template
from kerntune.engine.tune import TuneOptions, TuneRun
from kerntune.engine.worker import Worker, WorkerSpec

pytestmark = pytest.mark.gpu

QUICK = TimingPolicy(warmup=2, min_repeats=10, max_repeats=50, target_s=0.01)


def _tune(name, tmp_path, **kw):
    t = load_template(templates.path(name)) if not isinstance(name, Path) else load_template(name)
    opts = TuneOptions(backend="cuda", session_path=tmp_path / "s.toml", timing=QUICK, seed=1, probe=False, **kw)
    return TuneRun(t, opts).run()


def test_auto_picks_the_cuda_backend():
    assert pick_auto() == "cuda"


def test_vector_add_tunes_on_cuda_with_every_result_verified(tmp_path):
    out = _tune("vector_add", tmp_path, problem="16M")
    assert len(out.results) == out.space.feasible == 24
    assert all(r.status == "ok" for r in out.results), [r.message for r in out.results if r.status != "ok"]
    assert out.winner_ok is True
    best = out.best
    assert best.resources.registers > 0 and best.occupancy is not None
    assert out.limits.backend == "cuda"


def test_silu_and_mul_tunes_on_cuda_with_every_result_verified(tmp_path):
    out = _tune("silu_and_mul", tmp_path, problem="llama7b-t128")
    assert len(out.results) == out.space.feasible
    bad = [(r.config, r.status, r.message) for r in out.results if r.status != "ok"]
    assert not bad
    assert out.winner_ok is True
    assert out.best.median_us <= out.default_result.median_us
    s = load_session(out.session_path)
    assert s.summary()["verified"] == out.space.feasible


def test_hostile_kernels_on_the_gpu_end_with_the_right_status(tmp_path):
    hostile = Path(__file__).parent / "data" / "hostile"
    out = _tune(hostile, tmp_path, config_timeout=10)
    by_mode = {r.config["MODE"]: r for r in out.results}
    assert by_mode[0].status == "ok"
    assert by_mode[1].status == "compile_error"
    assert by_mode[2].status == "wrong_result" and by_mode[3].status == "wrong_result"
    assert by_mode[5].status == "timeout"
    assert by_mode[6].status in ("launch_error", "crashed")
    assert "illegal" in by_mode[6].message or "died" in by_mode[6].message
    assert by_mode[7].status == "pruned" and "registers" in by_mode[7].message
    assert out.best.config["MODE"] == 0 and out.winner_ok is True


def test_the_worker_comes_back_after_a_fault():
    hostile = load_template(Path(__file__).parent / "data" / "hostile")
    p = hostile.problem()
    spec = WorkerSpec("cuda", 0, str(hostile.spec_path), hostile.spec_text, dict(hostile.sources), p.name,
                      dict(p.values), 1, QUICK)
    with Worker(spec, config_timeout=10) as w:
        assert w.evaluate({"MODE": 0, "THREADS": 64}).status == "ok"
        assert w.evaluate({"MODE": 6, "THREADS": 64}).status in ("launch_error", "crashed")
        again = w.evaluate({"MODE": 0, "THREADS": 64})
        assert again.status == "ok", again.message
        assert w.restarts == 1


def test_a_run_takes_the_worker_and_compile_processes_started_ahead(tmp_path):
    from kerntune.engine import standby
    from kerntune.engine.events import Note

    standby.stand_down()
    try:
        standby.standby("auto", 0, compile_jobs=3)
        assert standby.wait(120)
        spare = standby._spares[0]
        assert spare.info["backend"] == "cuda" and spare.info["limits"]["compute_capability"]
        cc = spare.info["limits"]["compute_capability"].replace(".", "")
        assert [p.warmed for p in standby._compilers] == [f"sm_{cc}"] * 3  # warmed for the device it found
        notes = []
        t = load_template(templates.path("silu_and_mul"))
        opts = TuneOptions(backend="cuda", session_path=tmp_path / "s.toml", timing=QUICK, seed=1, probe=False,
                           problem="llama7b-t128", budget=12, compile_jobs=3)
        out = TuneRun(t, opts, [lambda ev: notes.append(ev.text) if isinstance(ev, Note) else None]).run()
        assert standby.standing() == (0, 0)
        assert all(r.status == "ok" for r in out.results) and out.winner_ok is True
        assert any("started ahead of the run" in n for n in notes)
    finally:
        standby.stand_down()


def test_a_kept_spare_replaces_the_worker_a_fault_took_down():
    from kerntune.engine import standby

    hostile = load_template(Path(__file__).parent / "data" / "hostile")
    p = hostile.problem()
    spec = WorkerSpec("cuda", 0, str(hostile.spec_path), hostile.spec_text, dict(hostile.sources), p.name,
                      dict(p.values), 1, QUICK)
    standby.stand_down()
    try:
        standby.standby("cuda", 0, compile_jobs=0, keep=True)
        with Worker(spec, config_timeout=10) as w:
            assert w.evaluate({"MODE": 0, "THREADS": 64}).status == "ok"
            assert standby.standing() == (0, 0)  # the spare was taken, and none started yet
            assert w.evaluate({"MODE": 6, "THREADS": 64}).status in ("launch_error", "crashed")
            assert w.evaluate({"MODE": 0, "THREADS": 64}).status == "ok"  # a new worker, started then
            # a kernel has taken one down: the next replacement stands ready
            assert standby.wait(120) and standby.standing() == (1, 0)
            spare = standby._spares[0]
            assert w.evaluate({"MODE": 6, "THREADS": 64}).status in ("launch_error", "crashed")
            again = w.evaluate({"MODE": 0, "THREADS": 64})
            assert again.status == "ok", again.message
            assert w.restarts == 2 and w._proc.popen is spare.popen and "waited" in w.info["ahead"]
    finally:
        standby.stand_down()


def test_profile_top_profiles_the_leaders_with_nsight_compute(tmp_path):
    from kerntune.engine.events import ConfigProfiled
    from kerntune.engine.ncu import find_ncu

    if find_ncu() is None:
        pytest.skip("ncu (Nsight Compute) is not installed")
    out = _tune("silu_and_mul", tmp_path, problem="llama7b-t2048", strategy="random", budget=6, profile_top=2)
    assert [p.rank for p in out.profiles] == [1, 2]
    assert all(p.ok for p in out.profiles), [p.message for p in out.profiles]
    best = out.profiles[0]
    assert dict(best.config) == dict(out.best.config) and best.measured_us == out.best.median_us
    m = best.metrics
    assert m["bound"] in ("memory", "compute", "latency") and m["duration_us"] > 0
    # the profiled launch reads at least the inputs from DRAM (cold caches), and at most what
    # the cost model says the kernel moves, plus a little slack for the counters' granularity
    inputs = 2048 * 11008 * 2 * 2
    assert inputs * 0.95 <= m["dram_bytes"] <= best.bytes_moved * 1.05
    s = load_session(out.session_path)
    assert [e.rank for e in s.events if isinstance(e, ConfigProfiled)] == [1, 2]


@pytest.mark.parametrize("name,problem", [("silu_and_mul_bf16", "llama7b-t128"),
                                          ("fused_add_rmsnorm_bf16", "llama7b-t128"),
                                          ("softmax", "llama-t128")])
def test_library_kernels_tune_on_cuda_with_every_result_verified(tmp_path, name, problem):
    """The bfloat16 variants, and softmax with its rows in shared memory and registers."""
    out = _tune(name, tmp_path, problem=problem, strategy="random", budget=40)
    bad = [(r.config, r.status, r.message) for r in out.results if r.status not in ("ok", "pruned")]
    assert not bad
    assert out.winner_ok is True and out.default_result is not None and out.default_result.status == "ok"
    assert out.best.median_us <= out.default_result.median_us


def test_every_cheat_is_caught_on_the_gpu(tmp_path):
    from cheats import CHEATS, check_statuses

    # three warm-up and five timed launches: MODE 11 stays honest through its evaluation
    timing = TimingPolicy(warmup=3, min_repeats=5, max_repeats=5)
    t = load_template(CHEATS)
    opts = TuneOptions(backend="cuda", session_path=tmp_path / "s.toml", timing=timing, seed=1, probe=False)
    out = TuneRun(t, opts).run()
    check_statuses(load_session(out.session_path).results())
    assert out.winner_ok is True and out.best.config["MODE"] == 0


def test_compute_sanitizer_finds_a_write_past_the_end_and_passes_an_honest_kernel():
    from cheats import CHEATS
    from kerntune.engine.sanitize import find_sanitizer, sanitize_config

    if find_sanitizer() is None:
        pytest.skip("compute-sanitizer is not installed")
    t = load_template(CHEATS)
    clean, msg = sanitize_config(t, t.problem(), {"MODE": 0, "THREADS": 64})
    assert clean, msg
    clean, msg = sanitize_config(t, t.problem(), {"MODE": 7, "THREADS": 64})
    assert not clean and "Invalid __global__ write" in msg, msg


@pytest.mark.parametrize("mode, which, finds", [
    (0, "memcheck", False), (0, "racecheck", False), (0, "synccheck", False),
    (1, "racecheck", True),  # the tree without its barriers: one warp reads what the other wrote
    (5, "memcheck", True),  # a write 2 MiB past the end of s
    # What the tools cannot see, kerntune's own checks catch (the test below): racecheck reports
    # shared-memory hazards between warps, not within one (MODE 3, warp-synchronous steps) nor
    # between blocks in global memory (MODE 2); memcheck sees a read one element past x (MODE 4)
    # land inside kerntune's guard region, a valid allocation, where the NaN it reads spoils the sum.
])
def test_each_compute_sanitizer_tool_finds_its_class_of_the_second_round(mode, which, finds):
    from cheats import SUMS
    from kerntune.engine.sanitize import find_sanitizer, sanitize_config

    if find_sanitizer() is None:
        pytest.skip("compute-sanitizer is not installed")
    t = load_template(SUMS)
    clean, msg = sanitize_config(t, t.problem(), {**t.default_config(), "MODE": mode}, which=which)
    assert clean != finds, msg
    assert msg.startswith(f"compute-sanitizer {which}: ")


@pytest.mark.parametrize("which, guilty", [("memcheck", {5}), ("racecheck", {1}), ("synccheck", set())])
def test_one_child_a_tool_checks_several_configurations_and_pins_each_finding(which, guilty):
    """The leaders' check: one child of each tool for the group; a finding is pinned to its own
    configuration (memcheck's far write ends the child's context: the rest are checked apart)."""
    from cheats import SUMS
    from kerntune.engine.sanitize import find_sanitizer, sanitize_configs

    if find_sanitizer() is None:
        pytest.skip("compute-sanitizer is not installed")
    t = load_template(SUMS)
    modes = (0, 5, 6, 1, 0)
    found = sanitize_configs(t, t.problem(), [{**t.default_config(), "MODE": m} for m in modes], which=which)
    for mode, verdict in zip(modes, found):
        if mode == 5 and which != "memcheck":  # its far write may fault where no tool watches for it
            continue
        assert not isinstance(verdict, str), verdict  # those after it are checked all the same
        assert verdict[0] == (mode not in guilty), (mode, verdict)


@pytest.mark.parametrize("which", ["rows", "sums"])
def test_the_second_round_of_cheats_is_caught_on_the_gpu(tmp_path, which):
    """Softmax cheats on inputs they cannot guess, memoisers, races (a dropped barrier, two
    blocks adding into one row, warp-synchronous code), a read past an input, a 2%-wrong sum:
    each with its status; the honest configurations ok and the winner."""
    from cheats import ROWS, ROWS_EXPECTED, SUMS, SUMS_ON_GPU, check_round2

    path, expected = (ROWS, ROWS_EXPECTED) if which == "rows" else (SUMS, SUMS_ON_GPU)
    opts = TuneOptions(backend="cuda", session_path=tmp_path / "s.toml", timing=QUICK, seed=1, probe=False)
    out = TuneRun(load_template(path), opts).run()
    session = load_session(out.session_path)
    results = session.results()
    check_round2(results, expected)
    from kerntune.engine.events import ConfigSanitized
    from kerntune.engine.sanitize import find_sanitizer

    if find_sanitizer() is not None:  # the winner (and the leaders) went through all three tools
        tools = {e.message.split(":")[0] for e in session.events if isinstance(e, ConfigSanitized)}
        assert {f"compute-sanitizer {t}" for t in ("memcheck", "racecheck", "synccheck")} <= tools, tools
    assert out.winner_ok is True and out.best.config["MODE"] in (0, 5)
    # a far writer (sums MODE 5) never makes an honest configuration fail
    assert all(r.status == "ok" for r in results if r.config["MODE"] == 0)
