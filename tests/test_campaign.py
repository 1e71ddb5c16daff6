"""`kerntune campaign FILE.toml`: templates x sizes, one session per pair, resumable, and a summary
with each template's general configuration; on the OpenCL CPU device."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from cli_support import wait_for_evaluations

from kerntune import templates
from kerntune.engine.campaign import (
    Campaign,
    CampaignError,
    Job,
    PairResult,
    load_campaign,
    load_summary,
    run_job,
    session_name,
)
from kerntune.engine.result import config_key
from kerntune.engine.session import load_session
from kerntune.engine.tune import TuneOptions
from kerntune.engine.evaluate import TimingPolicy
from kerntune.tui.cli import main

QUICK = ["--no-probe", "--repeats", "3", "--seed", "5", "--budget", "2"]
FAST = TuneOptions(backend="opencl", budget=2, seed=5, probe=False, timing=TimingPolicy(min_repeats=3, max_repeats=3))

CAMPAIGN = """
[campaign]
name = "tiny"
strategy = "random"

[[kernel]]
template = "vector_add"
sizes = [{ n = 3000 }, { n = 40000 }]

[[kernel]]
template = "silu_and_mul"
sizes = [{ tokens = 2, d = 256 }]
"""


@pytest.fixture
def campaign_file(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(CAMPAIGN)
    return path


def test_a_campaign_file_names_templates_and_their_sizes(campaign_file):
    name, kernels, options = load_campaign(campaign_file, templates.path)
    assert name == "tiny" and options == {"strategy": "random"}
    assert [k.name for k in kernels] == ["vector_add", "silu_and_mul"]
    assert [s[0] for s in kernels[0].sizes] == ["n=3000", "n=40000"]
    assert kernels[1].sizes[0][2] == {"tokens": 2, "d": 256}
    jobs = Campaign(kernels, campaign_file.parent / "out").jobs()
    assert [Path(j.session).name for j in jobs] == ["vector_add@n=3000.toml", "vector_add@n=40000.toml",
                                                    "silu_and_mul@tokens=2,d=256.toml"]


def test_a_kernel_is_found_beside_the_campaign_file_and_takes_the_specs_serves(tmp_path):
    d = tmp_path / "mine"
    shutil.copytree(templates.path("vector_add").parent, d)
    spec = d / "kernel.toml"
    spec.write_text('serves = ["16M", "1M"]\n' + spec.read_text())
    (tmp_path / "c.toml").write_text("[[kernel]]\ntemplate = 'mine'\n[[kernel]]\ntemplate = 'mine/kernel.toml'\n")
    with pytest.raises(CampaignError, match="listed twice"):
        load_campaign(tmp_path / "c.toml", templates.path)
    (tmp_path / "c.toml").write_text("[campaign]\ntop = 2\n[[kernel]]\ntemplate = 'mine'\n")
    name, kernels, options = load_campaign(tmp_path / "c.toml", templates.path)
    assert name == "c" and options == {"top": 2}
    assert kernels[0].spec == spec and [s[0] for s in kernels[0].sizes] == ["16M", "1M"]


@pytest.mark.parametrize("text, words", [
    ("[[kernel]]\ntemplate = 'no_such_kernel'\n", "[kernel[0].template] expected a built-in template's name"),
    ("[[kernel]]\ntemplate = 'vector_add'\nproblems = ['huge']\n", "no problem named 'huge'"),
    ("[[kernel]]\ntemplate = 'vector_add'\nsizes = [{ m = 4 }]\n", "unknown problem name(s) m"),
    ("[[kernel]]\ntemplate = 'vector_add'\nsizez = []\n", "[kernel[0].sizez] expected one of template"),
    ("[campaign]\nbudget = -1\n[[kernel]]\ntemplate = 'vector_add'\n", "[campaign.budget] expected a non-negative"),
    ("[[kernel]]\ntemplate = 'vector_add'\n[[kernel]]\ntemplate = 'vector_add'\n", "listed twice"),
    ("kernel = 3\n", "at least one [[kernel]] table"),
    ("[[kernel]\n", "not valid TOML"),
])
def test_a_bad_campaign_file_is_one_line(tmp_path, capsys, text, words):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(CampaignError) as e:
        load_campaign(path, templates.path)
    assert words in str(e.value) and "\n" not in str(e.value)
    assert main(["campaign", str(path), "--dir", str(tmp_path / "out")]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_a_job_is_plain_data_and_a_pair_that_cannot_run_is_a_failed_result(tmp_path):
    import pickle

    job = Job(str(templates.path("vector_add")), "n=3000", None, {"n": 3000}, str(tmp_path / "a.toml"))
    assert pickle.loads(pickle.dumps(job)) == job  # can be handed to another process or host
    assert pickle.loads(pickle.dumps(FAST)) == FAST  # and the options it runs with
    bad = Job(str(templates.path("vector_add")), "huge", "huge", {}, str(tmp_path / "b.toml"))
    pair = run_job(bad, FAST)
    assert pair.status == "failed" and "no problem named 'huge'" in pair.error and not Path(bad.session).exists()


def test_a_campaign_tunes_every_pair_resumes_a_cut_one_and_skips_finished_ones(tmp_path, campaign_file, capsys,
                                                                               monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    out = tmp_path / "out"
    assert main(["campaign", str(campaign_file), "--dir", str(out), *QUICK]) == 0
    text = capsys.readouterr().out
    assert "campaign tiny: 2 templates, 3 pairs" in text
    assert "general us" in text and "vector_add: general configuration" in text
    summary = load_summary(out)
    assert [(p["template"], p["size"], p["status"]) for p in summary["pair"]] == [
        ("vector_add", "n=3000", "tuned"), ("vector_add", "n=40000", "tuned"),
        ("silu_and_mul", "tokens=2,d=256", "tuned")]
    sessions = {p["size"]: out / p["session"] for p in summary["pair"]}
    # the campaign file's strategy holds where the command line gives none
    assert load_session(sessions["n=3000"]).header["tuning"]["strategy"] == "random"
    # every size's leaders were measured at the other size: the general configuration is measured at both
    va = next(g for g in summary["general"] if g["template"] == "vector_add")
    assert all("general_us" in s and "original_us" in s for s in va["size"])
    general = config_key(va["config"])
    for path in (sessions["n=3000"], sessions["n=40000"]):
        assert general in load_session(path).evaluated_keys()
    for s in va["size"]:  # never slower than the original without a note saying so
        if s["general_us"] > s["original_us"]:
            assert any("slower than the original" in n for n in va["notes"])

    # a pair cut mid-run (its last events lost) is resumed; the others are kept as they are
    cut = sessions["n=40000"]
    text_before = cut.read_text()
    cut.write_text(text_before[:text_before.rindex("[[event]]")])  # its RunFinished is gone
    kept = sessions["n=3000"].read_text()
    assert main(["campaign", str(campaign_file), "--dir", str(out), *QUICK]) == 0
    rerun = capsys.readouterr().out
    assert "vector_add at n=3000: finished before: kept" in rerun and "vector_add at n=40000: resumed" in rerun
    assert sessions["n=3000"].read_text() == kept
    resumed = load_session(cut)
    keys = [config_key(r.config) for r in resumed.results()]
    assert len(keys) == len(set(keys))  # nothing measured twice
    assert resumed.finished() is not None

    # a measuring job appends the configurations its session lacks, once
    extra = {"BLOCK": 64, "ITEMS": 2}
    job = Job(str(templates.path("vector_add")), "n=3000", None, {"n": 3000}, str(sessions["n=3000"]),
              configs=(extra, va["config"]))
    before = len(load_session(sessions["n=3000"]).results())
    measured = run_job(job, FAST)
    assert measured.status == "measured" and len(measured.results) == before + 1
    assert measured.time_of(config_key(extra)) is not None
    assert run_job(job, FAST).status == "skipped"

    # show reads the summary, the folder or the file
    assert main(["show", str(out)]) == 0
    shown = capsys.readouterr().out
    assert "campaign tiny" in shown and "silu_and_mul" in shown and "general" in shown
    assert main(["show", str(out / "summary.toml"), "--csv"]) == 2


def test_session_names_keep_only_safe_characters():
    assert session_name("k", "tokens=2,d=256") == "k@tokens=2,d=256.toml"
    assert session_name("k", "a/b c") == "k@a_b_c.toml"


def test_a_summary_round_trips_and_a_malformed_one_is_one_line(tmp_path, capsys):
    import tomli_w

    from kerntune.engine.campaign import General, SizeFigures, summary_data
    from kerntune.engine.result import Result

    best = Result(config={"X": 2}, status="ok", median_us=5.0)
    pair = PairResult(
        "k", "decode", {"n": 4}, str(tmp_path / "k@decode.toml"), "tuned", (best,), best,
        Result(config={"X": 1}, status="ok", median_us=6.0))
    general = General("k", {"X": 2}, 1.2, (SizeFigures("decode", 6.0, 5.0, {"X": 2}, 5.0),), ("a note",))
    data = summary_data("c", [pair], [general], tmp_path, ["kerntune", "campaign"])
    (tmp_path / "summary.toml").write_text(tomli_w.dumps(data))
    loaded = load_summary(tmp_path)
    assert loaded["pair"][0]["session"] == "k@decode.toml" and loaded["pair"][0]["original_us"] == 6.0
    assert loaded["general"][0]["size"][0]["general_us"] == 5.0 and loaded["general"][0]["notes"] == ["a note"]
    data["general"][0]["size"] = "decode"
    (tmp_path / "summary.toml").write_text(tomli_w.dumps(data))
    assert main(["show", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "[general[0].size" in err and len(err.strip().splitlines()) == 1


def test_ctrl_c_ends_the_campaign_and_the_rerun_resumes_the_cut_pair(tmp_path, capsys):
    import os
    import signal
    import subprocess
    import sys

    path = tmp_path / "cut.toml"
    path.write_text("[[kernel]]\ntemplate = 'vector_add'\nsizes = [{ n = 20000 }, { n = 3000 }]\n")
    out = tmp_path / "out"
    args = [sys.executable, "-m", "kerntune.tui.cli", "campaign", str(path), "--dir", str(out), "--no-probe",
            "--repeats", "3", "--seed", "2", "--budget", "8"]
    first = out / "vector_add@n=20000.toml"
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_evaluations(first, 3)
        os.kill(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130 and "interrupted" in err
    assert not (out / "vector_add@n=3000.toml").exists()  # the campaign stopped at the cut pair
    cut = [config_key(r.config) for r in load_session(first).results()]
    assert 3 <= len(cut) < 8
    assert main(args[3:]) == 0
    rerun = capsys.readouterr().out
    assert "vector_add at n=20000: resumed" in rerun and "vector_add at n=3000: tuned" in rerun
    keys = [config_key(r.config) for r in load_session(first).results()]
    assert len(keys) >= 8 and len(keys) == len(set(keys)) and keys[:len(cut)] == cut


def test_a_sizes_reported_best_outside_its_fastest_few_is_a_candidate_of_the_general_configuration():
    # the paired verdict reported a simpler configuration tied with the fastest, ranked fourth by
    # its own timing: the general configuration and the notes take it as they take the others
    from kerntune.engine.campaign import choose_general, dispatch_of
    from kerntune.engine.result import Result

    def r(b, us):
        return Result(config={"B": b}, status="ok", times_us=(us,) * 5, median_us=us)

    small = [r(1, 10.0), r(2, 9.0), r(3, 9.01), r(4, 9.02), r(5, 9.03)]
    large = [r(1, 100.0), r(2, 90.0), r(3, 95.0), r(4, 96.0), r(5, 99.0)]
    pairs = [PairResult("t", "small", {"n": 1}, "a.toml", "tuned", tuple(small), best=small[4], original=small[0]),
             PairResult("t", "large", {"n": 2}, "b.toml", "tuned", tuple(large), best=large[1], original=large[0])]
    general = choose_general(pairs, top=3)
    assert general.config is not None
    assert dispatch_of(pairs, general, top=3) is not None
