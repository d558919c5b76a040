"""Occupancy limits and waves, checked by hand and against the baseline report's ncu numbers."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.hardware.occupancy import KB, SmLimits, occupancy, waves

H100 = SmLimits.for_arch(9, 0, 132)
A100 = SmLimits.for_arch(8, 0, 108)


def test_hand_checked_256_threads_32_regs_no_smem_on_sm90():
    occ = occupancy(H100, block_threads=256, regs_per_thread=32)
    # warps: 64 per SM / 8 per block = 8; registers: 32 x 32 = 1024 per warp -> 16 warps per
    # sub-partition -> 64 warps -> 8 blocks; shared memory: only the 1 KB reservation -> 228.
    assert occ.limit_warps == 8
    assert occ.limit_regs == 8
    assert occ.limit_smem == 228
    assert occ.limit_blocks == 32
    assert occ.limit_barriers == 64  # one barrier per block never binds
    assert occ.blocks_per_sm == 8
    assert "warps" in occ.limiting
    assert occ.occupancy_pct == 100.0
    assert waves(1056, occ.blocks_per_sm, 132) == pytest.approx(1.0)
    assert waves(1057, occ.blocks_per_sm, 132) == pytest.approx(1057 / 1056)


# Launches from the baseline report (H200, 132 SMs) with ncu's occupancy limits and waves.
# carveout: the shared memory configuration the driver chose (None: it does not matter there).
@pytest.mark.parametrize(
    "block, regs, smem, carveout, grid, limit_regs, limit_smem, ncu_waves",
    [
        # cudnn::nchwToNhwcKernel: 4224 B static smem, limited by registers and warps
        (256, 32, 4224, 100 * KB, 1956, 8, 19, 1.85),
        # at::elementwise_kernel<128, 2>: limited by warps (16); ncu's 32 for shared memory fits a
        # 32 KB carveout (or a cap at the 32-block maximum: the report does not say which)
        (128, 18, 0, 32 * KB, 1170, 21, 32, 0.55),
        # cutlass::Kernel2 (73.728 KB dynamic)
        (128, 136, 73728, None, 152, 3, 3, 0.38),
        # sm80_xmma_fprop_implicit_gemm_tf32 (122.88 KB dynamic)
        (128, 168, 122880, None, 78, 3, 1, 0.59),
        # nvjet_sm90_tst_256x144 (221.38 KB dynamic)
        (384, 168, 221380, None, 132, 1, 1, 1.0),
        # cutlass::Kernel2 with 214 registers
        (128, 214, 81920, None, 672, 2, 2, 2.55),
        # sm80_xmma_fprop_implicit_gemm_indexed_wo_smem (4.096 KB dynamic)
        (128, 94, 4096, 64 * KB, 3120, 5, 12, 4.73),
    ],
)
def test_matches_ncu_on_the_baseline_report(block, regs, smem, carveout, grid, limit_regs, limit_smem, ncu_waves):
    occ = occupancy(H100, block_threads=block, regs_per_thread=regs, smem_dynamic_b=smem, smem_carveout_b=carveout)
    assert occ.limit_regs == limit_regs
    assert occ.limit_smem == limit_smem
    assert waves(grid, occ.blocks_per_sm, H100.sm_count) == pytest.approx(ncu_waves, abs=0.005)


def test_largest_carveout_by_default():
    # The nchwToNhwc launch under the whole 228 KB: (4224 + 1024) B per block -> 44 blocks.
    occ = occupancy(H100, block_threads=256, regs_per_thread=32, smem_static_b=4224)
    assert occ.smem_per_block == 5248
    assert occ.limit_smem == 44
    assert occ.blocks_per_sm == 8


def test_static_and_dynamic_shared_memory_count_alike():
    a = occupancy(A100, block_threads=128, regs_per_thread=86, smem_static_b=32768)
    b = occupancy(A100, block_threads=128, regs_per_thread=86, smem_dynamic_b=32768)
    assert a == b


def test_reserved_kilobyte_binds_on_a100():
    # ampere_sgemm_32x32 from the real A100 trace: 32 KB + 1 KB reserved -> 164 KB / 33 KB = 4.
    occ = occupancy(A100, block_threads=128, regs_per_thread=86, smem_static_b=32768)
    assert occ.limit_smem == 4
    assert occ.limit_regs == 5  # 86 x 32 -> 2816 per warp -> 5 warps per sub-partition
    assert occ.limiting == ("shared_memory",)


def test_register_allocation_granularity():
    # 18 registers: 576 per warp round up to 768 -> 21 warps per sub-partition -> 84 warps.
    assert occupancy(H100, 128, 18).limit_regs == 21
    # 17 registers round up to the same allocation.
    assert occupancy(H100, 128, 17).limit_regs == 21
    assert occupancy(H100, 128, 16).limit_regs == 32


def test_shared_memory_allocation_unit():
    assert occupancy(H100, 128, 32, smem_dynamic_b=1).smem_per_block == 1024 + 128
    pre_ampere = SmLimits.for_arch(7, 0, 80)
    occ = occupancy(pre_ampere, 128, 32, smem_dynamic_b=1)
    assert occ.smem_per_block == 256  # no reservation before sm_80, 256 B unit
    assert occupancy(pre_ampere, 128, 32).limit_smem is None  # nothing to limit


def test_launches_that_cannot_run():
    too_much_smem = occupancy(H100, 128, 32, smem_dynamic_b=227 * KB + 1)
    assert too_much_smem.limit_smem == 0
    assert too_much_smem.blocks_per_sm == 0
    assert waves(100, too_much_smem.blocks_per_sm, 132) is None
    assert occupancy(H100, 128, 32, smem_dynamic_b=227 * KB).limit_smem == 1  # the opt-in maximum fits
    assert occupancy(H100, 1025, 16).limit_warps == 0
    assert occupancy(H100, 1024, 65).limit_regs == 0  # 65 x 1024 > 64K registers per block
    assert occupancy(H100, 32, 256).limit_regs == 0


def test_barriers_only_on_sm90():
    assert occupancy(H100, 64, 16, barriers_per_block=4).limit_barriers == 16
    occ = occupancy(H100, 64, 16, barriers_per_block=4)
    assert occ.blocks_per_sm == 16 and occ.limiting == ("barriers",)
    assert occupancy(A100, 64, 16, barriers_per_block=4).limit_barriers is None


def test_zero_registers_do_not_limit():
    assert occupancy(H100, 128, 0).limit_regs is None


def test_unknown_architecture_is_an_error():
    with pytest.raises(ValueError, match="compute capability 10.0"):
        SmLimits.for_arch(10, 0, 148)


def test_bad_inputs():
    with pytest.raises(ValueError):
        occupancy(H100, 0, 32)
    with pytest.raises(ValueError):
        occupancy(H100, 128, -1)


@settings(max_examples=200, deadline=None)
@given(
    block=st.integers(1, 1024),
    regs=st.integers(0, 255),
    smem=st.integers(0, 240 * KB),
)
def test_properties(block, regs, smem):
    occ = occupancy(H100, block, regs, smem_dynamic_b=smem)
    named = (occ.limit_warps, occ.limit_regs, occ.limit_smem, occ.limit_blocks, occ.limit_barriers)
    limits = [v for v in named if v is not None]
    assert occ.blocks_per_sm == min(limits)
    assert occ.blocks_per_sm * occ.warps_per_block <= H100.max_warps_per_sm
    assert occ.blocks_per_sm * occ.regs_per_block <= H100.regs_per_sm
    assert occ.blocks_per_sm * occ.smem_per_block <= H100.smem_per_sm
    # more registers never allow more blocks
    if regs < 255:
        assert occupancy(H100, block, regs + 1, smem_dynamic_b=smem).blocks_per_sm <= occ.blocks_per_sm
