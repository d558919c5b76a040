"""The report's units and ranges against measured cards' (issue 29): smem_static_b in KB in the shipped
report, bytes on ncu's cards; a percentage above 100 is no reading (shipped report, real H200 trial card)."""

from __future__ import annotations

import json
from pathlib import Path

from harness.cards.lint import lint_report
from harness.cards.model import Report, parse_report
from harness.cards.rules import classify_metrics

CARDS = Path(__file__).resolve().parents[1] / "fixtures" / "cards"


def test_shipped_static_smem_in_kb_is_bytes_in_the_normalized_view(seed_report: Report) -> None:
    # 4.224 is the report's KB for a 4224-byte cuDNN transpose kernel (what ncu's cards carry, in B).
    result = lint_report(seed_report)
    stored = {k.metric("smem_static_b") for c in seed_report.cards for k in c.kernels if k.metrics}
    normalized = {k.metric("smem_static_b") for c in result.normalized.cards for k in c.kernels if k.metrics}
    assert 4.224 in stored and 4.224 not in normalized and 4224.0 in normalized
    found = [f for f in result.findings if f.field == "smem_static_b"]
    assert found and all(f.code == "unit_scaled" and "KB" in f.detail for f in found)


def test_shipped_percentage_above_100_is_a_finding_and_null(seed_report: Report) -> None:
    # The report's one: l2_hit_pct 101.286436 on a 192-channel conv3d kernel.
    result = lint_report(seed_report)
    found = [f for f in result.findings if f.code == "impossible_percent"]
    assert [(f.field, f.severity) for f in found] == [("l2_hit_pct", "warning")]
    assert "101.286" in found[0].detail
    values = [k.metric("l2_hit_pct") for c in result.normalized.cards for k in c.kernels if k.metrics]
    assert all(v is None or v <= 100.0 for v in values)


def test_real_h200_trial_card_l2_hit_above_100_is_null() -> None:
    # The channels_last trial's second cudnn convertTensor kernel: l2_hit_pct 114.14 as the harness parsed it then.
    report = parse_report(json.loads((CARDS / "h200_channels_last_trial.json").read_text()))
    result = lint_report(report)
    found = [f for f in result.findings if f.code == "impossible_percent"]
    assert [f.field for f in found] == ["l2_hit_pct"] and "114.14" in found[0].detail
    kernel = result.normalized.cards[0].kernels[1]
    assert "convertTensor" in kernel.name and kernel.metric("l2_hit_pct") is None


def test_planted_percentages_above_100_are_null_and_never_classified_on() -> None:
    planted = {"dur_us": 10.0, "sm_pct": 130.0, "tensor_pct": 130.0, "dram_pct": 20.0, "l2_pct": 20.0,
               "warps_active_pct": 50.0, "waves": 8.0, "sm_cycles_active": 9.0, "cycles_elapsed": 10.0}
    assert classify_metrics(planted).classification == "compute_bound"  # as stored: sm 130% >= 60%
    card = {"group": "g", "resolution": "", "stage": "x", "op": "op", "shape_parameters": {"M": 1},
            "summed_kernel_us": 10.0, "kernels": [{"kernel": "k", "metrics": planted}], "dominant_kernel": "k"}
    result = lint_report(parse_report({"cards": [card]}))
    assert sorted(f.field for f in result.findings if f.code == "impossible_percent") == ["sm_pct", "tensor_pct"]
    metrics = result.normalized.cards[0].kernels[0].metrics
    assert metrics is not None and metrics["sm_pct"] is None and metrics["tensor_pct"] is None
    assert classify_metrics(metrics).classification != "compute_bound"
