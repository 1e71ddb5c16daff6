"""Input sets and reference outputs are made once and read back: by every later worker of a run
(the agent loop's rounds), and by later runs, unless the cache is off."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from kerntune import templates
from kerntune.engine.inputs_cache import ENV, cached_inputs, cached_reference, inputs_cache
from kerntune.engine.template import load_template, np_dtype

COUNTING = '''
import hashlib
from pathlib import Path

import numpy as np


def reference(inputs, sizes):
    digest = hashlib.sha256(inputs["a"].tobytes() + inputs["b"].tobytes()).hexdigest()[:16]
    with open(Path(__file__).with_name("calls.txt"), "a") as f:
        f.write(digest + "\\n")
    return {"c": (inputs["a"].astype(np.float64) + inputs["b"]).astype(np.float32)}
'''


@pytest.fixture
def counted(tmp_path) -> Path:
    """vector_add whose reference writes down the inputs of every call."""
    d = tmp_path / "va"
    shutil.copytree(templates.path("vector_add").parent, d)
    (d / "reference.py").write_text(COUNTING)
    return d


def calls(d: Path) -> list[str]:
    f = d / "calls.txt"
    return f.read_text().split() if f.exists() else []


def test_a_reference_runs_once_per_input_set_and_size_across_runs(counted, monkeypatch, tmp_path):
    rng = np.random.default_rng(1)
    inputs = {"a": rng.standard_normal(100, dtype=np.float32), "b": rng.standard_normal(100, dtype=np.float32), "n": 100}
    monkeypatch.setenv(ENV, "off")
    t = load_template(counted)
    assert t.load_reference()(dict(inputs), {"n": 100})["c"].dtype == np.float32
    t.load_reference()(dict(inputs), {"n": 100})
    assert len(calls(counted)) == 2  # the cache off: computed every time
    monkeypatch.setenv(ENV, str(tmp_path / "lasting"))
    first = load_template(counted).load_reference()(dict(inputs), {"n": 100})
    again = load_template(counted).load_reference()(dict(inputs), {"n": 100})  # another worker, or run
    assert len(calls(counted)) == 3 and np.array_equal(first["c"], again["c"])
    other = dict(inputs, a=inputs["a"] + 1)
    load_template(counted).load_reference()(other, {"n": 100})
    load_template(counted).load_reference()(dict(inputs), {"n": 99})  # another size is another key
    assert len(calls(counted)) == 5
    # the reference's helpers beside it are part of the key: changed, the outputs are computed again
    (counted / "helpers.py").write_text("SCALE = 2\n")
    load_template(counted).load_reference()(dict(inputs), {"n": 100})
    assert len(calls(counted)) == 6


def test_with_the_cache_off_the_loop_keeps_a_folder_for_its_own_run(monkeypatch):
    monkeypatch.setenv(ENV, "off")
    with inputs_cache() as folder:
        assert os.environ[ENV] == str(folder) and folder.is_dir()
    assert os.environ[ENV] == "off" and not folder.exists()
    monkeypatch.delenv(ENV)
    with inputs_cache() as folder:  # by default the lasting folder, beside the compile cache's
        assert folder == Path(os.environ["KERNTUNE_CACHE_DIR"]) / "inputs"
    assert folder.is_dir()


def test_a_full_cache_makes_room_by_dropping_what_was_used_longest_ago(counted, monkeypatch, tmp_path):
    from kerntune.engine import inputs_cache as module

    monkeypatch.setenv(ENV, str(tmp_path / "c"))
    x = {"a": np.ones(64, np.float32), "b": np.ones(64, np.float32), "n": 64}
    ref = load_template(counted).load_reference()
    ref(dict(x), {"n": 64})
    folder = tmp_path / "c"
    monkeypatch.setattr(module, "LIMIT_BYTES", sum(module._on_disk(f.stat()) for f in folder.iterdir()) + 100)
    y = dict(x, a=np.full(64, 2, np.float32))
    assert ref(y, {"n": 64})["c"][0] == 3 and ref(y, {"n": 64})["c"][0] == 3
    assert len(list(folder.iterdir())) == 1 and len(calls(counted)) == 2  # y replaced x, and is read back
    ref(dict(x), {"n": 64})
    assert len(calls(counted)) == 3  # x: computed again
    monkeypatch.setattr(module, "LIMIT_BYTES", 10)  # larger than the whole cache: computed, not stored
    assert ref(dict(x, a=np.full(64, 5, np.float32)), {"n": 64})["c"][0] == 6
    assert len(list(folder.iterdir())) == 1


def test_cached_outputs_keep_their_dtype_bfloat16_included(counted, tmp_path):
    bf16 = np_dtype("bfloat16")
    made = []

    def reference(inputs, sizes):
        made.append(1)
        return {"y": (inputs["x"] * 2).astype(bf16), "s": np.float64(3.5)}

    x = {"x": np.arange(6, dtype=np.float32).reshape(2, 3)}
    with inputs_cache():
        a = cached_reference(reference, counted / "reference.py", "reference")(x, {"n": 6})
        b = cached_reference(reference, counted / "reference.py", "reference")(x, {"n": 6})
    assert len(made) == 1 and b["y"].dtype == bf16 and b["y"].shape == (2, 3)
    assert np.array_equal(a["y"].astype(np.float32), b["y"].astype(np.float32)) and float(b["s"]) == 3.5


def test_an_input_set_is_drawn_once_per_arguments_sizes_and_seed(counted, monkeypatch):
    from kerntune.engine.inputs import Inputs, make_inputs

    drawn = []

    def make(template, problem, seed):
        drawn.append(seed)
        return make_inputs(template, problem, seed)

    t = load_template(counted)
    small = t.problem(None, {"n": 1000})
    first = cached_inputs(make, t, small, 7, Inputs)
    again = cached_inputs(make, load_template(counted), small, 7, Inputs)  # another worker, or another run
    assert drawn == [7]
    assert set(again.host) == {"a", "b"} and all(np.array_equal(first.host[k], again.host[k]) for k in first.host)
    assert again.scalars["n"] == 1000 and again.scalars["n"].dtype == np.int32
    cached_inputs(make, t, small, 8, Inputs)
    cached_inputs(make, t, t.problem(None, {"n": 999}), 7, Inputs)
    assert drawn == [7, 8, 7]
    monkeypatch.setenv(ENV, "off")
    cached_inputs(make, t, small, 7, Inputs)  # the cache off: drawn every time
    assert drawn == [7, 8, 7, 7]


def test_the_agent_loop_never_computes_one_input_sets_reference_twice(counted, tmp_path):
    pytest.importorskip("pyopencl")
    from kerntune.agents.rules import RulesProvider
    from kerntune.engine.evaluate import TimingPolicy
    from kerntune.engine.loop import LoopOptions, TuningLoop
    from kerntune.engine.tune import TuneOptions

    spec = counted / "kernel.toml"
    text = spec.read_text()
    text = text[:text.index("[[param]]")] + text[text.index("[launch]"):]  # the original: no parameters
    spec.write_text(text.replace('constraints = [\n    "BLOCK % warp_size == 0",\n]\n', "")
                    .replace('grid = ["ceil_div(n, BLOCK * ITEMS)"]', 'grid = ["ceil_div(n, 256)"]')
                    .replace('block = ["BLOCK"]', "block = [256]")
                    .replace('name = "1M"\nn = 1048576', 'name = "small"\nn = 5000'))
    tune = TuneOptions(backend="opencl", seed=3, probe=False, session_path=tmp_path / "loop.toml",
                       timing=TimingPolicy(min_repeats=3, max_repeats=3))
    outcome = TuningLoop(load_template(spec), [RulesProvider()],
                         LoopOptions(tune=tune, rounds=2, budget=2, plateau=-1.0, sol_target=2.0)).run()
    assert len(outcome.rounds) == 2 and all(r.results for r in outcome.rounds)
    # the rounds' templates carry a copy of the reference, which writes beside itself
    made = [c for f in tmp_path.rglob("calls.txt") for c in f.read_text().split()]
    assert made and len(made) == len(set(made))  # the original's and each round's workers: once per input set


def test_a_cached_input_sets_outputs_are_found_by_its_name_without_reading_its_bytes(counted, opencl_backend,
                                                                                     monkeypatch):
    from kerntune.engine import inputs_cache as module
    from kerntune.engine.evaluate import Evaluator

    t = load_template(counted)
    problem = t.problem(None, {"n": 5000})
    first = Evaluator(opencl_backend, t, problem, seed=4)
    first.prepare()
    made = len(calls(counted))
    assert made > 0

    def no_hashing(*args):
        raise AssertionError("the inputs were hashed")

    monkeypatch.setattr(module, "_content_key", no_hashing)
    again = Evaluator(opencl_backend, load_template(counted), problem, seed=4)  # the next worker, or run
    again.prepare()
    assert len(calls(counted)) == made  # every output read back by the set's name
    for which in range(len(again.problems)):
        for a, b in zip(first.sets.pool(which).drawn(), again.sets.pool(which).drawn()):
            assert a.key == b.key and np.array_equal(a.expected["c"], b.expected["c"])


def test_a_half_precision_output_is_kept_as_the_checks_use_it_and_never_converted_again(opencl_backend, monkeypatch):
    from kerntune.engine import compare as compare_module
    from kerntune.engine.evaluate import Evaluator

    t = load_template(templates.path("fused_add_rmsnorm"))
    problem = t.problem(None, {"tokens": 3, "d": 256})
    first = Evaluator(opencl_backend, t, problem, seed=2)
    first.prepare()
    converted = []
    real = compare_module.Expected.__init__

    def counting(self, ref, dtype, arg, scale=1.0, values=None, **more):
        real(self, ref, dtype, arg, scale, values, **more)
        if values is None and not self.exact:
            converted.append(arg.name)

    monkeypatch.setattr(compare_module.Expected, "__init__", counting)
    again = Evaluator(opencl_backend, load_template(templates.path("fused_add_rmsnorm")), problem, seed=2)
    again.prepare()
    assert converted == []  # each output read back in its dtype and in the working precision
    for which in range(len(again.problems)):
        for a, b in zip(first.sets.pool(which).drawn(), again.sets.pool(which).drawn()):
            for name, check in b.checks.items():
                assert b.expected[name].dtype == np.float16 and check.values.dtype == np.float32
                assert np.array_equal(check.values, a.checks[name].values, equal_nan=True)
                assert np.array_equal(check.values, b.expected[name].astype(np.float32).ravel(), equal_nan=True)
    # the calibration's widening shares the values: nothing converted, the tolerance wider
    check = again.sets.pool(0).drawn()[0].checks["input"]
    wider = check.rescaled(next(a for a in t.arguments if a.name == "input"), 3.0)
    assert wider.values is check.values and wider.rtol == pytest.approx(3 * check.rtol) and converted == []


def test_the_cache_stays_under_its_cap_counting_blocks_and_files_being_written(monkeypatch, tmp_path):
    from kerntune.engine import inputs_cache as module

    folder = tmp_path / "c"
    folder.mkdir()
    monkeypatch.setattr(module, "LIMIT_BYTES", 64 * 1024)
    for k in range(6):  # 6 files of 4 KiB and a byte: two blocks each on disk, 48 KiB
        module._write(folder / f"old{k}{module.SUFFIX}", {"x": np.zeros(1025, np.float32)})
        os.utime(folder / f"old{k}{module.SUFFIX}", (1000 + k, 1000 + k))
    writing = folder / f"w{module.SUFFIX}.1.2.tmp"  # another worker's file, half written
    writing.write_bytes(b"\1" * 8192)
    module._write(folder / f"new{module.SUFFIX}", {"x": np.zeros(4096, np.float32)})  # 16 KiB and its header
    on_disk = sum(module._on_disk(f.stat()) for f in folder.iterdir())
    assert on_disk <= 64 * 1024
    left = sorted(f.name for f in folder.iterdir())
    assert left == [f"new{module.SUFFIX}", *(f"old{k}{module.SUFFIX}" for k in (2, 3, 4, 5)),
                    writing.name]  # the oldest went first; the file being written stays
