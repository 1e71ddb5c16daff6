"""Many hosts through Dask (engine/cluster.py): a real local Dask cluster on this CPU, its workers
separate processes measuring on the OpenCL device; results stream into one session here."""

from __future__ import annotations

import os
import signal

import pytest

from kerntune import templates
from kerntune.engine.campaign import load_summary
from kerntune.engine.cluster import ClusterError, ClusterEvaluations
from kerntune.engine.evaluate import TimingPolicy
from kerntune.engine.events import ConfigEvaluated
from kerntune.engine.session import load_session
from kerntune.engine.template import load_template
from kerntune.engine.tune import TuneOptions, TuneRun
from kerntune.engine.worker import WorkerSpec
from kerntune.tui.cli import main

distributed = pytest.importorskip("distributed")

CAMPAIGN = """
[campaign]
name = "spread"
strategy = "random"

[[kernel]]
template = "vector_add"
sizes = [{ n = 3000 }, { n = 5001 }]

[[kernel]]
template = "silu_and_mul"
sizes = [{ tokens = 2, d = 256 }, { tokens = 3, d = 128 }]
"""


@pytest.fixture
def cluster(opencl_backend):
    # Dask's workers as they come (daemonic processes): kerntune's evaluation child is a new
    # interpreter, which a daemonic process may start
    c = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                 dashboard_address=None, silence_logs=50)
    yield c
    c.close()


def test_a_campaign_over_two_templates_and_two_sizes_each_runs_on_the_cluster(tmp_path, cluster, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    path = tmp_path / "spread.toml"
    path.write_text(CAMPAIGN)
    out = tmp_path / "out"
    assert main(["campaign", str(path), "--dir", str(out), "--cluster", cluster.scheduler_address,
                 "--backend", "opencl", "--no-probe", "--repeats", "3", "--seed", "5", "--budget", "2", "--top", "1"]) == 0, \
        capsys.readouterr().out
    summary = load_summary(out)
    assert [p["status"] for p in summary["pair"]] == ["tuned"] * 4
    workers = {a.split("://")[-1] for a in cluster.scheduler_info["workers"]}
    devices = set()
    for p in summary["pair"]:
        results = load_session(out / p["session"]).results()
        assert results and all(r.device for r in results)
        devices |= {r.device.split("/")[0] for r in results}
    assert devices <= workers and len(devices) == 2  # both workers measured


def test_a_worker_killed_mid_run_loses_nothing_and_measures_nothing_twice(tmp_path, cluster):
    client = distributed.Client(cluster.scheduler_address)
    pids = client.run(os.getpid)
    client.close()
    victim = sorted(pids)[0]
    seen = []

    def kill_after_two(ev) -> None:
        if isinstance(ev, ConfigEvaluated):
            seen.append(ev)
            if len(seen) == 2:  # one worker dies with configurations at it
                os.kill(pids[victim], signal.SIGKILL)

    t = load_template(templates.path("vector_add"))
    opts = TuneOptions(backend="opencl", budget=10, seed=4, probe=False, cluster=cluster.scheduler_address,
                       session_path=tmp_path / "s.toml", timing=TimingPolicy(min_repeats=3, max_repeats=3))
    out = TuneRun(t, opts, [kill_after_two]).run()
    keys = [tuple(sorted(r.config.items())) for r in out.results]
    assert len(keys) == 10 == len(set(keys))
    assert all(r.verified for r in out.results), [r.message for r in out.results if not r.verified]
    assert out.winner_ok
    session = load_session(tmp_path / "s.toml")
    assert len(session.results()) == 10


def test_an_unreachable_scheduler_is_one_line():
    spec = WorkerSpec("opencl", 0, "", "", {}, "p", {})
    with pytest.raises(ClusterError, match="cannot reach the Dask scheduler at tcp://127.0.0.1:9"):
        ClusterEvaluations("tcp://127.0.0.1:9", spec, connect_timeout=1)
