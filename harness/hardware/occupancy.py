"""Theoretical occupancy and waves from a launch configuration, without a GPU.

The rules are those of NVIDIA's occupancy calculator (cuda_occupancy.h, which
cudaOccupancyMaxActiveBlocksPerMultiprocessor, Kineto and Nsight Compute's launch statistics use):

- warps: floor(max warps per SM / ceil(block / warp size)).
- registers: each warp gets regs/thread x 32 registers rounded up to 256; warps are placed in the
  SM's 4 register-file sub-partitions, so the limit is floor(regs per SM / 4 / regs per warp) x 4
  warps, divided by the block's warps. A block whose registers exceed the per-block limit (also
  checked with its warp count rounded up to the 4 sub-partitions) cannot launch.
- shared memory: static + dynamic + a per-block reservation of the driver (1 KB from sm_80 on),
  rounded up to the allocation unit (128 B from sm_80 on, 256 B before), against the SM's shared
  memory carveout; a block above the opt-in per-block maximum cannot launch. (The calculator's
  default bound is the 48 KB non-opt-in maximum, which is why Kineto's "est. achieved occupancy"
  reads 0 for kernels with more; a kernel that ran with more had opted in, so the opt-in maximum
  is the bound used here.)
- blocks: the per-SM maximum of the architecture.
- barriers (sm_90+): two hardware barriers per block slot, so floor(2 x max blocks / barriers per
  block); with the default one barrier per block it never binds.

Thread-block clusters (sm_90) are not modelled: how many clusters fit depends on the GPC layout,
which NVIDIA does not publish; cudaOccupancyMaxActiveClusters answers that on the device.

Waves = grid / (blocks per SM x SMs), as Nsight Compute's launch__waves_per_multiprocessor.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

KB = 1024  # shared memory sizes in the CUDA documentation are binary kilobytes

# Per compute capability: max threads/SM, max blocks/SM, shared memory per SM, opt-in max per
# block, per-block driver reservation, and the carveout sizes the SM can be configured to.
# Source: CUDA C++ Programming Guide, "Technical Specifications per Compute Capability", and the
# carveout steps of cuda_occupancy.h (cudaOccAlignUpShmemSizeVoltaPlus).
_ARCH: dict[tuple[int, int], dict[str, Any]] = {
    (7, 0): dict(threads=2048, blocks=32, smem=96 * KB, optin=96 * KB, reserved=0,
                 carveouts=(0, 8, 16, 32, 64, 96)),
    (7, 5): dict(threads=1024, blocks=16, smem=64 * KB, optin=64 * KB, reserved=0,
                 carveouts=(32, 64)),
    (8, 0): dict(threads=2048, blocks=32, smem=164 * KB, optin=163 * KB, reserved=KB,
                 carveouts=(0, 8, 16, 32, 64, 100, 132, 164)),
    (8, 6): dict(threads=1536, blocks=16, smem=100 * KB, optin=99 * KB, reserved=KB,
                 carveouts=(0, 8, 16, 32, 64, 100)),
    (8, 7): dict(threads=2048, blocks=16, smem=164 * KB, optin=163 * KB, reserved=KB,
                 carveouts=(0, 8, 16, 32, 64, 100, 132, 164)),
    (8, 9): dict(threads=1536, blocks=24, smem=100 * KB, optin=99 * KB, reserved=KB,
                 carveouts=(0, 8, 16, 32, 64, 100)),
    (9, 0): dict(threads=2048, blocks=32, smem=228 * KB, optin=227 * KB, reserved=KB,
                 carveouts=(0, 8, 16, 32, 64, 100, 132, 164, 196, 228)),
}

REG_ALLOC_UNIT = 256  # registers, per warp (sm_30 to sm_90)
REG_SUBPARTITIONS = 4  # register file sub-partitions per SM (sm_70 to sm_90)
MAX_REGS_PER_THREAD = 255  # what ptxas can assign; more cannot launch


def supported_compute_capabilities() -> tuple[tuple[int, int], ...]:
    return tuple(_ARCH)


@dataclass(frozen=True)
class SmLimits:
    """Per-SM resources of one GPU (cudaDeviceProp names in comments)."""

    compute_capability: tuple[int, int]
    sm_count: int  # multiProcessorCount
    max_threads_per_sm: int  # maxThreadsPerMultiProcessor
    max_blocks_per_sm: int  # maxBlocksPerMultiProcessor
    regs_per_sm: int  # regsPerMultiprocessor
    max_regs_per_block: int  # regsPerBlock
    smem_per_sm: int  # sharedMemPerMultiprocessor (bytes)
    smem_per_block_optin: int  # sharedMemPerBlockOptin (bytes)
    smem_reserved_per_block: int  # reservedSharedMemPerBlock (bytes)
    warp_size: int = 32
    max_threads_per_block: int = 1024

    @classmethod
    def for_arch(cls, major: int, minor: int, sm_count: int, **overrides: int | None) -> SmLimits:
        """Limits from the architecture table; `overrides` (field names) win, e.g. from a trace (None: not known)."""
        arch = _arch(major, minor)
        values: dict[str, Any] = dict(
            compute_capability=(major, minor),
            sm_count=sm_count,
            max_threads_per_sm=arch["threads"],
            max_blocks_per_sm=arch["blocks"],
            regs_per_sm=64 * KB,
            max_regs_per_block=64 * KB,
            smem_per_sm=arch["smem"],
            smem_per_block_optin=arch["optin"],
            smem_reserved_per_block=arch["reserved"],
        )
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    @property
    def max_warps_per_sm(self) -> int:
        return self.max_threads_per_sm // self.warp_size

    @property
    def smem_alloc_unit(self) -> int:
        return 128 if self.compute_capability[0] >= 8 else 256

    def to_dict(self) -> dict[str, Any]:
        return {
            "compute_capability": f"{self.compute_capability[0]}.{self.compute_capability[1]}",
            "sm_count": self.sm_count,
            "max_threads_per_sm": self.max_threads_per_sm,
            "max_blocks_per_sm": self.max_blocks_per_sm,
            "regs_per_sm": self.regs_per_sm,
            "max_regs_per_block": self.max_regs_per_block,
            "smem_per_sm": self.smem_per_sm,
            "smem_per_block_optin": self.smem_per_block_optin,
            "smem_reserved_per_block": self.smem_reserved_per_block,
        }


def _arch(major: int, minor: int) -> dict[str, Any]:
    try:
        return _ARCH[(major, minor)]
    except KeyError:
        known = ", ".join(f"{a}.{b}" for a, b in _ARCH)
        raise ValueError(
            f"compute capability {major}.{minor} is not in the occupancy table (known: {known})"
        ) from None


@dataclass(frozen=True)
class Occupancy:
    """Blocks per SM and what limits them. A limit of None means the resource does not limit."""

    blocks_per_sm: int
    limit_warps: int
    limit_regs: int | None
    limit_smem: int | None
    limit_blocks: int
    limit_barriers: int | None
    limiting: tuple[str, ...]  # names of the limits equal to blocks_per_sm
    regs_per_block: int  # allocated, after rounding
    smem_per_block: int  # allocated, incl. the driver's reservation and rounding
    warps_per_block: int
    max_warps_per_sm: int

    @property
    def occupancy_pct(self) -> float:
        """Theoretical occupancy: resident warps / max warps per SM, in percent."""
        return 100.0 * self.blocks_per_sm * self.warps_per_block / self.max_warps_per_sm

    def to_dict(self) -> dict[str, Any]:
        return {
            "blocks_per_sm": self.blocks_per_sm,
            "limit_warps": self.limit_warps,
            "limit_regs": self.limit_regs,
            "limit_smem": self.limit_smem,
            "limit_blocks": self.limit_blocks,
            "limit_barriers": self.limit_barriers,
            "limiting": list(self.limiting),
            "regs_per_block": self.regs_per_block,
            "smem_per_block": self.smem_per_block,
            "occupancy_pct": round(self.occupancy_pct, 2),
        }


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _round_up(a: int, b: int) -> int:
    return _ceil_div(a, b) * b


def _carveout(limits: SmLimits, needed: int, requested: int | None) -> int:
    """Shared memory the SM is configured with, in bytes.

    The calculator's default (no carveout preference) is the SM's whole shared memory. A
    requested carveout is rounded up to the next size the architecture supports, and never
    below what one block needs (the driver then picks a larger configuration).
    """
    if requested is None:
        return limits.smem_per_sm
    steps = [s * KB for s in _arch(*limits.compute_capability)["carveouts"]]
    target = max(requested, needed)
    return next((s for s in steps if s >= target), limits.smem_per_sm)


def _register_limit(limits: SmLimits, regs_per_thread: int, warps_per_block: int) -> tuple[int | None, int]:
    """(blocks per SM the registers allow, None when they do not bind; registers per block): allocated per
    warp, placed per sub-partition."""
    regs_per_warp = _round_up(regs_per_thread * limits.warp_size, REG_ALLOC_UNIT)
    regs_per_block = regs_per_warp * warps_per_block
    # The hardware launch check assumes the block spans all sub-partitions.
    regs_checked = regs_per_warp * _round_up(warps_per_block, REG_SUBPARTITIONS)
    if regs_per_thread > MAX_REGS_PER_THREAD or max(regs_checked, regs_per_block) > limits.max_regs_per_block:
        return 0, regs_per_block
    if regs_per_warp == 0:
        return None, regs_per_block
    warps_per_subpartition = (limits.regs_per_sm // REG_SUBPARTITIONS) // regs_per_warp
    return warps_per_subpartition * REG_SUBPARTITIONS // warps_per_block, regs_per_block


def _smem_limit(limits: SmLimits, smem_used: int, smem_carveout_b: int | None) -> tuple[int | None, int]:
    """(blocks per SM the shared memory allows, None when it does not bind; shared memory per block,
    allocated in the architecture's units, the block's reserved share included)."""
    smem_per_block = _round_up(smem_used, limits.smem_alloc_unit)
    if smem_per_block > limits.smem_per_block_optin + limits.smem_reserved_per_block:
        return 0, smem_per_block
    if smem_per_block == 0:
        return None, smem_per_block
    return _carveout(limits, smem_per_block, smem_carveout_b) // smem_per_block, smem_per_block


def occupancy(
    limits: SmLimits,
    block_threads: int,
    regs_per_thread: int,
    smem_static_b: int = 0,
    smem_dynamic_b: int = 0,
    barriers_per_block: int = 1,
    smem_carveout_b: int | None = None,
) -> Occupancy:
    """Max resident blocks per SM for one kernel launch.

    `smem_carveout_b`: the shared memory configuration the driver chose (Nsight Compute's
    launch__shared_mem_config_size); None assumes the largest, as the occupancy API does.
    Nsight Compute reports launch__occupancy_limit_shared_mem under the chosen one, so pass it to
    reproduce that number; a smaller carveout is picked by the driver only where it does not bind.
    """
    if block_threads <= 0:
        raise ValueError(f"block size must be positive, got {block_threads}")
    if regs_per_thread < 0 or smem_static_b < 0 or smem_dynamic_b < 0 or barriers_per_block < 0:
        raise ValueError("registers, shared memory and barriers must not be negative")

    warps_per_block = _ceil_div(block_threads, limits.warp_size)

    # Warps.
    if block_threads > limits.max_threads_per_block:
        limit_warps = 0
    else:
        limit_warps = limits.max_warps_per_sm // warps_per_block

    limit_regs, regs_per_block = _register_limit(limits, regs_per_thread, warps_per_block)
    smem_used = smem_static_b + smem_dynamic_b + limits.smem_reserved_per_block
    limit_smem, smem_per_block = _smem_limit(limits, smem_used, smem_carveout_b)

    limit_blocks = limits.max_blocks_per_sm

    limit_barriers: int | None = None
    if limits.compute_capability[0] >= 9 and barriers_per_block > 0:
        limit_barriers = 2 * limits.max_blocks_per_sm // barriers_per_block

    named = {
        "warps": limit_warps,
        "registers": limit_regs,
        "shared_memory": limit_smem,
        "blocks": limit_blocks,
        "barriers": limit_barriers,
    }
    blocks = min(v for v in named.values() if v is not None)
    return Occupancy(
        blocks_per_sm=blocks,
        limit_warps=limit_warps,
        limit_regs=limit_regs,
        limit_smem=limit_smem,
        limit_blocks=limit_blocks,
        limit_barriers=limit_barriers,
        limiting=tuple(k for k, v in named.items() if v == blocks),
        regs_per_block=regs_per_block,
        smem_per_block=smem_per_block,
        warps_per_block=warps_per_block,
        max_warps_per_sm=limits.max_warps_per_sm,
    )


def waves(grid_blocks: int, blocks_per_sm: int, sm_count: int) -> float | None:
    """Grid size in full-GPU waves; None when the block cannot be resident at all."""
    if blocks_per_sm <= 0 or sm_count <= 0:
        return None
    return grid_blocks / (blocks_per_sm * sm_count)
