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
from . import BackendError, CompileError, DeviceInfo, LaunchError
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
    first_errors, normalize_arch, nvcc_version, nvrtc_version, parse_ptxas,  # noqa: F401
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
    try:
        return len(_devices())
    except BackendError:
        return 0


def open(device: int = 0) -> "CUDABackend":
    devs = _devices()
    if not devs:
        raise BackendError("no CUDA device found")
    if not 0 <= device < len(devs):
        raise BackendError(f"CUDA device {device} does not exist ({len(devs)} found)")
    return CUDABackend(devs[device])


def _one_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


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

    def __init__(self, dev: Any):
        self.device = dev
        self.limits = _limits(dev)
        major, minor = dev.compute_capability()
        self.arch = f"sm_{major}{minor}"
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

    # compile -----------------------------------------------------------------------------------
    def compile(self, source: str, entry: str, defines: Mapping[str, str],
                options: Sequence[str] = ()) -> CUDAKernel:
        cubin, info, cached = compile_cubin(source, entry, defines, options, self.arch)
        return self.load(cubin, entry, info, cached)

    def load(self, cubin: bytes, entry: str, ptxas: Mapping[str, int] | None = None,
             cached: bool = False) -> CUDAKernel:
        """Load a cubin built elsewhere (the compile pool) and find its kernel."""
        try:
            module = drv.module_from_buffer(cubin)
        except drv.Error as e:
            raise CompileError(f"cannot load the cubin: {_one_line(e)}") from None
        symbol = resolve_entry(cubin, entry).symbol  # a C++ kernel by its mangled name
        try:
            function = module.get_function(symbol)
        except drv.Error as e:
            raise CompileError(f"cannot load kernel {entry!r} ({symbol}): {_one_line(e)}") from None
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

    def first_difference(self, a: Any, a_offset: int, b: Any, b_offset: int, nbytes: int) -> int:
        if nbytes <= 0:
            return -1
        if self._differ is None:
            self._differ = self.compile(_DIFFER_SRC, "kerntune_first_difference", {})
            self._differ_out = self.alloc(8)
        found = np.array([np.iinfo(np.uint64).max], dtype=np.uint64)
        self.upload(self._differ_out, found)
        threads, blocks = 256, min(4 * self.limits.sm_count * 8, max(1, -(-int(nbytes) // (256 * 16))))
        try:
            self._differ.function(np.uintp(int(a) + int(a_offset)), np.uintp(int(b) + int(b_offset)),
                                  np.uint64(nbytes), self._differ_out, block=(threads, 1, 1), grid=(blocks, 1, 1))
        except drv.Error as e:
            raise LaunchError(f"device comparison failed: {_one_line(e)}") from None
        self.download(self._differ_out, found)
        first = int(found[0])
        return -1 if first >= nbytes else first

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
    def _enqueue(self, kernel: CUDAKernel, geo: Geometry, args: Sequence[Any]) -> None:
        try:
            self._allow_shared(kernel, geo.shared_bytes)
            kernel.function(*args, block=tuple(geo.block), grid=tuple(geo.grid),
                            shared=int(geo.shared_bytes))
        except (drv.Error, TypeError, ValueError) as e:
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
        try:
            if flush:
                self._flush()
            start, end = drv.Event(), drv.Event()
            start.record()
            self._enqueue(kernel, geo, args)
            end.record()
            return start, end
        except drv.Error as e:
            raise LaunchError(_one_line(e)) from None

    def elapsed(self, tokens: Sequence[Any]) -> list[float]:
        try:
            drv.Context.synchronize()
            return [start.time_till(end) * 1000.0 for start, end in tokens]
        except drv.Error as e:
            raise LaunchError(_one_line(e)) from None

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
