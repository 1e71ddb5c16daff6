"""`kerntune selftest`: every hostile class caught and every twin tied through the real run, on
the OpenCL CPU device; the certificate is kept and recorded in a later session's header."""

from kerntune.engine.certificate import checked, load_certificate
from kerntune.engine.header import run_header
from kerntune.engine.result import Result
from kerntune.engine.selftest import HOSTILE, SPEC, TWINS, judge
from kerntune.engine.template import load_template
from kerntune.engine.tune import TuneOptions
from kerntune.tui.widgets.device import selftest_text

from test_cli import kerntune


def test_selftest_catches_every_hostile_kernel_and_finds_the_twins_tied(tmp_path, opencl_backend, monkeypatch):
    monkeypatch.setenv("KERNTUNE_CACHE_DIR", str(tmp_path / "cache"))
    r = kerntune("selftest", "--backend", "opencl")
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"caught {len(HOSTILE)} of {len(HOSTILE)}, ties found {len(TWINS)} of {len(TWINS)}" in r.stdout
    limits = opencl_backend.limits
    cert = load_certificate(limits.backend, limits.name, limits.driver)
    assert cert is not None and cert["caught"] == len(HOSTILE) and cert["device"] == limits.name
    t = load_template(SPEC)
    header = run_header(t, "opencl", t.problem(), limits, None, TuneOptions(), {})
    assert header.device["selftest"] == cert  # every later session's header records it
    assert selftest_text(cert).plain.startswith(f"caught {len(HOSTILE)} of {len(HOSTILE)}")


def test_a_hostile_kernel_that_is_ranked_or_fails_for_another_reason_is_not_caught():
    ok = [Result(config={"MODE": m, "TWIN": 0}, status=HOSTILE[m][1][0]) for m in HOSTILE]
    ok[0] = Result(config={"MODE": 1, "TWIN": 0}, status="ok", median_us=1.0)
    ok[4] = Result(config={"MODE": 5, "TWIN": 0}, status="compile_error", message="no")
    v = judge(ok, [{"MODE": 0, "TWIN": 1}], {"MODE": 0, "TWIN": 0})
    assert len(v.caught) == len(HOSTILE) - 2 and len(v.missed) == 2 and v.ties == 1 and not v.passed
    assert checked({"caught": 1}) is None  # a header's record that is not a certificate is not read as one
