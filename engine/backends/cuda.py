"""The CUDA backend: pycuda loads, launches and times cubins that cuda_toolchain builds.

Building (NVRTC or nvcc) needs neither pycuda nor a GPU, so the parallel compile pool and the CPU
tests run it anywhere; it lives in cuda_toolchain, and its names are importable from here too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from ..device import DeviceLimits
from ..result import Resources
from ..space import Geometry
from . import BackendError, Capabilities, CompileError, ConstantArg, chosen_device, count_devices, DeviceInfo, LaunchError
from .cuda_symbols import resolve_entry

try:
    import pycuda.driver as drv
    _IMPORT_ERROR = ""
except ImportError as e:  # pragma: no cover - depends on the machine
    drv = None
    _IMPORT_ERROR = str(e)
except OSError as e:  # pragma: no cover - pycuda is there but libcuda is not
    drv = None
    _IMPORT_ERROR = str(e)

# Building cubins lives in cuda_toolchain (NVRTC, then nvcc); these names stay importable here.
from .cuda_toolchain import (  # noqa: E402,F401
    DEFAULT_SHARED_LIMIT, NVCC_FLAGS, cache_dir, cache_key, compile_cubin, compiler_summary, find_nvcc,  # noqa: F401
    device_arch, first_errors, normalize_arch, nvcc_version, nvrtc_version, parse_ptxas,  # noqa: F401
)


# The evaluator's byte comparison on the device: the first differing byte of two ranges, by
# 16-byte words where both ranges allow it, found with atomicMin.
_DIFFER_SRC = r"""
extern "C" __global__ void kerntune_first_difference(const unsigned char *a, const unsigned char *b,
                                                     unsigned long long n, unsigned long long *first)
{
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    const unsigned long long tid = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    const bool wide = (((unsigned long long)a | (unsigned long long)b) & 15) == 0;
    const unsigned long long words = wide ? n / 16 : 0;
    for (unsigned long long w = tid; w < words; w += stride) {
        const uint4 x = ((const uint4 *)a)[w], y = ((const uint4 *)b)[w];
        if (x.x != y.x || x.y != y.y || x.z != y.z || x.w != y.w) {
            for (unsigned long long i = 16 * w; i < 16 * w + 16; ++i)
                if (a[i] != b[i]) { atomicMin(first, i); break; }
        }
    }
    for (unsigned long long i = 16 * words + tid; i < n; i += stride)
        if (a[i] != b[i]) atomicMin(first, i);
}
"""


# The evaluator's tolerance check on the device, exactly the host's `compare` in float32: per
# element, NaN where the reference has none, Inf where the reference is finite, infinities of the
# wrong sign, and |out - ref| / (atol + rtol |ref|) with each operation rounded as numpy rounds it
# (no contraction into FMA), its maximum and how many exceed 1. Counts and first indices come back
# in one 64-byte read; a failure is then described by the host from the downloaded output.
_CLOSE_SRC = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
__device__ __forceinline__ float kt_load(const float *p, unsigned long long i) { return p[i]; }
__device__ __forceinline__ float kt_load(const __half *p, unsigned long long i) { return __half2float(p[i]); }
__device__ __forceinline__ float kt_load(const __nv_bfloat16 *p, unsigned long long i) { return __bfloat162float(p[i]); }

template <typename T>
__device__ void kt_close(const T *out, const float *ref, unsigned long long n, float rtol, float atol,
                         unsigned long long *res)
{
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    float w = 0.0f;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float o = kt_load(out, i), r = ref[i];
        const bool rn = isnan(r), ri = isinf(r), on = isnan(o), oi = isinf(o);
        if (on && !rn) { atomicAdd(&res[0], 1ULL); atomicMin(&res[4], i); }
        if (oi && !ri && !rn) { atomicAdd(&res[1], 1ULL); atomicMin(&res[5], i); }
        if ((oi && ri && (signbit(o) != signbit(r))) || (!oi && ri && !on)) atomicAdd(&res[2], 1ULL);
        if (!(rn || ri || on || oi)) {
            const float tol = __fadd_rn(atol, __fmul_rn(rtol, fabsf(r)));
            float ratio = __fdiv_rn(fabsf(__fsub_rn(o, r)), tol);
            if (ratio != ratio) ratio = 0.0f;  /* 0 / 0: equal where the tolerance is zero */
            if (ratio > 1.0f) atomicAdd(&res[3], 1ULL);
            w = fmaxf(w, ratio);
        }
    }
    for (int s = 16; s > 0; s >>= 1) w = fmaxf(w, __shfl_xor_sync(0xffffffffu, w, s));
    if ((threadIdx.x & 31) == 0) atomicMax((unsigned int *)&res[6], __float_as_uint(w));
}

extern "C" __global__ void kerntune_close_float32(const float *o, const float *r, unsigned long long n,
                                                  float rtol, float atol, unsigned long long *res)
{ kt_close(o, r, n, rtol, atol, res); }
extern "C" __global__ void kerntune_close_float16(const __half *o, const float *r, unsigned long long n,
                                                  float rtol, float atol, unsigned long long *res)
{ kt_close(o, r, n, rtol, atol, res); }
extern "C" __global__ void kerntune_close_bfloat16(const __nv_bfloat16 *o, const float *r, unsigned long long n,
                                                   float rtol, float atol, unsigned long long *res)
{ kt_close(o, r, n, rtol, atol, res); }
"""
CLOSE_DTYPES = ("float32", "float16", "bfloat16")
_NO_INDEX = np.iinfo(np.uint64).max


# the device (pycuda) ---------------------------------------------------------------------------

def _require() -> None:
    if drv is None:
        raise BackendError(f"pycuda is not available ({_IMPORT_ERROR}); pip install 'kerntune[cuda]'")
    try:
        drv.init()
    except Exception as e:  # pycuda raises its own RuntimeError when no driver or device
        raise BackendError(f"CUDA cannot start: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None


def _devices() -> list[Any]:
    _require()
    try:
        return [drv.Device(i) for i in range(drv.Device.count())]
    except drv.Error as e:
        raise BackendError(f"cannot list CUDA devices: {str(e).splitlines()[0]}") from None


def _attr(dev: Any, name: str, default: int = 0) -> int:
    # Older pycuda builds lack some attribute names; a missing one reads as unknown (0).
    which = getattr(drv.device_attribute, name, None)
    if which is None:
        return default
    try:
        return int(dev.get_attribute(which))
    except (drv.Error, TypeError, ValueError):
        return default


def _limits(dev: Any) -> DeviceLimits:
    major, minor = dev.compute_capability()
    try:
        v = drv.get_driver_version()
        driver = f"CUDA {v // 1000}.{(v % 1000) // 10}"
    except drv.Error:
        driver = ""
    shared_block = _attr(dev, "MAX_SHARED_MEMORY_PER_BLOCK", DEFAULT_SHARED_LIMIT)
    extra: dict[str, Any] = {
        "reserved_shared_per_block": _attr(dev, "RESERVED_SHARED_MEMORY_PER_BLOCK",
                                           1024 if major >= 8 else 0),
    }
    try:
        extra["pci_bus_id"] = dev.pci_bus_id()
    except (drv.Error, AttributeError):
        pass
    return DeviceLimits(
        backend="cuda",
        name=dev.name().strip(),
        vendor="NVIDIA",
        compute_capability=f"{major}.{minor}",
        driver=driver,
        max_threads_per_block=_attr(dev, "MAX_THREADS_PER_BLOCK", 1024),
        max_block_dims=(_attr(dev, "MAX_BLOCK_DIM_X", 1024), _attr(dev, "MAX_BLOCK_DIM_Y", 1024),
                        _attr(dev, "MAX_BLOCK_DIM_Z", 64)),
        max_grid_dims=(_attr(dev, "MAX_GRID_DIM_X", 2**31 - 1), _attr(dev, "MAX_GRID_DIM_Y", 65535),
                       _attr(dev, "MAX_GRID_DIM_Z", 65535)),
        max_shared_per_block=shared_block,
        max_shared_per_block_optin=_attr(dev, "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN", shared_block),
        max_shared_per_sm=_attr(dev, "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR"),
        max_threads_per_sm=_attr(dev, "MAX_THREADS_PER_MULTIPROCESSOR"),
        max_blocks_per_sm=_attr(dev, "MAX_BLOCKS_PER_MULTIPROCESSOR"),
        max_regs_per_block=_attr(dev, "MAX_REGISTERS_PER_BLOCK"),
        max_regs_per_sm=_attr(dev, "MAX_REGISTERS_PER_MULTIPROCESSOR"),
        max_cluster_blocks=8 if major >= 9 else 1,
        sm_count=_attr(dev, "MULTIPROCESSOR_COUNT", 1),
        warp_size=_attr(dev, "WARP_SIZE", 32),
        l2_bytes=_attr(dev, "L2_CACHE_SIZE"),
        global_mem_bytes=int(dev.total_memory()),
        clock_mhz=_attr(dev, "CLOCK_RATE") // 1000,  # the driver reports kHz
        memory_clock_mhz=_attr(dev, "MEMORY_CLOCK_RATE") // 1000,
        memory_bus_width=_attr(dev, "GLOBAL_MEMORY_BUS_WIDTH"),
        extra=extra,
    )


def list_devices() -> list[DeviceInfo]:
    return [DeviceInfo("cuda", i, _limits(d)) for i, d in enumerate(_devices())]


def device_count() -> int:
    return count_devices(_devices)


def open(device: int = 0) -> "CUDABackend":
    return CUDABackend(chosen_device(_devices(), device, "CUDA"))


# What a launch can raise for arguments the driver refuses: pycuda's own errors, Python's
# conversions, and C++ exceptions Boost.Python passes on as RuntimeError ("std::bad_cast" for a
# value that does not fit its C type, a negative size among them).
LAUNCH_ERRORS = (*((drv.Error,) if drv is not None else ()), TypeError, ValueError, OverflowError, RuntimeError)


def _one_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _pack(args: Sequence[Any]) -> Any:
    """The launch's argument buffer, as pycuda's own call packs it: numpy scalars by value, device
    allocations as addresses. None for anything else (the launch then goes through pycuda's call)."""
    from pycuda._pvt_struct import pack

    fmt, data = "", []
    for a in args:
        if isinstance(a, np.number):
            fmt += a.dtype.char
            data.append(a)
        elif isinstance(a, drv.DeviceAllocation):
            fmt += "P"
            data.append(int(a))
        else:
            return None
    return pack(fmt, *data)


@dataclass(eq=False)
class CUDAKernel:
    """A loaded kernel: the pycuda function, its module (kept alive with it) and ptxas figures."""

    function: Any
    module: Any
    entry: str
    ptxas: Mapping[str, int] = field(default_factory=dict)
    cached: bool = False  # the cubin came from the compile cache
    static_shared: int = 0
    dynamic_shared_limit: int = 0  # what MAX_DYNAMIC_SHARED_SIZE_BYTES was last set to


class CUDABackend:
    """Compile, launch and time CUDA kernels on one device, in its primary context."""

    name = "cuda"
    capabilities = Capabilities(build=True, first_differences=True, compare_close=True, warm=True)

    def __init__(self, dev: Any):
        self.device = dev
        self.limits = _limits(dev)
        major, minor = dev.compute_capability()
        self.arch = device_arch(f"{major}.{minor}")
        try:
            self.ctx = dev.retain_primary_context()
            self.ctx.push()
        except drv.Error as e:
            raise BackendError(f"cannot open a context on {self.limits.name}: {_one_line(e)}") from None
        self._flush_bytes = max(2 * self.limits.l2_bytes, 4 * 2**20)
        self._flush_buf = None
        self._flush_count = 0
        self._differ: CUDAKernel | None = None
        self._differ_out = None
        self._differ_slots = 0  # answers _differ_out has room for
        self._close: dict[str, CUDAKernel] = {}
        self._close_out = None
        self._close_start = None  # _close_init on the device, copied to _close_out before each check
        self._close_init = np.array([0, 0, 0, 0, _NO_INDEX, _NO_INDEX, 0, 0], dtype=np.uint64)
        self._events: list[Any] = []  # timing events, reused once read
        self._symbols: dict[str, str] = {}  # entry -> the cubin symbol it resolved to
        self._argbuf: tuple[Any, Any] | None = None  # (args, packed) of the latest timed launches
        self._split: tuple[Any, Any] | None = None  # (args, args without constant-memory inputs)

    # compile -----------------------------------------------------------------------------------
    def compile(self, source: str, entry: str, defines: Mapping[str, str],
                options: Sequence[str] = ()) -> CUDAKernel:
        return self.load(*self.build(source, entry, defines, options))

    def build(self, source: str, entry: str, defines: Mapping[str, str],
              options: Sequence[str] = ()) -> tuple[bytes, str, Mapping[str, int], bool]:
        """Compile without loading: needs no CUDA context, so another thread may do it;
        `load(*built)` loads the result."""
        cubin, info, cached = compile_cubin(source, entry, defines, options, self.arch)
        return cubin, entry, info, cached

    def load(self, cubin: bytes, entry: str, ptxas: Mapping[str, int] | None = None,
             cached: bool = False) -> CUDAKernel:
        """Load a cubin built elsewhere (the compile pool) and find its kernel."""
        try:
            module = drv.module_from_buffer(cubin)
        except drv.Error as e:
            raise CompileError(f"cannot load the cubin: {_one_line(e)}") from None
        # The symbol found for this entry last time is tried first: reading the cubin's symbol
        # table (pure Python) costs milliseconds, and configurations of one template share it.
        symbol = self._symbols.get(entry)
        function = None
        if symbol is not None:
            try:
                function = module.get_function(symbol)
            except drv.Error:
                function = None
        if function is None:
            symbol = resolve_entry(cubin, entry).symbol  # a C++ kernel by its mangled name
            try:
                function = module.get_function(symbol)
            except drv.Error as e:
                raise CompileError(f"cannot load kernel {entry!r} ({symbol}): {_one_line(e)}") from None
            self._symbols[entry] = symbol
        try:
            static = int(function.get_attribute(drv.function_attribute.SHARED_SIZE_BYTES))
        except drv.Error:
            static = 0
        return CUDAKernel(function, module, entry, dict(ptxas or {}), cached, static)

    def resources(self, kernel: CUDAKernel) -> Resources:
        fa = drv.function_attribute
        f = kernel.function
        try:
            return Resources(
                registers=int(f.get_attribute(fa.NUM_REGS)),
                shared_static=int(f.get_attribute(fa.SHARED_SIZE_BYTES)),
                local_bytes=int(f.get_attribute(fa.LOCAL_SIZE_BYTES)),
                max_threads=int(f.get_attribute(fa.MAX_THREADS_PER_BLOCK)),
                # bytes spilled and reloaded per thread, as ptxas counts them
                spills=int(kernel.ptxas.get("spill_stores", 0)) + int(kernel.ptxas.get("spill_loads", 0)),
            )
        except drv.Error:
            return Resources()

    def launch_limit(self, kernel: CUDAKernel) -> int:
        try:
            return int(kernel.function.get_attribute(drv.function_attribute.MAX_THREADS_PER_BLOCK))
        except drv.Error:
            return self.limits.max_threads_per_block

    # memory ------------------------------------------------------------------------------------
    def alloc(self, nbytes: int) -> Any:
        try:
            return drv.mem_alloc(max(int(nbytes), 1))
        except drv.Error as e:
            raise LaunchError(f"cannot allocate {nbytes} bytes: {_one_line(e)}") from None

    def view(self, buffer: Any, offset: int, nbytes: int) -> Any:
        # a device pointer is passed to a kernel as an 8-byte integer
        return np.uintp(int(buffer) + int(offset))

    def copy(self, dst: Any, src: Any, nbytes: int, dst_offset: int = 0, src_offset: int = 0,
             wait: bool = True) -> None:
        if nbytes <= 0:
            return
        try:
            d, s = int(dst) + int(dst_offset), int(src) + int(src_offset)
            if wait:
                drv.memcpy_dtod(d, s, int(nbytes))
            else:
                drv.memcpy_dtod_async(d, s, int(nbytes))
        except drv.Error as e:
            raise LaunchError(f"device copy failed: {_one_line(e)}") from None

    def fill(self, buffer: Any, byte: int, nbytes: int, offset: int = 0, wait: bool = True) -> None:
        if nbytes <= 0:
            return
        try:
            where = int(buffer) + int(offset)
            if wait:
                drv.memset_d8(where, int(byte) & 0xFF, int(nbytes))
            else:
                drv.memset_d8_async(where, int(byte) & 0xFF, int(nbytes))
        except drv.Error as e:
            raise LaunchError(f"device fill failed: {_one_line(e)}") from None

    def warm(self) -> None:
        """Build the engine's own kernels (the comparisons) now, which also loads the compiler: a
        worker started ahead of its run does this while it waits (engine/standby.py)."""
        if self._differ is None:
            self._differ = self.compile(_DIFFER_SRC, "kerntune_first_difference", {})
        for dtype in CLOSE_DTYPES:
            if dtype not in self._close:
                self._close[dtype] = self.compile(_CLOSE_SRC, f"kerntune_close_{dtype}", {})

    def first_difference(self, a: Any, a_offset: int, b: Any, b_offset: int, nbytes: int) -> int:
        return self.first_differences([(a, a_offset, b, b_offset, nbytes)])[0]

    def first_differences(self, pairs: Sequence[tuple[Any, int, Any, int, int]]) -> list[int]:
        """first_difference of several pairs of ranges: one comparison launch each, queued,
        and one read of all the answers (one wait for the device, not one a pair)."""
        if not pairs:
            return []
        if self._differ is None:
            self._differ = self.compile(_DIFFER_SRC, "kerntune_first_difference", {})
        if self._differ_slots < len(pairs):
            self._differ_slots = max(len(pairs), 2 * self._differ_slots, 16)
            self._differ_out = self.alloc(8 * self._differ_slots)
        found = np.empty(len(pairs), dtype=np.uint64)
        out = int(self._differ_out)
        self.fill(out, 0xFF, 8 * len(pairs), wait=False)  # the largest index: no difference
        try:
            for k, (a, a_offset, b, b_offset, nbytes) in enumerate(pairs):
                if nbytes <= 0:
                    continue
                blocks = min(4 * self.limits.sm_count * 8, max(1, -(-int(nbytes) // (256 * 16))))
                self._differ.function(np.uintp(int(a) + int(a_offset)), np.uintp(int(b) + int(b_offset)),
                                      np.uint64(nbytes), np.uintp(out + 8 * k), block=(256, 1, 1), grid=(blocks, 1, 1))
        except drv.Error as e:
            raise LaunchError(f"device comparison failed: {_one_line(e)}") from None
        self.download(out, found)
        return [-1 if int(f) >= int(p[4]) else int(f) for f, p in zip(found, pairs)]

    def compare_close(self, out: Any, out_offset: int, ref: Any, n: int, dtype: str, rtol: float,
                      atol: float) -> tuple[int, int, int, int, int, int, float]:
        """The tolerance check of `n` elements of `out` (a float32, float16 or bfloat16 output)
        against `ref` (float32) on the device: (NaN where the reference has none, Inf where it is
        finite, wrong-sign infinities, elements outside the tolerance, first NaN, first Inf,
        worst error as a fraction of the tolerance); first indices are -1 when there is none."""
        if dtype not in CLOSE_DTYPES:
            raise ValueError(f"no device comparison for {dtype}")
        if dtype not in self._close:
            self._close[dtype] = self.compile(_CLOSE_SRC, f"kerntune_close_{dtype}", {})
        if self._close_out is None:
            self._close_out = self.alloc(self._close_init.nbytes)
            self._close_start = self.alloc(self._close_init.nbytes)
            self.upload(self._close_start, self._close_init)
        res = self._close_init.copy()
        self.copy(self._close_out, self._close_start, self._close_init.nbytes, wait=False)  # queued: no wait
        threads = 256
        blocks = min(8 * self.limits.sm_count or 1024, max(1, -(-int(n) // threads)))
        if n > 0:
            try:
                self._close[dtype].function(np.uintp(int(out) + int(out_offset)), np.uintp(int(ref)), np.uint64(n),
                                            np.float32(rtol), np.float32(atol), self._close_out,
                                            block=(threads, 1, 1), grid=(blocks, 1, 1))
            except drv.Error as e:
                raise LaunchError(f"device comparison failed: {_one_line(e)}") from None
        self.download(self._close_out, res)
        firsts = [-1 if int(v) == int(_NO_INDEX) else int(v) for v in res[4:6]]
        worst = float(np.array([res[6] & 0xFFFFFFFF], dtype=np.uint32).view(np.float32)[0])
        return int(res[0]), int(res[1]), int(res[2]), int(res[3]), firsts[0], firsts[1], worst

    def upload(self, buffer: Any, array: np.ndarray, offset: int = 0) -> None:
        try:
            drv.memcpy_htod(int(buffer) + int(offset), np.ascontiguousarray(array))
        except drv.Error as e:
            raise LaunchError(f"upload failed: {_one_line(e)}") from None

    def download(self, buffer: Any, array: np.ndarray, offset: int = 0) -> None:
        try:
            drv.memcpy_dtoh(array, int(buffer) + int(offset))
        except drv.Error as e:
            raise LaunchError(f"download failed: {_one_line(e)}") from None

    # run ---------------------------------------------------------------------------------------
    def _constants(self, kernel: CUDAKernel, args: Sequence[Any]) -> Sequence[Any]:
        """The launch's arguments with its constant-memory inputs taken out, each copied into the
        module's `__constant__` variable of its name first (cuModuleGetGlobal, then a copy)."""
        if not any(isinstance(a, ConstantArg) for a in args):
            return args
        for a in args:
            if isinstance(a, ConstantArg):
                ptr, size = self._global(kernel, a.name)
                if a.nbytes > size:
                    raise LaunchError(f"`{a.name}` holds {a.nbytes} bytes; the kernel's __constant__ {a.name} "
                                      f"has room for {size}")
                drv.memcpy_dtod(ptr, int(a.buffer), a.nbytes)
        if self._split is None or self._split[0] is not args:
            self._split = (args, [a for a in args if not isinstance(a, ConstantArg)])
        return self._split[1]

    def _global(self, kernel: CUDAKernel, name: str) -> tuple[Any, int]:
        """A `__constant__` variable of the kernel's module by its name as written (`ns::table`
        by its mangled symbol)."""
        parts = name.split("::")
        symbol = name if len(parts) == 1 else "_ZN" + "".join(f"{len(p)}{p}" for p in parts) + "E"
        try:
            return kernel.module.get_global(symbol)
        except drv.Error as e:
            raise LaunchError(f"the kernel's module has no __constant__ variable {name!r}: {_one_line(e)}") from None

    def _enqueue(self, kernel: CUDAKernel, geo: Geometry, args: Sequence[Any]) -> None:
        try:
            args = self._constants(kernel, args)
            self._allow_shared(kernel, geo.shared_bytes)
            kernel.function(*args, block=tuple(geo.block), grid=tuple(geo.grid),
                            shared=int(geo.shared_bytes))
        except LAUNCH_ERRORS as e:
            raise LaunchError(_one_line(e)) from None

    def _allow_shared(self, kernel: CUDAKernel, shared: int) -> None:
        # Without the opt-in a block gets at most 48 KiB of shared memory, static and dynamic
        # together; more needs the function's dynamic limit raised first.
        if shared <= kernel.dynamic_shared_limit:
            return
        if kernel.static_shared + shared > self.limits.max_shared_per_block:
            kernel.function.set_attribute(drv.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, shared)
            kernel.dynamic_shared_limit = shared

    def launch(self, kernel: CUDAKernel, geo: Geometry, args: Sequence[Any]) -> None:
        self._enqueue(kernel, geo, args)
        try:
            drv.Context.synchronize()
        except drv.Error as e:
            raise LaunchError(_one_line(e)) from None

    def flush_bytes(self) -> int:
        return self._flush_bytes

    def _flush(self) -> None:
        if self._flush_buf is None:
            self._flush_buf = self.alloc(self._flush_bytes)
        # a new value each time, so no run is served by memory that already holds it
        self._flush_count = (self._flush_count + 1) % 256
        drv.memset_d8_async(self._flush_buf, self._flush_count, self._flush_bytes)

    def timed(self, kernel: CUDAKernel, geo: Geometry, args: Sequence[Any], flush: bool) -> Any:
        """Queue one timed launch (after a flush); the token `elapsed` reads. Events are reused and
        the argument list is packed once for a run of launches with the same list, so a timed
        launch costs the host a few microseconds."""
        try:
            if flush:
                self._flush()
            args = self._constants(kernel, args)
            start, end = self._events.pop() if self._events else (drv.Event(), drv.Event())
            start.record()
            if self._argbuf is None or self._argbuf[0] is not args:
                self._argbuf = (args, _pack(args))
            if self._argbuf[1] is None:
                self._enqueue(kernel, geo, args)
            else:
                self._allow_shared(kernel, geo.shared_bytes)
                kernel.function._launch_kernel(tuple(geo.grid), tuple(geo.block), self._argbuf[1],
                                               int(geo.shared_bytes), None)
            end.record()
            return start, end
        except LAUNCH_ERRORS as e:
            raise LaunchError(_one_line(e)) from None

    def elapsed(self, tokens: Sequence[Any]) -> list[float]:
        try:
            drv.Context.synchronize()
            times = [start.time_till(end) * 1000.0 for start, end in tokens]
        except drv.Error as e:
            raise LaunchError(_one_line(e)) from None
        if len(self._events) < 1024:
            self._events.extend(tokens)
        return times

    def time(self, kernel: CUDAKernel, geo: Geometry, args: Sequence[Any], repeats: int,
             flush: bool) -> list[float]:
        return self.elapsed([self.timed(kernel, geo, args, flush) for _ in range(repeats)])

    def close(self) -> None:
        """Free the flush buffer and leave the context. Free your own buffers first."""
        if self.ctx is None:
            return
        try:
            drv.Context.synchronize()
        except drv.Error:
            pass
        if self._flush_buf is not None:
            try:
                self._flush_buf.free()
            except drv.Error:
                pass
            self._flush_buf = None
        try:
            self.ctx.pop()
            # releases the primary-context reference that retain_primary_context took
            self.ctx.detach()
        except drv.Error:
            pass
        self.ctx = None
