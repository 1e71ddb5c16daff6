"""Workers and compile processes started ahead of a run (engine/standby.py): the run takes them,
nothing of one run is in them, a broken or dead spare costs nothing but a new worker, and
nothing started ahead outlives the program that asked."""

from __future__ import annotations

import pytest

from kerntune import templates
from kerntune.engine import standby
from kerntune.engine.events import Note
from kerntune.engine.template import load_template
from kerntune.engine.tune import TuneOptions, TuneRun
from kerntune.engine.worker import Worker, WorkerError, WorkerSpec


@pytest.fixture(autouse=True)
def no_spares_left():
    standby.stand_down()
    yield
    standby.stand_down()


def run_vector_add(tmp_path, seed: int = 3):
    notes: list[str] = []
    opts = TuneOptions(backend="opencl", budget=3, seed=seed, probe=False, overrides={"n": 5000},
                       session_path=tmp_path / f"run-{seed}.toml")
    outcome = TuneRun(load_template(templates.path("vector_add")), opts,
                      [lambda ev: notes.append(ev.text) if isinstance(ev, Note) and ev.source == "worker" else None]).run()
    return outcome, notes


def spec(device: int = 0) -> WorkerSpec:
    t = load_template(templates.path("vector_add"))
    return WorkerSpec("opencl", device, str(t.spec_path), t.spec_text, dict(t.sources), "small", {"n": 3000}, seed=1)


def test_a_run_takes_the_spare_and_says_it_was_started_ahead(opencl_backend, tmp_path):
    standby.standby("opencl", 0)
    assert standby.wait(120)
    assert standby.standing() == (1, 0)
    outcome, notes = run_vector_add(tmp_path)
    assert outcome.best is not None and outcome.best.verified
    assert standby.standing() == (0, 0)  # taken, and no other kept (keep was not asked)
    (ready,) = [n for n in notes if n.startswith("the evaluation worker was ready")]
    assert "started ahead of the run" in ready and "modules" in ready.split("ahead of the run")[1]
    # the same run without a spare: its worker starts in the run, and says nothing of ahead
    outcome, notes = run_vector_add(tmp_path, seed=4)
    assert outcome.best is not None and not any("ahead" in n for n in notes)


def test_a_spare_started_for_auto_serves_the_backend_it_chose(opencl_backend):
    standby.standby("auto", 0)
    with Worker(spec()) as w:
        w.start()
        assert w.info.get("ahead", {}).get("waited") is not None
        r = w.evaluate(dict(load_template(templates.path("vector_add")).default_config()))
        assert r.verified


def test_a_spare_that_cannot_open_its_device_says_why_and_is_not_taken(opencl_backend):
    standby.standby("opencl", 99)
    s = standby._spares[0]
    assert not s.wait(120) and "99" in s.error
    assert standby.take_worker("opencl", 99) is None
    with pytest.raises(WorkerError, match="99"):  # the run's own worker says the same
        Worker(spec(99)).start()


def test_a_dead_spare_is_passed_over_and_the_run_starts_its_own(opencl_backend, tmp_path):
    standby.standby("opencl", 0)
    s = standby._spares[0]
    s.popen.kill()
    s.popen.wait()
    outcome, notes = run_vector_add(tmp_path)
    assert outcome.best is not None and outcome.best.verified
    assert not any("ahead" in n for n in notes)


def test_kept_spares_come_back_after_each_worker_and_end_with_stand_down(opencl_backend):
    standby.standby("opencl", 0, keep=True)
    first = standby._spares[0]
    with Worker(spec()) as w:
        w.start()
        assert w._proc.popen is first.popen
    # the worker closed: a new spare for the next run
    assert standby.standing() == (1, 0)
    second = standby._spares[0]
    assert second is not first and second.wait(120)
    standby.stand_down()
    assert standby.standing() == (0, 0) and second.popen.poll() is not None
    with Worker(spec()) as w:  # keep ended with the stand-down: nothing comes back
        w.start()
    assert standby.standing() == (0, 0)


def test_off_in_the_environment_starts_nothing(monkeypatch):
    monkeypatch.setenv(standby.ENV, "off")
    standby.standby("opencl", 0, keep=True)
    assert standby.standing() == (0, 0)
