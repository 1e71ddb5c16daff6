"""The `kerntune` command end to end on the OpenCL CPU device, and its one-line errors."""

import csv
import io
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from cli_support import one_line_error, wait_for_evaluations

from kerntune import templates
from kerntune.engine.result import config_key
from kerntune.engine.template import load_template
from kerntune.engine.session import CUT, load_session
from kerntune.tui.cli import main

QUICK = ["--headless", "--no-probe", "--repeats", "5", "--seed", "11"]


def kerntune(*args, timeout=600, **kw):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run([sys.executable, "-m", "kerntune.tui.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, **kw)


def test_tune_silu_and_mul_prints_the_leaderboard_and_a_session_show_reads(tmp_path):
    session = tmp_path / "silu.toml"
    r = kerntune("tune", "silu_and_mul", "--shape", "tokens=4", "--shape", "d=4096", "--budget", "12",
                 "--session", str(session), *QUICK)
    assert r.returncode == 0, r.stderr
    assert "median us" in r.stdout and "% SOL" in r.stdout
    assert "BLOCK=1024 VEC=8 ROWS=1 UNROLL=1 FAST_EXP=0 STREAM=0 SPLIT=0" in r.stdout  # the baseline is evaluated first
    assert "winner re-verified on new inputs" in r.stdout and "passed" in r.stdout
    show = kerntune("show", str(session), "--json")
    assert show.returncode == 0, show.stderr
    summary = json.loads(show.stdout)
    assert summary["template"] == "silu_and_mul"
    assert summary["evaluated"] == 12 and summary["verified"] == 12
    assert summary["failed"] == {}
    assert summary["default"]["config"]["BLOCK"] == 1024
    best = summary["best"]
    assert best["median_us"] > 0 and set(best["config"]) == {"BLOCK", "VEC", "ROWS", "UNROLL", "FAST_EXP", "STREAM", "SPLIT"}
    if "speedup_interval" in best:  # the leaders' paired re-timing gives the speedup, with its interval
        low, high = best["speedup_interval"]
        assert low <= summary["speedup"] <= high
    else:
        assert summary["speedup"] == pytest.approx(summary["default"]["median_us"] / best["median_us"])


def test_a_grid_over_vector_add_finds_verified_configs(tmp_path):
    session = tmp_path / "va.toml"
    r = kerntune("tune", "vector_add", "--shape", "n=20000", "--session", str(session), *QUICK)
    assert r.returncode == 0, r.stderr
    s = load_session(session)
    results = s.results()
    assert len(results) == 24 and all(x.status == "ok" for x in results)
    assert len({config_key(x.config) for x in results}) == 24


def test_hostile_template_statuses_while_the_run_goes_on(tmp_path, hostile_dir):
    session = tmp_path / "h.toml"
    r = kerntune("tune", str(hostile_dir), "--session", str(session), "--config-timeout", "10", *QUICK)
    assert r.returncode == 0, r.stderr
    statuses = {x.config["MODE"]: x.status for x in load_session(session).results()}
    assert statuses == {0: "ok", 1: "compile_error", 2: "wrong_result", 3: "wrong_result",
                        5: "timeout", 6: "crashed", 7: "ok"}
    s = load_session(session)
    assert s.space["pruned"] == {"MODE != 4": 2, "(THREADS == 1024) == (MODE == 7)": 7}


def test_a_constraint_that_never_holds_is_one_line(tmp_path, hostile_dir, capsys):
    spec = hostile_dir / "kernel.toml"
    spec.write_text(spec.read_text().replace('"MODE != 4",', '"MODE > 100",'))
    code = main(["tune", str(hostile_dir), "--session", str(tmp_path / "x.toml"), *QUICK])
    err = capsys.readouterr().err
    assert code != 0
    assert err.count("\n") == 1 and "no feasible configuration" in err and "`MODE > 100` (16)" in err
    from kerntune.engine import standby

    assert standby.standing() == (0, 0)  # the worker started ahead for the run ended with the command


def test_a_killed_run_leaves_a_session_that_loads_and_resume_finishes_it(tmp_path):
    session = tmp_path / "killed.toml"
    args = ["tune", "vector_add", "--shape", "n=30000", "--session", str(session), *QUICK]
    proc = subprocess.Popen([sys.executable, "-m", "kerntune.tui.cli", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for_evaluations(session, 5)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    before = load_session(session)
    done = [config_key(r.config) for r in before.results()]
    assert 5 <= len(done) < 24
    assert before.finished().reason == CUT  # killed outright: the session says it was cut

    r = kerntune(*args, "--resume")
    assert r.returncode == 0, r.stderr
    counted = re.findall(r"^\[\s*(\d+)/24\]", r.stdout, re.MULTILINE)
    assert counted[0] == str(len(done) + 1) and counted[-1] == "24"  # the count goes on from where it was
    after = load_session(session)
    keys = [config_key(x.config) for x in after.results()]
    assert len(keys) == 24 and len(set(keys)) == 24  # every config once, none repeated
    assert keys[: len(done)] == done
    assert after.finished() is not None and after.finished().reason == "space exhausted"


def test_resume_refuses_a_session_of_another_template(tmp_path):
    session = tmp_path / "va.toml"
    assert kerntune("tune", "vector_add", "--shape", "n=1000", "--budget", "1", "--session", str(session),
                    *QUICK).returncode == 0
    r = kerntune("tune", "silu_and_mul", "--session", str(session), "--resume", *QUICK)
    assert r.returncode != 0
    assert r.stderr.count("\n") == 1 and "different template" in r.stderr


@pytest.mark.parametrize(
    "args, words",
    [
        (["tune", "no_such_kernel"], "no built-in template of that name"),
        (["tune", "vector_add", "--shape", "n"], "--shape expects NAME=VALUE"),
        (["tune", "vector_add", "--shape", "m=3"], "unknown problem name(s) m"),
        (["tune", "vector_add", "--shape", "n=abc"], "expected an integer"),
        (["tune", "vector_add", "--problem", "huge"], "no problem named 'huge'"),
        (["tune", "vector_add", "--strategy", "magic"], "invalid choice"),
        (["tune", "vector_add", "--budget", "-1"], "must not be negative"),
        (["tune", "vector_add", "--resume"], "--resume needs --session"),
        (["show", "/nonexistent/session.toml"], "no such file"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_bad_input_is_one_line_and_a_non_zero_exit(capsys, args, words):
    code = main(args)
    err = capsys.readouterr().err
    assert code != 0
    assert err.count("\n") == 1 and err.startswith("kerntune: error:") and words in err
    assert "Traceback" not in err


def test_show_on_a_malformed_file_is_one_line(tmp_path, capsys):
    p = tmp_path / "bad.toml"
    p.write_text("[session]\nformat = 'kerntune-session'\nversion = 'x'\n")
    assert "version must be an integer" in one_line_error(capsys, ["show", str(p)])


def test_list_and_devices(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "72")
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "silu_and_mul" in out and "vector_add" in out and "llama7b-t2048" in out
    assert max(map(len, out.splitlines())) <= 72
    assert "\n    backends   cuda, opencl\n" in out
    assert main(["devices"]) == 0
    out = capsys.readouterr().out
    assert "opencl device 0" in out and "threads / block" in out


def test_start_from_tries_another_sizes_fastest_first(tmp_path, capsys):
    """--start-from: the default configuration, then the K fastest of a session at another size, then the strategy."""
    first = tmp_path / "small.toml"
    assert main(["tune", "vector_add", "--shape", "n=4096", "--session", str(first), *QUICK]) == 0
    fastest = [config_key(r.config) for r in sorted((r for r in load_session(first).results() if r.ranked),
                                                    key=lambda r: r.median_us)[:3]]
    second = tmp_path / "large.toml"
    assert main(["tune", "vector_add", "--shape", "n=50000", "--strategy", "random", "--budget", "6",
                 "--start-from", str(first), "--start-top", "3", "--session", str(second), *QUICK]) == 0
    got = [config_key(r.config) for r in load_session(second).results()]
    default = config_key(load_template(templates.path("vector_add")).default_config())
    expected = [default, *(k for k in fastest if k != default)]
    assert len(got) == 6 and len(set(got)) == 6 and got[:len(expected)] == expected
    capsys.readouterr()
    # a session of another template is one line, and nothing is run
    other = tmp_path / "other.toml"
    assert main(["tune", "silu_and_mul", "--shape", "tokens=2", "--shape", "d=4096", "--start-from", str(first),
                 "--session", str(other), *QUICK]) != 0
    err = capsys.readouterr().err
    assert "is a session of 'vector_add', not of 'silu_and_mul'" in err and len(err.strip().splitlines()) == 1
    assert not other.exists()


def test_version_csv_and_no_silent_overwrite(tmp_path, capsys):
    from kerntune.tui.cli import main

    session = Path(__file__).parent / "data" / "sessions" / "vector_add.toml"
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.startswith("kerntune ")
    assert main(["show", str(session), "--csv"]) == 0
    rows = list(csv.reader(io.StringIO(capsys.readouterr().out)))
    assert rows[0][:4] == ["rank", "label", "BLOCK", "ITEMS"] and rows[1][0] == "1"
    assert float(rows[1][4]) <= float(rows[2][4])  # fastest first, figures unrounded
    out = tmp_path / "board.csv"
    assert main(["show", str(session), "--csv", "-o", str(out)]) == 0
    capsys.readouterr()
    for argv in (["show", str(session), "--csv", "-o", str(out)], ["kt-export", str(session), "-o", str(out)]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "already exists (--force writes over it)" in err and err.count("\n") == 1
    assert main(["kt-export", str(session), "-o", str(out), "--force"]) == 0


def test_text_numbers_labels_and_wrapping(monkeypatch):
    from kerntune.engine.result import Result
    from kerntune.tui.numbers import fmt_num
    from kerntune.tui.text import TextRenderer, leaderboard_rows

    assert [fmt_num(v) for v in (2888.5, 62803.2, 16115.67, 12.345, 1.2345, 0.012345, None)] == [
        "2888", "62803", "16116", "12.3", "1.23", "0.0123", "-"]
    original = Result(config={}, status="ok", median_us=10.0)
    assert leaderboard_rows([original], original)[0][1] == "original"
    monkeypatch.setenv("COLUMNS", "50")
    buf = io.StringIO()
    r = TextRenderer(buf)
    r._print("word " * 30 + "the cost model is the end")
    lines = buf.getvalue().splitlines()
    assert len(lines) > 1 and all(len(line) <= 50 for line in lines) and lines[-1].endswith("the end")


def test_when_the_default_configuration_wins_one_line_says_why():
    from kerntune.engine.result import Result
    from kerntune.tui.launch import default_is_best

    default = {"BLOCK": 1024, "VEC": 8}
    best = Result(config=default, status="ok", median_us=10.0)
    others = [Result(config={"BLOCK": 64, "VEC": 1}, status="ok", median_us=14.0),
              Result(config={"BLOCK": 256, "VEC": 8}, status="ok", median_us=11.0),
              Result(config={"BLOCK": 128, "VEC": 2}, status="compile_error")]
    assert default_is_best([best, *others], best, default) == (
        "the default configuration wins: none of the 2 other configurations measured ran faster (the closest, "
        "BLOCK=256 VEC=8, 11.0 us, 10% slower)")
    assert default_is_best(others[:2], others[1], default) == ""
    # another measured faster, and the re-timing of the leaders found it tied: its legend says that
    assert default_is_best([best, Result(config={"BLOCK": 64}, status="ok", median_us=9.0)], best, default) == ""
