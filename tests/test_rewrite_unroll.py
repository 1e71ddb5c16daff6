"""UNROLL: a block-per-row kernel's loops that step by the block's threads, unrolled by a pragma;
the results stay those of the original, and the rewrite keeps out of what it cannot prove."""

from __future__ import annotations

from pathlib import Path

import pytest

from kerntune.agents.kernel_tree import classify
from kerntune.agents.rewrite_unroll import rewrite
from kerntune.agents.rewrites import Declined, Rewrite, RewriteContext
from kerntune.agents.rules import rules_template
from kerntune.engine.backends import cuda
from kerntune.engine.device import DeviceLimits
from kerntune.engine.evaluate import Evaluator, TimingPolicy
from kerntune.engine.gate import check_proposal
from kerntune.engine.template import load_template

DATA = Path(__file__).resolve().parent / "data"
ROW_SUM = DATA / "blockrow" / "row_sum"
CPU = DeviceLimits("opencl", "cpu", max_threads_per_block=4096, warp_size=1)
GPU = DeviceLimits("cuda", "gpu", max_threads_per_block=1024, warp_size=32, sm_count=132)


def context(source: str, backend: str = "cuda", spec: Path = ROW_SUM) -> RewriteContext:
    t = load_template(spec)
    return RewriteContext(t, backend, source, classify(source, t.entry), ("rows",), ("256",), {}, GPU)


def test_the_loops_stepping_by_the_block_get_a_pragma_that_is_empty_by_default():
    src = load_template(ROW_SUM).source_for("cuda")
    got = rewrite(context(src))
    assert isinstance(got, Rewrite) and [p.name for p in got.parameters] == ["UNROLL"]
    assert got.parameters[0].values == (0, 2, 4, 8) and got.parameters[0].default == 0
    assert "    KT_UNROLL\n    for (int c = threadIdx.x; c < cols; c += blockDim.x)" in got.source
    assert "#if UNROLL > 0\n#define KT_UNROLL KERNTUNE_PRAGMA(unroll UNROLL)\n#else\n#define KT_UNROLL\n#endif" \
        in got.source
    # the warp_sum helper's loop (a literal trip count, in another function) is left as written
    assert got.source.count("KT_UNROLL\n") == 2  # the definition's line and the loop's


def test_it_declines_what_it_cannot_prove():
    src = load_template(ROW_SUM).source_for("cuda")
    loop = "for (int c = threadIdx.x; c < cols; c += blockDim.x)"
    cases = {
        "has an unroll count": src.replace(loop, "#pragma unroll 2\n    " + loop),
        "shares its line": src.replace("    " + loop, "    if (rows > 0) " + loop),
        "steps by a literal": src.replace("c += blockDim.x", "c += 256"),
    }
    for why, changed in cases.items():
        got = rewrite(context(changed))
        assert isinstance(got, Declined) and "no loop of the kernel steps by the block's threads" in got.reason, why
    elementwise = DATA / "naive" / "residual_add"
    got = rewrite(context(load_template(elementwise).source_for("opencl"), "opencl", elementwise))
    assert isinstance(got, Declined) and "elementwise" in got.reason


@pytest.mark.skipif(cuda.find_nvcc() is None, reason="nvcc not found")
def test_the_cuda_template_compiles_at_every_unroll(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNTUNE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("KERNTUNE_COMPILER", "nvcc")
    src = rules_template(load_template(ROW_SUM), "cuda", GPU).proposal.sources["cuda"]
    for unroll in (0, 2, 8):
        cuda.compile_cubin(src, "row_sum", {"UNROLL": str(unroll), "BLOCK": "128"}, (), "sm_90")


def test_every_unroll_sums_the_rows_as_the_original_does_on_pocl(tmp_path, opencl_backend):
    t = load_template(ROW_SUM)
    made = rules_template(t, "opencl", CPU)
    assert "UNROLL" in [p.name for p in made.proposal.parameters]
    problem = t.problem(None, {"rows": 7, "cols": 333})
    verdict = check_proposal(t, made.proposal, tmp_path / "tpl", backend="opencl", device=0, problem=problem,
                             limits=CPU, timeout=120)
    assert verdict.ok, verdict.reason
    ev = Evaluator(opencl_backend, verdict.template, verdict.template.problem(None, {"rows": 7, "cols": 333}),
                   seed=1, timing=TimingPolicy(warmup=1, min_repeats=3, max_repeats=3, target_s=0.002))
    for unroll in (2, 4, 8):
        ok, _, message = ev.reproduces_original({"BLOCK": 64, "UNROLL": unroll}, (3,))
        assert ok, (unroll, message)
