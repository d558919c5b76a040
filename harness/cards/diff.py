"""Before/after diff of cards: time, class transition, kernels by family, named metrics, verdicts.

Two verdicts, kept apart:
- `timing_verdict`: for measured cards the paired-rounds verdict (a Student's t interval on the log
  ratios of the confirm rounds against the SAME band, harness.cards.noise.paired_verdict), UNCONFIRMED
  without such rounds; for report cards (kernel sums, one sample a side) SAME within the threshold;
- `verdict`: does the counter-experiment's own check hold? "yes" / "no" / "not measurable", with
  the numbers in `verdict_detail`. The check is the one the before card's class proposes, unless the
  experiment names its own (harness.cards.checks).

This module builds the rows (their types are harness.cards.diff_rows'); the time verdict is
harness.cards.time_verdict's, the Markdown harness.cards.diff_markdown's.
"""

from __future__ import annotations

from typing import Any

from harness.cards.card_check import CardCheck, judge_card_check
from harness.cards.checks import CHECK_FOR_CLASS, check_named
from harness.cards.diff_rows import CardDiff, ReportDiff
from harness.cards.diff_sides import variant_of
from harness.cards.dtype import DEFAULT as DEFAULT_DTYPE
from harness.cards.fields import UNRESOLVED
from harness.cards.kernel_families import family_sums
from harness.cards.labels import class_source, flag_over_peak, is_report_card, transition
from harness.cards.launches import card_launches, launch_comparison
from harness.cards.layout_conversions import layout_conversions
from harness.cards.measures import (
    KERNEL_SUM_PER_CALL_BASIS,
    TIMING_BASIS,
    calls_per_invocation,
    card_time_us,
    dominant_metric,
    kernel_sum_us,
    scale_crossing,
    sum_metric,
    time_basis,
)
from harness.cards.model import DEVICE_KEY, Card, Report
from harness.cards.noise import DEFAULT_THRESHOLD
from harness.cards.reproduce import Reproduction, reproduce_card
from harness.cards.time_verdict import confirmation_between, judge_time


def _fairness(before: Card, after: Card, report_device: str | None) -> tuple[bool, str]:
    eb, ea = before.extra.get("environment"), after.extra.get("environment")
    crossed = scale_crossing(before, after)
    if not isinstance(eb, dict) and not isinstance(ea, dict):
        return (False, f"not a fair comparison: {crossed}") if crossed else \
            (True, "environment not recorded on either side")
    if not isinstance(eb, dict) or not isinstance(ea, dict):
        # The report's own cards carry no environment: they were profiled where the report says.
        report_card, measured = (before, after) if not isinstance(eb, dict) else (after, before)
        return _fairness_to_report(report_card, measured, report_device, crossed)
    keys = ("device_name", "device_kind", "hostname")
    machines = ", ".join(f"{k}: {eb.get(k)!r} vs {ea.get(k)!r}" for k in keys if eb.get(k) != ea.get(k))
    differ = [f"measured on different machines ({machines})"] if machines else []
    differ += [crossed] if crossed else []
    if differ:
        return False, "not a fair comparison: " + "; ".join(differ)
    return True, "same machine"


def _device_differs(report_device: str | None, here: str | None) -> bool:
    return report_device is not None and here is not None and report_device.lower() not in here.lower()


def _fairness_to_report(report_card: Card, measured: Card, report_device: str | None,
                        crossed: str | None) -> tuple[bool, str]:
    """A report card against a re-profile: fair on the report's device (`report_device`: where the report says it
    was profiled; a report naming none is judged on the rest), at the report's scale, running the report's
    kernels, in a dtype the card evidences; otherwise each of those that differs is named."""
    found = reproduce_card(measured, report_card, report_device)
    workload = measured.extra.get("workload") or {}
    differ = []
    if _device_differs(report_device, found.device_here):
        differ.append(f"device: the report's {report_device} vs {found.device_here}")
    if crossed:
        differ.append(crossed)
    if found.verdict is Reproduction.OTHER_KERNELS:
        differ.append(f"kernels: the report ran {', '.join(found.families_report)}, here "
                      f"{', '.join(found.families_here)}")
    if workload.get("dtype_source") == DEFAULT_DTYPE:
        differ.append(f"dtype: {workload.get('dtype')} is the experiment's guess, not the report's evidence")
    if differ:
        return False, "not a fair comparison: " + "; ".join(differ)
    where = f"the report's device ({report_device})" if report_device else "the report names no device"
    return True, f"{where}, its scale, its kernels, its dtype ({workload.get('dtype')})"


def diff_cards(
    before: Card,
    after: Card,
    check: str | None = None,
    hypothesis: str | None = None,
    threshold: float = DEFAULT_THRESHOLD,
    confirmation: dict[str, Any] | None = None,
    adopted: bool | None = None,
    report_card: Card | None = None,
    report_device: str | None = None,
) -> CardDiff:
    """`confirmation`: the paired-rounds verdict of this pair (else the one recorded on `after`, if any);
    `report_card`: whose own check to judge (default `before`: measured cards keep their report card's);
    `report_device`: where a report card (a side without an environment) was profiled
    (harness.cards.reproduce.reported_device)."""
    both_timed = all(isinstance(c.extra.get("timing"), dict) for c in (before, after))
    before_us, after_us = card_time_us(before, both_timed), card_time_us(after, both_timed)
    confirmation = confirmation or confirmation_between(before, after)
    timed = judge_time(before, after, both_timed, before_us, after_us, threshold, confirmation)
    verdict_t = timed.verdict
    fb, fa = family_sums(before), family_sums(after)
    label = after.extra.get("harness")
    recorded = label if isinstance(label, dict) else {}
    check_name = check or recorded.get("check") or CHECK_FOR_CLASS.get(before.primary or UNRESOLVED,
                                                                        "stall_breakdown")
    spec = check_named(check_name, recorded.get("check_module") if check_name == recorded.get("check") else None)
    deltas: dict[str, dict[str, float | None]] = {}
    for name in spec.metrics:
        b = sum_metric(before, name) if name.endswith(("_mb", "dur_us")) else dominant_metric(before, name)
        a = sum_metric(after, name) if name.endswith(("_mb", "dur_us")) else dominant_metric(after, name)
        deltas[name] = {"before": b, "after": a, "delta": (a - b) if a is not None and b is not None else None}
    fair, note = _fairness(before, after, report_device)
    result = CardDiff(
        card=after.id if after.id == before.id else f"{before.id} -> {after.id}",
        before_us=before_us,
        after_us=after_us,
        speedup=timed.speedup,
        time_basis=_row_basis(before, after, both_timed),
        timing_verdict=verdict_t,
        class_before=before.primary,
        class_after=after.primary,
        kernels_added=sorted(set(fa) - set(fb)),
        kernels_removed=sorted(set(fb) - set(fa)),
        kernels_matched=[
            {"family": f, "before_us": fb[f], "after_us": fa[f]} for f in sorted(set(fb) & set(fa))
        ],
        metric_deltas=deltas,
        hypothesis=hypothesis or recorded.get("hypothesis") or before.counter_experiment or spec.statement,
        check=check_name,
        fair=fair,
        fairness_note=note,
        speedup_ci=timed.ci,
        verdict_rule=timed.rule,
        same_band=timed.band,
        verdict_numbers=timed.numbers,
        kernel_sum_us={"before": kernel_sum_us(before), "after": kernel_sum_us(after)},
        calls={"before": calls_per_invocation(before), "after": calls_per_invocation(after)},
        variant=variant_of(after),
        adopted=adopted,
        variant_before=variant_of(before),
        variant_after=variant_of(after),
        layout_conversions={side: layout_conversions(card).as_dict()
                            for side, card in (("before", before), ("after", after))},
    )
    result.verdict, result.verdict_detail = spec.judge(result, before, after)
    own: CardCheck = judge_card_check(report_card or before, before, after, verdict_t)
    result.card_check, result.card_verdict, result.card_verdict_detail = own.text, own.verdict, own.detail
    result.class_source = {"before": class_source(before), "after": class_source(after)}
    result.class_transition = transition(before, after, report_device)
    result.notes += [f"{side}: {flag}" for side, card in (("before", before), ("after", after))
                     for flag in flag_over_peak(card)]
    result.launches = {"before": card_launches(before), "after": card_launches(after)}
    if counted := launch_comparison(before, after):
        result.notes.append(counted)
    if not fair:
        result.notes.append(note)
    return result


def _row_basis(before: Card, after: Card, both_timed: bool) -> str:
    """The basis of a row's before/after times (`card_time_us` with the same choice on both sides)."""
    if both_timed:
        return TIMING_BASIS
    bases = {time_basis(before, prefer_timing=False), time_basis(after, prefer_timing=False)}
    # A one-call card's sum per invocation is also its sum per original call: one label fits both.
    return bases.pop() if len(bases) == 1 else KERNEL_SUM_PER_CALL_BASIS


def _declared_devices(before: Report, after: Report, rows: list[CardDiff]) -> None:
    """Two reports' own cards (no environment on either side) read on the GPUs their reports declare (two ncu
    imports): not a fair comparison when the GPUs differ."""
    devices = (before.extra.get(DEVICE_KEY), after.extra.get(DEVICE_KEY))
    if not all(devices) or str(devices[0]).lower() == str(devices[1]).lower():
        return
    after_by_id = {c.id: c for c in after.cards}
    pairs = [(card, after_by_id[card.id]) for card in before.cards if card.id in after_by_id]
    for row, (b, a) in zip(rows, pairs, strict=True):
        if row.fair and is_report_card(b) and is_report_card(a):
            row.fair = False
            row.fairness_note = f"not a fair comparison: the reports' GPUs differ ({devices[0]} vs {devices[1]})"
            row.notes.append(row.fairness_note)


def diff_reports(before: Report, after: Report, checks: dict[str, str] | None = None,
                 report_device: str | None = None) -> ReportDiff:
    """Match cards by id; `checks` may name the check per card id (else the class's own); `report_device`: where
    a side's report cards were profiled."""
    after_by_id = {c.id: c for c in after.cards}
    before_ids = {c.id for c in before.cards}
    diffs = [
        diff_cards(card, after_by_id[card.id], check=(checks or {}).get(card.id), report_device=report_device)
        for card in before.cards
        if card.id in after_by_id
    ]
    _declared_devices(before, after, diffs)
    return ReportDiff(
        cards=diffs,
        only_before=[c.id for c in before.cards if c.id not in after_by_id],
        only_after=[c.id for c in after.cards if c.id not in before_ids],
    )
