"""bfloat16: the _bf16 library variants' inputs, references and verification on the host (the
kernels themselves run on CUDA only; tests/test_gpu.py runs them there)."""

import numpy as np
import pytest

from kerntune import templates
from kerntune.engine.compare import TOLERANCE, Expected, compare
from kerntune.engine.inputs import make_inputs
from kerntune.engine.template import load_template, np_dtype

BF16 = np_dtype("bfloat16")


def _silu():
    t = load_template(templates.path("silu_and_mul_bf16"))
    problem = t.problem(None, {"tokens": 3, "d": 256})
    inputs = make_inputs(t, problem, seed=5)
    out = t.load_reference()(dict(inputs.host), dict(problem.values))["out"]
    arg = next(a for a in t.arguments if a.name == "out")
    return t, inputs, out, arg


def test_bfloat16_is_a_two_byte_float_type():
    assert BF16.itemsize == 2 and "bfloat16" in TOLERANCE
    assert np.isnan(np.frombuffer(b"\xff\xff", dtype=BF16)[0].astype(np.float32))  # the poison is NaN


def test_the_variants_draw_bfloat16_inputs_and_reference_outputs():
    t, inputs, out, _ = _silu()
    assert inputs.host["x"].dtype == BF16 and out.dtype == BF16 and out.shape == (3, 256)
    x = inputs.host["x"].astype(np.float32)
    g, u = x[:, :256], x[:, 256:]
    np.testing.assert_allclose(out.astype(np.float32), g / (1 + np.exp(-g)) * u, rtol=8e-3, atol=1e-6)

    r = load_template(templates.path("fused_add_rmsnorm_bf16"))
    problem = r.problem(None, {"tokens": 2, "d": 512})
    ins = make_inputs(r, problem, seed=3)
    ref = r.load_reference()({**ins.host, **ins.scalars}, dict(problem.values))
    assert ref["residual"].dtype == BF16 and ref["input"].dtype == BF16


def test_verification_allows_a_unit_in_the_last_place_and_no_more_than_two():
    _, _, out, arg = _silu()
    exp = Expected(out, "bfloat16", arg)
    assert compare("out", out.copy(), exp)[1] == ""
    # one unit in the last place up, everywhere: still the same result in bfloat16
    bits = out.view(np.uint16).copy()
    nudged = np.where(bits & 0x7F80 != 0x7F80, bits + 1, bits).astype(np.uint16).view(BF16)
    err, msg = compare("out", nudged, exp)
    assert msg == "" and 0 < err <= 1
    # 5% off is wrong, and says where
    wrong = (out.astype(np.float32) * 1.05).astype(BF16)
    err, msg = compare("out", wrong, exp)
    assert err > 1 and msg
    # the poison (all-ones bytes) is NaN: never a pass
    poison = np.full(out.shape, 0xFFFF, dtype=np.uint16).view(BF16)
    assert "NaN" in compare("out", poison, exp)[1]


@pytest.mark.parametrize("name", ["silu_and_mul_bf16", "fused_add_rmsnorm_bf16"])
def test_the_variants_are_library_templates(name):
    assert name in templates.names()
    t = load_template(templates.path(name))
    assert t.name == name and t.compile_options["cuda"] == ("-DKT_BF16",)
