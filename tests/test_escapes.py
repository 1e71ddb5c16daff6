"""Files are data, never commands: a session whose strings hold terminal escapes (window title,
OSC 52 clipboard write, hyperlink, clear screen, bell, C1 CSI, carriage return, a bidirectional
override) is printed by every command and the dashboard with those characters escaped; a name
from a file never chooses the folder an export is written to."""

from __future__ import annotations

import asyncio
import io
import re
import sys
from pathlib import Path

import pytest

from kerntune.engine.session import file_stem, load_session
from kerntune.tui.cli import main
from kerntune.tui.terminal import GuardedStream, printable, printable_source
from tui_support import HOSTILE

# TOML escapes of: OSC 0 (title), OSC 52 (clipboard), OSC 8 (hyperlink), CSI 2J (clear), BEL,
# C1 CSI (U+009B), CR, a right-to-left override; then markup a Rich console would read as a link
PAYLOAD = (r"\u001b]0;PWNED\u0007\u001b]52;c;cHduZWQ=\u0007\u001b]8;;http://evil/\u001b\\"
           r"link\u001b]8;;\u001b\\\u001b[2J\u0007\u009b31m\rFAKE\u202e[link=http://evil/]x[/link]")
# what must never reach the terminal raw: every control character but a line break or tab
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202e]")


def test_printable_escapes_every_control_character_and_keeps_the_rest():
    assert printable("a\x1b]0;t\x07b") == "a\\x1b]0;t\\x07b"
    assert printable("\u009b2J\r\n\t\u202e\u2028é µs") == "\\x9b2J\\x0d\\x0a\\x09\\u202e\\u2028é µs"
    assert printable_source("int a;\r\n\tb;\x1b[2J\n") == "int a;\n\tb;\\x1b[2J\n"
    assert printable(printable("\x1b")) == printable("\x1b")  # escaping twice changes nothing


def test_the_guarded_stream_escapes_what_is_written_but_line_breaks_and_the_progress_line():
    out = io.StringIO()
    GuardedStream(out).write("[###] 3/4\r[####] 4/4\n\x1b]52;c;eA==\x07\x1b[1mbold\x1b[0m\n")
    # not a terminal: no colour sequence is let through either
    assert out.getvalue() == "[###] 3/4\r[####] 4/4\n\\x1b]52;c;eA==\\x07\\x1b[1mbold\\x1b[0m\n"


@pytest.fixture(scope="module")
def hostile_session(tmp_path_factory) -> Path:
    """The recorded hostile session with the payload in its free-text fields and its template's
    name a path out of the working folder."""
    text = HOSTILE.read_text()
    for field in ("message", "text", "description", "driver", "created"):
        text = text.replace(f'\n{field} = "', f'\n{field} = "{PAYLOAD}')
    text = text.replace('\nname = "pthread-', f'\nname = "{PAYLOAD}pthread-')
    text = text.replace('\nname = "hostile"\n', f'\nname = "../../escaped{PAYLOAD}"\n', 1)
    text = text.replace('source = "// MODE 0', f'source = "// {PAYLOAD}\\n// MODE 0')
    path = tmp_path_factory.mktemp("escapes") / "hostile.toml"
    path.write_text(text)
    load_session(path)  # the payload is data the loader keeps
    return path


def _run(capsys, *argv: str) -> str:
    assert main(list(argv)) == 0
    out, err = capsys.readouterr()
    return out + err


@pytest.mark.parametrize("extra", [(), ("--failed",), ("--csv",), ("--source",), ("--json",)],
                         ids=["show", "failed", "csv", "source", "json"])
def test_show_prints_every_string_of_a_session_escaped(capsys, hostile_session, extra):
    text = _run(capsys, "show", str(hostile_session), *extra)
    assert not RAW.search(text), repr(RAW.search(text))
    assert re.search(r"\\(x1b|u001b)\]52;c;cHduZWQ=", text)  # the strings are shown, escaped
    assert "\x1b" not in text and "\x9b" not in text


def test_simulate_replay_and_kt_export_print_escaped(capsys, hostile_session, tmp_path, monkeypatch):
    monkeypatch.setenv("KERNTUNE_HEADLESS", "1")
    for argv in (["simulate", str(hostile_session), "--strategy", "random", "--seed", "1"],
                 ["replay", str(hostile_session)],
                 ["kt-export", str(hostile_session), "-o", str(tmp_path / "kt.json")]):
        text = _run(capsys, *argv)
        assert not RAW.search(text), (argv[0], repr(RAW.search(text)))
    assert "\\x1b]52;c" in text or argv[0] == "kt-export"
    assert not RAW.search((tmp_path / "kt.json").read_text())


def test_an_error_naming_a_file_s_string_is_one_escaped_line(capsys, tmp_path):
    bad = tmp_path / "bad\x1b]0;t\x07.toml"
    bad.write_text("[session]\nformat = 1\n")
    assert main(["show", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and not RAW.search(err) and "\\x1b]0;t\\x07" in err


def test_a_name_from_a_file_is_a_plain_file_name_in_the_working_folder():
    assert file_stem("../../etc/passwd") == "_.._etc_passwd"
    assert file_stem("/abs\x1b[2J") == "_abs__2J"
    assert file_stem("....") == "kernel" and len(file_stem("x" * 10_000)) == 80
    assert Path(file_stem("a/b")).name == file_stem("a/b")


def test_the_dashboard_shows_a_hostile_session_escaped_and_exports_in_the_working_folder(
        hostile_session, tmp_path, monkeypatch):
    from kerntune.tui.app import replay_app
    from kerntune.tui.widgets.prompt import PathPrompt
    from textual.widgets import Input

    monkeypatch.chdir(tmp_path)
    screens = []

    async def go():
        app = replay_app(load_session(hostile_session), paused=True)
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.press("greater_than_sign", "f", "3")
            await pilot.pause(0.2)
            screens.append(app.screen_text())
            await pilot.press("1", "end", "enter")  # the last failure's details
            await pilot.pause(0.2)
            screens.append(app.screen_text())
            await pilot.press("escape", "4", "v")  # the template diff, then a configuration's source
            await pilot.pause(0.2)
            screens.append(app.screen_text())
            await pilot.press("escape", "j")
            assert isinstance(app.screen, PathPrompt)
            screens.append(app.screen_text())
            default = app.screen.query_one(Input).value
            await pilot.press("enter")
            await pilot.pause(0.2)
            return default

    default = asyncio.run(go())
    assert Path(default).name == default and default.startswith("_.._escaped")
    assert [p.name for p in tmp_path.iterdir()] == [default]  # written in the working folder, nowhere else
    for text in screens:
        assert not RAW.search(text), repr(RAW.search(text))
    assert any("\\x1b]52;c" in text for text in screens)
