"""The rules' template of every kernel of tests/data/naive and tests/data/byo, as data to compare.

`python tests/rules_snapshot.py` writes tests/data/rules_before/NAME.json from the code as it is;
tests/test_rules_snapshot.py makes the same images again and compares them, so a change to the
rules' model or passes that changes what `kerntune templatize SPEC --agent rules` writes shows up
as a difference (sources, diff, parameters, constraints, launch, notes).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from kerntune.agents.rules import rules_template
from kerntune.engine.device import DeviceLimits
from kerntune.engine.proposal import source_diff
from kerntune.engine.template import load_template

DATA = Path(__file__).resolve().parent / "data"
OUT = DATA / "rules_before"
# the devices the images are made for: a CPU through OpenCL (as PoCL reports one) and an H200
CPU = DeviceLimits("opencl", "cpu", max_threads_per_block=4096, warp_size=1, sm_count=2,
                   max_block_dims=(4096, 4096, 4096))
GPU = DeviceLimits("cuda", "gpu", max_threads_per_block=1024, warp_size=32, sm_count=132, max_regs_per_block=65536,
                   max_shared_per_block=48 * 1024, peak_bandwidth_gbs=4800.0, peak_gflops=60000.0)


def kernels() -> list[Path]:
    return sorted(p for group in ("naive", "byo") for p in (DATA / group).iterdir() if (p / "kernel.toml").exists())


def image(folder: Path, backend: str) -> dict:
    """What the rules make of one kernel for one backend, as plain data."""
    original = load_template(folder)
    made = rules_template(original, backend, CPU if backend == "opencl" else GPU)
    p = made.proposal
    out: dict = {"declined": [[d.name, d.reason] for d in made.applied.declined],
                 "rewrites": [r.name for r in made.applied.rewrites]}
    if p is None:
        out["why_none"] = made.why_none()
        return out
    out.update({
        "diff": {b: source_diff(original.source_for(b), s, b) for b, s in sorted(p.sources.items())},
        "parameters": [[q.name, list(q.values), q.default, q.description] for q in p.parameters],
        "constraints": list(p.constraints), "grid": list(p.grid), "block": list(p.block),
        "shared_bytes": p.shared_bytes, "summary": p.summary, "notes": list(p.notes),
    })
    return out


def images(folder: Path) -> dict:
    original = load_template(folder)
    return {b: image(folder, b) for b in ("opencl", "cuda") if b in original.sources}


def name(folder: Path) -> str:
    return f"{folder.parent.name}_{folder.name}"


if __name__ == "__main__":
    OUT.mkdir(exist_ok=True)
    for k in kernels():
        (OUT / f"{name(k)}.json").write_text(json.dumps(images(k), indent=1, sort_keys=True) + "\n")
        print(name(k), file=sys.stderr)
