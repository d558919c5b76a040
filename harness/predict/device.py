"""The device a prediction is for: its math peaks by math mode and its memory bandwidth, each with the range its
source states, and the roofline time of a piece of work on it.

A GPU's come from harness.hardware.gpu_peaks' table: the point is the best-founded value (measured, else
practical, else datasheet), the range spans the practical and the datasheet value where the table has both
(the H200's bf16 790 against 989 TFLOP/s, DRAM 4.3 against 4.8 TB/s). A CPU's are the peaks the worker
measured on it (harness.profile.cpu_peaks, recorded as harness.cards.peaks reads them): the point is the best
try, the range the spread of the repeated tries where they were recorded; with each math's best rate at each
product size measured, which says how far two maths' kernels may sit from their peaks' ratio, and its reference
convolutions' speedups in each channels-last layout, how far a library's kernel for another layout may sit.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence, TypeGuard

from harness.cards.dtype import TF32
from harness.errors import HarnessError
from harness.hardware.gpu_peaks import GENERIC, PEAK_KEYS, DevicePeaks, lookup

# A math mode's peak key: the dtype math runs in, float32 by its math mode (TF32 or IEEE fp32).
_MATH_KEYS = {"bfloat16": "bf16_tflops", "float16": "fp16_tflops"}
_CPU_DTYPES = {"float32": "fp32_tflops", "bfloat16": "bf16_tflops", "float16": "fp16_tflops"}
ELEMENT_BYTES = {"float64": 8, "float32": 4, "bfloat16": 2, "float16": 2, "uint8": 1, "int8": 1,
                 "float8_e4m3fn": 1, "float8_e5m2": 1}


class DeviceError(HarnessError):
    """A device the model has no peaks for; one line, with what to give instead."""


@dataclass(frozen=True)
class Rate:
    """A peak rate in base units (FLOP/s or bytes/s): the point and the range its source states."""

    value: float
    low: float
    high: float
    source: str


def math_key(dtype: str, math: str) -> str | None:
    """The peak a math in `dtype` under math mode `math` runs against (None: no such peak)."""
    if dtype == "float32":
        return "tf32_tflops" if math == TF32 else "fp32_tflops"
    return _MATH_KEYS.get(dtype)


@dataclass(frozen=True)
class DeviceModel:
    """A device's peaks: `compute` by peak key (bf16_tflops, fp16_tflops, tf32_tflops, fp32_tflops)."""

    name: str
    kind: str  # "gpu" or "cpu"
    compute: Mapping[str, Rate]
    bandwidth: Rate
    notes: tuple[str, ...] = field(default_factory=tuple)
    # peak key -> product size -> the best rate at that size (a CPU's peak measurement: harness.profile.cpu_peaks)
    size_rates: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    # layout -> the device's reference convolutions' speedups in it over NCDHW (harness.profile.library_kernels)
    conv_layouts: Mapping[str, Sequence[float]] = field(default_factory=dict)
    # dtype -> where the weight sits ("dram", "cache") -> (the square weight's side, rows -> best seconds, rows ->
    # the slowest repeat's seconds): the device's few-row products (harness.profile.library_kernels)
    few_rows: Mapping[str, Mapping[str, tuple[int, Mapping[int, float], Mapping[int, float]]]] = field(
        default_factory=dict)
    # (Cin, Cout, output (T, H, W), NCDHW float32 seconds) of the device's reference 3x3x3 convolutions
    conv_references: Sequence[tuple[int, int, tuple[int, int, int], float]] = field(default_factory=tuple)

    def rate(self, dtype: str, math: str) -> Rate:
        key = math_key(dtype, math)
        found = self.compute.get(key) if key else None
        if found is None:
            raise DeviceError(f"{self.name}: no {key or dtype} peak to predict {dtype} math with")
        return found

    def has(self, dtype: str, math: str) -> bool:
        key = math_key(dtype, math)
        return key is not None and key in self.compute

    def efficiency_factors(self, old: str, new: str) -> list[float]:
        """At each product size both peaks were measured at, the `new` math's rate over the `old`'s, as a share of
        their peaks' ratio: how far a kernel's efficiency in one math may sit from another's (no sizes: none)."""
        before, after = self.size_rates.get(old, {}), self.size_rates.get(new, {})
        if old not in self.compute or new not in self.compute:
            return []
        peaks = self.compute[new].value / self.compute[old].value
        return [after[n] / before[n] / peaks for n in before if n in after and before[n] > 0]

    def moved(self, *, compute_end: str = "value", bandwidth_end: str = "value", compute_scale: float = 1.0
              ) -> DeviceModel:
        """This device with its math peaks at one end of their ranges (times `compute_scale`) and its bandwidth
        at one end of its own: the device a stated uncertainty's extreme describes."""
        def at(rate: Rate, end: str, scale: float = 1.0) -> Rate:
            value = getattr(rate, end) * scale
            return replace(rate, value=value, low=min(rate.low, value), high=max(rate.high, value))

        return replace(self, compute={k: at(r, compute_end, compute_scale) for k, r in self.compute.items()},
                       bandwidth=at(self.bandwidth, bandwidth_end))

    def roofline_us(self, flops: float, nbytes: float, dtype: str, math: str, *, at: str = "value") -> float:
        """max(FLOPs / math peak, bytes / bandwidth) in us, at the peaks' point (`at`: "low" or "high" for the
        ends of their ranges); no FLOPs: the bytes alone."""
        moved = nbytes / getattr(self.bandwidth, at)
        if not flops:
            return moved * 1e6
        return max(flops / getattr(self.rate(dtype, math), at), moved) * 1e6


def gpu_device(name: str) -> DeviceModel:
    """A GPU of the peak table by (a part of) its name: "H200", "NVIDIA H100 80GB HBM3", "A100-SXM4-80GB"."""
    entry = lookup(name)
    if entry.key == GENERIC:
        raise DeviceError(f"--device {name}: not in the GPU peak table (harness/hardware/gpu_peaks.py: H200, "
                          "H100 SXM/PCIe, A100 40/80GB), and without its peaks nothing can be predicted")
    return _from_table(entry)


def _from_table(entry: DevicePeaks) -> DeviceModel:
    compute: dict[str, Rate] = {}
    for key in PEAK_KEYS:
        found = _table_rate(entry, key)
        if found is not None and key != "dram_tbps":
            compute[key] = found
    bandwidth = _table_rate(entry, "dram_tbps")
    if bandwidth is None:
        raise DeviceError(f"{entry.key}: the peak table has no DRAM bandwidth for it")
    return DeviceModel(name=entry.key, kind="gpu", compute=compute, bandwidth=bandwidth)


def _table_rate(entry: DevicePeaks, key: str) -> Rate | None:
    """The table's point for `key` and the range of its practical and datasheet values; fp16, which shares
    bf16's tensor pipe and datasheet rate, takes bf16's practical value where it has none of its own."""
    peak = entry.peak(key)
    if peak is None:
        return None
    practical = entry.practical.get(key)
    if practical is None and key == "fp16_tflops" and entry.datasheet.get(key) == entry.datasheet.get("bf16_tflops"):
        practical = entry.practical.get("bf16_tflops")
    point = entry.measured.get(key) or practical or peak.value
    values = [v for v in (point, practical, entry.datasheet.get(key)) if v]
    source = (f"{key} {point:g} ({'measured' if key in entry.measured else 'practical' if practical else 'datasheet'}"
              f"{f'; datasheet {entry.datasheet[key]:g}' if practical and key in entry.datasheet else ''})")
    return Rate(point * 1e12, min(values) * 1e12, max(values) * 1e12, source)


def cpu_device(peaks: Mapping[str, Any]) -> DeviceModel:
    """This CPU from the peaks the worker measured (harness.profile.cpu_peaks.CpuPeaks.as_dict())."""
    flops = peaks.get("flops_per_s") or {}
    tries = peaks.get("tries") or {}
    compute = {key: _cpu_rate(float(flops[dtype]), tries.get(dtype), f"measured torch.mm {dtype}", "GFLOP/s")
               for dtype, key in _CPU_DTYPES.items() if _positive(flops.get(dtype))}
    bandwidth = peaks.get("mem_bw_bytes_per_s")
    if not compute or not _positive(bandwidth):
        raise DeviceError("the CPU's measured peaks are missing or unusable: run `python -m harness` once on this "
                          "machine (it measures and caches them)")
    notes = ("measured while the CPU was busy: the peaks read low",) if peaks.get("busy") else ()
    by_size = peaks.get("by_size")
    by_size = by_size if isinstance(by_size, Mapping) else {}
    size_rates = {key: {str(n): float(r) for n, r in by_size[dtype].items() if _positive(r)}
                  for dtype, key in _CPU_DTYPES.items() if isinstance(by_size.get(dtype), Mapping)}
    return with_reference_kernels(DeviceModel(
        name=f"CPU {peaks.get('cpu_model') or ''}".strip(), kind="cpu", compute=compute,
        bandwidth=_cpu_rate(float(bandwidth), tries.get("mem_bw"), "measured copy bandwidth", "GB/s"), notes=notes,
        size_rates=size_rates), peaks)


def with_reference_kernels(model: DeviceModel, found: Mapping[str, Any]) -> DeviceModel:
    """`model` with the reference kernels measured on it that `found` holds (harness.profile.library_kernels'
    `conv_layouts`, `conv_references`, `few_rows`: a CPU's recorded with its peaks, a GPU's beside its table's)."""
    return replace(model, conv_layouts=_conv_layouts(found.get("conv_layouts")),
                   few_rows=_few_rows(found.get("few_rows")),
                   conv_references=_conv_references(found.get("conv_references")))


def _conv_layouts(found: Any) -> dict[str, list[float]]:
    if not isinstance(found, Mapping):
        return {}
    return {str(name): [float(v) for v in values if _positive(v)] for name, values in found.items()
            if isinstance(values, list) and any(_positive(v) for v in values)}


def _conv_references(found: Any) -> tuple[tuple[int, int, tuple[int, int, int], float], ...]:
    out = []
    for ref in (found if isinstance(found, list) else ()):
        try:
            t, h, w = (int(v) for v in ref["output"])
            cin, cout, seconds = int(ref["cin"]), int(ref["cout"]), float(ref["seconds"])
        except (KeyError, TypeError, ValueError):
            continue
        if min(cin, cout, t, h, w) > 0 and seconds > 0:
            out.append((cin, cout, (t, h, w), seconds))
    return tuple(out)


def _few_rows(found: Any) -> dict[str, dict[str, tuple[int, dict[int, float], dict[int, float]]]]:
    out: dict[str, dict[str, tuple[int, dict[int, float], dict[int, float]]]] = {}
    for dtype, places in (found.items() if isinstance(found, Mapping) else ()):
        for where, entry in (places.items() if isinstance(places, Mapping) else ()):
            if not isinstance(entry, Mapping) or not _positive(entry.get("n")):
                continue
            best, slowest = (_times(entry.get(key)) for key in ("seconds", "slowest"))
            if best:
                out.setdefault(str(dtype), {})[str(where)] = (int(entry["n"]), best, slowest or best)
    return out


def _times(found: Any) -> dict[int, float]:
    """rows -> seconds, the positive ones of a recorded mapping."""
    items = found.items() if isinstance(found, Mapping) else ()
    return {int(m): float(t) for m, t in items if str(m).isdigit() and _positive(t)}


def _cpu_rate(best: float, tries: Any, what: str, unit: str) -> Rate:
    """The best try, and the range down to the worst of the recorded tries (each try's own best)."""
    rates = [float(t) for t in tries if _positive(t)] if isinstance(tries, list) else []
    low = min([*rates, best])
    return Rate(best, low, best, f"{what} {best / 1e9:.1f} {unit}"
                + (f" (tries {low / 1e9:.1f} to {best / 1e9:.1f})" if rates else ""))


def _positive(value: Any) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
