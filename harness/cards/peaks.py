"""The peaks a measured card was judged against (`extra["peaks"]`), read one way for every reader.

Two layouts are recorded: the CPU backend's measured peaks (harness.profile.cpu_peaks: `kind: cpu`,
`flops_per_s` by dtype, `mem_bw_bytes_per_s`, `llc_bytes`, `cpu_model`) and a GPU's table
(harness.hardware.gpu_peaks: `peaks` by key, each `{value, unit, source}`; `limits.sm_count`; the
torch_cuda backend adds `compute_peak`, the key it used, and `used`, the entries it used). The roofline,
the experiments' evidence (achieved share of peak, weight-streaming bound, waves) and the page all read
them through `recorded_peaks`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

_UNIT_SCALE = {"TFLOP/s": 1e12, "GFLOP/s": 1e9, "TB/s": 1e12, "GB/s": 1e9}
# A GPU's compute peak key per compute dtype; float32 is TF32 where the math mode allows it.
_GPU_COMPUTE_KEYS = {"bfloat16": "bf16_tflops", "float16": "fp16_tflops"}


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None


def table_value(key: str | None, entry: Any) -> float | None:
    """A GPU table entry ({value, unit, ...}) in base units (FLOP/s, bytes/s); without a unit, the key's
    own (`bf16_tflops`, `dram_tbps`: tera)."""
    if not isinstance(entry, Mapping):
        return None
    value = _number(entry.get("value"))
    scale = _UNIT_SCALE.get(str(entry.get("unit"))) or (1e12 if str(key).endswith(("_tflops", "_tbps")) else 1.0)
    return value * scale if value is not None else None


def gpu_compute_key(dtype: str, tf32: bool | None) -> str | None:
    """The GPU table's compute peak for math in `dtype` (float32: TF32 when allowed, else FP32 SIMT)."""
    if dtype == "float32":
        return "tf32_tflops" if tf32 else "fp32_tflops"
    return _GPU_COMPUTE_KEYS.get(dtype)


@dataclass(frozen=True)
class RecordedPeaks:
    """One card's peaks for one compute dtype, in base units, each with where it came from."""

    compute: float | None  # FLOP/s
    compute_source: str | None  # what the peak is and where it comes from, in a few words
    bandwidth: float | None  # DRAM (CPU: measured copy) bytes/s
    bandwidth_source: str | None
    sm_count: int | None
    llc_bytes: int | None  # the CPU's last-level cache; None on a GPU
    device: str  # the device's name as recorded
    origin: str | None = None  # a GPU table entry's own source (datasheet, measured ...)



def is_cpu_layout(peaks: Mapping[str, Any]) -> bool:
    return peaks.get("kind") == "cpu" or "mem_bw_bytes_per_s" in peaks


def recorded_peaks(peaks: Any, dtype: str, tf32: bool | None = None) -> RecordedPeaks | None:
    """`extra["peaks"]` of a card for math in `dtype`; None when nothing was recorded (the ncu backend).

    On a GPU, float32 math is TF32 or FP32 SIMT by `tf32`; None: the peak the profiler itself used for
    the card (`compute_peak`), when it recorded one.
    """
    if not isinstance(peaks, Mapping):
        return None
    if is_cpu_layout(peaks):
        compute = _number((peaks.get("flops_per_s") or {}).get(dtype))
        bandwidth = _number(peaks.get("mem_bw_bytes_per_s"))
        llc = peaks.get("llc_bytes")
        return RecordedPeaks(
            compute, f"measured CPU {dtype} matmul peak" if compute else None,
            bandwidth, "measured CPU copy bandwidth (read + write)" if bandwidth else None,
            None, llc if isinstance(llc, int) else 0, f"CPU {peaks.get('cpu_model') or ''}".strip())
    raw_table, raw_used = peaks.get("peaks"), peaks.get("used")
    table = raw_table if isinstance(raw_table, Mapping) else {}
    used = raw_used if isinstance(raw_used, Mapping) else {}
    recorded_key = peaks.get("compute_peak")
    key = gpu_compute_key(dtype, tf32) if tf32 is not None or not recorded_key else str(recorded_key)
    # The entries are JSON of the card ({value, unit, source}); read below only where table_value found a value.
    compute_entry: Any = used.get("compute") if key == recorded_key and used.get("compute") else table.get(key)
    dram_entry: Any = used.get("dram") or table.get("dram_tbps")
    raw_limits = peaks.get("limits")
    limits = raw_limits if isinstance(raw_limits, Mapping) else {}
    sms = limits.get("sm_count")
    compute, bandwidth = table_value(key, compute_entry), table_value("dram_tbps", dram_entry)
    return RecordedPeaks(
        compute, f"{key} ({compute_entry.get('source', '?')})" if compute else None,
        bandwidth, f"dram_tbps ({dram_entry.get('source', '?')})" if bandwidth else None,
        sms if isinstance(sms, int) and not isinstance(sms, bool) else None, None,
        str(peaks.get("device_name") or peaks.get("table_entry") or "GPU"),
        compute_entry.get("source") if isinstance(compute_entry, Mapping) else None)
