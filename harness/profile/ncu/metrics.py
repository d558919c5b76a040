"""Which Nsight Compute metric carries each report field, and the metric sets a trial requests.

`FIELD_SOURCES` is the one table of report field -> ncu metric. Each entry names the metric to
request, the names an older ncu or chip reports the same quantity under, the names to request
instead on a chip that lacks the metric, and the label the details page (`ncu --csv`, one row per
metric) prints for it.

A metric ncu does not know on the chip makes the whole run fail ("Failed to find metric"), so a
trial's list can be checked first against the chip's own list (`ncu --query-metrics
--query-metrics-mode all`, read by `parse_query_metrics`): `resolve_metrics` keeps what the chip
has, swaps a missing metric for its first alternative the chip has, and drops the rest with a note.
Launch attributes (`launch__*`) and device attributes (`device__attribute_*`) are not hardware counters:
ncu reports them for every kernel, and the query lists counters only, so they are never checked; nor are
the few metrics ncu reports beside them without listing them (UNLISTED_METRICS).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from harness.cards.fields import METRIC_FIELDS
from harness.hardware.ncu_metrics import CACHE_BYTES_METRICS


@dataclass(frozen=True)
class FieldSource:
    metric: str  # requested with --metrics
    fallbacks: tuple[str, ...] = ()  # read, in order, when `metric` is absent; never requested
    display: str | None = None  # the details page's "Metric Name"; None: that page lacks it
    # Requested instead of `metric`, first one the chip has, when the chip lacks `metric`; read after
    # `metric` and `fallbacks`. Each measures the same quantity, or the nearest one the chip counts.
    alternatives: tuple[str, ...] = ()
    # Read last, never requested: the same quantity over the SM's active cycles where the report's is over
    # elapsed cycles; parse.report_metrics converts such a value by sm_cycles_active / cycles_elapsed.
    active_based: tuple[str, ...] = ()

    def names(self) -> tuple[str, ...]:
        """Every metric name this field may be read from, in the order they are tried."""
        return tuple(dict.fromkeys((self.metric, *self.fallbacks, *self.alternatives, *self.active_based)))


FIELD_SOURCES: dict[str, FieldSource] = {
    # Pascal-era ncu names the same counter without a rollup suffix (raw page of a GTX 1080).
    "dur_us": FieldSource("gpu__time_duration.sum", ("gpu__time_duration",), "Duration"),
    "sm_pct": FieldSource(
        "sm__throughput.avg.pct_of_peak_sustained_elapsed", display="Compute (SM) Throughput"
    ),
    # Not collected by any default section, so the details page has no label for it; checked on the
    # chip with `ncu --query-metrics` (resolve_metrics). Where the chip lacks it: the tensor pipe of
    # Hopper's warpgroup MMA (wgmma, what cuBLAS runs there), then the HMMA pipe (mma.sync); the
    # profile's settings record which one was read. The report's values are over elapsed cycles: on the
    # same kernel an H200's `..._active` value times sm_cycles_active/cycles_elapsed is the report's
    # (cutlass Kernel2: 4.10 x 0.573 = 2.35 against 2.354), and every ncu report made before asked for
    # the `..._active` names, so those are still read, and converted.
    "tensor_pct": FieldSource(
        "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
        alternatives=(
            "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_elapsed",
            "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed",
        ),
        active_based=(
            "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
            "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
            "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
        ),
    ),
    "dram_pct": FieldSource(
        "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
        ("dram__throughput.avg.pct_of_peak_sustained_elapsed",),
        "DRAM Throughput",
        alternatives=("dram__throughput.avg.pct_of_peak_sustained_elapsed",),
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


# ---------------------------------------------------------------------------------------------
# Checking a metric list against what the chip has

# Every ncu since 2019 has it on every chip: a query list without it was not parsed right.
SENTINEL_METRIC = "gpu__time_duration.sum"
_REGEX = "regex:"
# Attributes of the launch and of the device, which ncu records for every kernel without a counter
# pass; `--query-metrics` lists the chip's counters, so checking these against it would drop them
# (and with launch__waves_per_multiprocessor the partial_wave_tail class could never fire).
UNCHECKED_PREFIXES: tuple[str, ...] = ("launch__", "device__attribute_")
# Occupancy figures ncu derives from the launch and reports for every kernel, yet leaves out of
# `--query-metrics --query-metrics-mode all`: the H200's list (ncu 2025.3.1, 148059 names) lacks them,
# and the same ncu profiled sm__maximum_warps_per_active_cycle_pct on every kernel it was asked for.
UNLISTED_METRICS = frozenset({
    "sm__maximum_warps_per_active_cycle_pct",
    "sm__maximum_warps_avg_per_active_cycle",
    "smsp__maximum_warps_avg_per_active_cycle",
})


def is_attribute(name: str) -> bool:
    """Whether `name` is a launch or device attribute, or a metric ncu reports unlisted: always requested,
    never checked on the chip."""
    return name.startswith(UNCHECKED_PREFIXES) or name in UNLISTED_METRICS


def parse_query_metrics(text: str) -> set[str]:
    """Metric names in the output of `ncu --query-metrics --query-metrics-mode all` (or a plain list,
    one name per line): the first word of each line that starts with one; headers, separators and
    the indented description lines are left out (a name holds "__")."""
    names: set[str] = set()
    for line in text.splitlines():
        if not line or line[0].isspace():
            continue
        word = line.split()[0]
        if "__" in word and not word.startswith("=="):
            names.add(word)
    return names


@dataclass(frozen=True)
class MetricPlan:
    metrics: list[str]  # what to pass to --metrics
    substituted: dict[str, str]  # requested name -> the alternative requested instead
    dropped: list[str]  # requested names the chip has no metric (nor alternative) for
    notes: list[str]


def _alternatives_of(name: str) -> tuple[str, ...]:
    for source in FIELD_SOURCES.values():
        if source.metric == name:
            return source.alternatives
    return ()


def _has(name: str, available: set[str]) -> bool:
    if name.startswith(_REGEX):
        pattern = re.compile(name[len(_REGEX):])
        return any(pattern.search(candidate) for candidate in available)
    return name in available


def resolve_metrics(requested: list[str], available: set[str] | None, source: str = "the chip") -> MetricPlan:
    """`requested` checked against the chip's metric names (`available`; None: not checked, all kept).

    Launch and device attributes, and the metrics ncu reports unlisted (is_attribute), are kept whatever
    the list says. A list without
    SENTINEL_METRIC is not trusted (a query that printed something else, or was cut short) and leaves
    `requested` as it is, with a note."""
    if available is None:
        return MetricPlan(list(requested), {}, [], [])
    if SENTINEL_METRIC not in available:
        return MetricPlan(list(requested), {}, [], [
            f"metric list of {source} not used: it lacks {SENTINEL_METRIC} ({len(available)} names read)"])
    chosen: list[str] = []
    substituted: dict[str, str] = {}
    dropped: list[str] = []
    notes: list[str] = []
    for name in requested:
        pick: str | None
        if is_attribute(name) or _has(name, available):
            pick = name
        else:
            pick = next((alt for alt in _alternatives_of(name) if alt in available), None)
            if pick is None:
                dropped.append(name)
                notes.append(f"{name}: not a metric of {source}; not collected")
                continue
            substituted[name] = pick
            notes.append(f"{name}: not a metric of {source}; collected {pick} instead")
        if pick not in chosen:
            chosen.append(pick)
    return MetricPlan(chosen, substituted, dropped, notes)
