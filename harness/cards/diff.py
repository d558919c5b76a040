"""Before/after diff of cards: time, class transition, kernels by family, named metrics, verdicts.

Two verdicts, kept apart:
- `timing_verdict`: for measured cards the paired-rounds verdict (a Student's t interval on the log
  ratios of the confirm rounds against the SAME band, harness.cards.noise.paired_verdict), UNCONFIRMED
  without such rounds; for report cards (kernel sums, one sample a side) SAME within the threshold;
- `verdict`: does the counter-experiment's own check hold? "yes" / "no" / "not measurable", with
  the numbers in `verdict_detail`. The check is the one the before card's class proposes, unless the
  experiment names its own (see CHECKS).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from harness.cards.fields import (
    COMPUTE_BOUND,
    DRAM_BANDWIDTH_BOUND,
    L2_BANDWIDTH_BOUND,
    LATENCY_OR_OCCUPANCY_LIMITED,
    PARTIAL_WAVE_TAIL,
    UNRESOLVED,
)
from harness.cards.card_check import JUDGES, CardCheck, judge_card_check, time_fell
from harness.cards.labels import class_source, flag_over_peak, transition
from harness.cards.measures import (
    KERNEL_SUM_BASIS,
    KERNEL_SUM_PER_CALL_BASIS,
    NO,
    NOT_MEASURABLE,
    TIMING_BASIS,
    YES,
    calls_per_invocation,
    card_time_us,
    dominant_metric,
    kernel_sum_us,
    sum_metric,
    time_basis,
)
from harness.cards.model import Card, Report
from harness.cards.noise import DEFAULT_THRESHOLD, timing_verdict


def kernel_family(name: str) -> str:
    """A name that survives tile, dtype and template changes: 'nchwToNhwcKernel', 'xmma_fprop_implicit_gemm'."""
    text = name.strip()
    if text.startswith("aten::") or text.startswith("harness::"):
        return text.split("(")[0]
    text = re.sub(r"^void\s+", "", text)
    depth, cut = 0, len(text)
    for i, ch in enumerate(text):
        if ch == "<":
            if depth == 0:
                cut = min(cut, i)
            depth += 1
        elif ch == ">":
            depth = max(depth - 1, 0)
        elif ch == "(" and depth == 0:
            cut = min(cut, i)
            break
    base = text[:cut].strip().split("::")[-1].strip() or text
    tokens = base.split("_")
    if tokens and re.fullmatch(r"sm\d+", tokens[0]):
        tokens = tokens[1:]
    kept: list[str] = []
    for token in tokens:
        if re.search(r"\d", token) and kept:
            break
        kept.append(token)
    return "_".join(kept) or base


def _families(card: Card) -> dict[str, float]:
    """Kernel-duration sum by family, per invocation (as profiled; a batched invocation serves several calls)."""
    out: dict[str, float] = {}
    for kernel in card.kernels:
        family = kernel_family(kernel.name)
        out[family] = out.get(family, 0.0) + (kernel.metric("dur_us") or 0.0)
    return out


@dataclass(frozen=True)
class Check:
    name: str
    statement: str
    metrics: tuple[str, ...]
    judge: Callable[["CardDiff", Card, Card], tuple[str, str]]


def _card_judge(name: str) -> Callable[["CardDiff", Card, Card], tuple[str, str]]:
    """An experiment check that is one of the report cards' own checks: the same judge (harness.cards.card_check)."""
    judge = JUDGES[name]
    return lambda diff, before, after: judge(before, after, diff.timing_verdict)


def _check_occupancy(diff: "CardDiff", before: Card, after: Card) -> tuple[str, str]:
    ob, oa = dominant_metric(before, "warps_active_pct"), dominant_metric(after, "warps_active_pct")
    fell = time_fell(diff.timing_verdict)
    if ob is None or oa is None or fell is None:
        return NOT_MEASURABLE, f"warps active {ob} -> {oa}; time verdict {diff.timing_verdict}"
    holds = oa > ob and fell
    return (YES if holds else NO), f"warps active {ob:.1f}% -> {oa:.1f}%, time {diff.timing_verdict}"


def _check_transposes_removed(diff: "CardDiff", before: Card, after: Card) -> tuple[str, str]:
    transposes = [f for f in diff.kernels_removed if _is_layout_conversion(f)]
    remaining = [k.name for k in after.kernels if _is_layout_conversion(kernel_family(k.name))]
    fell = time_fell(diff.timing_verdict)
    if fell is None:
        return NOT_MEASURABLE, f"time verdict {diff.timing_verdict}: not a confirmed change"
    if not any(_is_layout_conversion(kernel_family(k.name)) for k in before.kernels):
        return NOT_MEASURABLE, (
            f"the baseline shows no separate layout-conversion kernel on this backend, so none can be "
            f"removed; time {diff.timing_verdict}"
        )
    holds = not remaining and fell
    gone = ", ".join(transposes) or "none"
    return (YES if holds else NO), (
        f"layout conversions removed: {gone}; still present: {len(remaining)}; time {diff.timing_verdict}"
    )


def _is_layout_conversion(family: str) -> bool:
    lowered = family.lower()
    return any(token in lowered for token in ("nchwtonhwc", "nhwctonchw", "aten::copy_", "aten::contiguous",
                                              "aten::clone", "aten::_to_copy"))


CHECKS: dict[str, Check] = {
    "bytes_and_time_fall": Check(
        "bytes_and_time_fall", "DRAM bytes and time fall together", ("dram_read_mb", "dram_write_mb", "dur_us"),
        _card_judge("bytes_and_time_fall")),
    "effective_flops": Check(
        "effective_flops", "time falls with executed FLOPs not above the nominal ones (no padding or masked work "
        "bought the speed)", ("sm_pct", "tensor_pct", "dur_us"), _card_judge("effective_vs_executed")),
    "lts_bytes": Check("lts_bytes", "lts bytes fall with time", ("l2_pct", "lts_mb", "dur_us"),
                       _card_judge("lts_bytes")),
    "waves_and_duration": Check(
        "waves_and_duration", "the tail wave's waste and the duration fall together",
        ("waves", "sm_cycles_active", "cycles_elapsed", "dur_us"), _card_judge("waves_and_duration")),
    "occupancy": Check("occupancy", "achieved occupancy rises and duration falls",
                       ("warps_active_pct", "waves", "dur_us"), _check_occupancy),
    "stall_breakdown": Check("stall_breakdown", "a dominant warp stall is named", ("warps_active_pct",),
                             _card_judge("stall_breakdown")),
    "transposes_removed": Check(
        "transposes_removed", "layout-conversion kernels are gone and time falls",
        ("dram_read_mb", "dram_write_mb", "dur_us"), _check_transposes_removed),
}

CHECK_FOR_CLASS: dict[str, str] = {
    DRAM_BANDWIDTH_BOUND: "bytes_and_time_fall",
    COMPUTE_BOUND: "effective_flops",
    L2_BANDWIDTH_BOUND: "lts_bytes",
    PARTIAL_WAVE_TAIL: "waves_and_duration",
    LATENCY_OR_OCCUPANCY_LIMITED: "occupancy",
    UNRESOLVED: "stall_breakdown",
}


@dataclass
class CardDiff:
    card: str
    before_us: float | None
    after_us: float | None
    speedup: float | None
    time_basis: str
    timing_verdict: str | None
    class_before: str | None
    class_after: str | None
    kernels_added: list[str]
    kernels_removed: list[str]
    # {family, before_us, after_us}: kernel-duration sums per invocation (KERNEL_SUM_BASIS); divide by
    # `calls` for per original call.
    kernels_matched: list[dict[str, Any]]
    metric_deltas: dict[str, dict[str, float | None]]
    hypothesis: str
    check: str
    verdict: str = NOT_MEASURABLE
    verdict_detail: str = ""
    fair: bool = True
    fairness_note: str = ""
    notes: list[str] = field(default_factory=list)
    # How the time verdict was reached: the paired rounds' interval and band, or why there is none.
    speedup_ci: list[float] | None = None
    verdict_rule: str = ""
    # The SAME band the verdict was judged against (relative: 0.05 is [1/1.05, 1.05]; None: no band
    # decided it), and the row's short account of the numbers that decided it.
    same_band: float | None = None
    verdict_numbers: str = ""
    # The profiler's kernel-duration sums per invocation {before, after}, and each side's original
    # calls per invocation (a batched variant's k): a second, differently labelled quantity beside the time.
    kernel_sum_us: dict[str, float | None] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)
    # The after side's variant {experiment, name, params, label}, and whether it was adopted
    # (None: not a run's baseline-vs-best comparison, e.g. a baseline-only run or two stored reports).
    variant: dict[str, Any] | None = None
    adopted: bool | None = None
    # Each side's variant when both are measured cards (a diff of two runs' files): which is which.
    variant_before: dict[str, Any] | None = None
    variant_after: dict[str, Any] | None = None
    # The report card's own check (its counter_experiment's last clause), judged on this pair.
    card_check: str = ""
    card_verdict: str = NOT_MEASURABLE
    card_verdict_detail: str = ""
    # Where each side's class comes from: ncu, cpu estimate, trace estimate (harness.cards.labels).
    class_source: dict[str, str] = field(default_factory=dict)
    # The class change as it may honestly be printed: one arrow only within one source on one machine.
    class_transition: str = ""
    # A chunk card's row: per contained op card, then "other", {card, before_us, after_us} (harness.chunks).
    op_breakdown: list[dict[str, Any]] | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def variant_of(card: Card) -> dict[str, Any] | None:
    """{experiment, name, params, label} of a measured card (from its harness label); None for a report card."""
    label = card.extra.get("harness")
    if not isinstance(label, dict) or not label.get("variant"):
        return None
    params = dict(label.get("params") or {})
    name = str(label["variant"])
    text = f"{name}({', '.join(f'{k}={v}' for k, v in params.items())})" if params else name
    return {"experiment": label.get("experiment"), "name": name, "params": params, "label": text}


def confirmation_between(before: Card, after: Card) -> dict[str, Any] | None:
    """The paired-rounds verdict recorded on `after`, when it was measured against this very `before`.

    A run's confirm rounds time its baseline and its best variant interleaved; the verdict is kept
    on the variant's card with the run it belongs to. Cards of two different runs were never timed
    together, so no verdict of either run applies to their pair.
    """
    found = after.extra.get("confirmation")
    if not isinstance(found, dict) or not found.get("verdict"):
        return None
    label_b, label_a = before.extra.get("harness") or {}, after.extra.get("harness") or {}
    same_run = label_b.get("run") is not None and label_b.get("run") == label_a.get("run")
    return found if same_run and label_b.get("role") == "baseline" else None


def _fairness(before: Card, after: Card) -> tuple[bool, str]:
    eb, ea = before.extra.get("environment"), after.extra.get("environment")
    if not isinstance(eb, dict) and not isinstance(ea, dict):
        return True, "environment not recorded on either side"
    if not isinstance(eb, dict) or not isinstance(ea, dict):
        # The report's own cards carry no environment: its GPU is not this machine.
        return False, ("not a fair comparison: only one side records its machine (a report card vs a "
                       "re-profile); times are comparable only when re-profiled on the report's GPU")
    keys = ("device_name", "device_kind", "hostname")
    differ = [k for k in keys if eb.get(k) != ea.get(k)]
    if differ:
        what = ", ".join(f"{k}: {eb.get(k)!r} vs {ea.get(k)!r}" for k in differ)
        return False, f"not a fair comparison: measured on different machines ({what})"
    return True, "same machine"


def band_text(band: float) -> str:
    """The SAME band in speedup space: '[0.952, 1.05]' for 5%."""
    return f"[{1 / (1 + band):.3g}, {1 + band:.3g}]"


@dataclass(frozen=True)
class TimeVerdict:
    verdict: str | None
    speedup: float | None
    ci: list[float] | None
    band: float | None  # the SAME band that decided, None when none did
    rule: str  # the rule as applied, with its numbers (the row's `verdict_rule`)
    numbers: str  # the decisive comparison in a few words, for a table cell (the row's `verdict_numbers`)


def _paired_numbers(verdict: str, band: float, confidence: float) -> str:
    position = {"FASTER": "above", "SLOWER": "below", "SAME": "inside"}.get(verdict)
    interval = f"{confidence:.0%} CI"
    if position is None:  # INCONCLUSIVE: the interval straddles a band edge
        return f"{interval} across an edge of the SAME band {band_text(band)}"
    return f"whole {interval} {position} the SAME band {band_text(band)}"


def runs_differ(before: Card, after: Card) -> bool:
    """Both cards name the run that measured them, and the runs differ: never timed together."""
    run_b = (before.extra.get("harness") or {}).get("run")
    run_a = (after.extra.get("harness") or {}).get("run")
    return run_b is not None and run_a is not None and run_b != run_a


def _time_verdict(before: Card, after: Card, both_timed: bool, before_us: float | None, after_us: float | None,
                  threshold: float, confirmation: dict[str, Any] | None) -> TimeVerdict:
    """The time verdict of one before/after pair, with the rule and the numbers that decided it.

    Measured cards are judged only by their paired confirm rounds (harness.cards.noise.paired_verdict);
    without them the verdict is UNCONFIRMED, since two timings taken apart cannot rule out drift.
    Report cards (kernel-duration sums from ncu) keep the single-sample rule.
    """
    speedup = before_us / after_us if before_us and after_us else None
    if confirmation is not None:
        ci, band = confirmation.get("ci"), confirmation.get("band")
        verdict = confirmation["verdict"]
        if ci and isinstance(band, (int, float)):
            numbers = _paired_numbers(verdict, float(band), float(confirmation.get("confidence") or 0.95))
        else:
            numbers, band = "no paired rounds: ratio of the timing medians", None
        return TimeVerdict(verdict, confirmation.get("speedup") or speedup, list(ci) if ci else None, band,
                           confirmation.get("rule") or "", numbers)
    if before_us is None or not before_us or after_us is None:
        return TimeVerdict(None, speedup, None, None, "no times to compare", "no times to compare")
    if both_timed and runs_differ(before, after):
        return TimeVerdict("UNCONFIRMED", speedup, None, None,
                           "UNCONFIRMED: the two cards come from different runs and were never timed together; "
                           "the ratio of their timing medians is shown, nothing adopted",
                           "different runs, never timed together: ratio of the timing medians")
    if both_timed:
        return TimeVerdict("UNCONFIRMED", speedup, None, None,
                           "UNCONFIRMED: the two sides were not timed in paired rounds (timing.confirm_rounds=0 or "
                           "the confirm failed); the ratio of the timing medians is shown, nothing adopted",
                           "no paired rounds: ratio of the timing medians")
    verdict = timing_verdict(before_us, after_us, None, None, threshold=threshold)
    change = after_us / before_us - 1
    return TimeVerdict(verdict, speedup, None, threshold,
                       f"{verdict}: kernel-duration sums differ by {change:+.1%}; SAME within +/-{threshold:.0%} "
                       f"(one sample per side: no interval)",
                       f"kernel sums {change:+.1%}, SAME band +/-{threshold:.0%}")


def diff_cards(
    before: Card,
    after: Card,
    check: str | None = None,
    hypothesis: str | None = None,
    threshold: float = DEFAULT_THRESHOLD,
    confirmation: dict[str, Any] | None = None,
    adopted: bool | None = None,
    report_card: Card | None = None,
) -> CardDiff:
    """`confirmation`: the paired-rounds verdict of this pair (else the one recorded on `after`, if any);
    `report_card`: whose own check to judge (default `before`: measured cards keep their report card's)."""
    both_timed = all(isinstance(c.extra.get("timing"), dict) for c in (before, after))
    before_us, after_us = card_time_us(before, both_timed), card_time_us(after, both_timed)
    confirmation = confirmation or confirmation_between(before, after)
    timed = _time_verdict(before, after, both_timed, before_us, after_us, threshold, confirmation)
    verdict_t = timed.verdict
    fb, fa = _families(before), _families(after)
    recorded = after.extra.get("harness") if isinstance(after.extra.get("harness"), dict) else {}
    check_name = check or recorded.get("check") or CHECK_FOR_CLASS.get(before.primary or UNRESOLVED,
                                                                        "stall_breakdown")
    if check_name not in CHECKS:
        raise ValueError(f"unknown check {check_name!r}; choose from {sorted(CHECKS)}")
    spec = CHECKS[check_name]
    deltas: dict[str, dict[str, float | None]] = {}
    for name in spec.metrics:
        b = sum_metric(before, name) if name.endswith(("_mb", "dur_us")) else dominant_metric(before, name)
        a = sum_metric(after, name) if name.endswith(("_mb", "dur_us")) else dominant_metric(after, name)
        deltas[name] = {"before": b, "after": a, "delta": (a - b) if a is not None and b is not None else None}
    fair, note = _fairness(before, after)
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
    )
    result.verdict, result.verdict_detail = spec.judge(result, before, after)
    own: CardCheck = judge_card_check(report_card or before, before, after, verdict_t)
    result.card_check, result.card_verdict, result.card_verdict_detail = own.text, own.verdict, own.detail
    result.class_source = {"before": class_source(before), "after": class_source(after)}
    result.class_transition = transition(before, after)
    result.notes += [f"{side}: {flag}" for side, card in (("before", before), ("after", after))
                     for flag in flag_over_peak(card)]
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


@dataclass
class ReportDiff:
    cards: list[CardDiff]
    only_before: list[str]
    only_after: list[str]

    def as_dict(self) -> dict[str, Any]:
        return {
            "cards": [c.as_dict() for c in self.cards],
            "only_before": self.only_before,
            "only_after": self.only_after,
        }


def diff_reports(before: Report, after: Report, checks: dict[str, str] | None = None) -> ReportDiff:
    """Match cards by id; `checks` may name the check per card id (else the class's own)."""
    after_by_id = {c.id: c for c in after.cards}
    before_ids = {c.id for c in before.cards}
    diffs = [
        diff_cards(card, after_by_id[card.id], check=(checks or {}).get(card.id))
        for card in before.cards
        if card.id in after_by_id
    ]
    return ReportDiff(
        cards=diffs,
        only_before=[c.id for c in before.cards if c.id not in after_by_id],
        only_after=[c.id for c in after.cards if c.id not in before_ids],
    )


def _fmt(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def speedup_text(d: CardDiff) -> str:
    """'1.12x [1.08, 1.16]' (the 95% interval when the pair was confirmed), or 'n/a'."""
    if not d.speedup:
        return "n/a"
    text = f"{d.speedup:.2f}x"
    return text + (f" [{d.speedup_ci[0]:.2f}, {d.speedup_ci[1]:.2f}]" if d.speedup_ci else "")


def adoption_text(d: CardDiff) -> str:
    """What the run did with the variant: adopted, or the baseline kept and why."""
    label = (d.variant or {}).get("label") or "none"
    if d.adopted is None:
        return label
    if d.adopted:
        return f"adopted: {label}"
    return f"baseline kept: best tried {label}, {speedup_text(d)} {d.timing_verdict or 'n/a'}"


def verdict_text(verdict: str | None, numbers: str) -> str:
    """A table cell: the time verdict with what decided it, 'SLOWER (whole 95% CI below the SAME band [...])'."""
    return f"{verdict or 'n/a'} ({numbers})" if numbers else (verdict or "n/a")


def kernel_sum_text(sums: Mapping[str, float | None], calls: Mapping[str, int]) -> str:
    """'kernel-duration sum per invocation: 5190.67 -> 14451.64 us; per original call: 5190.67 -> 722.58 us (...)'.

    The profiler's sums are per invocation; a batched side also gets its per-call value, labelled, so
    that neither number is mistaken for the other or for the timing median."""
    before, after = sums.get("before"), sums.get("after")
    if before is None and after is None:
        return ""
    text = f"{KERNEL_SUM_BASIS}: {_fmt(before)} -> {_fmt(after)} us"
    calls_b, calls_a = int(calls.get("before") or 1), int(calls.get("after") or 1)
    if calls_b > 1 or calls_a > 1:
        per_call_b = before / calls_b if before is not None else None
        per_call_a = after / calls_a if after is not None else None
        text += (f"; per original call: {_fmt(per_call_b)} -> {_fmt(per_call_a)} us ({calls_b} -> {calls_a} "
                 f"calls per invocation)")
    return text


def basis_header(bases: set[str]) -> str:
    """' (timing median per original call)' for a column whose rows share one basis; else where to find it."""
    if len(bases) == 1:
        return f" ({next(iter(bases))})"
    return " (basis per card below)" if bases else ""


# The time verdict as harness.cards.noise and _time_verdict implement it; every table's caption.
VERDICT_RULE_TEXT = (
    "Time verdict: measured cards of one run are judged on paired rounds, baseline and variant re-timed back "
    "to back in ABBA order. The speedup is the geometric mean of the rounds' ratios (baseline / variant, per "
    "original call), so it need not equal the ratio of the two timing medians shown; its 95% interval is "
    "Student's t on the mean of the rounds' log ratios. FASTER or SLOWER when the whole interval lies above or "
    "below the SAME band [1/(1+b), 1+b], SAME when it lies inside, INCONCLUSIVE when it straddles an edge; "
    "UNCONFIRMED without paired rounds (so always for two runs' cards: never timed together). Report cards "
    "(kernel-duration sums, one sample a side): SAME within the threshold. Each row names the interval and the "
    "band that decided it."
)


def render_markdown(diff: ReportDiff, title: str = "Before/after card diff", intro: str = "") -> str:
    lines = [f"# {title}", ""] + ([intro, ""] if intro else [])
    basis = basis_header({d.time_basis for d in diff.cards})
    lines.append(f"| card | before us{basis} | after us{basis} | speedup [95% CI] | time verdict (what decided it) | "
                 "class before -> after | variant | experiment's check | card's own check |")
    lines.append("|---|---:|---:|---:|---|---|---|---|---|")
    for d in diff.cards:
        lines.append(
            f"| `{d.card}` | {_fmt(d.before_us)} | {_fmt(d.after_us)} | {speedup_text(d)} | "
            f"{verdict_text(d.timing_verdict, d.verdict_numbers)} | {d.class_transition} | {adoption_text(d)} | "
            f"{d.verdict} | {d.card_verdict} |"
        )
    lines += ["", VERDICT_RULE_TEXT]
    for d in diff.cards:
        lines += ["", f"## `{d.card}`", ""]
        if d.variant_before and d.variant_before.get("label"):
            lines.append(f"- Before: `{d.variant_before['label']}` ({d.variant_before.get('experiment')})")
        if d.variant:
            lines.append(f"- {'After' if d.variant_before else 'Variant'}: `{d.variant['label']}` "
                         f"({d.variant.get('experiment')})"
                         + ("" if d.adopted is None else f"; {'adopted' if d.adopted else 'not adopted'}"))
        lines.append(f"- Hypothesis: {d.hypothesis}")
        lines.append(f"- Experiment's check `{d.check}`: **{d.verdict}**: {d.verdict_detail}")
        lines.append(f"- The card's own check \"{d.card_check or 'none'}\": **{d.card_verdict}**: "
                     f"{d.card_verdict_detail}")
        lines.append(f"- Class: {d.class_transition}")
        lines.append(f"- Time ({d.time_basis}): {_fmt(d.before_us)} -> {_fmt(d.after_us)} us, "
                     f"{speedup_text(d)}: {d.verdict_rule or d.timing_verdict}")
        if d.time_basis == TIMING_BASIS and (sums := kernel_sum_text(d.kernel_sum_us, d.calls)):
            lines.append(f"- Kernels, the profiler's durations (not the time above): {sums}")
        if not d.fair:
            lines.append(f"- **{d.fairness_note}**")
        if d.kernels_removed:
            lines.append(f"- Kernels removed: {', '.join(f'`{k}`' for k in d.kernels_removed)}")
        if d.kernels_added:
            lines.append(f"- Kernels added: {', '.join(f'`{k}`' for k in d.kernels_added)}")
        if d.kernels_matched:
            lines += [""] + _kernel_table(d)
        if d.metric_deltas:
            lines.append("")
            lines.append("| metric (kernel sums per original call; other metrics the dominant kernel's) | before | "
                         "after | delta |")
            lines.append("|---|---:|---:|---:|")
            for name, values in d.metric_deltas.items():
                lines.append(
                    f"| {name} | {_fmt(values['before'], 3)} | {_fmt(values['after'], 3)} | "
                    f"{_fmt(values['delta'], 3)} |"
                )
        for note in d.notes:
            lines.append(f"- Note: {note}")
    if diff.only_before:
        lines += ["", "Only in before: " + ", ".join(f"`{c}`" for c in diff.only_before)]
    if diff.only_after:
        lines += ["", "Only in after: " + ", ".join(f"`{c}`" for c in diff.only_after)]
    return "\n".join(lines) + "\n"


def _kernel_table(d: CardDiff) -> list[str]:
    """Matched kernel families, per invocation as profiled; per original call too when a side batches calls."""
    calls_b, calls_a = d.calls.get("before", 1), d.calls.get("after", 1)
    batched = calls_b > 1 or calls_a > 1
    header = f"| kernel family | before us ({KERNEL_SUM_BASIS}) | after us ({KERNEL_SUM_BASIS}) |"
    rule = "|---|---:|---:|"
    if batched:
        header += f" before us per original call (/ {calls_b}) | after us per original call (/ {calls_a}) |"
        rule += "---:|---:|"
    lines = [header, rule]
    for m in d.kernels_matched:
        row = f"| `{m['family']}` | {_fmt(m['before_us'])} | {_fmt(m['after_us'])} |"
        if batched:
            row += f" {_fmt(m['before_us'] / calls_b)} | {_fmt(m['after_us'] / calls_a)} |"
        lines.append(row)
    return lines


# ---------------------------------------------------------------------------------------------
# Naming the two sides of a diff of two files (the CLI's title and its note)


MAX_NAMED_VARIANTS = 3  # a title naming more variants than this is unreadable; it counts them instead


def side_name(report: Report, path: str | Path) -> str:
    """'outputs/x (vae_channels_last: channels_last_3d)': a run's file by its folder (and its name unless it
    is best.json), with the experiments and variants of its cards; a file of report cards by its path."""
    variants: dict[str, list[str]] = {}
    for card in report.cards:
        found = variant_of(card)
        if found is not None:
            labels = variants.setdefault(str(found["experiment"]), [])
            if found["label"] not in labels:
                labels.append(found["label"])
    path = Path(path)
    if not variants:
        return str(path)
    where = str(path.parent) if path.name == "best.json" else str(path)
    named = [f"{experiment}: " + (", ".join(labels) if len(labels) <= MAX_NAMED_VARIANTS else f"{len(labels)} variants")
             for experiment, labels in variants.items()]
    return f"{where} ({'; '.join(named)})"


def comparison_note(before: Report, after: Report) -> str:
    """What kind of comparison two files make, so that two runs' cards are never read as one run's before/after."""
    runs_b, runs_a = _runs(before), _runs(after)
    if not runs_b and not runs_a:
        return ("Report cards compared: each time is the profiler's kernel-duration sum per invocation, one sample "
                "per side.")
    if not runs_b or not runs_a:
        return ("A report's cards against a run's measured cards: the report has no timing, so the times compared "
                "are kernel-duration sums; the measured side's timing median is not among them.")
    if runs_b == runs_a and len(runs_b) == 1:
        return (f"Cards of one run ({next(iter(runs_b))}): a time verdict comes from that run's paired confirm "
                "rounds where the after card records them against this very baseline; otherwise UNCONFIRMED.")
    return (f"Two runs' cards compared, not one run's before and after: before from {', '.join(sorted(runs_b))}, "
            f"after from {', '.join(sorted(runs_a))}. Cards of different runs were never timed together, so "
            "their time verdict is UNCONFIRMED and the speedup shown is the ratio of the two timing medians.")


def _runs(report: Report) -> set[str]:
    """The runs that measured a report's cards (their harness label's `run`)."""
    labels = (card.extra.get("harness") for card in report.cards)
    return {str(label["run"]) for label in labels if isinstance(label, dict) and label.get("run")}
