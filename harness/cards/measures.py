"""What a card says about one quantity, per original call of its op: time, summed or dominant metrics, stalls.

The before/after diff (harness.cards.diff) and the card's own check (harness.cards.card_check) read
cards through these accessors, so that both count a batched invocation's kernels per original call
and read a richer ncu metric set's counters the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from harness.cards.launches import per_invocation_value
from harness.cards.model import CAPTURE_KEY, Card, Kernel
from harness.cards.rules import dominant

YES, NO, NOT_MEASURABLE = "yes", "no", "not measurable"


def calls_per_invocation(card: Card) -> int:
    """How many of the op's original calls one measured invocation performed (batching variants)."""
    variant = card.extra.get("variant")
    calls = variant.get("calls") if isinstance(variant, dict) else None
    return int(calls) if isinstance(calls, int) and calls >= 1 else 1


# The two kinds of time a card holds, named the same way in every table that prints one of them:
# the harness's wall-clock timing (measured cards only) and the profiler's kernel durations. They
# differ (launch gaps, host work, a profiler's own overhead), so a table says which one it shows.
TIMING_BASIS = "timing median per original call"
KERNEL_SUM_BASIS = "kernel-duration sum per invocation"
KERNEL_SUM_PER_CALL_BASIS = "kernel-duration sum per original call (per invocation / calls)"


def timing_median_us(card: Card) -> float | None:
    """The harness's timing median of one invocation (extra.timing.median_us); None on a report card."""
    timing = card.extra.get("timing")
    median = timing.get("median_us") if isinstance(timing, dict) else None
    return float(median) if isinstance(median, (int, float)) and not isinstance(median, bool) else None


def kernel_sum_us(card: Card) -> float | None:
    """The profiler's kernel durations of one invocation, summed (summed_kernel_us, else the kernels' dur_us, each
    entry's launches counted: harness.cards.launches)."""
    if card.summed_kernel_us is not None:
        return float(card.summed_kernel_us)
    known = [d for d in (per_invocation_value(card, k, k.metric("dur_us")) for k in card.kernels) if d is not None]
    return sum(known) if known else None


def card_time_us(card: Card, prefer_timing: bool = True) -> float | None:
    """Time per original call: the harness's timing median when asked and present, else the kernel sum."""
    calls = calls_per_invocation(card)
    median = timing_median_us(card) if prefer_timing else None
    total = median if median is not None else kernel_sum_us(card)
    return total / calls if total is not None else None


def time_basis(card: Card, prefer_timing: bool = True) -> str:
    """What `card_time_us(card, prefer_timing)` returns, in the words every table uses."""
    if prefer_timing and timing_median_us(card) is not None:
        return TIMING_BASIS
    return KERNEL_SUM_BASIS if calls_per_invocation(card) == 1 else KERNEL_SUM_PER_CALL_BASIS


def captured(card: Card) -> dict[str, Any] | None:
    """What harness.capture recorded of the card's op in the model (its calls, time and share of the forward);
    None for a card no capture made. A measured card keeps its report card's record."""
    record = card.extra.get(CAPTURE_KEY)
    return record if isinstance(record, dict) else None


# Where a card's time in the model came from, strongest first (time_in_model).
FROM_SHARE = "the capture's share of the forward"
FROM_CALLS = "per-invocation kernel time x the captured calls"
FROM_KERNELS = "the report's kernel-duration sum per invocation (no call count)"


@dataclass(frozen=True)
class TimeInModel:
    """A card's time in one forward of its model: `us`, from `source`; with its share and calls where known."""

    us: float
    source: str
    share: float | None = None  # of the forward
    calls: int | None = None  # of the op, per forward

    def line(self) -> str:
        """'12.3% of the forward, 13 calls' (what is known), for a table cell."""
        parts = [f"{self.share:.1%} of the forward" if self.share is not None else None,
                 f"{self.calls} call{'s' if self.calls != 1 else ''}" if self.calls is not None else None]
        return ", ".join(p for p in parts if p) or "calls not known"


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def time_in_model(card: Card) -> TimeInModel | None:
    """The card's time in the model, the one ranking of cards by what they cost the model: a capture's time in
    the forward (its share of the plain forward's time); else the report's kernel-duration sum per invocation
    times the calls where the card records them; else that sum alone, as the report gives it; None without a
    time (the report's FlashAttention cards)."""
    record = captured(card) or {}
    share, calls = _number(record.get("share_of_forward")), _number(record.get("calls"))
    whole_calls = int(calls) if calls is not None else None
    if (us := _number(record.get("time_us"))) is not None:
        return TimeInModel(us, FROM_SHARE, share, whole_calls)
    per_invocation = _number(card.summed_kernel_us)
    if per_invocation is None:
        return None
    if whole_calls is not None:
        return TimeInModel(per_invocation * whole_calls, FROM_CALLS, share, whole_calls)
    return TimeInModel(per_invocation, FROM_KERNELS)


def time_sources(cards: Iterable[Card]) -> str:
    """Where the cards' times in the model came from, each source with its count of cards."""
    counts: dict[str, int] = {}
    for card in cards:
        found = time_in_model(card)
        source = found.source if found is not None else "no time (the report gives none)"
        counts[source] = counts.get(source, 0) + 1
    return "; ".join(f"{source} ({n} card{'s' if n != 1 else ''})" for source, n in counts.items()) or "no card"


def workload_scale(card: Card) -> float:
    """The scale a card's op ran at: a measured card's `workload.scale`; a report card is the op at full size."""
    workload = card.extra.get("workload")
    scale = _number(workload.get("scale")) if isinstance(workload, dict) else None
    return 1.0 if scale is None else scale


def scale_crossing(before: Card, after: Card) -> str | None:
    """Why two cards' times are not one op's (each ran at another workload scale: other shapes), or None."""
    scale_b, scale_a = workload_scale(before), workload_scale(after)
    if scale_b == scale_a:
        return None
    return (f"scale: {scale_b:g} vs {scale_a:g} (workload.scale shrinks the op's shapes: the two sides ran "
            "different shapes, so their times are not compared)")


def kernel_value(kernel: Kernel, name: str) -> float | None:
    """A report metric, else a counter a richer ncu metric set collected (stall_*, l1tex_mb, lts_mb)."""
    value = kernel.metric(name)
    if value is not None:
        return value
    counters = kernel.extra.get("ncu_counters")
    found = counters.get(name) if isinstance(counters, dict) else None
    return float(found) if isinstance(found, (int, float)) else None


def sum_metric(card: Card, *names: str) -> float | None:
    """An additive metric (time, bytes) summed over the kernels, per original call of the op."""
    total, seen = 0.0, False
    for kernel in card.kernels:
        for name in names:
            value = per_invocation_value(card, kernel, kernel_value(kernel, name))
            if value is not None:
                total += value
                seen = True
    return total / calls_per_invocation(card) if seen else None


def dram_bytes(card: Card) -> float | None:
    """The profiler's DRAM read + write of one invocation, in bytes (MB in the report are 1e6 B); None if not
    collected."""
    total, seen = 0.0, False
    for kernel in card.kernels:
        for name in ("dram_read_mb", "dram_write_mb"):
            value = per_invocation_value(card, kernel, kernel.metric(name))
            if value is not None:
                total, seen = total + value * 1e6, True
    return total if seen else None


def dominant_metric(card: Card, name: str) -> float | None:
    top = dominant(card.kernels)
    return kernel_value(top, name) if top else None


def stall_verdict(card: Card) -> tuple[str, str]:
    """Whether the card's warp-stall breakdown names one decisive limiter, with the shares."""
    stalls = card.extra.get("stalls")
    if isinstance(stalls, dict) and stalls.get("refused"):  # another kernel's stalls say nothing of the report's
        return NOT_MEASURABLE, f"the profiled kernel is not shown to be the report's: {stalls['refused']}"
    if not isinstance(stalls, dict) or not stalls.get("dominant"):
        note = stalls.get("note") if isinstance(stalls, dict) else None
        return NOT_MEASURABLE, note or "no warp-stall breakdown in the after card"
    share = stalls.get("share")
    detail = f"dominant stall {stalls['dominant']} ({share:.0%} of stall cycles" if isinstance(share, float) \
        else f"dominant stall {stalls['dominant']} (share unknown"
    if stalls.get("decisive"):
        return YES, f"{detail}, decisive): {stalls.get('meaning', '')}"
    return NO, f"{detail}, below the decisive share): no single limiter; see the shares on the card"
