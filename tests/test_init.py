"""`kerntune init`: kernel signatures read by our own parser, starting specs, and their check."""

import shutil
import sys
from pathlib import Path

import pytest
from cli_support import one_line_error

from kerntune.engine.signature import SignatureError, parse_kernel
from kerntune.engine.template import load_template
from kerntune.tui.cli import main

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

HERE = Path(__file__).resolve().parent
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
ROOT = HERE.parent
BASELINES = ("silu_and_mul", "fused_add_rmsnorm", "merge_attn_states", "matmul", "softmax")


@pytest.mark.parametrize("kernel", BASELINES)
def test_init_on_a_library_baseline_gives_the_arguments_of_the_library_spec(tmp_path, kernel, capsys):
    src = tmp_path / "baseline.cu"
    shutil.copyfile(ROOT / "templates" / kernel / "baseline.cu", src)
    assert main(["init", str(src)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"wrote {tmp_path / 'kernel.toml'} for {kernel}")
    data = tomllib.loads((tmp_path / "kernel.toml").read_text())
    library = load_template(ROOT / "templates" / kernel)
    assert [(a["name"], a["dtype"], a["role"]) for a in data["arg"]] == \
        [(a.name, a.dtype, a.role) for a in library.arguments]
    # integer scalars are the problem sizes of the same name, as in the library
    for a in library.arguments:
        if a.role == "scalar" and a.value.source == a.name:
            assert {"name": a.name, "dtype": a.dtype, "role": "scalar", "value": a.name} in data["arg"]
    assert data["kernel"] == {"name": kernel, "description": "", "entry": kernel, "sources": {"cuda": "baseline.cu"}}


def test_check_says_in_one_line_what_is_missing_until_the_spec_is_complete(tmp_path, capsys):
    src = tmp_path / "baseline.cu"
    shutil.copyfile(ROOT / "templates" / "silu_and_mul" / "baseline.cu", src)
    assert main(["init", str(src)]) == 0
    capsys.readouterr()
    spec = tmp_path / "kernel.toml"
    assert main(["init", "--check", str(spec)]) == 1
    line = capsys.readouterr().out
    assert line.count("\n") == 1
    assert line == (f"{spec}: still to fill in: problem sizes (tokens, d), launch.grid, launch.block, "
                    "cost.bytes, arg shapes (out, x)\n")
    text = spec.read_text()
    for old, new in [('grid = ["TODO"]', 'grid = ["tokens"]'), ('block = ["TODO"]', "block = [256]"),
                     ('name = "TODO"', 'name = "small"'), ('tokens = "TODO"', "tokens = 3"), ('d = "TODO"', "d = 2048"),
                     ('bytes = "TODO"', 'bytes = "tokens * d * 6"')]:
        text = text.replace(old, new)
    text = text.replace('shape = ["TODO"]', 'shape = ["tokens", "d"]', 1).replace('shape = ["TODO"]',
                                                                                 'shape = ["tokens", "2 * d"]', 1)
    spec.write_text(text)
    assert main(["init", "--check", str(spec)]) == 0
    assert ": complete: silu_and_mul, 4 arguments, 1 problem size, 0 parameters" in capsys.readouterr().out
    # complete but wrong is one line naming the place
    spec.write_text(text.replace('shape = ["tokens", "d"]', 'shape = ["tokens", "e"]'))
    assert main(["init", "--check", str(spec)]) == 1
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "[arg.out.shape[1]] expected only known names, not e" in out
    # an even size alone is a problem: nothing would catch a kernel that skips a tail
    spec.write_text(text.replace("tokens = 3", "tokens = 4"))
    assert main(["init", "--check", str(spec)]) == 1
    assert "no odd verification size: add a [[verify.problem]] with odd tokens, d" in capsys.readouterr().out


@needs_nvcc
def test_check_compiles_finds_the_kernel_runs_the_reference_and_says_every_problem_at_once(tmp_path, capsys):
    (tmp_path / "k.cu").write_text(
        "namespace ops { template <typename T> __global__ void scale(T *out, const T *x, int n) {\n"
        "  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) out[i] = 2 * x[i]; }\n"
        "template __global__ void scale<float>(float *, const float *, int); }\n")
    (tmp_path / "reference.py").write_text("def reference(inputs, sizes):\n    return {'out': inputs['x'] * 3 / 0}\n")
    spec = tmp_path / "kernel.toml"
    assert main(["init", str(tmp_path / "k.cu")]) == 0
    capsys.readouterr()
    text = spec.read_text().replace('entry = "scale"', 'entry = "scal"')
    spec.write_text(text)
    assert main(["init", "--check", str(spec)]) == 1
    line = capsys.readouterr().out
    assert line.count("\n") == 1
    assert "still to fill in: problem sizes (n)" in line
    assert "k.cu (cuda): the program has no kernel named 'scal'; it has ops::scale<float>" in line
    for old, new in [('entry = "scal"', 'entry = "scale"\nreference = "reference.py"'),
                     ('grid = ["TODO"]', 'grid = ["n / 7"]'), ('block = ["TODO"]', "block = [7]"),
                     ('name = "TODO"', 'name = "small"'), ('n = "TODO"', "n = 1001"),
                     ('shape = ["TODO"]', 'shape = ["n"]'), ('bytes = "TODO"', 'bytes = "8 * n"')]:
        text = text.replace(old, new)
    spec.write_text(text)
    assert main(["init", "--check", str(spec)]) == 1
    line = capsys.readouterr().out
    assert "the reference's `out` has NaN or Inf from finite inputs" in line
    assert "launch.grid `n / 7` divides with `/`" in line
    (tmp_path / "reference.py").write_text("def reference(inputs, sizes):\n    return {'out': inputs['x'] * 2}\n")
    spec.write_text(text.replace("n / 7", "ceil_div(n, 7)"))
    assert main(["init", "--check", str(spec)]) == 0
    assert ": complete: scale, 3 arguments" in capsys.readouterr().out


def test_include_folders_are_confined_to_the_spec_folder_unless_the_spec_says_absolute(tmp_path):
    from kerntune.engine.template import TemplateError

    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "scale.h").write_text("#define SCALE 2.0f\n")
    (tmp_path / "k.cl").write_text('#include "scale.h"\n__kernel void k(__global float *o) { o[0] = SCALE; }\n')
    base = ('[kernel]\nname = "k"\nsources = { opencl = "k.cl" }\n{extra}options = { opencl = [OPT] }\n'
            '[launch]\ngrid = [1]\nblock = [1]\n[[arg]]\nname = "o"\ndtype = "float32"\nrole = "output"\n'
            'shape = [1]\n[[problem]]\nname = "one"\nn = 1\n[cost]\nbytes = 4\n')
    spec = tmp_path / "kernel.toml"
    spec.write_text(base.replace("{extra}", "").replace("OPT", '"-Iinc"'))
    assert load_template(spec).compile_options["opencl"] == (f"-I{tmp_path / 'inc'}",)
    for bad in ('"-I../elsewhere"', '"-I/usr/include"'):
        spec.write_text(base.replace("{extra}", "").replace("OPT", bad))
        with pytest.raises(TemplateError, match="include folders inside the spec's folder"):
            load_template(spec)
    spec.write_text(base.replace("{extra}", "absolute_includes = true\n").replace("OPT", '"-I/usr/include"'))
    assert load_template(spec).compile_options["opencl"] == ("-I/usr/include",)


def test_an_opencl_twin_is_merged_and_must_agree(tmp_path, capsys):
    cu = tmp_path / "baseline.cu"
    shutil.copyfile(ROOT / "templates" / "silu_and_mul" / "baseline.cu", cu)
    cl = HERE / "data" / "originals" / "silu_and_mul" / "baseline.cl"
    out = tmp_path / "spec" / "kernel.toml"
    assert main(["init", str(cu), "--opencl", str(cl), "-o", str(out)]) == 0
    assert "copied baseline.cu, baseline.cl beside it" in capsys.readouterr().out
    data = tomllib.loads(out.read_text())
    assert data["kernel"]["sources"] == {"cuda": "baseline.cu", "opencl": "baseline.cl"}
    assert data["launch"]["block"] == [256]  # from reqd_work_group_size(256, 1, 1)
    bad = tmp_path / "bad.cl"
    bad.write_text(cl.read_text().replace("int tokens, int d", "int rows, int d"))
    argv = ["init", str(cu), "--opencl", str(bad), "-o", str(tmp_path / "x" / "kernel.toml")]
    assert "take different arguments" in one_line_error(capsys, argv)
    assert main(["init", str(cu), "-o", str(out)]) == 2
    assert "already exists" in capsys.readouterr().err


def test_a_file_without_a_kernel_is_one_line(tmp_path, capsys):
    f = tmp_path / "host.cu"
    f.write_text("int main() { return 0; }  // __global__ only in a comment\n")
    assert "no __global__ or __kernel function found" in one_line_error(capsys, ["init", str(f)])


def test_writes_are_found_through_aliases_compound_assignments_stores_and_atomics():
    sig = parse_kernel("""
    #define STORE(p, v) (*(p) = (v))
    template <int N> struct Pack;
    extern "C" __global__ void __launch_bounds__(128) k(float *__restrict__ acc, float *out, const float *in,
                                                        int *counter, unsigned long n, double scale, float *unused) {
        float *row = acc + blockIdx.x * n;   // an alias of acc
        row[threadIdx.x] += in[threadIdx.x] * 2.0f;   /* read and written: inout */
        *(out + threadIdx.x) = scale * in[0];
        atomicAdd(counter, 1);
        const float y = unused[0] * 3;
    }""")
    roles = {a.name: (a.dtype, a.role) for a in sig.args}
    assert roles == {"acc": ("float32", "inout"), "out": ("float32", "output"), "in": ("float32", "input"),
                     "counter": ("int32", "inout"), "n": ("uint64", "scalar"), "scale": ("float64", "scalar"),
                     "unused": ("float32", "input")}
    assert sig.block_hint == (128,) and sig.dialect == "cuda"


def test_opencl_signatures_with_address_spaces():
    sig = parse_kernel("""
    __kernel void __attribute__((reqd_work_group_size(64, 2, 1)))
    scale(__global float *restrict y, __constant float *x, __local float *tmp, const int n) {
        __global float *dst = y + get_group_id(0) * n;
        vstore4(vload4(0, x) * 2.0f, get_local_id(0), dst);
    }""")
    assert [(a.name, a.role) for a in sig.args] == [("y", "output"), ("x", "input"), ("tmp", "input"), ("n", "scalar")]
    assert sig.args[2].local and sig.block_hint == (64, 2, 1) and sig.dialect == "opencl"
    with pytest.raises(SignatureError, match="no kernel named 'other'"):
        parse_kernel("__kernel void a(int n) {}", "other")


def test_typedefs_are_read_as_the_source_compiles_without_options():
    from kerntune.engine.signature import parse_kernel, typedefs

    src = ("#ifdef WIDE\ntypedef double real;\n#elif defined(HALF)\ntypedef __half real;\n#else\n"
           "typedef float real;\n#endif\ntypedef real value_t;\n"
           "__global__ void k(value_t *out, const real *in, int n) { out[0] = in[0]; }\n")
    assert typedefs(src) == {"real": "float", "value_t": "float"}
    assert [(a.name, a.dtype) for a in parse_kernel(src).args] == [("out", "float32"), ("in", "float32"),
                                                                   ("n", "int32")]
    defined_first = "#define WIDE 1\n" + src
    assert typedefs(defined_first)["real"] == "double"
    assert typedefs(src, {"HALF": "1"})["real"] == "__half"


# real-world kernel shapes: tree-sitter reads them, roles come from what the body does -------------

FLASHINFER_LIKE = r"""
#include <cuda_fp16.h>
#include "vec_dtypes.cuh"
#if (__CUDACC_VER_MAJOR__ >= 12) && defined(FLASHINFER_ENABLE_BF16)
#define HAS_BF16 1
#endif
namespace flashinfer {
namespace norm {
template <uint32_t VEC_SIZE, typename T>
__global__ void RMSNormKernel(T* __restrict__ input, T* __restrict__ weight, T* __restrict__ output,
                              const uint32_t d, float eps) {
  const uint32_t tx = threadIdx.x, bx = blockIdx.x;
  float sum_sq = 0.f;
  auto square = [&](float v) { return v * v; };
  for (uint32_t i = 0; i < d / VEC_SIZE; i++) {
    vec_t<T, VEC_SIZE> input_vec;
    input_vec.cast_load(input + bx * d + i * VEC_SIZE);
#pragma unroll
    for (uint32_t j = 0; j < VEC_SIZE; j++) sum_sq += square(float(input_vec[j]));
  }
  float rms_rcp = rsqrtf(sum_sq / float(d) + eps);
  for (uint32_t i = 0; i < d / VEC_SIZE; i++) {
    vec_t<T, VEC_SIZE> input_vec, weight_vec, output_vec;
    input_vec.cast_load(input + bx * d + i * VEC_SIZE);
    weight_vec.cast_load(weight + i * VEC_SIZE);
    for (uint32_t j = 0; j < VEC_SIZE; j++) output_vec[j] = float(input_vec[j]) * rms_rcp * float(weight_vec[j]);
    output_vec.cast_store(output + bx * d + i * VEC_SIZE);
  }
}
template __global__ void RMSNormKernel<8, half>(half*, half*, half*, const uint32_t, float);
}  // namespace norm
}  // namespace flashinfer
"""


def test_a_flashinfer_style_template_reads_with_roles_and_types_from_its_instantiation():
    sig = parse_kernel(FLASHINFER_LIKE)
    assert sig.name == "RMSNormKernel" and sig.qualified == "flashinfer::norm::RMSNormKernel"
    assert sig.template_params == ("VEC_SIZE", "T")
    assert [(a.name, a.dtype, a.role) for a in sig.args] == [
        ("input", "float16", "input"), ("weight", "float16", "input"), ("output", "float16", "output"),
        ("d", "uint32", "scalar"), ("eps", "float32", "scalar")]
    assert sig.instantiations[0].text == "<8, __half>"


CAST_WRITES = r"""
typedef float4 vec4;
struct Pack { float v[4];
  __device__ void store(float *p) const { for (int k = 0; k < 4; ++k) p[k] = v[k]; }
  __device__ void load(const float *p) { for (int k = 0; k < 4; ++k) v[k] = p[k]; } };
__device__ __forceinline__ void put(float *dst, int i, float v) { dst[i] = v; }
__global__ void __launch_bounds__(256, 2) many(float *a, float *b, float *c, float *d, float *e, float *f,
                                               float *softmax_out, const float *x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  reinterpret_cast<float4 *>(a)[i] = make_float4(1.f, 2.f, 3.f, 4.f);
  *(vec4 *)(b + 4 * i) = reinterpret_cast<const vec4 *>(x)[i];
  Pack p; p.load(x + 4 * i); p.store(c + 4 * i);
  put(d, i, x[i]);
  float *row = e + blockIdx.x * n;
  for (float *q = row; q < row + n; ++q) *q = 0.f;
  float4 &r = reinterpret_cast<float4 *>(f)[i];
  r.x = 1.f;
  float m = -1e30f, s = 0.f;
  for (int j = 0; j < n; ++j) m = fmaxf(m, x[j]);
  for (int j = 0; j < n; ++j) { softmax_out[j] = expf(x[j] - m); s += softmax_out[j]; }
  for (int j = 0; j < n; ++j) softmax_out[j] /= s;
}
"""


def test_writes_through_casts_helpers_methods_references_and_local_pointers_make_outputs():
    sig = parse_kernel(CAST_WRITES)
    roles = {a.name: a.role for a in sig.args}
    # the softmax writes its output before it reads it back: still an output, checked for gaps
    assert roles == {"a": "output", "b": "output", "c": "output", "d": "output", "e": "output",
                     "f": "output", "softmax_out": "output", "x": "input", "n": "scalar"}
    assert sig.block_hint == (256,) and sig.notes == ()


def test_reading_before_writing_is_inout_and_an_unknown_callee_is_said():
    sig = parse_kernel("""
    __global__ void k(float *acc, float *y, float *z, float *w) {
        acc[threadIdx.x] = acc[threadIdx.x] * 2.0f;   // read first: inout
        float t = y[0]; y[0] = t + 1.0f;             // read first: inout
        opaque_from_a_header(z);                      // cannot tell: counted as a write
        w[0] = 1.0f; w[1] = w[0];                     // written first: output
    }""")
    assert {a.name: a.role for a in sig.args} == {"acc": "inout", "y": "inout", "z": "output", "w": "output"}
    assert any("opaque_from_a_header" in n for n in sig.notes)


def test_preprocessor_conditions_templates_and_lambdas_never_end_in_a_traceback():
    src = """
    #define VEC 4
    #if (VEC > 2) && !defined(NARROW)
    typedef float elem;
    #elif VEC
    typedef double elem;
    #else
    typedef __half elem;
    #endif
    #if SOME_MACRO_FROM_A_HEADER(3)
    #endif
    namespace a { namespace b {
    template <typename T, int N = 2>
    __global__ void k(T *out, const elem *in, int n) {
        auto f = [=] __device__ (int i) { return in[i] * N; };
    #if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
        out[threadIdx.x] = f(threadIdx.x);
    #else
        out[threadIdx.x] = 0;
    #endif
    }
    template __global__ void k<__nv_bfloat16, 2>(__nv_bfloat16 *, const elem *, int);
    template __global__ void k<float, 2>(float *, const elem *, int);
    }}
    """
    sig = parse_kernel(src)
    assert [(a.name, a.dtype, a.role) for a in sig.args] == [
        ("out", "bfloat16", "output"), ("in", "float32", "input"), ("n", "int32", "scalar")]
    assert sig.entry == "k<__nv_bfloat16, 2>"  # two instantiations: the spec names one
    assert any("could not evaluate" in n for n in sig.notes)
    chosen = parse_kernel(src, "k<float, 2>")
    assert chosen.args[0].dtype == "float32"


def test_a_template_without_instantiation_is_an_error_naming_the_one_to_add():
    src = "template <typename T>\n__global__ void scale(T *out, const T *x, int n) { out[0] = x[0]; }\n"
    with pytest.raises(SignatureError, match=r"kernel scale is a template with no explicit instantiation; "
                                             r"add one after it, e\.g\. `template __global__ void "
                                             r"scale<float>\(float \*, const float \*, int\);`"):
        parse_kernel(src)


def test_source_tree_sitter_cannot_fully_parse_still_gives_its_kernel_and_a_note(tmp_path, capsys):
    f = tmp_path / "odd.cu"
    f.write_text("__global__ void k(float *out, const float *x) {\n"
                 "  out[threadIdx.x] = x[threadIdx.x] @@ 2;\n}\n")
    assert main(["init", str(f)]) == 0
    out = capsys.readouterr().out
    assert "out output" in out and "could not read: could not parse line 2" in out
    assert (tmp_path / "kernel.toml").exists()


ENCODER = """
// llm.c's encoder, as published: token and position embeddings, one thread per output element
__global__ void encoder_forward_kernel(float* out, const int* inp, const float* wte, const float* wpe,
                                       int B, int T, int C, int V) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * T * C) return;
    int bt = idx / C, c = idx % C;
    out[idx] = wte[inp[bt] * C + c] + wpe[(bt % T) * C + c];
}
"""

GATHER = """
__global__ void gather_rows(float* out, const long* __restrict__ rows, const float* x, int n, int d,
                            int* counts) {
    int i = blockIdx.x;
    long r = __ldg(&rows[i]);
    long s = r;
    for (int c = threadIdx.x; c < d; c += blockDim.x) out[i * d + c] = x[s * d + c];
    if (threadIdx.x == 0) atomicAdd(&counts[i % 4], 1);
}
"""


def test_an_index_array_gets_its_range_from_the_size_it_indexes(tmp_path, capsys):
    # a comparison in the kernel bounds the ids (`id < vocab`), in both dialects
    d = tmp_path / "emb"
    d.mkdir()
    for f in ("embedding.cu", "embedding.cl"):
        shutil.copyfile(HERE / "data" / "byo" / "embedding" / f, d / f)
    assert main(["init", str(d / "embedding.cu"), "--opencl", str(d / "embedding.cl")]) == 0
    ids = next(a for a in tomllib.loads((d / "kernel.toml").read_text())["arg"] if a["name"] == "ids")
    assert ids["init"] == "randint" and ids["range"] == [0, "vocab"]
    assert "its values index table; the kernel compares them with vocab" in (d / "kernel.toml").read_text()
    # `wte[inp[bt] * C + c]` and a size named V: token ids in [0, V)
    src = tmp_path / "encoder.cu"
    src.write_text(ENCODER)
    assert main(["init", str(src), "-o", str(tmp_path / "encoder.toml")]) == 0
    args = {a["name"]: a for a in tomllib.loads((tmp_path / "encoder.toml").read_text())["arg"]}
    assert args["inp"]["range"] == [0, "V"] and "range" not in args["wpe"]
    # through a local and __ldg, with no size to name: the range is left to the user, and said
    src = tmp_path / "gather.cu"
    src.write_text(GATHER)
    assert main(["init", str(src), "-o", str(tmp_path / "gather.toml")]) == 0
    out = capsys.readouterr().out
    args = {a["name"]: a for a in tomllib.loads((tmp_path / "gather.toml").read_text())["arg"]}
    assert args["rows"]["range"] == [0, "TODO"] and "arg.rows.range" in out
    assert "range" not in args["counts"]  # an integer output indexes nothing it reads


def test_an_inferred_range_loads_as_an_expression_over_the_sizes(tmp_path):
    from kerntune.engine.scaffold import starter_spec
    from kerntune.engine.signature import parse_kernel

    text = starter_spec({"cuda": "encoder.cu"}, parse_kernel(ENCODER), None).text
    for key, value in (('grid = ["TODO"]', 'grid = ["ceil_div(B * T * C, 256)"]'), ('block = ["TODO"]', "block = [256]"),
                       ('bytes = "TODO"', 'bytes = "4 * B * T * (3 * C + 1)"')):
        text = text.replace(key, value)
    shapes = iter(['["B", "T", "C"]', '["B", "T"]', '["V", "C"]', '["T", "C"]'])
    text = "\n".join(line.replace('["TODO"]', next(shapes)) if line.startswith("shape =") else line
                     for line in text.splitlines())
    text = text.replace('name = "TODO"', 'name = "gpt2"').replace('B = "TODO"', "B = 2").replace(
        'T = "TODO"', "T = 8").replace('C = "TODO"', "C = 16").replace('V = "TODO"', "V = 50")
    (tmp_path / "encoder.cu").write_text(ENCODER)
    (tmp_path / "kernel.toml").write_text(text)
    t = load_template(tmp_path / "kernel.toml")
    inp = next(a for a in t.arguments if a.name == "inp")
    assert inp.init == "randint" and inp.bounds(t.problems[0].values) == (0, 50)


HOST = HERE / "data" / "host_launch"


@pytest.mark.parametrize("name, grid, block", [
    ("gelu_llmc", 'grid = ["ceil_div(N, 128)"]', "block = [128]"),
    ("layernorm_llmc", 'grid = ["ceil_div(N * 32, 512)"]', "block = [512]"),
    ("transpose_samples", 'grid = ["width // 32", "height // 32"]', "block = [32, 8]"),
    ("histogram", "grid = [120]", "block = [256]"),
])
def test_the_launch_the_files_host_code_makes_fills_the_specs_launch(name, grid, block, tmp_path, capsys):
    """`kernel<<<grid, block>>>(args)`: the launcher's constants, #defines and the host variables it
    passes (by position) read over the kernel's own scalars; CEIL_DIV as ceil_div, `/` as `//`."""
    assert main(["init", str(HOST / f"{name}.cu"), "-o", str(tmp_path / "kernel.toml")]) == 0
    out = capsys.readouterr().out
    assert "could not read" not in out and "launch.grid" not in out and "launch.block" not in out, out
    text = (tmp_path / "kernel.toml").read_text()
    assert f"{grid}   # from the file's launch <<<" in text and f"{block}   # from the file's launch" in text


def test_a_launch_over_what_is_not_a_problem_size_is_left_to_fill_with_the_launch_beside_it(tmp_path, capsys):
    src = (HOST / "gelu_llmc.cu").read_text().replace("const int block_size = 128;",
                                                      "const int block_size = pick_block(N);")
    (tmp_path / "g.cu").write_text(src.replace("CEIL_DIV(N, block_size)", "static_cast<int>(N / 128.0)"))
    assert main(["init", str(tmp_path / "g.cu"), "-o", str(tmp_path / "kernel.toml")]) == 0
    out = capsys.readouterr().out
    assert "launch.grid" in out and "launch.block" in out
    text = (tmp_path / "kernel.toml").read_text()
    assert 'grid = ["TODO"]' in text and "the file launches it as <<<grid_size, block_size>>> (line 18)" in text


def test_the_dynamic_shared_memory_of_the_launch_is_read_or_left_to_fill(tmp_path, capsys):
    kernel = ("__global__ void k(float *o, const float *x, int n) {\n  extern __shared__ float buf[];\n"
              "  buf[threadIdx.x] = x[threadIdx.x];\n  __syncthreads();\n  o[threadIdx.x] = buf[0];\n}\n")
    for i, (launcher, want) in enumerate((
            ("int threads = 128; k<<<n, threads, threads * sizeof(float)>>>(o, x, n);", 'shared_bytes = "128 * 4"'),
            ("k<<<n, 64, smem, stream>>>(o, x, n);", 'shared_bytes = "TODO"   # dynamic shared memory: the '
                                                     "file's launch <<<n, 64, smem, stream>>> (line 7) asks for "
                                                     "smem bytes"))):
        (tmp_path / "k.cu").write_text(kernel + "void run(float *o, const float *x, int n, int smem, "
                                       f"cudaStream_t stream) {{ {launcher} }}\n")
        assert main(["init", str(tmp_path / "k.cu"), "-o", str(tmp_path / f"kernel{i}.toml")]) == 0
        out = capsys.readouterr().out
        assert ("launch.shared_bytes" in out) == ("TODO" in want), out
        assert want in (tmp_path / f"kernel{i}.toml").read_text()


def test_a_launch_of_whole_blocks_needs_no_odd_verification_size(capsys):
    """The tiled matmul's own launch is `N // 16`: its sizes are multiples of the tile by design."""
    spec = HERE / "data" / "tiles" / "matmul" / "kernel.toml"
    assert main(["init", "--check", str(spec)]) == 0, capsys.readouterr().out
    assert ": complete:" in capsys.readouterr().out


def test_min_and_max_in_a_launch_read_in_any_of_their_spellings(tmp_path, capsys):
    (tmp_path / "k.cu").write_text(
        "__global__ void k(float *o, int n) { o[threadIdx.x] = 1; }\n"
        "void run(float *o, int n) { const int threads = std::min(1024, n);\n"
        "  k<<<MAX(1, n / threads), threads>>>(o, n); }\n")
    assert main(["init", str(tmp_path / "k.cu"), "-o", str(tmp_path / "kernel.toml")]) == 0
    text = (tmp_path / "kernel.toml").read_text()
    assert 'grid = ["max(1, n // (min(1024, n)))"]' in text and 'block = ["min(1024, n)"]' in text
