"""The rules loop on the library kernels' originals and on naive kernels, against the hand-written templates.

    python bench/agent_loop.py [--kernels silu_and_mul,...] [--rounds 3] [--budget 48]
                               [--template-budget 64] [--backend auto] [--md FILE]
    python bench/agent_loop.py --naive all [--problem NAME] ...
    python bench/agent_loop.py --naive silu_mul,residual_add,gelu_bf16 ...

--naive takes kernels of tests/data/naive (as people first write them: a thread per element or
per row), each tuned at its NAIVE_PROBLEMS size (or --problem) against the hand-written template
NAIVE_BARS names at the same size; a kernel with no bar shows its % of SOL alone.

For a library kernel: a spec without parameters is made from the library's kernel.toml (its
arguments, sizes, cost and reference; its original's own launch; baseline.cu as the source, and
for OpenCL the port in tests/data/originals when there is one). The rules loop templates it and
tunes it (`kerntune tune SPEC --agent rules`, in-process); the hand-written template is tuned on
the same device and problem with the same per-configuration protocol (a random sample of
--template-budget configurations, the default first). Every figure is a verified median with the
cache flushed; every winner is verified again on new inputs.
"""

from __future__ import annotations

import argparse
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path

from kerntune import templates
from kerntune.agents.rules import RulesProvider
from kerntune.engine.loop import LoopOptions, TuningLoop
from kerntune.engine.proposal import dump_spec
from kerntune.engine.template import load_template, read_spec_toml
from kerntune.engine.tune import TuneOptions, TuneRun, resolve_device
from kerntune.tui.text import fmt_config

ROOT = Path(__file__).resolve().parent.parent
PORTS = ROOT / "tests" / "data" / "originals"
PROBLEMS = {"silu_and_mul": "llama7b-t2048", "fused_add_rmsnorm": "llama70b-t2048",
            "merge_attn_states": "llama7b-t4096"}
NAIVE = ROOT / "tests" / "data" / "naive"
# naive kernel -> (the hand-written template that is its bar, or None; the problem both run at)
NAIVE_BARS: dict[str, tuple[str | None, str]] = {
    "silu_mul": ("silu_and_mul", "llama7b-t2048"),
    "silu_mul_bf16": ("silu_and_mul_bf16", "llama7b-t2048"),
    "silu_mul_f32": (None, "llama7b-t2048"),
    "residual_add": ("vector_add", "64M"),
    "residual_add_f16": (None, "64M"),
    "gelu": (None, "gpt2-b8"),
    "gelu_bf16": (None, "gpt2-b8"),
    "adamw": (None, "gpt2-124M"),
    # row-wise (agents/rewrite_rowwise.py)
    "softmax_2pass": ("softmax", "llama-t2048"),
    "softmax_3pass": ("softmax", "llama-t2048"),
    "softmax_online": ("softmax", "llama-t2048"),
    "softmax_bf16": (None, "llama-t2048"),
    "layernorm": (None, "gpt2-t8192"),
    "rmsnorm": (None, "llama-t2048"),
    "rmsnorm_half": (None, "llama-t2048"),
    "cross_entropy": (None, "llama-t2048"),
}


def original_spec(kernel: str, backend: str, into: Path) -> Path | None:
    """The library kernel's original as a spec without parameters; None without a source for the backend."""
    lib = templates.path(kernel).parent
    data = read_spec_toml((lib / "kernel.toml").read_text())
    sources = {}
    if (lib / "baseline.cu").exists():
        sources["cuda"] = "baseline.cu"
    port = PORTS / kernel / "baseline.cl"
    if port.exists():
        sources["opencl"] = "baseline.cl"
    if backend not in sources:
        return None
    d = into / kernel
    d.mkdir(parents=True)
    for f in sources.values():
        shutil.copyfile(lib / f if f.endswith(".cu") else port, d / f)
    kernel_table = {k: v for k, v in data["kernel"].items() if k in ("name", "description", "entry", "reference")}
    kernel_table["sources"] = sources
    if "reference" in kernel_table:
        shutil.copyfile(lib / kernel_table["reference"].split(":")[0], d / kernel_table["reference"].split(":")[0])
    launch = data["launch"]
    data["kernel"] = kernel_table
    data["launch"] = {"grid": launch["baseline_grid"], "block": launch["baseline_block"]}
    for key in ("param", "constraints"):
        data.pop(key, None)
    if backend == "opencl" and (PORTS / kernel / "kernel.toml").exists():
        # the OpenCL port launches its own way (a literal work-group size)
        port_spec = read_spec_toml((PORTS / kernel / "kernel.toml").read_text())
        data["launch"] = port_spec["launch"]
    (d / "kernel.toml").write_text(dump_spec(data))
    return d


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", default=",".join(PROBLEMS))
    ap.add_argument("--naive", help="kernels of tests/data/naive, comma-separated, or `all` (instead of --kernels)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--budget", type=int, default=48, help="evaluations per round of the loop")
    ap.add_argument("--template-budget", type=int, default=64, help="evaluations of the hand-written template")
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--problem", help="one problem for every kernel (default: each kernel's own)")
    ap.add_argument("--shape", action="append", default=[], metavar="NAME=VALUE")
    ap.add_argument("--repeats", type=int, default=0)
    ap.add_argument("--profile-top", type=int, default=0,
                    help="CUDA: profile each round's K best with Nsight Compute (the planner reads the bound)")
    ap.add_argument("--md", type=Path, help="write the table here too")
    ap.add_argument("--sessions", type=Path, default=Path("sessions"))
    args = ap.parse_args()
    backend, limits = resolve_device(args.backend, 0)
    overrides = {k: int(v) for k, v in (s.split("=", 1) for s in args.shape)}
    rows = []
    work = Path(tempfile.mkdtemp(prefix="kerntune-loop-bench-"))
    from kerntune.engine.evaluate import TimingPolicy

    timing = TimingPolicy(min_repeats=args.repeats, max_repeats=args.repeats) if args.repeats else TimingPolicy()
    for kernel, spec, bar, problem in _runs(args, backend, work):
        original = load_template(spec)
        tune = TuneOptions(backend=backend, problem=problem, overrides=overrides, seed=7, timing=timing,
                           profile_top=args.profile_top, session_path=args.sessions / f"{kernel}-loop-rules.toml",
                           command=["python", "bench/agent_loop.py", "--naive" if args.naive else "--kernels", kernel])
        t0 = time.monotonic()
        out = TuningLoop(original, [RulesProvider()], LoopOptions(tune=tune, rounds=args.rounds, budget=args.budget),
                         [lambda ev: None]).run()
        loop_s = time.monotonic() - t0
        hb = None
        if bar is not None:
            library = load_template(templates.path(bar))
            hand = TuneRun(library, TuneOptions(backend=backend, problem=problem, overrides=overrides, seed=7,
                                                timing=timing, strategy="random", budget=args.template_budget,
                                                session_path=work / f"{kernel}-hand.toml")).run()
            hb = hand.best if hand.winner_ok else None
        best = out.best
        params = [p.name for p in out.template.parameters] if out.template is not None else []
        rows.append([
            kernel, original.problem(problem, overrides).label(),
            f"{out.original.median_us:.2f}" if out.original else "-",
            f"{best.median_us:.2f}" if best else "-",
            f"{out.speedup:.2f}" if out.speedup else "-",
            f"{100 * best.sol_fraction:.0f}%" if best and best.sol_fraction else "-",
            str(len(out.rounds)), f"{loop_s:.0f}", " ".join(params) or "-",
            ("the original stays (best config " + f"{out.beaten.median_us:.2f} us: " + fmt_config(out.beaten.config) + ")")
            if out.beaten is not None else fmt_config(best.config) if best else "-",
            bar or "-",
            f"{hb.median_us:.2f}" if hb else "-",
            f"{hb.median_us / best.median_us:.2f}" if hb and best else "-",
            fmt_config(hb.config) if hb else "-",
        ])
        print(" | ".join(rows[-1]), flush=True)
    head = ["kernel", "size", "original us", "loop us", "x original", "% SOL", "rounds", "loop s", "parameters",
            "loop config", "bar", "hand-written us", "hand / loop", "hand-written config"]
    ratios = [float(r[12]) for r in rows if r[12] != "-"]
    if ratios:
        geomean = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
        rows.append(["geomean", "", "", "", "", "", "", "", "", "", "", "", f"{geomean:.2f}", ""])
    table = "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
                      + ["| " + " | ".join(r) + " |" for r in rows])
    print(f"\n{limits.name} ({backend})\n\n{table}")
    if args.md:
        what = "naive kernels" if args.naive else "the library's originals"
        args.md.write_text(f"# The rules loop on {what}, {limits.name} ({backend})\n\n"
                           f"- command: `python {' '.join(sys.argv)}`\n- date: {time.strftime('%Y-%m-%d')}\n\n"
                           f"{table}\n")
    return 0


def _runs(args, backend: str, work: Path):
    """(kernel, spec folder, the bar's template name or None, problem) for each kernel asked for."""
    if args.naive:
        names = sorted(p.name for p in NAIVE.iterdir() if (p / "kernel.toml").is_file()) \
            if args.naive == "all" else args.naive.split(",")
        for name in names:
            d = NAIVE / name
            if not (d / "kernel.toml").is_file():
                print(f"{name}: no kernel.toml in {d}; skipped", file=sys.stderr)
                continue
            spec = load_template(d)
            if backend not in spec.sources:
                print(f"{name}: no {backend} source; skipped", file=sys.stderr)
                continue
            bar, problem = NAIVE_BARS.get(name, (None, None))
            if bar is not None and backend not in load_template(templates.path(bar)).sources:
                bar = None
            copy = work / name
            shutil.copytree(d, copy)
            yield name, copy, bar, args.problem or problem
        return
    for kernel in args.kernels.split(","):
        spec = original_spec(kernel, backend, work)
        if spec is None:
            print(f"{kernel}: no {backend} original; skipped", file=sys.stderr)
            continue
        yield kernel, spec, kernel, args.problem or PROBLEMS.get(kernel)


if __name__ == "__main__":
    sys.exit(main())
