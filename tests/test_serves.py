"""A spec's `serves`: every size it lists is tuned, one general configuration is chosen across them,
and no configuration reported slower than the original at a size goes without saying so."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kerntune import templates
from kerntune.engine.campaign import PairResult, choose_general, load_summary
from kerntune.engine.result import Result, config_key
from kerntune.engine.session import load_session
from kerntune.engine.template import TemplateError, load_template
from kerntune.tui.cli import main

from cli_support import one_line_error

HERE = Path(__file__).resolve().parent
QUICK = ["--headless", "--no-probe", "--repeats", "3", "--seed", "7"]


def served_vector_add(tmp_path: Path, serves: str = '["small", "large"]') -> Path:
    d = tmp_path / "vector_add"
    shutil.copytree(templates.path("vector_add").parent, d)
    spec = d / "kernel.toml"
    text = spec.read_text()
    text = text.replace("constraints = [", f"serves = {serves}\nconstraints = [", 1)
    text = text.replace('name = "1M"\nn = 1048576', 'name = "small"\nn = 3000')
    text = text.replace('name = "16M"\nn = 16777216', 'name = "large"\nn = 50000')
    spec.write_text(text)
    return spec


def test_serves_names_the_specs_own_problems(tmp_path):
    t = load_template(served_vector_add(tmp_path))
    assert t.serves == ("small", "large")
    assert load_template(templates.path("vector_add")).serves == ()
    for i, (bad, words) in enumerate((('["small", "tiny"]', "expected names of [[problem]] entries"),
                                      ('["small", "small"]', "each problem named once"),
                                      ('"small"', "a list of [[problem]] names"))):
        with pytest.raises(TemplateError) as e:
            load_template(served_vector_add(tmp_path / str(i), bad))
        assert "[serves]" in str(e.value) and words in str(e.value)


def ok(config: dict, us: float) -> Result:
    return Result(config=config, status="ok", median_us=us)


def pair(size: str, *results: Result, original: Result | None = None) -> PairResult:
    ranked = [r for r in results if r.ranked]
    return PairResult("k", size, {}, f"{size}.toml", "tuned", tuple(results),
                      min(ranked, key=lambda r: r.median_us) if ranked else None, original or results[0])


A, B, C, D = ({"X": 1}, {"X": 2}, {"X": 3}, {"X": 4})  # A is the default configuration: the original


def test_the_general_configuration_is_never_slower_than_the_original_at_a_size():
    # B wins prefill by far but is 2x slower than the original at decode; C helps both a little
    prefill = pair("prefill", ok(A, 100), ok(B, 50), ok(C, 90))
    decode = pair("decode", ok(A, 10), ok(B, 20), ok(C, 9))
    g = choose_general([prefill, decode])
    assert g.config == C
    assert g.geomean == pytest.approx((100 / 90 * 10 / 9) ** 0.5)
    assert [(s.size, s.original_us, s.best_us, s.general_us) for s in g.sizes] == [
        ("prefill", 100, 50, 90), ("decode", 10, 9, 9)]
    assert any("the best at prefill (X=2) is slower than the original at decode: 20 us against 10 us (0.50x)"
               in n for n in g.notes)


def test_when_every_leader_loses_somewhere_the_original_is_the_general_configuration():
    prefill = pair("prefill", ok(A, 100), ok(B, 50))
    decode = pair("decode", ok(A, 10), ok(B, 20), ok(D, 8))
    g = choose_general([prefill, decode])
    # D is not verified at prefill and B loses at decode: the original stays, and the notes say why
    assert g.config == A and g.geomean == pytest.approx(1.0)
    assert any("the best at decode (X=4) was not verified at prefill" in n for n in g.notes)
    assert any("slower than the original at decode" in n for n in g.notes)


def test_a_failed_original_or_a_failed_size_is_said_in_words():
    failed = Result(config=A, status="wrong_result", message="c: 3 of 10 elements differ")
    prefill = pair("prefill", failed, ok(B, 50), original=failed)
    decode = pair("decode", ok(A, 10), ok(B, 9))
    g = choose_general([prefill, decode])
    assert g.config == B
    assert any("the original (the default configuration) has no time at prefill (wrong_result)" in n for n in g.notes)
    lost = PairResult("k", "decode", {}, "decode.toml", "failed", error="no OpenCL device")
    g = choose_general([prefill, lost])
    assert any("decode: not tuned (no OpenCL device)" in n for n in g.notes)


def test_tune_of_a_served_spec_tunes_every_size_and_show_reports_each(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    spec = served_vector_add(tmp_path)
    out = tmp_path / "served"
    assert main(["tune", str(spec), "--budget", "3", "--session", str(out), *QUICK]) == 0
    text = capsys.readouterr().out
    assert "vector_add serves small, large" in text
    assert "vector_add: general configuration" in text and "best at small:" in text and "best at large:" in text
    summary = load_summary(out / "summary.toml")
    assert [p["size"] for p in summary["pair"]] == ["small", "large"]
    g = summary["general"][0]
    for s in g["size"]:
        assert {"original_us", "best_us", "general_us"} <= set(s)
        if s["general_us"] > s["original_us"]:
            assert any("slower than the original" in n for n in g["notes"])
    for p in summary["pair"]:  # one session per size, each holding the general configuration
        session = load_session(out / p["session"])
        assert session.space["problem_name"] == p["size"]
        assert config_key(g["config"]) in session.evaluated_keys()
    assert main(["show", str(out)]) == 0
    shown = capsys.readouterr().out
    assert "general us" in shown and "small" in shown and "large" in shown
    # the dispatch set: every size served within 3% of its own best, never slower than the original
    d = summary["dispatch"][0]
    assert sorted(s["size"] for s in d["size"]) == ["large", "small"] and "dispatch set of" in shown
    for s in d["size"]:
        assert s["time_us"] <= 1.03 * s["best_us"] and ("original_us" not in s or s["time_us"] <= s["original_us"])
    assert sorted(size for m in d["configs"] for size in m["covers"]) == ["large", "small"]
    # a replay of one of its sessions says the dispatch set at its end (the file is not changed)
    before = (out / summary["pair"][0]["session"]).read_bytes()
    assert main(["replay", str(out / summary["pair"][0]["session"])]) == 0
    assert "vector_add: dispatch set of" in capsys.readouterr().out
    assert (out / summary["pair"][0]["session"]).read_bytes() == before
    # exported: JSON ships one configuration per size; a header needs CUDA, T4 one session
    shipped = tmp_path / "shipped.json"
    assert main(["export", str(out), "--format", "json", "-o", str(shipped)]) == 0
    data = json.loads(shipped.read_text())
    assert [(s["size"], s["config"]) for s in data["shipped"]] == [(s["size"], s["config"]) for s in d["size"]]
    assert set(data["leaderboards"]) == {"small", "large"}
    from kerntune.engine.export import paired_figures

    for row in data["shipped"]:  # a size's configuration re-timed beside its original ships those figures
        named = {p["size"]: p["session"] for p in summary["pair"]}
        paired = paired_figures(load_session(out / named[row["size"]]), row["config"])
        if paired is not None and paired[1] is not None:
            assert row["speedup"] == paired[1] and row["speedup_interval"] == list(paired[2])
            assert row["median_us"] == paired[0]
    capsys.readouterr()
    assert "a header is CUDA source" in one_line_error(capsys, ["export", str(out), "--format", "header", "-o",
                                                                str(tmp_path / "h.h")])
    assert "t4 holds one session" in one_line_error(capsys, ["export", str(out), "--format", "t4", "-o",
                                                             str(tmp_path / "t4.json")])
    # --problem tunes one size, as before; a second run into the same folder needs --resume
    assert main(["tune", str(spec), "--budget", "3", "--session", str(out), *QUICK]) == 2
    assert "--resume continues that run" in capsys.readouterr().err
    assert main(["tune", str(spec), "--budget", "3", "--session", str(out), "--resume", *QUICK]) == 0
    assert "small: finished before: kept" in capsys.readouterr().out


def test_the_agent_loop_tunes_its_template_at_every_served_size(tmp_path, capsys):
    d = tmp_path / "silu"
    shutil.copytree(HERE / "data" / "originals" / "silu_and_mul", d)
    shutil.copyfile(templates.path("silu_and_mul").parent / "baseline.cu", d / "baseline.cu")
    spec = d / "kernel.toml"
    text = spec.read_text().replace("[kernel]", 'serves = ["small", "decode"]\n\n[kernel]', 1)
    spec.write_text(text.replace('[[problem]]\nname = "small"',
                                 '[[problem]]\nname = "decode"\ntokens = 2\nd = 512\n\n[[problem]]\nname = "small"', 1))
    session = tmp_path / "loop.toml"
    assert main(["tune", str(spec), "--agent", "rules", "--rounds", "1", "--budget", "3",
                 "--session", str(session), *QUICK]) == 0
    out = capsys.readouterr().out
    assert "silu_and_mul serves small, decode: the template of" in out
    summary = load_summary(tmp_path / "loop-serves")
    assert [p["size"] for p in summary["pair"]] == ["small", "decode"]
    assert all(p["status"] == "tuned" and "original_us" in p for p in summary["pair"])
    assert summary["general"][0].get("config")
    assert load_session(session).space["problem_name"] == "small"  # the loop ran at the first size served
