"""The elementwise rewrite on naive kernels: templated, gated, tuned and re-verified on PoCL; the CUDA
versions compiled with nvcc at non-default configurations."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest

from kerntune import templates
from kerntune.agents.kernel_tree import classify
from kerntune.agents.lift import lift_template
from kerntune.agents.rewrite_elementwise import rewrite
from kerntune.agents.rewrites import REWRITES, Declined, RewriteContext, compose
from kerntune.engine.backends import cuda_toolchain as cuda
from kerntune.engine.device import DeviceLimits
from kerntune.engine.evaluate import Evaluator, TimingPolicy
from kerntune.engine.gate import check_proposal
from kerntune.engine.proposal import original_launch, write_template
from kerntune.engine.template import load_template
from kerntune.engine.tune import TuneOptions, TuneRun

NAIVE = Path(__file__).resolve().parent / "data" / "naive"
CPU = DeviceLimits("opencl", "cpu", max_threads_per_block=4096, warp_size=1, sm_count=2)
GPU = DeviceLimits("cuda", "gpu", max_threads_per_block=1024, warp_size=32, sm_count=132)
FAST = TimingPolicy(warmup=1, min_repeats=3, max_repeats=3, target_s=0.002)
SMALL = {"gelu": {"n": 20011}, "residual_add": {"n": 20011}, "adamw": {"n": 20011},
         "silu_mul_f32": {"tokens": 3, "d": 2050}, "silu_mul": {"tokens": 3, "d": 2050}}
FAST_CALLS = {"adamw", "silu_mul", "silu_mul_f32"}  # their OpenCL sources call exp or sqrt: FAST_MATH comes last
ODD_CONFIGS = ({"VEC": 4}, {"VEC": 8, "ITEMS": 2}, {"VEC": 2, "GRID": 1, "BLOCK": 64}, {"VEC": 4, "ITEMS": 4, "GRID": 4})


def templated(name: str, backend: str, limits: DeviceLimits):
    t = load_template(NAIVE / name)
    proposal, applied = compose(t, backend, limits, lift_template(t, backend, limits).proposal)
    return t, proposal, applied


@pytest.mark.parametrize("name", sorted(SMALL))
def test_a_naive_elementwise_kernel_is_rewritten_gated_tuned_and_reverified_on_pocl(name, tmp_path, opencl_backend):
    original, proposal, applied = templated(name, "opencl", CPU)
    fast = name in FAST_CALLS
    assert [r.name for r in applied.rewrites] == ["elementwise"] + ["fast_math"] * fast
    assert [p.name for p in proposal.parameters] == ["BLOCK", "VEC", "ITEMS", "GRID"] + ["FAST_MATH"] * fast
    assert proposal.default_config == {"BLOCK": 256, "VEC": 1, "ITEMS": 1, "GRID": 0, **({"FAST_MATH": 0} if fast else {})}
    assert "elementwise: " in proposal.summary and any(n.startswith("rewrote the kernel") for n in proposal.notes)
    problem = original.problem(None, SMALL[name])
    verdict = check_proposal(original, proposal, tmp_path / "tpl", backend="opencl", device=0, problem=problem,
                             limits=CPU, timeout=120)
    assert verdict.ok, verdict.reason
    template = verdict.template
    # every rewritten configuration gives the original's outputs, the tail and odd rows included
    ev = Evaluator(opencl_backend, template, template.problem(None, SMALL[name]), seed=1, timing=FAST)
    for config in ODD_CONFIGS:
        ok, worst, message = ev.reproduces_original({**template.default_config(), **config}, (3, 4))
        assert ok, (config, message)
    run = TuneRun(template, TuneOptions(backend="opencl", problem="small", overrides=SMALL[name], seed=5,
                                        timing=FAST, strategy="random", budget=4, probe=False,
                                        session_path=tmp_path / "tune.toml")).run()
    assert run.best is not None and run.winner_ok
    assert all(r.status == "ok" for r in run.results)


def test_the_default_is_the_original_token_for_token_and_the_rewrite_sits_beside_it():
    t = load_template(NAIVE / "silu_mul_f32")
    src = t.source_for("opencl")
    _, proposal, _ = templated("silu_mul_f32", "opencl", CPU)
    out = proposal.sources["opencl"]
    start = src.index("__kernel")
    kernel = src[start:src.index("\n}", start) + 2].replace("exp(", "KT_FAST(exp, native_exp)(")  # FAST_MATH's macro
    assert "#if VEC != 1 || ITEMS != 1 || GRID != 0\n" in out
    assert out.count(kernel) == 1 and out.index("#else\n" + kernel) > out.index("#if VEC != 1")
    assert out.endswith(kernel + "\n#endif\n")
    # whole packs only where every index stays in the row and in range; the rest element by element
    # (the pack's first element in the original's index type: int division where it divided ints)
    assert "kt_i0 + VEC <= kt_n && ((((int)kt_i0)) % (d)) + VEC <= (d)" in out
    assert "KT_LOAD(kt_r0, x + ((((int)kt_i0) / d) * 2 * d + (((int)kt_i0) % d)));" in out
    assert "KT_STORE(out + (((int)kt_i0)), kt_r" in out
    assert proposal.grid[0].startswith("min(ceil_div((tokens) * (d), (BLOCK) * VEC * ITEMS)")


def test_half_storage_through_vload_half_moves_in_packs_of_floats():
    _, proposal, _ = templated("residual_add_f16", "opencl", CPU)
    out = proposal.sources["opencl"]
    assert "float kt_r0[VEC];" in out and "KT_LOAD_HALF(kt_r1, x + (((int)kt_i0)));" in out
    assert "(kt_r0[kt_k] = (kt_r1[kt_k] + kt_r2[kt_k]));" in out
    assert "KT_STORE_HALF(out + (((int)kt_i0)), kt_r0);" in out
    assert dict((p.name, p.values) for p in proposal.parameters)["VEC"] == (1, 2, 4, 8, 16)


def test_an_output_written_on_every_path_is_not_loaded_first_and_an_inout_array_is():
    _, proposal, _ = templated("adamw", "opencl", CPU)
    out = proposal.sources["opencl"]
    loads = [line.strip() for line in out.splitlines() if "KT_LOAD(kt_r" in line]
    stores = [line.strip() for line in out.splitlines() if "KT_STORE(" in line and "define" not in line]
    assert len(loads) == 4 and len(stores) == 3  # params, grads, m, v read; params, m, v written


def context(source: str, grid=("ceil_div(n, 256)",), block=("256",)) -> RewriteContext:
    t = load_template(NAIVE / "residual_add")
    return RewriteContext(t, "opencl", source, classify(source), tuple(grid), tuple(block), {}, CPU)


def test_it_declines_where_the_analysis_cannot_prove_it_safe():
    t = load_template(NAIVE / "residual_add")
    src = t.source_for("opencl")
    # a grid that is not a block per BLOCK elements of the guard's bound
    got = rewrite(context(src, grid=("ceil_div(n, 128)",)))
    assert isinstance(got, Declined) and "is not one block per 256 elements" in got.reason
    # a strided read
    strided = src.replace("x[i]", "x[2 * i]")
    got = rewrite(context(strided))
    assert isinstance(got, Declined) and "not elementwise" in got.reason
    # an element written at two places
    twice = src.replace("out[i] = x[i] + residual[i];", "{ out[i] = x[i]; out[i + 1] = residual[i]; }")
    assert isinstance(rewrite(context(twice)), Declined)
    # no guard
    unguarded = src.replace("if (i < n) ", "")
    got = rewrite(context(unguarded))
    assert isinstance(got, Declined) and "no guard" in got.reason
    # cooperating threads
    shared = src.replace("int i = get_global_id(0);", "int i = get_global_id(0);\n    barrier(CLK_LOCAL_MEM_FENCE);")
    got = rewrite(context(shared))
    assert isinstance(got, Declined) and "threads cooperate" in got.reason


def test_the_registry_is_a_plain_tuple_with_the_elementwise_rewrite():
    assert isinstance(REWRITES, tuple) and rewrite in REWRITES


def test_a_kernel_that_is_neither_keeps_todays_template(tmp_path):
    d = tmp_path / "silu"
    shutil.copytree(Path(__file__).resolve().parent / "data" / "originals" / "silu_and_mul", d)
    shutil.copyfile(templates.path("silu_and_mul").parent / "baseline.cu", d / "baseline.cu")
    t = load_template(d)
    lifted = lift_template(t, "opencl", CPU)
    proposal, applied = compose(t, "opencl", CPU, lifted.proposal)
    # no change to its structure: FAST_MATH alone, on its one exp call
    assert [r.name for r in applied.rewrites] == ["fast_math"]
    assert proposal.sources["opencl"].replace("KT_FAST(exp, native_exp)(", "exp(").endswith(
        lifted.proposal.sources["opencl"].split("#endif\n")[-1])
    assert proposal.parameters == lifted.proposal.parameters + applied.rewrites[0].parameters
    assert proposal.grid == lifted.proposal.grid
    assert applied.declined[0].name == "elementwise" and "not elementwise" in applied.declined[0].reason


@pytest.mark.skipif(cuda.find_nvcc() is None, reason="nvcc not found")
@pytest.mark.parametrize("name", ["silu_mul", "gelu_bf16", "residual_add_f16", "adamw"])
def test_the_cuda_rewrite_compiles_at_other_configurations(name):
    t, proposal, applied = templated(name, "cuda", GPU)
    assert [p.name for p in proposal.parameters] == ["BLOCK", "VEC", "ITEMS", "GRID", "CACHE", "BOUNDS"] + [
        "FAST_MATH"] * (name == "silu_mul")  # expf; the others call no function with a fast form
    config = {**proposal.default_config, "VEC": 8 if name != "adamw" else 4, "ITEMS": 2, "CACHE": 1,
              "BOUNDS": 2, "GRID": random.choice((0, 4))}
    _, info, _ = cuda.compile_cubin(proposal.sources["cuda"], t.entry, {k: str(v) for k, v in config.items()},
                                    t.compile_options.get("cuda", ()), "sm_90")
    assert info.get("spill_stores", 0) == 0 and info.get("stack_frame", 0) == 0
    grid, block = original_launch(t, GPU)
    assert block == ["256"] and proposal.block == ("BLOCK",)


RESIDUAL_HINTS = """__global__ void residual_add(float *out, const float *x, const float *residual, int n) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < n) {
        __stcs(&out[idx], __ldcs(&x[idx]) + __ldcs(&residual[idx]));
    }
}
"""


def test_cache_hint_intrinsics_on_an_elements_address_are_read_and_written_as_the_element():
    a = classify(RESIDUAL_HINTS)
    assert a.kind == "elementwise"
    assert [(x.array, x.read, x.write, x.call) for x in a.accesses] == [
        ("out", False, True, "__stcs"), ("x", True, False, "__ldcs"), ("residual", True, False, "__ldcs")]
    t = load_template(NAIVE / "residual_add")
    got = rewrite(RewriteContext(t, "cuda", RESIDUAL_HINTS, a, ("ceil_div(n, 256)",), ("256",), {}, GPU))
    assert not isinstance(got, Declined), got
    assert "(kt_r0[kt_k] = (kt_r1[kt_k] + kt_r2[kt_k]));" in got.source
    # another function given an element's address could reach its neighbours: not elementwise
    escaped = classify(RESIDUAL_HINTS.replace("__stcs(&out[idx], __ldcs(&x[idx]) + __ldcs(&residual[idx]));",
                                              "store(&out[idx], x[idx]);"))
    assert escaped.kind == "neither" and "out" in escaped.opaque


@pytest.mark.skipif(cuda.find_nvcc() is None, reason="nvcc not found")
def test_the_rewrite_of_a_kernel_with_cache_hints_compiles():
    t = load_template(NAIVE / "residual_add")
    got = rewrite(RewriteContext(t, "cuda", RESIDUAL_HINTS, classify(RESIDUAL_HINTS), ("ceil_div(n, 256)",),
                                 ("256",), {}, GPU))
    defines = {"VEC": "4", "ITEMS": "2", "GRID": "0", "CACHE": "1", "BOUNDS": "0"}
    _, info, _ = cuda.compile_cubin(got.source, "residual_add", defines, (), "sm_90")
    assert info.get("spill_stores", 0) == 0


def test_an_access_made_on_some_paths_only_stays_as_written():
    src = ("__kernel void residual_add(__global float *out, __global const float *x, "
           "__global const float *residual, int n) {\n    int i = get_global_id(0);\n"
           "    if (i < n) out[i] = i < n / 2 ? x[i] : residual[i - n / 2];\n}\n")
    got = rewrite(context(src, grid=("ceil_div(n, 256)",)))
    assert not isinstance(got, Declined), got
    # out is written on every path: a pack; x and residual are read on some paths only: as written
    assert "KT_STORE(out + (((int)kt_i0)), kt_r0);" in got.source and "KT_LOAD(kt_r" not in got.source
    assert "kt_r0[kt_k] = i < n / 2 ? x[i] : residual[i - n / 2];" in got.source


@pytest.mark.skipif(cuda.find_nvcc() is None, reason="nvcc not found")
def test_a_kernel_declared_extern_c_on_a_line_of_its_own_is_rewritten_whole():
    src = RESIDUAL_HINTS.replace("__global__ void residual_add", 'extern "C"\n__global__ void residual_add')
    t = load_template(NAIVE / "residual_add")
    got = rewrite(RewriteContext(t, "cuda", src, classify(src), ("ceil_div(n, 256)",), ("256",), {}, GPU))
    assert got.source.startswith("// kerntune: the elementwise rewrite") and got.source.count('extern "C"\n__global__') == 2
    for vec in ("1", "4"):
        defines = {"VEC": vec, "ITEMS": "1", "GRID": "0", "CACHE": "0", "BOUNDS": "0"}
        cuda.compile_cubin(got.source, "residual_add", defines, (), "sm_90")


@pytest.mark.skipif(cuda.find_nvcc() is None, reason="nvcc not found")
def test_a_kernel_inside_an_extern_c_block_compiles_rewritten():
    src = 'extern "C" {\n' + RESIDUAL_HINTS + "}\n"
    t = load_template(NAIVE / "residual_add")
    got = rewrite(RewriteContext(t, "cuda", src, classify(src), ("ceil_div(n, 256)",), ("256",), {}, GPU))
    defines = {"VEC": "4", "ITEMS": "2", "GRID": "0", "CACHE": "1", "BOUNDS": "1"}
    cuda.compile_cubin(got.source, "residual_add", defines, (), "sm_90")


@pytest.mark.skipif(shutil.which("cpp") is None, reason="no C preprocessor")
@pytest.mark.parametrize("name", ["residual_add", "silu_mul", "adamw"])
def test_once_preprocessed_at_its_defaults_the_template_is_the_original_token_for_token(name, tmp_path):
    import subprocess

    t = load_template(NAIVE / name)
    _, proposal, _ = templated(name, "opencl", CPU)

    def tokens(source: str) -> list[str]:
        path = tmp_path / "k.cl"
        path.write_text(source)
        out = subprocess.run(["cpp", "-P", str(path)], capture_output=True, text=True, check=True).stdout
        return out.split()

    assert tokens(proposal.sources["opencl"]) == tokens(t.source_for("opencl"))


GRID_STRIDE = """// Residual add over a grid-stride loop.
__kernel void residual_add(__global float *out, __global const float *x, __global const float *residual, int n) {
    for (int i = get_global_id(0); i < n; i += get_global_size(0)) {
        out[i] = x[i] + residual[i];
    }
}
"""


@pytest.mark.parametrize("grid", ["ceil_div(n, 256)", "16"])
def test_a_grid_stride_original_is_rewritten_and_reproduces_itself(grid, tmp_path, opencl_backend):
    d = tmp_path / "gs"
    shutil.copytree(NAIVE / "residual_add", d)
    (d / "residual_add.cl").write_text(GRID_STRIDE)
    (d / "kernel.toml").write_text((d / "kernel.toml").read_text().replace('"ceil_div(n, 256)"', f'"{grid}"'))
    t = load_template(d)
    a = classify(GRID_STRIDE)
    assert a.kind == "elementwise" and a.guard.form == "loop" and a.stride_loop == 0
    proposal, applied = compose(t, "opencl", CPU, lift_template(t, "opencl", CPU).proposal)
    names = [p.name for p in proposal.parameters]
    # a grid of its own choosing stays (the rewritten loop strides over it): no GRID then
    assert names == (["BLOCK", "VEC", "ITEMS", "GRID"] if grid != "16" else ["BLOCK", "VEC", "ITEMS"])
    template = write_template(t, proposal, tmp_path / "tpl", CPU)
    ev = Evaluator(opencl_backend, template, template.problem(None, {"n": 20011}), seed=1, timing=FAST)
    for config in ({}, {"VEC": 4}, {"VEC": 8, "ITEMS": 2}, {"VEC": 2, "BLOCK": 64}):
        ok, worst, message = ev.reproduces_original({**template.default_config(), **config}, (3, 4))
        assert ok, (config, message)


AXPY = """// y = a * x + y over n elements, written once for every precision
template <typename T>
__global__ void axpy(const T *x, T *y, T a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}

template __global__ void axpy<float>(const float *, float *, float, int);
template __global__ void axpy<double>(const double *, double *, double, int);
"""
AXPY_SPEC = """[kernel]
name = "axpy"
description = "y = a * x + y"
entry = "axpy<double>"
sources = { cuda = "kernel.cu" }

[launch]
grid = ["ceil_div(n, 256)"]
block = [256]

[[arg]]
name = "x"
dtype = "float64"
role = "input"
shape = ["n"]

[[arg]]
name = "y"
dtype = "float64"
role = "inout"
shape = ["n"]

[[arg]]
name = "a"
dtype = "float64"
role = "scalar"
value = 1.5

[[arg]]
name = "n"
dtype = "int32"
role = "scalar"
value = "n"

[[problem]]
name = "small"
n = 100003

[[verify.problem]]
name = "odd"
n = 5001

[cost]
bytes = "24 * n"
flops = "2 * n"
"""


def axpy(tmp_path: Path, source: str = AXPY) -> Path:
    folder = tmp_path / "axpy"
    folder.mkdir()
    (folder / "kernel.cu").write_text(source)
    (folder / "kernel.toml").write_text(AXPY_SPEC)
    return folder


@pytest.mark.parametrize("head", ["template <typename T>\n__global__", "template <typename T> __global__"])
def test_a_template_kernel_is_rewritten_beside_itself_as_the_same_template(head, tmp_path):
    """`template <typename T> axpy`, the entry `axpy<double>`: the rewritten kernel is the same
    template from its `template` line (the file's instantiations make both), its registers in T,
    its packs sized at the entry's 8-byte doubles; the original stays as written."""
    from kerntune.agents.rules import rules_template

    made = rules_template(load_template(axpy(tmp_path, AXPY.replace("template <typename T>\n__global__", head))),
                          "cuda", GPU)
    assert [r.name for r in made.applied.rewrites] == ["elementwise"], made.applied.declined
    source = made.proposal.sources["cuda"]
    assert f"{head} void __launch_bounds__(BLOCK, BOUNDS) axpy(const T *x, T *y, T a, int n) {{" in source
    assert f"#else\n{head} void axpy(const T *x, T *y, T a, int n) {{" in source
    assert "__align__(16) T kt_r0[VEC];" in source
    assert source.index("extern \"C++\" {") < source.index(f"{head} void __launch_bounds__")  # helpers first
    vec = next(p for p in made.proposal.parameters if p.name == "VEC")
    assert vec.values == (1, 2, 4)  # 32 bytes a thread at most: four doubles


def test_a_template_kernels_rewrite_compiles_for_every_instantiation_with_nvcc(tmp_path, monkeypatch):
    if cuda.find_nvcc() is None:
        pytest.skip("nvcc not found")
    from kerntune.agents.rules import rules_template

    monkeypatch.setenv("KERNTUNE_CACHE_DIR", str(tmp_path / "cache"))
    made = rules_template(load_template(axpy(tmp_path)), "cuda", GPU)
    defaults = {p.name: p.default for p in made.proposal.parameters}
    for config in ({"VEC": 4, "ITEMS": 2, "CACHE": 1}, {"VEC": 2, "GRID": 4, "BOUNDS": 2}):
        for entry in ("axpy<double>", "axpy<float>"):  # the file's two instantiations, one module
            cubin, info, _ = cuda.compile_cubin(made.proposal.sources["cuda"], entry,
                                                {k: str(v) for k, v in {**defaults, **config}.items()})
            assert cubin and info.get("spill_stores", 0) == 0 and info.get("stack_frame", 0) == 0, (config, info)


@pytest.mark.gpu
def test_on_cuda_a_template_kernels_rewrite_gates_and_its_configurations_verify(tmp_path):
    from kerntune.agents.rules import rules_template
    from kerntune.engine.tune import resolve_device

    _, limits = resolve_device("cuda", 0)
    from rewrite_support import gates_and_tunes_on_cuda

    original = load_template(axpy(tmp_path))
    gates_and_tunes_on_cuda(original, rules_template(original, "cuda", limits).proposal, tmp_path, limits)
