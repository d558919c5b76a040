import pytest

from harness.cards.fields import (
    COMPUTE_BOUND,
    DRAM_BANDWIDTH_BOUND,
    L2_BANDWIDTH_BOUND,
    LATENCY_OR_OCCUPANCY_LIMITED,
    PARTIAL_WAVE_TAIL,
    UNRESOLVED,
)
from harness.cards.lint import normalize
from harness.cards.rules import RuleSet, classify_metrics, classify_report, rules_text


def test_reproduces_every_intact_stored_kernel_classification(seed_report):
    checked = 0
    for card in seed_report.cards:
        for kernel in card.kernels:
            if kernel.damaged:
                continue
            assert classify_metrics(kernel.metrics).classification == kernel.classification, (card.id, kernel.name)
            checked += 1
    print(f"reproduced the stored classification of {checked} intact kernels")
    assert checked == 175


def test_reproduces_primary_of_every_card_whose_dominant_is_listed(seed_report):
    reclassified = classify_report(normalize(seed_report))
    checked = 0
    for stored, card in zip(seed_report.cards, reclassified.cards):
        listed = {k.name for k in stored.kernels if not k.damaged}
        if stored.primary is None or stored.dominant_kernel not in listed:
            continue
        assert card.primary == stored.primary, card.id
        assert card.dominant_kernel == stored.dominant_kernel, card.id
        checked += 1
    print(f"reproduced the stored primary and dominant kernel of {checked} cards")
    assert checked == 54


def test_default_rules_text_is_the_reports(seed_report):
    assert rules_text(RuleSet()) == seed_report.rules


@pytest.mark.parametrize(
    "metrics, expected",
    [
        ({"sm_pct": 60.0}, COMPUTE_BOUND),  # inclusive
        ({"sm_pct": 59.9, "tensor_pct": 60.0}, COMPUTE_BOUND),
        ({"sm_pct": 10, "dram_pct": 60.0}, DRAM_BANDWIDTH_BOUND),
        ({"sm_pct": 10, "dram_pct": 59.0, "l2_pct": 60.0}, L2_BANDWIDTH_BOUND),
        ({"sm_pct": 50, "dram_pct": 10, "l2_pct": 10, "sm_cycles_active": 84, "cycles_elapsed": 100, "waves": 1.5},
         PARTIAL_WAVE_TAIL),
        ({"sm_pct": 50, "dram_pct": 10, "l2_pct": 10, "sm_cycles_active": 85, "cycles_elapsed": 100, "waves": 1.5},
         UNRESOLVED),  # 0.85 is not < 0.85
        ({"sm_pct": 39, "tensor_pct": 1, "dram_pct": 1, "l2_pct": 1, "warps_active_pct": 24.9},
         LATENCY_OR_OCCUPANCY_LIMITED),
        ({"sm_pct": 39, "tensor_pct": 1, "dram_pct": 1, "l2_pct": 1, "warps_active_pct": 25, "waves": 1.0}, UNRESOLVED),
    ],
)
def test_thresholds_are_inclusive_as_written(metrics, expected):
    assert classify_metrics(metrics).classification == expected


def test_nulls_are_stepped_over_and_said():
    decision = classify_metrics({"sm_pct": 1.0, "dram_pct": 1.0, "warps_active_pct": 2.0})
    assert decision.classification == LATENCY_OR_OCCUPANCY_LIMITED
    assert set(decision.evidence["missing_inputs"]) >= {"tensor_pct", "l2_pct"}
    # Nothing known: no rule can fire.
    assert classify_metrics({}).classification == UNRESOLVED


def test_thresholds_and_order_from_config():
    rules = RuleSet.from_config({"thresholds": {"compute_pct": 80}, "order": ["dram_bandwidth_bound", "compute_bound"]})
    assert classify_metrics({"sm_pct": 70, "dram_pct": 10}, rules).classification == UNRESOLVED
    assert classify_metrics({"sm_pct": 90, "dram_pct": 70}, rules).classification == DRAM_BANDWIDTH_BOUND
    with pytest.raises(ValueError, match="unknown key"):
        RuleSet.from_config({"thresholds": {"nope": 1}})
    with pytest.raises(ValueError, match="unknown rule"):
        RuleSet.from_config({"order": ["fast"]})
    with pytest.raises(ValueError, match="must be a number"):
        RuleSet.from_config({"thresholds": {"dram_pct": "high"}})


def test_card_with_unlisted_dominant_gets_no_invented_primary(seed_report):
    card = classify_report(normalize(seed_report)).card("vae-480-conv3d-192to384k333t3-e9214e")
    assert card.primary is None
    assert "not listed" in card.extra["classification_note"]
