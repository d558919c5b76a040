"""A diff as Markdown (diff.md, the CLI's diff), and the table cells the run's summaries share with it.

Every time printed names its basis (timing median per original call, or kernel-duration sum per
invocation), every verdict what decided it, and a batched side's kernel sums come with their per-call
values, so that no number here can be mistaken for another. summary.md and the end-to-end view reuse
these cells (speedup with interval, adoption, verdict) so that all tables say the same thing alike.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from harness.cards.cells import fmt
from harness.cards.diff_rows import CardDiff, ReportDiff
from harness.cards.layout_conversions import LayoutConversions
from harness.cards.measures import KERNEL_SUM_BASIS, TIMING_BASIS
from harness.cards.time_verdict import VERDICT_RULE_TEXT


def speedup_text(d: CardDiff) -> str:
    """'1.12x [1.08, 1.16]' (the 95% interval when the pair was confirmed), or 'n/a'."""
    return interval_text(d.speedup, d.speedup_ci)


def interval_text(speedup: float | None, ci: Sequence[float] | None) -> str:
    """A speedup with its interval, for a row held as a CardDiff or, on the run's page, as diff.json's dict."""
    if not speedup:
        return "n/a"
    return f"{speedup:.2f}x" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")


def adoption_text(d: CardDiff) -> str:
    """What the run did with the variant: adopted, or the baseline kept and why."""
    label = (d.variant or {}).get("label") or "none"
    if d.adopted is None:
        return label
    return outcome_text(label, d.adopted, speedup_text(d), d.timing_verdict)


def outcome_text(label: str, adopted: bool, speedup: str, verdict: str | None) -> str:
    """'adopted: X' or 'baseline kept: best tried X, 0.91x SLOWER', in every table's words."""
    if adopted:
        return f"adopted: {label}"
    return f"baseline kept: best tried {label}, {speedup} {verdict or 'n/a'}"


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
    text = f"{KERNEL_SUM_BASIS}: {fmt(before)} -> {fmt(after)} us"
    calls_b, calls_a = int(calls.get("before") or 1), int(calls.get("after") or 1)
    if calls_b > 1 or calls_a > 1:
        per_call_b = before / calls_b if before is not None else None
        per_call_a = after / calls_a if after is not None else None
        text += (f"; per original call: {fmt(per_call_b)} -> {fmt(per_call_a)} us ({calls_b} -> {calls_a} "
                 f"calls per invocation)")
    return text


def basis_header(bases: set[str]) -> str:
    """' (timing median per original call)' for a column whose rows share one basis; else where to find it."""
    if len(bases) == 1:
        return f" ({next(iter(bases))})"
    return " (basis per card below)" if bases else ""


def render_markdown(diff: ReportDiff, title: str = "Before/after card diff", intro: str = "") -> str:
    lines = [f"# {title}", ""] + ([intro, ""] if intro else [])
    basis = basis_header({d.time_basis for d in diff.cards})
    lines.append(f"| card | before us{basis} | after us{basis} | speedup [95% CI] | time verdict (what decided it) | "
                 "class before -> after | variant | experiment's check | card's own check |")
    lines.append("|---|---:|---:|---:|---|---|---|---|---|")
    for d in diff.cards:
        lines.append(
            f"| `{d.card}` | {fmt(d.before_us)} | {fmt(d.after_us)} | {speedup_text(d)} | "
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
        lines.append(f"- Time ({d.time_basis}): {fmt(d.before_us)} -> {fmt(d.after_us)} us, {_time_verdict(d)}")
        if d.time_basis == TIMING_BASIS and (sums := kernel_sum_text(d.kernel_sum_us, d.calls)):
            lines.append(f"- Kernels, the profiler's durations (not the time above): {sums}")
        if not d.fair:
            lines.append(f"- **{d.fairness_note}**")
        if d.kernels_removed:
            lines.append(f"- Kernels removed: {', '.join(f'`{k}`' for k in d.kernels_removed)}")
        if d.kernels_added:
            lines.append(f"- Kernels added: {', '.join(f'`{k}`' for k in d.kernels_added)}")
        conversions = {side: LayoutConversions(**found) for side, found in d.layout_conversions.items()}
        if any(found.kernels for found in conversions.values()):
            lines.append("- Layout conversions: " + "; ".join(f"{side} {found.text()}"
                                                             for side, found in conversions.items()))
        if d.kernels_matched:
            lines += [""] + _kernel_table(d)
        if d.metric_deltas:
            lines.append("")
            lines.append("| metric (kernel sums per original call; other metrics the dominant kernel's) | before | "
                         "after | delta |")
            lines.append("|---|---:|---:|---:|")
            for name, values in d.metric_deltas.items():
                lines.append(
                    f"| {name} | {fmt(values['before'], 3)} | {fmt(values['after'], 3)} | "
                    f"{fmt(values['delta'], 3)} |"
                )
        for note in d.notes:
            lines.append(f"- Note: {note}")
    if diff.only_before:
        lines += ["", "Only in before: " + ", ".join(f"`{c}`" for c in diff.only_before)]
    if diff.only_after:
        lines += ["", "Only in after: " + ", ".join(f"`{c}`" for c in diff.only_after)]
    return "\n".join(lines) + "\n"


def _time_verdict(d: CardDiff) -> str:
    """The speedup and what decided its verdict, said once: a paired rule already starts with the interval."""
    speedup, rule = speedup_text(d), d.verdict_rule or d.timing_verdict or "n/a"
    return rule if rule.startswith(speedup) else f"{speedup}: {rule}"


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
        row = f"| `{m['family']}` | {fmt(m['before_us'])} | {fmt(m['after_us'])} |"
        if batched:
            row += f" {fmt(m['before_us'] / calls_b)} | {fmt(m['after_us'] / calls_a)} |"
        lines.append(row)
    return lines
