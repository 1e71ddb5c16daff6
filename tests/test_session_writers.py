"""A session file has one writer, and appending to one cut off mid-write loses nothing complete.

Resume repairs a cut tail before it appends (a cut at every byte of the last two events); a
second run on a session another process is writing is refused at once, in one line naming that
process; the lock goes with the process that held it, however it ended.
"""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kerntune.engine.events import ConfigEvaluated, Note, RunFinished, RunStarted
from kerntune.engine.result import Result, config_key
from kerntune.engine.session import (
    END_MARK,
    SessionBusy,
    SessionWriter,
    load_session,
    lock_session,
    new_header,
)

QUICK = ["--headless", "--no-probe", "--repeats", "5", "--seed", "5", "--problem", "1M"]


def _header():
    return new_header(command=["kerntune", "tune", "x"], device={"name": "test device"},
                      template={"name": "x", "backend": "opencl", "default_config": {"B": 1}},
                      space={"problem": {"n": 10}}, tuning={"seed": 3})


def _result(b: int) -> Result:
    return Result(config={"B": b}, status="ok", times_us=(1.0 + b, 1.5 + b), median_us=1.25 + b, spread=0.1)


def _write_session(path: Path) -> list[int]:
    """A session of six results and notes (one with characters of several bytes); the byte
    offsets where each event starts."""
    with SessionWriter(path, _header()) as w:
        w.write(RunStarted(0.0, "x", {"n": 10}, "", "opencl", "test device", "grid", 0, 0.0, 3, 0))
        for b in range(1, 7):
            w.write(ConfigEvaluated(0.1 * b, b - 1, _result(b)))
            w.write(Note(0.1 * b + 0.05, f"measured B={b}: {1.25 + b} µs — ≈ the bound"))
    raw = path.read_bytes()
    starts, i = [], raw.find(b"[[event]]")
    while i >= 0:
        starts.append(i)
        i = raw.find(b"[[event]]", i + 1)
    return starts


def test_appending_to_a_session_cut_at_any_byte_of_its_last_two_events_keeps_every_complete_one(tmp_path):
    full = tmp_path / "full.toml"
    starts = _write_session(full)
    raw = full.read_bytes()
    cut_from = starts[-2] - 1  # the newline before the second-to-last event
    end_of_last_result = raw.index(END_MARK.encode(), starts[-2]) + len(END_MARK)
    path = tmp_path / "cut.toml"
    for cut in range(cut_from, len(raw)):
        path.write_bytes(raw[:cut])
        expect_cut = not raw[:cut].endswith(END_MARK.encode())
        with SessionWriter(path) as w:
            assert (w.repaired is not None) == expect_cut, cut
            if expect_cut:
                assert "\n" not in w.repaired and "dropped" in w.repaired
            w.write(ConfigEvaluated(9.0, 99, _result(99)))
        s = load_session(path)
        assert s.warnings == [], cut
        keys = [config_key(r.config) for r in s.results()]
        assert len(keys) == len(set(keys)), cut  # nothing twice
        # every result whose event was complete is there, and the appended one after them
        complete = 6 if cut >= end_of_last_result else 5
        assert [r.config["B"] for r in s.results()] == [*range(1, complete + 1), 99], cut


def test_a_session_cut_inside_a_character_loads_without_the_cut_event(tmp_path):
    path = tmp_path / "s.toml"
    _write_session(path)
    raw = path.read_bytes()
    at = raw.rindex("µ".encode()) + 1  # between the two bytes of µ
    path.write_bytes(raw[:at])
    s = load_session(path)
    assert [r.config["B"] for r in s.results()] == [1, 2, 3, 4, 5, 6]
    assert len(s.warnings) == 1


def test_one_writer_per_session_file(tmp_path):
    path = tmp_path / "s.toml"
    _write_session(path)
    before = path.read_bytes()
    with SessionWriter(path):
        with pytest.raises(SessionBusy, match=rf"pid {os.getpid()}: "):
            SessionWriter(path, _header())  # a fresh run would have truncated it
        with pytest.raises(SessionBusy):
            lock_session(path)
    assert path.read_bytes() == before
    SessionWriter(path).close()  # released on close


def _kerntune(*args: str) -> list[str]:
    return [sys.executable, "-m", "kerntune.tui.cli", *args]


def test_a_second_run_on_a_session_being_written_is_refused_and_a_killed_run_leaves_no_lock(tmp_path):
    session = tmp_path / "same.toml"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "KERNTUNE_HEADLESS": "1"}
    first = subprocess.Popen(_kerntune("tune", "vector_add", "--session", str(session), *QUICK[:-4],
                                       "--repeats", "400", "--problem", "1M", "--seed", "5"),
                             cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not (session.exists() and b"config_evaluated" in session.read_bytes()):
            assert first.poll() is None, first.stderr.read().decode()
            assert time.monotonic() < deadline, "the first run wrote no result"
            time.sleep(0.1)
        for extra in (["--force"], ["--resume"]):  # (without either, the file is refused for existing)
            t0 = time.monotonic()
            second = subprocess.run(_kerntune("tune", "vector_add", "--session", str(session), *QUICK, *extra),
                                    cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
            assert second.returncode == 2, second.stderr
            assert second.stderr.count("\n") == 1, second.stderr
            assert f"another run is writing this session (pid {first.pid}: kerntune" in second.stderr
            assert f"--session {session}" in second.stderr and "Traceback" not in second.stderr
            assert time.monotonic() - t0 < 60
            assert first.poll() is None  # the first goes on, its file whole
            assert load_session(session).template["name"] == "vector_add"
    finally:
        first.kill()  # as kill -9 would: nothing is cleaned up
        first.wait()
    kept = {config_key(r.config) for r in load_session(session).results()}
    assert kept
    again = subprocess.run(_kerntune("tune", "vector_add", "--session", str(session), *QUICK, "--resume",
                                     "--budget", str(len(kept) + 2)),
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    s = load_session(session)
    keys = [config_key(r.config) for r in s.results()]
    assert len(keys) == len(set(keys)) == len(kept) + 2 and kept <= set(keys)
    assert isinstance(s.events[-1], RunFinished)
    assert not list(tmp_path.glob("*.lock")) and not list(tmp_path.glob(".*"))


def test_tune_resume_on_a_session_cut_mid_event_repairs_it_and_says_so(tmp_path, capsys, monkeypatch):
    from kerntune.tui.cli import main

    monkeypatch.setenv("COLUMNS", "400")  # the line names the file: no wrap inside the words read below

    session = tmp_path / "s.toml"
    assert main(["tune", "vector_add", "--session", str(session), *QUICK, "--budget", "3"]) == 0
    raw = session.read_bytes()
    last = raw.rindex(b"[[event]]")
    cut = raw.index(b'reason = "', last) + len(b'reason = "budg')  # inside a string: never whole TOML
    session.write_bytes(raw[:cut])  # the run_finished event, half written
    kept = [config_key(r.config) for r in load_session(session).results()]
    capsys.readouterr()
    assert main(["tune", "vector_add", "--session", str(session), *QUICK, "--budget", "5", "--resume"]) == 0
    out = capsys.readouterr().out
    assert out.count("its last event was cut off mid-write: dropped") == 1
    s = load_session(session)
    keys = [config_key(r.config) for r in s.results()]
    assert s.warnings == [] and len(keys) == len(set(keys)) == 5 and keys[:3] == kept
    assert any(isinstance(e, Note) and "cut off mid-write" in e.text for e in s.events)
