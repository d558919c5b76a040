"""Which Nsight Compute metric carries each report field, and the metric sets a trial requests.

`FIELD_SOURCES` is the one table of report field -> ncu metric. Each entry names the metric to
request, the names an older ncu or chip reports the same quantity under, and the label the
details page (`ncu --csv`, one row per metric) prints for it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from harness.cards.fields import METRIC_FIELDS


@dataclass(frozen=True)
class FieldSource:
    metric: str  # requested with --metrics
    fallbacks: tuple[str, ...] = ()  # read, in order, when `metric` is absent; never requested
    display: str | None = None  # the details page's "Metric Name"; None: that page lacks it


FIELD_SOURCES: dict[str, FieldSource] = {
    # Pascal-era ncu names the same counter without a rollup suffix (raw page of a GTX 1080).
    "dur_us": FieldSource("gpu__time_duration.sum", ("gpu__time_duration",), "Duration"),
    "sm_pct": FieldSource(
        "sm__throughput.avg.pct_of_peak_sustained_elapsed", display="Compute (SM) Throughput"
    ),
    # Not collected by any default section, so the details page has no label for it; the name is
    # the report's and must be checked on Hopper with `ncu --query-metrics`.
    "tensor_pct": FieldSource("sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"),
    "dram_pct": FieldSource(
        "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
        ("dram__throughput.avg.pct_of_peak_sustained_elapsed",),
        "DRAM Throughput",
    ),
    "l2_pct": FieldSource("lts__throughput.avg.pct_of_peak_sustained_elapsed", display="L2 Cache Throughput"),
    "warps_active_pct": FieldSource(
        "sm__warps_active.avg.pct_of_peak_sustained_active", display="Achieved Occupancy"
    ),
    "max_warps_pct": FieldSource("sm__maximum_warps_per_active_cycle_pct", display="Theoretical Occupancy"),
    "waves": FieldSource("launch__waves_per_multiprocessor", display="Waves Per SM"),
    "grid": FieldSource("launch__grid_size", display="Grid Size"),
    "block": FieldSource("launch__block_size", display="Block Size"),
    "regs": FieldSource("launch__registers_per_thread", display="Registers Per Thread"),
    "smem_dyn_kb": FieldSource(
        "launch__shared_mem_per_block_dynamic", display="Dynamic Shared Memory Per Block"
    ),
    "smem_static_b": FieldSource(
        "launch__shared_mem_per_block_static", display="Static Shared Memory Per Block"
    ),
    "l2_hit_pct": FieldSource("lts__t_sector_hit_rate.pct", display="L2 Hit Rate"),
    "sm_cycles_active": FieldSource("sm__cycles_active.avg", display="SM Active Cycles"),
    "cycles_elapsed": FieldSource("gpc__cycles_elapsed.max", ("gpc__elapsed_cycles_max",), "Elapsed Cycles"),
    "dram_read_mb": FieldSource("dram__bytes_read.sum", ("dram__read_bytes",)),
    "dram_write_mb": FieldSource("dram__bytes_write.sum", ("dram__write_bytes",)),
    "occ_limit_regs": FieldSource("launch__occupancy_limit_registers", display="Block Limit Registers"),
    "occ_limit_smem": FieldSource("launch__occupancy_limit_shared_mem", display="Block Limit Shared Mem"),
}

if tuple(FIELD_SOURCES) != METRIC_FIELDS:  # a new report field must get a source here
    raise RuntimeError("FIELD_SOURCES does not list exactly the report's metric fields, in order")

# Warp-state breakdown, as the Warp State Statistics section collects it: for each stall reason,
# warps stalled on it per issue-active cycle; together they add up to the cycles between two issued
# instructions of a warp. The set of reasons differs between chips, so it is requested by pattern:
# a list naming a reason the chip lacks makes ncu fail with "Failed to find metric".
STALL_REQUEST = r"regex:^smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio$"
STALL_METRIC = re.compile(r"^smsp__average_warps_issue_stalled_(?P<reason>.+)_per_issue_active\.ratio$")

# Bytes moved through L1/TEX and through L2 (lts), next to the DRAM bytes of the report fields.
CACHE_BYTES_METRICS: dict[str, str] = {
    "l1tex_mb": "l1tex__t_bytes.sum",
    "lts_mb": "lts__t_bytes.sum",
}

METRIC_SETS: dict[str, tuple[str, ...]] = {
    "report": tuple(source.metric for source in FIELD_SOURCES.values()),
    "stalls": (STALL_REQUEST,),
    "bytes": tuple(CACHE_BYTES_METRICS.values()),
}


def metrics_for(set_name: str) -> list[str]:
    """The `--metrics` list of a named set, or of sets joined by "+" ("report+stalls+bytes")."""
    parts = [part.strip() for part in set_name.split("+")]
    unknown = [part for part in parts if part not in METRIC_SETS]
    if unknown:
        raise ValueError(
            f"unknown ncu metric set {set_name!r}; use one of {', '.join(METRIC_SETS)} or join them with '+'"
        )
    chosen: list[str] = []
    for part in parts:
        chosen.extend(name for name in METRIC_SETS[part] if name not in chosen)
    return chosen
