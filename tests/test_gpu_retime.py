"""On a CUDA device: the selftest, and the leaders' paired re-timing of a library template."""

import pytest

from kerntune import templates
from kerntune.engine.selftest import HOSTILE, TWINS, run_selftest
from kerntune.engine.session import load_session
from kerntune.engine.template import load_template
from kerntune.engine.tune import TuneOptions, TuneRun

pytestmark = pytest.mark.gpu


def test_selftest_on_cuda_catches_everything_and_finds_the_twins_built_alike():
    verdict, cert = run_selftest("cuda", 0, save=False)
    assert (cert["caught"], cert["ties"]) == (len(HOSTILE), len(TWINS)), verdict.missed
    assert verdict.same_program == len(TWINS)  # their cubins are the same
    assert cert["seconds"] < 60


def test_silu_and_mul_reports_a_paired_speedup_with_its_interval_on_cuda(tmp_path):
    t = load_template(templates.path("silu_and_mul"))
    out = TuneRun(t, TuneOptions(backend="cuda", problem="llama7b-t128", seed=3, probe=False, budget=40,
                                 session_path=tmp_path / "s.toml")).run()
    s = load_session(out.session_path)
    lead = s.leaders()
    assert lead is not None and lead.original >= 0 and lead.rounds >= 10
    for low, mid, high in zip(lead.low, lead.speedup, lead.high):
        assert low <= mid <= high
    best = s.summary()["best"]
    assert best["speedup_interval"] is not None and best["config"] == dict(lead.configs[lead.chosen])


def test_the_watch_reads_the_gpu_clock_and_the_processes_on_it():
    from kerntune.engine.disturb import Watch

    s = Watch("cuda", 0).sample()
    assert s is not None and s.clock_mhz and s.clock_mhz > 100
    assert s.gpu_others is None or s.gpu_others >= 0  # None: NVML's pids are another namespace's
