"""`kerntune verify`: recorded winners measured again beside the original, as a CI gate: exit 0
when correct and as fast as recorded, 1 when wrong or slower, 2 on bad input."""

from __future__ import annotations

import json

from kerntune.engine.export import export_json
from kerntune.engine.session import load_session
from kerntune.engine.verify import read_recorded
from kerntune.tui.cli import main

from cli_support import one_line_error
from conftest import DATA

SESSION = DATA / "sessions" / "hostile.toml"  # recorded on PoCL: MODE=7 THREADS=1024 is its best
SPEC = DATA / "hostile" / "kernel.toml"
QUICK = ["--no-probe", "--seed", "5", "--template", str(SPEC)]


def test_a_session_ships_its_reported_best_with_its_figures():
    recorded = read_recorded(SESSION)
    session = load_session(SESSION)
    assert [dict(s.config) for s in recorded.shipped] == [dict(session.best().config)]
    assert recorded.shipped[0].speedup == session.summary()["speedup"]
    assert recorded.template["fingerprint"] == session.template["fingerprint"]


def test_verify_passes_a_correct_winner_and_fails_a_wrong_one_and_a_slower_one(tmp_path, capsys):
    data = export_json(load_session(SESSION))
    data["device"]["name"] = "a device of another name"  # times are then not compared, speedups are
    fine = dict(data["shipped"][0], size="fine", speedup=1.0, speedup_interval=[0.2, 5.0])
    slower = dict(fine, size="slower", speedup=50.0, speedup_interval=[45.0, 55.0])
    wrong = dict(fine, size="wrong", config={"MODE": 2, "THREADS": 64})  # writes half its output
    data["shipped"] = [fine, slower, wrong]
    export = tmp_path / "shipped.json"
    export.write_text(json.dumps(data))
    assert main(["verify", str(export), "--json", *QUICK]) == 1
    report = json.loads(capsys.readouterr().out)
    assert [c["verdict"] for c in report["checks"]] == ["passed", "slower", "wrong"]
    assert report["passed"] is False
    assert report["checks"][0]["speedup"] > 0 and report["checks"][0]["speedup_interval"]
    assert "against 50.00x recorded" in report["checks"][1]["reasons"][0]
    assert report["checks"][2]["status"] == "wrong_result"
    assert any("recorded on a device of another name" in n for n in report["notes"])
    # the correct one alone passes: exit 0, and the text report says so
    data["shipped"] = [fine]
    export.write_text(json.dumps(data))
    assert main(["verify", str(export), "--session", str(tmp_path / "runs"), *QUICK]) == 0
    out = capsys.readouterr().out
    assert "passed: fine MODE=7 THREADS=1024" in out and "every recorded winner passed" in out
    assert len(list((tmp_path / "runs").glob("*.toml"))) == 1  # --session keeps the run


def test_verify_of_what_is_not_a_recording_is_one_line(tmp_path, capsys):
    other = tmp_path / "other.json"
    other.write_text('{"schema_version": "1.0.0", "results": []}')
    assert "not a kerntune export" in one_line_error(capsys, ["verify", str(other)])
    assert "no such file" in one_line_error(capsys, ["verify", str(tmp_path / "missing.toml")])
    assert "--tolerance" in one_line_error(capsys, ["verify", str(SESSION), "--tolerance", "-1"])
