"""The row-wise rewrite on naive one-thread-per-row kernels: templated by the rules, gated, tuned with
groups of lanes per row, the row kept in registers and moved in packs, an online softmax's pass run
as independent chains a lane, and re-verified on PoCL; the CUDA versions compiled with nvcc with
sub-warp, warp and multi-warp groups; kernels that are not row-wise refused with the reason."""

from __future__ import annotations

import re
import shutil
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from rewrite_support import preprocessed

from kerntune.agents.lift import lift_template
from kerntune.agents.rewrite_rowwise import NotRowwise, analyse, rewrite_rowwise
from kerntune.agents.rewrites import REWRITES, apply_rewrites, compose
from kerntune.agents.rules import GridCount, RulesProvider, analysis_line
from kerntune.engine.backends import cuda_toolchain as cuda
from kerntune.engine.device import DeviceLimits
from kerntune.engine.evaluate import Evaluator, TimingPolicy
from kerntune.engine.gate import check_proposal
from kerntune.engine.proposal import narrowed, original_launch, write_template
from kerntune.engine.template import load_template
from kerntune.engine.tune import TuneOptions, TuneRun

NAIVE = Path(__file__).resolve().parent / "data" / "naive"
CPU = DeviceLimits("opencl", "cpu", max_threads_per_block=4096, warp_size=1, sm_count=2)
GPU = DeviceLimits("cuda", "gpu", max_threads_per_block=1024, warp_size=32, sm_count=132, max_regs_per_block=65536)
FAST = TimingPolicy(warmup=1, min_repeats=3, max_repeats=3, target_s=0.002)
ROW_KERNELS = ["softmax_online", "softmax_2pass", "softmax_3pass", "layernorm", "rmsnorm", "rmsnorm_half",
               "cross_entropy"]
SMALL = {"cross_entropy": {"B": 24, "V": 300}}
CHAINED = {"softmax_online"}
# every row kernel here calls exp, log, sqrt or rsqrt: FAST_MATH comes last (agents/rewrite_fastmath.py)


def templated(name: str, backend: str, limits: DeviceLimits):
    t = load_template(NAIVE / name)
    proposal, applied = compose(t, backend, limits, lift_template(t, backend, limits).proposal)
    return t, proposal, applied


def small(t):
    return t.problem(None, SMALL.get(t.name, {"N": 24, "C": 300}))


@pytest.mark.parametrize("name", ROW_KERNELS)
def test_a_naive_row_kernel_is_spread_over_lanes_gated_tuned_and_reverified_on_pocl(name, tmp_path, opencl_backend):
    original, proposal, applied = templated(name, "opencl", CPU)
    chains = ["CHAINS"] if name in CHAINED else []  # only a pass carried through an exponential is split
    assert [r.name for r in applied.rewrites] == ["rowwise", "rowwise_keep"] + ["rowwise_chains"] * len(chains) + [
        "fast_math"]
    assert [p.name for p in proposal.parameters] == ["BLOCK", "LANES", "KEEP", "VEC"] + chains + ["FAST_MATH"]
    assert proposal.default_config == {"BLOCK": int(original_launch(original, CPU)[1][0]), "LANES": 1, "KEEP": 0,
                                       "VEC": 1, **{c: 1 for c in chains}, "FAST_MATH": 0}
    assert proposal.grid[0].endswith("(BLOCK // LANES))") and proposal.block == ("BLOCK",)
    assert "LANES == 1 or LANES == BLOCK" in proposal.constraints  # OpenCL: a work-group per row
    assert "KEEP % VEC == 0" in proposal.constraints
    verdict = check_proposal(original, proposal, tmp_path / "tpl", backend="opencl", device=0,
                             problem=small(original), limits=CPU, timeout=120)
    assert verdict.ok, verdict.reason
    template = verdict.template
    # groups of lanes, each keeping 8 elements in packs of 2, give the original's outputs at every
    # verification size: rows longer than the kept 32 elements and not a multiple of them (300, 77),
    # a row shorter than that (19: lanes that keep nothing), an odd row (a last element past the packs)
    ev = Evaluator(opencl_backend, template, small(template), seed=1, timing=FAST)
    ok, _, message = ev.reproduces_original({"BLOCK": 4, "LANES": 4, "KEEP": 8, "VEC": 2}, (3, 4))
    assert ok, message
    for config in ({"BLOCK": 4, "LANES": 4, "KEEP": 8, "VEC": 1, "CHAINS": 4},  # chains over kept elements,
                   {"BLOCK": 8, "LANES": 8, "KEEP": 8, "VEC": 2, "CHAINS": 4},  # two packs a group past them,
                   {"BLOCK": 2, "LANES": 2, "KEEP": 0, "VEC": 4, "CHAINS": 2},  # a pack's elements in turn,
                   {"BLOCK": 1, "LANES": 1, "KEEP": 0, "VEC": 1, "CHAINS": 4}) if chains else ():  # a lone lane
        ok, _, message = ev.reproduces_original(config, (3, 4))
        assert ok, f"{config}: {message}"
    # FAST_MATH is tuned in tests/test_rewrite_fastmath.py; chains, where made, tuned at 4
    grid = narrowed(template, {"BLOCK": (16,), "LANES": (16,), "KEEP": (0, 16), "VEC": (4,), "FAST_MATH": (0,),
                               **{c: (4,) for c in chains}})
    run = TuneRun(grid, TuneOptions(backend="opencl", problem="small", overrides=SMALL.get(name, {"N": 24, "C": 300}),
                                    seed=5, timing=FAST, strategy="grid", session_path=tmp_path / "tune.toml")).run()
    assert run.best is not None and run.winner_ok
    assert all(r.status == "ok" for r in run.results)
    assert {r.config["KEEP"] for r in run.results} == {0, 16}


@pytest.mark.skipif(shutil.which("cpp") is None, reason="needs the C preprocessor")
@pytest.mark.parametrize("name,backend", [("softmax_online", "cuda"), ("layernorm", "opencl"),
                                          ("cross_entropy", "cuda"), ("softmax_2pass", "opencl")])
def test_the_default_is_the_original_token_for_token_once_preprocessed(name, backend):
    t, proposal, _ = templated(name, backend, GPU if backend == "cuda" else CPU)
    out = proposal.sources[backend]
    original = t.source_for(backend)
    assert preprocessed(out, proposal.default_config) == preprocessed(original, {})
    assert preprocessed(out, {}) == preprocessed(original, {})  # the guards' own defaults
    assert preprocessed(out, {"BLOCK": 4, "LANES": 4}) != preprocessed(original, {})
    assert preprocessed(out, {"KEEP": 8, "VEC": 2}) != preprocessed(original, {})
    assert (preprocessed(out, {"CHAINS": 2}) != preprocessed(original, {})) == (name in CHAINED)


def test_the_rewrite_strides_the_loops_combines_the_accumulators_and_leaves_one_lane_to_write():
    _, proposal, _ = templated("layernorm", "cuda", GPU)
    out = proposal.sources["cuda"]
    assert out.count("for (int i = LANE_FIRST(0); i < C; LANE_NEXT(i, i++))") == 3
    assert "#if LANES > 1\n        m = row_sum_float(m);\n#endif\n        m = m / C;" in out
    assert "#if LANES > 1\n        v = row_sum_float(v);\n#endif" in out
    assert "LEAD_ONLY(mean[idx] = m);" in out and "LEAD_ONLY(rstd[idx] = s);" in out
    assert "int idx = ROW_INDEX(blockIdx.x * blockDim.x + threadIdx.x);" in out
    assert "#define ROW_INDEX(original) (blockIdx.x * (BLOCK / LANES) + threadIdx.x / LANES)" in out
    assert proposal.constraints[-4:-2] == ("LANES <= 32 or LANES == BLOCK", "BLOCK % LANES == 0")
    _, online, _ = templated("softmax_online", "cuda", GPU)
    assert "row_online_float(&maxval, &sum);" in online.sources["cuda"]
    assert "s2 * KT_FAST(expf, __expf)(m2 - top)" in online.sources["cuda"]  # the kernel's own exponential


def test_without_a_lifted_block_size_rows_a_block_is_a_parameter_of_its_own(tmp_path, opencl_backend):
    t = load_template(NAIVE / "rmsnorm")
    grid, block = original_launch(t, CPU)
    sources = {b: t.source_for(b) for b in t.sources}
    applied = apply_rewrites(t, sources, "opencl", tuple(grid), tuple(block), {}, CPU)
    r = next(r for r in applied.rewrites if r.name == "rowwise")
    assert [(p.name, p.default) for p in r.parameters] == [("LANES", 1), ("ROWS", 256)]
    assert r.grid == ("ceil_div(N, ROWS)",) and r.block == ("LANES * ROWS",)
    assert "#ifndef ROWS\n#define ROWS 256\n#endif" in applied.sources["opencl"]


FOREIGN = {
    "scan": ("float acc = 0.0f;\n    for (int i = 0; i < C; i++) { acc += x[i]; y[i] = acc; }",
             "acc is read while it accumulates"),
    "neighbour": ("for (int i = 0; i < C; i++) y[i] = x[i] + y[i - 1];",
                  "y is read at another element than the one written there"),
    "argmax": ("float best = -INFINITY; int at = 0;\n"
               "    for (int i = 0; i < C; i++) if (x[i] > best) { best = x[i]; at = i; }\n    y[0] = at;",
               "at is carried from one element to the next"),
    "offset_sum": ("float s = x[0];\n    for (int i = 0; i < C; i++) s += x[i];\n    y[0] = s;",
                   "the sum s starts from x[0], not 0"),
    "fixed_element": ("for (int i = 0; i < C; i++) y[0] = x[i];",
                      "y is written at an element other than the loop's own"),
    "nested": ("for (int i = 0; i < C; i++) for (int k = 0; k < 4; k++) y[i] += x[k];",
               "a loop inside the row loop"),
    "early_exit": ("for (int i = 0; i < C; i++) { if (x[i] < 0) break; y[i] = x[i]; }",
                   "the loop over the row may end early"),
    "elementwise": ("y[0] = x[0];", "no loop over a row"),
    "cooperating": ("for (int i = 0; i < C; i++) y[i] = x[i];\n    __syncthreads();",
                    "__syncthreads: the kernel's threads already cooperate"),
}


@pytest.mark.parametrize("case", sorted(FOREIGN))
def test_a_kernel_that_is_not_row_wise_is_refused_with_the_reason(case):
    body, reason = FOREIGN[case]
    src = ("__global__ void k(float* out, const float* inp, int N, int C) {\n"
           "    int row = blockIdx.x * blockDim.x + threadIdx.x;\n    if (row >= N) return;\n"
           "    const float* x = inp + row * C;\n    float* y = out + row * C;\n"
           f"    {body}\n}}\n")
    with pytest.raises(NotRowwise, match=re.escape(reason)):
        analyse(src, "k")


def test_the_online_pair_is_found_in_its_fmax_form_too():
    src = ("__global__ void k(float* out, const float* x, int N, int C) {\n"
           "    int r = threadIdx.x + blockDim.x * blockIdx.x;\n"
           "    if (r < N) {\n        float m = -INFINITY, s = 0.0f;\n"
           "        for (int i = 0; i < C; ++i) {\n            float m_new = fmaxf(m, x[r * C + i]);\n"
           "            s = s * __expf(m - m_new) + __expf(x[r * C + i] - m_new);\n            m = m_new;\n        }\n"
           "        out[r] = m + logf(s);\n    }\n}\n")
    k = analyse(src, "k")
    [acc] = k.accumulators
    assert (acc.name, acc.op, acc.partner, acc.exp) == ("m", "online", "s", "__expf")
    assert len(k.lead_stores) == 1


def test_the_row_wise_rewrite_is_declined_on_a_runtime_that_miscompiles_its_store_loop():
    broken = replace(CPU, driver="Portable Computing Language 3.1+debian", extra={"defects": ["store-after-barrier"]})
    _, proposal, applied = templated("softmax_online", "opencl", broken)
    assert "rowwise" not in [r.name for r in applied.rewrites] and "LANES" not in [p.name for p in proposal.parameters]
    why = next(d.reason for d in applied.declined if d.name == "rowwise")
    assert why == ("this device's OpenCL runtime (Portable Computing Language 3.1+debian) miscompiles it: a lane "
                   "group's guarded store loop after a barrier stores past its bound (its self-check at start; "
                   "`kerntune devices`)")
    # the template's notes, which the plan shows, say so
    assert f"no rowwise rewrite: {why}" in proposal.notes
    # a device without the defect, and CUDA, keep it
    assert "rowwise" in [r.name for r in templated("softmax_online", "opencl", CPU)[2].rewrites]


def test_the_registry_runs_the_row_wise_rewrite_after_the_elementwise_one():
    names = [f.__module__.rsplit(".", 1)[-1] for f in REWRITES]
    assert names.index("rewrite_rowwise") == names.index("rewrite_elementwise") + 1
    assert rewrite_rowwise in REWRITES


@pytest.mark.skipif(cuda.find_nvcc() is None, reason="nvcc not found")
@pytest.mark.parametrize("name,config", [("softmax_online", {"BLOCK": 128, "LANES": 8}),
                                         ("softmax_bf16", {"BLOCK": 256, "LANES": 256}),
                                         ("rmsnorm_half", {"BLOCK": 64, "LANES": 32}),
                                         ("softmax_2pass", {"BLOCK": 1024, "LANES": 1024, "KEEP": 32, "VEC": 2}),
                                         ("softmax_bf16", {"BLOCK": 256, "LANES": 256, "KEEP": 32, "VEC": 8}),
                                         ("softmax_online", {"BLOCK": 128, "LANES": 32, "KEEP": 32, "VEC": 4,
                                                             "CHAINS": 4}),
                                         ("softmax_online", {"BLOCK": 256, "LANES": 256, "KEEP": 16, "VEC": 1,
                                                             "CHAINS": 2})])
def test_the_cuda_rewrite_compiles_with_sub_warp_warp_and_multi_warp_groups(name, config):
    """...and the row a lane keeps stays in registers: no spill, no stack (a 2-pass softmax keeps its
    input, then its output; KEEP * 1024 threads fill the block's registers)."""
    t, proposal, applied = templated(name, "cuda", GPU)
    assert [r.name for r in applied.rewrites][:2] == ["rowwise", "rowwise_keep"]
    _, info, _ = cuda.compile_cubin(proposal.sources["cuda"], t.entry, {k: str(v) for k, v in config.items()},
                                    t.compile_options.get("cuda", ()), "sm_90")
    assert info.get("spill_stores", 0) == 0 and info.get("stack_frame", 0) == 0


H200 = replace(GPU, peak_bandwidth_gbs=4800.0, peak_gflops=60000.0)


@pytest.mark.parametrize("flops,offered", [("4 * N * C", True), ("40000 * N * C", False)])
def test_the_rules_first_grid_offers_keeping_the_row_to_a_memory_bound_kernel_only(flops, offered, tmp_path):
    t = load_template(NAIVE / "softmax_3pass")
    if flops != "4 * N * C":  # the same kernel with a cost that says it is compute-bound
        d = tmp_path / "compute"
        shutil.copytree(NAIVE / "softmax_3pass", d)
        spec = d / "kernel.toml"
        spec.write_text(spec.read_text().replace('flops = "4 * N * C"', f'flops = "{flops}"'))
        t = load_template(d)
    rules = RulesProvider()  # FAST_MATH, a switch, is held at its default: the row-wise stages take the budget
    state = SimpleNamespace(original=t, backend="cuda", limits=H200, problem=t.problem("llama-t2048"), history=(),
                            best=None, budget=32, template_dir=tmp_path / "tpl", say=lambda *a: None)
    proposal = rules.generate(state, None)
    state.template = write_template(t, proposal, tmp_path / "tpl", H200)
    plan = rules.tune(state)
    values = plan.values
    assert ("memory-bound" in analysis_line(state)) == offered
    assert ("the values the rewrites name first" in plan.reason) == offered
    assert GridCount(state.template, state.problem, H200)(values) <= 32 and values["FAST_MATH"] == (0,)
    if offered:  # a warp or a block a row, the row kept or not, in 16-byte packs or not
        assert values["KEEP"] == (0, 32) and values["VEC"] == (1, 4) and values["LANES"] == (1, 32, 1024)


def test_a_rejection_that_names_keep_drops_the_second_stage_and_keeps_the_lanes():
    t = load_template(NAIVE / "layernorm")
    state = SimpleNamespace(original=t, backend="opencl", limits=CPU)
    rules = RulesProvider()
    first = rules.generate(state, None)
    assert [p.name for p in first.parameters] == ["BLOCK", "LANES", "KEEP", "VEC", "FAST_MATH"]
    again = rules.generate(state, "the configuration KEEP=8 failed: wrong result")
    assert [p.name for p in again.parameters] == ["BLOCK", "LANES", "FAST_MATH"]
    assert rules.rejected == [("rowwise_keep", "the configuration KEEP=8 failed: wrong result")]
    assert "KEEP" not in again.sources["opencl"] and "LANE_FIRST" in again.sources["opencl"]


def kept_in(body: str):
    src = ("__global__ void k(float* out, const float* inp, int N, int C) {\n"
           "    int row = blockIdx.x * blockDim.x + threadIdx.x;\n    if (row >= N) return;\n"
           "    const float* x = inp + row * C;\n    float* y = out + row * C;\n    float s = 0.0f;\n"
           f"    {body}\n}}\n")
    return analyse(src, "k")


# what the analysis keeps of a row read twice, and why it keeps nothing where that is not safe
KEEPS = {
    "reread": ("for (int i = 0; i < C; i++) s += x[i];\n    for (int i = 0; i < C; i++) y[i] = x[i] / s;", ["x"]),
    "written_then_rescaled": ("for (int i = 0; i < C; i++) { y[i] = x[i]; s += y[i]; }\n"
                              "    for (int i = 0; i < C; i++) y[i] *= s;", ["y"]),
    "read_once": ("for (int i = 0; i < C; i++) y[i] = x[i];", []),
    "first_read_on_some_iterations": ("for (int i = 0; i < C; i++) if (i % 2 == 0) s += x[i];\n"
                                      "    for (int i = 0; i < C; i++) y[i] = x[i] / s;", []),
    "written_through_another_name": ("float* w = (float*)inp + row * C;\n"
                                     "    for (int i = 0; i < C; i++) s += x[i];\n"
                                     "    for (int i = 0; i < C; i++) w[i] = x[i] / s;", []),
    "pointer_passed_on": ("for (int i = 0; i < C; i++) s += x[i];\n    s += __ldg(x);\n"
                          "    for (int i = 0; i < C; i++) y[i] = x[i] / s;", []),
    "other_offsets": ("for (int i = 0; i < C; i++) s += x[i];\n"
                      "    for (int i = 0; i < C; i++) y[i] = x[i + 1] / s;", []),
}


@pytest.mark.parametrize("case", sorted(KEEPS))
def test_a_row_is_kept_in_registers_only_where_every_pass_reads_the_same_elements_of_a_buffer_it_alone_reaches(case):
    body, kept = KEEPS[case]
    k = kept_in(body)
    assert ([a.array for a in k.keep.kept] if k.keep is not None else []) == kept
    if kept:
        assert k.keep is not None, k.keep_reason


def test_loops_over_different_ranges_that_share_a_written_array_are_not_packed():
    k = kept_in("for (int i = 0; i < C; i++) y[i] = x[i];\n    for (int i = 0; i < C - 1; i++) s += y[i];")
    assert k.keep is None and "over a different range" in k.keep_reason


def test_the_online_softmax_pass_runs_as_independent_chains_combined_by_the_lanes_own_merge(tmp_path, opencl_backend,
                                                                                          monkeypatch):
    """...and a combine that forgets to rescale a chain's sum to the merged maximum is caught by the
    verification (the test would not pass with a broken combine)."""
    _, proposal, applied = templated("softmax_online", "cuda", GPU)
    out = proposal.sources["cuda"]
    assert next(r for r in applied.rewrites if r.name == "rowwise_chains").first == {"CHAINS": (1, 2, 4)}
    assert "float kt_ch_maxval[CHAINS];" in out and "kt_ch_sum[kt_c] = kt_c == 0 ? sum : (float)0;" in out
    assert "kt_ch_sum[0] = (kt_ch_maxval[0] == top ? kt_ch_sum[0] : kt_ch_sum[0] * KT_FAST(expf, __expf)(kt_ch_maxval[0] - top))" in out
    assert "maxval = kt_ch_maxval[0];\n            sum = kt_ch_sum[0];" in out
    assert out.count("#if KEEP > 0 || VEC > 1 || CHAINS > 1") == 2  # the prelude and the online pass, not the output
    from kerntune.agents import rewrite_rowchains

    def unscaled(self, chains, dialect, ind):
        return [f"{ind}for (int kt_c = 1; kt_c < {chains}; ++kt_c) {{",
                f"{ind}    kt_ch_maxval[0] = fmax(kt_ch_maxval[0], kt_ch_maxval[kt_c]);",
                f"{ind}    kt_ch_sum[0] += kt_ch_sum[kt_c];", f"{ind}}}", f"{ind}maxval = kt_ch_maxval[0];",
                f"{ind}sum = kt_ch_sum[0];"]

    monkeypatch.setattr(rewrite_rowchains.ChainLoop, "finish", unscaled)
    original, broken, _ = templated("softmax_online", "opencl", CPU)
    template = write_template(original, broken, tmp_path / "tpl", CPU)
    ev = Evaluator(opencl_backend, template, small(template), seed=1, timing=FAST)
    assert ev.reproduces_original({"BLOCK": 1, "LANES": 1, "CHAINS": 1}, (3,))[0]  # one chain: nothing to combine
    ok, _, message = ev.reproduces_original({"BLOCK": 4, "LANES": 4, "KEEP": 8, "VEC": 1, "CHAINS": 4}, (3,))
    assert not ok and "CHAINS" not in message


def test_a_kernel_whose_passes_carry_no_exponential_is_not_split_into_chains():
    _, proposal, applied = templated("softmax_2pass", "cuda", GPU)  # its sum adds exponentials, none carried
    assert [(d.name, d.reason) for d in applied.declined if d.name == "rowwise_chains"] == [
        ("rowwise_chains", "no pass carries a value through an exponential from one element to the next")]
    assert "CHAINS" not in proposal.sources["cuda"]


@pytest.mark.parametrize("name,offered", [("softmax_online", True), ("softmax_3pass", False)])
def test_the_rules_offer_chains_where_a_pass_is_carried_through_an_exponential(name, offered, tmp_path):
    t = load_template(NAIVE / name)
    rules = RulesProvider()
    state = SimpleNamespace(original=t, backend="cuda", limits=H200, problem=t.problem("llama-t2048"), history=(),
                            best=None, budget=48, template_dir=tmp_path / "tpl", say=lambda *a: None)
    proposal = rules.generate(state, None)
    assert ("(CHAINS)" in analysis_line(state)) == offered
    state.template = write_template(t, proposal, tmp_path / "tpl", H200)
    values = rules.tune(state).values
    assert values.get("CHAINS") == ((1, 4) if offered else None)  # the budget keeps the ends of 1, 2, 4


def test_the_row_analysis_reads_the_kernel_and_what_it_calls_never_the_files_other_kernels():
    """A file holding a warp-shuffle helper and another kernel besides the row kernel: only what the
    row kernel reaches decides (the kernel model's functions, loops and calls)."""
    row = ("__global__ void rows(float* out, const float* inp, int N, int C) {\n"
           "    int row = blockIdx.x * blockDim.x + threadIdx.x;\n    if (row >= N) return;\n"
           "    float s = 0.0f;\n    for (int i = 0; i < C; i++) s += inp[row * C + i];\n    out[row] = s;\n}\n")
    helper = ("__device__ float warp_sum(float v) {\n"
              "    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);\n    return v;\n}\n")
    other = ("__global__ void by_warp(float* out, const float* inp, int C) {\n"
             "    float v = inp[blockIdx.x * C + threadIdx.x];\n    v = warp_sum(v);\n"
             "    if (threadIdx.x == 0) out[blockIdx.x] = v;\n}\n")
    k = analyse(helper + other + row, "rows")
    assert [lp.var for lp in k.loops] == ["i"] and [a.name for a in k.accumulators] == ["s"]
    calling = row.replace("out[row] = s;", "out[row] = warp_sum(s);")
    with pytest.raises(NotRowwise, match=re.escape("line 2: __shfl_down_sync: the kernel's threads already cooperate")):
        analyse(helper + other + calling, "rows")
    with pytest.raises(NotRowwise, match="no thread index of the form"):
        analyse(helper + other + row, "by_warp")
