"""Before/after diff of cards: time, class transition, kernels by family, named metrics, verdicts.

Two verdicts, kept apart:
- `timing_verdict`: FASTER / SLOWER / SAME by the stated noise rule (harness.cards.noise);
- `verdict`: does the counter-experiment's own check hold? "yes" / "no" / "not measurable", with
  the numbers in `verdict_detail`. The check is the one the before card's class proposes, unless the
  experiment names its own (see CHECKS).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

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
    NO,
    NOT_MEASURABLE,
    YES,
    calls_per_invocation,
    card_time_us,
    dominant_metric,
    sum_metric,
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
    """Kernel time by family, per original call of the op (a batched invocation's time / its calls)."""
    calls = calls_per_invocation(card)
    out: dict[str, float] = {}
    for kernel in card.kernels:
        family = kernel_family(kernel.name)
        out[family] = out.get(family, 0.0) + (kernel.metric("dur_us") or 0.0) / calls
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


def _time_verdict(before: Card, after: Card, both_timed: bool, before_us: float | None, after_us: float | None,
                  threshold: float, confirmation: dict[str, Any] | None
                  ) -> tuple[str | None, float | None, list[float] | None, str]:
    """(verdict, speedup, 95% interval, the rule as applied) for one before/after pair.

    Measured cards are judged only by their paired confirm rounds (harness.cards.noise.paired_verdict);
    without them the verdict is UNCONFIRMED, since two timings taken apart cannot rule out drift.
    Report cards (kernel-duration sums from ncu) keep the single-sample rule.
    """
    speedup = before_us / after_us if before_us and after_us else None
    if confirmation is not None:
        ci = confirmation.get("ci")
        return (confirmation["verdict"], confirmation.get("speedup") or speedup, list(ci) if ci else None,
                confirmation.get("rule") or "")
    if before_us is None or not before_us or after_us is None:
        return None, speedup, None, "no times to compare"
    if both_timed:
        return ("UNCONFIRMED", speedup, None,
                "UNCONFIRMED: the two sides were not timed in paired rounds (timing.confirm_rounds=0, the "
                "confirm failed, or they come from different runs); the ratio of medians is shown, nothing adopted")
    verdict = timing_verdict(before_us, after_us, None, None, threshold=threshold)
    return verdict, speedup, None, (f"{verdict}: kernel-duration sums differ by {after_us / before_us - 1:+.1%}; "
                                    f"SAME within +/-{threshold:.0%} (one sample per side: no interval)")


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
    verdict_t, speedup, ci, rule = _time_verdict(before, after, both_timed, before_us, after_us, threshold,
                                                  confirmation)
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
        speedup=speedup,
        time_basis=("timing median per original call" if both_timed
                    else "sum of kernel durations per original call"),
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
        speedup_ci=ci,
        verdict_rule=rule,
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


def render_markdown(diff: ReportDiff, title: str = "Before/after card diff") -> str:
    lines = [f"# {title}", ""]
    lines.append("| card | before us | after us | speedup [95% CI] | time | class before -> after | variant | "
                 "experiment's check | card's own check |")
    lines.append("|---|---:|---:|---:|---|---|---|---|---|")
    for d in diff.cards:
        lines.append(
            f"| `{d.card}` | {_fmt(d.before_us)} | {_fmt(d.after_us)} | {speedup_text(d)} | "
            f"{d.timing_verdict or 'n/a'} | {d.class_transition} | {adoption_text(d)} | {d.verdict} | "
            f"{d.card_verdict} |"
        )
    lines.append("")
    lines.append(
        "Time verdict: measured cards are judged on paired rounds of baseline and variant timed back to back "
        "(ABBA order): the speedup is the geometric mean of the rounds' ratios with its 95% interval; FASTER "
        "or SLOWER only when the whole interval lies outside the SAME band, SAME when it lies inside, "
        "INCONCLUSIVE otherwise, UNCONFIRMED without paired rounds. Each card's line below states the rule "
        "with its numbers. Times are per original call of the op."
    )
    for d in diff.cards:
        lines += ["", f"## `{d.card}`", ""]
        if d.variant_before and d.variant_before.get("label") and (d.variant_before != d.variant_after):
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
        if not d.fair:
            lines.append(f"- **{d.fairness_note}**")
        if d.kernels_removed:
            lines.append(f"- Kernels removed: {', '.join(f'`{k}`' for k in d.kernels_removed)}")
        if d.kernels_added:
            lines.append(f"- Kernels added: {', '.join(f'`{k}`' for k in d.kernels_added)}")
        if d.kernels_matched:
            lines.append("")
            lines.append("| kernel family | before us (kernel sum per call) | after us (kernel sum per call) |")
            lines.append("|---|---:|---:|")
            for m in d.kernels_matched:
                lines.append(f"| `{m['family']}` | {_fmt(m['before_us'])} | {_fmt(m['after_us'])} |")
        if d.metric_deltas:
            lines.append("")
            lines.append("| metric | before | after | delta |")
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
