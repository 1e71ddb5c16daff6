"""Building a template's space: the depth-first walk against the flat walk over the product.

    python bench/space.py [--all] [--no-flat] [--flat-max 2000000]

For each space (the rules' template of a kernel of tests/data, on a device, at a problem): the
configurations in the full product, those feasible, the nodes the depth-first walk checked one by
one (partial configurations and feasible ones), the seconds build_space takes, and the seconds the
flat walk (every configuration of the product, one at a time: build_space before the walk) takes,
with whether both give the same configurations in the same order and the same counts per reason.
By default the largest spaces the tests build and a few small ones; --all: every kernel of
tests/data (naive, byo, published) and templates/, for each backend, at its first problem
(long: the flat walk takes minutes over them all). No GPU: everything runs on the CPU.
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from rules_snapshot import CPU, GPU  # noqa: E402  (the devices the rules' snapshot is made for)

from kerntune import templates  # noqa: E402
from kerntune.agents.rules import rules_template  # noqa: E402
from kerntune.engine.device import DeviceLimits  # noqa: E402
from kerntune.engine.proposal import write_template  # noqa: E402
from kerntune.engine.space import SpaceError, _build_space_flat, _Walk, build_space  # noqa: E402
from kerntune.engine.template import Template, load_template  # noqa: E402

DATA = ROOT / "tests" / "data"
# as tests/test_contraction_wgmma.py describes an H100 (compute capability 9.0: wgmma tiles)
HOPPER = DeviceLimits("cuda", "H100-like", compute_capability="9.0", max_threads_per_block=1024, warp_size=32,
                      sm_count=132, max_regs_per_block=65536, max_shared_per_block=48 * 1024,
                      max_shared_per_block_optin=227 * 1024)
DEVICES = {"cpu": CPU, "gpu": GPU, "hopper": HOPPER}
# (kernel, backend, device, problem): the largest products the tests build, and small ones
DEFAULT = [
    ("naive/matmul_half", "cuda", "hopper", "4096"),
    ("naive/matmul_half", "cuda", "gpu", "4096"),
    ("naive/matmul_naive", "cuda", "gpu", "4096"),
    ("naive/matmul_naive", "opencl", "cpu", "4096"),
    ("published/textbook/matmul.toml", "cuda", "gpu", None),
    ("published/oclsdk/matrixmul.toml", "opencl", "cpu", None),
    ("published/textbook/matmul_tiled_bounds.toml", "cuda", "gpu", None),
    ("naive/conv_rows", "cuda", "gpu", None),
    ("naive/softmax_online", "opencl", "cpu", None),
    ("naive/stencil5", "cuda", "gpu", None),
    ("templates/silu_and_mul", None, "gpu", None),
    ("templates/vector_add", None, "gpu", None),
]


def kernel_path(name: str) -> Path:
    if name.startswith("templates/"):
        return Path(templates.path(name.split("/", 1)[1]))
    return DATA / name


def rules_space(name: str, backend: str | None, device: str, folder: Path) -> Template | None:
    """The rules' template of a kernel for a backend on a device (the kernel as it is, without a backend)."""
    original = load_template(kernel_path(name))
    if backend is None:
        return original
    made = rules_template(original, backend, DEVICES[device])
    return None if made.proposal is None else write_template(original, made.proposal, folder, DEVICES[device])


def every_kernel() -> list[tuple[str, str | None, str, str | None]]:
    out: list[tuple[str, str | None, str, str | None]] = []
    folders = sorted(p for g in ("naive", "byo") for p in (DATA / g).iterdir() if (p / "kernel.toml").exists())
    names = [f"{p.parent.name}/{p.name}" for p in folders]
    names += [str(p.relative_to(DATA)) for p in sorted(DATA.glob("published/*/*.toml"))]
    names += [f"templates/{t}" for t in ("vector_add", "silu_and_mul", "softmax", "matmul", "fused_add_rmsnorm",
                                         "merge_attn_states")]
    for name in names:
        if name.startswith("templates/"):
            out.append((name, None, "gpu", None))
            continue
        for backend in load_template(kernel_path(name)).sources:
            for device in (("cpu",) if backend == "opencl" else ("gpu", "hopper")):
                out.append((name, backend, device, None))
    return out


def timed(build, *args):
    """Seconds one build takes (the garbage collector held off meanwhile), and what it built."""
    gc.collect()
    gc.disable()
    try:
        t0 = time.perf_counter()
        out = build(*args)
        return time.perf_counter() - t0, out
    finally:
        gc.enable()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--all", action="store_true", help="every kernel of tests/data and templates/")
    ap.add_argument("--no-flat", action="store_true", help="time the depth-first walk only")
    ap.add_argument("--flat-max", type=int, default=2_000_000, help="skip the flat walk over larger products")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kerntune-space-"))
    print(f"{'space':<58}{'product':>10}{'feasible':>9}{'checked':>9}{'walk s':>8}{'flat s':>8}  same")
    started, differ, flat_total, walk_total = time.perf_counter(), 0, 0.0, 0.0
    for n, (name, backend, device, problem_name) in enumerate(every_kernel() if args.all else DEFAULT):
        t = rules_space(name, backend, device, work / str(n))
        if t is None or not t.parameters:
            continue
        problem = t.problem(problem_name)
        label = f"{name.removesuffix('.toml')} {backend or 'spec'} {device} {problem.name}"
        try:
            walk_s, space = timed(build_space, t, problem, DEVICES[device])
        except SpaceError as e:
            print(f"{label:<58}  {e}")
            continue
        walk = _Walk(t, problem, DEVICES[device], [p.values for p in t.parameters])
        walk.run()
        walk_total += walk_s
        flat_s, same = "", ""
        if not args.no_flat and space.total <= args.flat_max:
            seconds, flat = timed(_build_space_flat, t, problem, DEVICES[device])
            flat_total += seconds
            flat_s = f"{seconds:.2f}"
            ok = (flat.configs, flat.total, flat.pruned) == (space.configs, space.total, space.pruned)
            same = "yes" if ok else "NO"
            differ += not ok
        print(f"{label:<58}{space.total:>10,}{space.feasible:>9,}{walk.work:>9,}{walk_s:>8.2f}{flat_s:>8}  {same}")
    print(f"walk {walk_total:.1f} s, flat {flat_total:.1f} s in all; {differ} spaces differ; "
          f"{time.perf_counter() - started:.0f} s with the rules' templates")


if __name__ == "__main__":
    main()
