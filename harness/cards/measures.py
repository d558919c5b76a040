"""What a card says about one quantity, per original call of its op: time, summed or dominant metrics, stalls.

The before/after diff (harness.cards.diff) and the card's own check (harness.cards.card_check) read
cards through these accessors, so that both count a batched invocation's kernels per original call
and read a richer ncu metric set's counters the same way.
"""

from __future__ import annotations

from harness.cards.model import Card, Kernel
from harness.cards.rules import dominant

YES, NO, NOT_MEASURABLE = "yes", "no", "not measurable"


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
            value = kernel_value(kernel, name)
            if value is not None:
                total += value
                seen = True
    return total / calls_per_invocation(card) if seen else None


def dominant_metric(card: Card, name: str) -> float | None:
    top = dominant(card.kernels)
    return kernel_value(top, name) if top else None


def stall_verdict(card: Card) -> tuple[str, str]:
    """Whether the card's warp-stall breakdown names one decisive limiter, with the shares."""
    stalls = card.extra.get("stalls")
    if not isinstance(stalls, dict) or not stalls.get("dominant"):
        note = stalls.get("note") if isinstance(stalls, dict) else None
        return NOT_MEASURABLE, note or "no warp-stall breakdown in the after card"
    share = stalls.get("share")
    detail = f"dominant stall {stalls['dominant']} ({share:.0%} of stall cycles" if isinstance(share, float) \
        else f"dominant stall {stalls['dominant']} (share unknown"
    if stalls.get("decisive"):
        return YES, f"{detail}, decisive): {stalls.get('meaning', '')}"
    return NO, f"{detail}, below the decisive share): no single limiter; see the shares on the card"
