"""The rules loop on the library kernels' originals and on naive kernels, against the hand-written templates.

    python bench/agent_loop.py [--kernels silu_and_mul,...] [--rounds 3] [--budget 48]
                               [--template-budget 64] [--backend auto] [--md FILE]
    python bench/agent_loop.py --naive all [--problem NAME] ...
    python bench/agent_loop.py --naive silu_mul,residual_add,gelu_bf16 ...
    python bench/agent_loop.py --published all|sgemm/sgemm_naive,reduction/reduce0,... ...

--naive takes kernels of tests/data/naive (as people first write them: a thread per element, per
row or per output of a matrix product, a shared-memory tree, a stencil), each tuned at its
NAIVE_BARS size (or --problem) against the hand-written template NAIVE_BARS names at the same size
(the library's templates/, or bench/bars/ for the bars written for the cooperating-thread kernels);
a kernel with no bar shows its % of SOL alone. --published takes the specs of tests/data/published
(kernels as people publish them, several to a file; `group/spec`), each at its PUBLISHED_BARS size
against the bar named there: the authors' own faster kernel of the same file where there is one
(a spec of that folder, measured as written), else a bench/bars/ or library template. On CUDA, where PyTorch is installed, the vendor
library doing the same work is timed too (cuBLAS through torch.matmul with TF32 off, torch.sum,
torch's embedding, torch.bincount), the L2 flushed before each run, and a second short table gives kerntune's time
over the hand-written one's and the library's, with medians and 95% intervals (bootstrap of the
median over each one's raw times) and the % of speed-of-light.

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
import statistics
import sys
import tempfile
import time
from pathlib import Path

from kerntune import templates
from kerntune.agents.rules import RulesProvider
from kerntune.engine.loop import LoopOptions, TuningLoop
from kerntune.engine.proposal import dump_spec
from kerntune.engine.template import load_template, read_spec_toml, spec_entry
from kerntune.engine.tune import TuneOptions, TuneRun, resolve_device
from kerntune.tui.text import fmt_config

ROOT = Path(__file__).resolve().parent.parent
PORTS = ROOT / "tests" / "data" / "originals"
PROBLEMS = {"silu_and_mul": "llama7b-t2048", "fused_add_rmsnorm": "llama70b-t2048",
            "merge_attn_states": "llama7b-t4096"}
NAIVE = ROOT / "tests" / "data" / "naive"
BARS = ROOT / "bench" / "bars"  # hand-written bars for the cooperating-thread kernels
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
    # threads that cooperate (agents/rewrite_contraction.py, rewrite_reduction.py, rewrite_stencil.py,
    # rewrite_histogram.py, rewrite_transpose.py)
    "matmul_naive": ("matmul", "4096"),
    "matmul_coalesced": ("matmul", "4096"),  # the bar computes A @ B without the epilogue
    "matmul_half": (None, "4096"),
    "matmul_bf16": (None, "4096"),
    "matmul_batched": (None, "1024"),
    "reduce_interleaved": ("block_sums", "64M"),
    "reduce_nodivergence": ("block_sums", "64M"),
    "reduce_sequential": ("block_sums", "64M"),
    "reduce_atomic": ("reduce_total", "64M"),
    "reduce_firstadd": (None, "64M"),
    "stencil5": ("stencil5_tiled", "8k"),
    "stencil9": (None, "8k"),
    "conv_rows": ("conv_rows_tiled", "8k"),
    "conv_cols": ("conv_cols_tiled", "8k"),
    "stencil1d": (None, "64M"),
    "histogram": (None, "64M"),
    "image_histogram": (None, "4k"),
    "embedding_gather": ("gather_rows", "llama-t8192"),
    "transpose": ("transpose_tiled", "big"),  # agents/rewrite_transpose.py
}
PUBLISHED = ROOT / "tests" / "data" / "published"
# published spec -> (its bar: a spec of tests/data/published, a bench/bars/ or library template, or
# None; the problem both run at)
PUBLISHED_BARS: dict[str, tuple[str | None, str]] = {
    "sgemm/sgemm_naive": ("sgemm/sgemm_shared", "4096"),  # the worklog's shared-memory step
    "sgemm/sgemm_coalesce": ("sgemm/sgemm_shared", "4096"),
    "sgemm/mygemm1": ("sgemm/mygemm2", "4096"),  # the tutorial's local-memory tiles (OpenCL)
    "reduction/reduce0": ("block_sums", "64M"),
    "reduction/reduce1": ("block_sums", "64M"),
    "reduction/reduce2": ("block_sums", "64M"),
    "reduction/reduce3": (None, "64M"),
    "reduction/reduce4": ("reduction/reduce5", "64M"),  # the samples' next step: the tree unrolled
    "reduction/reduce5": (None, "64M"),
    "stencils/heat_step": (None, "8k"),
    "stencils/heat_step_t": (None, "8k"),  # the same step as a template, in double
    "stencils/jacobi_step": (None, "8k"),
    "stencils/stencil7": ("stencil7_marched", "512"),  # a plane's tile, planes marched along z (2.5-D)
    "stencils/stencil7_zloop": ("stencil7_marched", "512"),
    "llm/encoder1": (None, "gpt2-b8"),
    "llm/encoder2": (None, "gpt2-b8"),
    "llm/layernorm1": (None, "gpt2-t8192"),
    "llm/softmax1": ("llm/softmax4", "gpt2-t1024"),  # the trainer's warp-per-row softmax (cg::reduce)
    "llm/softmax3": ("llm/softmax4", "gpt2-t1024"),
    "llm/softmax4": (None, "gpt2-t1024"),
    "llm/matmul1": (None, "gpt2-b8"),
    "llm/gelu": (None, "gpt2-b8"),
    "llm/residual": (None, "gpt2-b8"),
    "llm/crossentropy1": (None, "gpt2-b8"),
    "textbook/matmul": ("textbook/matmul_tiled", "4096"),  # the textbook's next step: TILE_WIDTH tiles
    "textbook/matmul_tiled": (None, "4096"),
    "textbook/matmul_tiled_bounds": (None, "4096"),
    "textbook/conv2d": ("textbook/conv2d_tiled", "8k"),  # the chapter's shared input tile
    "textbook/conv2d_tiled": (None, "8k"),
    "textbook/stencil1d_global": ("textbook/stencil1d", "16m"),  # the shared tile with halo
    "textbook/stencil1d": (None, "16m"),
    "textbook/histo": ("textbook/histo_private", "64m"),  # bins privatised in shared memory
    "textbook/histo_private": ("textbook/histo_interleaved", "64m"),  # the chapter's coarsened threads
    "textbook/histo_contiguous": (None, "64m"),
    "textbook/histo_interleaved": (None, "64m"),
    "byexample/histo_global": ("byexample/histo_shared", "100m"),  # the book's shared bins
    "byexample/histo_shared": (None, "100m"),
    "textbook/reduce_segmented": ("textbook/reduce_coarsened", "64m"),  # the chapter's coarsened threads
    "textbook/reduce_coarsened": (None, "64m"),
    "textbook/scan": (None, "16m"),
    "transpose/transpose_naive": ("transpose/transpose_nobank", "8k"),  # the post's last step
    "transpose/transpose_coalesced": ("transpose/transpose_nobank", "8k"),
    "transpose/transpose_bounds": ("transpose/transpose_nobank", "8k"),
    "transpose/transpose_nobank": ("transpose/copy", "8k"),  # the post's bar: a copy
    "samples/vectoradd": (None, "50m"),
    "samples/matrixmul": (None, "4096"),
    "oclsdk/vectoradd4": (None, "64m"),
    "oclsdk/dotproduct": (None, "16m"),
    "oclsdk/reducefloat4": (None, "16m"),
    "oclsdk/matrixmul": (None, "4096"),
}
# naive kernel -> the vendor library's way of doing the same work (timed through PyTorch on CUDA)
LIBRARY = {"matmul_naive": "sgemm", "matmul_coalesced": "sgemm_epilogue", "matmul_half": "hgemm_nt",
           "matmul_bf16": "bgemm",
           "reduce_interleaved": "block_sums", "reduce_nodivergence": "block_sums",
           "reduce_sequential": "block_sums", "reduce_atomic": "sum", "embedding_gather": "embedding",
           "sgemm_naive": "sgemm_epilogue", "sgemm_coalesce": "sgemm_epilogue", "reduce0": "block_sums",
           "reduce1": "block_sums", "reduce2": "block_sums",
           # the products tiled by hand (their files hold no faster kernel: the library is the bar)
           "sgemm_shared": "sgemm_epilogue", "matmul_tiled": "sgemm", "matmul_tiled_bounds": "sgemm",
           "matrixmul": "sgemm",
           # byte histograms: the count of each of 256 values
           "histogram": "bincount", "image_histogram": "bincount", "histo_global": "bincount",
           "histo_shared": "bincount"}
LIBRARY_WORDS = {"sgemm": "cuBLAS sgemm (torch.matmul, TF32 off)",
                 "sgemm_epilogue": "cuBLAS sgemm with alpha/beta (torch.addmm, TF32 off)",
                 "hgemm_nt": "cuBLAS half A @ B^T (torch.matmul)", "bgemm": "cuBLAS bfloat16 A @ B (torch.matmul)", "block_sums": "torch.sum over rows of 256",
                 "sum": "torch.sum", "embedding": "torch embedding",
                 "bincount": "torch.bincount of 256 byte values"}


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
    data["launch"] = {"grid": spec_entry(launch, "original_grid"), "block": spec_entry(launch, "original_block")}
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
    ap.add_argument("--published", help="specs of tests/data/published (`group/spec`), comma-separated, or `all`")
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
    rows, short = [], []
    work = Path(tempfile.mkdtemp(prefix="kerntune-loop-bench-"))
    from kerntune.engine.evaluate import TimingPolicy

    timing = TimingPolicy(min_repeats=args.repeats, max_repeats=args.repeats) if args.repeats else TimingPolicy()
    aside = bool(args.naive or args.published)  # kernels beside their bars and the vendor library
    flag = "--naive" if args.naive else "--published" if args.published else "--kernels"
    for kernel, spec, bar, problem in _runs(args, backend, work):
        original = load_template(spec)
        tune = TuneOptions(backend=backend, problem=problem, overrides=overrides, seed=7, timing=timing,
                           profile_top=args.profile_top, session_path=args.sessions / f"{kernel}-loop-rules.toml",
                           command=["python", "bench/agent_loop.py", flag, kernel])
        t0 = time.monotonic()
        out = TuningLoop(original, [RulesProvider()], LoopOptions(tune=tune, rounds=args.rounds, budget=args.budget),
                         [lambda ev: None]).run()
        loop_s = time.monotonic() - t0
        hb = None
        lib = library_us(LIBRARY.get(kernel), original.problem(problem, overrides).values, backend) \
            if aside else None
        if bar is not None:
            library = load_template(bar_path(bar))
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
        short.append(short_row(kernel, original.problem(problem, overrides).label(), best, best.sol_us if best else None, hb, lib))
    head = ["kernel", "size", "original us", "loop us", "x original", "% SOL", "rounds", "loop s", "parameters",
            "loop config", "bar", "hand-written us", "hand / loop", "hand-written config"]
    ratios = [float(r[12]) for r in rows if r[12] != "-"]
    if ratios:
        geomean = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
        rows.append(["geomean", "", "", "", "", "", "", "", "", "", "", "", f"{geomean:.2f}", ""])
    table = "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
                      + ["| " + " | ".join(r) + " |" for r in rows])
    print(f"\n{limits.name} ({backend})\n\n{table}")
    brief = ""
    if aside and short:
        head2 = ["kernel", "size", "kerntune us", "hand-written us", "library us", "kerntune / hand (time)",
                 "kerntune / library (time)", "kerntune % SOL", "library % SOL"]
        brief = "\n".join(["| " + " | ".join(head2) + " |", "|" + "---|" * len(head2)]
                          + ["| " + " | ".join(r) + " |" for r in short])
        used = sorted({LIBRARY[r[0]] for r in short if r[4] != "-"})
        brief += ("\n\nlibrary: " + "; ".join(f"{k}: {LIBRARY_WORDS[k]}" for k in used) if used else "") + \
            "\nmedians [95% interval of the median]; a time ratio above 1 is kerntune slower"
        print(f"\n{brief}")
    if args.md:
        what = "naive kernels" if args.naive else "published kernels" if args.published else "the library's originals"
        args.md.write_text(f"# The rules loop on {what}, {limits.name} ({backend})\n\n"
                           f"- command: `python {' '.join(sys.argv)}`\n- date: {time.strftime('%Y-%m-%d')}\n\n"
                           f"{table}\n" + (f"\n{brief}\n" if brief else ""))
    return 0


def bar_path(bar: str) -> Path:
    """A bar's template: a published spec (`sgemm/sgemm_shared`), bench/bars/, else the library's."""
    if (PUBLISHED / f"{bar}.toml").is_file():
        return PUBLISHED / f"{bar}.toml"
    return BARS / bar if (BARS / bar / "kernel.toml").is_file() else templates.path(bar)


def median_interval(times: list[float] | tuple[float, ...], seed: int = 7) -> tuple[float, float, float]:
    """The median of the times and a 95% interval of it (bootstrap, 1000 resamples)."""
    import numpy as np

    t = np.asarray(times, dtype=float)
    if t.size == 0:
        return math.nan, math.nan, math.nan
    rng = np.random.default_rng(seed)
    medians = np.median(rng.choice(t, size=(1000, t.size), replace=True), axis=1)
    return float(np.median(t)), float(np.percentile(medians, 2.5)), float(np.percentile(medians, 97.5))


def fmt_interval(times) -> str:
    if not times:
        return "-"
    m, lo, hi = median_interval(times)
    return f"{m:.1f} [{lo:.1f}, {hi:.1f}]"


def short_row(kernel: str, size: str, best, sol_us, hand, lib) -> list[str]:
    """A row of the short table: medians with intervals, the ratios of times, % of SOL."""
    k = statistics.median(best.times_us) if best is not None and best.times_us else None
    h = statistics.median(hand.times_us) if hand is not None and hand.times_us else None
    b = statistics.median(lib) if lib else None
    return [kernel, size, fmt_interval(best.times_us if best else ()), fmt_interval(hand.times_us if hand else ()),
            fmt_interval(lib or ()), f"{k / h:.2f}" if k and h else "-", f"{k / b:.2f}" if k and b else "-",
            f"{100 * sol_us / k:.0f}%" if k and sol_us else "-", f"{100 * sol_us / b:.0f}%" if b and sol_us else "-"]


def product_sizes(sizes: dict) -> tuple[int, int, int]:
    """(M, N, K) of a matrix product's problem as its spec names them: M, N, K; the textbook's square
    Width; the samples' hA, wA (= K) and wB."""
    if "Width" in sizes:
        return sizes["Width"], sizes["Width"], sizes["Width"]
    if "hA" in sizes:
        return sizes["hA"], sizes["wB"], sizes["wA"]
    return sizes["M"], sizes["N"], sizes["K"]


def library_us(what: str | None, sizes: dict, backend: str, reps: int = 100) -> list[float] | None:
    """Raw times (us) of the vendor library doing `what` at the sizes, through PyTorch on CUDA, the
    L2 flushed before each run; None without CUDA, PyTorch or a library for it."""
    if what is None or backend != "cuda":
        return None
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = "cuda"
    if what in ("sgemm", "sgemm_epilogue", "hgemm_nt", "bgemm"):
        M, N, K = product_sizes(sizes)
        dt = {"hgemm_nt": torch.float16, "bgemm": torch.bfloat16}.get(what, torch.float32)
        # the specs' inputs: uniform in [-1, 1] (the tensor cores' power, so their clocks, follow the data)
        a = torch.rand(M, K, device=dev, dtype=dt) * 2 - 1
        b = (torch.rand(N, K, device=dev, dtype=dt) * 2 - 1).t() if what == "hgemm_nt" else \
            torch.rand(K, N, device=dev, dtype=dt) * 2 - 1
        c = torch.rand(M, N, device=dev, dtype=dt)
        if what == "sgemm_epilogue":
            def fn():
                torch.addmm(c, a, b, beta=-0.5, alpha=1.5, out=c)
        else:
            def fn():
                torch.matmul(a, b, out=c)
    elif what in ("sum", "block_sums"):
        x = torch.randn(sizes["n"], device=dev)
        out = torch.empty((), device=dev) if what == "sum" else torch.empty(sizes["n"] // 256, device=dev)
        view = x if what == "sum" else x[: sizes["n"] // 256 * 256].view(-1, 256)

        def fn():
            if what == "sum":
                torch.sum(view, dim=0, out=out)
            else:
                torch.sum(view, dim=1, out=out)
    elif what == "bincount":
        n = next((sizes[k] for k in ("n", "size", "length") if k in sizes), None)
        n = sizes["width"] * sizes["height"] if n is None else n
        x = torch.randint(0, 256, (n,), device=dev, dtype=torch.uint8)
        try:
            torch.bincount(x[:16], minlength=256)
        except RuntimeError:  # a build that counts only wider integers: the bytes widened once, untimed
            x = x.to(torch.int32)

        def fn():
            torch.bincount(x, minlength=256)
    elif what == "embedding":
        table = torch.randn(sizes["vocab"], sizes["dim"], device=dev)
        ids = torch.randint(0, sizes["vocab"], (sizes["tokens"],), device=dev)
        out = torch.empty(sizes["tokens"], sizes["dim"], device=dev)

        def fn():
            torch.index_select(table, 0, ids, out=out)
    else:
        return None
    flush = torch.empty(256 * 1024 * 1024, dtype=torch.uint8, device=dev)
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    pairs = []
    for i in range(reps):
        flush.fill_(i & 0xFF)
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        pairs.append((s, e))
    torch.cuda.synchronize()
    return [s.elapsed_time(e) * 1000.0 for s, e in pairs]


def _runs(args, backend: str, work: Path):
    """(kernel, spec folder, the bar's template name or None, problem) for each kernel asked for."""
    if args.published:
        names = sorted(PUBLISHED_BARS) if args.published == "all" else args.published.split(",")
        for name in names:
            path = PUBLISHED / f"{name}.toml"
            if not path.is_file():
                print(f"{name}: no {path}; skipped", file=sys.stderr)
                continue
            if backend not in load_template(path).sources:
                print(f"{name}: no {backend} source; skipped", file=sys.stderr)
                continue
            bar, problem = PUBLISHED_BARS.get(name, (None, None))
            if bar is not None and backend not in load_template(bar_path(bar)).sources:
                bar = None
            copy = work / path.parent.name  # the spec beside its file of kernels and its reference
            if not copy.exists():
                shutil.copytree(path.parent, copy)
            yield path.stem, copy / path.name, bar, args.problem or problem
        return
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
            if bar is not None and backend not in load_template(bar_path(bar)).sources:
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
