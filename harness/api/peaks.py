"""The peaks a card's achieved rate is judged against, for an experiment's evidence: the math peak for a dtype
(`card_peaks`, `compute_peak`), the DRAM bandwidth beside it, and the device's SM count (`sm_count`).

Re-exported from harness.profile.peak_lookup, which reads the card's recorded peaks and, on a CUDA device whose
card recorded none, the device's entry in the peak table.
"""

from __future__ import annotations

from harness.profile.peak_lookup import card_peaks, compute_peak, sm_count

__all__ = ["card_peaks", "compute_peak", "sm_count"]
