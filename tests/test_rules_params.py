"""Parameters that cannot be wrong by construction: a lifted block leaves alone a shape that counts
blocks, a 2-D block's range holds 1, and a parameter none of whose other values verifies is said."""

import shutil
from pathlib import Path
from types import SimpleNamespace

from kerntune.agents.analysis import never_verified
from kerntune.agents.lift import _dim_values
from kerntune.agents.rules import rules_template
from kerntune.engine.device import DeviceLimits
from kerntune.engine.result import Result
from kerntune.engine.template import Parameter, load_template

DATA = Path(__file__).resolve().parent / "data" / "dynshared"
GPU = DeviceLimits("cuda", "gpu", max_threads_per_block=1024, warp_size=32, sm_count=132)


def test_a_block_is_not_lifted_where_an_output_counts_blocks(tmp_path):
    d = tmp_path / "partial"
    shutil.copytree(DATA, d)
    spec = d / "kernel.toml"
    # a partial sum a block: the output's size holds the block's 256
    spec.write_text(spec.read_text().replace('grid = ["N"]', 'grid = ["ceil_div(N * C, 256)"]')
                    .replace('shape = ["N"]', 'shape = ["ceil_div(N * C, 256)"]'))
    made = rules_template(load_template(spec), "cuda", GPU)
    names = [p.name for p in made.proposal.parameters] if made.proposal is not None else []
    assert "BLOCK" not in names
    assert any("the shape of `out` holds the block's 256" in n for n in made.lifted.notes), made.lifted.notes


def test_a_dimension_of_a_two_dimensional_block_may_be_one_thread():
    assert _dim_values(32, GPU)[0] == 1 and 4 in _dim_values(32, GPU) and 256 in _dim_values(32, GPU)


def test_a_parameter_none_of_whose_other_values_verifies_is_said():
    template = SimpleNamespace(parameters=(Parameter("BLOCK", (64, 128, 256), 256), Parameter("VEC", (1, 2), 1)))
    state = SimpleNamespace(template=template)
    results = [Result({"BLOCK": 256, "VEC": 1}, "ok", median_us=1.0),
               Result({"BLOCK": 64, "VEC": 1}, "wrong_result", "out: 3 of 10 wrong"),
               Result({"BLOCK": 128, "VEC": 2}, "wrong_result", "out: 3 of 10 wrong"),
               Result({"BLOCK": 256, "VEC": 2}, "ok", median_us=0.9)]
    lines = never_verified(state, results)
    assert len(lines) == 1 and lines[0].startswith("BLOCK: none of its values but the default 256 verified")
    assert "64, 128" in lines[0]
