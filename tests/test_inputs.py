"""Inputs described in the spec: ranges over the problem sizes, positive inputs, and a reference
that turns finite inputs into NaN stopping the run in one line."""

import shutil

import numpy as np
import pytest

from kerntune import templates
from kerntune.engine.inputs import make_inputs
from kerntune.engine.template import TemplateError, load_template

from test_cli import QUICK, kerntune


def _vector_add(tmp_path, arg_extra: str, reference: str | None = None):
    d = tmp_path / "va"
    shutil.copytree(templates.path("vector_add").parent, d)
    spec = (d / "kernel.toml").read_text()
    spec = spec.replace('name = "a"\n', f'name = "a"\n{arg_extra}\n', 1)
    (d / "kernel.toml").write_text(spec)
    if reference is not None:
        (d / "reference.py").write_text(reference)
    return d


def test_a_range_may_name_the_problem_sizes(tmp_path):
    t = load_template(_vector_add(tmp_path, 'init = "uniform"\nrange = ["n / 2", "n"]'))
    a = make_inputs(t, t.problem(None, {"n": 1000}), 1).host["a"]
    assert a.min() >= 500 and a.max() < 1000


def test_positive_inputs_are_above_zero(tmp_path):
    t = load_template(_vector_add(tmp_path, 'init = "positive"'))
    a = make_inputs(t, t.problem(None, {"n": 5000}), 1).host["a"]
    assert (a > 0).all()
    with pytest.raises(TemplateError, match="above zero"):
        load_template(_vector_add(tmp_path / "x", 'init = "positive"\nrange = [-1, 1]'))


def test_a_reference_with_nan_from_finite_inputs_stops_in_one_line(tmp_path):
    ref = "import numpy as np\ndef reference(inputs, sizes):\n    return {'c': np.sqrt(inputs['a']) + inputs['b']}\n"
    d = _vector_add(tmp_path, "", reference=ref)
    r = kerntune("tune", str(d), "--session", str(tmp_path / "s.toml"), "--shape", "n=4000", *QUICK)
    assert r.returncode != 0
    err = r.stderr.strip()
    assert err.count("\n") == 0 and "non-finite values of `c`" in err and "nonfinite = true" in err
    assert np.sqrt(np.float32(-1)) != np.sqrt(np.float32(-1))  # numpy's NaN, as the reference made


def test_sets_drawn_ahead_are_waited_for_when_a_configuration_needs_them_and_drawn_once(opencl_backend):
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    from kerntune.engine.evaluate import Evaluator
    from kerntune.engine.inputs import InputPool

    t = load_template(templates.path("vector_add"))
    ev = Evaluator(opencl_backend, t, t.problem(None, {"n": 1000}), seed=3)
    hold = threading.Event()
    drawn: list[int] = []

    def draw(i):
        if i >= 2:
            hold.wait(30)  # a slow reference
        drawn.append(i)
        return ev.sets.with_reference(make_inputs(t, ev.problems[0], 100 + i), 0)

    pool = ev.sets.pools[0] = InputPool(draw, 4)
    first = pool[:2]
    with ThreadPoolExecutor(2) as threads:
        pool.draw_ahead(threads.submit)
        assert not pool.ready(2) and not pool.ready(3) and pool.ready(0)
        threading.Timer(0.3, hold.set).start()
        ev.sets.next = 2  # the next configuration's turn: sets 2 and 3, still being drawn
        t0 = time.perf_counter()
        turn = ev.sets.rotating(0, ev.verify_policy.seeds)
        assert time.perf_counter() - t0 >= 0.2  # waited for, never the last configuration's again
        assert [x.seed for x in turn] == [102, 103] and not set(map(id, turn)) & set(map(id, first))
    assert sorted(drawn) == [0, 1, 2, 3]  # each set drawn once
