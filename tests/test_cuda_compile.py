"""compile_cubin with the real nvcc (no GPU needed), and the CUDA backend on a GPU."""

from __future__ import annotations

import re

import numpy as np
import pytest

from kerntune.engine.backends import BackendError, CompileError
from kerntune.engine.backends import cuda, cuda_toolchain
from kerntune.engine.space import Geometry

needs_nvcc = pytest.mark.skipif(cuda.find_nvcc() is None, reason="nvcc not found")
needs_nvrtc = pytest.mark.skipif(not cuda.nvrtc_version(), reason="NVRTC (cuda-python) not installed")

VADD = r"""
#ifndef SCALE
#define SCALE 1.0f
#endif
extern "C" __global__ void vadd(const float *a, const float *b, float *c, int n) {
    __shared__ float stage[256];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    stage[threadIdx.x] = i < n ? a[i] : 0.0f;
    __syncthreads();
    if (i < n) c[i] = SCALE * stage[threadIdx.x] + b[i];
}
"""

BROKEN = """extern "C" __global__ void broken(float *x) {
    int i = threadIdx.x
    x[i] = 1.0f;
}
"""

# Many live values under a small register cap: ptxas must spill.
SPILLER = r"""
extern "C" __global__ void spill(float *out, const float *in, int n) {
    float acc[64];
#pragma unroll
    for (int k = 0; k < 64; ++k) acc[k] = in[(threadIdx.x + k * 131) % n];
    for (int it = 0; it < n; ++it) {
#pragma unroll
        for (int k = 0; k < 64; ++k) acc[k] = fmaf(acc[k], acc[(k + 1) % 64], in[it]);
    }
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < 64; ++k) s += acc[k];
    out[threadIdx.x] = s;
}
"""


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNTUNE_CACHE_DIR", str(tmp_path))
    return tmp_path / "cubin"


@pytest.fixture(params=["nvcc", pytest.param("nvrtc", marks=needs_nvrtc)])
def compiler(request, cache, monkeypatch):
    """Each compile test runs with each compiler alone (KERNTUNE_COMPILER)."""
    monkeypatch.setenv("KERNTUNE_COMPILER", request.param)
    return request.param


@needs_nvcc
def test_good_kernel_compiles_and_reports_ptxas_figures(cache, compiler):
    cubin, info, cached = cuda.compile_cubin(VADD, "vadd", {}, (), "sm_90")
    assert cubin[:4] == b"\x7fELF"
    assert not cached
    assert 4 <= info["registers"] <= 64
    assert info["smem"] == 256 * 4
    assert info["spill_stores"] == info["spill_loads"] == 0
    assert info["stack_frame"] == 0
    assert info["barriers"] == 1


@needs_nvcc
def test_spills_are_reported(cache, compiler):
    _, info, _ = cuda.compile_cubin(SPILLER, "spill", {}, ("-maxrregcount=32",), "sm_90")
    assert info["registers"] <= 32
    assert info["spill_stores"] > 0 and info["spill_loads"] > 0
    assert info["stack_frame"] > 0


@needs_nvcc
def test_syntax_error_names_the_line(cache, compiler):
    with pytest.raises(CompileError) as e:
        cuda.compile_cubin(BROKEN, "broken", {}, (), "sm_90")
    message = str(e.value)
    assert re.search(r"kernel\.cu\(\d+\): error", message), message  # both compilers say so
    assert "kernel.cu(3)" in message or "kernel.cu(2)" in message
    assert "kerntune-nvcc-" not in message  # no temporary paths
    assert len(message.splitlines()[0]) <= 800  # the first error lines, then the whole log
    assert "compiler log:" in message and len(message) <= 21_000
    assert not list(cache.glob("*.cubin"))


@needs_nvcc
def test_second_compile_is_a_cache_hit(cache, compiler, monkeypatch):
    first = cuda.compile_cubin(VADD, "vadd", {"SCALE": "2.0f"}, (), "sm_90")
    assert not first[2]

    def no_compiler(*a, **k):
        raise AssertionError("a compiler ran on a cache hit")

    monkeypatch.setattr(cuda_toolchain, "_run_nvcc", no_compiler)
    monkeypatch.setattr(cuda_toolchain, "_run_nvrtc", no_compiler)
    second = cuda.compile_cubin(VADD, "vadd", {"SCALE": "2.0f"}, (), "9.0")
    assert second[2]
    assert second[0] == first[0] and second[1] == first[1]


@needs_nvcc
def test_different_defines_are_different_entries(cache):
    a = cuda.compile_cubin(VADD, "vadd", {"SCALE": "2.0f"}, (), "sm_90")
    b = cuda.compile_cubin(VADD, "vadd", {"SCALE": "3.0f"}, (), "sm_90")
    assert not a[2] and not b[2]
    assert a[0] != b[0]
    assert len(list(cache.glob("*.cubin"))) == 2
    # the order defines are given in does not matter
    c = cuda.compile_cubin(VADD, "vadd", {"SCALE": "3.0f", "UNUSED": "1"}, (), "sm_90")
    d = cuda.compile_cubin(VADD, "vadd", {"UNUSED": "1", "SCALE": "3.0f"}, (), "sm_90")
    assert not c[2] and d[2]


@needs_nvcc
def test_missing_entry_is_a_compile_error(cache):
    with pytest.raises(CompileError, match=r"no kernel named 'vad'.*vadd"):
        cuda.compile_cubin(VADD, "vad", {}, (), "sm_90")


# A kernel file as people publish it, with its host launcher and a host header: NVRTC compiles
# device code only, so nvcc builds it.
WITH_HOST = r"""
#include <cstdio>
__global__ void twice(float *x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= 2.0f; }
void launch(float *x, int n) { twice<<<(n + 255) / 256, 256>>>(x, n); std::printf("launched\\n"); }
"""


@needs_nvcc
@needs_nvrtc
def test_nvrtc_is_the_default_and_nvcc_builds_what_it_cannot(cache, monkeypatch):
    monkeypatch.delenv("KERNTUNE_COMPILER", raising=False)
    ran = []
    for name in ("_run_nvcc", "_run_nvrtc"):
        real = getattr(cuda_toolchain, name)
        monkeypatch.setattr(cuda_toolchain, name, lambda *a, _r=real, _n=name: (ran.append(_n), _r(*a))[1])
    _, info, _ = cuda.compile_cubin(VADD, "vadd", {"SCALE": "2.0f"}, (), "sm_90")
    assert ran == ["_run_nvrtc"] and info["registers"] > 0
    ran.clear()
    _, info, _ = cuda.compile_cubin(WITH_HOST, "twice", {}, (), "sm_90")
    assert ran == ["_run_nvrtc", "_run_nvcc"] and info["registers"] > 0
    ran.clear()  # the next configuration of that source goes to nvcc at once
    cuda.compile_cubin(WITH_HOST, "twice", {"UNUSED": "2"}, (), "sm_90")
    assert ran == ["_run_nvcc"]
    ran.clear()  # nvcc-only options too
    cuda.compile_cubin(VADD, "vadd", {}, ("-Xcompiler=-Wall",), "sm_90")
    assert ran == ["_run_nvcc"]


@needs_nvrtc
def test_nvrtc_alone_says_what_it_cannot_build(cache, monkeypatch):
    monkeypatch.setenv("KERNTUNE_COMPILER", "nvrtc")
    with pytest.raises(CompileError, match="nvcc's alone"):
        cuda.compile_cubin(VADD, "vadd", {}, ("-Xcompiler=-Wall",), "sm_90")
    with pytest.raises(CompileError, match="cstdio|launch|error"):
        cuda.compile_cubin(WITH_HOST, "twice", {}, (), "sm_90")


def test_nvcc_options_as_nvrtc_spells_them():
    assert cuda_toolchain.nvrtc_options(["-O3", "--use_fast_math", "-Xptxas=-v", "-maxrregcount=32", "-I/x"]) == [
        "--use_fast_math", "-maxrregcount=32", "-I/x"]
    assert cuda_toolchain.nvrtc_options(["-Xptxas", "-dlcm=cg"]) == ["--ptxas-options=-dlcm=cg"]
    assert cuda_toolchain.nvrtc_options(["-Xcompiler", "-fPIC"]) is None
    assert cuda_toolchain.nvrtc_options(["--keep"]) is None


def test_a_bad_compiler_choice_is_one_line(cache, monkeypatch):
    monkeypatch.setenv("KERNTUNE_COMPILER", "clang")
    with pytest.raises(CompileError, match="KERNTUNE_COMPILER"):
        cuda.compile_cubin(VADD, "vadd", {}, (), "sm_90")


def test_bad_define_name_is_refused(cache):
    with pytest.raises(CompileError, match="preprocessor name"):
        cuda.compile_cubin(VADD, "vadd", {"-o/tmp/x": "1"}, (), "sm_90")


def test_missing_nvcc_is_a_compile_error(cache, monkeypatch):
    monkeypatch.setenv("KERNTUNE_COMPILER", "nvcc")
    monkeypatch.setattr(cuda_toolchain, "find_nvcc", lambda: None)
    with pytest.raises(CompileError, match="nvcc not found"):
        cuda.compile_cubin(VADD, "vadd", {}, (), "sm_90")


def test_arch_names():
    assert cuda.normalize_arch("9.0") == "sm_90"
    assert cuda.normalize_arch("90") == "sm_90"
    assert cuda.normalize_arch("sm_90a") == "sm_90a"
    with pytest.raises(CompileError):
        cuda.normalize_arch("hopper")


def test_parse_ptxas():
    log = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'k' for 'sm_90'
ptxas info    : Function properties for k
    48 bytes stack frame, 44 bytes spill stores, 40 bytes spill loads
ptxas info    : Used 32 registers, used 1 barriers, 48 bytes cumulative stack size, 2048 bytes smem, 368 bytes cmem[0]
ptxas info    : Compile time = 10.0 ms
ptxas info    : Function properties for helper
    8 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
"""
    funcs = cuda.parse_ptxas(log)
    assert funcs["k"] == {"entry": True, "stack_frame": 48, "spill_stores": 44, "spill_loads": 40,
                          "registers": 32, "smem": 2048, "cmem": 368, "barriers": 1}
    assert "entry" not in funcs["helper"]


def test_without_pycuda_the_backend_says_so(monkeypatch):
    monkeypatch.setattr(cuda, "drv", None)
    assert cuda.device_count() == 0
    with pytest.raises(BackendError, match="pycuda"):
        cuda.open(0)
    with pytest.raises(BackendError):
        cuda.list_devices()


# on a GPU ------------------------------------------------------------------------------------

@pytest.fixture
def backend(tmp_path, monkeypatch):
    pytest.importorskip("pycuda.driver")
    if cuda.find_nvcc() is None:
        pytest.skip("nvcc not found")
    if cuda.device_count() == 0:
        pytest.skip("no CUDA device")
    monkeypatch.setenv("KERNTUNE_CACHE_DIR", str(tmp_path))
    b = cuda.open(0)
    yield b
    b.close()


@pytest.mark.gpu
def test_open_reads_the_limits(backend):
    lim = backend.limits
    assert re.fullmatch(r"\d+\.\d+", lim.compute_capability)
    assert lim.max_threads_per_block >= 1024 and lim.warp_size == 32
    assert lim.max_threads_per_sm >= 1024 and lim.max_blocks_per_sm > 0
    assert lim.max_regs_per_sm >= 65536 and lim.sm_count > 0 and lim.l2_bytes > 0
    assert lim.max_shared_per_block_optin >= lim.max_shared_per_block > 0
    assert backend.flush_bytes() >= max(2 * lim.l2_bytes, 4 * 2**20)


@pytest.mark.gpu
def test_vector_add(backend):
    n = 100_000
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    k = backend.compile(VADD, "vadd", {"SCALE": "2.0f"})
    res = backend.resources(k)
    assert res.registers == k.ptxas["registers"] and res.shared_static == 1024 and res.spills == 0
    assert backend.launch_limit(k) >= 256
    bufs = [backend.alloc(n * 4) for _ in range(3)]
    backend.upload(bufs[0], a)
    backend.upload(bufs[1], b)
    geo = Geometry(((n + 255) // 256, 1, 1), (256, 1, 1))
    backend.launch(k, geo, [*bufs, np.int32(n)])
    c = np.full(n, np.nan, dtype=np.float32)
    backend.download(bufs[2], c)
    np.testing.assert_allclose(c, 2.0 * a + b, rtol=1e-6)

    times = backend.time(k, geo, [*bufs, np.int32(n)], repeats=5, flush=True)
    assert len(times) == 5 and all(isinstance(t, float) and t > 0 for t in times)
    for buf in bufs:
        buf.free()


@pytest.mark.gpu
def test_dynamic_shared_memory_above_48k(backend):
    src = r"""
    extern "C" __global__ void fill(float *out, int words) {
        extern __shared__ float buf[];
        for (int i = threadIdx.x; i < words; i += blockDim.x) buf[i] = (float)i;
        __syncthreads();
        if (threadIdx.x == 0) out[0] = buf[words - 1];
    }
    """
    k = backend.compile(src, "fill", {})
    words = 64 * 1024 // 4
    out = backend.alloc(4)
    backend.launch(k, Geometry((1, 1, 1), (128, 1, 1), words * 4), [out, np.int32(words)])
    got = np.zeros(1, dtype=np.float32)
    backend.download(out, got)
    assert got[0] == words - 1
    out.free()


@pytest.mark.gpu
def test_unknown_kernel_name_on_load(backend):
    cubin, _, _ = cuda.compile_cubin(VADD, "vadd", {}, (), backend.arch)
    with pytest.raises(CompileError, match="no kernel named"):
        backend.load(cubin, "nope")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_the_device_tolerance_check_agrees_with_the_host_element_for_element(backend, dtype):
    from kerntune.engine.compare import TOLERANCE, Expected, compare
    from kerntune.engine.template import Argument, np_dtype

    rng = np.random.default_rng(7)
    n = 300_001
    ref = rng.standard_normal(n).astype(np_dtype(dtype))
    ref[:4] = [0.0, np.inf, -np.inf, np.nan]
    arg = Argument(name="out", dtype=dtype, role="output")
    exp = Expected(ref, dtype, arg)
    rtol, atol = TOLERANCE[dtype]
    dev_ref = backend.alloc(exp.values.nbytes)
    backend.upload(dev_ref, exp.values.astype(np.float32))
    out_buf = backend.alloc(n * ref.itemsize)
    cases = {
        "equal": ref.copy(),
        "inside": (ref.astype(np.float32) * (1 + 0.5 * rtol)).astype(ref.dtype),
        "outside": (ref.astype(np.float32) + 50 * (atol + rtol * np.abs(ref.astype(np.float32)))).astype(ref.dtype),
        "nan": ref.copy(), "inf": ref.copy(), "sign": ref.copy(), "zero_ref": ref.copy(),
    }
    cases["nan"][1000] = np.nan
    cases["inf"][2000] = np.inf
    cases["sign"][1] = -np.inf
    cases["zero_ref"][0] = ref.dtype.type(3 * atol)
    cases["outside"][:4] = ref[:4]
    for name, out in cases.items():
        backend.upload(out_buf, out)
        nan, inf, sign, bad, first_nan, first_inf, worst = backend.compare_close(
            out_buf, 0, dev_ref, n, dtype, exp.rtol, exp.atol)
        host_worst, message = compare("out", out, exp)
        device_ok = nan + inf + sign + bad == 0
        # The device holds each element to atol + rtol |ref|, the host to the larger of that and
        # a share of its row's magnitude: the device never passes what the host fails, and where
        # it finds an element outside (an output near zero, "zero_ref") the host decides.
        if device_ok:
            assert message == "", (name, message)
            assert worst >= host_worst * (1 - 1e-6), name
        if name != "zero_ref":
            assert device_ok == (message == ""), (name, message)
        else:
            assert not device_ok and message == "", (name, message)
        if name == "nan":
            assert nan == 1 and first_nan == 1000
        if name == "inf":
            assert inf == 1 and first_inf == 2000
        if name == "sign":
            assert sign == 1
        if name == "outside":
            assert bad == n - 4
    for buf in (dev_ref, out_buf):
        buf.free()


@needs_nvrtc
def test_nvrtc_builds_what_kernels_take_from_nvccs_implicit_headers(cache, monkeypatch):
    # INFINITY and M_PI come with nvcc's host math headers, FLT_MAX with <cfloat>, which NVRTC lacks
    monkeypatch.setenv("KERNTUNE_COMPILER", "nvrtc")
    src = r"""
#include <cfloat>
extern "C" __global__ void k(float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float m = -INFINITY, lo = FLT_MAX;
    if (i < n) { m = fmaxf(m, x[i]); lo = fminf(lo, x[i]); x[i] = m + lo + (float)M_PI + (x[i] != x[i] ? NAN : 0.f); }
}
"""
    _, info, _ = cuda.compile_cubin(src, "k", {}, (), "sm_90")
    assert info["registers"] > 0
