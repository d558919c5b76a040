"""The device peak table: one place for each GPU's SM limits, throughput peaks and L2 size.

Every throughput peak says where it came from, because a roofline is only as honest as its
denominator:
- "datasheet": NVIDIA's published dense number (the with-sparsity figures halved);
- "practical": what docs/domain.md gives as reachable on the report's H200 (bf16 GEMM on random data,
  TF32 as half of it, device-to-device copy);
- "measured": a peak the user measured on their machine; it wins over both.

The table and its lookup by device name are pure Python (no torch): what a card check or a report reads.
Reading the current device (the profiler's `for_current_device`) fills in the device's own facts, which
win over the table's; `to_dict()["facts"]` says, for each, which it was. The table's L2 sizes are what
each board reports (an H200 60 MiB, an H100 50 MiB): a fallback only.

Units: TFLOP/s (1e12 FLOP/s) for math, TB/s (1e12 B/s) for DRAM, bytes for L2.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

from harness.hardware.occupancy import SmLimits, supported_compute_capabilities

PEAK_UNITS: dict[str, str] = {
    "bf16_tflops": "TFLOP/s",  # dense, tensor cores
    "fp16_tflops": "TFLOP/s",  # dense, tensor cores
    "tf32_tflops": "TFLOP/s",  # dense, tensor cores
    "fp32_tflops": "TFLOP/s",  # CUDA cores (FFMA), no tensor cores
    "dram_tbps": "TB/s",
}
PEAK_KEYS: tuple[str, ...] = tuple(PEAK_UNITS)
TENSOR_CORE_KEYS = frozenset({"bf16_tflops", "fp16_tflops", "tf32_tflops"})

DATASHEET, PRACTICAL, MEASURED = "datasheet", "practical", "measured"
MiB = 1024 * 1024
# Where a device fact (L2 size, SM count, clocks) came from.
FROM_DEVICE = "device (torch.cuda.get_device_properties)"
FROM_NVML = "device (NVML)"
FROM_CALLER = "given by the caller"
UNKNOWN = "unknown"


def from_table(key: str) -> str:
    return f"peak table entry {key!r} (fallback: not read from the device)"

_H100_DS = "NVIDIA H100 Tensor Core GPU datasheet (dense: with-sparsity figures halved)"
_H200_DS = "NVIDIA H200 Tensor Core GPU datasheet (dense: with-sparsity figures halved)"
_A100_DS = "NVIDIA A100 Tensor Core GPU datasheet (dense: with-sparsity figures halved)"
_H200_PRACTICAL = (
    "docs/domain.md: practical H200 peaks of the report's rooflines (bf16 GEMM measured on random "
    "data, TF32 about half of it, device-to-device copy measured)"
)


@dataclass(frozen=True)
class Peak:
    value: float
    unit: str
    source: str  # datasheet / practical / measured
    reference: str

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "unit": self.unit, "source": self.source, "reference": self.reference}


@dataclass(frozen=True)
class DevicePeaks:
    """One GPU: its table entry, the device name it was looked up with, and the peaks."""

    key: str  # table entry, e.g. "H100 SXM"; "generic" when the name matched none
    device_name: str
    limits: SmLimits | None  # None where the architecture is not in the occupancy table
    l2_bytes: int | None
    datasheet: Mapping[str, float] = field(default_factory=dict)
    datasheet_ref: str = ""
    practical: Mapping[str, float] = field(default_factory=dict)
    practical_ref: str = ""
    measured: Mapping[str, float] = field(default_factory=dict)
    measured_ref: str = ""
    l2_source: str = UNKNOWN  # FROM_DEVICE, or from_table(key) where the device did not say
    sm_count_source: str = UNKNOWN
    clocks_mhz: Mapping[str, int] = field(default_factory=dict)  # NVML's sm/mem clock, now and max
    clocks_source: str = UNKNOWN

    @property
    def matched(self) -> bool:
        return self.key != GENERIC

    def peak(self, name: str) -> Peak | None:
        """The best-founded value of one peak: measured, else practical, else datasheet."""
        if name not in PEAK_UNITS:
            raise KeyError(f"unknown peak {name!r}; known: {', '.join(PEAK_KEYS)}")
        for source, values, ref in (
            (MEASURED, self.measured, self.measured_ref),
            (PRACTICAL, self.practical, self.practical_ref),
            (DATASHEET, self.datasheet, self.datasheet_ref),
        ):
            if name in values:
                return Peak(float(values[name]), PEAK_UNITS[name], source, ref)
        return None

    def with_measured(self, values: Mapping[str, float], reference: str) -> DevicePeaks:
        return replace(self, measured={**self.measured, **_check_peaks(values, reference)},
                       measured_ref=reference)

    def to_dict(self) -> dict[str, Any]:
        peaks = {k: p.to_dict() for k in PEAK_KEYS if (p := self.peak(k)) is not None}
        return {
            "device_name": self.device_name,
            "table_entry": self.key,
            "l2_bytes": self.l2_bytes,
            "limits": self.limits.to_dict() if self.limits else None,
            "peaks": peaks,
            "facts": {
                "l2_bytes": {"value": self.l2_bytes, "source": self.l2_source},
                "sm_count": {"value": self.limits.sm_count if self.limits else None, "source": self.sm_count_source},
                "clocks_mhz": {"value": dict(self.clocks_mhz) or None, "source": self.clocks_source},
            },
        }


GENERIC = "generic"


def _hopper(sm_count: int) -> SmLimits:
    return SmLimits.for_arch(9, 0, sm_count)


def _ampere(sm_count: int) -> SmLimits:
    return SmLimits.for_arch(8, 0, sm_count)


_H100_SXM = DevicePeaks(
    key="H100 SXM", device_name="", limits=_hopper(132), l2_bytes=50 * MiB,
    datasheet={"bf16_tflops": 989.4, "fp16_tflops": 989.4, "tf32_tflops": 494.7,
               "fp32_tflops": 66.9, "dram_tbps": 3.35},
    datasheet_ref=_H100_DS,
)
_H100_PCIE = DevicePeaks(
    key="H100 PCIe", device_name="", limits=_hopper(114), l2_bytes=50 * MiB,
    datasheet={"bf16_tflops": 756.5, "fp16_tflops": 756.5, "tf32_tflops": 378.0,
               "fp32_tflops": 51.2, "dram_tbps": 2.0},
    datasheet_ref=_H100_DS,
)
_H200 = DevicePeaks(
    key="H200", device_name="", limits=_hopper(132), l2_bytes=60 * MiB,  # L2_cache_size 62914560 on an H200
    datasheet={"bf16_tflops": 989.4, "fp16_tflops": 989.4, "tf32_tflops": 494.7,
               "fp32_tflops": 66.9, "dram_tbps": 4.8},
    datasheet_ref=_H200_DS,
    practical={"bf16_tflops": 790.0, "tf32_tflops": 395.0, "dram_tbps": 4.3},
    practical_ref=_H200_PRACTICAL,
)
_A100_40 = DevicePeaks(
    key="A100 SXM 40GB", device_name="", limits=_ampere(108), l2_bytes=40 * MiB,
    datasheet={"bf16_tflops": 312.0, "fp16_tflops": 312.0, "tf32_tflops": 156.0,
               "fp32_tflops": 19.5, "dram_tbps": 1.555},
    datasheet_ref=_A100_DS,
)
_A100_80 = replace(
    _A100_40, key="A100 SXM 80GB", datasheet={**_A100_40.datasheet, "dram_tbps": 2.039}
)

TABLE: tuple[DevicePeaks, ...] = (_H100_SXM, _H100_PCIE, _H200, _A100_40, _A100_80)

# An A100's name does not always say its memory size ("A100-PG509-200" is a 40 GB board).
_A100_80GB_MIN_BYTES = 48 * 10**9


def _entry_for(device_name: str, total_memory_b: int | None) -> DevicePeaks | None:
    """Table entry by substring of torch.cuda.get_device_name(); the most specific first."""
    name = device_name.upper()
    if "H200" in name:
        return _H200
    if "H100" in name:
        return _H100_PCIE if "PCIE" in name else _H100_SXM
    if "A100" in name:
        big = "80GB" in name.replace(" ", "") or (total_memory_b or 0) >= _A100_80GB_MIN_BYTES
        return _A100_80 if big else _A100_40
    return None


def lookup(
    device_name: str,
    *,
    total_memory_b: int | None = None,
    compute_capability: tuple[int, int] | None = None,
    sm_count: int | None = None,
    measured: Mapping[str, float] | str | os.PathLike[str] | None = None,
) -> DevicePeaks:
    """Peaks for a device name; unknown names get the generic entry, which has no throughput peaks.

    `compute_capability` and `sm_count` (from the device, when known) replace the table's SM
    limits, so a MIG slice or an unlisted board gets its own SM count. `measured` is a dict of
    PEAK_KEYS values or a JSON file holding one (optionally with a "reference" string); it wins.
    """
    entry = _entry_for(device_name, total_memory_b)
    if entry is None:
        entry = DevicePeaks(key=GENERIC, device_name=device_name, limits=None, l2_bytes=None)
    entry = replace(entry, device_name=device_name,
                    l2_source=from_table(entry.key) if entry.l2_bytes else UNKNOWN,
                    sm_count_source=from_table(entry.key) if entry.limits else UNKNOWN)
    if sm_count is not None or compute_capability is not None:
        base = entry.limits
        cc = compute_capability or (base.compute_capability if base else None)
        count = sm_count or (base.sm_count if base else None)
        if cc is not None and count is not None and cc in supported_compute_capabilities():
            entry = replace(entry, limits=SmLimits.for_arch(cc[0], cc[1], count),
                            sm_count_source=FROM_CALLER if sm_count else entry.sm_count_source)
    if measured is not None:
        if isinstance(measured, Mapping):
            entry = entry.with_measured(measured, "measured (given in code)")
        else:
            values, reference = load_measured(measured)
            entry = entry.with_measured(values, reference)
    return entry


def load_measured(path: str | os.PathLike[str]) -> tuple[dict[str, float], str]:
    """Read a measured-peaks JSON file: {"bf16_tflops": 780.0, ..., "reference": "how"}."""
    target = Path(path)
    try:
        obj = json.loads(target.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{target}: no such measured-peaks file") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{target}: not JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(obj, dict):
        raise ValueError(f"{target}: measured peaks must be a JSON object")
    reference = obj.pop("reference", None)
    text = f"measured ({target}{': ' + reference if isinstance(reference, str) else ''})"
    return _check_peaks(obj, str(target)), text


def _check_peaks(values: Mapping[str, Any], where: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, value in values.items():
        if key not in PEAK_UNITS:
            raise ValueError(f"{where}: unknown peak {key!r}; known: {', '.join(PEAK_KEYS)}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ValueError(f"{where}: peak {key!r} must be a positive number, got {value!r}")
        out[key] = float(value)
    return out
