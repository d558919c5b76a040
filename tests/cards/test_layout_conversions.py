"""Every layout conversion counted (issue 29, item 5): cuDNN's transposes and its convertTensor kernels,
cuTENSOR's permutations, torch's copies, with their time and bytes, in the diff and the channels_last check.

The real cards are the H200 GPU check's channels_last trial (tests/fixtures/cards/README.md); the expected
sums are the kernels' own durations and bytes as ncu measured them, added here by hand.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from harness.cards.checks import CHECKS
from harness.cards.diff import diff_cards, diff_reports
from harness.cards.diff_markdown import render_markdown
from harness.cards.diff_rows import ReportDiff
from harness.cards.layout_conversions import is_layout_conversion, layout_conversions
from harness.cards.model import Card, Kernel, Report, empty_metrics, parse_report

CARDS = Path(__file__).resolve().parents[1] / "fixtures" / "cards"


def _card(name: str) -> Card:
    return parse_report(json.loads((CARDS / f"h200_channels_last_{name}.json").read_text())).cards[0]


@pytest.mark.parametrize("name", [
    "void cudnn::convertTensor_kernel<float, float, float, 2>(T3, const T1 *, T3, T2 *, unsigned long)",
    "void cudnn::nchwToNhwcKernel<float, float, float, 0, 1, 2>(cudnn::nchw2nhwc_params_t<T3>, const T1 *)",
    "void cudnn::engines_precompiled::nhwcToNchwKernel<float, float, float, 1, 0, 0>(cudnn::nhwc2nchw_params_t)",
    "void cutensor_internal_namespace::tensor_permute_kernel<float, 4>(Params)",
    "aten::contiguous",
    "aten::copy_",
])
def test_conversion_kernels(name: str) -> None:
    assert is_layout_conversion(name)


@pytest.mark.parametrize("name", [
    "sm80_xmma_fprop_implicit_gemm_indexed_wo_smem_tf32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x16x64",
    "void at::elementwise_kernel<128, 2, void at::gpu_kernel_impl_nocast<at::CUDAFunctor_add<float>>>(int, T3)",
    # Two cuDNN entries run together: the workspace kernel is not a conversion for its neighbour's params.
    "void cask_plugin__5x_cudnn::init_device_workspace_kernel(cudnn::nhwc2nchw_params_t, const T1 *)",
    "nvjet_sm90_tst_256x144_64x4_2x1_v_bz_coopA_bias_TNT",
    "_conv3d_kernel",
])
def test_other_kernels(name: str) -> None:
    assert not is_layout_conversion(name)


def test_real_h200_cards_count_every_conversion_with_time_and_bytes() -> None:
    before, after = layout_conversions(_card("baseline")), layout_conversions(_card("trial"))
    assert before.counts() == "nchwToNhwcKernel x2, nhwcToNchwKernel x1"
    assert before.dur_us == pytest.approx(70.4 + 3.136 + 6.976)
    assert before.dram_mb == pytest.approx(116.62976 + 97.307904 + 0.040704 + 0.0 + 1.213184 + 0.0)
    assert after.counts() == "convertTensor_kernel x2"
    assert after.dur_us == pytest.approx(74.336 + 4.224)
    assert after.text().startswith("convertTensor_kernel x2 (78.6 us, ")


def test_the_diff_carries_both_sides_and_markdown_names_them() -> None:
    before, after = _card("baseline"), _card("trial")
    row = diff_cards(before, after)
    assert [len(row.layout_conversions[side]["kernels"]) for side in ("before", "after")] == [3, 2]
    text = render_markdown(_diff_report(before, after))
    assert "Layout conversions: before nchwToNhwcKernel x2, nhwcToNchwKernel x1 (80.5 us" in text
    assert "after convertTensor_kernel x2 (78.6 us" in text


def _diff_report(before: Card, after: Card) -> ReportDiff:
    return diff_reports(Report(cards=[before]), Report(cards=[after]))


@pytest.mark.parametrize("verdict", ["FASTER", "SAME"])
def test_the_channels_last_check_is_no_while_convert_tensor_runs(verdict: str) -> None:
    before, after = _card("baseline"), _card("trial")
    row = replace(diff_cards(before, after, check="transposes_removed"), timing_verdict=verdict)
    answer, detail = CHECKS["transposes_removed"].judge(row, before, after)
    assert answer == "no"  # before the fix: FASTER and "still present: 0" read as yes
    assert "after: convertTensor_kernel x2 (78.6 us" in detail


def test_the_check_holds_when_every_conversion_is_gone() -> None:
    before, after = _card("baseline"), _card("trial")
    gemm_only = replace(after, kernels=[k for k in after.kernels if not is_layout_conversion(k.name)])
    row = replace(diff_cards(before, gemm_only, check="transposes_removed"), timing_verdict="FASTER")
    answer, detail = CHECKS["transposes_removed"].judge(row, before, gemm_only)
    assert answer == "yes" and "after: none" in detail


def test_unknown_time_or_bytes_is_said() -> None:
    metrics = empty_metrics()
    metrics["dur_us"] = 5.0
    card = Card(group="g", resolution="", stage="x", op="op", shape_parameters={},
                kernels=[Kernel(name="void cudnn::convertTensor_kernel<float>(T3)", metrics=metrics, extra={})],
                summed_kernel_us=5.0, dominant_kernel=None)
    found = layout_conversions(card)
    assert found.dur_us == 5.0 and found.dram_mb is None
    assert found.text() == "convertTensor_kernel x1 (5.0 us, bytes unknown)"
