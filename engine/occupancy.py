"""How many blocks of a compiled kernel fit on one multiprocessor at once.

The rules are those of cudaOccMaxActiveBlocksPerMultiprocessor in CUDA's cuda_occupancy.h, which
cuOccupancyMaxActiveBlocksPerMultiprocessor agrees with, for sm_80 and later (Ampere, Hopper):

- warps: a block takes ceil(threads / warp size) of the SM's warp slots;
- registers: allocated per warp, regs x 32 rounded up to 256; each of the SM's 4 sub-partitions
  holds a quarter of the register file and a whole number of warps, and a block must also fit
  the per-block register limit with its warps rounded up to a multiple of 4;
- shared memory: static + dynamic + the 1 KiB the driver reserves per block, rounded up to 128
  bytes; the SM's shared memory is one of a few carveout sizes (0, 8, 16, 32, 64, 100, 132, 164,
  196, 228 KiB on sm_90, fewer where the SM has less);
- blocks: the SM's block slots.

Block barriers (named barriers beyond __syncthreads) are not modelled; they limit only kernels
that use many of them.
"""

from __future__ import annotations

from dataclasses import dataclass

from .device import DeviceLimits

CARVEOUTS_KIB = (0, 8, 16, 32, 64, 100, 132, 164, 196, 228)
MAX_REGS_PER_THREAD = 255  # ptxas never assigns more
LIMITERS = ("threads", "warps", "registers", "shared_memory", "blocks")
_UNLIMITED = 1 << 30


@dataclass(frozen=True)
class Occupancy:
    """Resident blocks and warps per SM for one launch configuration.

    `limiter` names what bound it: "threads" (the block has more threads than a block may
    have, so nothing launches), "warps" (the SM's warp slots), "registers", "shared_memory" or
    "blocks" (the SM's block slots). With blocks_per_sm == 0 it names what does not fit.
    """

    blocks_per_sm: int
    active_warps: int
    max_warps: int
    fraction: float
    limiter: str


def occupancy(limits: DeviceLimits, threads_per_block: int, registers_per_thread: int,
              shared_per_block: int, *, reg_alloc_unit: int = 256, warp_alloc_granularity: int = 4,
              shared_alloc_unit: int = 128, reserved_shared_per_block: int = 1024,
              carveout: int | None = None) -> Occupancy:
    """Blocks per SM of a kernel using `registers_per_thread` and `shared_per_block` bytes of
    shared memory (static + dynamic), launched with `threads_per_block`.

    `warp_alloc_granularity` is the number of SM sub-partitions that share the register file.
    `carveout` is the kernel's preferred shared-memory carveout in percent of the SM's maximum
    (cudaFuncAttributePreferredSharedMemoryCarveout); None, the default, lets the driver take
    the largest, which is what the driver's occupancy query assumes. Raises ValueError for
    limits without per-SM figures (an OpenCL device).
    """
    missing = [n for n in ("max_threads_per_sm", "max_blocks_per_sm", "max_regs_per_sm",
                           "max_regs_per_block", "max_shared_per_sm") if not getattr(limits, n)]
    if missing:
        raise ValueError(f"occupancy needs per-SM limits; {limits.name} lacks {', '.join(missing)}")
    warp = limits.warp_size
    max_warps = limits.max_threads_per_sm // warp
    if not 1 <= threads_per_block <= limits.max_threads_per_block:
        return Occupancy(0, 0, max_warps, 0.0, "threads")
    warps = -(-threads_per_block // warp)

    bounds = {
        "warps": max_warps // warps,
        "registers": _blocks_by_registers(limits, warps, registers_per_thread, reg_alloc_unit,
                                          warp_alloc_granularity),
        "shared_memory": _blocks_by_shared(limits, shared_per_block, shared_alloc_unit,
                                           reserved_shared_per_block, carveout),
        "blocks": limits.max_blocks_per_sm,
    }
    blocks = min(bounds.values())
    limiter = next(name for name, n in bounds.items() if n == blocks)
    return Occupancy(blocks, blocks * warps, max_warps, blocks * warps / max_warps, limiter)


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit


def _blocks_by_registers(limits: DeviceLimits, warps: int, regs: int, unit: int,
                         partitions: int) -> int:
    per_warp = _round_up(regs * limits.warp_size, unit)
    # The hardware checks the per-block limit as if the block's warps were spread over every
    # sub-partition, so the warp count is rounded up to a multiple of the partitions first.
    if regs > MAX_REGS_PER_THREAD or per_warp * _round_up(warps, partitions) > limits.max_regs_per_block:
        return 0
    if per_warp == 0:
        return _UNLIMITED
    warps_per_partition = (limits.max_regs_per_sm // partitions) // per_warp
    return warps_per_partition * partitions // warps


def carveouts(max_shared_per_sm: int) -> list[int]:
    """The shared-memory sizes an SM can be configured with, in bytes, smallest first."""
    sizes = [k * 1024 for k in CARVEOUTS_KIB if k * 1024 <= max_shared_per_sm]
    if sizes[-1] != max_shared_per_sm:
        sizes.append(max_shared_per_sm)
    return sizes


def _align_to_carveout(size: int, sizes: list[int]) -> int:
    return next((s for s in sizes if s >= size), sizes[-1])


def _blocks_by_shared(limits: DeviceLimits, shared: int, unit: int, reserved: int,
                      carveout: int | None) -> int:
    allocated = _round_up(shared + reserved, unit)
    # The driver's reserve comes on top of the per-block limit it reports.
    per_block = max(limits.max_shared_per_block, limits.max_shared_per_block_optin) + reserved
    if shared < 0 or allocated > per_block:
        return 0
    if allocated == 0:
        return _UNLIMITED
    sizes = carveouts(limits.max_shared_per_sm)
    wanted = limits.max_shared_per_sm if carveout is None else carveout * limits.max_shared_per_sm // 100
    sm_shared = _align_to_carveout(wanted, sizes)
    # A preference too small for even one block is overridden by the smallest size that fits one.
    if sm_shared < allocated:
        sm_shared = _align_to_carveout(allocated, sizes)
    return sm_shared // allocated
