"""Mutated specs and sessions, and what kerntune's loaders and commands must do with them.

Shared by the fuzz test (tests/test_loaders.py) and bench/fuzz.py. A mutation is a list of edits
applied to the bytes of a real spec or session: a byte flipped, the text cut, a slice
duplicated, a NUL byte or a deep nest of arrays or tables inserted. Whatever the bytes, a loader
gives a value or its own one-line error, and a command returns 0 or 2 with at most one line on
stderr; anything else (a traceback) is a failure the caller counts.
"""

from __future__ import annotations

import contextlib
import io
import random
import shutil
from pathlib import Path

from kerntune.engine.device import DeviceLimits
from kerntune.engine.expressions import ExpressionError
from kerntune.engine.footprint import check_fits
from kerntune.engine.session import SessionError, load_session
from kerntune.engine.space import SpaceError, build_space
from kerntune.engine.template import TemplateError, load_template

ROOT = Path(__file__).resolve().parent.parent
SPEC_DIRS = [ROOT / "templates" / "vector_add", ROOT / "templates" / "softmax"]
SESSIONS = [ROOT / "tests" / "data" / "sessions" / "vector_add.toml",
            ROOT / "tests" / "data" / "sessions" / "hostile.toml"]
LOADER_ERRORS = (TemplateError, SessionError, ExpressionError, SpaceError)
LIMITS = DeviceLimits("opencl", "fuzz device", global_mem_bytes=1 << 34)
MAX_CONFIGS = 20_000  # larger spaces are not enumerated here (a mutated value list can be long)


def nest(rng: random.Random) -> bytes:
    depth = rng.choice([50, 500, 5000, 50000])
    if rng.random() < 0.5:
        return b"\nx = " + b"[" * depth + b"]" * rng.choice([0, depth]) + b"\n"
    return b"\nx = " + b"{a = " * depth + b"1" + b"}" * rng.choice([0, depth]) + b"\n"


def mutate(data: bytes, rng: random.Random) -> bytes:
    """One to four random edits of `data`."""
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(6)
        i = rng.randrange(len(out) + 1)
        if op == 0 and out:  # flip a byte
            j = min(i, len(out) - 1)
            out[j] = rng.choice([out[j] ^ (1 << rng.randrange(8)), rng.randrange(256)])
        elif op == 1:  # cut
            del out[i:]
        elif op == 2 and out:  # duplicate a slice
            j = rng.randrange(len(out))
            lo, hi = sorted((i, j))
            out[i:i] = out[lo:hi][:4096]
        elif op == 3:  # deep nesting
            out[i:i] = nest(rng)
        elif op == 4:  # a NUL byte, raw or escaped in a string
            out[i:i] = rng.choice([b"\0", b"\\u0000"])
        else:  # a line of a number TOML knows but no size can be
            out[i:i] = rng.choice([b"\nshared_bytes = inf\n", b"\nn = 1" + b"0" * rng.randrange(1, 40) + b"\n",
                                   b"\"1e308 * 1e308\"", b"nan", b"-inf"])
        if not out:
            break
    return bytes(out)


def spec_case(data: bytes, where: Path, source_dir: Path) -> None:
    """Load a mutated spec (with its sources beside it) as `tune` would up to allocating."""
    where.mkdir(parents=True, exist_ok=True)
    for f in source_dir.iterdir():
        if f.name != "kernel.toml" and f.is_file() and not (where / f.name).exists():
            shutil.copyfile(f, where / f.name)
    spec = where / "kernel.toml"
    spec.write_bytes(data)
    try:
        t = load_template(spec)
        for p in t.problems:
            problem = t.problem(p.name or None)
            check_fits(t, problem, LIMITS, 4, host_available=1 << 34)
            total = 1
            for param in t.parameters:
                total *= len(param.values)
            if total <= MAX_CONFIGS:
                build_space(t, problem, LIMITS)
    except LOADER_ERRORS as e:
        one_line(str(e))
    command(["init", "--check", str(spec)])


def session_case(data: bytes, path: Path) -> None:
    """Load a mutated session, summarise it, and show it, simulate it and export it as the
    commands do."""
    path.write_bytes(data)
    commands = [["show"], ["show", "--json"]]
    try:
        s = load_session(path)
        s.summary()
    except LOADER_ERRORS as e:
        one_line(str(e))
    else:  # (a session that does not load fails every command the same way, at its load)
        commands += [["show", "--failed"], ["show", "--csv"], ["show", "--source"], ["simulate", "--seed", "1"],
                     ["kt-export", "--force", "-o", str(path.with_suffix(".json"))]]
    for argv in commands:
        command([*argv, str(path)])


def command(argv: list[str]) -> None:
    from kerntune.tui.cli import main

    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main(argv)
    if code not in (0, 1, 2):
        raise AssertionError(f"kerntune {' '.join(argv)} exited {code}")
    errors = [line for line in err.getvalue().splitlines() if not line.startswith("warning: ")]
    if len(errors) > 1 or (errors and not errors[0].startswith("kerntune: error: ")):
        raise AssertionError(f"kerntune {' '.join(argv)} wrote {err.getvalue()!r}")


def one_line(message: str) -> None:
    if "\n" in message or not message:
        raise AssertionError(f"not one line: {message!r}")
