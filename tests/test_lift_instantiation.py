"""The rules lift a template kernel's explicit instantiation: `softmax_rows<float, 128>` with
`template <typename T, int BLOCK>` (tests/data/byo/softmax) tunes its BLOCK through a macro of its
own, the launch's block tied to it, both dialects alike."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kerntune.agents.kernel_tree import analyse, explicit_instantiations, tree_reductions
from kerntune.agents.lift import find_lifts, lift_template
from kerntune.engine.backends import cuda
from kerntune.engine.backends.cuda_symbols import resolve_entry
from kerntune.engine.device import DeviceLimits
from kerntune.engine.evaluate import Evaluator, TimingPolicy
from kerntune.engine.gate import check_proposal
from kerntune.engine.template import load_template

SOFTMAX = Path(__file__).resolve().parent / "data" / "byo" / "softmax"
GPU = DeviceLimits("cuda", "gpu", max_threads_per_block=1024, warp_size=32, sm_count=132)
CPU = DeviceLimits("opencl", "cpu", max_threads_per_block=4096, warp_size=1)
INSTANTIATION = "template __global__ void softmax_rows<float, 128>(float*, const float*, int, int);"


def softmax(tmp_path: Path, entry: str = "softmax_rows", extra: str = "", cuda_only: bool = False) -> Path:
    """The byo softmax, its entry and its CUDA source's instantiations changed as a user might."""
    d = tmp_path / "softmax"
    shutil.copytree(SOFTMAX, d)
    src = (d / "softmax.cu").read_text()
    (d / "softmax.cu").write_text(src.replace(INSTANTIATION, INSTANTIATION + extra))
    spec = (d / "kernel.toml").read_text().replace('entry = "softmax_rows"', f'entry = "{entry}"')
    if cuda_only:
        spec = spec.replace(', opencl = "softmax.cl"', "")
    (d / "kernel.toml").write_text(spec)
    return d


def test_the_analysis_reads_the_instantiations_literals_and_the_tree_reductions_start():
    src = (SOFTMAX / "softmax.cu").read_text()
    inst, = explicit_instantiations(src, "softmax_rows")
    assert inst.text == "<float, 128>" and [(a.param, a.ctype, a.value) for a in inst.literals] == [("BLOCK", "int", 128)]
    assert src[inst.literals[0].span.start:inst.literals[0].span.end] == "128"
    assert explicit_instantiations(src, "other") == []
    # `for (int s = BLOCK / 2; s > 0; s /= 2)`: correct only for a power of two
    assert tree_reductions(analyse(src)[0]) == (frozenset({"BLOCK"}), frozenset())
    halving = "for (int s = blockDim.x >> 1; s > 0; s >>= 1) {"
    other = src.replace("for (int s = BLOCK / 2; s > 0; s /= 2) {", halving)
    assert tree_reductions(analyse(other)[0]) == (frozenset({"blockDim"}), frozenset({0}))


def test_a_block_size_template_argument_becomes_a_parameter_and_the_launch_block_takes_it():
    t = load_template(SOFTMAX)
    lifted = lift_template(t, "cuda", GPU)
    p = lifted.proposal
    assert [(x.name, x.default, x.values) for x in p.parameters] == [("BLOCK_SIZE", 128, (32, 64, 128, 256, 512, 1024))]
    assert p.block == ("BLOCK_SIZE",) and p.grid == ("N",)
    assert "is_pow2(BLOCK_SIZE)" in p.constraints  # the shared-memory tree reductions halve from it
    src = p.sources["cuda"]
    # the C++ template keeps its own parameter; the instantiation reads the macro, guarded to 128
    assert "template <typename T, int BLOCK>\n__global__ void __launch_bounds__(BLOCK) softmax_rows(" in src
    assert "template __global__ void softmax_rows<float, BLOCK_SIZE>(float*, const float*, int, int);" in src
    assert "#ifndef BLOCK_SIZE\n#define BLOCK_SIZE 128\n#endif\nnamespace kernels {" in src
    assert src.replace("#ifndef BLOCK_SIZE\n#define BLOCK_SIZE 128\n#endif\n", "").replace(
        "// kerntune: parameters lifted from the original's literals; the defaults reproduce it.\n", "").replace(
        "<float, BLOCK_SIZE>", "<float, 128>") == t.source_for("cuda").replace("#include <cfloat>\n", "#include <cfloat>\n\n")
    # the OpenCL twin's `#define BLOCK 128` is the same constant: it reads the same parameter
    cl = p.sources["opencl"]
    assert "#ifndef BLOCK_SIZE\n#define BLOCK_SIZE 128\n#endif\n#define BLOCK BLOCK_SIZE\n__kernel" in cl
    assert not any("left alone" in n for n in lifted.notes)
    # tuned from the OpenCL side, the twin gives the same template
    q = lift_template(t, "opencl", CPU).proposal
    assert [x.name for x in q.parameters] == ["BLOCK_SIZE"] and q.block == ("BLOCK_SIZE",)
    assert q.sources["cuda"] == src and q.sources["opencl"] == cl


@pytest.mark.parametrize("compiler", ["nvcc", "nvrtc"])
def test_the_lifted_cuda_template_compiles_and_loads_by_the_users_name_at_every_block(compiler, tmp_path, monkeypatch):
    if compiler == "nvcc" and cuda.find_nvcc() is None or compiler == "nvrtc" and not cuda.nvrtc_version():
        pytest.skip(f"{compiler} is not installed")
    monkeypatch.setenv("KERNTUNE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("KERNTUNE_COMPILER", compiler)
    src = lift_template(load_template(SOFTMAX), "cuda", GPU).proposal.sources["cuda"]
    for block in (None, 32, 1024):
        defines = {} if block is None else {"BLOCK_SIZE": str(block)}
        cubin, info, _ = cuda.compile_cubin(src, "softmax_rows", defines, (), "sm_90")
        kernel = resolve_entry(cubin, "softmax_rows")
        assert kernel.display == f"kernels::softmax_rows<float, {block or 128}>"
        assert info["smem"] == 4 * (block or 128)  # `__shared__ float red[BLOCK]`


def test_the_lifted_opencl_twin_passes_the_gate_and_every_block_reproduces_the_original(tmp_path, opencl_backend):
    t = load_template(SOFTMAX)
    proposal = lift_template(t, "opencl", CPU).proposal
    problem = t.problem(None, {"N": 5, "C": 999})
    verdict = check_proposal(t, proposal, tmp_path / "tpl", backend="opencl", device=0, problem=problem,
                             limits=CPU, timeout=120)
    assert verdict.ok, verdict.reason
    template = verdict.template
    ev = Evaluator(opencl_backend, template, template.problem(None, {"N": 5, "C": 999}), seed=1,
                   timing=TimingPolicy(warmup=1, min_repeats=3, max_repeats=3, target_s=0.002))
    for block in (32, 256):
        ok, _, message = ev.reproduces_original({"BLOCK_SIZE": block}, (3,))
        assert ok, (block, message)


def test_an_entry_spelling_its_template_arguments_or_several_instantiations_leave_them_alone(tmp_path):
    spelled = load_template(softmax(tmp_path / "a", entry="softmax_rows<float, 128>", cuda_only=True))
    lifted = lift_template(spelled, "cuda", GPU)
    assert lifted.proposal is None
    assert any("the entry `softmax_rows<float, 128>` spells its template arguments" in n for n in lifted.notes)
    assert any("takes 128 threads from its template argument" in n for n in lifted.notes)
    several = load_template(softmax(tmp_path / "b", entry="softmax_rows<float, 128>", cuda_only=True,
                                    extra="\ntemplate __global__ void softmax_rows<float, 256>(float*, const float*, int, int);"))
    lifted = lift_template(several, "cuda", GPU)
    assert lifted.proposal is None and any("left alone" in n for n in lifted.notes)
    src = several.source_for("cuda")
    assert not [lf for lf in find_lifts(src, analyse(src), "softmax_rows") if lf.key.startswith("template:")]


def test_only_integer_template_arguments_with_a_tunable_name_are_lifted():
    src = ("template <typename T, int N_HEADS, int VEC>\n"
           "__global__ void k(T *out, const T *in, int n) {\n"
           "    int i = (blockIdx.x * blockDim.x + threadIdx.x) * VEC;\n"
           "    for (int j = 0; j < VEC; ++j) if (i + j < n) out[i + j] = in[i + j] * N_HEADS;\n}\n"
           "template __global__ void k<float, 8, 4>(float *, const float *, int);\n")
    lifts = [lf for lf in find_lifts(src, analyse(src), "k") if lf.key.startswith("template:")]
    assert [(lf.name, lf.kind, lf.default, lf.reads) for lf in lifts] == [("VEC_SIZE", "vector", 4, "VEC")]
    assert "the template argument VEC = 4 of `k<float, 8, 4>` (line 6)" == lifts[0].origin
