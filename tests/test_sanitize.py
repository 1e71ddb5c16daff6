"""memcheck's child started ahead: the job reaches it on standard input, its answer comes back."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
import time
from dataclasses import asdict

import pytest

from kerntune import templates
from kerntune.engine.profile import job_for
from kerntune.engine.sanitize import Memcheck, SanitizeError, sanitize_config
from kerntune.engine.template import load_template


def fake_sanitizer(tmp_path, summary: str) -> str:
    """A stand-in for compute-sanitizer: runs the program after its options, then prints `summary`."""
    path = tmp_path / "compute-sanitizer"
    path.write_text("#!/bin/sh\nwhile [ \"${1#-}\" != \"$1\" ]; do shift; shift; done\n"
                    f"\"$@\"\ncode=$?\necho '{summary}'\nexit $code\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def test_a_child_started_ahead_and_not_needed_ends_cleanly():
    t = load_template(templates.path("vector_add"))
    job = json.dumps(asdict(job_for(t, t.problem(), None)))
    # nothing at all; or the job (its inputs drawn), then no configuration
    for given in ("", job + "\n"):
        done = subprocess.run([sys.executable, "-m", "kerntune.engine.profile", "--target", "-"], input=given,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0 and not done.stdout.strip(), done.stdout + done.stderr


def test_the_job_reaches_the_child_on_its_input_and_its_failure_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # whatever this host has: the child finds no device
    tool = fake_sanitizer(tmp_path, "========= ERROR SUMMARY: 0 errors")
    t = load_template(templates.path("vector_add"))
    ahead = Memcheck(tool, t, t.problem())
    with pytest.raises(SanitizeError) as e:
        ahead.check(t.default_config())
    assert "\n" not in str(e.value) and str(e.value)
    ahead.close()


def test_a_finding_is_read_from_the_tools_output(tmp_path):
    tool = fake_sanitizer(tmp_path, "========= Invalid __global__ write of size 4 bytes\n"
                                    "=========     at kernel+0x10\n========= ERROR SUMMARY: 3 errors")
    t = load_template(templates.path("vector_add"))
    clean, message = sanitize_config(t, t.problem(), t.default_config(), tool=tool)
    assert not clean and "3 errors" in message and "Invalid __global__ write" in message


def test_closing_an_unused_child_stops_it(tmp_path):
    t = load_template(templates.path("vector_add"))
    ahead = Memcheck(fake_sanitizer(tmp_path, ""), t, t.problem())
    ahead.close()
    assert ahead._proc.returncode is not None


def test_closing_ends_what_the_tool_started_even_when_it_holds_the_output(tmp_path):
    """compute-sanitizer's target can outlive the tool and keep its output open: closing must not
    wait for it (a round with nothing new to check once hung here until the target gave up)."""
    pidfile = tmp_path / "stray.pid"
    path = tmp_path / "compute-sanitizer"
    path.write_text(f"#!/bin/sh\nsleep 100000 &\necho $! > {pidfile}\nwhile [ \"${{1#-}}\" != \"$1\" ]; do shift; shift; done\n"
                    "\"$@\"\nwait\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    t = load_template(templates.path("vector_add"))
    ahead = Memcheck(str(path), t, t.problem())
    closing = threading.Thread(target=ahead.close, kwargs={"grace": 0.5}, daemon=True)
    closing.start()
    closing.join(60)
    assert not closing.is_alive(), "close() waited on the tool's stray child"
    stray = int(pidfile.read_text())
    with pytest.raises(ProcessLookupError):
        for _ in range(100):  # killed: gone once its parent shell (killed too) is reaped by init
            os.kill(stray, 0)
            time.sleep(0.05)


RACE_REPORT = """========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at row_sum+0x1f0 in row_sum.cu:21:row_sum(float*, const float*, int)
=========     and Read access at row_sum+0x230 in row_sum.cu:24:row_sum(float*, const float*, int) [248 hazards]
=========
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
"""
SYNC_REPORT = """========= COMPUTE-SANITIZER
========= Barrier error detected. Divergent thread(s) in block
=========     at row_sum+0x120 in row_sum.cu:18:row_sum(float*, const float*, int)
=========     by thread (37,0,0) in block (0,0,0)
=========
========= ERROR SUMMARY: 1 error
"""


def test_racecheck_and_synccheck_reports_read_as_a_count_and_the_first_finding():
    from kerntune.engine.sanitize import parse_report

    errors, first = parse_report(RACE_REPORT, "racecheck")
    assert errors == 1 and first.startswith("Race reported between Write access at row_sum+0x1f0")
    assert "and Read access at row_sum+0x230" in first
    # racecheck's warnings (a write of the same value, say) are not races
    assert parse_report("========= RACECHECK SUMMARY: 2 hazards displayed (0 errors, 2 warnings)\n",
                        "racecheck") == (0, "")
    errors, first = parse_report(SYNC_REPORT, "synccheck")
    assert errors == 1 and first.startswith("Barrier error detected. Divergent thread(s) in block; at row_sum+0x120")


@pytest.mark.parametrize("which, report", [("racecheck", RACE_REPORT), ("synccheck", SYNC_REPORT)])
def test_each_tool_runs_by_its_name_and_its_finding_names_it(tmp_path, which, report):
    # a stand-in that prints the report only when asked for this tool
    path = tmp_path / "compute-sanitizer"
    body = "\n".join(f"echo '{line}'" for line in report.splitlines())
    path.write_text(f"#!/bin/sh\n[ \"$2\" = \"{which}\" ] || exit 3\n"
                    "while [ \"${1#-}\" != \"$1\" ]; do shift; shift; done\n\"$@\"\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    t = load_template(templates.path("vector_add"))
    clean, message = sanitize_config(t, t.problem(), t.default_config(), tool=str(path), which=which)
    assert not clean and message.startswith(f"compute-sanitizer {which}: 1 errors; ")
    with pytest.raises(SanitizeError, match="no compute-sanitizer tool"):
        sanitize_config(t, t.problem(), t.default_config(), tool=str(path), which="initcheck")
