"""The transpose rewrite (agents/rewrite_transpose.py) on transposes written the ways people write
them: the thread's x along the input's rows or along the output's, a loop over the tile's rows, a
guard that returns, a local holding the element, a batch in front. Each one it takes is gated and
reproduces the original on PoCL through the tile; a kernel that is no transposition, or that it
cannot place, says why."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kerntune.agents.rewrite_transpose import rewrite as transpose
from kerntune.agents.rules import rules_template
from kerntune.engine.device import DeviceLimits
from kerntune.engine.evaluate import Evaluator, TimingPolicy
from kerntune.engine.gate import check_proposal
from kerntune.engine.template import load_template

NAIVE = Path(__file__).resolve().parent / "data" / "naive"
PUBLISHED = Path(__file__).resolve().parent / "data" / "published"
CPU = DeviceLimits("opencl", "cpu", max_threads_per_block=4096, warp_size=1, sm_count=2, max_shared_per_block=65536)
FAST = TimingPolicy(warmup=1, min_repeats=3, max_repeats=3, target_s=0.002)

HEAD = "__kernel void transpose_scale(__global const float *in, __global float *out, int rows, int cols, float scale) {\n"
# the thread's x runs along the output's rows (reads a row apart, writes coalesced), each thread a
# column of the block's 32 x 32 points in steps of 8 rows, the guard a return, the element in a local
ACROSS = (HEAD + "    const int r = get_group_id(0) * 32 + get_local_id(0);\n"
          "    const int c0 = get_group_id(1) * 32 + get_local_id(1);\n    const int b = get_group_id(2);\n"
          "    if (r >= rows) return;\n"
          "    for (int j = 0; j < 32; j += 8) {\n"
          "        if (c0 + j < cols) {\n"
          "            float v = in[b * rows * cols + r * cols + (c0 + j)];\n"
          "            out[b * rows * cols + (c0 + j) * rows + r] = v * scale;\n"
          "        }\n    }\n}\n")
ACROSS_LAUNCH = ('grid = ["ceil_div(rows, 32)", "ceil_div(cols, 32)", "batch"]', "block = [32, 8]")


def spec(tmp_path: Path, source: str, launch: tuple[str, str] | None = None) -> Path:
    folder = tmp_path / "spec"
    shutil.copytree(NAIVE / "transpose", folder)
    (folder / "kernel.cl").write_text(source)
    toml = (folder / "kernel.toml").read_text().replace('sources = { cuda = "kernel.cu", opencl = "kernel.cl" }',
                                                       'sources = { opencl = "kernel.cl" }')
    if launch is not None:
        toml = toml.replace('grid = ["ceil_div(cols, 16)", "ceil_div(rows, 16)", "batch"]', launch[0])
        toml = toml.replace("block = [16, 16]", launch[1])
    (folder / "kernel.toml").write_text(toml)
    return folder


def test_a_transpose_along_the_outputs_rows_with_a_loop_a_return_and_a_local_is_tiled_along_the_inputs(tmp_path):
    made = rules_template(load_template(spec(tmp_path, ACROSS, ACROSS_LAUNCH)), "opencl", CPU)
    assert [r.name for r in made.applied.rewrites] == ["transpose"], made.applied.declined
    out = made.proposal.sources["opencl"]
    # the read's fast axis is the block's y and the loop's rows: the tile is read along it, 32 points a block
    assert "const int kt_gu = (int)(((cols) + 32 - 1) / 32);" in out
    assert "kt_tile[kt_r][(int)get_local_id(0)] = (in[" in out
    # the local's element is the tile's, in the local's type; the return's guard holds at every point
    assert "((float)(kt_tile[(int)get_local_id(0)][kt_r])) * scale" in out
    assert out.count("(!(((int)(((size_t)((kt_v / 32))) * 32 + ((size_t)((kt_v % 32))))) >= rows)))") == 2


@pytest.mark.slow  # PoCL builds its work-groups of 32 x 8 and of the tile for 10 s; the naive transpose's test holds the pass
def test_a_transpose_along_the_outputs_rows_with_a_loop_a_return_and_a_local_reproduces_the_original(
        tmp_path, opencl_backend):
    original = load_template(spec(tmp_path, ACROSS, ACROSS_LAUNCH))
    made = rules_template(original, "opencl", CPU)
    verdict = check_proposal(original, made.proposal, tmp_path / "tpl", backend="opencl", device=0,
                             problem=original.problem("small", {}), limits=CPU, timeout=120)
    assert verdict.ok, verdict.reason
    template = verdict.template
    ev = Evaluator(opencl_backend, template, template.problem("small", {}), seed=1, timing=FAST)
    ok, _, message = ev.reproduces_original({**template.default_config(), "TILE": 16, "ROWS": 4, "PAD": 0}, (3, 4))
    assert ok, message


BODY = ("    int c = get_global_id(0);\n    int r = get_global_id(1);\n    int b = get_group_id(2);\n"
        "    if (c < cols && r < rows) {\n        STORE\n    }\n}\n")
# kernel -> what the decline names
DECLINED = {
    # the same axis on both sides: a copy
    "out[b * rows * cols + r * cols + c] = in[b * rows * cols + r * cols + c];": "same axis: no transposition",
    # the output read as well: its elements are not only stored
    "out[b * rows * cols + c * rows + r] += in[b * rows * cols + r * cols + c];": "not one store",
    # a row and a column by division of a flat index: no affine index
    "out[(r * cols + c) % rows * cols + (r * cols + c) / rows] = in[r * cols + c];": "is not affine",
    # two stores
    "out[c * rows + r] = in[r * cols + c]; out[c * rows + r] = 2.0f;": "not one store",
    # the read moves two elements a column: no fast axis on the read's side
    "out[c * rows + r] = in[r * cols + 2 * c];": "the read moves along no axis element by element",
    # the element read only where a condition in the value holds: the tile would load the others
    "out[c * rows + r] = r > 0 ? in[r * cols + c] : 0.0f;": "only on one side of a condition",
}


@pytest.mark.parametrize("store", sorted(DECLINED))
def test_what_is_no_transposition_is_declined_with_the_reason(store, tmp_path):
    source = HEAD + BODY.replace("STORE", store)
    made = rules_template(load_template(spec(tmp_path, source)), "opencl", CPU)
    assert "transpose" not in [r.name for r in made.applied.rewrites]
    reasons = {d.name: d.reason for d in made.applied.declined}
    assert DECLINED[store] in reasons["transpose"], reasons["transpose"]


# the shape of the body: a loop it cannot count, a return inside the loop, a tiled kernel already
SHAPES = {
    "a loop to a bound only the run knows": (
        HEAD + "    int c = get_global_id(0);\n    int r0 = get_group_id(1) * 32 + get_local_id(1);\n"
        "    for (int j = 0; j < rows - r0; j += 8)\n"
        "        if (c < cols) out[c * rows + r0 + j] = in[(r0 + j) * cols + c];\n}\n",
        "the loop over `j` does not count up by a step to a bound"),
    "a return inside the loop": (
        HEAD + "    int c = get_global_id(0);\n    int r0 = get_group_id(1) * 32 + get_local_id(1);\n"
        "    for (int j = 0; j < 32; j += 8) {\n        if (r0 + j >= rows || c >= cols) return;\n"
        "        out[c * rows + r0 + j] = in[(r0 + j) * cols + c];\n    }\n}\n",
        "a return (line 5) other than in an if among the body's own statements"),
}


@pytest.mark.parametrize("case", sorted(SHAPES))
def test_a_body_of_another_shape_is_declined_with_the_reason(case, tmp_path):
    source, why = SHAPES[case]
    made = rules_template(load_template(spec(tmp_path, source, ACROSS_LAUNCH)), "opencl", CPU)
    reasons = {d.name: d.reason for d in made.applied.declined}
    assert why in reasons["transpose"], reasons


def test_the_posts_tiled_transposes_and_its_copy_are_left_as_they_are():
    for name, why in (("transpose_coalesced", "already cooperate"), ("copy", "same axis: no transposition")):
        made = rules_template(load_template(PUBLISHED / "transpose" / f"{name}.toml"), "cuda", CPU)
        reasons = {d.name: d.reason for d in made.applied.declined}
        assert why in reasons["transpose"], (name, reasons)


def test_the_defaults_keep_the_original_and_the_grid_follows_the_tile():
    made = rules_template(load_template(PUBLISHED / "transpose" / "transpose_naive.toml"), "cuda", CPU)
    p = made.proposal
    names = {q.name: q for q in p.parameters}
    assert names["TILE"].default == 0 and names["TILE"].values == (0, 8, 16, 32, 64)
    # the post's 32 x 32 points a block: TILE 16 launches four blocks for each of the original's
    assert p.grid[0] == "((n // TILE_DIM_VALUE) * max(1, 32 // TILE)) if TILE > 0 else (n // TILE_DIM_VALUE)"
    assert p.block[:2] == ("TILE if TILE > 0 else (TILE_DIM_VALUE)", "ROWS if TILE > 0 else (BLOCK_ROWS_VALUE)")
    # the lifted tile stays at the value the rewrite read while the tile is on
    assert "TILE == 0 or TILE_DIM_VALUE == 32" in p.constraints
    out = p.sources["cuda"]
    assert "#if TILE > 0\n" in out and "__shared__ float kt_tile[TILE][TILE + PAD];" in out
    # a point's row of the original: its block (kt_v / 32), its thread (kt_v % 8) and its step of the loop
    assert "((int)(((kt_v / 8 % 4) * 8)))" in out and "((unsigned int)((kt_v % 8)))" in out
    assert transpose.name == "transpose"



def test_the_tiled_kernel_drops_the_originals_launch_attributes(tmp_path):
    """The original's work-group is fixed by its attribute; the tile's is TILE x ROWS, so the new
    kernel is declared without it (else every tiled configuration would fail to launch)."""
    head = HEAD.replace("__kernel void", "__kernel __attribute__((reqd_work_group_size(16, 16, 1))) void")
    source = head + BODY.replace("STORE", "out[b * rows * cols + c * rows + r] = scale * in[b * rows * cols + r * cols + c];")
    made = rules_template(load_template(spec(tmp_path, source)), "opencl", CPU)
    assert [r.name for r in made.applied.rewrites] == ["transpose"], made.applied.declined
    out = made.proposal.sources["opencl"]
    tiled = out[out.index("#if TILE > 0\n"):out.index("#else\n")]
    assert "reqd_work_group_size" not in tiled and "__kernel  void transpose_scale(" in tiled
    assert out.count("reqd_work_group_size(BLOCK, BLOCK_Y, 1)") == 1  # the original's, lifted


# more ways people write it, each taken (their tiles reproduce the original on PoCL as the cases above do)
TAKEN = {
    # each matrix of the batch through local pointers into the arrays, the guard a return
    "local pointers": HEAD + "    int c = get_global_id(0);\n    int r = get_global_id(1);\n"
    "    __global const float *src = in + get_group_id(2) * rows * cols;\n"
    "    __global float *dst = out + get_group_id(2) * rows * cols;\n    if (c >= cols || r >= rows) return;\n"
    "    dst[c * rows + r] = scale * src[r * cols + c];\n}\n",
    # the CUDA samples' naive transpose: indices in locals, the loop's step added to the output's
    "index locals and a loop": HEAD + "    int x = get_group_id(0) * 16 + get_local_id(0);\n"
    "    int y = get_group_id(1) * 16 + get_local_id(1);\n    int index_in = x + cols * y;\n"
    "    int index_out = y + rows * x;\n    for (int i = 0; i < 16; i += 4)\n"
    "        if (x < cols && y + i < rows) out[index_out + i] = scale * in[index_in + i * cols];\n}\n",
    # another element of the input beside the transposed one (the first row's, read where it is)
    "another read beside": HEAD + BODY.replace("STORE", "out[b * rows * cols + c * rows + r] = scale * in[c] + "
                                                        "in[b * rows * cols + r * cols + c];"),
    # the tile's rows a loop over the block's threads along y (as tiled kernels write it)
    "a loop over the block's rows": HEAD + "    int c = get_group_id(0) * 16 + get_local_id(0);\n"
    "    for (int j = get_local_id(1); j < 16; j += get_local_size(1)) {\n        int r = get_group_id(1) * 16 + j;\n"
    "        if (c < cols && r < rows) out[c * rows + r] = scale * in[r * cols + c];\n    }\n}\n",
    # unsigned locals declared inside the guard, an offset into the row
    "unsigned locals in the guard": HEAD + "    unsigned int x = get_global_id(0);\n    unsigned int y = get_global_id(1);\n"
    "    if (x + 1 < cols && y < rows) {\n        unsigned int index_in = x + 1 + cols * y;\n"
    "        unsigned int index_out = y + rows * x;\n        out[index_out] = scale * in[index_in];\n    }\n}\n",
}


@pytest.mark.parametrize("case", sorted(TAKEN))
def test_more_ways_people_write_a_transpose_are_taken(case, tmp_path):
    launch = ('grid = ["ceil_div(cols, 16)", "ceil_div(rows, 16)", "batch"]', "block = [16, 4]") \
        if "loop" in case else None  # 16 x 4 threads, each 4 rows of the block's 16 x 16 points
    made = rules_template(load_template(spec(tmp_path, TAKEN[case], launch)), "opencl", CPU)
    assert [r.name for r in made.applied.rewrites] == ["transpose"], made.applied.declined


def test_a_grid_the_kernels_arguments_count_is_counted_in_the_kernel_and_any_tile_fits_it():
    """`ceil_div(cols, 16)` blocks of the original: `cols` is the kernel's argument, so the tiled
    kernel counts the original's blocks itself and launches exactly the tiles the points need."""
    made = rules_template(load_template(NAIVE / "transpose"), "cuda", CPU)
    p = made.proposal
    assert p.grid[0] == "(ceil_div((ceil_div(cols, BLOCK)) * 16, TILE)) if TILE > 0 else (ceil_div(cols, BLOCK))"
    out = p.sources["cuda"]
    assert "const int kt_gu = (int)(((cols) + 16 - 1) / 16);" in out  # BLOCK held at its 16 while the tile runs
    assert "const int kt_gv = (int)(((rows) + 16 - 1) / 16);" in out


# a thread per element of a one-dimensional launch, its row and column the flat index divided by and
# modulo the width: a matrix (no batch) of `rows` x `cols`
FLAT = (HEAD + "    int i = get_global_id(0);\n    if (i < rows * cols) {\n        int r = i / cols;\n"
        "        int c = i % cols;\n        out[c * rows + r] = scale * in[i];\n    }\n}\n")
FLAT_REFERENCE = """import numpy as np


def reference(inputs, sizes):
    return {"out": np.ascontiguousarray(inputs["in"].astype(np.float64).T) * 1.5}
"""


def flat_spec(tmp_path: Path, source: str) -> Path:
    folder = spec(tmp_path, source, ('grid = ["ceil_div(rows * cols, 256)"]', "block = [256]"))
    toml = (folder / "kernel.toml").read_text()
    for old, new in (('["batch", "rows", "cols"]', '["rows", "cols"]'), ('["batch", "cols", "rows"]', '["cols", "rows"]'),
                     ("batch = 3\n", ""), ("batch = 8\n", ""), ("batch = 2\n", ""), ("batch * ", "")):
        toml = toml.replace(old, new)
    (folder / "kernel.toml").write_text(toml)
    (folder / "reference.py").write_text(FLAT_REFERENCE)
    return folder


def test_a_flat_index_split_into_row_and_column_is_tiled_and_reproduces_the_original(tmp_path, opencl_backend):
    original = load_template(flat_spec(tmp_path, FLAT))
    made = rules_template(original, "opencl", CPU)
    assert [r.name for r in made.applied.rewrites] == ["transpose"], made.applied.declined
    p = made.proposal
    # the columns' tiles along x, the rows' as many as the original's elements fill, along y
    assert p.grid[:2] == ("(ceil_div((cols), TILE)) if TILE > 0 else (ceil_div(rows * cols, BLOCK))",
                          "(ceil_div(ceil_div((ceil_div(rows * cols, BLOCK)) * 256, (cols)), TILE)) if TILE > 0 else (1)")
    out = p.sources["opencl"]
    assert "const long kt_f = (long)kt_v * kt_w + kt_u;" in out and "if (kt_u < kt_w && kt_f < kt_n && " in out
    verdict = check_proposal(original, p, tmp_path / "tpl", backend="opencl", device=0,
                             problem=original.problem("small", {}), limits=CPU, timeout=120)
    assert verdict.ok, verdict.reason
    template = verdict.template
    ev = Evaluator(opencl_backend, template, template.problem("small", {}), seed=1, timing=FAST)
    ok, _, message = ev.reproduces_original({**template.default_config(), "TILE": 16, "ROWS": 4}, (3, 4))
    assert ok, message


def test_a_flat_index_whose_row_and_column_do_not_swap_is_declined(tmp_path):
    copy = FLAT.replace("in[i]", "in[c * rows + r]")  # both along the row: a permuted copy
    made = rules_template(load_template(flat_spec(tmp_path, copy)), "opencl", CPU)
    reasons = {d.name: d.reason for d in made.applied.declined}
    assert "do not run along swapped axes of the element's row and column" in reasons["transpose"], reasons
