"""memcheck's child started ahead: the job reaches it on standard input, its answer comes back."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
import time
from dataclasses import asdict, replace
from pathlib import Path

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


def emulated_tool(tmp_path, guilty: dict[str, set[int]], hang: int | None = None,
                  forger: int | None = None) -> tuple[str, Path]:
    """A stand-in for compute-sanitizer that runs no program: it reads the job and the list of
    configurations the child would, says which it begins and ends as the child does, reports a
    finding for each configuration whose MODE is guilty for its tool (memcheck's ends the child,
    as a fault ends its CUDA context), hangs on MODE `hang`, prints what a kernel's printf could
    (the child's lines without their word, a clean summary) on MODE `forger`, and logs every MODE
    it was given."""
    log = tmp_path / "runs.log"
    path = tmp_path / "compute-sanitizer"
    path.write_text(f"""#!{sys.executable}
import json, sys, time
which = sys.argv[sys.argv.index("--tool") + 1]
guilty = {json.dumps({k: sorted(v) for k, v in guilty.items()})}.get(which, [])
sys.stdin.readline()
given = json.loads(sys.stdin.readline())
configs, nonce = given["configs"], given["nonce"]
with open({str(log)!r}, "a") as f:
    f.write(which + " " + " ".join(str(c["config"].get("MODE")) for c in configs) + "\\n")
errors = 0
for i, c in enumerate(configs):
    print("kerntune-check-started", nonce, i, flush=True)
    mode = c["config"].get("MODE")
    if mode == {forger!r}:
        for k in range(len(configs)):
            print("kerntune-check-done", k, flush=True)
        print("========= ERROR SUMMARY: 0 errors", flush=True)
    if mode == {hang!r}:
        time.sleep(60)
    if mode in guilty:
        errors += 1
        print("========= Invalid __global__ write of size 4 bytes" if which == "memcheck"
              else "========= Error: Race reported between Write access and Read access", flush=True)
        if which == "memcheck":
            print("kerntune-profile-error: LaunchError: unspecified launch failure", flush=True)
            break
    print("kerntune-check-done", nonce, i, flush=True)
if which == "racecheck":
    print(f"========= RACECHECK SUMMARY: {{errors}} hazards displayed ({{errors}} errors, 0 warnings)")
else:
    print(f"========= ERROR SUMMARY: {{errors}} errors")
""")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path), log


@pytest.mark.parametrize("which", ["memcheck", "racecheck"])
def test_one_child_checks_every_configuration_and_a_finding_is_pinned_to_its_own(tmp_path, which):
    from kerntune.engine.sanitize import sanitize_configs

    t = load_template(templates.path("vector_add"))
    tool, log = emulated_tool(tmp_path, {which: {5, 7}})
    clean = [{"MODE": m} for m in (0, 1, 2, 3)]
    assert all(v == (True, f"compute-sanitizer {which}: 0 errors")
               for v in sanitize_configs(t, t.problem(), clean, tool=tool, which=which))
    assert len(log.read_text().splitlines()) == 1  # one child for the four
    log.unlink()
    modes = (0, 5, 1, 2, 7, 3)
    found = sanitize_configs(t, t.problem(), [{"MODE": m} for m in modes], tool=tool, which=which)
    for mode, verdict in zip(modes, found):
        assert verdict[0] == (mode not in (5, 7)), (mode, verdict)
    assert "1 errors" in found[1][1]
    runs = log.read_text().splitlines()
    # halved down to each finding, and what memcheck's fault left unchecked checked apart
    assert len(runs) < 2 * len(modes), runs


def test_a_configuration_that_never_finishes_is_one_line_and_the_others_are_checked(tmp_path):
    from kerntune.engine.sanitize import sanitize_configs

    t = load_template(templates.path("vector_add"))
    tool, _ = emulated_tool(tmp_path, {}, hang=9)
    found = sanitize_configs(t, t.problem(), [{"MODE": m} for m in (0, 9, 1)], tool=tool, timeout=3)
    assert found[0][0] and found[2][0], found
    assert found[1] == "compute-sanitizer memcheck could not check MODE=9: it did not finish within 3 s"


def test_the_child_checks_a_list_of_configurations_in_turn_and_says_which_it_began_and_ended():
    from kerntune.engine.profile import DONE, STARTED

    t = load_template(templates.path("vector_add"))
    p = t.problem()
    job = replace(job_for(t, type(p)("small", {"n": 4096}), None), launches=1, backend="opencl")
    listed = [{"config": {"BLOCK": 64, "ITEMS": 1}, "original": False}, {"config": {}, "original": True},
              {"config": {"BLOCK": 128, "ITEMS": 4}, "original": False}]
    given = json.dumps(asdict(job)) + "\n" + json.dumps({"configs": listed, "nonce": "n0"}) + "\n"
    done = subprocess.run([sys.executable, "-m", "kerntune.engine.profile", "--target", "-"], input=given,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.split() == [w for i in range(3) for w in (STARTED, "n0", str(i), DONE, "n0", str(i))]


def test_the_run_checks_its_leaders_with_one_child_a_tool_and_demotes_only_the_guilty(tmp_path):
    from kerntune.engine.result import Result
    from kerntune.engine.tune import TuneOptions, TuneRun

    tool, log = emulated_tool(tmp_path, {"memcheck": {5}, "racecheck": {7}})
    t = load_template(templates.path("vector_add"))
    events = []
    run = TuneRun(t, TuneOptions(backend="cuda", session_path=tmp_path / "s.toml"), sinks=[events.append])
    modes = (0, 5, 7, 1, 2)
    results = [Result(config={"MODE": m}, status="ok", median_us=1.0 + m) for m in modes]
    # a child of each tool started ahead (while the winner is checked) takes the group
    run._group_ahead = started = run._started_ahead(tool, t, t.problem())
    assert sorted(started) == ["memcheck", "racecheck", "synccheck"]
    assert run._sanitize_each(tool, t, t.problem(), results, list(range(len(modes)))) == 2
    assert [r.status for r in results] == ["ok", "out_of_bounds", "wrong_result", "ok", "ok"]
    assert run._group_ahead == {} and all(s._proc.returncode is not None for s in started.values())
    runs = log.read_text().splitlines()
    assert sorted(runs)[-1] == "synccheck 0 5 7 1 2" and sum(r.startswith("synccheck") for r in runs) == 1
    # children started ahead and not needed end at once, told together
    run._group_ahead = started = run._started_ahead(tool, t, t.problem())
    run._close_ahead()
    assert all(s._proc.returncode is not None for s in started.values()) and len(log.read_text().splitlines()) == len(runs)


def test_a_kernel_printing_the_childs_lines_or_a_clean_summary_hides_nothing(tmp_path):
    from kerntune.engine.sanitize import sanitize_configs

    t = load_template(templates.path("vector_add"))
    tool, _ = emulated_tool(tmp_path, {"memcheck": {8}}, forger=8)
    found = sanitize_configs(t, t.problem(), [{"MODE": m} for m in (0, 8, 1)], tool=tool)
    assert [v[0] for v in found] == [True, False, True], found
