"""The compile processes: new interpreters that import only the compiler, answer in order, turn a
compiler's failure into that configuration's compile error, and outlive a crashed process."""

from __future__ import annotations

import sys

import pytest

from kerntune.engine.backends import CompileError
from kerntune.engine.backends.cuda_toolchain import find_nvcc, nvrtc_version
from kerntune.engine.compile_pool import CompilePool

SOURCE = 'extern "C" __global__ void scale(float *x) { x[threadIdx.x] *= (float)FACTOR; }\n'

pytestmark = pytest.mark.skipif(find_nvcc() is None and not nvrtc_version(), reason="needs NVRTC or nvcc")


class Template:  # the part of a Template the pool reads
    entry = "scale"
    compile_options = {"cuda": ()}

    @staticmethod
    def options_for(backend):
        return ()

    @staticmethod
    def source_for(backend):
        return SOURCE


def test_configurations_build_in_processes_and_a_bad_one_is_its_own_compile_error():
    pool = CompilePool(Template(), "sm_90", 2)
    try:
        pool.warm()
        good = [pool.submit({"FACTOR": k}) for k in (2, 3, 4)]
        bad = pool.submit({"FACTOR": "2 +"})
        assert all(f.result().binary and f.result().info["registers"] > 0 for f in good)
        with pytest.raises(CompileError, match="expected an expression|error"):
            bad.result()
        assert pool.submit({"FACTOR": 5}).result().binary  # the process that failed goes on
    finally:
        pool.close()


def test_a_process_that_dies_costs_nothing_but_a_new_process():
    pool = CompilePool(Template(), "sm_90", 1)
    try:
        pool.warm()
        (p,) = pool._started
        p.popen.kill()
        p.popen.wait()
        assert pool.submit({"FACTOR": 7}).result().binary  # built in a new process
        assert pool._started and pool._started[0] is not p
    finally:
        pool.close()
    with pytest.raises(CompileError, match="ended"):
        pool._take()


def test_the_processes_import_neither_numpy_nor_the_engines_modules():
    from kerntune.engine import children

    popen, conn = children.start("kerntune.engine.compile_child", "serve")
    try:
        conn.send(("build", "sys", "", {}, (), "sm_90"))  # an error answer: the loop is running
        kind, _ = conn.recv()
        assert kind in ("compile_error", "error")
    finally:
        conn.close()
        popen.wait(10)
    code = ("import sys; from kerntune.engine import compile_child, children; "
            "import kerntune.engine.backends.cuda_toolchain; "
            "print(sorted(m for m in ('numpy', 'kerntune.engine.template', 'kerntune.engine.space') if m in sys.modules))")
    import subprocess

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_processes_started_ahead_are_the_ones_the_pool_builds_in():
    from kerntune.engine import standby

    standby.stand_down()
    try:
        standby.standby("cuda", 0, compile_jobs=2, arch="sm_90")  # its spare worker may fail: no device here
        ahead = list(standby._compilers)
        assert len(ahead) == 2 and all(p.warmed == "sm_90" for p in ahead)
        pool = CompilePool(Template(), "sm_80", 3)
        try:
            pool.warm()
            assert pool._started[:2] == ahead and len(pool._started) == 3
            assert standby.standing()[1] == 0
            assert all(p.warmed == "sm_80" for p in pool._started)  # warmed again for the run's device
            assert all(f.result().binary for f in [pool.submit({"FACTOR": k}) for k in (2, 3, 4)])
        finally:
            pool.close()
    finally:
        standby.stand_down()
