"""The evaluation protocol on a real OpenCL device (PoCL on the CPU)."""

import math

import numpy as np
import pytest

from kerntune import templates
from kerntune.engine.compare import Expected, compare
from kerntune.engine.evaluate import Evaluator, TimingPolicy, VerifyPolicy
from kerntune.engine.space import Config, compiler_defines
from kerntune.engine.template import Argument, load_template

FAST = TimingPolicy(warmup=1, min_repeats=5, max_repeats=10, target_s=0.005)


def test_vector_add_default_config_verifies_and_times(opencl_backend):
    t = load_template(templates.path("vector_add"))
    ev = Evaluator(opencl_backend, t, t.problem(None, {"n": 50000}), seed=3, timing=FAST)
    r = ev.evaluate(t.default_config())
    assert r.status == "ok", r.message
    assert len(r.times_us) >= 5 and all(x > 0 for x in r.times_us)
    assert r.median_us == pytest.approx(float(np.median(r.times_us)))
    assert r.max_error == 0.0
    assert len(r.seeds) == 2 * 2  # two seeds at the tuning size and at the odd verification size
    assert r.compile_s > 0 and r.verify_s > 0 and r.time_s > 0


def test_silu_and_mul_configs_verify_against_numpy(opencl_backend):
    t = load_template(templates.path("silu_and_mul"))
    ev = Evaluator(opencl_backend, t, t.problem(None, {"tokens": 5, "d": 1024}), seed=1, timing=FAST)
    for config in ({"BLOCK": 128, "VEC": 8, "ROWS": 2, "UNROLL": 2, "FAST_EXP": 1, "STREAM": 1, "SPLIT": 0},
                   {"BLOCK": 64, "VEC": 1, "ROWS": 4, "UNROLL": 1, "FAST_EXP": 0, "STREAM": 0, "SPLIT": 0}):
        r = ev.evaluate(config)
        assert r.status == "ok", r.message
        assert 0 < r.max_error <= 1.0


def test_without_a_reference_the_default_configs_output_is_the_reference(opencl_backend, tmp_path):
    import shutil

    d = tmp_path / "va"
    shutil.copytree(templates.path("vector_add").parent, d)
    spec = (d / "kernel.toml").read_text().replace('reference = "reference.py"\n', "")
    (d / "kernel.toml").write_text(spec)
    t = load_template(d)
    assert t.reference_path is None
    ev = Evaluator(opencl_backend, t, t.problem(None, {"n": 3000}), timing=FAST)
    assert ev.evaluate({"BLOCK": 64, "ITEMS": 4}).status == "ok"


def test_each_configuration_sees_different_inputs(opencl_backend):
    t = load_template(templates.path("vector_add"))
    ev = Evaluator(opencl_backend, t, t.problem(None, {"n": 1000}), seed=5, timing=FAST,
                   verify=VerifyPolicy(seeds=2, pool=4))
    a = ev.evaluate({"BLOCK": 64, "ITEMS": 1})
    b = ev.evaluate({"BLOCK": 64, "ITEMS": 2})
    assert set(a.seeds[:2]).isdisjoint(b.seeds[:2])
    for inputs in ev.sets.pool(0):
        assert np.count_nonzero(inputs.host["a"]) == inputs.host["a"].size  # never zeros


@pytest.mark.parametrize(
    "mode, status, words",
    [
        (0, "ok", ""),
        (1, "compile_error", "undeclared identifier"),
        (2, "wrong_result", "2048 of 4096 elements were never written"),
        (3, "wrong_result", "1 of 4096 elements are NaN"),
    ],
)
def test_hostile_configs_end_with_the_right_status(opencl_backend, hostile_dir, mode, status, words):
    t = load_template(hostile_dir)
    ev = Evaluator(opencl_backend, t, t.problem(), timing=FAST)
    r = ev.evaluate({"MODE": mode, "THREADS": 64})
    assert r.status == status
    assert words in r.message


def check(out, ref, dtype):
    return compare("out", out, Expected(ref, dtype, Argument("out", dtype, "output")))


def test_compare_tolerates_rounding_but_not_errors():
    ref = np.linspace(-3, 3, 1000).astype(np.float32)
    assert check(ref * (1 + 3e-6), ref, "float32")[0] <= 1.0
    worst, msg = check(ref * (1 + 1e-3), ref, "float32")
    assert worst > 1.0 and "outside tolerance" in msg
    h = ref.astype(np.float16)
    assert check(h, h, "float16") == (0.0, "")


def test_compare_fails_nan_and_inf_where_the_reference_has_none():
    ref = np.ones(10, dtype=np.float32)
    out = ref.copy()
    out[3] = np.nan
    assert check(out, ref, "float32")[0] == math.inf
    out[3] = np.inf
    assert "Inf" in check(out, ref, "float32")[1]
    ref2 = ref.copy()
    ref2[3] = np.inf
    assert check(out, ref2, "float32")[1] == ""


def test_compare_requires_integers_to_match_exactly():
    ref = np.arange(10, dtype=np.int32)
    out = ref.copy()
    out[9] = 0
    worst, msg = check(out, ref, "int32")
    assert worst == math.inf and "1 of 10 elements differ" in msg


def test_a_configuration_becomes_the_same_compiler_defines_wherever_it_is_built():
    values = {"BLOCK": 128, "FAST_EXP": True, "STREAM": False, "SCALE": 0.5}
    expected = {"BLOCK": "128", "FAST_EXP": "1", "STREAM": "0", "SCALE": "0.5"}
    assert compiler_defines(values) == expected
    assert Config.of(values).defines() == expected


def test_the_median_is_known_from_order_statistics_not_from_a_fixed_count():
    from kerntune.engine.evaluate import median_known

    rng = np.random.default_rng(3)
    steady = list(7.0 * (1 + 0.002 * rng.standard_normal(25)))
    noisy = list(7.0 * (1 + 0.3 * rng.standard_normal(200)))
    assert median_known(steady, 0.01)
    assert not median_known(noisy, 0.01)
    assert not median_known(steady[:7], 0.5)  # too few to say anything
    assert median_known([5.0] * 30 + [500.0] * 2, 0.01)  # a few outliers do not move a median


def test_timing_stops_once_the_median_is_known_and_never_passes_the_cap(opencl_backend):
    t = load_template(templates.path("vector_add"))
    problem = t.problem(None, {"n": 1 << 12})
    loose = TimingPolicy(min_repeats=4, max_repeats=60, target_s=10.0, batch=8, precision=0.5)
    ev = Evaluator(opencl_backend, t, problem, seed=1, timing=loose)
    r = ev.evaluate(t.default_config())
    assert r.status == "ok" and 8 <= len(r.times_us) < 60
    fixed = Evaluator(opencl_backend, t, problem, seed=1, timing=TimingPolicy(
        min_repeats=4, max_repeats=30, target_s=10.0, batch=8, precision=0.0))
    assert len(fixed.evaluate(t.default_config()).times_us) == 30


@pytest.mark.parametrize("dtype,ctype", [("int8", "char"), ("uint8", "uchar"), ("int16", "short"), ("uint64", "ulong")])
def test_integer_outputs_of_every_width_tune(opencl_backend, tmp_path, dtype, ctype):
    """The integer poison is its byte repeated: it fits every width."""
    from kerntune.engine.evaluate import Evaluator, TimingPolicy
    from kerntune.engine.template import load_template

    (tmp_path / "kernel.cl").write_text(
        f"__kernel void twice(__global const {ctype} *a, __global {ctype} *c, int n)"
        f"{{ int i = get_group_id(0) * T + get_local_id(0); if (i < n) c[i] = a[i] * 2; }}")
    (tmp_path / "reference.py").write_text('def reference(inputs, sizes):\n    return {"c": inputs["a"] * 2}\n')
    args = "".join(f'[[arg]]\nname = "{n}"\ndtype = "{dtype}"\nrole = "{r}"\nshape = ["n"]\nrange = [0, 60]\n\n'
                   for n, r in (("a", "input"), ("c", "output"))).replace('range = [0, 60]\n\n[[arg]]\nname = "c"', '\n[[arg]]\nname = "c"')
    (tmp_path / "kernel.toml").write_text(
        '[kernel]\nname = "twice"\nentry = "twice"\nsources = { opencl = "kernel.cl" }\nreference = "reference.py"\n'
        '[[param]]\nname = "T"\nvalues = [32, 64]\ndefault = 64\n[launch]\ngrid = ["ceil_div(n, T)"]\nblock = ["T"]\n'
        + args + '[[arg]]\nname = "n"\ndtype = "int32"\nrole = "scalar"\nvalue = "n"\n'
        '[[problem]]\nname = "s"\nn = 1000\n[cost]\nbytes = "2 * n"\n')
    t = load_template(tmp_path)
    ev = Evaluator(opencl_backend, t, t.problem(), timing=TimingPolicy(warmup=1, min_repeats=3, max_repeats=3))
    ev.prepare()
    ev.calibrate()
    assert ev.evaluate({"T": 32}).status == "ok"


def test_a_checked_run_at_the_tuning_size_makes_the_next_timed_launch_copy_its_whole_set(opencl_backend):
    t = load_template(templates.path("vector_add"))
    ev = Evaluator(opencl_backend, t, t.problem(None, {"n": 4096}), seed=5, timing=FAST)
    kernel = ev.compile(t.default_config())
    geo = ev.checks.geometry(t.default_config(), ev.problem)
    ev.checks.arm()
    ev.timer.launches(kernel, geo, 2, ())
    staged = ev.buffers.staged
    assert staged[0] is not None and staged[1]  # a set of the pool with a change made in place
    other = ev.checks.geometry(t.default_config(), ev.problems[1])
    ev.checks.run(kernel, other, ev.sets.pool(1)[0], 1)  # another size's buffers: the staged set stays
    assert ev.buffers.staged is staged
    ev.checks.run(kernel, geo, ev.sets.pool(0)[0], 0)  # the tuning size's inputs restored: no set staged
    assert ev.buffers.staged == (None, {})
