"""The before/after timing verdict, in the manner of nvbench's compare script.

Rule: with medians b (before) and a (after) and relative spreads sb, sa (interquartile range over
median; 0 when unknown), the change is SAME when |a - b| / b <= max(threshold, sb + sa); otherwise
FASTER when a < b and SLOWER when a > b. The default threshold is 5%.
"""

from __future__ import annotations

from typing import Literal

Verdict = Literal["FASTER", "SLOWER", "SAME"]
DEFAULT_THRESHOLD = 0.05


def noise_band(before_spread: float | None, after_spread: float | None, threshold: float) -> float:
    return max(threshold, (before_spread or 0.0) + (after_spread or 0.0))


def timing_verdict(
    before_us: float,
    after_us: float,
    before_spread: float | None = None,
    after_spread: float | None = None,
    threshold: float = DEFAULT_THRESHOLD,
) -> Verdict:
    if before_us <= 0:
        raise ValueError("before_us must be positive")
    change = (after_us - before_us) / before_us
    if abs(change) <= noise_band(before_spread, after_spread, threshold):
        return "SAME"
    return "FASTER" if change < 0 else "SLOWER"
