"""The report format's vocabulary: metric fields, their units, the bottleneck classes.

One place per fact: every module that names a metric field or a class imports it from here.
"""

from __future__ import annotations

# Per-kernel metric fields in report order, with the unit each field's name promises.
METRIC_UNITS: dict[str, str] = {
    "dur_us": "us",
    "sm_pct": "%",
    "tensor_pct": "%",
    "dram_pct": "%",
    "l2_pct": "%",
    "warps_active_pct": "%",
    "max_warps_pct": "%",
    "waves": "waves",
    "grid": "blocks",
    "block": "threads",
    "regs": "registers/thread",
    "smem_dyn_kb": "KB",
    "smem_static_b": "B",
    "l2_hit_pct": "%",
    "sm_cycles_active": "cycles",
    "cycles_elapsed": "cycles",
    "dram_read_mb": "MB",
    "dram_write_mb": "MB",
    "occ_limit_regs": "blocks/SM",
    "occ_limit_smem": "blocks/SM",
}
METRIC_FIELDS: tuple[str, ...] = tuple(METRIC_UNITS)

# Fields that the classifier reads; `evidence` in the report carries these plus the active ratio.
EVIDENCE_FIELDS: tuple[str, ...] = (
    "sm_pct",
    "tensor_pct",
    "dram_pct",
    "l2_pct",
    "warps_active_pct",
    "waves",
)

COMPUTE_BOUND = "compute_bound"
DRAM_BANDWIDTH_BOUND = "dram_bandwidth_bound"
L2_BANDWIDTH_BOUND = "l2_bandwidth_bound"
PARTIAL_WAVE_TAIL = "partial_wave_tail"
LATENCY_OR_OCCUPANCY_LIMITED = "latency_or_occupancy_limited"
UNRESOLVED = "unresolved_no_dominant_limiter"

CLASSES: tuple[str, ...] = (
    COMPUTE_BOUND,
    DRAM_BANDWIDTH_BOUND,
    L2_BANDWIDTH_BOUND,
    PARTIAL_WAVE_TAIL,
    LATENCY_OR_OCCUPANCY_LIMITED,
    UNRESOLVED,
)

# Where a kernel's metrics came from; estimated numbers are never shown as measured.
SOURCE_NCU = "ncu"
SOURCE_TORCH_CUDA_TRACE = "torch_cuda_trace"
SOURCE_CPU_ESTIMATE = "cpu_roofline_estimate"
MEASURED_SOURCES = frozenset({SOURCE_NCU})

# A kernel's extra: why ncu has no numbers for it (it failed to profile that launch: the metrics it recorded
# without a value, the rules it could not evaluate); such a kernel gets no class (harness.cards.rules).
NCU_FAILED = "ncu_failed"
