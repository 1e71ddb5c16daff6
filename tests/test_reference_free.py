"""A kernel without a numpy reference: the default configuration's outputs on each input set are
its reference, and the sets drawn side by side in threads each get the outputs of their own inputs."""

import shutil

import numpy as np

from kerntune import templates
from kerntune.engine.evaluate import Evaluator, TimingPolicy, VerifyPolicy
from kerntune.engine.template import load_template

FAST = TimingPolicy(warmup=1, min_repeats=3, max_repeats=3, target_s=0.001)


def test_sets_drawn_in_threads_each_get_the_default_outputs_of_their_own_inputs(opencl_backend, tmp_path):
    d = tmp_path / "va"
    shutil.copytree(templates.path("vector_add").parent, d)
    (d / "kernel.toml").write_text((d / "kernel.toml").read_text().replace('reference = "reference.py"\n', ""))
    t = load_template(d)
    assert t.reference_path is None
    ev = Evaluator(opencl_backend, t, t.problem(None, {"n": 30000}), seed=7, timing=FAST,
                   verify=VerifyPolicy(seeds=4, pool=4))
    ev.prepare()  # the first sets of every size, drawn in threads
    drawn = [s for which in range(len(ev.problems)) for s in ev.sets.pool(which).drawn()]
    assert len(drawn) >= 8
    # the winner's check draws new sets of every size in threads too
    assert ev.verify_again(t.default_config(), (101, 102, 103)) == (True, "")
    fresh = [ev.sets.fresh(which, 200 + which) for which in range(len(ev.problems))]
    for inputs in drawn + fresh:
        assert np.array_equal(inputs.expected["c"], inputs.host["a"] + inputs.host["b"]), inputs.seed
