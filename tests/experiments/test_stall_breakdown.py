"""stall_breakdown: the dominant warp stall from a real ncu report, and honesty without ncu."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from experiments.stall_breakdown import DECISIVE_SHARE, add_stalls, stall_evidence, stall_shares
from harness.cards.diff import diff_cards
from harness.cards.kernel_match import DIFFERENT, SAME, UNKNOWN, report_names
from harness.cards.lint import normalize
from harness.cards.measures import NO, NOT_MEASURABLE, YES
from harness.cards.model import Card, Kernel, load_report
from harness.profile.ncu.importer import cards_from_ncu

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
REPORT = FIXTURES / "ncu" / "report_rtx3080_montecarlo.ncu-rep"
H200_STALLS = FIXTURES / "h200_2026-12-04" / "stalls_ncu_500175.json"
UNRESOLVED_LINEAR = "dit-480-linear-m4680n5120k144-500175"


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


# ---------------------------------------------------------------------------------------------
# Only the report's kernel: the H200 run of 2026-12-04 profiled an fp32 FFMA GEMM for a bf16 nvjet card


def _h200_card(seed_report, with_report_names: bool = True) -> Card:
    card = load_report(H200_STALLS).cards[0]
    card.extra.pop("stalls")
    if with_report_names:  # what the run now records of the report card (harness.run.card_search)
        card.extra["report_card"].update(report_names(normalize(seed_report).card(UNRESOLVED_LINEAR)))
    return card


def test_the_h200_profile_of_another_kernel_family_is_refused(seed_report):
    card = _h200_card(seed_report)
    assert card.status == "classified" and card.primary == "compute_bound"  # what the run marked
    add_stalls(card, workload=None)
    stalls = card.extra["stalls"]
    assert stalls["kernel_match"]["verdict"] == DIFFERENT
    assert stalls["kernel_match"]["profiled_family"] == "xmma_gemm"
    assert stalls["kernel_match"]["report_families"] == ["nvjet"]
    assert card.status == "not_the_reports_kernel" and "nvjet" in card.extra["refused"]
    assert "as the report ran it" not in card.extra["variant"]["recipe"]
    assert "not shown to be the report's" in card.extra["variant"]["recipe"]
    d = diff_cards(seed_report.card(UNRESOLVED_LINEAR), card, check="stall_breakdown")
    assert d.verdict == NOT_MEASURABLE and "xmma_gemm" in d.verdict_detail


def test_the_h200_shares_leave_out_not_selected(seed_report):
    card = _h200_card(seed_report)
    stalls = stall_evidence(card)
    # The counters (warps per issue-active cycle) without selected (1.0) and not_selected (0.39): the
    # twelve non-zero stall reasons sum to 1.07, short_scoreboard 0.55 of them. The run, counting
    # not_selected, recorded 38% with not_selected second at 27%.
    assert "not_selected" not in stalls["shares"]
    assert stalls["dominant"] == "short_scoreboard" and stalls["share"] == pytest.approx(0.55 / 1.07, abs=5e-4)
    assert stalls["issue_contention"]["not_selected"] == pytest.approx(0.39)
    assert sum(stalls["shares"].values()) == pytest.approx(1.0, abs=0.01)
    assert "not_selected excluded" in stalls["rule"]


def test_a_measured_card_without_the_reports_names_is_unverified(seed_report):
    card = _h200_card(seed_report, with_report_names=False)  # as the run of 2026-12-04 recorded it
    add_stalls(card, workload=None)
    assert card.extra["stalls"]["kernel_match"]["verdict"] == UNKNOWN
    assert card.status == "kernel_unverified"


def _planted(profiled: str, report_kernels: list[str], dominant: str | None = None, **stalls: float) -> Card:
    counters = {f"stall_{name}": value for name, value in stalls.items()}
    kernel = Kernel(name=profiled, metrics={"dur_us": 10.0}, extra={"ncu_counters": counters})
    card = Card(group="g", resolution="480x832", stage="dit", op="aten.linear.default", shape_parameters={},
                kernels=[kernel], status="classified")
    card.extra.update(environment={"device_name": "planted"}, report_card={
        "kernels": report_kernels, "dominant_kernel": dominant or (report_kernels[0] if report_kernels else None)})
    return card


def test_the_same_family_with_another_tile_is_refined():
    card = _planted("nvjet_sm90_tst_128x256_64x4_1x2_h_bz_TNT", ["nvjet_sm90_tst_256x144_64x4_2x1_v_bz_coopA_bias_TNT"],
                    long_scoreboard=0.6, wait=0.2, selected=1.0, not_selected=0.9)
    add_stalls(card, workload=None)
    stalls = card.extra["stalls"]
    assert stalls["kernel_match"]["verdict"] == SAME and "refused" not in stalls
    assert stalls["dominant"] == "long_scoreboard" and stalls["share"] == pytest.approx(0.75)
    assert card.status == "refined_by_stalls"


def test_not_selected_is_never_the_dominant_stall():
    card = _planted("nvjet_x", ["nvjet_y"], not_selected=5.0, wait=0.3, barrier=0.1)
    stalls = stall_evidence(card)
    assert stalls["dominant"] == "wait" and stalls["share"] == pytest.approx(0.75)


def test_damaged_report_names_are_said_so_not_guessed():
    damaged = "void flash_fwd_kernel= 60% and no clear occupancy/tail signature; need stall reasons"
    card = _planted("fmha_cutlassF_f32_aligned_64x128_rf_sm80", [damaged], wait=0.9, barrier=0.1)
    add_stalls(card, workload=None)
    match = card.extra["stalls"]["kernel_match"]
    assert match["verdict"] == UNKNOWN and "damaged" in match["reason"] and "flash_fwd_kernel" in match["reason"]
    assert card.status == "kernel_unverified"
    # The surviving stem of a damaged name still names its family: the same kernel is recognised.
    same = _planted("void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 64>>(Flash_fwd_params)", [damaged],
                    wait=0.9, barrier=0.1)
    add_stalls(same, workload=None)
    assert same.extra["stalls"]["kernel_match"]["verdict"] == SAME and same.status == "refined_by_stalls"


def test_a_truncated_kernel_list_is_said_so():
    card = _planted("nchwToNhwcKernel", ["void at::elementwise_kernel<128, 2>(int)"],
                    dominant="sm90_xmma_fprop_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x16x64",
                    wait=1.0)
    add_stalls(card, workload=None)
    match = card.extra["stalls"]["kernel_match"]
    assert match["verdict"] == UNKNOWN and "list truncated" in match["reason"]
