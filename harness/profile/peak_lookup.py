"""The math peak, DRAM bandwidth and SM count a card's achieved rate is judged against.

Read from the card's recorded peaks (harness.cards.peaks: measured CPU peaks, or the torch_cuda backend's
GPU table); the ncu backend records none, so on a CUDA device the device's entry in
harness.profile.gpu_peaks stands in.
"""

from __future__ import annotations

from typing import Any

import torch

from harness.cards.peaks import RecordedPeaks, recorded_peaks


def card_peaks(peaks: Any, dtype: str, device: str, tf32: bool | None = None) -> RecordedPeaks | None:
    """The card's peaks for math in `dtype`; float32 on a GPU is TF32 by `tf32`, by default as torch's matmul
    switch allows it now (a convolution follows cuDNN's switch instead: its caller says which)."""
    tf32 = bool(torch.backends.cuda.matmul.allow_tf32) if tf32 is None else tf32
    found = recorded_peaks(peaks, dtype, tf32=tf32)
    if (found is None or found.compute is None) and str(device).startswith("cuda") and torch.cuda.is_available():
        from harness.profile.gpu_peaks import for_current_device

        found = recorded_peaks(for_current_device().to_dict(), dtype, tf32=tf32)
    return found


def compute_peak(peaks: Any, dtype: str, device: str) -> tuple[float | None, str | None]:
    """The math peak (FLOP/s) for `dtype`, and where it came from."""
    found = card_peaks(peaks, dtype, device)
    return (found.compute, found.compute_source) if found else (None, None)


def sm_count(device: str, peaks: Any) -> int | None:
    found = recorded_peaks(peaks, "float32")
    if found is not None and found.sm_count:
        return found.sm_count
    if str(device).startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.get_device_properties(torch.device(device)).multi_processor_count
    return None
