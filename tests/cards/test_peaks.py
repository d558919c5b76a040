"""The one reader of a card's recorded peaks, on both layouts (numbers planted, units from the table)."""

from __future__ import annotations

import pytest

from harness.cards.peaks import recorded_peaks

CPU = {"kind": "cpu", "cpu_model": "Xeon", "flops_per_s": {"float32": 2.0e11, "bfloat16": 1.0e10},
       "mem_bw_bytes_per_s": 1.5e10, "llc_bytes": 32 * 2**20}
GPU = {"device_name": "NVIDIA H200", "limits": {"sm_count": 132},
       "peaks": {"tf32_tflops": {"value": 494.0, "unit": "TFLOP/s", "source": "datasheet"},
                 "fp32_tflops": {"value": 67.0, "unit": "TFLOP/s", "source": "datasheet"},
                 "bf16_tflops": {"value": 989.0, "unit": "TFLOP/s", "source": "datasheet"},
                 "dram_tbps": {"value": 4800.0, "unit": "GB/s", "source": "datasheet"}}}


def test_cpu_peaks_by_dtype():
    bf16 = recorded_peaks(CPU, "bfloat16")
    assert bf16.compute == 1.0e10 and bf16.bandwidth == 1.5e10 and bf16.llc_bytes == 32 * 2**20
    assert bf16.sm_count is None and "measured CPU bfloat16" in bf16.compute_source
    assert recorded_peaks(CPU, "float16").compute is None  # not measured: unknown, not zero


def test_gpu_peaks_follow_the_math_mode_and_the_units():
    assert recorded_peaks(GPU, "float32", tf32=True).compute == pytest.approx(494e12)
    assert recorded_peaks(GPU, "float32", tf32=False).compute == pytest.approx(67e12)
    found = recorded_peaks(GPU, "bfloat16")
    assert found.compute == pytest.approx(989e12) and found.bandwidth == pytest.approx(4.8e12)
    assert found.sm_count == 132 and found.llc_bytes is None and found.origin == "datasheet"


def test_the_peak_the_profiler_used_wins_when_the_mode_is_not_given():
    used = {**GPU, "compute_peak": "tf32_tflops",
            "used": {"compute": {"value": 400.0, "unit": "TFLOP/s", "source": "measured"}}}
    assert recorded_peaks(used, "float32").compute == pytest.approx(400e12)
    assert recorded_peaks(used, "float32", tf32=False).compute == pytest.approx(67e12)


def test_entries_without_a_unit_take_the_keys_and_nothing_recorded_is_none():
    bare = {"peaks": {"dram_tbps": {"value": 4.3}, "bf16_tflops": {"value": 790.0}}}
    found = recorded_peaks(bare, "bfloat16")
    assert found.compute == pytest.approx(790e12) and found.bandwidth == pytest.approx(4.3e12)
    assert recorded_peaks(None, "float32") is None
