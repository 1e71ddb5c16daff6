"""The kernel library against its baselines and PyTorch, on a CUDA device.

    python bench/kernels.py [--kernels silu_and_mul,...] [--budget 48] [--refine 0] [--sessions DIR] [--md FILE]
                            [--grid-time S] [--resume]

For every kernel and problem size: the original kernel (baseline.cu at its own launch), PyTorch
eager and torch.compile (one static compile per size), the tuned best for that size, and the
general config (the one configuration with the best geometric mean over all sizes). Every time
is a median of device-event timings with the L2 flushed before each run. Tuned results pass the
full verification protocol; each size's winner is verified again on new inputs. One size per
kernel is searched exhaustively and its session saved; the others sample the same random
configurations (same seed) after the exhaustive size's 8 fastest; with --refine N the model-guided
strategy then spends N more evaluations on each of those sizes, learning from the sample (a
resumed session). The general config is chosen from configurations measured at every size: each
size's 8 fastest are also measured at the other sizes where they are feasible (sizes whose spaces
differ, like softmax's two vocabularies, sample different configurations). A large exhaustive search can be split over several
calls: --grid-time S stops it after S seconds (the bench then ends, the session saved), and
--resume continues the sessions already in --sessions.
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from kerntune import templates
from kerntune.engine.backends import open_backend
from kerntune.engine.evaluate import Evaluator, VerifyPolicy
from kerntune.engine.result import config_key, ranked
from kerntune.engine.sol import load_peaks
from kerntune.engine.space import infeasible_reason
from kerntune.engine.template import load_template
from kerntune.engine.tune import TuneOptions, TuneRun, resolve_device
from kerntune.tui.text import fmt_config

PLAN = {
    "silu_and_mul": (["llama7b-t1", "llama7b-t128", "llama7b-t2048", "llama70b-t8192"], "llama7b-t2048"),
    "fused_add_rmsnorm": (["llama7b-t1", "llama7b-t128", "llama70b-t2048", "llama70b-t8192"], "llama70b-t2048"),
    "merge_attn_states": (["llama7b-t1", "llama7b-t512", "llama7b-t4096", "llama70b-t8192"], "llama7b-t4096"),
    "softmax": (["llama-t1", "llama-t128", "llama-t2048", "llama-t8192", "llama3-t1", "llama3-t2048"], "llama-t2048"),
    "matmul": (["1024", "2048", "4096"], "2048"),
}
# the bfloat16 variants: the same sizes, the same exhaustive one
PLAN.update({f"{k}_bf16": PLAN[k] for k in ("silu_and_mul", "fused_add_rmsnorm")})


# PyTorch versions of each kernel ---------------------------------------------------------------
def torch_case(name: str, sizes: dict, torch):
    """(function, its arguments) computing the same thing as the kernel with PyTorch."""
    F = torch.nn.functional
    dev = "cuda"
    elem = torch.bfloat16 if name.endswith("_bf16") else torch.float16
    name = name.removesuffix("_bf16")
    if name == "silu_and_mul":
        t, d = sizes["tokens"], sizes["d"]
        x = torch.randn(t, 2 * d, dtype=elem, device=dev)

        def fn(x):
            return F.silu(x[:, :d]) * x[:, d:]

        return fn, (x,)
    if name == "fused_add_rmsnorm":
        t, d = sizes["tokens"], sizes["d"]
        x = torch.randn(t, d, dtype=elem, device=dev)
        res = torch.randn(t, d, dtype=elem, device=dev)
        w = torch.randn(d, dtype=elem, device=dev)

        def fn(x, res, w):
            r = x + res
            res.copy_(r)
            rf = r.float()
            x.copy_((rf * torch.rsqrt(rf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(elem) * w)

        return fn, (x, res, w)
    if name == "merge_attn_states":
        t, h, hd = sizes["tokens"], sizes["heads"], sizes["head_dim"]
        va = torch.randn(t, h, hd, dtype=torch.float16, device=dev)
        vb = torch.randn(t, h, hd, dtype=torch.float16, device=dev)
        sa = torch.randn(t, h, dtype=torch.float32, device=dev)
        sb = torch.randn(t, h, dtype=torch.float32, device=dev)

        def fn(va, sa, vb, sb):
            ninf = torch.full_like(sa, -math.inf)
            sa = torch.where(torch.isinf(sa), ninf, sa)
            sb = torch.where(torch.isinf(sb), ninf, sb)
            m = torch.maximum(sa, sb)
            empty = torch.isinf(m)
            m0 = torch.where(empty, torch.zeros_like(m), m)
            wa, wb = torch.exp(sa - m0), torch.exp(sb - m0)
            total = wa + wb
            fa = torch.where(empty, torch.ones_like(wa), wa / total).unsqueeze(-1)
            fb = torch.where(empty, torch.zeros_like(wb), wb / total).unsqueeze(-1)
            out = (va.float() * fa + vb.float() * fb).half()
            return out, torch.where(empty, m, torch.log(total) + m0)

        return fn, (va, sa, vb, sb)
    if name == "softmax":
        x = torch.rand(sizes["tokens"], sizes["vocab"], device=dev) * 32 - 16
        x[torch.rand_like(x) < 0.02] = -math.inf  # masked tokens, as in the template's inputs

        def fn(x):
            return torch.softmax(x, dim=-1)

        return fn, (x,)
    if name == "matmul":
        a = torch.rand(sizes["M"], sizes["K"], device=dev) * 2 - 1
        b = torch.rand(sizes["K"], sizes["N"], device=dev) * 2 - 1
        return (lambda a, b: a @ b), (a, b)
    raise KeyError(name)


def torch_time(fn, args, torch, flush, reps: int = 100) -> float:
    """Median microseconds of fn(*args), the L2 flushed before each run."""
    for _ in range(5):
        fn(*args)
    torch.cuda.synchronize()
    pairs = []
    for i in range(reps):
        flush.fill_(i & 0xFF)
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn(*args)
        e.record()
        pairs.append((s, e))
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) * 1000.0 for s, e in pairs)


# the bench -------------------------------------------------------------------------------------
TRANSFER = 8  # the exhaustive size's fastest configurations, tried first at every other size
CANDIDATES = 8  # each size's fastest, measured at every size where feasible, for the general config


def fill_candidates(t, by_size: dict, backend, shape: dict | None) -> None:
    """Measure each size's CANDIDATES fastest configurations at the other sizes where they are
    feasible and not yet measured, so that the general config is chosen from configurations known
    at every size even where the sizes' spaces (and so their random samples) differ."""
    candidates = {}
    for results in by_size.values():
        for key, r in sorted(results.items(), key=lambda kv: kv[1].median_us)[:CANDIDATES]:
            candidates[key] = dict(r.config)
    for size, results in by_size.items():
        problem = t.problem(size, (shape or {}).get(size))
        missing = [c for k, c in candidates.items()
                   if k not in results and infeasible_reason(t, c, problem, backend.limits) is None]
        if not missing:
            continue
        ev = Evaluator(backend, t, problem, seed=7, verify=VerifyPolicy(seeds=2, pool=2))
        for c in missing:
            r = ev.evaluate(c)
            if r.ranked:
                results[config_key(c)] = r
        print(f"  {t.name} {size}: {len(missing)} general-config candidates measured", flush=True)


class GridUnfinished(Exception):
    """The exhaustive search stopped at --grid-time; its session is saved for --resume."""


def bench_kernel(name: str, budget: int, sessions: Path, tmp: Path, torch, flush, backend_name: str = "cuda",
                 plan: dict | None = None, shape: dict | None = None, refine: int = 0,
                 grid_time: float = 0.0, resume: bool = False) -> list[dict]:
    t = load_template(templates.path(name))
    sizes, full = (plan or PLAN)[name]
    runs = {}
    start: tuple = ()
    for size in [full, *(s for s in sizes if s != full)]:  # the exhaustive size first: its best seed the others
        exhaustive = size == full
        path = (sessions if exhaustive else tmp) / f"{name}-{size}.toml"
        opts = TuneOptions(backend=backend_name, strategy="grid" if exhaustive else "random",
                           budget=0 if exhaustive else budget, seed=7, problem=size, probe=False,
                           overrides=(shape or {}).get(size, {}), session_path=path,
                           resume=exhaustive and resume and path.exists(),
                           time_limit=grid_time if exhaustive else 0.0, start_from=start,
                           verify=VerifyPolicy(seeds=2, pool=2),
                           command=["python", "bench/kernels.py", "--kernels", name])
        t0 = time.perf_counter()
        out = TuneRun(t, opts).run()
        if exhaustive and "time limit" in out.reason:
            raise GridUnfinished(f"{name} {size}: {len(out.results)} configs of {out.space.feasible} measured "
                                 f"in {time.perf_counter() - t0:.0f} s; {path} saved, continue with --resume")
        if not exhaustive and refine:
            # the shared random sample chooses the general config; the model then hunts this size's best
            out = TuneRun(t, replace(opts, strategy="model", budget=budget + refine, resume=True)).run()
        runs[size] = out
        if exhaustive:
            start = tuple(dict(r.config) for r in ranked(out.results)[:TRANSFER])
        print(f"  {name} {size}: {len(out.results)} configs in {time.perf_counter() - t0:.0f} s, "
              f"best {out.best.median_us:.2f} us ({fmt_config(out.best.config)}), winner check "
              f"{'passed' if out.winner_ok else 'FAILED'}", flush=True)

    backend = open_backend(backend_name)
    rows = []
    try:
        # the general config: measured and verified at every size, best geometric mean
        by_size = {s: {config_key(r.config): r for r in o.results if r.ranked} for s, o in runs.items()}
        fill_candidates(t, by_size, backend, shape)
        common = set.intersection(*(set(m) for m in by_size.values()))
        general = min(common, key=lambda k: sum(math.log(by_size[s][k].median_us) for s in sizes))
        for size in sizes:
            out = runs[size]
            problem = t.problem(size, (shape or {}).get(size))
            ev = Evaluator(backend, t, problem, seed=11, verify=VerifyPolicy(seeds=2, pool=2))
            original = ev.evaluate_original()
            eager = compile_us = float("nan")
            if torch is not None:
                fn, args = torch_case(name, dict(problem.values), torch)
                eager = torch_time(fn, args, torch, flush)
                compiled = torch.compile(fn, dynamic=False)
                compile_us = torch_time(compiled, args, torch, flush)
                del compiled
            best = out.best
            gen = by_size[size][general]
            rows.append({
                "kernel": name, "size": size, "mb": ev.bytes_moved / 1e6, "gflop": ev.flops / 1e9,
                "sol_us": best.sol_us,
                "baseline": original.median_us if original.ranked else float("nan"),
                "baseline_status": original.status, "eager": eager, "compile": compile_us,
                "tuned": best.median_us, "tuned_config": fmt_config(best.config),
                "general": gen.median_us, "general_config": fmt_config(gen.config),
                "winner_ok": out.winner_ok, "configs": len(out.results),
            })
    finally:
        backend.close()
    return rows


def table(rows: list[dict], device: str, bandwidth: float) -> str:
    lines = [
        f"device: {device}; SOL = bytes / {bandwidth:.0f} GB/s (measured copy) or flops / measured fp32 peak",
        "",
        "| kernel | size | MB | baseline us | eager us | compile us | tuned us | general us | % SOL | x baseline | x compile | tuned config |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        sol = 100 * r["sol_us"] / r["tuned"] if r["sol_us"] else float("nan")
        if r["baseline_status"] != "ok":
            r["baseline"] = float("nan")
        lines.append(
            f"| {r['kernel']} | {r['size']} | {r['mb']:.1f} | {r['baseline']:.2f} | {r['eager']:.2f} | "
            f"{r['compile']:.2f} | {r['tuned']:.2f} | {r['general']:.2f} | {sol:.0f}% | "
            f"{r['baseline'] / r['tuned']:.2f} | {r['compile'] / r['tuned']:.2f} | {r['tuned_config']} |")
    lines.append("")
    for kernel in dict.fromkeys(r["kernel"] for r in rows):
        ks = [r for r in rows if r["kernel"] == kernel]
        geo = math.exp(statistics.fmean(math.log(r["baseline"] / r["tuned"]) for r in ks))
        geo_c = math.exp(statistics.fmean(math.log(r["compile"] / r["tuned"]) for r in ks))
        geo_g = math.exp(statistics.fmean(math.log(r["baseline"] / r["general"]) for r in ks))
        lines.append(f"- {kernel}: geomean speedup over the baseline {geo:.2f}x per-size tuned, "
                     f"{geo_g:.2f}x general config ({ks[0]['general_config']}); over torch.compile {geo_c:.2f}x; "
                     f"winners re-verified: {all(r['winner_ok'] for r in ks)}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kernels", default=",".join(PLAN))
    ap.add_argument("--budget", type=int, default=48, help="random configurations per non-exhaustive size")
    ap.add_argument("--refine", type=int, default=0,
                    help="then this many more per non-exhaustive size, chosen by the model-guided strategy")
    ap.add_argument("--sessions", type=Path, default=Path("sessions"))
    ap.add_argument("--md", type=Path)
    ap.add_argument("--grid-time", type=float, default=0.0,
                    help="stop each exhaustive search after this many seconds (0: no limit); the bench then ends")
    ap.add_argument("--resume", action="store_true", help="continue the exhaustive sessions found in --sessions")
    args = ap.parse_args()
    import torch

    _, limits = resolve_device("cuda", 0)
    peaks = load_peaks(limits)
    if peaks is None or peaks.source == "datasheet":
        raise SystemExit("run `kerntune probe` first: % of SOL uses the measured copy bandwidth")
    flush = torch.empty(2 * limits.l2_bytes, dtype=torch.uint8, device="cuda")
    args.sessions.mkdir(parents=True, exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.kernels.split(","):
            try:
                rows += bench_kernel(name, args.budget, args.sessions, Path(tmp), torch, flush, refine=args.refine,
                                     grid_time=args.grid_time, resume=args.resume)
            except GridUnfinished as e:
                raise SystemExit(str(e)) from None
            text = table(rows, limits.name, peaks.bandwidth_gbs)
            print(text, flush=True)  # each kernel's rows as soon as they exist
            if args.md:
                args.md.write_text(text + "\n")


if __name__ == "__main__":
    main()
