"""A class from roofline estimates only where the estimate settles it, labelled, never read as a counter's.

The real cards are the H200 GPU check's (2026-12-04) CUDA-trace re-profiles: 842ecd ran the report's
kernels at the report's time, and its trace estimate has no SM-active ratio, L2 or warp figures.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cards.fields import (
    COMPUTE_BOUND,
    L2_BANDWIDTH_BOUND,
    LATENCY_OR_OCCUPANCY_LIMITED,
    PARTIAL_WAVE_TAIL,
    SOURCE_NCU,
    SOURCE_TORCH_CUDA_TRACE,
    UNRESOLVED,
)
from harness.cards.labels import class_label, class_name, transition
from harness.cards.lint import lint_report
from harness.cards.model import Card, Kernel, Report, load_report
from harness.cards.rules import NOT_ENOUGH, classify_card, classify_kernel, possible_classes

H200_TRACE = Path(__file__).resolve().parents[1] / "fixtures" / "h200_2026-12-04" / "reproduction_trace.json"
CONV = "vae-480-conv3d-96to3k333t3-842ecd"


@pytest.fixture(scope="module")
def traced() -> dict[str, Card]:
    return {card.id: card for card in load_report(H200_TRACE).cards}


def test_the_h200_trace_estimate_of_842ecd_gets_no_confident_class(traced, seed_report):
    card = traced[CONV]
    assert card.primary == UNRESOLVED  # what the run recorded: a confident class the report's counters contradict
    report = seed_report.card(CONV)
    assert report.primary == PARTIAL_WAVE_TAIL
    here = classify_card(card)
    assert here.primary is None and here.status == "unresolved"
    assert here.primary_rule.startswith(NOT_ENOUGH) and "sm_active_over_elapsed" in here.primary_rule
    top = here.kernel(here.dominant_kernel)
    # Its waves (1.18 <= 1.5) leave the tail rule to the ratio the trace lacks: the report's class is possible.
    assert top.evidence["waves"] == pytest.approx(1.1818, abs=1e-4)
    assert PARTIAL_WAVE_TAIL in top.evidence["possible_classes"]
    assert class_name(here) == NOT_ENOUGH
    assert transition(report, here, "H200") == (
        f"report: partial_wave_tail (ncu, H200); here: {NOT_ENOUGH} (trace estimate, NVIDIA H200 on vm)")


@pytest.mark.parametrize("card_id", ["dit-480-linear-m4680n5120k5120-8f26a7",
                                     "attention-480-fa3-self-4680of29640-b97006"])
def test_a_settled_estimate_keeps_its_class_labelled_and_not_matched_to_the_reports(traced, seed_report, card_id):
    # sm_pct >= 60 (73.7 and 63.2, estimated against the fp32 peak) fires compute_bound whatever the nulls are.
    here = classify_card(traced[card_id])
    assert here.primary == COMPUTE_BOUND and here.status == "classified"
    assert class_label(here) == "compute_bound (trace estimate)"
    line = transition(seed_report.card(card_id), here)
    assert "->" not in line and "here: compute_bound (trace estimate" in line


def _kernel(source: str | None, **metrics: float | None) -> Kernel:
    return Kernel(name="k", metrics={"dur_us": 10.0, **metrics}, extra={"metrics_source": source} if source else {})


def test_planted_nulls_an_estimate_cannot_step_over():
    # sm/tensor/dram quiet, waves 1.2, the ratio, L2 and warps unknown: the report's null policy says unresolved.
    metrics = {"sm_pct": 2.0, "tensor_pct": 2.0, "dram_pct": 13.0, "waves": 1.2}
    assert classify_kernel(_kernel(SOURCE_NCU, **metrics)).classification == UNRESOLVED  # a counter card: as before
    estimate = classify_kernel(_kernel(SOURCE_TORCH_CUDA_TRACE, **metrics))
    assert estimate.classification is None and estimate.rule.startswith(NOT_ENOUGH)
    # L2 at its top fires l2_bandwidth_bound; a ratio of 0 the tail; no warps active the latency rule.
    assert possible_classes(metrics) == [L2_BANDWIDTH_BOUND, PARTIAL_WAVE_TAIL, LATENCY_OR_OCCUPANCY_LIMITED,
                                         UNRESOLVED]


@pytest.mark.parametrize("metrics, expected", [
    ({"sm_pct": 70.0}, COMPUTE_BOUND),  # fires whatever the rest is
    # every rule's inputs known but the L2's, which cannot fire beside DRAM >= 60: dram_bandwidth_bound first
    ({"sm_pct": 5.0, "tensor_pct": 5.0, "dram_pct": 75.0}, "dram_bandwidth_bound"),
    # all known: the estimate is classified exactly like counters
    ({"sm_pct": 10.0, "tensor_pct": 10.0, "dram_pct": 10.0, "l2_pct": 10.0, "warps_active_pct": 50.0,
      "waves": 3.0, "sm_cycles_active": 90.0, "cycles_elapsed": 100.0}, UNRESOLVED),
])
def test_planted_estimates_the_nulls_cannot_change(metrics, expected):
    assert possible_classes(metrics) == [expected]
    assert classify_kernel(_kernel("cpu_roofline_estimate", **metrics)).classification == expected
    assert classify_kernel(_kernel(None, **metrics)).classification == expected


def test_lint_does_not_call_an_unsettled_estimate_a_missing_class(traced):
    here = classify_card(traced[CONV])
    codes = {f.code for f in lint_report(Report(cards=[here])).findings}
    assert "primary_missing" not in codes
    lost = classify_card(traced[CONV])
    lost.primary_rule = None  # no class and no reason: still a finding
    assert "primary_missing" in {f.code for f in lint_report(Report(cards=[lost])).findings}
