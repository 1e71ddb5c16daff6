"""`kerntune export`: a C++/CUDA header that compiles, Kernel Tuner's T4 results, the leaderboard
as JSON; and the spec's expressions written as C++ compute what kerntune computes."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from kerntune.engine.cexpr import PRELUDE, to_cpp
from kerntune.engine.export import ExportError, Shipped, c_name, c_value, export_header, export_json, export_t4
from kerntune.engine.expressions import evaluate
from kerntune.engine.result import ranked
from kerntune.engine.session import load_session
from kerntune.tui.cli import main

from cli_support import one_line_error
from conftest import DATA, needs_nvcc

ROOT = DATA.parent.parent
SILU = ROOT / "sessions" / "silu_and_mul-llama7b-t2048.toml"  # recorded on an H100
HOSTILE = DATA / "sessions" / "hostile.toml"  # recorded on PoCL, with failures of several kinds

EXPRESSIONS = ["ceil_div(n, BLOCK * VEC)", "n // BLOCK", "-n // BLOCK", "n % BLOCK", "-n % BLOCK",
               "n / 8", "min(n / 8, 1024)", "max(1, n // 3, BLOCK)", "BLOCK if n > 100 else 2 * BLOCK",
               "BLOCK == 32 or (n > 5 and not VEC == 2)", "1 < VEC <= 4", "2 ** VEC + (n >> 2) + (n & 7)",
               "round_up(n, 96)", "log2(BLOCK)", "is_pow2(n) + is_pow2(BLOCK)", "abs(3 - n)", "~VEC ^ 5 | 8",
               "true + False"]


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_expressions_written_as_cpp_compute_what_kerntune_computes(tmp_path):
    envs = [{"n": 1000, "BLOCK": 32, "VEC": 2}, {"n": 4096, "BLOCK": 256, "VEC": 8}, {"n": 7, "BLOCK": 1, "VEC": 1}]
    body = []
    for i, env in enumerate(envs):
        for expr in EXPRESSIONS:
            body.append(f'    std::printf("%.17g\\n", {to_cpp(expr, lambda name: str(env[name]))});')
    program = tmp_path / "e.cpp"
    program.write_text("#include <cmath>\n#include <cstdio>\n" + PRELUDE + "int main() {\n" + "\n".join(body)
                       + "\n    return 0;\n}\n")
    subprocess.run(["g++", "-O1", "-o", str(tmp_path / "e"), str(program)], check=True, capture_output=True)
    printed = subprocess.run([str(tmp_path / "e")], check=True, capture_output=True, text=True).stdout.split()
    expected = [float(evaluate(expr, env)) for env in envs for expr in EXPRESSIONS]
    assert [float(x) for x in printed] == pytest.approx(expected, rel=1e-12)


def test_the_header_refuses_names_and_values_that_are_not_c():
    assert c_name("BLOCK", "parameter") == "BLOCK" and c_value("VEC", True) == "1"
    for bad in ("BLOCK; int x", "int", "9X", "kt_mod", "a b"):
        with pytest.raises(ExportError):
            c_name(bad, "parameter")
    with pytest.raises(ExportError):
        c_value("MODE", "fast */ evil")


@needs_nvcc
def test_a_header_of_two_configurations_compiles_into_a_program_that_dispatches(tmp_path):
    session = load_session(SILU)
    best = ranked(session.results())[0]
    default = dict(session.template["default_config"])
    shipped = [Shipped("prefill", {"tokens": 2048, "d": 11008}, dict(best.config), best.median_us),
               Shipped("decode", {"tokens": 64, "d": 11008}, default)]
    header = export_header(session, shipped)
    # each configuration is the template's source in a namespace of its own, its parameters around it
    assert header.count("namespace config") == 2 and "#define SPLIT 1" in header
    assert "#undef BLOCK" in header and "#undef TO_F" in header
    (tmp_path / "silu.h").write_text(header)
    (tmp_path / "main.cu").write_text(r"""
#include "silu.h"
#include <cstdio>
int main() {
    kerntune_silu_and_mul::Sizes decode{64, 11008}, prefill{2048, 11008}, between{300, 11008}, odd{64, 11001};
    std::printf("%d %d %d %d\n", kerntune_silu_and_mul::dispatch(decode), kerntune_silu_and_mul::dispatch(prefill),
                kerntune_silu_and_mul::dispatch(between), kerntune_silu_and_mul::dispatch(odd));
    kerntune_silu_and_mul::Launch g = kerntune_silu_and_mul::geometry(0, prefill);
    std::printf("%u %u %u\n", g.grid.x, g.grid.y, g.block.x);
    __half *out = nullptr, *x = nullptr;
    (void)kerntune_silu_and_mul::launch(decode, 0, out, (const __half *)x, 64, 11008);
    return 0;
}
""")
    # host code is compiled for the host: the dispatch and geometry run here, with no GPU
    done = subprocess.run(["nvcc", "-O3", "-arch=sm_90", "-o", str(tmp_path / "main"), str(tmp_path / "main.cu")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    run = subprocess.run([str(tmp_path / "main")], capture_output=True, text=True, timeout=60)
    lines = run.stdout.split("\n")
    # decode -> the original, prefill -> the best, 300 tokens -> the nearer (64), d % VEC != 0 -> none
    assert lines[0].split()[:3] == ["1", "0", "1"]
    assert lines[0].split()[3] == ("-1" if 11001 % best.config["VEC"] else "0")
    from kerntune.engine.space import geometry
    from kerntune.engine.template import load_template

    g = geometry(load_template(ROOT / "templates" / "silu_and_mul" / "kernel.toml"), best.config,
                 load_template(ROOT / "templates" / "silu_and_mul" / "kernel.toml").problem("llama7b-t2048"))
    assert lines[1].split() == [str(g.grid[0]), str(g.grid[1]), str(g.block[0])]


def test_t4_holds_every_result_with_its_validity_and_times_in_milliseconds():
    session = load_session(HOSTILE)
    t4 = export_t4(session)
    assert t4["schema_version"] == "1.0.0" and t4["device"]["name"]
    results = session.results()
    assert len(t4["results"]) == len(results)
    for entry, r in zip(t4["results"], results):
        assert {"configuration", "times", "invalidity", "correctness"} <= set(entry)
        assert entry["configuration"] == {k: int(v) if isinstance(v, bool) else v for k, v in r.config.items()}
        assert entry["times"]["runtimes"] == pytest.approx([t / 1e3 for t in r.times_us])
        assert entry["invalidity"] == ("correct" if r.status == "ok" else entry["invalidity"])
        assert entry["correctness"] == (1.0 if r.verified else 0.0)
    kinds = {e["invalidity"] for e in t4["results"]}
    assert {"correct", "compile", "correctness", "timeout"} <= kinds


def test_json_holds_the_leaderboard_and_the_shipped_configuration(tmp_path, capsys):
    out = tmp_path / "board.json"
    assert main(["export", str(HOSTILE), "--format", "json", "-o", str(out)]) == 0
    data = json.loads(out.read_text())
    session = load_session(HOSTILE)
    board = ranked(session.results())
    assert [row["config"] for row in data["leaderboard"][:len(board)]] == [dict(r.config) for r in board]
    assert [row["rank"] for row in data["leaderboard"][:len(board)]] == list(range(1, len(board) + 1))
    assert all(row["rank"] is None for row in data["leaderboard"][len(board):])
    assert data["shipped"][0]["config"] == dict(session.best().config)
    assert data["template"]["fingerprint"] == session.template["fingerprint"]
    # an existing file is refused without --force; a header of an OpenCL session is one line
    err = one_line_error(capsys, ["export", str(HOSTILE), "--format", "t4", "-o", str(out)])
    assert "already exists" in err
    assert main(["export", str(HOSTILE), "--format", "t4", "-o", str(out), "--force"]) == 0
    assert json.loads(out.read_text())["schema_version"] == "1.0.0"
    err = one_line_error(capsys, ["export", str(HOSTILE), "--format", "header", "-o", str(tmp_path / "h.h")])
    assert "a header is CUDA source" in err and not (tmp_path / "h.h").exists()
    assert export_json(session)["shipped"] == data["shipped"]
    # an agent loop's rounds each measured their own template: nothing is shipped from its header's
    loop = ROOT / "bench" / "results" / "silu_and_mul-loop-rules-h100.toml"
    err = one_line_error(capsys, ["export", str(loop), "--format", "header", "-o", str(tmp_path / "loop.h")])
    assert "an agent loop's session" in err and not (tmp_path / "loop.h").exists()
