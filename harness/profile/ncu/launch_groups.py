"""Launches of one kernel with one launch configuration as one kernel entry (harness.cards.launches).

ncu lists every launch it profiled; a user's report often profiles a kernel several times (a benchmark's
repetitions, a loop). Those launches become one entry with `launches: N`: each metric the mean over the
launches that have a value (a note names a metric only some launches have), the duration's spread under
`launch_stats` ({dur_us_min, dur_us_max, dur_us_cv}), the ncu ids of all of them under `ncu_ids`, and the
first launch's rule results. The configuration is what ncu measured of the launch (grid and block size,
registers per thread, shared memory) and whether ncu failed on it: a failed launch, its configuration
unread, never merges with a measured one.
"""

from __future__ import annotations

import statistics
from typing import Any

from harness.cards.fields import NCU_FAILED
from harness.cards.launches import LAUNCH_STATS, LAUNCHES
from harness.cards.model import Kernel
from harness.profile.ncu.parse import NCU_NOTES

CONFIG_FIELDS = ("grid", "block", "regs", "smem_dyn_kb", "smem_static_b")


def launch_config(kernel: Kernel) -> tuple[Any, ...]:
    """What makes two launches one entry: the kernel, its launch configuration, and whether ncu failed on it."""
    return (kernel.name, *(kernel.metric(name) for name in CONFIG_FIELDS), bool(kernel.extra.get(NCU_FAILED)))


def count_launches(kernels: list[Kernel]) -> list[Kernel]:
    """One entry per kernel and launch configuration, in the order of each one's first launch."""
    groups: dict[tuple[Any, ...], list[Kernel]] = {}
    for kernel in kernels:
        groups.setdefault(launch_config(kernel), []).append(kernel)
    return [_merged(group) for group in groups.values()]


def _mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def _partial(name: str, values: list[Any]) -> list[str]:
    known = sum(v is not None for v in values)
    if 0 < known < len(values):
        return [f"{name}: the mean of the {known} of {len(values)} launches ncu gave a value for"]
    return []


def _merged(group: list[Kernel]) -> Kernel:
    first = group[0]
    if len(group) == 1:
        return first
    notes = list(dict.fromkeys(note for k in group for note in k.extra.get(NCU_NOTES) or []))
    metrics: dict[str, float | None] = {}
    for name in first.metrics or {}:
        values = [k.metric(name) for k in group]
        metrics[name] = _mean(values)
        notes += _partial(name, values)
    extra = {**first.extra, LAUNCHES: len(group), "ncu_ids": [k.extra.get("ncu_id") for k in group]}
    counters = _counters(group, notes)
    if counters:
        extra["ncu_counters"] = counters
    durations = [k.metric("dur_us") for k in group]
    if all(d is not None for d in durations):
        known = [float(d) for d in durations if d is not None]
        mean = sum(known) / len(known)
        extra[LAUNCH_STATS] = {"dur_us_min": min(known), "dur_us_max": max(known),
                               "dur_us_cv": statistics.pstdev(known) / mean if mean else None}
    if notes:
        extra[NCU_NOTES] = notes
    return Kernel(name=first.name, metrics=metrics, extra=extra)


def _counters(group: list[Kernel], notes: list[str]) -> dict[str, float]:
    """The mean of each ncu counter (stall ratios, cache bytes) over the launches that collected it."""
    names = list(dict.fromkeys(name for k in group for name in k.extra.get("ncu_counters") or {}))
    out: dict[str, float] = {}
    for name in names:
        values = [(k.extra.get("ncu_counters") or {}).get(name) for k in group]
        mean = _mean(values)
        if mean is not None:
            out[name] = mean
            notes += _partial(name, values)
    return out
