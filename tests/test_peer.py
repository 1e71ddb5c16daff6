"""bench/peer.py gives Kernel Tuner kerntune's template as it is: the same space, launch geometry,
arguments and verification. Kernel Tuner's own code (its search space and its grid arithmetic)
reads the mapping here; nothing is tuned."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("kernel_tuner")  # the `bench` extra; CI installs `.[opencl,dev]` only

from kernel_tuner import util as kt_util  # noqa: E402
from kernel_tuner.searchspace import Searchspace  # noqa: E402

from kerntune import templates  # noqa: E402
from kerntune.engine.device import DeviceLimits  # noqa: E402
from kerntune.engine.evaluate import Evaluator, launch_geometry  # noqa: E402
from kerntune.engine.space import build_space  # noqa: E402
from kerntune.engine.template import load_template  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def _peer():
    spec = importlib.util.spec_from_file_location("kerntune_bench_peer", ROOT / "bench" / "peer.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


peer = _peer()
H200 = DeviceLimits(backend="cuda", name="an H200's limits", max_threads_per_block=1024,
                    max_shared_per_block_optin=227 * 1024, sm_count=132)


def _job(name: str, tokens: int = 5, limits: DeviceLimits = H200, allowed=None):
    t = load_template(templates.path(name))
    problem = t.problem("llama7b-t128", {"tokens": tokens})
    space = build_space(t, problem, limits)
    inputs = peer.reference_inputs(t, problem, seed=3)
    job = peer.kernel_tuner_job(t, problem, space, "cuda", limits, inputs, lang="CuPy", allowed=allowed)
    return t, problem, space, inputs, job


def _kt_space(job, limits: DeviceLimits) -> list[dict]:
    ss = Searchspace(job.tune_params, job.restrictions, limits.max_threads_per_block,
                     block_size_names=job.block_size_names)
    return [dict(zip(job.tune_params, values)) for values in ss.list]


def test_kernel_tuner_searches_exactly_kerntunes_feasible_space():
    _, _, space, _, job = _job("silu_and_mul")
    kt = _kt_space(job, H200)
    assert len(kt) == space.feasible == 800
    assert {peer.config_key(job.to_kerntune(p)) for p in kt} == {c.key for c in space.configs}


def test_a_capped_space_is_the_same_configurations_for_both_tools():
    t, _, space, _, _ = _job("silu_and_mul")
    chosen = peer.capped(space, t, 25)
    assert len(chosen) == 25 and peer.Config.of(t.default_config()) in chosen
    _, _, _, _, job = _job("silu_and_mul", allowed={c.key for c in chosen})
    assert {peer.config_key(job.to_kerntune(p)) for p in _kt_space(job, H200)} == {c.key for c in chosen}


def test_kernel_tuners_grid_and_block_are_kerntunes_launch_geometry():
    t, problem, space, _, job = _job("silu_and_mul", tokens=7)
    div = job.kwargs()
    grid_div = (div["grid_div_x"], div["grid_div_y"], div["grid_div_z"])
    names = list(job.block_size_names)
    kt_util.append_default_block_size_names(names)
    splits = set()
    for c in space.configs:
        params = c.as_dict()
        threads, grid = kt_util.setup_block_and_grid(job.problem_size, grid_div, params, names)
        geo = launch_geometry(t, params, problem, H200)
        assert (tuple(threads), tuple(grid)) == (geo.block, geo.grid), c
        splits.add(params["SPLIT"])
    assert splits == {0, 1}  # both launch shapes (1-D over rows, 2-D over row chunks) were checked


def test_a_computed_block_size_becomes_a_parameter_tied_to_its_expression():
    t = load_template(templates.path("matmul"))
    # the tile sizes narrowed to two values each: the rest of the space as the library has it
    narrow = {"BM": (32, 64), "BN": (32, 64), "BK": (16, 32)}
    t = replace(t, parameters=tuple(replace(p, values=narrow.get(p.name, p.values)) for p in t.parameters))
    problem = t.problem(None, {"M": 256, "N": 256, "K": 64})
    space = build_space(t, problem, H200)
    few = space.configs[:: max(1, space.feasible // 40)]
    assert len({launch_geometry(t, c.as_dict(), problem, H200).block for c in few}) > 1
    inputs = peer.reference_inputs(t, problem, seed=1)
    job = peer.kernel_tuner_job(t, problem, space, "cuda", H200, inputs, lang="CuPy", allowed={c.key for c in few})
    assert job.block_size_names[0] == "KT_BLOCK_X"
    kt = _kt_space(job, H200)
    assert {peer.config_key(job.to_kerntune(p)) for p in kt} == {c.key for c in few}
    for p in kt:
        assert p["KT_BLOCK_X"] == launch_geometry(t, job.to_kerntune(p), problem, H200).block[0]
    assert job.smem_args is not None  # matmul's dynamic shared memory, per configuration
    c = few[0].as_dict()
    assert job.smem_args["size"](c) == launch_geometry(t, c, problem, H200).shared_bytes


def test_opencl_dynamic_local_memory_is_a_trailing_argument_as_large_as_any_configuration_asks():
    t = load_template(templates.path("fused_add_rmsnorm"))
    problem = t.problem(None, {"tokens": 3})
    space = build_space(t, problem, H200)
    inputs = peer.reference_inputs(t, problem, seed=1)
    job = peer.kernel_tuner_job(t, problem, space, "opencl", H200, inputs, lang="OpenCL",
                                local_memory=lambda n: ("local", n))
    assert job.arguments[-1] == ("local", 4096 * 4) and job.answer[-1] is None
    assert len(job.arguments) == len(t.arguments) + 1 and job.smem_args is None
    assert [a.name for a in t.arguments if a.is_output] == ["input", "residual"]
    assert [i for i, a in enumerate(job.answer) if a is not None] == [0, 1]


def test_arguments_are_kerntunes_inputs_in_the_kernels_order_and_answer_its_reference():
    t, problem, _, inputs, job = _job("silu_and_mul")
    assert [type(a) for a in job.arguments][2:] == [np.int32, np.int32]
    out, x, tokens, d = job.arguments
    assert (tokens, d) == (5, 11008)
    assert np.array_equal(x, inputs.host["x"]) and x.dtype == np.float16
    assert out.shape == (5, 11008) and np.isnan(out).all()  # unwritten elements fail
    assert job.answer[1:] == [None, None, None]
    assert np.array_equal(job.answer[0], t.load_reference()({"x": x}, dict(problem.values))["out"])


def test_the_input_set_is_the_one_kerntunes_evaluator_verifies_with_first(opencl_backend):
    t = load_template(templates.path("silu_and_mul"))
    problem = t.problem("llama7b-t128", {"tokens": 3})
    ours = peer.reference_inputs(t, problem, seed=11)
    theirs = Evaluator(opencl_backend, t, problem, seed=11).sets.pool(0)[0]
    assert np.array_equal(ours.host["x"], theirs.host["x"])
    assert np.array_equal(ours.expected["out"], theirs.expected["out"])


def test_verification_uses_kerntunes_tolerance_and_fails_wrong_or_unwritten_outputs():
    _, _, _, _, job = _job("silu_and_mul")
    answer = job.answer
    good = [a.copy() if isinstance(a, np.ndarray) else a for a in job.arguments]
    good[0] = answer[0].copy()
    assert job.verify(answer, good)
    close = [*good]
    close[0] = (answer[0].astype(np.float32) * 1.005).astype(np.float16)  # inside float16's 1%
    assert job.verify(answer, close)
    wrong = [*good]
    wrong[0] = answer[0].copy()
    wrong[0][2, 100] += np.float16(1.0)
    assert not job.verify(answer, wrong)
    assert not job.verify(answer, job.arguments)  # still the NaN it started with


def test_bfloat16_buffers_travel_as_their_bits_and_are_compared_as_bfloat16():
    _, _, _, inputs, job = _job("silu_and_mul_bf16")
    out, x = job.arguments[:2]
    assert x.dtype == np.uint16 and np.array_equal(x, inputs.host["x"].view(np.uint16))
    result = [job.answer[0].copy(), x, *job.arguments[2:]]
    assert job.verify(job.answer, result)
    result[0] = result[0] ^ np.uint16(0x4000)  # flip an exponent bit everywhere
    assert not job.verify(job.answer, result)


def test_the_3_percent_set_is_judged_by_the_common_timer_over_configurations_near_either_tools_best():
    E, C = peer.Evaluation, peer.Config.of
    a, b, c, d, e = (C({"X": i}) for i in range(5))
    ours = peer.Run("kerntune", "grid", 1, 9.0, [E(a.key, 1.0, 10.0), E(b.key, 2.0, 10.9), E(c.key, 3.0, 12.0),
                                                 E(d.key, 4.0, None), E(e.key, 4.5, 14.0)], {"X": 0}, 10.0)
    # Kernel Tuner's timer counts launch overhead: its own best (e, 20.0) is what brings e in
    theirs = peer.Run("Kernel Tuner", "brute_force", 1, 50.0, [E(e.key, 1.0, 20.0), E(a.key, 2.0, 30.0),
                                                                E(c.key, 3.0, 21.5)], {"X": 4}, 20.0)
    near = peer.candidates([ours, theirs], {x.key: x for x in (a, b, c, d, e)})
    assert near == [a, e, c, b]  # within 10% of either run's own best (c: of theirs), nearest first
    # the common timer decides: 3% of its fastest, a failed re-check never counts
    assert peer.good_set([(a, 7.2), (e, 7.0), (b, 7.3), (c, float("inf"))]) == {a.key, e.key}


def test_time_to_within_3_percent_is_the_first_evaluation_of_a_configuration_in_the_set():
    E = peer.Evaluation
    search = peer.Run("Kernel Tuner", "genetic_algorithm", 1, 5.0,
                      [E("c", 0.5, 10.2), E("c", 0.7, 10.2), E("d", 1.1, None), E("b", 2.5, 10.9)], None, None)
    # its own time for c does not count; a revisited configuration counts once
    assert search.reaching({"a", "b"}) == (2.5, 3)
    assert search.reaching({"x"}) is None
