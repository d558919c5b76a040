"""Where a card sits under its device's roofs: the peaks its profiler used, and achieved FLOP/s per byte.

The roofs are the ones the card's profiler judged it against (extra["peaks"]: measured CPU peaks, or
a GPU table's entries), so the plot shows the same ceilings the class was decided under. Both sides
of a diff are placed on one byte basis (the profiler's DRAM traffic when both have it, else the
workload's compulsory minimum), so that their points compare.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from harness.cards.measures import calls_per_invocation, card_time_us, dram_bytes
from harness.cards.model import Card
from harness.cards.peaks import is_cpu_layout, recorded_peaks


@dataclass
class Roofs:
    """A device's compute and DRAM-bandwidth peaks in FLOP/s and bytes/s, and where they come from."""

    compute_flops_s: float
    bandwidth_bytes_s: float
    label: str


def device_roofs(card: Card) -> Roofs | None:
    """The roofs the profiler used for this card (extra["peaks"], harness.cards.peaks); None if absent."""
    peaks = card.extra.get("peaks")
    dtype = str((card.extra.get("workload") or {}).get("dtype") or "float32")
    found = recorded_peaks(peaks, dtype)
    if found is None or found.compute is None or found.bandwidth is None or not isinstance(peaks, Mapping):
        return None  # (found is None whenever peaks is not a mapping)
    if is_cpu_layout(peaks):
        label = f"{peaks.get('cpu_model') or 'CPU'} {dtype}, measured"
    else:
        label = f"{found.device} {peaks.get('compute_peak')}, {found.origin or ''}"
    return Roofs(found.compute, found.bandwidth, label)


def _dram_bytes_per_call(card: Card) -> float | None:
    """The profiler's DRAM read + write per original call, in bytes; None when not collected or zero."""
    total = dram_bytes(card)
    return total / calls_per_invocation(card) if total is not None and total > 0 else None


def roofline_points(cards: list[tuple[str, Card]]) -> tuple[list[tuple[str, float, float]], str] | None:
    """(label, FLOP/byte, FLOP/s) per card, all on one byte basis so the points compare."""
    measured = [_dram_bytes_per_call(c) for _, c in cards]
    use_measured = all(b is not None for b in measured)
    points = []
    for (label, card), dram in zip(cards, measured):
        workload = card.extra.get("workload") or {}
        flops = workload.get("flops") or card.nominal_mac_flops
        nbytes = dram if use_measured else workload.get("min_bytes")
        seconds = (card_time_us(card) or 0.0) * 1e-6
        if not flops or not nbytes or seconds <= 0:
            return None
        points.append((label, flops / nbytes, flops / seconds))
    basis = ("bytes: the profiler's DRAM read + write per original call" if use_measured
             else "bytes: the workload's compulsory minimum (min_bytes), the same for both sides")
    return points, basis
