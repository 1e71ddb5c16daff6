"""The occupancy calculator against hand-worked H100 figures, and against the driver on a GPU."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from kerntune.engine.device import DeviceLimits
from kerntune.engine.occupancy import carveouts, occupancy

H100 = DeviceLimits(
    backend="cuda",
    name="H100-like",
    compute_capability="9.0",
    max_threads_per_block=1024,
    max_shared_per_block=48 * 1024,
    max_shared_per_block_optin=232448,  # 227 KiB
    max_shared_per_sm=233472,  # 228 KiB
    max_threads_per_sm=2048,
    max_blocks_per_sm=32,
    max_regs_per_block=65536,
    max_regs_per_sm=65536,
    sm_count=132,
    warp_size=32,
)


def test_register_bound_at_255_registers():
    # 255 regs x 32 lanes = 8160, allocated as 8192 per warp; a sub-partition's 16384
    # registers hold 2 warps, 8 per SM: two blocks of 4 warps.
    occ = occupancy(H100, 128, 255, 0)
    assert (occ.blocks_per_sm, occ.active_warps, occ.max_warps) == (2, 8, 64)
    assert occ.fraction == pytest.approx(0.125)
    assert occ.limiter == "registers"


def test_registers_fill_sub_partitions_separately():
    # 40 regs: 1280 per warp. 16384 // 1280 = 12 warps per sub-partition, 48 per SM, so 24
    # blocks of 2 warps; the whole file divided at once would wrongly give 65536 // 2560 = 25.
    occ = occupancy(H100, 64, 40, 0)
    assert (occ.blocks_per_sm, occ.active_warps) == (24, 48)
    assert occ.limiter == "registers"


def test_shared_bound_counts_the_reserved_kilobyte():
    # 48 KiB + 1 KiB reserved = 50176 bytes a block; 233472 // 50176 = 4
    occ = occupancy(H100, 128, 32, 48 * 1024)
    assert (occ.blocks_per_sm, occ.active_warps) == (4, 16)
    assert occ.fraction == pytest.approx(0.25)
    assert occ.limiter == "shared_memory"
    # 114 KiB would fit twice in 228 KiB, but not with 1 KiB reserved on each
    assert occupancy(H100, 128, 32, 114 * 1024).blocks_per_sm == 1


def test_shared_rounds_up_to_128_bytes():
    # 45626 + 1024 = 46650 bytes: five would fit unrounded (233250), but each is allocated
    # as 46720 and 5 x 46720 = 233600 > 233472
    occ = occupancy(H100, 32, 32, 45626)
    assert occ.blocks_per_sm == 4
    assert occ.limiter == "shared_memory"


def test_thread_bound():
    # 1024 threads = 32 warps; 64 warp slots take two blocks. 16 regs leave room for four.
    occ = occupancy(H100, 1024, 16, 0)
    assert (occ.blocks_per_sm, occ.active_warps, occ.fraction) == (2, 64, 1.0)
    assert occ.limiter == "warps"
    occ = occupancy(H100, 768, 16, 0)  # 24 warps: 64 // 24 = 2 blocks, 48 warps
    assert (occ.blocks_per_sm, occ.active_warps, occ.fraction) == (2, 48, 0.75)
    # a partial warp takes a whole warp slot: 48 threads are 2 warps, so 32 blocks (block-bound)
    assert occupancy(H100, 48, 16, 0).active_warps == 64


def test_block_bound():
    # one warp a block, few registers, no shared memory: the 32 block slots run out first
    occ = occupancy(H100, 32, 16, 0)
    assert (occ.blocks_per_sm, occ.active_warps, occ.fraction) == (32, 32, 0.5)
    assert occ.limiter == "blocks"


def test_what_cannot_launch():
    too_many_threads = occupancy(H100, 1025, 16, 0)
    assert (too_many_threads.blocks_per_sm, too_many_threads.limiter) == (0, "threads")
    # 65 regs: 2080 rounded to 2304 a warp, x 32 warps = 73728 > 65536 registers a block
    too_many_regs = occupancy(H100, 1024, 65, 0)
    assert (too_many_regs.blocks_per_sm, too_many_regs.limiter) == (0, "registers")
    assert occupancy(H100, 1024, 64, 0).blocks_per_sm == 1  # 2048 x 32 = 65536 just fits
    too_much_shared = occupancy(H100, 128, 32, 232448 + 1)
    assert (too_much_shared.blocks_per_sm, too_much_shared.limiter) == (0, "shared_memory")
    assert too_much_shared.fraction == 0.0
    assert occupancy(H100, 128, 32, 232448).blocks_per_sm == 1  # the opt-in maximum fits once


def test_carveout_preference():
    assert carveouts(H100.max_shared_per_sm) == [k * 1024 for k in (0, 8, 16, 32, 64, 100, 132, 164, 196, 228)]
    # 25% of 228 KiB = 57 KiB, taken as the 64 KiB carveout: one 49 KiB block
    assert occupancy(H100, 128, 32, 48 * 1024, carveout=25).blocks_per_sm == 1
    # 50% = 114 KiB, taken as 132 KiB: two blocks
    assert occupancy(H100, 128, 32, 48 * 1024, carveout=50).blocks_per_sm == 2
    # a preference too small for one block is overridden by the smallest carveout that fits it
    assert occupancy(H100, 128, 32, 48 * 1024, carveout=0).blocks_per_sm == 1


def test_needs_per_sm_limits():
    with pytest.raises(ValueError, match="per-SM"):
        occupancy(DeviceLimits(backend="opencl", name="cpu"), 64, 0, 0)


@given(threads=st.integers(1, 1024), regs=st.integers(0, 255), shared=st.integers(0, 240_000))
def test_never_exceeds_a_limit(threads, regs, shared):
    occ = occupancy(H100, threads, regs, shared)
    warps = -(-threads // 32)
    assert 0 <= occ.blocks_per_sm <= 32
    assert occ.active_warps == occ.blocks_per_sm * warps <= 64
    assert occ.blocks_per_sm * -(-regs * 32 // 256) * 256 * warps <= 65536
    assert occ.blocks_per_sm * (-(-(shared + 1024) // 128) * 128) <= 233472
    assert (occ.blocks_per_sm == 0) == (occ.fraction == 0.0)


# against the driver --------------------------------------------------------------------------

# A kernel whose register need grows with NACC live accumulators; __launch_bounds__ and
# -maxrregcount cap it, so the variants below span 16 to 255 registers.
OCC_KERNEL = r"""
#ifndef NACC
#define NACC 8
#endif
#ifndef SMEM
#define SMEM 0
#endif
#if BOUND > 0
#define BOUNDS __launch_bounds__(BOUND)
#else
#define BOUNDS
#endif
extern "C" __global__ void BOUNDS occ(float *out, const float *in, int n) {
#if SMEM > 0
    __shared__ float tile[SMEM / 4];
#endif
    float acc[NACC];
#pragma unroll
    for (int k = 0; k < NACC; ++k) acc[k] = in[(threadIdx.x + k * 131) % n];
    for (int it = 0; it < n; ++it) {
#pragma unroll
        for (int k = 0; k < NACC; ++k) acc[k] = fmaf(acc[k], acc[(k + 1) % NACC], in[it]);
    }
#if SMEM > 0
    tile[threadIdx.x % (SMEM / 4)] = acc[0];
    __syncthreads();
    acc[0] += tile[(threadIdx.x + 1) % (SMEM / 4)];
#endif
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < NACC; ++k) s += acc[k];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
"""

# (NACC, BOUND, static shared bytes, extra nvcc options); BOUND 0 leaves out __launch_bounds__,
# which would otherwise override -maxrregcount
VARIANTS = [
    (1, 1024, 0, ()),
    (8, 1024, 4096, ()),
    (24, 1024, 0, ()),
    (24, 0, 0, ("-maxrregcount=37",)),
    (40, 512, 12288, ()),
    (40, 0, 0, ("-maxrregcount=48",)),
    (64, 256, 0, ()),
    (64, 0, 0, ("-maxrregcount=72",)),
    (100, 256, 20000, ()),
    (100, 0, 0, ("-maxrregcount=96",)),
    (160, 0, 0, ("-maxrregcount=168",)),
    (160, 128, 40960, ()),
    (230, 128, 0, ()),
    (230, 0, 0, ("-maxrregcount=200",)),
]
BLOCK_SIZES = sorted(set(range(32, 1025, 32)) | {1, 33, 100, 200, 257, 500, 999})
DYNAMIC_SHARED = [0, 1, 1000, 8 * 1024, 47 * 1024, 64 * 1024, 100_000, 150_000]


def _driver():
    """cuda-python's driver module, under its new or old name, or skip."""
    try:
        from cuda.bindings import driver
    except ImportError:
        try:
            from cuda import cuda as driver
        except ImportError:
            pytest.skip("cuda-python (cuda.bindings) is not installed")
    return driver


def _check(result):
    err, *values = result
    assert int(err) == 0, f"CUDA driver error {err}"
    return values[0] if len(values) == 1 else values


@pytest.mark.gpu
def test_matches_the_driver(tmp_path, monkeypatch):
    from kerntune.engine.backends import cuda as backend

    if backend.find_nvcc() is None:
        pytest.skip("nvcc not found")
    cu = _driver()
    if int(cu.cuInit(0)[0]) != 0 or _check(cu.cuDeviceGetCount()) == 0:
        pytest.skip("no CUDA device")
    monkeypatch.setenv("KERNTUNE_CACHE_DIR", str(tmp_path))
    dev = _check(cu.cuDeviceGet(0))
    ctx = _check(cu.cuDevicePrimaryCtxRetain(dev))
    _check(cu.cuCtxSetCurrent(ctx))
    A = cu.CUdevice_attribute

    def attr(name):
        return int(_check(cu.cuDeviceGetAttribute(getattr(A, "CU_DEVICE_ATTRIBUTE_" + name), dev)))

    major, minor = attr("COMPUTE_CAPABILITY_MAJOR"), attr("COMPUTE_CAPABILITY_MINOR")
    limits = DeviceLimits(
        backend="cuda", name="device 0", compute_capability=f"{major}.{minor}",
        max_threads_per_block=attr("MAX_THREADS_PER_BLOCK"),
        max_shared_per_block=attr("MAX_SHARED_MEMORY_PER_BLOCK"),
        max_shared_per_block_optin=attr("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"),
        max_shared_per_sm=attr("MAX_SHARED_MEMORY_PER_MULTIPROCESSOR"),
        max_threads_per_sm=attr("MAX_THREADS_PER_MULTIPROCESSOR"),
        max_blocks_per_sm=attr("MAX_BLOCKS_PER_MULTIPROCESSOR"),
        max_regs_per_block=attr("MAX_REGISTERS_PER_BLOCK"),
        max_regs_per_sm=attr("MAX_REGISTERS_PER_MULTIPROCESSOR"),
        warp_size=attr("WARP_SIZE"),
    )
    if major < 8:
        pytest.skip("the calculator follows sm_80 and later")
    reserved = attr("RESERVED_SHARED_MEMORY_PER_BLOCK")
    F = cu.CUfunction_attribute

    mismatches, compared, registers_seen = [], 0, set()
    for nacc, bound, static, options in VARIANTS:
        defines = {"NACC": str(nacc), "BOUND": str(bound), "SMEM": str(static)}
        cubin, info, _ = backend.compile_cubin(OCC_KERNEL, "occ", defines, options, f"sm_{major}{minor}")
        module = _check(cu.cuModuleLoadData(cubin))
        func = _check(cu.cuModuleGetFunction(module, b"occ"))
        regs = int(_check(cu.cuFuncGetAttribute(F.CU_FUNC_ATTRIBUTE_NUM_REGS, func)))
        static_bytes = int(_check(cu.cuFuncGetAttribute(F.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, func)))
        assert regs == info["registers"] and static_bytes == static
        registers_seen.add(regs)
        # as the CUDA backend does before a launch that needs more than 48 KiB
        room = limits.max_shared_per_block_optin - static_bytes
        _check(cu.cuFuncSetAttribute(func, F.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, room))
        # None first: the function's carveout is unset until the loop sets one
        for carveout in (None, 0, 33, 50, 100):
            if carveout is not None:
                _check(cu.cuFuncSetAttribute(
                    func, F.CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, carveout))
            # block sizes beyond __launch_bounds__ too: the driver's count does not apply them
            for threads in BLOCK_SIZES:
                for dynamic in DYNAMIC_SHARED + [room]:
                    if dynamic > room:
                        continue
                    want = int(_check(cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(
                        func, threads, dynamic)))
                    got = occupancy(limits, threads, regs, static_bytes + dynamic,
                                    reserved_shared_per_block=reserved, carveout=carveout)
                    compared += 1
                    if got.blocks_per_sm != want:
                        mismatches.append((regs, static_bytes, threads, dynamic, carveout, want, got))
        _check(cu.cuModuleUnload(module))
    _check(cu.cuDevicePrimaryCtxRelease(dev))
    assert len(registers_seen) >= 8, registers_seen
    print(f"{compared} configurations agree; registers seen: {sorted(registers_seen)}")
    assert not mismatches, f"{len(mismatches)} of {compared} differ, e.g. {mismatches[:5]}"
