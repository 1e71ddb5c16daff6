"""Small things real files showed: names, options the spec already gives, the rules' own pragma
line, what `show` and the headless log say once, and a run cut by a signal."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from cli_support import wait_for_evaluations

from kerntune.agents.kernel_tree import classify
from kerntune.agents.lift import fresh_name
from kerntune.agents.rules import rules_template
from kerntune.engine.device import DeviceLimits
from kerntune.engine.events import LoopStarted, RunStarted
from kerntune.engine.session import CUT, SessionWriter, load_session, new_header
from kerntune.engine.template import parse_template

HERE = Path(__file__).resolve().parent
VARIANTS = HERE / "data" / "variants"
CPU = DeviceLimits("opencl", "cpu", max_threads_per_block=4096, warp_size=1)
GPU = DeviceLimits("cuda", "gpu", max_threads_per_block=1024, warp_size=32, sm_count=132)


def test_a_fresh_name_never_doubles_a_size_suffix():
    assert fresh_name("VEC_SIZE", {"VEC_SIZE"}) == "KT_VEC_SIZE"
    assert fresh_name("VEC", {"VEC"}) == "VEC_SIZE"


def test_fast_math_is_not_offered_where_the_spec_already_builds_with_it():
    path = VARIANTS / "softmax.toml"
    text = path.read_text().replace('sources = { opencl = "softmax.cl" }',
                                    'sources = { opencl = "softmax.cl" }\noptions = { opencl = ["-cl-fast-relaxed-math"] }')
    plain = rules_template(parse_template(path.read_text(), path), "opencl", CPU).proposal
    fast = rules_template(parse_template(text, path), "opencl", CPU)
    assert "FAST_MATH" in [p.name for p in plain.parameters]
    assert "FAST_MATH" not in [p.name for p in fast.proposal.parameters]
    assert any("already builds with -cl-fast-relaxed-math" in d.reason for d in fast.applied.declined)


def test_the_rules_read_their_own_unroll_pragma_line():
    path = VARIANTS / "layernorm.toml"
    src = (VARIANTS / "layernorm.cu").read_text()
    t = parse_template(path.read_text().replace('entry = "layernorm_rows"', 'entry = "layernorm_warps"'), path)
    made = rules_template(t, "cuda", GPU).proposal
    lifted = made.sources["cuda"]
    assert "KERNTUNE_PRAGMA(unroll" in lifted and src != lifted
    a = classify(lifted, "layernorm_warps")
    assert not any("could not read" in r for r in a.reasons), a.reasons
    # the template of the template lifts nothing twice: its counts are parameters already
    again = parse_template(path.read_text().replace('entry = "layernorm_rows"', 'entry = "layernorm_warps"'),
                           path, sources={"cuda": lifted})
    second = rules_template(again, "cuda", GPU).proposal
    assert [p.name for p in second.parameters] == [p.name for p in made.parameters] == ["BLOCK", "UNROLL", "UNROLL_2"]


def test_a_session_whose_run_never_finished_says_it_was_cut(tmp_path):
    header = new_header(command=["kerntune"], device={"name": "d"}, template={"name": "x", "backend": "opencl"},
                        space={}, tuning={})
    with SessionWriter(tmp_path / "s.toml", header) as w:
        w.write(LoopStarted(0.0, "rules", 3, 0.9, "", 24))
        w.write(RunStarted(0.1, "x", {"n": 1}, "small", "opencl", "d", "grid"))
    assert load_session(tmp_path / "s.toml").finished().reason == CUT


def _children(pid: int) -> set[int]:
    out = set()
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                out.add(int(d.name))
    return out


def test_sigterm_cuts_the_run_records_why_and_leaves_no_child(tmp_path):
    session = tmp_path / "s.toml"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "kerntune.tui.cli", "tune", str(VARIANTS / "softmax.toml"),
                             "--agent", "rules", "--rounds", "3", "--budget", "40", "--backend", "opencl",
                             "--headless", "--no-probe", "--session", str(session)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        wait_for_evaluations(session, 2)
        children = _children(proc.pid)
        assert children  # the evaluation worker, at least
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, (out[-800:], err[-800:])
    assert "cut: the run was terminated (SIGTERM)" in err
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and any(Path(f"/proc/{c}").exists() and
                                              "Z" not in (Path(f"/proc/{c}/stat").read_text().split()[2:3] or [""])
                                              for c in children):
        time.sleep(0.2)
    assert not [c for c in children if Path(f"/proc/{c}").exists()], "a child outlived its tune"
    assert load_session(session).finished().reason.startswith("cut:")
