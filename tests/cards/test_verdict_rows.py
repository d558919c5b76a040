"""The verdict row of a before/after pair: paired-round verdicts, adoption, variants, intervals, honest labels,
and the end-to-end view's projection rule. Cards are planted; the expected outcomes come from the plants."""

import copy
import re
from pathlib import Path

import pytest

from harness.cards.diff import diff_cards
from harness.cards.diff_markdown import render_markdown
from harness.cards.diff_rows import ReportDiff
from harness.cards.lint import normalize
from harness.cards.model import Kernel
from harness.cards.noise import paired_verdict
from harness.cards.reproduce import reported_device
from harness.cards.rules import classify_card
from harness.report.overview import CardResult, render_end_to_end

CARD = "dit-480-linear-m1170n5120k13824-ffde6a"


def _measured(report_card, *, role, variant, params=None, median_us, run="runA", device="Planted CPU",
              scale=0.25, source="cpu_roofline_estimate"):
    card = copy.deepcopy(report_card)
    card.extra.update({
        "harness": {"experiment": "planted", "variant": variant, "params": params or {}, "role": role, "run": run,
                    "hypothesis": "doing it once halves the time", "check": "effective_flops"},
        "timing": {"median_us": median_us, "spread": 0.01},
        "environment": {"device_name": device, "device_kind": "cpu", "hostname": "h"},
        "workload": {"scale": scale},
        "metrics_source": source,
    })
    return card


def _rounds(ratio, n=8):
    before = [100.0 * (1 + 0.002 * i) for i in range(n)]
    return before, [b / ratio * (1 + 0.003 * (-1) ** i) for i, b in enumerate(before)]


def _pair(seed_report, ratio, **kw):
    report_card = classify_card(normalize(seed_report).card(CARD))
    base = _measured(report_card, role="baseline", variant="twice", median_us=100.0, **kw)
    tried = _measured(report_card, role="trial", variant="once", params={"k": 2}, median_us=100.0 / ratio, **kw)
    verdict = paired_verdict(*_rounds(ratio), band=0.05)
    tried.extra["confirmation"] = {**verdict.as_dict(), "rule": verdict.describe()}
    return report_card, base, tried, verdict


def test_a_confirmed_win_carries_its_interval_variant_and_adoption(seed_report):
    _, base, tried, verdict = _pair(seed_report, 2.0)
    row = diff_cards(base, tried, adopted=True)
    assert row.timing_verdict == "FASTER" and verdict.verdict == "FASTER"
    assert row.speedup_ci[0] <= 2.0 <= row.speedup_ci[1]
    assert row.variant == {"experiment": "planted", "name": "once", "params": {"k": 2}, "label": "once(k=2)"}
    assert row.variant_before["name"] == "twice" and row.adopted is True
    assert "adopted: once(k=2)" in render_markdown(ReportDiff([row], [], []))


def test_a_steady_nine_percent_loss_is_slower_and_kept_out(seed_report):
    _, base, tried, _ = _pair(seed_report, 0.91)
    row = diff_cards(base, tried, adopted=False)
    assert row.timing_verdict == "SLOWER" and row.speedup_ci[1] < 1 / 1.05
    text = render_markdown(ReportDiff([row], [], []))
    assert "baseline kept: best tried once(k=2), 0.91x" in text and "SLOWER" in text


def test_without_paired_rounds_the_verdict_is_unconfirmed(seed_report):
    _, base, tried, _ = _pair(seed_report, 2.0)
    del tried.extra["confirmation"]
    row = diff_cards(base, tried)
    assert row.timing_verdict == "UNCONFIRMED" and row.speedup_ci is None
    # Another run's verdict never applies: the pair was not timed together.
    _, _, other_run, _ = _pair(seed_report, 2.0, run="runB")
    assert diff_cards(base, other_run).timing_verdict == "UNCONFIRMED"


def test_the_card_own_check_and_the_class_source_are_on_the_row(seed_report):
    report_card, base, tried, _ = _pair(seed_report, 2.0)
    row = diff_cards(base, tried, report_card=report_card)
    assert row.card_check == "compare effective vs executed FLOPs"  # the shipped card's own words
    assert row.card_verdict in ("yes", "no", "not measurable", "not measurable (estimated)")
    assert row.class_source == {"before": "cpu estimate", "after": "cpu estimate"}
    assert "(cpu estimate)" in row.class_transition
    across = diff_cards(report_card, base)
    assert "->" not in across.class_transition and "report:" in across.class_transition


def test_the_end_to_end_view_projects_only_wins_measured_on_the_report_gpu_at_scale_1(seed_report):
    report_card, base, tried, _ = _pair(seed_report, 2.0)
    row = diff_cards(base, tried, adopted=True)
    declared = reported_device(seed_report)  # H200, as the shipped report's declaration says
    on_cpu = render_end_to_end(seed_report, [CardResult(report_card, "planted", "once", row, measured=base)],
                               measured_on="a CPU", report_device=declared)
    # Unknown is never zero: the card's saving and its stage's read n/a with why.
    assert "| n/a (not projected: measured on " in on_cpu and "not the report's H200) |" in on_cpu
    assert "| 0.0 |" not in on_cpu.split("| resolution |")[0] and "| 0.0% |" not in on_cpu
    _, h200_base, h200_tried, _ = _pair(seed_report, 2.0, device="NVIDIA H200", scale=1.0, source="ncu")
    h200_row = diff_cards(h200_base, h200_tried, adopted=True)
    on_h200 = render_end_to_end(seed_report, [CardResult(report_card, "planted", "once", h200_row,
                                                         measured=h200_base)], measured_on="an H200",
                                report_device=declared)
    saved = report_card.summed_kernel_us * (1 - 1 / h200_row.speedup)
    assert f"| {saved:.1f} |" in on_h200 and "not projected" not in on_h200, on_h200
    unnamed = render_end_to_end(seed_report, [CardResult(report_card, "planted", "once", h200_row,
                                                         measured=h200_base)], measured_on="an H200",
                                report_device=None)
    assert "| n/a (not projected: the report names no GPU: set report_device) |" in unnamed


# -- one quantity, one number: each time says what it is ------------------------------------------------


def _batched_pair(seed_report):
    """A one-call baseline and a variant batching 20 calls per invocation, their timings and kernel sums planted
    apart (wall clock is not the profiler's kernel time): baseline 5400 us timed, 5190.67 us of kernels; the
    variant 14452 us timed and 14451.64 us of kernels per invocation of 20 calls."""
    report_card = classify_card(normalize(seed_report).card(CARD))
    base = _measured(report_card, role="baseline", variant="one_call", median_us=5400.0)
    base.kernels = [Kernel("nvjet_sm90_tst_128x64_v_bz_TNT", {"dur_us": 5190.67})]
    base.summed_kernel_us = 5190.67
    tried = _measured(report_card, role="trial", variant="batched", params={"k": 20}, median_us=14452.0)
    tried.kernels = [Kernel("nvjet_sm90_tst_256x144_v_bz_TNT", {"dur_us": 14451.64})]
    tried.summed_kernel_us = 14451.64
    tried.extra["variant"] = {"calls": 20}
    return base, tried


def test_a_batched_row_gives_the_timing_per_call_and_the_kernel_sums_per_invocation_each_labelled(seed_report):
    base, tried = _batched_pair(seed_report)
    row = diff_cards(base, tried)
    assert row.time_basis == "timing median per original call"
    assert (row.before_us, row.after_us) == (5400.0, pytest.approx(14452.0 / 20))
    assert row.kernel_sum_us == {"before": 5190.67, "after": 14451.64} and row.calls == {"before": 1, "after": 20}
    assert row.kernels_matched == [{"family": "nvjet", "before_us": 5190.67, "after_us": 14451.64}]
    text = render_markdown(ReportDiff([row], [], []))
    assert ("| before us (timing median per original call) | after us (timing median per original call) |"
            in text)
    assert "| 5400.00 | 722.60 |" in text
    assert ("Kernels, the profiler's durations (not the time above): kernel-duration sum per invocation: "
            "5190.67 -> 14451.64 us; per original call: 5190.67 -> 722.58 us (1 -> 20 calls per invocation)") in text
    assert ("| kernel family | before us (kernel-duration sum per invocation) | after us (kernel-duration sum per "
            "invocation) | before us per original call (/ 1) | after us per original call (/ 20) |") in text
    assert "| `nvjet` | 5190.67 | 14451.64 | 5190.67 | 722.58 |" in text
    assert "kernel sum per call" not in text  # the old label that claimed per-call values


def test_the_row_names_the_interval_and_the_band_that_decided(seed_report):
    _, base, tried, verdict = _pair(seed_report, 0.91)
    row = diff_cards(base, tried, adopted=False)
    lo, hi = verdict.ci
    assert row.same_band == 0.05
    assert row.verdict_numbers == "whole 95% CI below the SAME band [0.952, 1.05]"  # 1/1.05 and 1.05
    text = render_markdown(ReportDiff([row], [], []))
    assert (f"| {verdict.speedup:.2f}x [{lo:.2f}, {hi:.2f}] | SLOWER (whole 95% CI below the SAME band "
            f"[0.952, 1.05]) |") in text
    assert "Student's t on the mean of their log ratios" in text and "lower quartile of its samples" in text


def test_an_interval_across_a_band_edge_says_so(seed_report):
    report_card = classify_card(normalize(seed_report).card(CARD))
    base = _measured(report_card, role="baseline", variant="twice", median_us=100.0)
    tried = _measured(report_card, role="trial", variant="once", median_us=96.0)
    # round ratios 1.00 to 1.10 around the band's upper edge 1.05: the interval straddles it
    verdict = paired_verdict([100.0] * 4, [100 / 1.00, 100 / 1.10, 100 / 1.01, 100 / 1.09], band=0.05)
    assert verdict.verdict == "INCONCLUSIVE"
    tried.extra["confirmation"] = {**verdict.as_dict(), "rule": verdict.describe()}
    row = diff_cards(base, tried)
    assert row.verdict_numbers == "95% CI across an edge of the SAME band [0.952, 1.05]"


def test_report_cards_are_kernel_sums_per_invocation_judged_on_a_plain_band(seed_report):
    before = classify_card(normalize(seed_report).card(CARD))
    after = copy.deepcopy(before)
    after.kernels[0].metrics["dur_us"] = before.kernels[0].metric("dur_us") * 1.03
    after.summed_kernel_us = after.kernels[0].metric("dur_us")
    row = diff_cards(before, after)
    assert row.time_basis == "kernel-duration sum per invocation" and row.timing_verdict == "SAME"
    assert row.same_band == 0.05 and row.verdict_numbers == "kernel sums +3.0%, SAME band +/-5%"


def test_no_text_states_the_retired_spread_rule():
    """The verdict was once documented as 'SAME within max(5%, the two relative spreads)'; it is the paired rule."""
    root = Path(__file__).resolve().parents[2]
    texts = {path: path.read_text(encoding="utf-8") for path in
             [root / "README.md", *(root / "harness").rglob("*.py"), *(root / "docs").rglob("*.md")]}
    stale = [str(path) for path, text in texts.items()
             if re.search(r"max\(\s*5\s*%|two (relative )?spreads|relative spreads\)", text)]
    assert stale == []
