"""Loaders under hostile input: every error is one line and exit code 2, never a traceback.

Deep nesting, NUL bytes in paths, expressions that are not finite, problems larger than the
device can hold (refused before anything is allocated), a reference outside the spec's folder,
and a fuzz test over mutated real specs and sessions (tests/fuzz_support.py; bench/fuzz.py runs
10,000 of each).
"""

import random
import re
import shutil
import textwrap
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fuzz_support
from kerntune.engine.device import DeviceLimits
from kerntune.engine.footprint import check_fits, footprint
from kerntune.engine.template import TemplateError, load_template
from kerntune.tui.cli import main

ROOT = Path(__file__).resolve().parent.parent
VECTOR_ADD = ROOT / "templates" / "vector_add"


@pytest.fixture
def spec(tmp_path):
    d = tmp_path / "va"
    shutil.copytree(VECTOR_ADD, d)
    return d / "kernel.toml"


def edit(spec: Path, old: str, new: str) -> None:
    text = spec.read_text()
    assert old in text
    spec.write_text(text.replace(old, new, 1))


def run(capsys, *argv: str) -> tuple[int, str]:
    code = main([*argv])
    err = capsys.readouterr().err
    return code, err


def one_error_line(err: str) -> str:
    assert err.count("\n") == 1 and err.startswith("kerntune: error: ") and "Traceback" not in err, err
    return err


TUNE = ("--headless", "--no-probe", "--budget", "1", "--repeats", "3")


def test_deep_nesting_in_a_spec_or_a_session_is_one_line(tmp_path, spec, capsys):
    spec.write_text(spec.read_text() + "\nx = " + "[" * 20000 + "]" * 20000 + "\n")
    code, err = run(capsys, "tune", str(spec), *TUNE)
    assert code == 2 and "nested too deeply" in one_error_line(err)
    code, err = run(capsys, "init", "--check", str(spec))
    assert code == 2 and "nested too deeply" in one_error_line(err)
    session = tmp_path / "deep.toml"
    header = (ROOT / "tests/data/sessions/vector_add.toml").read_text().split("[[event]]")[0]
    session.write_text(header + "\n[deep]\nx = " + "{a = " * 9000)
    code, err = run(capsys, "show", str(session))
    assert code == 2 and "nested too deeply" in one_error_line(err)


def test_nul_bytes_in_paths_are_one_line(tmp_path, spec, capsys):
    for argv in (["show", "a\0b.toml"], ["tune", "vector_add", "--session", "s\0.toml", *TUNE],
                 ["kt-import", "a\0b", "-o", str(tmp_path / "x.toml")]):
        code, err = run(capsys, *argv)
        assert code == 2 and "NUL byte" in one_error_line(err)
    for old, new in (('opencl = "kernel.cl"', 'opencl = "kernel\\u0000.cl"'),
                     ('reference = "reference.py"', 'reference = "ref\\u0000erence.py"')):
        shutil.copyfile(VECTOR_ADD / "kernel.toml", spec)
        edit(spec, old, new)
        code, err = run(capsys, "tune", str(spec), *TUNE)
        assert code == 2 and "a file name beside the spec" in one_error_line(err)


@pytest.mark.parametrize("where,old,new,message", [
    ("launch", 'block = ["BLOCK"]', 'block = ["BLOCK"]\nshared_bytes = "BLOCK * 1e308 * 10"',
     "[launch] is not finite for BLOCK="),
    ("literal", 'block = ["BLOCK"]', 'block = ["BLOCK"]\nshared_bytes = nan', "not a finite number"),
    ("grid", 'grid = ["ceil_div(n, BLOCK * ITEMS)"]', 'grid = ["n / (BLOCK * ITEMS) * 1e308 * 1e10"]',
     "[launch] is not finite"),
    ("cost", 'bytes = "12 * n"', 'bytes = "12 * n * 1e300 * 1e300"', "[cost.bytes] at 1M: the value is inf"),
    ("shape", 'shape = ["n"]', 'shape = ["n * 1e300 * 1e300"]', "[arg.a.shape] at 1M"),
    ("values", "values = [1, 2, 4, 8]", "values = [1, 2, 4, inf]", "finite numbers or booleans only"),
    ("tolerance", 'role = "output"', 'role = "output"\nrtol = nan', "a non-negative finite number"),
])
def test_expressions_that_are_not_finite_are_one_line_and_exit_2(spec, capsys, where, old, new, message):
    edit(spec, old, new)
    t0 = time.monotonic()
    code, err = run(capsys, "tune", str(spec), *TUNE)
    assert code == 2 and message in one_error_line(err)
    assert time.monotonic() - t0 < 30


def test_a_problem_the_device_cannot_hold_is_refused_before_allocating(capsys):
    t0 = time.monotonic()
    code, err = run(capsys, "tune", "vector_add", "--shape", "n=1000000000000", *TUNE)
    assert code == 2 and time.monotonic() - t0 < 20
    line = one_error_line(err)
    assert "vector_add at n=1000000000000 needs at least 40.0 TiB of device memory" in line

    t = load_template(VECTOR_ADD)
    problem = t.problem("1M")
    need = footprint(t, problem, 4)
    elements = (1 << 20) + 100003  # the 1M problem and the odd verification size
    # device: a, b and c, and a copy of a and b for each of the 4 input sets, float32
    assert need.device_bytes == (3 + 2 * 4) * 4 * elements
    # host: a and b for each input set, c's reference and tolerance for each (float32), c read back
    assert need.host_bytes == (2 * 4 * 4 + 4 * 2 * 4 + 4) * elements
    big = DeviceLimits("opencl", "big", global_mem_bytes=need.device_bytes)
    assert check_fits(t, problem, big, 4, host_available=need.host_bytes) == need
    with pytest.raises(TemplateError, match=r"of device memory .* small has 1\.0 KiB"):
        check_fits(t, problem, DeviceLimits("opencl", "small", global_mem_bytes=1024), 4)
    with pytest.raises(TemplateError, match=r"needs at least 74\.5 MiB of host memory .* 1\.0 MiB is available"):
        check_fits(t, problem, big, 4, host_available=1 << 20)


@pytest.mark.parametrize("ref", ["../elsewhere/reference.py", "/tmp/reference.py", "sub/../../reference.py"])
def test_the_reference_is_confined_to_the_specs_folder(tmp_path, spec, ref):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    shutil.copyfile(VECTOR_ADD / "reference.py", outside / "reference.py")
    edit(spec, 'reference = "reference.py"', f'reference = "{ref}"')
    with pytest.raises(TemplateError, match=r"\[kernel.reference\] expected a file name beside the spec"):
        load_template(spec)


def test_a_reference_in_a_folder_below_the_spec_is_used(spec):
    (spec.parent / "ref").mkdir()
    shutil.move(spec.parent / "reference.py", spec.parent / "ref" / "reference.py")
    edit(spec, 'reference = "reference.py"', 'reference = "ref/reference.py:reference"')
    t = load_template(spec)
    assert t.reference_path == (spec.parent / "ref" / "reference.py").resolve()
    assert callable(t.load_reference())


# the fuzz test: a fixed seed, a bounded budget ----------------------------------------------------

SPEC_SEEDS = [(d, (d / "kernel.toml").read_bytes()) for d in fuzz_support.SPEC_DIRS]
SESSION_SEEDS = [p.read_bytes() for p in fuzz_support.SESSIONS]
FUZZ = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@FUZZ
@given(st.integers(0, 2**32), st.sampled_from(range(len(SPEC_SEEDS))))
def test_mutated_specs_load_or_fail_in_one_line(tmp_path, seed, which):
    origin, data = SPEC_SEEDS[which]
    t0 = time.monotonic()
    fuzz_support.spec_case(fuzz_support.mutate(data, random.Random(seed)), tmp_path / f"s{which}", origin)
    assert time.monotonic() - t0 < 10


@FUZZ
@given(st.integers(0, 2**32), st.sampled_from(range(len(SESSION_SEEDS))))
def test_mutated_sessions_load_or_fail_in_one_line(tmp_path, seed, which):
    t0 = time.monotonic()
    fuzz_support.session_case(fuzz_support.mutate(SESSION_SEEDS[which], random.Random(seed)), tmp_path / "s.toml")
    assert time.monotonic() - t0 < 10


# hostile files: wrong types, sizes, links, includes, options, a reference that never returns -----

@pytest.mark.parametrize("old, new, message", [
    ('created = "2026-11-22T05:21:03Z"', "created = 2026-11-22T05:21:03Z", r"\[session\] created must be a string"),
    ('parameters = [\n    "BLOCK",', 'parameters = [\n    7,', r"\[template\] parameters must be an array of names"),
    ("\n[space.problem]\nn = 1048576\n", "\n[space.problem]\nn = nan\n", r"\[space\] problem must be a table of sizes"),
])
def test_a_session_header_field_of_the_wrong_type_is_one_line_in_every_command(tmp_path, capsys, old, new, message):
    text = (ROOT / "tests/data/sessions/vector_add.toml").read_text()
    assert old in text, old
    session = tmp_path / "s.toml"
    session.write_text(text.replace(old, new, 1))
    for argv in (["show"], ["simulate"], ["kt-export", "-o", str(tmp_path / "k.json")]):
        code, err = run(capsys, *argv, str(session))
        assert code == 2 and re.search(message, one_error_line(err)), (argv, err)


def test_a_string_longer_than_a_session_may_hold_is_one_line(tmp_path, capsys):
    text = (ROOT / "tests/data/sessions/hostile.toml").read_text()
    session = tmp_path / "s.toml"
    session.write_text(text.replace('message = "the worker died', 'message = "' + "x" * 300_000, 1))
    code, err = run(capsys, "show", str(session))
    assert code == 2 and "a string of a session may hold 262144" in one_error_line(err)


def test_a_spec_or_a_source_larger_than_it_may_be_is_one_line(spec):
    spec.write_text(spec.read_text() + "#" * (1 << 20) + "\n")
    with pytest.raises(TemplateError, match=r"more than the 1048576 such a file may hold"):
        load_template(spec)
    shutil.copyfile(VECTOR_ADD / "kernel.toml", spec)
    (spec.parent / "kernel.cl").write_text((VECTOR_ADD / "kernel.cl").read_text() + "//" * (5 << 20))
    with pytest.raises(TemplateError, match=r"\[kernel.sources.opencl\] expected a source of at most 8 MiB"):
        load_template(spec)


@pytest.mark.parametrize("link", ["kernel.cl", "reference.py", "folder"])
def test_a_link_out_of_the_spec_s_folder_is_not_followed(tmp_path, spec, link):
    outside = tmp_path / "outside"
    outside.mkdir()
    for name in ("kernel.cl", "reference.py"):
        shutil.copyfile(VECTOR_ADD / name, outside / name)
    if link == "folder":  # a folder of the spec's that is a link out of it
        (spec.parent / "sub").symlink_to(outside)
        edit(spec, 'reference = "reference.py"', 'reference = "sub/reference.py"')
        key = "kernel.reference"
    else:
        (spec.parent / link).unlink()
        (spec.parent / link).symlink_to(outside / link)
        key = "kernel.sources.opencl" if link == "kernel.cl" else "kernel.reference"
    with pytest.raises(TemplateError, match=rf"\[{key}\] expected a file in the spec's folder \(a link out of it"):
        load_template(spec)


@pytest.mark.parametrize("include, message", [
    ('"/etc/hostname"', "an `#include` of an absolute path"),
    ('"../secret.h"', "inside the spec's folder or its -I folders"),
    ("HEADER", "an `#include` of a macro"),
    ('"inc/up.h"', "inside the spec's folder or its -I folders"),  # a header that includes one outside
])
def test_includes_outside_the_spec_s_folder_need_absolute_includes(tmp_path, spec, include, message):
    (tmp_path / "secret.h").write_text("#define SECRET 1\n")
    (spec.parent / "inc").mkdir()
    (spec.parent / "inc" / "up.h").write_text('#include "../../secret.h"\n')
    source = spec.parent / "kernel.cl"
    source.write_text(f'#define HEADER "x.h"\n#include {include}\n' + source.read_text())
    with pytest.raises(TemplateError, match=rf"\[kernel.sources.opencl\] expected .*{re.escape(message)}"):
        load_template(spec)
    edit(spec, 'reference = "reference.py"', 'reference = "reference.py"\nabsolute_includes = true')
    assert load_template(spec).sources["opencl"].startswith('#define HEADER')


@pytest.mark.parametrize("option", ["--include-path=..", "-isystem..", "-ccbin=cc", "--pre-include=x.h", "-o=out"])
def test_compiler_options_that_name_files_or_other_include_folders_are_refused(spec, option):
    edit(spec, 'reference = "reference.py"', f'reference = "reference.py"\noptions = {{ opencl = ["{option}"] }}')
    with pytest.raises(TemplateError, match=r"\[kernel.options.opencl\] expected (include folders written -IDIR|compiler flags that name no file)"):
        load_template(spec)


def test_a_reference_that_never_returns_is_one_line_after_its_time_limit(spec, capsys):
    import threading

    # It spins until the test ends (a file it looks for): a thread cannot be stopped from outside,
    # and one left spinning would take this test process's time from every test after it.
    stop = spec.parent / "stop"
    spin = f"while not __import__('os').path.exists({str(stop)!r}):\n    pass\n"
    try:
        (spec.parent / "reference.py").write_text("def reference(inputs, sizes):\n" + textwrap.indent(spin, "    "))
        edit(spec, 'reference = "reference.py"', 'reference = "reference.py"\nreference_timeout = 1')
        code = main(["init", "--check", str(spec)])
        out = capsys.readouterr().out
        assert code == 1 and "the reference did not return within 1 s" in out, out
        (spec.parent / "reference.py").write_text(spin)  # its import never ends
        with pytest.raises(TemplateError, match=r"importing the reference did not return within 1 s"):
            load_template(spec).load_reference()
    finally:
        stop.write_text("")
        for t in threading.enumerate():
            if t.name.startswith("kerntune-reference"):
                t.join(10)


def _hanging_reference(spec, condition: str):
    """The spec's reference spins while `condition` (Python over `inputs` and `here`, its folder)
    holds, with a 1 s limit, at n=4096: the template and its problem."""
    (spec.parent / "reference.py").write_text(
        "from pathlib import Path\n\n\ndef reference(inputs, sizes):\n"
        "    here = Path(__file__).parent\n"
        f"    while {condition}:\n"
        "        pass\n"
        "    return {'c': inputs['a'] + inputs['b']}\n")
    edit(spec, 'reference = "reference.py"', 'reference = "reference.py"\nreference_timeout = 1')
    edit(spec, "n = 1048576", "n = 4096")
    t = load_template(spec)
    return t, t.problem()


def test_a_reference_that_never_returns_on_the_final_checks_inputs_ends_its_worker(spec):
    """The final check draws new inputs: a reference that hangs on them is one line after its time
    limit, no verdict on the configuration, and the worker it hung in ends (its call with it)."""
    from kerntune.engine.inputs import make_inputs
    from kerntune.engine.worker import Worker, WorkerSpec

    t, p = _hanging_reference(spec, "(here / 'hang_on').exists() and "
                                    "float(inputs['a'][0]) == float((here / 'hang_on').read_text())")
    seed = 4242
    (spec.parent / "hang_on").write_text(repr(float(make_inputs(t, p, seed).host["a"][0])))
    ws = WorkerSpec("opencl", 0, str(t.spec_path), t.spec_text, dict(t.sources), p.name, dict(p.values), seed=1)
    with Worker(ws, config_timeout=60) as w:
        w.start()
        w.wait_ready()
        child = w._proc
        checked = w.verify_again(t.default_config(), (seed, seed + 1))
        assert (checked.ok, checked.status, checked.ending) == (False, "", True), checked
        assert "the reference did not return within 1 s" in checked.text and "\n" not in checked.text
        child.join(10)
        assert not child.is_alive() and w._proc is None  # the next request starts a new one


def test_a_reference_that_stops_returning_during_the_search_stops_the_run_in_one_line(spec):
    """Inputs drawn during the search need the reference too: once it hangs on them, no later
    configuration can be checked and none is to blame: the worker says so and ends, and the run
    stops with that line (never a configuration `crashed` after another)."""
    from kerntune.engine.worker import ReferenceStopped, Worker, WorkerSpec

    hang, stop = spec.parent / "hang", spec.parent / "stop"
    t, p = _hanging_reference(spec, "(here / 'hang').exists() and not (here / 'stop').exists()")
    ws = WorkerSpec("opencl", 0, str(t.spec_path), t.spec_text, dict(t.sources), p.name, dict(p.values), seed=1)
    try:
        with Worker(ws, config_timeout=60) as w:
            w.start()
            w.wait_ready()
            child = w._proc
            hang.write_text("")
            configs = [{"BLOCK": b, "ITEMS": i} for b in (64, 128, 256) for i in (1, 2, 4)]
            with pytest.raises(ReferenceStopped) as e:
                for c in configs:
                    assert w.evaluate(c).status != "crashed"
            text = str(e.value)
            assert text.startswith("the template's reference failed: ReferenceTimeout: ") and "\n" not in text
            assert "did not return within 1 s" in text and text.endswith("on inputs drawn during the search")
            child.join(10)
            assert not child.is_alive() and w.pending == 0
    finally:
        stop.write_text("")


def test_init_check_refuses_to_run_the_reference_at_a_size_that_needs_gigabytes(spec, capsys):
    text = re.sub(r"\nn = \d+\n", "\nn = 1000000000\n", spec.read_text())
    spec.write_text(text)
    code = main(["init", "--check", str(spec)])
    out = capsys.readouterr().out
    assert code == 1 and "has 11.2 GiB of buffers; init --check runs the reference only up to" in out, out


def test_a_scalar_that_does_not_fit_its_dtype_and_shared_bytes_without_a_local_pointer_are_said(spec, capsys):
    text = spec.read_text().replace('block = ["BLOCK"]', 'block = ["BLOCK"]\nshared_bytes = "BLOCK * 4"')
    spec.write_text(text.replace('dtype = "int32"\nrole = "scalar"', 'dtype = "uint8"\nrole = "scalar"'))
    code = main(["init", "--check", str(spec)])
    out = capsys.readouterr().out
    assert code == 1 and "`n` is 1048576, not a uint8 value" in out
    assert "the opencl kernel has no `__local` pointer argument to take it" in out


def test_negative_shared_bytes_are_a_device_violation_not_a_launch():
    from kerntune.engine.space import Geometry, device_violation

    limits = DeviceLimits("cuda", "gpu", max_threads_per_block=1024, max_block_dims=(1024, 1024, 64),
                          max_grid_dims=(1 << 31, 65535, 65535), max_shared_per_block=49152)
    assert device_violation(Geometry((4, 1, 1), (64, 1, 1), -4), limits) == "shared memory per block < 0"
