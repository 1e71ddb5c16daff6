"""What the rewrite tests share: a source's tokens once the C preprocessor has run."""

from __future__ import annotations

import re
import subprocess


def preprocessed(source: str, defines: dict[str, int]) -> list[str]:
    """The tokens the C preprocessor makes of a source (no includes, comments dropped)."""
    flags = [f"-D{k}={v}" for k, v in defines.items()]
    out = subprocess.run(["cpp", "-P", "-undef", "-nostdinc", *flags], input=source, capture_output=True, text=True,
                         check=True).stdout
    return re.findall(r"[A-Za-z_]\w*|\d[\w.]*|\S", out)


def gated_on_pocl(original, proposal, tmp_path, limits, backend, problem: str = "small"):
    """The rules' template through the gate on PoCL at a problem of the spec, and an Evaluator of
    it there (a short timing: these tests check outputs)."""
    from kerntune.engine.evaluate import Evaluator, TimingPolicy
    from kerntune.engine.gate import check_proposal

    verdict = check_proposal(original, proposal, tmp_path / "tpl", backend="opencl", device=0,
                             problem=original.problem(problem, {}), limits=limits, timeout=120)
    assert verdict.ok, verdict.reason
    template = verdict.template
    timing = TimingPolicy(warmup=1, min_repeats=3, max_repeats=3, target_s=0.002)
    return template, Evaluator(backend, template, template.problem(problem, {}), seed=1, timing=timing)


def skip_where_lane_groups_are_miscompiled() -> None:
    """Skip a test that measures rows spread over lanes on the OpenCL device kerntune chooses when
    that device's runtime miscompiles them: the rules decline the row-wise rewrite there (which
    test_rewrite_rowwise.py checks on every runtime), so there is nothing of it to measure."""
    import pytest

    from kerntune.agents.rewrite_rowwise import runtime_defect
    from kerntune.engine.backends import BackendError, list_devices

    try:
        limits = list_devices("opencl")[0].limits
    except (BackendError, IndexError):
        return
    why = runtime_defect("opencl", limits)
    if why:
        pytest.skip(f"the rules decline the row-wise rewrite on this device: {why}")


def gates_and_tunes_on_cuda(original, proposal, tmp_path, limits) -> None:
    """On a CUDA device: the rules' template passes the gate at the spec's small problem, and every
    configuration a short random tune measures verifies (the winner too)."""
    from kerntune.engine.gate import check_proposal
    from kerntune.engine.tune import TuneOptions, TuneRun

    verdict = check_proposal(original, proposal, tmp_path / "tpl", backend="cuda", device=0,
                             problem=original.problem("small", {}), limits=limits, timeout=300)
    assert verdict.ok, verdict.reason
    run = TuneRun(verdict.template, TuneOptions(backend="cuda", problem="small", seed=5, strategy="random",
                                                budget=12, probe=False, session_path=tmp_path / "tune.toml")).run()
    bad = [(r.config, r.status, r.message) for r in run.results if r.status not in ("ok", "pruned")]
    assert not bad and run.winner_ok
