"""Honest class labels: where a card's class came from, and what an estimate can and cannot decide.

A class read from ncu counters on the report's GPU and one computed from a CPU roofline estimate
are different claims. Printed side by side as "A -> B" they read as a change the experiment made,
when only the instrument changed. These helpers put the source next to every class, list the rules
an estimate could decide at all, flag percentages above peak (impossible for a counter, common for
an estimate against a low measured peak), and never draw one arrow across sources or machines.
"""

from __future__ import annotations

import itertools
import math

from harness.cards.fields import (
    METRIC_UNITS,
    SOURCE_CPU_ESTIMATE,
    SOURCE_NCU,
    SOURCE_TORCH_CUDA_TRACE,
)
from harness.cards.model import Card, Kernel
from harness.cards.rules import RuleSet, classify_metrics, dominant, evidence_of, undecided

SOURCE_LABELS: dict[str, str] = {
    SOURCE_NCU: "ncu",
    SOURCE_CPU_ESTIMATE: "cpu estimate",
    SOURCE_TORCH_CUDA_TRACE: "trace estimate",
}
NOT_PROFILED = "not profiled"

# Percentages of a peak or of a maximum: none can exceed 100 when it is a reading. The L2 hit rate
# is a ratio of sector counts, not a share of a peak (the shipped report holds one at 101.3), so it
# is left out.
PEAK_PERCENT_FIELDS: tuple[str, ...] = tuple(
    name for name, unit in METRIC_UNITS.items() if unit == "%" and name != "l2_hit_pct"
)


def is_report_card(card: Card) -> bool:
    """A card of a stored ncu report: measured cards always record the machine they ran on."""
    return "environment" not in card.extra


def class_source(card: Card) -> str:
    """Where the card's metrics, and so its class, came from: "ncu", "cpu estimate", "trace estimate".

    A report card has no `metrics_source` (ncu wrote it); a card imported from an ncu report says so
    per kernel; a measured card that ran without a profiler has the key set to None.
    """
    if "metrics_source" in card.extra:
        source = card.extra["metrics_source"]
        if source is None:
            return NOT_PROFILED
    else:
        source = next((k.extra["metrics_source"] for k in card.kernels if k.extra.get("metrics_source")),
                      SOURCE_NCU)
    return SOURCE_LABELS.get(str(source), str(source))


def class_name(card: Card) -> str:
    """The card's class; without one "none", or why the rules could not decide it (NOT_ENOUGH for an estimate,
    TOO_FEW_METRICS for a reading without the metrics they need)."""
    if card.primary is not None:
        return card.primary
    return undecided(card.primary_rule) or "none"


def class_label(card: Card) -> str:
    """The class with its source when that is not ncu: "compute_bound (cpu estimate)"; "none" without one."""
    if card.primary is None:
        return class_name(card)
    source = class_source(card)
    return card.primary if source == "ncu" else f"{card.primary} ({source})"


def is_estimated(kernel: Kernel, name: str) -> bool:
    """Whether a kernel's metric is an estimate: backends list what they estimate (profile/base.py)."""
    listed = kernel.extra.get("estimated_fields")
    return isinstance(listed, list) and name in listed


def dominant_kernel(card: Card) -> Kernel | None:
    """The kernel the card's class was read from; None when the card names one it does not list."""
    if card.dominant_kernel is not None:
        return card.kernel(card.dominant_kernel)
    return dominant(card.kernels)


# A null input is replaced by each end of its range: every rule reads each input once, in one
# direction, combined by and/or only, so its outcome is monotone in each input and the two ends
# bound every value the null could hide.
_ENDS = (0.0, math.inf)


def evaluable_rules(card: Card, rules: RuleSet | None = None) -> list[str]:
    """The rules whose outcome on the dominant kernel holds whatever its null inputs are.

    A CPU estimate has sm_pct and dram_pct but no tensor, L2, warp, wave or cycle figures: it can
    decide compute_bound when sm_pct is high (tensor_pct cannot undo that) and dram_bandwidth_bound,
    and nothing that needs the GPU-only fields. The report's classifier steps over nulls (listing
    them as `missing_inputs`); this says which of its decisions did not depend on that.
    """
    rules = rules or RuleSet()
    kernel = dominant_kernel(card)
    if kernel is None or kernel.metrics is None:
        return []
    evidence = evidence_of(kernel.metrics)
    unknown = [key for key, value in evidence.items() if value is None]
    out: list[str] = []
    for name in rules.order:
        alone = RuleSet(rules.thresholds, (name,))
        outcomes = {
            classify_metrics({**evidence, **dict(zip(unknown, ends))}, alone).classification == name
            for ends in itertools.product(_ENDS, repeat=len(unknown))
        }
        if len(outcomes) == 1:
            out.append(name)
    return out


def flag_over_peak(card: Card) -> list[str]:
    """One line per percentage of peak above 100 on any kernel: no counter reads above its peak."""
    flags: list[str] = []
    for kernel in card.kernels:
        for name in PEAK_PERCENT_FIELDS:
            value = kernel.metric(name)
            if value is None or value <= 100.0:
                continue
            what = ("an estimate above peak, not a measurement" if is_estimated(kernel, name)
                    else "a recorded percentage above 100: a unit or collection error, not a reading")
            flags.append(f"{name} {value:.1f} > 100: {what} (kernel {kernel.name[:60]})")
    return flags


def _machine(card: Card, report_device: str | None) -> str:
    if is_report_card(card):  # its cards record no environment: the report says where (reproduce.reported_device)
        return report_device or "the report names no device"
    env = card.extra.get("environment") or {}
    device, host = env.get("device_name") or "unknown device", env.get("hostname")
    return f"{device} on {host}" if host else device


def same_machine(before: Card, after: Card) -> bool:
    """Both report cards, or both measured where device_name and hostname agree."""
    if is_report_card(before) or is_report_card(after):
        return is_report_card(before) and is_report_card(after)
    eb, ea = before.extra.get("environment") or {}, after.extra.get("environment") or {}
    keys = ("device_name", "hostname")
    return all(eb.get(k) is not None and eb.get(k) == ea.get(k) for k in keys)


def transition(before: Card, after: Card, report_device: str | None = None) -> str:
    """"A -> B" when one instrument on one machine read both; else each side with where it came from, a report
    card's machine being `report_device` (harness.cards.reproduce.reported_device).

    e.g. "report: compute_bound (ncu, H200); here: compute_bound (cpu estimate, <cpu> on <host>)".
    """
    source_b, source_a = class_source(before), class_source(after)
    class_b, class_a = class_name(before), class_name(after)
    if source_b == source_a and same_machine(before, after):
        return f"{class_b} -> {class_a}" + ("" if source_b == "ncu" else f" ({source_b})")
    names = ("report" if is_report_card(before) else "before",
             "report" if is_report_card(after) else "here" if is_report_card(before) else "after")
    sides = ((names[0], class_b, source_b, before), (names[1], class_a, source_a, after))
    return "; ".join(f"{name}: {cls} ({source}, {_machine(card, report_device)})"
                     for name, cls, source, card in sides)
