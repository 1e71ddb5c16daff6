"""Search strategies, stop rules, simulation on recorded spaces, and Kernel Tuner interop."""

import json
import math
from pathlib import Path

import pytest

from kerntune import templates
from kerntune.engine.device import DeviceLimits
from kerntune.engine.kerneltuner import CacheFormatError, export_cache, import_cache
from kerntune.engine.result import Result, config_key
from kerntune.engine.search import STRATEGIES, Seeded, StopRules, make_strategy
from kerntune.engine.session import load_session
from kerntune.engine.simulate import simulate
from kerntune.engine.space import build_space, infeasible_reason
from kerntune.engine.template import load_template

DATA = Path(__file__).parent / "data"
SESSIONS = Path(__file__).parent.parent / "sessions"
GPU = DeviceLimits(backend="cuda", name="gpu", max_threads_per_block=1024, max_shared_per_block=48 * 1024,
                   max_shared_per_block_optin=227 * 1024)


def _fake_time(config) -> float:
    """A deterministic landscape with one best configuration."""
    return 10.0 + sum((math.log2(v) - 3) ** 2 if isinstance(v, int) and v > 0 else 0 for v in config.values())


@pytest.mark.parametrize("name", STRATEGIES)
def test_strategies_propose_only_feasible_configs_once_within_budget(name):
    t = load_template(templates.path("matmul"))
    problem = t.problem("2048")
    space = build_space(t, problem, GPU)
    strat = make_strategy(name, space, seed=5)
    seen = []
    rules = StopRules(budget=60)
    while rules.reason(len(seen), 0.0, None, 0) is None:
        c = strat.propose()
        if c is None:
            break
        assert infeasible_reason(t, c.as_dict(), problem, GPU) is None
        assert c.key not in seen
        seen.append(c.key)
        strat.observe(c, Result(config=c.as_dict(), status="ok", median_us=_fake_time(c.as_dict())))
    assert len(seen) == 60


@pytest.mark.parametrize("name", STRATEGIES)
def test_strategies_skip_what_is_done_and_end_when_the_space_is(name):
    t = load_template(templates.path("vector_add"))
    space = build_space(t, t.problem(), GPU)
    done = {c.key for c in space.configs[:10]}
    strat = make_strategy(name, space, seed=1, done=done)
    got = []
    while (c := strat.propose()) is not None:
        got.append(c.key)
        strat.observe(c, Result(config=c.as_dict(), status="ok", median_us=_fake_time(c.as_dict())))
    assert sorted(got) == sorted(c.key for c in space.configs[10:])


def test_model_guided_is_deterministic_for_a_seed():
    t = load_template(templates.path("matmul"))
    space = build_space(t, t.problem("2048"), GPU)

    def run(seed):
        s = make_strategy("model", space, seed=seed)
        out = []
        for _ in range(25):
            c = s.propose()
            out.append(c.key)
            s.observe(c, Result(config=c.as_dict(), status="ok", median_us=_fake_time(c.as_dict())))
        return out

    assert run(3) == run(3)
    assert run(3) != run(4)


def test_stop_rules():
    rules = StopRules(budget=10, seconds=5.0, sol_target=0.9, patience=4)
    assert rules.reason(3, 1.0, 0.5, 0) is None
    assert "budget" in rules.reason(10, 1.0, 0.5, 0)
    assert "time limit" in rules.reason(3, 5.0, 0.5, 0)
    assert "speed of light" in rules.reason(3, 1.0, 0.95, 0)
    assert "no improvement" in rules.reason(3, 1.0, 0.5, 4)
    assert StopRules().reason(10**6, 1e9, 1.0, 10**6) is None


@pytest.mark.parametrize("path", sorted(SESSIONS.glob("*.toml")), ids=lambda p: p.stem)
def test_grid_simulation_reproduces_the_recorded_run_exactly(path):
    session = load_session(path)
    sim = simulate(session, "grid")
    recorded = session.results()
    assert sim.evaluations == len(recorded)
    assert sim.best == session.best()
    best_so_far, trace = math.inf, []
    for r in recorded:
        if r.ranked:
            best_so_far = min(best_so_far, r.median_us)
        trace.append(best_so_far)
    assert list(sim.trace) == trace


def test_simulation_respects_the_budget_and_reports_closeness():
    session = load_session(SESSIONS / "matmul-2048.toml")
    sim = simulate(session, "random", budget=40, seed=2)
    assert sim.evaluations == 40 and "budget" in sim.reason
    assert sim.ratio >= 1.0
    need = sim.within[0.03]
    assert need is None or need <= 40
    again = simulate(session, "random", budget=40, seed=2)
    assert again.trace == sim.trace


def test_kernel_tuner_cache_round_trips(tmp_path):
    out = import_cache(DATA / "kt_cache.json", tmp_path / "kt.toml")
    s = load_session(out)
    statuses = {config_key(r.config): r.status for r in s.results()}
    assert statuses == {"block_size_x=128,tile=1": "ok", "block_size_x=128,tile=2": "ok",
                        "block_size_x=256,tile=1": "ok", "block_size_x=256,tile=2": "compile_error",
                        "block_size_x=512,tile=1": "ok", "block_size_x=512,tile=2": "launch_error"}
    assert s.best().config == {"block_size_x": 256, "tile": 1}
    assert s.best().median_us == pytest.approx(90.2)
    back = export_cache(s)
    original = json.loads((DATA / "kt_cache.json").read_text())
    assert back["tune_params_keys"] == original["tune_params_keys"]
    assert back["tune_params"] == original["tune_params"]
    assert set(back["cache"]) == set(original["cache"])
    for key, entry in original["cache"].items():
        mine = back["cache"][key]
        if isinstance(entry["time"], str):
            assert mine["time"] == entry["time"]
        else:
            assert mine["time"] == pytest.approx(entry["time"])
            assert mine["times"] == pytest.approx(entry["times"])
        assert mine["compile_time"] == pytest.approx(entry["compile_time"])
    # and the exported file imports again to the same results
    p = tmp_path / "again.json"
    p.write_text(json.dumps(back))
    s2 = load_session(import_cache(p, tmp_path / "again.toml"))
    assert [(r.config, r.status, r.median_us) for r in s2.results()] == \
           [(r.config, r.status, r.median_us) for r in s.results()]


@pytest.mark.parametrize("text, words", [
    ("[1, 2]", "expected a JSON object"),
    ('{"tune_params_keys": 3, "cache": {}}', "tune_params_keys"),
    ('{"tune_params_keys": ["a"], "cache": {"1": {"time": 1}}}', "lacks a"),
    ("not json", "not valid JSON"),
])
def test_bad_cache_files_are_one_line(tmp_path, text, words):
    p = tmp_path / "bad.json"
    p.write_text(text)
    with pytest.raises(CacheFormatError) as info:
        import_cache(p, tmp_path / "out.toml")
    assert words in str(info.value) and "\n" not in str(info.value)


def test_simulate_and_kt_commands(tmp_path, capsys):
    from kerntune.tui.cli import main

    assert main(["simulate", str(SESSIONS / "matmul-2048.toml"), "--strategy", "model", "--budget", "80",
                 "--seed", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["evaluations"] == 80 and out["recorded_best"]["median_us"] > 0
    kt = tmp_path / "kt.json"
    assert main(["kt-export", str(SESSIONS / "merge_attn_states-llama7b-t4096.toml"), "-o", str(kt)]) == 0
    assert main(["kt-import", str(kt), "-o", str(tmp_path / "back.toml")]) == 0
    assert main(["simulate", str(tmp_path / "nothing.toml")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_a_run_resumed_with_another_strategy_keeps_and_learns_from_its_results(opencl_backend, tmp_path):
    from dataclasses import replace

    from kerntune.engine.evaluate import TimingPolicy
    from kerntune.engine.events import RunStarted
    from kerntune.engine.session import load_session
    from kerntune.engine.tune import TuneOptions, TuneRun
    from kerntune.tui.feeds import LiveFeed
    from kerntune.tui.state import HeaderRead

    t = load_template(templates.path("vector_add"))
    opts = TuneOptions(backend="opencl", strategy="random", budget=6, seed=1, overrides={"n": 20000},
                       session_path=tmp_path / "s.toml", probe=False,
                       timing=TimingPolicy(warmup=1, min_repeats=3, max_repeats=3, target_s=0.001))
    first = TuneRun(t, opts).run()
    assert len(first.results) == 6
    recorded = load_session(tmp_path / "s.toml")
    feed = LiveFeed()
    second = TuneRun(t, replace(opts, strategy="model", budget=10, resume=True), [feed]).run()
    # the dashboard gets the session's header and the events recorded before in memory, first
    items = feed.poll().items
    assert items[0] == HeaderRead(recorded.header) and items[1:len(recorded.events) + 1] == recorded.events
    assert isinstance(items[len(recorded.events) + 1], RunStarted)
    keys = [config_key(r.config) for r in second.results]
    assert len(keys) == 10 and len(set(keys)) == 10
    assert keys[:6] == [config_key(r.config) for r in first.results]
    # the recorded measurements are kept as they were (the verdict among the leaders may choose
    # another of them, tied with the fastest, so it is the fastest that cannot get worse)
    assert [r.median_us for r in second.results[:6]] == [r.median_us for r in first.results]
    fastest = min(r.median_us for r in second.results if r.status == "ok")
    assert fastest <= min(r.median_us for r in first.results if r.status == "ok")


def test_seeded_configs_go_first_and_the_strategy_never_repeats_them():
    t = load_template(templates.path("vector_add"))
    space = build_space(t, t.problem(), GPU)
    seeds = list(space.configs[-3:])
    done = {space.configs[-1].key}
    s = Seeded(make_strategy("grid", space, seed=0), seeds, done)
    got = []
    while (c := s.propose()) is not None:
        got.append(c.key)
        s.observe(c, Result(config=c.as_dict(), status="ok", median_us=_fake_time(c.as_dict())))
    assert got[:2] == [c.key for c in seeds[:2]]
    assert len(got) == len(set(got)) == space.feasible  # the grid skips the seeds, and proposes the done one once


def _simulate_to_the_end(session, strategy, seed, rules):
    """The simulation as it was before it stopped asking the strategy once the best was found:
    the strategy walked through the whole space, then the stop rules applied to that walk."""
    from kerntune.engine.simulate import recorded_space
    from kerntune.engine.space import Config

    space, recorded = recorded_space(session)
    default = session.template.get("default_config")
    strat = make_strategy(strategy, space, seed=seed,
                          first=Config.of(default) if Config.of(default) in recorded else None)
    walk = []
    while (config := strat.propose()) is not None:
        walk.append(recorded[config])
        strat.observe(config, walk[-1])
    best, trace, since = None, [], 0
    for r in walk:
        why = rules.reason(len(trace), 0.0, best.sol_fraction if best else None, since)
        if why:
            return best, trace, why
        improves = r.ranked and (best is None or r.median_us < best.median_us)
        best, since = (r, 0) if improves else (best, since + 1)
        trace.append(best.median_us if best else math.inf)
    return best, trace, rules.reason(len(trace), 0.0, best.sol_fraction if best else None, since) or "space exhausted"


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("rules", [StopRules(), StopRules(budget=50), StopRules(patience=7),
                                   StopRules(sol_target=0.5)], ids=["none", "budget", "patience", "sol"])
def test_a_simulation_that_finds_the_best_ends_as_the_full_walk_does(strategy, rules):
    session = load_session(SESSIONS / "merge_attn_states-llama7b-t4096.toml")
    sim = simulate(session, strategy, seed=3, stop=rules)
    best, trace, reason = _simulate_to_the_end(session, strategy, 3, rules)
    assert (sim.best, list(sim.trace), sim.reason, sim.evaluations) == (best, trace, reason, len(trace))


def test_the_models_incremental_update_equals_a_refit_from_scratch():
    import numpy as np

    from kerntune.engine.search import _Posterior

    rng = np.random.default_rng(7)
    x = rng.random((60, 4))
    y = rng.standard_normal(60)
    gp = _Posterior(x, np.arange(60), 0.4, 1e-3, 60, capacity=4)  # grows past its first room
    order = list(rng.permutation(60)[:25])
    for lo, hi in [(0, 3), (3, 4), (4, 9), (9, 10), (10, 25)]:  # blocks of several sizes
        gp.add(order[lo:hi], y[order[lo:hi]])
    mean, sd, best = gp.predict()

    def k(a, b):
        return np.exp(-0.5 * ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1) / 0.4**2)

    seen = x[order]
    ys = (y[order] - y[order].mean()) / y[order].std()
    kinv = np.linalg.inv(k(seen, seen) + 1e-3 * np.eye(25))
    ks = k(x, seen)
    assert np.allclose(mean, ks @ kinv @ ys, atol=1e-8)
    assert np.allclose(sd, np.sqrt(np.clip(1 - np.einsum("ij,jk,ik->i", ks, kinv, ks), 1e-12, None)), atol=1e-6)
    assert best == pytest.approx(ys.min())


def _walk(strategy, steps, time_of=_fake_time):
    got = []
    while len(got) < steps and (c := strategy.propose()) is not None:
        got.append(c.key)
        strategy.observe(c, Result(config=c.as_dict(), status="ok", median_us=time_of(c.as_dict())))
        yield c


def test_the_model_keeps_a_bounded_number_of_observations():
    from kerntune.engine.search import ModelGuided

    t = load_template(templates.path("matmul"))
    space = build_space(t, t.problem("2048"), GPU)
    s = ModelGuided(space, seed=2, max_train=64, block=8)
    sizes, keys = [], []
    for c in _walk(s, 400):
        keys.append(c.key)
        sizes.append(s.model_size)
    assert len(keys) == len(set(keys)) == 400
    assert max(sizes) <= 64  # a proposal's cost is bounded by the model's size, not the history
    assert min(sizes[200:]) >= 32  # and past the bound it still learns from half of it


def test_in_a_space_larger_than_its_pool_the_model_proposes_every_configuration_once():
    from kerntune.engine.search import ModelGuided

    t = load_template(templates.path("softmax"))
    space = build_space(t, t.problem(), GPU)
    done = {space.configs[5].key}
    model = ModelGuided(space, seed=4, done=done, pool=40, max_train=128, block=4)  # no trim in 96
    s = Seeded(model, space.configs[-6:], done)
    got = [c.key for c in _walk(s, 30)]
    assert model._gp.columns.size < space.feasible  # it scores a pool, not the space
    # results of configurations outside the pool, told to it (not proposed): the model takes
    # them in once it has a pool that holds them, and never proposes them
    outside = [i for i in range(space.feasible) if model._gp.pos[i] < 0 and not model._tried[i]][:3]
    for i in outside:
        c = space.configs[i]
        s.observe(c, Result(config=c.as_dict(), status="ok", median_us=_fake_time(c.as_dict())))
    got += [c.key for c in _walk(s, 60)]
    assert set(outside) <= set(model._gp.rows)
    got += [c.key for c in _walk(s, space.feasible)]
    told = {space.configs[i].key for i in outside}
    assert sorted(got) == sorted(c.key for c in space.configs if c.key not in done | told)


@pytest.mark.parametrize("session, seeds, most", [("matmul-2048", range(8), 400), ("softmax-llama-t2048", range(5), 10)])
def test_the_model_comes_within_3_percent_of_a_recorded_best_in_few_evaluations(session, seeds, most):
    """Median evaluations over the seeds (173.5 and 5 now). Before the model left failures out
    and started from a space-filling design: 578.5 on matmul (22% of it fails) and 26 on softmax."""
    import statistics

    s = load_session(SESSIONS / f"{session}.toml")
    needs = [simulate(s, "model", budget=len(s.results()) // 2, seed=seed, stop_within=0.03).within[0.03]
             for seed in seeds]
    assert statistics.median(n if n is not None else math.inf for n in needs) <= most
