"""The device's physical floor for a card's work: a variant timed below it did not do the work.

A call cannot take less time than its minimum bytes at the device's peak bandwidth, nor than its FLOPs at
the device's highest math peak (the floor uses the fastest math mode the device has, whatever the variant
declares, so that no honest lowering of precision can fall under it). A batched invocation of k calls
moves at least one call's minimum bytes (the weight shared, every other byte per call) and does k calls'
FLOPs, so its floor is max(min_bytes / bandwidth, k x FLOPs / peak).

A time below floor / slack is infeasible: "faster than the device can do this work: stale, memoized or
skipped". The slack is per device class (`timing.physics_slack`): on a GPU the peaks are the device's own
and a kernel at 1/2 of the floor is already impossible; on a CPU the bandwidth is a measured copy rate
that data resident in the caches beats several-fold, and the matmul peak a short measurement, so the
slack is wider there. A variant that returns an output made when it was prepared (a replayed buffer, a
cache) takes about a microsecond whatever the card; the honest variants of the default runs sit above
the floor (their ratios are on every card, `physics`, so the slack is checked against them).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from harness.cards.peaks import RecordedPeaks, recorded_peaks

MATH_DTYPES = ("float32", "bfloat16", "float16")


@dataclass(frozen=True)
class Floor:
    """One invocation's physical floor on this device, and what it was derived from."""

    floor_us: float
    bytes_us: float | None
    flops_us: float | None
    bandwidth: float | None  # bytes/s
    compute: float | None  # FLOP/s, the highest of the device's math peaks
    source: str

    def judge(self, median_us: float, slack: float) -> tuple[str | None, dict[str, Any]]:
        """Why `median_us` (one invocation) is impossible here, or None; the evidence for the card."""
        ratio = median_us / self.floor_us if self.floor_us > 0 else None
        evidence = {**asdict(self), "median_us": median_us, "over_floor": ratio, "slack": slack}
        if ratio is None or ratio >= 1.0 / slack:
            return None, evidence
        return (f"faster than the device can do this work: stale, memoized or skipped ({median_us:.3g} us per "
                f"invocation, {ratio:.2g}x of the {self.floor_us:.3g} us floor; at most {slack:g}x below it is "
                f"allowed: timing.physics_slack)"), evidence


def device_peaks(device: str) -> list[RecordedPeaks]:
    """The device's recorded peaks for each math dtype it has (CPU: measured and cached; GPU: its table)."""
    if device.startswith("cuda"):
        from harness.profile.gpu_peaks import for_current_device

        table = for_current_device().to_dict()
        found = [recorded_peaks(table, dtype, tf32=True) for dtype in MATH_DTYPES]
    else:
        from harness.profile.cpu_peaks import get_cpu_peaks

        measured = get_cpu_peaks().as_dict()
        found = [recorded_peaks(measured, dtype) for dtype in MATH_DTYPES]
    return [p for p in found if p is not None]


def floor_for(flops: float, min_bytes: float, calls: int, peaks: list[RecordedPeaks],
              baseline_per_call_us: float | None = None) -> Floor | None:
    """The floor of one invocation of `calls` calls, each of `flops` and `min_bytes`; None without peaks.

    A peak measured while the machine was busy is too low, and the floor from it too high; the baseline's
    own measured time (per call, times `calls`) proves the device can do the work that fast, so the floor
    is never above it: a variant is refused only when it is `slack` times faster than both."""
    bandwidth = max((p.bandwidth for p in peaks if p.bandwidth), default=None)
    compute = max((p.compute for p in peaks if p.compute), default=None)
    bytes_us = min_bytes / bandwidth * 1e6 if bandwidth and min_bytes else None
    flops_us = calls * flops / compute * 1e6 if compute and flops else None
    parts = [t for t in (bytes_us, flops_us) if t]
    if not parts:
        return None
    source = ", ".join(s for s in {p.bandwidth_source for p in peaks} | {p.compute_source for p in peaks} if s)
    floor = max(parts)
    if baseline_per_call_us and baseline_per_call_us * calls < floor:
        floor = baseline_per_call_us * calls
        source += "; capped at the baseline's own measured time (the peaks read low)"
    return Floor(floor, bytes_us, flops_us, bandwidth, compute, source)
