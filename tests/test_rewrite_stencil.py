"""The stencil rewrite's halo tile (agents/rewrite_stencil.py) on stencils written the ways people
write them: coordinates along either axis, an offset from the global id, rows through a local
pointer, clamped or guarded neighbours. Each one the tile serves is gated and reproduces the
original on PoCL with its inputs staged in shared memory; what the tile cannot place stays a read
of global memory, and a kernel it cannot serve says why."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kerntune.agents.rules import rules_template
from kerntune.engine.device import DeviceLimits
from kerntune.engine.evaluate import Evaluator, TimingPolicy
from kerntune.engine.gate import check_proposal
from kerntune.engine.template import load_template

NAIVE = Path(__file__).resolve().parent / "data" / "naive"
CPU = DeviceLimits("opencl", "cpu", max_threads_per_block=4096, warp_size=1, sm_count=2, max_shared_per_block=65536)
GPU = DeviceLimits("cuda", "gpu", max_threads_per_block=1024, warp_size=32, sm_count=132, max_shared_per_block=49152)
FAST = TimingPolicy(warmup=1, min_repeats=3, max_repeats=3, target_s=0.002)

HEAD = "__kernel void stencil5(__global const float *in, __global float *out, int H, int W) {\n"
BODY = ("    if (x == 0 || y == 0 || x == W - 1 || y == H - 1) {\n        out[y * W + x] = in[y * W + x];\n"
        "        return;\n    }\n")
# x along the launch's second dimension: the rows of `in` run along the block's y
ACROSS = (HEAD + "    int y = get_global_id(0);\n    int x = get_global_id(1);\n    if (x >= W || y >= H) return;\n"
          + BODY + "    out[y * W + x] = 0.5f * in[y * W + x]\n"
          "        + 0.125f * (in[(y - 1) * W + x] + in[(y + 1) * W + x] + in[y * W + x - 1] + in[y * W + x + 1]);\n}\n")
# the row through a local pointer, the neighbours above and below through the array
ROWS = (HEAD + "    const int x = get_global_id(0);\n    const int y = get_global_id(1);\n"
        "    if (x >= W || y >= H) return;\n" + BODY + "    __global const float *row = in + y * W;\n"
        "    out[y * W + x] = 0.5f * row[x] + 0.125f * (in[(y - 1) * W + x] + in[(y + 1) * W + x] + row[x - 1] + "
        "row[x + 1]);\n}\n")
# an interior point per work-item (the coordinates one past the global id), `out` kept at the border
INTERIOR = ("__kernel void stencil5(__global const float *in, __global float *out, int H, int W) {\n"
            "    int x = get_global_id(0) + 1;\n    int y = get_global_id(1) + 1;\n"
            "    if (x < W - 1 && y < H - 1) {\n"
            "        out[y * W + x] = 0.5f * in[y * W + x]\n"
            "            + 0.125f * (in[(y - 1) * W + x] + in[(y + 1) * W + x] + in[y * W + x - 1] + in[y * W + x + 1]);\n"
            "    }\n}\n")
INTERIOR_REFERENCE = """import numpy as np


def reference(inputs, sizes):
    x = inputs["in"].astype(np.float64)
    out = inputs["out"].astype(np.float64).copy()
    out[1:-1, 1:-1] = 0.5 * x[1:-1, 1:-1] + 0.125 * (x[:-2, 1:-1] + x[2:, 1:-1] + x[1:-1, :-2] + x[1:-1, 2:])
    return {"out": out}
"""
# neighbours clamped to the grid: not a whole-number move from the point, so no tile
CLAMPED = (HEAD + "    int x = get_global_id(0);\n    int y = get_global_id(1);\n    if (x >= W || y >= H) return;\n"
           + BODY + "    out[y * W + x] = 0.5f * in[y * W + x] + 0.125f * (in[max(y - 1, 0) * W + x] + "
           "in[min(y + 1, H - 1) * W + x] + in[y * W + max(x - 1, 0)] + in[y * W + min(x + 1, W - 1)]);\n}\n")
# one array read at its neighbours and written: never staged
IN_PLACE = ("__kernel void stencil5(__global const float *in, __global float *out, int H, int W) {\n"
            "    int x = get_global_id(0);\n    int y = get_global_id(1);\n    if (x >= W || y >= H) return;\n"
            "    if (x > 0 && x < W - 1) out[y * W + x] = 0.5f * (out[y * W + x - 1] + out[y * W + x + 1]);\n}\n")


def spec(tmp_path: Path, source: str, launch: tuple[str, str] | None = None, reference: str = "",
         out_role: str = "output", like: str = "stencil5") -> Path:
    folder = tmp_path / "spec"
    shutil.copytree(NAIVE / like, folder)
    (folder / "kernel.cl").write_text(source)
    toml = (folder / "kernel.toml").read_text().replace('sources = { cuda = "kernel.cu", opencl = "kernel.cl" }',
                                                       'sources = { opencl = "kernel.cl" }')
    if launch is not None:
        toml = toml.replace('grid = ["ceil_div(W, 32)", "ceil_div(H, 8)"]', f'grid = {list(launch)!r}'.replace("'", '"'))
        toml = toml.replace("block = [32, 8]", "block = [8, 32]")
    toml = toml.replace('name = "out"\ndtype = "float32"\nrole = "output"', f'name = "out"\ndtype = "float32"\nrole = "{out_role}"')
    (folder / "kernel.toml").write_text(toml)
    if reference:
        (folder / "reference.py").write_text(reference)
    return folder


# a 1-D stencil whose index writes the block's size as a literal (lifted into BLOCK by the rules)
LITERAL_BLOCK = ("#define RADIUS 3\n__kernel void stencil_1d(__global const float *in, __global const float *weights, "
                 "__global float *out, int n) {\n    const int i = get_group_id(0) * 256 + get_local_id(0);\n"
                 "    if (i >= n) return;\n    float result = 0.0f;\n"
                 "    for (int j = -RADIUS; j <= RADIUS; j++)\n"
                 "        if (i + j >= 0 && i + j < n) result += weights[j + RADIUS] * in[i + j];\n"
                 "    out[i] = result;\n}\n")

CASES = {
    "rows across the block's y": (ACROSS, ("ceil_div(H, 8)", "ceil_div(W, 32)"), "", "output", "1/1 x 1/1"),
    "a row through a local pointer": (ROWS, None, "", "output", "1/1 x 1/1"),
    "interior points, offset coordinates": (INTERIOR, None, INTERIOR_REFERENCE, "inout", "0/2 x 0/2"),
    "a 1-D index with the block's size written out": (LITERAL_BLOCK, None, "", "output", "3/3"),
}


SLOW = {"a row through a local pointer", "rows across the block's y"}  # the same tile as the others, another way to the element


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.slow) if c in SLOW else c for c in sorted(CASES)])
def test_the_tile_serves_stencils_as_people_write_them_and_reproduces_the_original(case, tmp_path, opencl_backend):
    source, launch, reference, role, halo = CASES[case]
    like = "stencil1d" if "1-D" in case else "stencil5"
    original = load_template(spec(tmp_path, source, launch, reference, role, like))
    made = rules_template(original, "opencl", CPU)
    assert [r.name for r in made.applied.rewrites] == ["stencil"], made.applied.declined
    assert f"halo of {halo}" in made.applied.rewrites[0].description
    proposal = made.proposal
    assert "TILE" in {p.name for p in proposal.parameters}
    verdict = check_proposal(original, proposal, tmp_path / "tpl", backend="opencl", device=0,
                             problem=original.problem("small", {}), limits=CPU, timeout=120)
    assert verdict.ok, verdict.reason
    template = verdict.template
    ev = Evaluator(opencl_backend, template, template.problem("small", {}), seed=1, timing=FAST)
    config = {**template.default_config(), "TILE": 1, "ITEMS": 2}
    if "RX" in config:  # 2-D: points along x too, a block's width apart
        config["RX"] = 2
    ok, _, message = ev.reproduces_original(config, (3, 4))
    assert ok, (config, message)


def test_what_the_tile_cannot_place_stays_global_and_an_array_written_is_never_staged(tmp_path):
    clamped = rules_template(load_template(spec(tmp_path / "a", CLAMPED)), "opencl", CPU)
    assert [r.name for r in clamped.applied.rewrites] == ["stencil"]
    assert "TILE" not in {p.name for p in clamped.proposal.parameters}
    assert "no tile: no input is read at its neighbours' points" in clamped.applied.rewrites[0].description
    in_place = rules_template(load_template(spec(tmp_path / "b", IN_PLACE)), "opencl", CPU)
    assert "TILE" not in {p.name for p in in_place.proposal.parameters}
    assert "kt_s0" not in in_place.proposal.sources["opencl"]


@pytest.mark.parametrize("name,rewrite,params", [("stencil5", "stencil", {"ITEMS", "TILE"}),
                                                 ("matmul_naive", "contraction", {"BK", "TM", "VEC"}),
                                                 ("reduce_sequential", "reduction", {"LANES", "GRID"}),
                                                 ("transpose", "transpose", {"TILE", "ROWS", "PAD"})])
def test_claude_asks_for_each_cooperating_pass_by_name(name, rewrite, params):
    pytest.importorskip("anthropic")
    from claude_support import state

    from kerntune.agents.claude import _parse_rewrites, rewritten

    got, lines = rewritten(_parse_rewrites({"rewrites": ["lift", rewrite]}), state(NAIVE / name, [], []))
    assert got is not None and params <= {p.name for p in got.parameters}, lines
    assert any(line.startswith(f"- {rewrite}: ") for line in lines), lines


# both global indices write the block's size out, a different literal in each dimension
LITERAL_2D = (HEAD + "    int x = get_group_id(0) * 32 + get_local_id(0);\n    int y = get_group_id(1) * 8 + get_local_id(1);\n"
              "    if (x >= W || y >= H) return;\n" + BODY + "    out[y * W + x] = 0.5f * in[y * W + x]\n"
              "        + 0.125f * (in[(y - 1) * W + x] + in[(y + 1) * W + x] + in[y * W + x - 1] + in[y * W + x + 1]);\n}\n")


def test_the_block_literal_of_each_dimensions_index_follows_its_own_parameter(tmp_path, opencl_backend):
    """`get_group_id(1) * 8 + get_local_id(1)` on a block of (32, 8): BLOCK_Y replaces the 8 as BLOCK
    the 32, so another BLOCK_Y still covers every row (the 8 left alone wrote a row in four)."""
    from kerntune.agents.lift import lift_template
    from kerntune.engine.proposal import write_template

    original = load_template(spec(tmp_path, LITERAL_2D))
    lifted = lift_template(original, "opencl", CPU).proposal
    src = lifted.sources["opencl"]
    assert "get_group_id(0) * BLOCK + get_local_id(0)" in src and "get_group_id(1) * BLOCK_Y + get_local_id(1)" in src
    template = write_template(original, lifted, tmp_path / "tpl", CPU)
    ev = Evaluator(opencl_backend, template, template.problem("small", {}), seed=1, timing=FAST)
    ok, _, message = ev.reproduces_original({"BLOCK": 8, "BLOCK_Y": 2}, (3,))
    assert ok, message


PUBLISHED = Path(__file__).resolve().parent / "data" / "published" / "stencils"
# a 3-D star of radius 2 along z through a loop, interior points one past the global ids, and a
# read off the point's column at another plane (no tile or register holds it: it stays global)
STAR = """#define R 2
KERNEL void star(GLOBAL const float *in, GLOBAL float *out, int nx, int ny, int nz) {
    int i = X + 1;
    int j = Y + 1;
    int k = Z + 2;
    if (i < nx - 1 && j < ny - 1 && k < nz - R) {
        int idx = (k * ny + j) * nx + i;
        float s = 0.5f * in[idx] + 0.1f * (in[idx - 1] + in[idx + 1] + in[idx - nx] + in[idx + nx]);
        for (int d = 1; d <= R; d++)
            s += 0.05f * (in[idx - d * nx * ny] + in[idx + d * nx * ny]);
        out[idx] = s + 0.01f * in[idx + nx * ny + 1];
    }
}
"""
DIALECTS = {"opencl": {"KERNEL": "__kernel", "GLOBAL": "__global", "X": "get_global_id(0)", "Y": "get_global_id(1)",
                       "Z": "get_global_id(2)"},
            "cuda": {"KERNEL": "__global__", "GLOBAL": "", "X": "(blockIdx.x * blockDim.x + threadIdx.x)",
                     "Y": "(blockIdx.y * blockDim.y + threadIdx.y)", "Z": "(blockIdx.z * blockDim.z + threadIdx.z)"}}


def star_spec(tmp_path: Path, source: str = STAR) -> Path:
    """stencil7's spec (in, out, nx, ny, nz at 40 x 19 x 12 and 21 x 13 x 7) over the star, checked
    against the original's outputs (no reference)."""
    folder = tmp_path / "star"
    folder.mkdir()
    for backend, ext in (("opencl", "cl"), ("cuda", "cu")):
        text = source
        for word, value in DIALECTS[backend].items():
            text = text.replace(word, value)
        (folder / f"star.{ext}").write_text(text)
    toml = (PUBLISHED / "stencil7.toml").read_text().replace('entry = "stencil7"', 'entry = "star"')
    toml = toml.replace('sources = { cuda = "stencil3d.cu", opencl = "stencil3d.cl" }',
                        'sources = { cuda = "star.cu", opencl = "star.cl" }')
    toml = toml.replace('reference = "reference.py:stencil7"\n', "")
    toml = toml.replace("float c0, float c1", "")
    toml = toml[:toml.index('[[arg]]\nname = "c0"')] + toml[toml.index("[[problem]]"):]
    (folder / "star.toml").write_text(toml)
    return folder / "star.toml"


def test_a_3d_stencil_marches_along_z_through_a_plane_tile_and_registers(tmp_path, opencl_backend):
    """The 2.5-D scheme: each plane's tile with its halo in local memory, the thread's column along
    z (the planes a loop reaches, two below and two above) in registers; the read off the column
    at another plane stays global. At the odd sizes and a march longer than the grid's planes,
    with points along x and planes of threads in the block, the outputs are the original's."""
    original = load_template(star_spec(tmp_path))
    made = rules_template(original, "opencl", CPU)
    assert [r.name for r in made.applied.rewrites] == ["stencil"], made.applied.declined
    what = made.applied.rewrites[0].description
    assert "halo of 0/2 x 0/2 in shared memory" in what and "0/4 planes below and above in registers" in what
    source = made.proposal.sources["opencl"]
    assert "in[idx + nx * ny + 1]" in source.split("#if TILE > 0")[1]  # the point function's, with the tile
    # the column's planes k - 2 .. k + 2 from the registers (the point's plane is two past the z global id)
    assert "0.5f * kt_c0[(2) + 0]" in source and "(kt_c0[(2 + (-1) * d) + 0] + kt_c0[(2 + d) + 0])" in source
    verdict = check_proposal(original, made.proposal, tmp_path / "tpl", backend="opencl", device=0,
                             problem=original.problem("small", {}), limits=CPU, timeout=120)
    assert verdict.ok, verdict.reason
    template = verdict.template
    ev = Evaluator(opencl_backend, template, template.problem("small", {}), seed=1, timing=FAST)
    for config in ({"TILE": 1, "ITEMS": 16, "RX": 2, "BLOCK_Z": 1}, {"TILE": 1, "ITEMS": 2, "BLOCK": 8, "BLOCK_Z": 2}):
        ok, _, message = ev.reproduces_original({**template.default_config(), **config}, (3,))
        assert ok, (config, message)


def test_a_3d_stencils_cuda_march_compiles_with_nvcc_its_column_in_registers(tmp_path, monkeypatch):
    from kerntune.engine.backends import cuda_toolchain as cuda

    if cuda.find_nvcc() is None:
        pytest.skip("nvcc not found")
    monkeypatch.setenv("KERNTUNE_CACHE_DIR", str(tmp_path / "cache"))
    original = load_template(star_spec(tmp_path))
    made = rules_template(original, "cuda", GPU)
    assert "TILE" in {p.name for p in made.proposal.parameters}, made.applied.declined
    defaults = {p.name: p.default for p in made.proposal.parameters}
    for config in ({"TILE": 1, "ITEMS": 32, "RX": 2, "BLOCK_Z": 1}, {"TILE": 1, "ITEMS": 8}):
        cubin, info, _ = cuda.compile_cubin(made.proposal.sources["cuda"], "star",
                                            {k: str(v) for k, v in {**defaults, **config}.items()})
        # the registers of the march stay registers: no stack frame, no spills
        assert cubin and info.get("stack_frame", 0) == 0 and info.get("spill_stores", 0) == 0, (config, info)


def test_a_3d_stencil_read_too_many_planes_away_gets_no_tile_and_says_why(tmp_path):
    far = STAR.replace("for (int d = 1; d <= R; d++)", "for (int d = 1; d <= 5; d++)")
    made = rules_template(load_template(star_spec(tmp_path, far)), "opencl", CPU)
    assert "TILE" not in {p.name for p in made.proposal.parameters}
    assert "`in` is read more than 4 planes away" in made.applied.rewrites[0].description


# the star as a thread per (x, y) column looping over z, and the same loop carrying a value from
# one plane to the next (no march: its planes depend on each other)
STAR_LOOP = STAR.replace("int k = Z + 2;\n    if (i < nx - 1 && j < ny - 1 && k < nz - R) {",
                         "if (i < nx - 1 && j < ny - 1) {\n      for (int k = R; k < nz - R; k++) {")
STAR_LOOP = STAR_LOOP.replace("        out[idx] = s + 0.01f * in[idx + nx * ny + 1];\n    }\n}",
                              "        out[idx] = s + 0.01f * in[idx + nx * ny + 1];\n      }\n    }\n}")


def test_a_column_looping_over_z_marches_its_loops_planes_through_the_tile(tmp_path, opencl_backend):
    """`for (int k = R; k < nz - R; k++)` inside the guard of a 2-D grid: TILE 1 marches the loop's
    planes, each plane's tile staged by the block and the column's planes in registers, the body
    run once a plane where the loop reaches it; on PoCL the outputs are the original's. A loop
    that carries a value from plane to plane gets no march."""
    assert "for (int k = R; k < nz - R; k++)" in STAR_LOOP and "      }\n    }\n}" in STAR_LOOP
    folder = star_spec(tmp_path, STAR_LOOP)
    toml = folder.read_text().replace('grid = ["ceil_div(nx, 32)", "ceil_div(ny, 4)", "ceil_div(nz, 4)"]',
                                      'grid = ["ceil_div(nx, 32)", "ceil_div(ny, 4)"]').replace("block = [32, 4, 4]",
                                                                                              "block = [32, 4]")
    folder.write_text(toml)
    original = load_template(folder)
    made = rules_template(original, "opencl", CPU)
    assert [r.name for r in made.applied.rewrites] == ["stencil"], made.applied.declined
    assert "marching its loop's planes along z with its column's 2/2 planes" in made.applied.rewrites[0].description
    verdict = check_proposal(original, made.proposal, tmp_path / "tpl", backend="opencl", device=0,
                             problem=original.problem("small", {}), limits=CPU, timeout=120)
    assert verdict.ok, verdict.reason
    ev = Evaluator(opencl_backend, verdict.template, verdict.template.problem("small", {}), seed=1, timing=FAST)
    ok, _, message = ev.reproduces_original({**verdict.template.default_config(), "TILE": 1, "RX": 2, "BLOCK": 8}, (3,))
    assert ok, message
    carried = STAR_LOOP.replace("float s = 0.5f", "carry = 0.5f * carry; float s = 0.5f").replace(
        "    if (i < nx - 1 && j < ny - 1) {", "    float carry = 1.0f;\n    if (i < nx - 1 && j < ny - 1) {")
    (folder.parent / "star.cl").write_text(carried.replace("KERNEL", "__kernel").replace("GLOBAL", "__global").replace(
        "X", "get_global_id(0)").replace("Y", "get_global_id(1)"))
    made = rules_template(load_template(folder), "opencl", CPU)
    assert "TILE" not in {p.name for p in made.proposal.parameters}
    # a column whose loop stops early (`break`): its later planes are not the march's to run
    stops = STAR_LOOP.replace("float s = 0.5f", "if (in[idx] > 2.0f) break;\n        float s = 0.5f")
    (folder.parent / "star.cl").write_text(stops.replace("KERNEL", "__kernel").replace("GLOBAL", "__global").replace(
        "X", "get_global_id(0)").replace("Y", "get_global_id(1)"))
    made = rules_template(load_template(folder), "opencl", CPU)
    assert "TILE" not in {p.name for p in made.proposal.parameters}
