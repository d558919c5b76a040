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
from typing import Any, Callable, Iterable

from harness.cards.fields import (
    COMPUTE_BOUND,
    DRAM_BANDWIDTH_BOUND,
    L2_BANDWIDTH_BOUND,
    LATENCY_OR_OCCUPANCY_LIMITED,
    PARTIAL_WAVE_TAIL,
    UNRESOLVED,
)
from harness.cards.model import Card, Kernel, Report
from harness.cards.noise import DEFAULT_THRESHOLD, timing_verdict
from harness.cards.rules import dominant

YES, NO, NOT_MEASURABLE = "yes", "no", "not measurable"


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


def calls_per_invocation(card: Card) -> int:
    """How many of the op's original calls one measured invocation performed (batching variants)."""
    variant = card.extra.get("variant")
    calls = variant.get("calls") if isinstance(variant, dict) else None
    return int(calls) if isinstance(calls, int) and calls >= 1 else 1


def card_time_us(card: Card, prefer_timing: bool = True) -> float | None:
    """Time per original call: the harness's timing median when asked and present, else the kernel sum."""
    calls = calls_per_invocation(card)
    timing = card.extra.get("timing")
    if prefer_timing and isinstance(timing, dict) and isinstance(timing.get("median_us"), (int, float)):
        return float(timing["median_us"]) / calls
    if card.summed_kernel_us is not None:
        return float(card.summed_kernel_us) / calls
    durations = [k.metric("dur_us") for k in card.kernels]
    known = [d for d in durations if d is not None]
    return sum(known) / calls if known else None


def _spread(card: Card) -> float | None:
    timing = card.extra.get("timing")
    value = timing.get("spread") if isinstance(timing, dict) else None
    return float(value) if isinstance(value, (int, float)) else None


def _kernel_value(kernel: Kernel, name: str) -> float | None:
    """A report metric, else a counter a richer ncu metric set collected (stall_*, l1tex_mb, lts_mb)."""
    value = kernel.metric(name)
    if value is not None:
        return value
    counters = kernel.extra.get("ncu_counters")
    found = counters.get(name) if isinstance(counters, dict) else None
    return float(found) if isinstance(found, (int, float)) else None


def _sum_metric(card: Card, *names: str) -> float | None:
    """An additive metric (time, bytes) summed over the kernels, per original call of the op."""
    total, seen = 0.0, False
    for kernel in card.kernels:
        for name in names:
            value = _kernel_value(kernel, name)
            if value is not None:
                total += value
                seen = True
    return total / calls_per_invocation(card) if seen else None


def _dominant_metric(card: Card, name: str) -> float | None:
    top = dominant(card.kernels)
    return _kernel_value(top, name) if top else None


def _families(kernels: Iterable[Kernel]) -> dict[str, float]:
    out: dict[str, float] = {}
    for kernel in kernels:
        family = kernel_family(kernel.name)
        out[family] = out.get(family, 0.0) + (kernel.metric("dur_us") or 0.0)
    return out


@dataclass(frozen=True)
class Check:
    name: str
    statement: str
    metrics: tuple[str, ...]
    judge: Callable[["CardDiff", Card, Card], tuple[str, str]]


def _fell(before: float | None, after: float | None) -> bool | None:
    if before is None or after is None:
        return None
    return after < before


def _time_fell(diff: "CardDiff") -> bool | None:
    if diff.timing_verdict is None:
        return None
    return diff.timing_verdict == "FASTER"


def _check_bytes_and_time(diff: "CardDiff", before: Card, after: Card) -> tuple[str, str]:
    b, a = _sum_metric(before, "dram_read_mb", "dram_write_mb"), _sum_metric(after, "dram_read_mb", "dram_write_mb")
    bytes_fell, time_fell = _fell(b, a), _time_fell(diff)
    if bytes_fell is None or time_fell is None:
        return NOT_MEASURABLE, f"DRAM MB before {b}, after {a}; time verdict {diff.timing_verdict}"
    holds = bytes_fell and time_fell
    return (YES if holds else NO), (
        f"DRAM bytes {b:.3f} -> {a:.3f} MB ({'fell' if bytes_fell else 'did not fall'}), time "
        f"{diff.before_us:.2f} -> {diff.after_us:.2f} us ({diff.timing_verdict})"
    )


def _check_effective_flops(diff: "CardDiff", before: Card, after: Card) -> tuple[str, str]:
    flops = before.nominal_mac_flops or after.nominal_mac_flops or after.extra.get("workload", {}).get("flops")
    if not flops or not diff.before_us or not diff.after_us:
        return NOT_MEASURABLE, "no nominal FLOPs or times to compare effective throughput"
    tb, ta = flops / diff.before_us / 1e6, flops / diff.after_us / 1e6
    holds = diff.timing_verdict == "FASTER"
    return (YES if holds else NO), (
        f"effective {tb:.2f} -> {ta:.2f} TFLOP/s at the same nominal FLOPs ({diff.timing_verdict})"
    )


def _check_lts_bytes(diff: "CardDiff", before: Card, after: Card) -> tuple[str, str]:
    b, a = _sum_metric(before, "lts_mb"), _sum_metric(after, "lts_mb")
    if b is None or a is None:
        return NOT_MEASURABLE, "lts bytes not collected (profile with the report+bytes ncu metric set)"
    holds = a < b and diff.timing_verdict == "FASTER"
    return (YES if holds else NO), f"lts bytes {b:.3f} -> {a:.3f} MB, time {diff.timing_verdict}"


def _check_waves_and_duration(diff: "CardDiff", before: Card, after: Card) -> tuple[str, str]:
    wb, wa = _dominant_metric(before, "waves"), _dominant_metric(after, "waves")
    time_fell = _time_fell(diff)
    if wb is None or wa is None or time_fell is None:
        return NOT_MEASURABLE, f"waves {wb} -> {wa}; time verdict {diff.timing_verdict}"
    holds = wa > wb and time_fell
    return (YES if holds else NO), f"waves {wb:.2f} -> {wa:.2f}, time {diff.timing_verdict}"


def _check_occupancy(diff: "CardDiff", before: Card, after: Card) -> tuple[str, str]:
    ob, oa = _dominant_metric(before, "warps_active_pct"), _dominant_metric(after, "warps_active_pct")
    time_fell = _time_fell(diff)
    if ob is None or oa is None or time_fell is None:
        return NOT_MEASURABLE, f"warps active {ob} -> {oa}; time verdict {diff.timing_verdict}"
    holds = oa > ob and time_fell
    return (YES if holds else NO), f"warps active {ob:.1f}% -> {oa:.1f}%, time {diff.timing_verdict}"


def _check_stalls(diff: "CardDiff", before: Card, after: Card) -> tuple[str, str]:
    stalls = after.extra.get("stalls")
    if not isinstance(stalls, dict) or not stalls.get("dominant"):
        note = stalls.get("note") if isinstance(stalls, dict) else None
        return NOT_MEASURABLE, note or "no warp-stall breakdown in the after card"
    share = stalls.get("share")
    detail = f"dominant stall {stalls['dominant']} ({share:.0%} of stall cycles" if isinstance(share, float) \
        else f"dominant stall {stalls['dominant']} (share unknown"
    if stalls.get("decisive"):
        return YES, f"{detail}, decisive): {stalls.get('meaning', '')}"
    return NO, f"{detail}, below the decisive share): no single limiter; see the shares on the card"


def _check_transposes_removed(diff: "CardDiff", before: Card, after: Card) -> tuple[str, str]:
    transposes = [f for f in diff.kernels_removed if _is_layout_conversion(f)]
    remaining = [k.name for k in after.kernels if _is_layout_conversion(kernel_family(k.name))]
    time_fell = _time_fell(diff)
    if time_fell is None:
        return NOT_MEASURABLE, "no times to compare"
    if not any(_is_layout_conversion(kernel_family(k.name)) for k in before.kernels):
        return NOT_MEASURABLE, (
            f"the baseline shows no separate layout-conversion kernel on this backend, so none can be "
            f"removed; time {diff.timing_verdict}"
        )
    holds = not remaining and time_fell
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
        _check_bytes_and_time),
    "effective_flops": Check(
        "effective_flops", "effective TFLOP/s rises at the same nominal FLOPs", ("sm_pct", "tensor_pct", "dur_us"),
        _check_effective_flops),
    "lts_bytes": Check("lts_bytes", "lts bytes fall with time", ("l2_pct", "lts_mb", "dur_us"),
                       _check_lts_bytes),
    "waves_and_duration": Check(
        "waves_and_duration", "waves rise and duration falls", ("waves", "sm_cycles_active", "cycles_elapsed",
                                                                 "dur_us"), _check_waves_and_duration),
    "occupancy": Check("occupancy", "achieved occupancy rises and duration falls",
                       ("warps_active_pct", "waves", "dur_us"), _check_occupancy),
    "stall_breakdown": Check("stall_breakdown", "a dominant warp stall is named", ("warps_active_pct",),
                             _check_stalls),
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

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


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


def diff_cards(
    before: Card,
    after: Card,
    check: str | None = None,
    hypothesis: str | None = None,
    threshold: float = DEFAULT_THRESHOLD,
) -> CardDiff:
    both_timed = all(isinstance(c.extra.get("timing"), dict) for c in (before, after))
    before_us, after_us = card_time_us(before, both_timed), card_time_us(after, both_timed)
    speedup = before_us / after_us if before_us and after_us else None
    verdict_t = None
    if before_us and after_us is not None:
        spreads = (_spread(before), _spread(after)) if both_timed else (None, None)
        verdict_t = timing_verdict(before_us, after_us, *spreads, threshold=threshold)
    fb, fa = _families(before.kernels), _families(after.kernels)
    check_name = check or CHECK_FOR_CLASS.get(before.primary or UNRESOLVED, "stall_breakdown")
    if check_name not in CHECKS:
        raise ValueError(f"unknown check {check_name!r}; choose from {sorted(CHECKS)}")
    spec = CHECKS[check_name]
    deltas: dict[str, dict[str, float | None]] = {}
    for name in spec.metrics:
        b = _sum_metric(before, name) if name.endswith(("_mb", "dur_us")) else _dominant_metric(before, name)
        a = _sum_metric(after, name) if name.endswith(("_mb", "dur_us")) else _dominant_metric(after, name)
        deltas[name] = {"before": b, "after": a, "delta": (a - b) if a is not None and b is not None else None}
    fair, note = _fairness(before, after)
    result = CardDiff(
        card=after.id if after.id == before.id else f"{before.id} -> {after.id}",
        before_us=before_us,
        after_us=after_us,
        speedup=speedup,
        time_basis="timing median" if both_timed else "sum of kernel durations",
        timing_verdict=verdict_t,
        class_before=before.primary,
        class_after=after.primary,
        kernels_added=sorted(set(fa) - set(fb)),
        kernels_removed=sorted(set(fb) - set(fa)),
        kernels_matched=[
            {"family": f, "before_us": fb[f], "after_us": fa[f]} for f in sorted(set(fb) & set(fa))
        ],
        metric_deltas=deltas,
        hypothesis=hypothesis or before.counter_experiment or spec.statement,
        check=check_name,
        fair=fair,
        fairness_note=note,
    )
    result.verdict, result.verdict_detail = spec.judge(result, before, after)
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


def render_markdown(diff: ReportDiff, title: str = "Before/after card diff") -> str:
    lines = [f"# {title}", ""]
    lines.append("| card | before us | after us | speedup | time | class before -> after | check holds |")
    lines.append("|---|---:|---:|---:|---|---|---|")
    for d in diff.cards:
        speed = f"{d.speedup:.2f}x" if d.speedup else "n/a"
        lines.append(
            f"| `{d.card}` | {_fmt(d.before_us)} | {_fmt(d.after_us)} | {speed} | {d.timing_verdict or 'n/a'} | "
            f"{d.class_before or 'none'} -> {d.class_after or 'none'} | {d.verdict} |"
        )
    lines.append("")
    lines.append(
        "Time verdict: SAME when the median change is within max(5%, the two relative spreads); "
        "times are timing medians when both cards carry them, else kernel-duration sums."
    )
    for d in diff.cards:
        lines += ["", f"## `{d.card}`", ""]
        lines.append(f"- Hypothesis: {d.hypothesis}")
        lines.append(f"- Check `{d.check}`: **{d.verdict}**: {d.verdict_detail}")
        lines.append(f"- Class: {d.class_before or 'none'} -> {d.class_after or 'none'}")
        lines.append(f"- Time ({d.time_basis}): {_fmt(d.before_us)} -> {_fmt(d.after_us)} us ({d.timing_verdict})")
        if not d.fair:
            lines.append(f"- **{d.fairness_note}**")
        if d.kernels_removed:
            lines.append(f"- Kernels removed: {', '.join(f'`{k}`' for k in d.kernels_removed)}")
        if d.kernels_added:
            lines.append(f"- Kernels added: {', '.join(f'`{k}`' for k in d.kernels_added)}")
        if d.kernels_matched:
            lines.append("")
            lines.append("| kernel family | before us | after us |")
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
