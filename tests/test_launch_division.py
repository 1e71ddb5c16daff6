"""`/` in a launch expression is exact division; where a C launcher's integer division was meant,
the run says so in one line instead of a list of fractions."""

from __future__ import annotations

import shutil

import pytest

from kerntune import templates
from kerntune.engine.device import DeviceLimits
from kerntune.engine.expressions import ExpressionError
from kerntune.engine.space import build_space, geometry
from kerntune.engine.template import load_template


def grid_of(tmp_path, grid: str):
    d = tmp_path / grid.replace("/", "d").replace(" ", "").replace("*", "x")
    shutil.copytree(templates.path("vector_add").parent, d)
    spec = d / "kernel.toml"
    spec.write_text(spec.read_text().replace('grid = ["ceil_div(n, BLOCK * ITEMS)"]', f'grid = ["{grid}"]'))
    return load_template(spec)


def test_a_fractional_grid_from_slash_names_integer_division_and_ceil_div(tmp_path):
    t = grid_of(tmp_path, "n / (BLOCK * ITEMS)")
    problem = t.problem(None, {"n": 1000})
    with pytest.raises(ExpressionError) as e:
        geometry(t, t.default_config(), problem)
    assert "`/` is exact division here; C's integer division is `//`" in str(e.value)
    space = build_space(t, problem, DeviceLimits(backend="opencl", name="cpu", max_threads_per_block=1024,
                                                  warp_size=1))
    assert space.feasible == 0 and len(space.pruned) == 1  # one rule, not one line per fraction
    # whole results stay exact; `//` is the C launcher's integer division
    assert geometry(t, t.default_config(), t.problem(None, {"n": 1024})).grid == (4, 1, 1)
    floor = grid_of(tmp_path, "n // (BLOCK * ITEMS)")
    assert geometry(floor, floor.default_config(), floor.problem(None, {"n": 1000})).grid == (3, 1, 1)
