"""C++ kernels load by the name their author wrote: the cubin's symbols, demangled (nvcc, no GPU)."""

from __future__ import annotations

import numpy as np
import pytest

from kerntune.engine.backends import CompileError
from kerntune.engine.backends import cuda
from kerntune.engine.backends.cuda_symbols import KernelSymbol, demangle, kernels, resolve, split_demangled
from kerntune.engine.compile_pool import CompilePool

needs_nvcc = pytest.mark.skipif(cuda.find_nvcc() is None, reason="nvcc not found")

CPP = r"""
#include <cuda_bf16.h>
namespace ops {
template <typename T, int N>
__global__ void scale(T *out, const T *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] * (T)N;
}
template __global__ void scale<float, 4>(float *, const float *, int);
template __global__ void scale<double, 2>(double *, const double *, int);
}  // namespace ops

namespace {
__global__ void hidden(float *o) { o[0] = 1.0f; }
}

__device__ __noinline__ float twice(float a) { return 2.0f * a; }

__global__ void gelu_forward_kernel1(__nv_bfloat16 *out, const __nv_bfloat16 *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __float2bfloat16(twice(__bfloat162float(x[i])));
}
__global__ void over(float *o) { o[0] = 1.0f; }
__global__ void over(float *o, int n) { o[n - 1] = 2.0f; }
extern "C" __global__ void plain(float *o) { o[0] = 3.0f; }
template <typename T> __global__ void never_instantiated(T *o) { o[0] = T(1); }
"""


@pytest.fixture(scope="module")
def cubin(tmp_path_factory):
    if cuda.find_nvcc() is None:
        pytest.skip("nvcc not found")
    import os

    os.environ["KERNTUNE_CACHE_DIR"] = str(tmp_path_factory.mktemp("names-cache"))
    binary, _, _ = cuda.compile_cubin(CPP, "plain", {}, (), "sm_90")
    return binary


def test_split_demangled_names():
    k = split_demangled("x", "void ops::scale<float, 4>(float*, float const*, int)")
    assert (k.name, k.template_args, k.params) == ("ops::scale", "<float, 4>", "(float*, float const*, int)")
    k = split_demangled("x", "(anonymous namespace)::hidden(float*)")
    assert (k.name, k.template_args) == ("(anonymous namespace)::hidden", "")
    k = split_demangled("plain", "plain")
    assert (k.name, k.params, k.display) == ("plain", "", "plain")
    assert demangle("_ZN3ops5scaleIfLi4EEEvPT_PKS1_i") == "void ops::scale<float, 4>(float*, float const*, int)"
    assert demangle("plain") == "plain"


@needs_nvcc
def test_every_kernel_of_a_cubin_is_found_with_its_demangled_name(cubin):
    found = {k.display for k in kernels(cubin)}
    # kernels only: the device function is not an entry point, the uninstantiated template is absent
    assert found == {"ops::scale<float, 4>", "ops::scale<double, 2>", "(anonymous namespace)::hidden",
                     "gelu_forward_kernel1", "over", "plain"}


@needs_nvcc
@pytest.mark.parametrize("wanted, symbol", [
    ("gelu_forward_kernel1", "_Z20gelu_forward_kernel1P13__nv_bfloat16PKS_i"),
    ("plain", "plain"),
    ("scale<float, 4>", "_ZN3ops5scaleIfLi4EEEvPT_PKS1_i"),
    ("ops::scale<double,2>", "_ZN3ops5scaleIdLi2EEEvPT_PKS1_i"),
    ("hidden", None),
    ("_ZN3ops5scaleIfLi4EEEvPT_PKS1_i", "_ZN3ops5scaleIfLi4EEEvPT_PKS1_i"),
])
def test_a_kernel_is_found_by_the_name_its_author_wrote(cubin, wanted, symbol):
    k = cuda.resolve_entry(cubin, wanted)
    if symbol is not None:
        assert k.symbol == symbol
    else:
        assert k.display == "(anonymous namespace)::hidden"


@needs_nvcc
def test_ambiguous_and_missing_names_are_one_line_listing_the_kernels(cubin):
    with pytest.raises(CompileError) as e:
        cuda.resolve_entry(cubin, "scale")
    assert str(e.value) == ("'scale' names 2 kernels: ops::scale<double, 2>, ops::scale<float, 4>; "
                            "set [kernel] entry to one of them")
    with pytest.raises(CompileError, match=r"'over' names 2 kernels: over\(float\*\), over\(float\*, int\);"):
        cuda.resolve_entry(cubin, "over")
    with pytest.raises(CompileError, match=r"no kernel named 'never_instantiated'; it has .*gelu_forward_kernel1"):
        cuda.resolve_entry(cubin, "never_instantiated")
    with pytest.raises(CompileError, match=r"no kernel named 'scale<half, 4>'"):
        cuda.resolve_entry(cubin, "scale<half, 4>")


@needs_nvcc
def test_compile_and_the_compile_pool_find_a_cpp_kernel_and_its_ptxas_figures(cubin):
    _, info, _ = cuda.compile_cubin(CPP, "gelu_forward_kernel1", {}, (), "sm_90")
    assert info["registers"] > 0 and info["entry"] is True
    _, info, cached = cuda.compile_cubin(CPP, "ops::scale<float, 4>", {}, (), "sm_90")
    assert cached and info["registers"] > 0

    class T:  # the part of a Template the pool reads
        entry = "scale<double, 2>"
        compile_options = {"cuda": ()}

        @staticmethod
        def options_for(backend):
            return ()

        @staticmethod
        def source_for(backend):
            return CPP

    pool = CompilePool(T(), "sm_90", 1)
    try:
        built = pool.submit({}).result()
        assert built.info["registers"] > 0
    finally:
        pool.close()


@needs_nvcc
def test_a_file_of_templates_without_instantiation_says_what_to_add():
    src = "template <typename T> __global__ void k(T *o) { o[0] = T(1); }\n"
    with pytest.raises(CompileError, match=r"no __global__ function .*template __global__ void k<float>"):
        cuda.compile_cubin(src, "k", {}, (), "sm_90")


def test_resolve_prefers_the_exact_plain_name_over_a_namespaced_one():
    a = KernelSymbol("k", "k", "k")
    b = KernelSymbol("_ZN2ns1kEPf", "ns::k(float*)", "ns::k", "", "(float*)")
    assert resolve([a, b], "k") is a
    assert resolve([a, b], "ns::k") is b


def test_an_entry_names_an_instantiation_by_its_numbers_however_the_demangler_spells_their_type():
    """`template <const uint BLOCKSIZE>` instantiated at 32 demangles as `k<32u>`; the spec writes
    `k<32>`. A different number, or a type for a number, is another kernel."""
    k32 = split_demangled("_Z1kILj32EEvPf", "void k<32u>(float*)")
    wide = split_demangled("_Z1kIfLl4EEvPf", "void k<float, 4l>(float*)")
    narrow = split_demangled("_Z1kILh3EEvPf", "void k<(unsigned char)3>(float*)")
    assert resolve([k32], "k<32>") is k32 and resolve([k32], "k< 32u >") is k32
    assert resolve([wide, k32], "k<float, 4>") is wide and resolve([narrow, k32], "k<3>") is narrow
    with pytest.raises(CompileError, match="no kernel named 'k<64>'"):
        resolve([k32], "k<64>")
    with pytest.raises(CompileError, match="no kernel named 'k<float>'"):
        resolve([k32], "k<float>")


@pytest.mark.gpu
def test_a_cpp_template_kernel_launches_by_its_plain_name():
    from kerntune.engine.backends import open_backend
    from kerntune.engine.space import Geometry

    b = open_backend("cuda")
    try:
        k = b.compile(CPP, "scale<float, 4>", {})
        n = 1000
        x = np.arange(n, dtype=np.float32)
        out = np.zeros(n, np.float32)
        dx, dout = b.alloc(x.nbytes), b.alloc(out.nbytes)
        b.upload(dx, x)
        b.launch(k, Geometry((4, 1, 1), (256, 1, 1), 0), [dout, dx, np.int32(n)])
        b.download(dout, out)
        np.testing.assert_array_equal(out, 4 * x)
        g = b.compile(CPP, "gelu_forward_kernel1", {})
        assert b.resources(g).registers > 0
    finally:
        b.close()
