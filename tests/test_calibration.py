"""The tolerance is calibrated on the original kernel: a user's kernel that misses the dtype's
default (fast-math, another order of summation) passes, no candidate may err more than twice as
much, and a reference that disagrees with the original stops the run in one line."""

import shutil

from kerntune.engine.session import load_session

from cheats import CHEATS
from test_cli import QUICK, kerntune

KERNEL = """
#ifndef MODE
#define MODE 0
#endif
#ifndef THREADS
#define THREADS 64
#endif
__kernel void cheats(__global float *a, __global float *c, int n)
{
    const int i = get_group_id(0) * THREADS + get_local_id(0);
    if (i >= n) return;
    // MODE 0, the default and the original: 3e-5 off, three times float32's default tolerance
    // (an approximate exp would do the same); MODE 1: 1e-3 off, wrong by any measure
    c[i] = 2.0f * a[i] * (MODE == 0 ? 1.00003f : 1.001f);
}
"""


def _spec(tmp_path, reference="2 * inputs[\"a\"]"):
    d = tmp_path / "approx"
    shutil.copytree(CHEATS, d)
    (d / "kernel.cl").write_text(KERNEL)
    spec = (d / "kernel.toml").read_text()
    spec = spec.replace("values = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]", "values = [0, 1]")
    spec = spec.replace('sources = { opencl = "kernel.cl", cuda = "kernel.cu" }', 'sources = { opencl = "kernel.cl" }')
    (d / "kernel.toml").write_text(spec)
    (d / "reference.py").write_text(f"def reference(inputs, sizes):\n    return {{\"c\": {reference}}}\n")
    return d


def test_the_original_s_own_error_sets_the_tolerance(tmp_path):
    session = tmp_path / "s.toml"
    r = kerntune("tune", str(_spec(tmp_path)), "--session", str(session), *QUICK)
    assert r.returncode == 0, r.stderr
    s = load_session(session)
    status = {x.config["MODE"]: x.status for x in s.results() if x.config.get("THREADS") == 64}
    assert status == {0: "ok", 1: "wrong_result"}
    (line,) = s.summary()["calibration"]
    assert "tolerance of `c`" in line and "widened" in line
    assert "tolerance of `c`" in kerntune("show", str(session)).stdout


def test_a_reference_that_disagrees_with_the_original_stops_in_one_line(tmp_path):
    d = _spec(tmp_path, reference='3 * inputs["a"]')
    r = kerntune("tune", str(d), "--session", str(tmp_path / "s.toml"), *QUICK)
    assert r.returncode != 0
    err = r.stderr.strip()
    assert err.count("\n") == 0 and "disagrees with the reference" in err and "c:" in err
