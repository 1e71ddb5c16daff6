"""FAST_MATH on naive kernels: at 0 the original token for token once preprocessed, at 1 the
hardware's fast math functions at every call the syntax tree finds (the kernel's, its helpers', the
earlier rewrites'), compiled by nvcc and tuned with both values on PoCL; doubles, unknown types and
kernels with nothing to switch left alone, with the reason."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from rewrite_support import preprocessed

from kerntune.agents.kernel_tree import classify
from kerntune.agents.lift import lift_template
from kerntune.agents.rewrite_fastmath import NAME, fast_calls, rewrite
from kerntune.agents.rewrites import Declined, Rewrite, RewriteContext, apply_rewrites, compose
from kerntune.agents.rules import analysis_line
from kerntune.engine.backends import cuda_toolchain as cuda
from kerntune.engine.device import DeviceLimits
from kerntune.engine.evaluate import TimingPolicy
from kerntune.engine.gate import check_proposal
from kerntune.engine.proposal import narrowed, original_launch
from kerntune.engine.template import load_template
from kerntune.engine.tune import TuneOptions, TuneRun

NAIVE = Path(__file__).resolve().parent / "data" / "naive"
CPU = DeviceLimits("opencl", "cpu", max_threads_per_block=4096, warp_size=1, sm_count=2)
GPU = DeviceLimits("cuda", "gpu", max_threads_per_block=1024, warp_size=32, sm_count=132, max_regs_per_block=65536)
LIMITS = {"cuda": GPU, "opencl": CPU}
FAST = TimingPolicy(warmup=1, min_repeats=3, max_repeats=3, target_s=0.002)
needs_cpp = pytest.mark.skipif(shutil.which("cpp") is None, reason="needs the C preprocessor")


def templated(name: str, backend: str):
    t = load_template(NAIVE / name)
    limits = LIMITS[backend]
    proposal, applied = compose(t, backend, limits, lift_template(t, backend, limits).proposal)
    return t, proposal, applied


def fast_math(applied) -> Rewrite | Declined:
    return next(r for r in [*applied.rewrites, *applied.declined] if r.name == NAME)


# (kernel, backend) -> the calls switched; every call of the kernel, its copies and its helpers
SWITCHED = {
    ("softmax_online", "cuda"): ("expf", "__expf"),
    ("softmax_online", "opencl"): ("exp", "native_exp"),
    ("layernorm", "opencl"): ("sqrt", "native_sqrt"),
}


@needs_cpp
@pytest.mark.parametrize("name,backend", sorted(SWITCHED))
def test_at_zero_the_template_is_the_original_token_for_token_and_at_one_every_call_is_fast(name, backend):
    t, proposal, applied = templated(name, backend)
    slow, fast = SWITCHED[(name, backend)]
    made = fast_math(applied)
    assert isinstance(made, Rewrite) and applied.rewrites[-1] is made  # last, on top of the row-wise stages
    assert [(p.name, p.values, p.default) for p in made.parameters] == [("FAST_MATH", (0, 1), 0)]
    out = proposal.sources[backend]
    calls = out.count(f"KT_FAST({slow}, {fast})(")
    assert calls > 0 and f"{slow}(" not in out  # not one call left behind
    assert made.description == f"fast math (FAST_MATH): {slow} -> {fast} ({calls} call{'s' if calls > 1 else ''})"
    original = preprocessed(t.source_for(backend), {})
    assert preprocessed(out, proposal.default_config) == original
    assert preprocessed(out, {}) == original  # the guards' own defaults
    on = preprocessed(out, {**proposal.default_config, "FAST_MATH": 1})
    assert slow not in on and on.count(fast) == original.count(slow) > 0
    # with the row spread over lanes, kept and in chains, the helpers' and the chains' merges are fast too
    spread = preprocessed(out, {**proposal.default_config, "BLOCK": 4, "LANES": 4, "KEEP": 8, "VEC": 2, "CHAINS": 2,
                                "FAST_MATH": 1})
    assert slow not in spread and (spread.count(fast) > on.count(fast)) == (name == "softmax_online")


@pytest.mark.parametrize("name,backend,why", [
    ("gelu", "cuda", "the kernel calls none of expf, logf, log2f, log10f, sinf, cosf, tanf, powf, exp10f"),
    ("gelu", "opencl", "the kernel calls none of exp, log, exp2, log2, exp10, log10, sin, cos, tan, sqrt, rsqrt, "
                       "powr on float values"),
    ("layernorm", "cuda", "the kernel calls none of expf"),  # sqrtf has no faster form
    ("residual_add", "opencl", "the kernel calls none of exp, log"),
])
def test_a_kernel_with_no_call_to_switch_is_declined_with_the_reason(name, backend, why):
    _, proposal, applied = templated(name, backend)
    made = fast_math(applied)
    assert isinstance(made, Declined) and made.reason.startswith(why)
    assert "FAST_MATH" not in proposal.sources[backend] and "KT_FAST" not in proposal.sources[backend]


@pytest.mark.skipif(cuda.find_nvcc() is None, reason="nvcc not found")
@pytest.mark.parametrize("name,config", [("softmax_online", {}),
                                         ("softmax_online", {"BLOCK": 128, "LANES": 32, "KEEP": 16, "VEC": 4,
                                                             "CHAINS": 4}),
                                         ("cross_entropy", {"BLOCK": 256, "LANES": 64})])
def test_at_one_the_cuda_template_compiles_with_nvcc(name, config):
    t, proposal, applied = templated(name, "cuda")
    assert isinstance(fast_math(applied), Rewrite)
    defines = {k: str(v) for k, v in {**proposal.default_config, **config, "FAST_MATH": 1}.items()}
    _, info, _ = cuda.compile_cubin(proposal.sources["cuda"], t.entry, defines, t.compile_options.get("cuda", ()),
                                    "sm_90")
    assert info.get("spill_stores", 0) == 0


def test_the_opencl_template_tunes_with_both_values_on_pocl_and_verifies(tmp_path, opencl_backend):
    original, proposal, applied = templated("softmax_online", "opencl")
    problem = original.problem("small")
    verdict = check_proposal(original, proposal, tmp_path / "tpl", backend="opencl", device=0, problem=problem,
                             limits=CPU, timeout=120)
    assert verdict.ok, verdict.reason
    # the row over 16 lanes, nothing kept and one chain: quick to build on PoCL, every call switched
    grid = narrowed(verdict.template, {"FAST_MATH": (0, 1), "BLOCK": (16,), "LANES": (16,), "KEEP": (0,),
                                       "VEC": (1,), "CHAINS": (1,)})
    run = TuneRun(grid, TuneOptions(backend="opencl", problem="small", seed=5, timing=FAST, strategy="grid",
                                    probe=False, session_path=tmp_path / "tune.toml")).run()
    assert run.best is not None and run.winner_ok
    assert all(r.status == "ok" for r in run.results)
    assert {r.config["FAST_MATH"] for r in run.results} == {0, 1}


DOUBLES_CL = """__kernel void k(__global float* out, __global const double* w, __global const float* x, int n) {
    int i = get_global_id(0);
    if (i < n) {
        double d = w[i];
        float f = x[i];
        out[i] = (float)exp(d) + exp(f) + (float)exp(1.0) + exp(2.0f * f) + (float)log(w[i] * 0.5) + SCALE(f);
        out[i] += exp(UNKNOWN) + sqrt((float)d);
    }
}
"""


def context(source: str, backend: str, limits: DeviceLimits = CPU) -> RewriteContext:
    """The rewrite's view of a kernel `k` of one source (a residual add's spec around it)."""
    t = replace(load_template(NAIVE / "residual_add"), entry="k", sources={backend: "kernel"})
    return RewriteContext(t, backend, source, classify(source), ("ceil_div(n, 256)",), ("256",), {}, limits)


@needs_cpp
def test_a_double_or_a_value_of_unknown_type_keeps_the_accurate_function():
    got = rewrite(context(DOUBLES_CL, "opencl"))
    assert isinstance(got, Rewrite)
    assert "(float)exp(d)" in got.source and "(float)exp(1.0)" in got.source and "(float)log(w[i] * 0.5)" in got.source
    assert "exp(UNKNOWN)" in got.source
    assert "KT_FAST(exp, native_exp)(f)" in got.source and "KT_FAST(exp, native_exp)(2.0f * f)" in got.source
    assert "KT_FAST(sqrt, native_sqrt)((float)d)" in got.source
    assert got.description.startswith("fast math (FAST_MATH): exp -> native_exp (2 calls), sqrt -> native_sqrt (1 call); "
                                      "left as written: exp at line 6 (a double)")
    assert "exp at line 7 (a value of a type the syntax does not tell)" in got.description
    # CUDA: only the float functions; exp and log of a double are not touched, std::expf is
    cu = ("__global__ void k(float* out, const double* w, int n) {\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
          "    if (i < n) out[i] = (float)exp(w[i]) + (float)log(w[i]) + std::expf((float)w[i]) + exp2f(1.0f);\n}\n")
    got = rewrite(context(cu, "cuda", GPU))
    assert isinstance(got, Rewrite) and got.description == "fast math (FAST_MATH): std::expf -> __expf (1 call)"
    assert "(float)exp(w[i]) + (float)log(w[i]) + KT_FAST(std::expf, __expf)((float)w[i]) + exp2f(1.0f)" in got.source
    assert preprocessed(got.source, {}) == preprocessed(cu, {})
    only_double = rewrite(context(cu.replace("std::expf", "exp"), "cuda", GPU))
    assert isinstance(only_double, Declined) and "calls none of expf" in only_double.reason


HELPERS_CU = """#include <cuda_runtime.h>
__device__ float unused(float v) { return expf(v); }
__device__ float shifted(float v, float m) { return __expf(v - m) + logf(v); }
__device__ float scaled(float v) { return shifted(v, 1.0f) * sinf(v); }
__global__ void k(float* out, const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = scaled(x[i]);
}
"""


def test_the_kernels_helpers_are_switched_and_the_block_sits_after_the_includes():
    got = rewrite(context(HELPERS_CU, "cuda", GPU))
    assert isinstance(got, Rewrite)
    assert got.source.startswith("#include <cuda_runtime.h>\n\n// kerntune: FAST_MATH 1 calls the hardware's fast")
    assert "return expf(v);" in got.source  # a function the kernel never calls
    assert "__expf(v - m) + KT_FAST(logf, __logf)(v)" in got.source
    assert "KT_FAST(sinf, __sinf)(v)" in got.source
    assert got.description == "fast math (FAST_MATH): logf -> __logf (1 call), sinf -> __sinf (1 call)"


def test_a_template_for_another_backend_keeps_this_source_with_a_parameter_that_changes_nothing():
    t = load_template(NAIVE / "layernorm")  # sqrt has a native form in OpenCL; sqrtf none in CUDA
    sources = {b: t.source_for(b) for b in t.sources}
    grid, block = original_launch(t, CPU)
    applied = apply_rewrites(t, sources, "opencl", tuple(grid), tuple(block), {}, CPU, rewrites=(rewrite,))
    assert [r.name for r in applied.rewrites] == [NAME] and sorted(applied.sources) == ["cuda", "opencl"]
    assert "KT_FAST(sqrt, native_sqrt)(v + eps)" in applied.sources["opencl"]
    cuda_source = applied.sources["cuda"]
    assert "#ifndef FAST_MATH\n#define FAST_MATH 0\n#endif" in cuda_source and "KT_FAST" not in cuda_source
    # tuned on CUDA, the CUDA source decides: nothing to switch there
    applied = apply_rewrites(t, sources, "cuda", tuple(grid), tuple(block), {}, GPU, rewrites=(rewrite,))
    assert applied.rewrites == [] and [d.name for d in applied.declined] == [NAME]


def test_the_analysis_line_names_the_calls_fast_math_would_switch():
    t = load_template(NAIVE / "softmax_online")
    state = SimpleNamespace(original=t, backend="cuda", limits=GPU)
    assert "FAST_MATH can switch its math calls to the hardware's fast approximations (expf -> __expf (4 calls))" \
        in analysis_line(state)
    assert fast_calls(t.source_for("opencl"), t.entry, "opencl").switched() == "exp -> native_exp (4 calls)"
    gelu = load_template(NAIVE / "gelu")
    assert "FAST_MATH" not in analysis_line(SimpleNamespace(original=gelu, backend="cuda", limits=GPU))


def test_the_calls_switched_are_the_kernels_and_what_it_calls_by_any_name_never_another_functions():
    src = '''
namespace act { __device__ float gelu(float x) { return 0.5f * x * expf(-x); } }
__device__ float unused(float x) { return logf(x); }
__global__ void k(float *y, const float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = act::gelu(x[i]) + sinf(x[i]);
}
'''
    assert fast_calls(src, "k", "cuda").switched() == "expf -> __expf (1 call), sinf -> __sinf (1 call)"
