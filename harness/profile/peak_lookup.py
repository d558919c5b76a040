"""The math peak and SM count a card's achieved rate is judged against, from the profiler's recorded peaks.

CPU peaks are measured on the machine (harness.profile.cpu_peaks); GPU peaks come from the torch_cuda
backend's record or, for the ncu backend, the device's entry in harness.profile.gpu_peaks.
"""

from __future__ import annotations

from typing import Any

import torch


_CUDA_PEAK_KEYS = {"bfloat16": "bf16_tflops", "float16": "fp16_tflops"}


def compute_peak(peaks: Any, dtype: str, device: str) -> tuple[float | None, str | None]:
    """The math peak (FLOP/s) for `dtype` from the card's profiler peaks, and where it came from.

    CPU peaks: `flops_per_s[dtype]`, measured on this machine. GPU peaks (torch_cuda backend):
    `peaks[key]["value"]` in TFLOP/s, key by dtype (float32 is TF32 when torch allows it). The ncu
    backend records no peaks: the device's entry in harness.profile.gpu_peaks is used then.
    """
    if isinstance(peaks, dict) and isinstance(peaks.get("flops_per_s"), dict):
        value = peaks["flops_per_s"].get(dtype)
        return (float(value), f"measured CPU {dtype} matmul peak") if value else (None, None)
    key = _CUDA_PEAK_KEYS.get(dtype)
    if dtype == "float32":
        key = "tf32_tflops" if torch.backends.cuda.matmul.allow_tf32 else "fp32_tflops"
    if key is None:
        return None, None
    table = peaks.get("peaks") if isinstance(peaks, dict) else None
    if not isinstance(table, dict) and str(device).startswith("cuda") and torch.cuda.is_available():
        from harness.profile.gpu_peaks import for_current_device

        table = for_current_device().to_dict().get("peaks")
    entry = table.get(key) if isinstance(table, dict) else None
    if isinstance(entry, dict) and isinstance(entry.get("value"), (int, float)):
        return float(entry["value"]) * 1e12, f"{key} ({entry.get('source', '?')})"
    return None, None


def sm_count(device: str, peaks: Any) -> int | None:
    limits = peaks.get("limits") if isinstance(peaks, dict) else None
    if isinstance(limits, dict) and isinstance(limits.get("sm_count"), int):
        return limits["sm_count"]
    if str(device).startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.get_device_properties(torch.device(device)).multi_processor_count
    return None
