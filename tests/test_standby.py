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


def run_vector_add(tmp_path, seed: int = 3):  # a whole run, its worker's notes
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
    # without a spare the worker starts itself, and has nothing started ahead to say
    with Worker(spec()) as w:
        w.start()
        assert w.info["startup"] and not w.info["ahead"]


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


def test_a_dead_spare_is_passed_over_and_the_worker_starts_its_own(opencl_backend):
    standby.standby("opencl", 0)
    s = standby._spares[0]
    s.popen.kill()
    s.popen.wait()
    with Worker(spec()) as w:
        w.start()
        assert not w.info["ahead"] and w._proc.popen is not s.popen
        assert w.evaluate(dict(load_template(templates.path("vector_add")).default_config())).verified


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


def test_after_a_kernel_takes_a_worker_down_the_next_replacement_stands_ready(opencl_backend, hostile_dir):
    hostile = load_template(hostile_dir)
    p = hostile.problem()
    spec = WorkerSpec("opencl", 0, str(hostile.spec_path), hostile.spec_text, dict(hostile.sources), p.name,
                      dict(p.values), 1)
    standby.standby("opencl", 0, keep=True)
    with Worker(spec, config_timeout=30) as w:
        assert w.evaluate({"MODE": 0, "THREADS": 64}).status == "ok"
        assert standby.standing() == (0, 0)  # the spare was taken, and none started for a fault not seen
        assert w.evaluate({"MODE": 6, "THREADS": 64}).status == "crashed"
        assert w.evaluate({"MODE": 0, "THREADS": 64}).status == "ok"  # a new worker, started then
        assert standby.wait(120) and standby.standing() == (1, 0)  # the next replacement, ready
        spare = standby._spares[0]
        assert w.evaluate({"MODE": 6, "THREADS": 64}).status == "crashed"
        again = w.evaluate({"MODE": 0, "THREADS": 64})
        assert again.status == "ok", again.message
        assert w.restarts == 2 and w._proc.popen is spare.popen
