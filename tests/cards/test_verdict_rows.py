"""The verdict row of a before/after pair: paired-round verdicts, adoption, variants, intervals, honest labels,
and the end-to-end view's projection rule. Cards are planted; the expected outcomes come from the plants."""

import copy

from harness.cards.diff import diff_cards, render_markdown, ReportDiff
from harness.cards.lint import normalize
from harness.cards.noise import paired_verdict
from harness.cards.rules import classify_card
from harness.overview import CardResult, render_end_to_end

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
    on_cpu = render_end_to_end(seed_report, [CardResult(report_card, "planted", "once", row, measured=base)],
                               measured_on="a CPU")
    assert "| not projected |" in on_cpu and "not the report's H200" in on_cpu
    _, h200_base, h200_tried, _ = _pair(seed_report, 2.0, device="NVIDIA H200", scale=1.0, source="ncu")
    h200_row = diff_cards(h200_base, h200_tried, adopted=True)
    on_h200 = render_end_to_end(seed_report, [CardResult(report_card, "planted", "once", h200_row,
                                                         measured=h200_base)], measured_on="an H200")
    saved = report_card.summed_kernel_us * (1 - 1 / h200_row.speedup)
    assert f"| {saved:.1f} |" in on_h200 and "| not projected |" not in on_h200, on_h200
