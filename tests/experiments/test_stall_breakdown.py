"""stall_breakdown: the dominant warp stall from a real ncu report, and honesty without ncu."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from experiments.stall_breakdown import DECISIVE_SHARE, add_stalls, stall_evidence, stall_shares
from harness.cards.diff import diff_cards
from harness.cards.lint import normalize
from harness.cards.measures import NO, NOT_MEASURABLE, YES
from harness.profile.ncu.importer import cards_from_ncu

REPORT = Path(__file__).resolve().parents[1] / "fixtures" / "ncu" / "report_rtx3080_montecarlo.ncu-rep"


@pytest.fixture(scope="module")
def ncu_card():
    pytest.importorskip("ncu_report", reason="reading a binary .ncu-rep needs the ncu-report package")
    cards = cards_from_ncu(REPORT)
    # The kernel with the stall counters and the largest duration of this capture.
    return max(cards, key=lambda c: max((k.metric("dur_us") or 0) for k in c.kernels))


def test_shares_exclude_the_issue_cycle_and_sum_to_one(ncu_card):
    kernel = max(ncu_card.kernels, key=lambda k: k.metric("dur_us") or 0)
    shares = stall_shares(kernel)
    assert shares, "the fixture was captured with the warp-state metrics"
    assert "selected" not in shares
    assert sum(shares.values()) == pytest.approx(1.0)
    assert list(shares.values()) == sorted(shares.values(), reverse=True)


def test_dominant_stall_refines_the_card_when_decisive(ncu_card):
    card = copy.deepcopy(ncu_card)
    evidence = stall_evidence(card)
    assert evidence["dominant"] == max(evidence["shares"], key=evidence["shares"].get)
    add_stalls(card, workload=None)
    assert card.extra["stalls"] == evidence
    # This capture's initRNG kernel waits on fixed-latency dependencies most of its stall cycles.
    assert evidence["dominant"] == "wait" and evidence["share"] >= DECISIVE_SHARE and evidence["decisive"]
    assert card.status == "refined_by_stalls" and "wait" in card.extra["refined"]
    assert diff_cards(ncu_card, card, check="stall_breakdown").verdict == YES


def test_a_spread_of_stalls_is_not_decisive(ncu_card):
    card = copy.deepcopy(ncu_card)
    for kernel in card.kernels:
        counters = kernel.extra.setdefault("ncu_counters", {})
        for name in list(counters):
            if name.startswith("stall_"):
                counters[name] = 0.0
        counters.update(stall_long_scoreboard=1.0, stall_wait=1.0, stall_barrier=1.0)
    add_stalls(card, workload=None)
    assert card.extra["stalls"]["decisive"] is False
    assert card.status != "refined_by_stalls"
    assert diff_cards(ncu_card, card, check="stall_breakdown").verdict == NO


def test_without_ncu_counters_the_card_says_so_and_nothing_is_guessed(seed_report):
    card = copy.deepcopy(normalize(seed_report).card("dit-480-linear-m4680n5120k144-500175"))
    card.extra["profiler"] = "cpu"
    add_stalls(card, workload=None)
    assert card.extra["stalls"]["dominant"] is None
    assert "only ncu" in card.extra["stalls"]["note"]
    d = diff_cards(seed_report.card(card.id), card, check="stall_breakdown")
    assert d.verdict == NOT_MEASURABLE and "only ncu" in d.verdict_detail
