"""`kerntune init`: kernel signatures read by our own parser, starting specs, and their check."""

import shutil
import sys
from pathlib import Path

import pytest

from kerntune.engine.signature import SignatureError, parse_kernel
from kerntune.engine.template import load_template
from kerntune.tui.cli import main

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

HERE = Path(__file__).resolve().parent
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
                     ('name = "TODO"', 'name = "small"'), ('tokens = "TODO"', "tokens = 4"), ('d = "TODO"', "d = 2048"),
                     ('bytes = "TODO"', 'bytes = "tokens * d * 6"')]:
        text = text.replace(old, new)
    text = text.replace('shape = ["TODO"]', 'shape = ["tokens", "d"]', 1).replace('shape = ["TODO"]',
                                                                                 'shape = ["tokens", "2 * d"]', 1)
    spec.write_text(text)
    assert main(["init", "--check", str(spec)]) == 0
    assert ": complete: silu_and_mul, 4 arguments, 1 problem size, 0 parameters" in capsys.readouterr().out
    # complete but wrong is one line naming the place
    spec.write_text(text.replace('shape = ["tokens", "d"]', 'shape = ["tokens", "e"]'))
    assert main(["init", "--check", str(spec)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "[arg.out.shape[1]] expected only known names, not e" in err


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
    assert main(["init", str(cu), "--opencl", str(bad), "-o", str(tmp_path / "x" / "kernel.toml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "take different arguments" in err
    assert main(["init", str(cu), "-o", str(out)]) == 2
    assert "already exists" in capsys.readouterr().err


def test_a_file_without_a_kernel_is_one_line(tmp_path, capsys):
    f = tmp_path / "host.cu"
    f.write_text("int main() { return 0; }  // __global__ only in a comment\n")
    assert main(["init", str(f)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no __global__ or __kernel function found" in err


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
    from kerntune.engine.signature import active_lines, parse_kernel, typedefs

    src = ("#ifdef WIDE\ntypedef double real;\n#elif defined(HALF)\ntypedef __half real;\n#else\n"
           "typedef float real;\n#endif\ntypedef real value_t;\n"
           "__global__ void k(value_t *out, const real *in, int n) { out[0] = in[0]; }\n")
    assert typedefs(src) == {"real": "float", "value_t": "float"}
    assert [(a.name, a.dtype) for a in parse_kernel(src).args] == [("out", "float32"), ("in", "float32"),
                                                                   ("n", "int32")]
    assert "typedef double real;" not in active_lines(src)
    defined_first = "#define WIDE 1\n" + src
    assert typedefs(defined_first)["real"] == "double"
