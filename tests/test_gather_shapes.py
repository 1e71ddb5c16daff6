"""Gathers and row copies as people write them, through the row-wise rewrite (a row spread over
LANES threads, moved in VEC packs, rows per block): 64-bit token ids, rows with a leading
dimension of their own, the index array read inside the loop, a padding id, a scaled lookup with a
position added. Each is templated by the rules, gated, and reproduces the original on PoCL with
lanes and packs."""

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
CPU = DeviceLimits("opencl", "cpu", max_threads_per_block=4096, warp_size=1, sm_count=2)
FAST = TimingPolicy(warmup=1, min_repeats=3, max_repeats=3, target_s=0.002)

HEAD = "__kernel void embedding_gather(__global float *out, __global const {ids} *ids, __global const float *table, " \
       "int tokens, int dim{more}) {{\n"
# kernel source, the type of the ids, the arguments after dim (spec lines), the reference
LONG_IDS = (HEAD.format(ids="long", more="") +
            "    const size_t t = get_global_id(0);\n    if (t >= (size_t)tokens) return;\n"
            "    const long id = ids[t];\n    for (int c = 0; c < dim; ++c)\n"
            "        out[t * dim + c] = table[id * dim + c];\n}\n")
STRIDED = (HEAD.format(ids="int", more=", int ld") +
           "    int t = get_global_id(0);\n    if (t < tokens) {\n"
           "        __global const float *src = table + (long)ids[t] * ld;\n        __global float *dst = out + (long)t * dim;\n"
           "        for (int c = 0; c < dim; c++) dst[c] = src[c];\n    }\n}\n")
IN_LOOP = (HEAD.format(ids="int", more=", int pad") +
           "    int t = get_global_id(0);\n    if (t >= tokens) return;\n"
           "    for (int c = 0; c < dim; c++)\n"
           "        out[t * dim + c] = ids[t] == pad ? 0.0f : 2.0f * table[ids[t] * dim + c] + 0.5f;\n}\n")
REFERENCES = {
    "long": """import numpy as np


def reference(inputs, sizes):
    return {"out": inputs["table"][inputs["ids"]].astype(np.float64)}
""",
    "strided": """import numpy as np


def reference(inputs, sizes):
    d = sizes["dim"]
    return {"out": inputs["table"][inputs["ids"]][:, :d].astype(np.float64)}
""",
    "in_loop": """import numpy as np


def reference(inputs, sizes):
    out = 2.0 * inputs["table"][inputs["ids"]].astype(np.float64) + 0.5
    out[inputs["ids"] == 3] = 0.0
    return {"out": out}
""",
}


def spec(tmp_path: Path, source: str, kind: str) -> Path:
    folder = tmp_path / "spec"
    shutil.copytree(NAIVE / "embedding_gather", folder)
    (folder / "kernel.cl").write_text(source)
    toml = (folder / "kernel.toml").read_text().replace('sources = { cuda = "kernel.cu", opencl = "kernel.cl" }',
                                                       'sources = { opencl = "kernel.cl" }')
    if kind == "long":
        toml = toml.replace('name = "ids"\ndtype = "int32"', 'name = "ids"\ndtype = "int64"')
    if kind == "strided":  # the table's rows are ld = dim + 3 floats apart
        toml = toml.replace('shape = ["vocab", "dim"]', 'shape = ["vocab", "dim + 3"]')
        toml += '\n[[arg]]\nname = "ld"\ndtype = "int32"\nrole = "scalar"\nvalue = "dim + 3"\n'
    if kind == "in_loop":
        toml += '\n[[arg]]\nname = "pad"\ndtype = "int32"\nrole = "scalar"\nvalue = "3"\n'
    (folder / "kernel.toml").write_text(toml)
    (folder / "reference.py").write_text(REFERENCES.get(kind, ""))
    return folder


CASES = {"long": LONG_IDS, "strided": STRIDED, "in_loop": IN_LOOP}
SLOW = {"long", "in_loop"}  # the same machinery as the strided rows, other index arithmetic


@pytest.mark.parametrize("kind", [pytest.param(k, marks=pytest.mark.slow) if k in SLOW else k for k in sorted(CASES)])
def test_a_gather_as_people_write_it_is_spread_over_lanes_and_reproduces_the_original(kind, tmp_path, opencl_backend):
    original = load_template(spec(tmp_path, CASES[kind], kind))
    made = rules_template(original, "opencl", CPU)
    names = {p.name for p in made.proposal.parameters}
    assert {"LANES", "VEC"} <= names, made.why_none()
    verdict = check_proposal(original, made.proposal, tmp_path / "tpl", backend="opencl", device=0,
                             problem=original.problem("small", {}), limits=CPU, timeout=120)
    assert verdict.ok, verdict.reason
    template = verdict.template
    ev = Evaluator(opencl_backend, template, template.problem("small", {}), seed=1, timing=FAST)
    for config in ({"BLOCK": 8, "LANES": 8, "VEC": 4}, {"BLOCK": 4, "LANES": 4, "KEEP": 8, "VEC": 2}):
        ok, _, message = ev.reproduces_original({**template.default_config(), **config}, (3, 4))
        assert ok, (config, message)

