"""Forms published code often takes, read by the passes as the plain ones are: a loop under
`#pragma unroll` (a hint to the compiler) as a tree or a sum writes it, and a sum updated by a fused
multiply-add (`acc = fmaf(a, b, acc)`). On PoCL (and on CUDA where a GPU is): the rewritten kernel
passes the gate and a tuned configuration gives the original's outputs."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from kerntune.agents.rules import rules_template
from kerntune.engine.device import DeviceLimits
from kerntune.engine.evaluate import Evaluator, TimingPolicy
from kerntune.engine.gate import check_proposal
from kerntune.engine.template import load_template

NAIVE = Path(__file__).resolve().parent / "data" / "naive"
CPU = DeviceLimits("opencl", "cpu", max_threads_per_block=4096, warp_size=1, sm_count=2, max_shared_per_block=65536)
FAST = TimingPolicy(warmup=1, min_repeats=3, max_repeats=3, target_s=0.002)

# kernel -> (the pass, a configuration of its template)
CASES = {"reduce_sequential": ("reduction", {"LANES": 16}),
         "matmul_naive": ("contraction", {"BK": 8, "BM": 16, "BN": 16, "TM": 2, "TN": 2})}


def unrolled(folder: Path, name: str) -> Path:
    """The naive kernel `name` with `#pragma unroll` before its first loop, in both dialects."""
    shutil.copytree(NAIVE / name, folder)
    for f in (folder / "kernel.cu", folder / "kernel.cl"):
        src = f.read_text()
        new = re.sub(r"(\n[ \t]*)(for \()", r"\1#pragma unroll\1\2", src, count=1)
        assert new != src
        f.write_text(new)
    return folder


# the contraction's reading through the pragma is also tests/test_contraction_wgmma.py's (no PoCL)
@pytest.mark.parametrize("name", ["reduce_sequential", pytest.param("matmul_naive", marks=pytest.mark.slow)])
def test_a_loop_under_a_pragma_is_rewritten_gated_and_reproduced_on_pocl(name, tmp_path, opencl_backend):
    rewrite, config = CASES[name]
    original = load_template(unrolled(tmp_path / "spec", name))
    for backend in ("cuda", "opencl"):
        made = rules_template(original, backend, CPU if backend == "opencl" else
                              DeviceLimits("cuda", "gpu", max_threads_per_block=1024, warp_size=32, sm_count=132))
        assert [r.name for r in made.applied.rewrites] == [rewrite], made.why_none()
    made = rules_template(original, "opencl", CPU)
    verdict = check_proposal(original, made.proposal, tmp_path / "tpl", backend="opencl", device=0,
                             problem=original.problem("small", {}), limits=CPU, timeout=120)
    assert verdict.ok, verdict.reason
    template = verdict.template
    ev = Evaluator(opencl_backend, template, template.problem("small", {}), seed=1, timing=FAST)
    ok, _, message = ev.reproduces_original({**template.default_config(), **config}, (3, 4))
    assert ok, message


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(CASES) + ["fused"])
def test_on_cuda_a_loop_under_a_pragma_is_rewritten_gated_and_reproduced(name, tmp_path):
    from kerntune.engine.backends import open_backend
    from kerntune.engine.tune import resolve_device

    rewrite, config = CASES["matmul_naive" if name == "fused" else name]
    _, limits = resolve_device("cuda", 0)
    original = load_template(fused(tmp_path / "spec") if name == "fused" else unrolled(tmp_path / "spec", name))
    made = rules_template(original, "cuda", limits)
    assert [r.name for r in made.applied.rewrites] == [rewrite], made.why_none()
    verdict = check_proposal(original, made.proposal, tmp_path / "tpl", backend="cuda", device=0,
                             problem=original.problem("small", {}), limits=limits, timeout=300)
    assert verdict.ok, verdict.reason
    backend = open_backend("cuda", 0)
    try:
        ev = Evaluator(backend, verdict.template, verdict.template.problem("small", {}), seed=1, timing=FAST)
        ok, _, message = ev.reproduces_original({**verdict.template.default_config(), **config}, (3, 4))
        assert ok, message
    finally:
        backend.close()


def fused(folder: Path) -> Path:
    """matmul_naive with its sum updated by a fused multiply-add, in both dialects."""
    shutil.copytree(NAIVE / "matmul_naive", folder)
    for f, fn in ((folder / "kernel.cu", "fmaf"), (folder / "kernel.cl", "fma")):
        src = f.read_text()
        new = re.sub(r"(\w+) \+= (\w+\[[^\]]*\]) \* (\w+\[[^\]]*\]);", rf"\1 = {fn}(\2, \3, \1);", src, count=1)
        assert new != src and f"= {fn}(" in new
        f.write_text(new)
    return folder


def test_a_sum_updated_by_a_fused_multiply_add_is_a_contraction_gated_and_reproduced_on_pocl(tmp_path, opencl_backend):
    original = load_template(fused(tmp_path / "spec"))
    cuda = rules_template(original, "cuda", DeviceLimits("cuda", "gpu", max_threads_per_block=1024, warp_size=32,
                                                          sm_count=132))
    assert [r.name for r in cuda.applied.rewrites] == ["contraction"], cuda.why_none()
    made = rules_template(original, "opencl", CPU)
    assert [r.name for r in made.applied.rewrites] == ["contraction"], made.why_none()
    verdict = check_proposal(original, made.proposal, tmp_path / "tpl", backend="opencl", device=0,
                             problem=original.problem("small", {}), limits=CPU, timeout=120)
    assert verdict.ok, verdict.reason
    ev = Evaluator(opencl_backend, verdict.template, verdict.template.problem("small", {}), seed=1, timing=FAST)
    ok, _, message = ev.reproduces_original({**verdict.template.default_config(), **CASES["matmul_naive"][1]}, (3, 4))
    assert ok, message
