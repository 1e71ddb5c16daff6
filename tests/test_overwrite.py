"""Nothing a user did not name for overwriting is overwritten: an existing session or import target
is refused in one line (exit 2) and left as it was, unless --force (or, for a session, --resume)
says otherwise."""

from __future__ import annotations

from pathlib import Path

from cli_support import one_line_error

from kerntune.tui.cli import main

SESSIONS = Path(__file__).resolve().parent.parent / "sessions"
RECORDED = SESSIONS / "merge_attn_states-llama7b-t4096.toml"


def test_kt_import_refuses_an_existing_file_without_force(tmp_path, capsys):
    kt = tmp_path / "kt.json"
    assert main(["kt-export", str(RECORDED), "-o", str(kt)]) == 0
    target = tmp_path / "recorded.toml"
    target.write_bytes(RECORDED.read_bytes())
    capsys.readouterr()
    err = one_line_error(capsys, ["kt-import", str(kt), "-o", str(target)])
    assert f"{target}: already exists (--force writes over it)" in err
    assert target.read_bytes() == RECORDED.read_bytes()
    assert main(["kt-import", str(kt), "-o", str(target), "--force"]) == 0
    assert target.read_bytes() != RECORDED.read_bytes()


def test_tune_refuses_an_existing_session_without_resume_or_force(tmp_path, capsys):
    target = tmp_path / "done.toml"
    target.write_bytes(RECORDED.read_bytes())
    err = one_line_error(capsys, ["tune", "vector_add", "--session", str(target), "--headless"])
    assert f"{target}: already exists (--resume continues it, --force writes over it)" in err
    err = one_line_error(capsys, ["tune", "vector_add", "--session", str(target), "--resume", "--force"])
    assert "one or the other" in err
    err = one_line_error(capsys, ["tune", "vector_add", "--agent", "rules", "--session", str(target)])
    assert "already exists" in err
    assert target.read_bytes() == RECORDED.read_bytes()
