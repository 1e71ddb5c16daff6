"""Session files: written event by event, loaded back exactly, and every bad file is one line."""

import gc
import math
import tomllib
from pathlib import Path

import pytest
import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kerntune.engine.events import (
    BestImproved,
    ConfigEvaluated,
    Note,
    RunFinished,
    RunStarted,
    SpaceBuilt,
    WinnerVerified,
)
from kerntune.engine.result import Resources, Result
from kerntune.engine import session as session_module
from kerntune.engine.session import SessionError, SessionWriter, _clean, load_session, new_header, parse_session_text


def header():
    return new_header(
        command=["kerntune", "tune", "x"],
        device={"name": "test device", "backend": "opencl"},
        template={"name": "x", "backend": "opencl", "default_config": {"B": 1}, "spec": "a\n[[event]]\nb",
                  "source": "__kernel void x() {}\n"},
        space={"problem": {"n": 10}, "total": 2, "feasible": 2, "pruned": {"B * 2 > n": 0}},
        tuning={"strategy": "grid", "seed": 3},
    )


def events():
    ok = Result(config={"B": 1}, status="ok", times_us=(1.5, 1.25, 1.75), median_us=1.5, spread=0.1,
                resources=Resources(registers=12), seeds=(1, 2), grid=(4, 1, 1), block=(64, 1, 1),
                sol_us=1.0, sol_fraction=0.66)
    bad = Result(config={"B": 2}, status="wrong_result", message="c: 5 of 10 elements are NaN")
    return [
        RunStarted(0.0, "x", {"n": 10}, "small", "opencl", "test device", "grid", 0, 0.0, 3, 0),
        SpaceBuilt(0.1, 2, 2, {}),
        Note(0.2, "hello \"quoted\" and\nnewline"),
        ConfigEvaluated(0.5, 0, ok),
        BestImproved(0.5, 0, {"B": 1}, 1.5, 0.66, 1.0),
        ConfigEvaluated(0.9, 1, bad),
        WinnerVerified(1.0, {"B": 1}, True, "", (7, 8)),
        RunFinished(1.1, "space exhausted", 2, 1, {"B": 1}, 1.5),
    ]


def write(path, evs=None):
    with SessionWriter(path, header()) as w:
        for ev in evs if evs is not None else events():
            w.write(ev)
    return path


def test_a_session_round_trips_every_event_exactly(tmp_path):
    s = load_session(write(tmp_path / "s.toml"))
    assert s.events == events()
    assert s.warnings == []
    assert s.template["spec"] == "a\n[[event]]\nb"


def test_summary_reports_best_default_and_failures(tmp_path):
    s = load_session(write(tmp_path / "s.toml"))
    summary = s.summary()
    assert summary["evaluated"] == 2 and summary["verified"] == 1
    assert summary["failed"] == {"wrong_result": 1}
    assert summary["best"]["config"] == {"B": 1} and summary["best"]["median_us"] == 1.5
    assert summary["default"]["median_us"] == 1.5 and summary["speedup"] == 1.0


def test_a_file_cut_anywhere_in_its_last_event_loads_without_it(tmp_path):
    full = write(tmp_path / "full.toml").read_text()
    last = full.rindex("[[event]]")
    n_events = len(events())
    for cut in range(last + 1, len(full) - 1, 7):
        p = tmp_path / "cut.toml"
        p.write_text(full[:cut])
        s = load_session(p)
        assert len(s.events) in (n_events - 1, n_events)
        if len(s.events) == n_events - 1:
            assert s.warnings and "dropped" in s.warnings[0]


def test_a_cut_in_the_middle_event_keeps_the_ones_before(tmp_path):
    full = write(tmp_path / "full.toml").read_text()
    fourth = [i for i in range(len(full)) if full.startswith("\n[[event]]\n", i)][3]
    p = tmp_path / "cut.toml"
    p.write_text(full[: fourth + 40])
    s = load_session(p)
    assert s.events == events()[:3]


def _bad(tmp_path, text):
    p = tmp_path / "bad.toml"
    p.write_text(text)
    with pytest.raises(SessionError) as info:
        load_session(p)
    assert "\n" not in str(info.value) and str(p) in str(info.value)
    return str(info.value)


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (lambda t: t.replace('format = "kerntune-session"', 'format = "other"'), "format is 'other'"),
        (lambda t: t.replace("version = 1", "version = 99"), "newer than this kerntune reads"),
        (lambda t: t.replace("version = 1", 'version = "1"'), "version must be an integer"),
        (lambda t: t.replace("[session]", "[sessio]"), "[session] table missing"),
        (lambda t: t.replace('kind = "note"', 'kind = "explode"'), "event 3: unknown event kind 'explode'"),
        (lambda t: t.replace('reason = "space exhausted"\n', "").replace("[[event]]\nkind = \"winner_verified\"",
                                                                         "[[event]]\nkind = \"run_finished\"", 1),
         "event 7"),
        (lambda t: t.replace('status = "wrong_result"', 'status = "fine"'), "unknown status 'fine'"),
        (lambda t: t.replace("median_us = 1.5\n", 'median_us = "fast"\n', 1), "event 4: config_evaluated event field `result`: median_us must be a number"),
        (lambda t: t.replace("registers = 12\n", "registers = inf\n"), "event 4: config_evaluated event field `result`: resources must be finite numbers"),
        (lambda t: "garbage = = =\n" + t, "not a valid session file"),
    ],
)
def test_malformed_sessions_give_one_line(tmp_path, mutate, expected):
    text = write(tmp_path / "s.toml").read_text()
    changed = mutate(text)
    assert changed != text
    assert expected in _bad(tmp_path, changed)


def test_reading_a_session_leaves_the_cycle_collector_running_and_nothing_frozen(tmp_path):
    load_session(write(tmp_path / "s.toml"))
    assert gc.isenabled() and gc.get_freeze_count() == 0
    gc.disable()
    try:  # a caller that paused the collector finds it paused still
        load_session(tmp_path / "s.toml")
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_missing_and_binary_files_are_one_line(tmp_path):
    with pytest.raises(SessionError, match="no such file"):
        load_session(tmp_path / "none.toml")
    p = tmp_path / "bin.toml"
    p.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(SessionError, match="not a text file"):
        load_session(p)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_fuzzed_sessions_load_or_fail_with_one_line(tmp_path, data):
    text = write(tmp_path / "s.toml").read_text()
    lines = text.splitlines()
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, len(lines) - 1))
        action = data.draw(st.sampled_from(["drop", "garble", "swap"]))
        if action == "drop":
            del lines[i]
        elif action == "garble":
            lines[i] = data.draw(st.text(max_size=40))
        else:
            j = data.draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        if not lines:
            lines = [""]
    p = tmp_path / "f.toml"
    p.write_text("\n".join(lines))
    try:
        s = load_session(p)
    except SessionError as e:
        assert "\n" not in str(e)
    else:
        s.summary()  # whatever loaded can be summarised


# The fast reader of large sessions reads exactly what tomllib reads -----------------------------

SESSION_FILES = sorted((Path(__file__).parent.parent / "sessions").glob("*.toml")) + sorted(
    (Path(__file__).parent / "data" / "sessions").glob("*.toml"))


def _ordered(v):
    """A value with every table's key order made part of it (dict equality ignores order)."""
    if isinstance(v, dict):
        return [(k, _ordered(x)) for k, x in v.items()]
    if isinstance(v, list):
        return [_ordered(x) for x in v]
    if isinstance(v, float) and math.isnan(v):
        return "nan"
    return (type(v).__name__, v)


@pytest.mark.parametrize("path", SESSION_FILES, ids=lambda p: p.stem)
def test_the_fast_reader_reads_every_recorded_session_as_tomllib_does(path):
    text = path.read_text(encoding="utf-8")
    start = session_module._EVENT_HEADER.search(text).start()
    fast = session_module._fast_events(text, start)  # no silent fallback to tomllib here
    assert _ordered(fast) == _ordered(tomllib.loads(text)["event"])
    assert _ordered(parse_session_text(text)) == _ordered(tomllib.loads(text))


def _event_text(body: str) -> str:
    return tomli_w.dumps(_clean(dict(header()))) + "\n[[event]]\nkind = \"note\"\nt = 0.5\n" + body + "# end\n"


@pytest.mark.parametrize("body", [
    'text = "tab\\there \\u00e9 \\"q\\" inf nan"\n',  # escapes: read one by one
    'text = "x"\nextra = [inf, -inf, 1.5, -0, 0.0, 1e5, 2E-3, "s", true]\n',
    'text = "x"\nvalues = [\n    1,\n    2.5,\n    "three",\n    nan,\n]\n',
    '"quoted key" = 1\n"a = b" = "c = d"\ntext = ""\n',
    'text = "x"\n[event.sub]\na = [\n]\nb = []\n[event.sub.deeper]\nc = 1\n',
    'text = "comment # inside"\n# a comment, with a comma,\n\ntext2 = "y"\n',
    'text = "a = b"\nn = 1\n\n\nm = [\n    "c = d",\n]\n',  # " = " inside values
    'text = "x"\n[event.sub]\na = 1\n[event.other]\nb = 2\n[event.sub.deeper]\nc = 3\n',  # back to a table
    'inf_fraction = 0.5\ntext = "info"\n',  # inf and nan in words, not values
    # arrays of numbers one a line, and other layouts of them
    'text = "x"\nv = [\n    1,\n    -2.5e3,\n    0.125,\n]\nw = [\n]\n',
    'text = "x"\nv = [\n    1,2 ,\n    3\n    ,4,\n]\n',
    'text = "x"\nv = [\n     1,\n    2,\n]\n',
    'text = "x"\nv = [\n    1,\n2,\n]\nw = 1\n',
    'text = "x"\nv = [\n    1,\n\n    2,\n]\n',
    'text = "x"\nv = [\n    1\n]\n',
    'text = "x"\nv = [\n    +1,\n    1e5,\n    2E-3,\n    -0,\n]\n',
])
def test_the_fast_reader_reads_what_tomli_w_writes_and_more(body):
    text = _event_text(body)
    assert _ordered(parse_session_text(text)) == _ordered(tomllib.loads(text))


@pytest.mark.parametrize("body", [
    "text = 01\n",  # a leading zero
    "text = 1.\n",
    "text = .5\n",
    "text = 1e\n",
    "text = +-1\n",
    "text = 1.2.3\n",
    "text = [1.2.3]\n",
    "values = [\n    1,\n    --2,\n]\ntext = \"x\"\n",
    'text = "a"\ntext = "b"\n',  # a key defined twice
    '"text" = "a"\ntext = "b"\n',
    'text = "a"\n[event.sub]\nx = 1\n[event.sub]\ny = 2\n',  # a table defined twice
    'text = "a"\nsub = 1\n[event.sub]\nx = 1\n',
    'text = "a"\n[event.sub]\nx = 1\n[event.sub.x]\ny = 2\n',  # a table over a key
    'text = "a"\n# between\ntext = "b"\n',  # a key defined twice, a comment between
    'text = "bad \\q escape"\n',
    'text = "control \x7f char"\n',
    "text = null\n",
    'text = "x"\nv = {"a": 1}\n',
    "values = [\n    ,\n]\n",  # arrays of numbers one a line, broken
    "values = [\n    1,\n    ,\n]\n",
    "values = [\n    1 2,\n]\n",
    "values = [\n    1,,\n]\n",
    "values = [\n    1.,\n]\n",
    "values = [\n    1,\n    2\n    3,\n]\n",
])
def test_the_fast_reader_refuses_what_tomllib_refuses(body):
    text = _event_text(body)
    with pytest.raises(tomllib.TOMLDecodeError):
        tomllib.loads(text)
    with pytest.raises(tomllib.TOMLDecodeError):
        parse_session_text(text)


@pytest.mark.parametrize("body", [
    "text = 'literal'\n",
    'text = """multi\nline"""\n',
    "  text = \"indented\"\n",
    "text = \"x\"\na.b = 1\n",
    "text = \"x\"\n[event.sub.implicit]\ny = 2\n[event.sub]\nz = 3\n",
    'text = "x"\nv = [[1, 2], [3]]\n',
    "text = \"x\"\nwhen = 1979-05-27T07:32:00Z\n",
    "text = \"x\"\nn = 1_000\n",
])
def test_the_fast_reader_hands_the_rest_of_toml_to_tomllib(body):
    text = _event_text(body)
    start = session_module._EVENT_HEADER.search(text).start()
    with pytest.raises(session_module._NotFast):
        session_module._fast_events(text, start)
    assert _ordered(parse_session_text(text)) == _ordered(tomllib.loads(text))


_ITEMS = st.sampled_from(["1", "25", "-3", "0.5", "3e-2", "1E5", "-0", "+1", "1.", ".5", "", "1e", "01", "1 2"])
_BETWEEN = st.sampled_from([",\n    ", ",\n    ", ", ", " ,\n    ", ",\n", "\n    ,", ",,\n    ", "\n    ", ",\n\n    "])


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(["[\n    ", "[\n    ", "[\n", "[\n     ", "[", "[\n\n    "]),
       st.lists(st.tuples(_ITEMS, _BETWEEN), max_size=4),
       st.sampled_from([",\n]", ",\n]", "\n]", "]", ",]", ",\n\n]", " ,\n]"]))
def test_the_fast_reader_reads_arrays_of_numbers_in_any_layout_as_tomllib_does(start, items, end):
    # an array of numbers one a line, as tomli_w writes it ("[\n    1,\n    2,\n]"), in other layouts
    array = start + "".join(item + sep for item, sep in items[:-1]) + (items[-1][0] if items else "") + end
    text = _event_text(f'text = "x"\nv = {array}\nw = 2\n')
    try:
        expected = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        with pytest.raises(tomllib.TOMLDecodeError):
            parse_session_text(text)
    else:
        assert _ordered(parse_session_text(text)) == _ordered(expected)
