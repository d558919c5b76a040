"""Tile arithmetic for tiled GPU kernels (a GEMM, an implicit-GEMM convolution): can a tile launch, how
many tiles and waves a launch makes, and the FLOPs it executes once every tile is whole.

Pure arithmetic against an SM's limits (harness.hardware.occupancy), decided before anything is compiled,
so that a tile search spends no trial on a configuration that cannot launch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from harness.hardware.occupancy import SmLimits

# Hopper (the report's H200): 228 KiB of shared memory per SM, of which one block may opt into 227 KiB
# (1 KiB is reserved per block). Used when no CUDA device can be asked.
HOPPER = SmLimits.for_arch(9, 0, 132)
MAX_REGS_PER_THREAD = 255  # what ptxas can give one thread
MMA_FRAGMENT = 16 * 8  # the smallest tensor-core MMA tile (m16n8k16): each warp needs at least one


@dataclass(frozen=True)
class TileConfig:
    BLOCK_M: int
    BLOCK_N: int
    BLOCK_K: int
    GROUP_M: int
    num_stages: int
    num_warps: int

    def smem_bytes(self, elem_size: int) -> int:
        """Shared memory of the software pipeline: num_stages buffers of one A and one B tile."""
        return self.num_stages * (self.BLOCK_M * self.BLOCK_K + self.BLOCK_K * self.BLOCK_N) * elem_size

    def acc_regs_per_thread(self) -> float:
        """fp32 accumulator registers each thread holds: the BLOCK_M x BLOCK_N tile over the block's threads."""
        return self.BLOCK_M * self.BLOCK_N / (32 * self.num_warps)

    def label(self) -> str:
        return (f"{self.BLOCK_M}x{self.BLOCK_N}x{self.BLOCK_K} group {self.GROUP_M}, "
                f"{self.num_stages} stages, {self.num_warps} warps")


def _power_of_two(n: int) -> bool:
    return n >= 1 and (n & (n - 1)) == 0


def device_limits(device: str) -> tuple[SmLimits, str]:
    """The SM limits launchability is judged against: the CUDA device's own, else Hopper's."""
    if str(device).startswith("cuda") and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(torch.device(device))
        try:
            limits = SmLimits.for_arch(
                props.major, props.minor, props.multi_processor_count,
                smem_per_block_optin=getattr(props, "shared_memory_per_block_optin", None),
                smem_per_sm=getattr(props, "shared_memory_per_multiprocessor", None),
            )
        except ValueError:  # an architecture the occupancy table lacks
            return HOPPER, f"{props.name} is not in the occupancy table: Hopper's limits assumed"
        return limits, f"{props.name} limits from torch.cuda.get_device_properties"
    return HOPPER, "Hopper's limits, assumed: no CUDA device here"


def launch_problem(config: TileConfig, elem_size: int, limits: SmLimits = HOPPER) -> str | None:
    """Why this tile configuration cannot launch (or cannot be lowered), or None when it can.

    Pure arithmetic, decided before anything is compiled:
    - BLOCK_M/N/K powers of two (tl.arange) and at least 16 (tl.dot's smallest operand);
    - num_warps a power of two up to 1024 threads; num_stages and GROUP_M at least 1;
    - shared memory: num_stages x (BLOCK_M x BLOCK_K + BLOCK_K x BLOCK_N) x element size within what
      one block may opt into (227 KiB on Hopper: 228 KiB per SM less the driver's 1 KiB per block);
    - registers: the fp32 accumulator alone (BLOCK_M x BLOCK_N / threads per thread) within the 255
      registers a thread can hold, and within the SM's register file;
    - warps vs tile: each warp needs at least one 16x8 MMA fragment of the output tile.
    """
    c = config
    for name in ("BLOCK_M", "BLOCK_N", "BLOCK_K"):
        value = getattr(c, name)
        if not _power_of_two(value) or value < 16:
            return f"{name}={value}: tl.arange needs a power of two and tl.dot at least 16"
    if c.GROUP_M < 1:
        return f"GROUP_M={c.GROUP_M}: at least 1"
    if c.num_stages < 1:
        return f"num_stages={c.num_stages}: at least 1"
    if not _power_of_two(c.num_warps) or c.num_warps * 32 > limits.max_threads_per_block:
        return f"num_warps={c.num_warps}: a power of two of at most {limits.max_threads_per_block // 32}"
    smem = c.smem_bytes(elem_size)
    available = limits.smem_per_block_optin
    if smem > available:
        return (f"shared memory {smem} B = {c.num_stages} stages x ({c.BLOCK_M}x{c.BLOCK_K} + "
                f"{c.BLOCK_K}x{c.BLOCK_N}) x {elem_size} B exceeds the {available} B one block may use")
    acc = c.acc_regs_per_thread()
    if acc > MAX_REGS_PER_THREAD:
        return (f"the {c.BLOCK_M}x{c.BLOCK_N} fp32 accumulator needs {acc:.0f} registers per thread with "
                f"{c.num_warps} warps; a thread holds at most {MAX_REGS_PER_THREAD}")
    if c.BLOCK_M * c.BLOCK_N > limits.regs_per_sm:
        return (f"the {c.BLOCK_M}x{c.BLOCK_N} fp32 accumulator alone exceeds the SM's "
                f"{limits.regs_per_sm} registers")
    if c.BLOCK_M * c.BLOCK_N < c.num_warps * MMA_FRAGMENT:
        return (f"a {c.BLOCK_M}x{c.BLOCK_N} tile gives {c.num_warps} warps less than one 16x8 MMA "
                "fragment each")
    return None


def padded(n: int, block: int) -> int:
    return math.ceil(n / block) * block


DOT_MIN_SIDE = 16  # the smallest N (and K) a tl.dot takes


def widest_useful_block(n: int) -> int:
    """The widest tile side a GEMM dimension of `n` can use: the power of two that covers it, at least a
    tl.dot's 16. A wider tile only pads: a 3-channel conv output in a 128-wide BLOCK_N executed 42.7x its
    nominal FLOPs on the H200 (0.28x the baseline's speed)."""
    return max(DOT_MIN_SIDE, 1 << max(n - 1, 0).bit_length())


def executed_flops(m: int, n: int, k: int, block_m: int, block_n: int, block_k: int) -> float:
    """FLOPs a tiled kernel executes: every tile is whole, so M, N and K are padded to the tile.

    The masked loads feed zeros past the edges, but the MMAs still run over the whole tile (K
    included: its last BLOCK_K slab is padded too, which matters for K=144).
    """
    return 2.0 * padded(m, block_m) * padded(n, block_n) * padded(k, block_k)


def tile_count(m: int, n: int, block_m: int, block_n: int) -> int:
    return math.ceil(m / block_m) * math.ceil(n / block_n)


def waves(tiles: int, sm_count: int) -> tuple[float, float]:
    """Waves of a launch of `tiles` blocks at one block per SM, and how full its last wave is (%)."""
    return tiles / sm_count, (tiles % sm_count or sm_count) / sm_count * 100.0
