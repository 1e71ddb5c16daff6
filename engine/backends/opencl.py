"""The OpenCL backend, through pyopencl. PoCL runs it on any CPU, which is how machines without a
GPU run the whole pipeline for real: compile, verify, time."""

from __future__ import annotations

import warnings
from typing import Any, Mapping, Sequence

import numpy as np

from ..device import DeviceLimits
from ..result import Resources
from ..signature import SignatureError, parse_kernels
from ..space import Geometry
from . import BackendError, Capabilities, CompileError, ConstantArg, chosen_device, count_devices, compile_message, DeviceInfo, LaunchError
from .host_memory import HostMemoryError, fenced, uses_host_memory
from .opencl_check import DeviceCheck, build_failure, build_log, checks_for

try:
    import pyopencl as cl
except ImportError:  # pragma: no cover - depends on the machine
    cl = None

# A CPU's last-level cache can be hundreds of MiB; writing twice that between every timed run
# would cost more than the kernels. The flush is capped there, and the evaluator knows from
# `cold_cache` whether the cap left part of the cache warm.
CPU_FLUSH_CAP = 64 * 2**20
GPU_FLUSH_CAP = 1024 * 2**20

_FLUSH_SRC = """
__kernel void kerntune_flush(__global int4 *buf, int value) {
    buf[get_global_id(0)] = (int4)(value, value + 1, value + 2, value + 3);
}
"""


def _require() -> None:
    if cl is None:
        raise BackendError("pyopencl is not installed (pip install 'kerntune[opencl]')")


# What to install where no OpenCL device can build a kernel.
INSTALL_HINT = ("install an OpenCL CPU runtime that builds on this processor: the distribution's PoCL "
                "(Debian/Ubuntu: apt-get install pocl-opencl-icd; `kerntune setup` does it as root)")


def _all_devices() -> list[Any]:
    """Every device of every platform, in the order the ICD loader lists them."""
    _require()
    try:
        platforms = cl.get_platforms()
    except cl.Error as e:
        raise BackendError(f"no OpenCL platform: {str(e).splitlines()[0]}; {INSTALL_HINT}") from None
    out = []
    for p in platforms:
        try:
            out += p.get_devices()
        except cl.Error:
            continue
    return out


def checked_devices() -> list[tuple[Any, DeviceCheck]]:
    """Every device with its check, in the order kerntune prefers them: the devices that build
    first, GPUs before the rest, a device without a known runtime defect before one with, then in
    the ICD loader's order; the devices that cannot build last."""
    devices = _all_devices()
    checks = checks_for(devices)
    order = sorted(range(len(devices)), key=lambda i: (
        not checks[i].builds, not devices[i].type & cl.device_type.GPU, len(checks[i].defects), i))
    return [(devices[i], checks[i]) for i in order]


def _devices() -> list[Any]:
    """The devices kerntune may use, best first (see checked_devices)."""
    return [d for d, c in checked_devices() if c.builds]


def unusable_devices() -> list[DeviceCheck]:
    """The devices that failed their check, each with its reason."""
    return [c for _, c in checked_devices() if not c.builds]


def _limits(dev: Any, defects: tuple[str, ...] = ()) -> DeviceLimits:
    is_cpu = bool(dev.type & cl.device_type.CPU)
    dims = tuple(dev.max_work_item_sizes) + (1, 1, 1)
    cache = int(dev.global_mem_cache_size or 0)
    return DeviceLimits(
        backend="opencl",
        name=dev.name.strip(),
        vendor=dev.vendor.strip(),
        compute_capability="",
        driver=f"{dev.platform.name.strip()} {dev.driver_version.strip()}",
        max_threads_per_block=int(dev.max_work_group_size),
        max_block_dims=(int(dims[0]), int(dims[1]), int(dims[2])),
        max_grid_dims=(2**31 - 1, 2**31 - 1, 2**31 - 1),
        max_shared_per_block=int(dev.local_mem_size),
        max_shared_per_block_optin=int(dev.local_mem_size),
        sm_count=int(dev.max_compute_units),
        warp_size=1 if is_cpu else 32,
        l2_bytes=cache,
        global_mem_bytes=int(dev.global_mem_size),
        clock_mhz=int(dev.max_clock_frequency or 0),
        extra={"device_type": "cpu" if is_cpu else "gpu", "version": dev.version.strip(),
               **({"defects": list(defects)} if defects else {})},
    )


def list_devices() -> list[DeviceInfo]:
    usable = _usable()
    return [DeviceInfo("opencl", i, _limits(d, c.defects)) for i, (d, c) in enumerate(usable)]


def device_count() -> int:
    return count_devices(_devices)


def _usable() -> list[tuple[Any, DeviceCheck]]:
    """The devices that build, with their checks, best first; BackendError, saying what to install,
    when there are devices and none builds."""
    checked = checked_devices()
    usable = [(d, c) for d, c in checked if c.builds]
    if not usable and checked:
        first = checked[0][1]
        raise BackendError(f"no OpenCL device can build a kernel ({first.label}: {first.reason}); {INSTALL_HINT}")
    return usable


def open(device: int = 0) -> "OpenCLBackend":
    usable = _usable()
    dev = chosen_device([d for d, _ in usable], device, "OpenCL", f"; {INSTALL_HINT}")
    return OpenCLBackend(dev, next(c for d, c in usable if d is dev).defects)


def find_kernel(program: Any, entry: str) -> Any:
    """The kernel `entry` names, by the program's own list of kernels. (Not getattr: a kernel
    called `build` or `get_info` would be the Program's method of that name.)"""
    try:
        names = [n for n in program.get_info(cl.program_info.KERNEL_NAMES).split(";") if n]
    except cl.Error:
        names = []
    plain = entry.split("<")[0].split("::")[-1].strip()  # a CUDA twin's `ns::k<float>`: OpenCL's `k`
    if entry not in names and plain in names:
        entry = plain
    if entry not in names:
        raise CompileError(f"the program has no kernel named {entry!r}"
                           + (f"; it has {', '.join(names)}" if names else ""))
    try:
        return cl.Kernel(program, entry)
    except cl.Error as e:
        raise CompileError(f"cannot create kernel {entry!r}: {str(e).strip().splitlines()[0]}") from None


def local_arguments(source: str, entry: str, defines: Mapping[str, str] | None = None) -> tuple[int, ...] | None:
    """The positions of the kernel's `__local` pointer arguments (the dynamic local memory the
    spec's `launch.shared_bytes` sizes), read from its signature; None when it cannot be read."""
    try:
        kernels = parse_kernels(source, defines)
    except SignatureError:
        return None
    name = entry.split("<")[0].split("::")[-1]
    sig = next((k for k in kernels if k.name == name), None)
    return tuple(i for i, a in enumerate(sig.args) if a.local) if sig is not None else None


class OpenCLBackend:
    """Compile, launch and time OpenCL kernels on one device."""

    name = "opencl"
    capabilities = Capabilities()  # none of the optional methods

    def __init__(self, dev: Any, defects: tuple[str, ...] = ()):
        self.device = dev
        self.limits = _limits(dev, defects)
        self.ctx = cl.Context([dev])
        self.queue = cl.CommandQueue(self.ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
        cap = CPU_FLUSH_CAP if self.limits.extra.get("device_type") == "cpu" else GPU_FLUSH_CAP
        want = max(2 * self.limits.l2_bytes, 4 * 2**20)
        self._flush_bytes = min(want, cap, int(dev.max_mem_alloc_size)) // 16 * 16
        self._flush_buf = None
        self._flush_kernel = None
        self._flush_count = 0
        self._local_args: dict[int, tuple[int, ...] | None] = {}  # kernel -> positions of its `__local` pointers
        # On a CPU device every buffer is host memory of its own inside unmapped address space
        # (engine/backends/host_memory.py): a write far past a buffer faults instead of landing in
        # the worker's memory (`fenced`). On a CPU device where the runtime does not use such memory
        # as it is, `unfenced` says so.
        self.fenced, self.unfenced = False, ""
        if self.limits.extra.get("device_type") == "cpu":
            self.unfenced = self._fence_check()
            self.fenced = not self.unfenced

    def _fence_check(self) -> str:
        """"" when the runtime uses the host memory a buffer is given as it is, else why not."""
        def over(host: np.ndarray) -> Any:
            return cl.Buffer(self.ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.USE_HOST_PTR, hostbuf=host)

        def write(buf: Any, byte: int) -> None:
            cl.enqueue_fill_buffer(self.queue, buf, np.uint8(byte), 0, buf.size).wait()

        def read(buf: Any) -> np.ndarray:
            out = np.empty(buf.size, dtype=np.uint8)
            cl.enqueue_copy(self.queue, out, buf, is_blocking=True)
            return out

        try:
            return uses_host_memory(write, read, over)
        except (HostMemoryError, cl.Error) as e:
            return f"its buffers cannot be placed in host memory of their own: {str(e).splitlines()[0]}"

    def _finished(self) -> None:
        self.queue.finish()

    # compile -----------------------------------------------------------------------------------
    def compile(self, source: str, entry: str, defines: Mapping[str, str],
                options: Sequence[str] = ()) -> Any:
        opts = [f"-D{k}={v}" for k, v in defines.items()] + list(options)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # pyopencl warns on any compiler output
                program = cl.Program(self.ctx, source).build(options=opts)
        except cl.Error as e:
            raise CompileError(compile_message(build_failure(str(e), limit=3), "\n".join(build_log(str(e))))) from None
        kernel = find_kernel(program, entry)
        self._local_args[kernel.int_ptr] = local_arguments(source, entry, defines)
        return kernel

    def resources(self, kernel: Any) -> Resources:
        info = cl.kernel_work_group_info
        try:
            local = int(kernel.get_work_group_info(info.LOCAL_MEM_SIZE, self.device))
            private = int(kernel.get_work_group_info(info.PRIVATE_MEM_SIZE, self.device))
            wg = int(kernel.get_work_group_info(info.WORK_GROUP_SIZE, self.device))
        except cl.Error:
            return Resources()
        return Resources(registers=0, shared_static=local, local_bytes=private, max_threads=wg)

    def launch_limit(self, kernel: Any) -> int:
        try:
            return int(kernel.get_work_group_info(cl.kernel_work_group_info.WORK_GROUP_SIZE, self.device))
        except cl.Error:
            return self.limits.max_threads_per_block

    # memory ------------------------------------------------------------------------------------
    def alloc(self, nbytes: int) -> Any:
        size = max(int(nbytes), 1)
        try:
            if self.fenced:  # the runtime uses this memory as it is (checked when the device opened)
                try:
                    host = fenced(size, self._finished)[:size]
                except HostMemoryError as e:  # a limit on the process's address space, say
                    self.unfenced = f"the address space for fenced buffers ran out ({e}); the rest are the runtime's own"
                else:
                    return cl.Buffer(self.ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.USE_HOST_PTR, hostbuf=host)
            return cl.Buffer(self.ctx, cl.mem_flags.READ_WRITE, size)
        except cl.Error as e:
            raise LaunchError(f"cannot allocate {nbytes} bytes: {e}") from None

    def view(self, buffer: Any, offset: int, nbytes: int) -> Any:
        try:
            sub = buffer.get_sub_region(int(offset), max(int(nbytes), 1))
        except cl.Error as e:
            raise LaunchError(f"cannot make a view of {nbytes} bytes at {offset}: {e}") from None
        sub.whole = buffer  # the whole buffer, and the host memory under it, live as long as a view
        return sub

    def copy(self, dst: Any, src: Any, nbytes: int, dst_offset: int = 0, src_offset: int = 0,
             wait: bool = True) -> None:
        if nbytes <= 0:
            return
        try:
            ev = cl.enqueue_copy(self.queue, dst, src, byte_count=int(nbytes),
                                 dst_offset=int(dst_offset), src_offset=int(src_offset))
            if wait:
                ev.wait()
        except cl.Error as e:
            raise LaunchError(f"device copy failed: {e}") from None

    def fill(self, buffer: Any, byte: int, nbytes: int, offset: int = 0, wait: bool = True) -> None:
        if nbytes <= 0:
            return
        try:
            ev = cl.enqueue_fill_buffer(self.queue, buffer, np.uint8(byte & 0xFF), int(offset), int(nbytes))
            if wait:
                ev.wait()
        except cl.Error as e:
            raise LaunchError(f"device fill failed: {e}") from None

    def first_difference(self, a: Any, a_offset: int, b: Any, b_offset: int, nbytes: int) -> int:
        # on a CPU device the host is the device: two copies and a comparison in numpy
        x, y = np.empty(nbytes, dtype=np.uint8), np.empty(nbytes, dtype=np.uint8)
        self.download(a, x, a_offset)
        self.download(b, y, b_offset)
        diff = np.flatnonzero(x != y)
        return int(diff[0]) if diff.size else -1

    def upload(self, buffer: Any, array: np.ndarray, offset: int = 0) -> None:
        try:
            cl.enqueue_copy(self.queue, buffer, np.ascontiguousarray(array), dst_offset=int(offset),
                            is_blocking=True)
        except cl.Error as e:
            raise LaunchError(f"upload failed: {str(e).splitlines()[0]}") from None

    def download(self, buffer: Any, array: np.ndarray, offset: int = 0) -> None:
        try:
            cl.enqueue_copy(self.queue, array, buffer, src_offset=int(offset), is_blocking=True)
        except cl.Error as e:
            raise LaunchError(f"download failed: {str(e).splitlines()[0]}") from None

    # run ---------------------------------------------------------------------------------------
    def _enqueue(self, kernel: Any, geo: Geometry, args: Sequence[Any]) -> Any:
        global_size = tuple(g * b for g, b in zip(geo.grid, geo.block))
        args = [a.buffer if isinstance(a, ConstantArg) else a for a in args]  # a `__constant` pointer
        if geo.dynamic_shared:
            local = cl.LocalMemory(max(int(geo.shared_bytes), 16))
            where = self._local_args.get(kernel.int_ptr)
            if where == ():
                raise LaunchError("launch.shared_bytes sizes dynamic local memory, but the kernel has no "
                                  "`__local` pointer argument to take it")
            # each `__local` pointer argument where the kernel declares it (the last when unread)
            for at in where or (len(args),):
                args.insert(min(at, len(args)), local)
        try:
            kernel.set_args(*args)
            return cl.enqueue_nd_range_kernel(self.queue, kernel, global_size, geo.block)
        except cl.Error as e:
            raise LaunchError(str(e).splitlines()[0]) from None
        except TypeError as e:  # arguments the kernel does not take (pyopencl counts them first)
            raise LaunchError(f"the kernel's arguments do not match the spec's: {e}") from None

    def launch(self, kernel: Any, geo: Geometry, args: Sequence[Any]) -> None:
        ev = self._enqueue(kernel, geo, args)
        try:
            ev.wait()
        except cl.Error as e:
            raise LaunchError(str(e).splitlines()[0]) from None

    def flush_bytes(self) -> int:
        return self._flush_bytes

    def _flush(self) -> None:
        if self._flush_kernel is None:
            self._flush_buf = self.alloc(self._flush_bytes)
            self._flush_kernel = cl.Program(self.ctx, _FLUSH_SRC).build().kerntune_flush
        self._flush_count += 1
        self._flush_kernel.set_args(self._flush_buf, np.int32(self._flush_count))
        cl.enqueue_nd_range_kernel(self.queue, self._flush_kernel, (self._flush_bytes // 16,), None)

    def timed(self, kernel: Any, geo: Geometry, args: Sequence[Any], flush: bool) -> Any:
        if flush:
            self._flush()
        return self._enqueue(kernel, geo, args)

    def elapsed(self, tokens: Sequence[Any]) -> list[float]:
        try:
            self.queue.finish()
            return [(ev.profile.end - ev.profile.start) * 1e-3 for ev in tokens]
        except cl.Error as e:
            raise LaunchError(str(e).splitlines()[0]) from None

    def time(self, kernel: Any, geo: Geometry, args: Sequence[Any], repeats: int,
             flush: bool) -> list[float]:
        return self.elapsed([self.timed(kernel, geo, args, flush) for _ in range(repeats)])

    def close(self) -> None:
        try:
            self.queue.finish()
        except Exception:
            pass
