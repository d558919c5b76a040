"""The six bottleneck rules of the report, with their thresholds as overridable defaults.

Checked in order, first match wins. Missing (null) metrics are handled the way the report's own
classifier did, and said out loud: an atom such as `dram_pct >= 60` cannot fire on a null, a list
such as "sm, tensor, dram and l2 all < 40" is judged on the values that are known (at least one), and
every null the decision had to step over is listed in the evidence under `missing_inputs`.

A kernel whose metrics are roofline estimates (its `metrics_source` is not a counter source: the CPU
roofline, the CUDA trace) lacks the counters most rules read (the SM-active ratio, L2, warps). Stepping
over those nulls the report's way gives a confident class the counters could contradict: on the H200 the
trace read 842ecd, the report's own kernels at the report's time, as unresolved where ncu reads
partial_wave_tail. So an estimate gets a class only when every value its nulls could take gives the same
one (`settled`); otherwise none, and its rule says "estimate: not enough to classify" and why.

A counter reading is held to the same: a kernel ncu read none of the throughputs of (sm, tensor, DRAM,
L2: a report profiled with a narrow metric set) gets a class only where settled, else its rule says "not
enough to classify" and names them; a kernel ncu failed to profile (`ncu_failed`: its metrics NaN) gets
none, its rule saying why. A kernel that carries warp-stall ratios names its dominant stall in its
evidence, and an unresolved one in its rule and the card's next step (harness.cards.stalls).
"""

from __future__ import annotations

import copy
import itertools
import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Iterable, Mapping

from harness.cards.fields import (
    CLASSES,
    COMPUTE_BOUND,
    DRAM_BANDWIDTH_BOUND,
    L2_BANDWIDTH_BOUND,
    LATENCY_OR_OCCUPANCY_LIMITED,
    MEASURED_SOURCES,
    NCU_FAILED,
    PARTIAL_WAVE_TAIL,
    UNRESOLVED,
)
from harness.cards.launches import kernel_total_us, per_invocation_value
from harness.cards.model import Card, Kernel, Report
from harness.cards.stalls import dominant_stall, stall_phrase

# The rule text of an estimate the rules cannot classify (harness.cards.labels shows it as the class).
NOT_ENOUGH = "estimate: not enough to classify"
# The rule text of a counter reading the rules cannot classify: ncu failed, or read no throughput.
TOO_FEW_METRICS = "not enough to classify"
THROUGHPUT_FIELDS = ("sm_pct", "tensor_pct", "dram_pct", "l2_pct")
REPROFILE = ("Re-profile with the metrics the rules read (ncu's SpeedOfLight, LaunchStats and Occupancy sections), "
             "then classify")


def undecided(rule: str | None) -> str | None:
    """NOT_ENOUGH or TOO_FEW_METRICS when a kernel's or card's rule says why it has no class; else None."""
    return next((label for label in (NOT_ENOUGH, TOO_FEW_METRICS) if (rule or "").startswith(label)), None)


@dataclass(frozen=True)
class Thresholds:
    compute_pct: float = 60.0
    dram_pct: float = 60.0
    l2_pct: float = 60.0
    tail_active_ratio: float = 0.85
    tail_max_waves: float = 1.5
    latency_max_pct: float = 40.0
    latency_warps_active_pct: float = 25.0
    latency_waves: float = 1.0


@dataclass(frozen=True)
class ClassText:
    rule: str
    alternative_explanation: str
    counter_experiment: str


# Texts as the report writes them. latency_or_occupancy_limited is never a card primary in the
# report, so its alternative and counter-experiment are ours (marked by the harness prefix).
CLASS_TEXT: dict[str, ClassText] = {
    COMPUTE_BOUND: ClassText(
        "sm or tensor-pipe throughput >= 60% of peak sustained",
        "Padding/redundant work inside nominal FLOPs; instruction mix vs tensor pipe",
        "Same dtype better tile/kernel; compare effective vs executed FLOPs",
    ),
    DRAM_BANDWIDTH_BOUND: ClassText(
        "DRAM throughput >= 60% of peak sustained",
        "Cache-unfriendly layout or spills inflating traffic",
        "Layout/fusion that lowers DRAM bytes; check bytes and time fall together",
    ),
    L2_BANDWIDTH_BOUND: ClassText(
        "L2 (lts) throughput >= 60% while DRAM < 60%",
        "Working set thrashing L2; DRAM counter under-reads write-back",
        "Blocking/reuse change; compare lts bytes",
    ),
    PARTIAL_WAVE_TAIL: ClassText(
        "SM active cycles < 85% of elapsed with <= 1.5 waves: grid too small for the machine "
        "(tail/launch-limited)",
        "Small M for this rank shard; multi-kernel split",
        "Batch/tile change or larger per-rank M; compare waves and duration",
    ),
    LATENCY_OR_OCCUPANCY_LIMITED: ClassText(
        "all throughputs < 40% with low achieved occupancy or < 1 wave",
        "(harness) Launch overhead or a dependent-latency chain; too little parallel work",
        "(harness) Fuse or batch launches, or raise parallelism; compare achieved occupancy, waves "
        "and duration",
    ),
    UNRESOLVED: ClassText(
        "no unit >= 60% and no clear occupancy/tail signature; needs warp-stall breakdown (not "
        "collected)",
        "Mixed limiter or measurement window artifact",
        "Collect stall reasons (smsp__warp_issue_stalled_*) and l1tex/lts bytes",
    ),
}

# An unresolved kernel that carries warp-stall ratios: its rule names the dominant stall instead.
UNRESOLVED_WITH_STALLS = "no unit >= 60% and no clear occupancy/tail signature; dominant warp stall: "

DEFAULT_ORDER: tuple[str, ...] = CLASSES[:-1]


@dataclass(frozen=True)
class RuleSet:
    thresholds: Thresholds = field(default_factory=Thresholds)
    order: tuple[str, ...] = DEFAULT_ORDER

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | None) -> RuleSet:
        """Build from a mapping like conf/rules/default.yaml; unknown keys are an error."""
        if not cfg:
            return cls()
        cfg = dict(cfg)
        order = tuple(cfg.pop("order", DEFAULT_ORDER))
        unknown_classes = [name for name in order if name not in DEFAULT_ORDER]
        if unknown_classes:
            raise ValueError(
                f"rules.order: unknown rule(s) {unknown_classes}; choose from {list(DEFAULT_ORDER)}"
            )
        raw = dict(cfg.pop("thresholds", {}) or {})
        if cfg:
            raise ValueError(f"rules: unknown key(s) {sorted(cfg)}; expected 'thresholds' and 'order'")
        names = {f.name for f in fields(Thresholds)}
        unknown = sorted(set(raw) - names)
        if unknown:
            raise ValueError(f"rules.thresholds: unknown key(s) {unknown}; expected {sorted(names)}")
        values: dict[str, float] = {}
        for key, value in raw.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"rules.thresholds.{key} must be a number, got {value!r}")
            values[key] = float(value)
        return cls(Thresholds(**values), order)

    def describe(self) -> dict[str, Any]:
        return {"thresholds": asdict(self.thresholds), "order": list(self.order)}


def _active_ratio(metrics: Mapping[str, Any]) -> float | None:
    active, elapsed = metrics.get("sm_cycles_active"), metrics.get("cycles_elapsed")
    if active is None or not elapsed:
        return None
    return float(active) / float(elapsed)


def evidence_of(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """The values the rules read, in the report's evidence layout."""
    keys = ("sm_pct", "tensor_pct", "dram_pct", "l2_pct", "warps_active_pct", "waves")
    out: dict[str, Any] = {key: metrics.get(key) for key in keys}
    out["sm_active_over_elapsed"] = metrics.get("sm_active_over_elapsed", _active_ratio(metrics))
    return out


@dataclass(frozen=True)
class Decision:
    classification: str
    rule: str
    evidence: dict[str, Any]


class _Judge:
    """Three-valued helpers that remember which nulls a decision stepped over."""

    def __init__(self, values: Mapping[str, Any]):
        self.values = values
        self.missing: list[str] = []

    def atom(self, key: str, test) -> bool:
        value = self.values.get(key)
        if value is None:
            self._miss(key)
            return False
        return bool(test(float(value)))

    def any_of(self, keys: Iterable[str], test) -> bool:
        known = self._known(keys)
        return any(test(v) for v in known)

    def all_of(self, keys: Iterable[str], test) -> bool:
        known = self._known(keys)
        return bool(known) and all(test(v) for v in known)

    def _known(self, keys: Iterable[str]) -> list[float]:
        out = []
        for key in keys:
            value = self.values.get(key)
            if value is None:
                self._miss(key)
            else:
                out.append(float(value))
        return out

    def _miss(self, key: str) -> None:
        if key not in self.missing:
            self.missing.append(key)


def _fires(name: str, t: Thresholds, judge: _Judge) -> bool:
    if name == COMPUTE_BOUND:
        return judge.any_of(("sm_pct", "tensor_pct"), lambda v: v >= t.compute_pct)
    if name == DRAM_BANDWIDTH_BOUND:
        return judge.atom("dram_pct", lambda v: v >= t.dram_pct)
    if name == L2_BANDWIDTH_BOUND:
        return judge.atom("l2_pct", lambda v: v >= t.l2_pct) and judge.atom(
            "dram_pct", lambda v: v < t.dram_pct
        )
    if name == PARTIAL_WAVE_TAIL:
        return judge.atom("sm_active_over_elapsed", lambda v: v < t.tail_active_ratio) and judge.atom(
            "waves", lambda v: v <= t.tail_max_waves
        )
    if name == LATENCY_OR_OCCUPANCY_LIMITED:
        quiet = judge.all_of(
            ("sm_pct", "tensor_pct", "dram_pct", "l2_pct"), lambda v: v < t.latency_max_pct
        )
        starved = judge.any_of(("warps_active_pct",), lambda v: v < t.latency_warps_active_pct) or (
            judge.any_of(("waves",), lambda v: v < t.latency_waves)
        )
        return quiet and starved
    raise ValueError(f"unknown rule {name!r}")


def classify_metrics(metrics: Mapping[str, Any], rules: RuleSet | None = None) -> Decision:
    """Class and rule text of one kernel's metrics (or of an evidence dict)."""
    rules = rules or RuleSet()
    evidence = evidence_of(metrics)
    judge = _Judge(evidence)
    for name in rules.order:
        if _fires(name, rules.thresholds, judge):
            return Decision(name, CLASS_TEXT[name].rule, _with_missing(evidence, judge.missing))
    return Decision(UNRESOLVED, CLASS_TEXT[UNRESOLVED].rule, _with_missing(evidence, judge.missing))


def _with_missing(evidence: dict[str, Any], missing: list[str]) -> dict[str, Any]:
    if missing:
        return {**evidence, "missing_inputs": list(missing)}
    return evidence


# A null input is replaced by each end of its range. Every rule reads each input once, in one direction,
# combined by and/or only, so whether it fires is monotone in each input: if some value of the nulls makes
# an earlier rule fire (or the decided one not fire), an end does too, and the ends decide "settled".
_ENDS = (0.0, math.inf)


def possible_classes(metrics: Mapping[str, Any], rules: RuleSet | None = None) -> list[str]:
    """The classes the rules give at the ends of every null input's range, in rule order (one: settled)."""
    rules = rules or RuleSet()
    evidence = evidence_of(metrics)
    unknown = [key for key, value in evidence.items() if value is None]
    found = {classify_metrics({**evidence, **dict(zip(unknown, ends))}, rules).classification
             for ends in itertools.product(_ENDS, repeat=len(unknown))}
    return [name for name in (*rules.order, UNRESOLVED) if name in found]


def is_estimate(kernel: Kernel) -> bool:
    """Metrics from a roofline estimate (a backend's `metrics_source` that is not a counter source)."""
    source = kernel.extra.get("metrics_source")
    return source is not None and source not in MEASURED_SOURCES


def _unsettled(kernel: Kernel, decision: Decision, rules: RuleSet | None) -> tuple[str, list[str]] | None:
    """Why the decision does not stand, with the classes it could be: an estimate's or a throughput-less
    counter reading's nulls could give another class; None when it stands."""
    metrics = kernel.metrics or {}
    estimate = is_estimate(kernel)
    if not estimate and any(metrics.get(name) is not None for name in THROUGHPUT_FIELDS):
        return None
    possible = possible_classes(metrics, rules)
    if len(possible) == 1:
        return None
    unknown = [key for key, value in decision.evidence.items() if value is None]
    also = [key for key in unknown if key not in THROUGHPUT_FIELDS]
    lacks = (f"{NOT_ENOUGH}: the estimate lacks {', '.join(unknown)}" if estimate else
             f"{TOO_FEW_METRICS}: ncu read none of {', '.join(THROUGHPUT_FIELDS)} (not in the report's metric set)"
             + (f" nor {', '.join(also)}" if also else ""))
    return (f"{lacks}, and the rules' answer turns on them (it could be {', '.join(possible[:-1])} or "
            f"{possible[-1]})", possible)


def classify_kernel(kernel: Kernel, rules: RuleSet | None = None) -> Kernel:
    """A copy of the kernel with classification, rule and evidence recomputed (damaged: unchanged).

    A kernel ncu failed on, or whose nulls could classify it otherwise, gets no class: its rule says why. One
    with warp-stall ratios names its dominant stall in its evidence (and in its rule, when unresolved)."""
    out = copy.deepcopy(kernel)
    if kernel.metrics is None:
        return out
    decision = classify_metrics(kernel.metrics, rules)
    out.classification, out.rule, out.evidence = decision.classification, decision.rule, decision.evidence
    stall = dominant_stall(kernel)
    if stall is not None:
        out.evidence = {**decision.evidence, "dominant_stall": stall}
        if decision.classification == UNRESOLVED:
            out.rule = f"{UNRESOLVED_WITH_STALLS}{stall_phrase(stall)}"
    failed = kernel.extra.get(NCU_FAILED)
    unsettled = None if failed else _unsettled(kernel, decision, rules)
    if failed:
        out.classification, out.rule = None, f"{TOO_FEW_METRICS}: ncu failed on this kernel: {failed}"
    elif unsettled is not None:
        out.classification, out.rule = None, unsettled[0]
        out.evidence = {**out.evidence, "possible_classes": unsettled[1]}
    return out


def dominant(kernels: Iterable[Kernel]) -> Kernel | None:
    """The kernel with the longest known time over its launches (first one on ties)."""
    best: Kernel | None = None
    for kernel in kernels:
        total = kernel_total_us(kernel)
        if total is not None and (best is None or total > (kernel_total_us(best) or 0.0)):
            best = kernel
    return best


def _unlisted_time(card: Card) -> float:
    if card.summed_kernel_us is None:
        return 0.0
    listed = sum(per_invocation_value(card, k, k.metric("dur_us")) or 0.0 for k in card.kernels)
    return max(float(card.summed_kernel_us) - listed, 0.0)


def _why_unclassified(card: Card, top: Kernel | None) -> str | None:
    """The rule of the kernel that says why the card has no class: its dominant's, else (no kernel duration
    known, e.g. every launch failed) the first kernel's that says why."""
    if top is not None:
        return top.rule if undecided(top.rule) else None
    return next((k.rule for k in card.kernels if undecided(k.rule)), None)


def classify_card(card: Card, rules: RuleSet | None = None) -> Card:
    """A copy of the card with every kernel re-classified and the card verdict recomputed.

    Durations are taken as they stand: classify a normalized card (harness.cards.lint.normalize)
    when the input may carry unit errors.
    """
    out = copy.deepcopy(card)
    out.kernels = [classify_kernel(k, rules) for k in card.kernels]
    top = dominant(out.kernels)
    unlisted = _unlisted_time(out)
    if top is not None and unlisted > (per_invocation_value(out, top, top.metric("dur_us")) or 0.0):
        # More time is missing from the list than its longest kernel took: the dominant is unknown.
        out.extra["classification_note"] = (
            f"{unlisted:.3f} us of summed_kernel_us is not in the kernel list, more than its longest "
            f"kernel; the dominant kernel is not listed (stored primary: {card.primary})"
        )
        out.primary = out.primary_rule = None
        text = CLASS_TEXT[UNRESOLVED]
        out.status = "unresolved"
    elif top is None or top.classification is None:
        out.dominant_kernel = top.name if top else None
        out.primary = None
        out.primary_rule = _why_unclassified(out, top)
        text = CLASS_TEXT[UNRESOLVED]
        out.status = "unresolved"
    else:
        out.dominant_kernel = top.name
        out.primary = top.classification
        text = CLASS_TEXT[top.classification]
        out.primary_rule = top.rule
        out.status = "unresolved" if out.primary == UNRESOLVED else "classified"
    out.alternative_explanation = text.alternative_explanation
    out.counter_experiment = text.counter_experiment
    stall = (top.evidence or {}).get("dominant_stall") if top is not None else None
    if undecided(out.primary_rule) == TOO_FEW_METRICS:
        out.counter_experiment = REPROFILE + (f"; its dominant warp stall, read already: {stall_phrase(stall)}"
                                              if isinstance(stall, dict) else "")
    elif out.primary == UNRESOLVED and isinstance(stall, dict):
        out.counter_experiment = (f"Act on the dominant warp stall, {stall['reason']} ({stall['meaning']}); "
                                  "compare its share of the stall cycles and the duration")
    return out


def class_counts(cards: Iterable[Card]) -> tuple[dict[str, int], dict[str, dict[str, int]]]:
    """`summary` and `by_stage` as the report counts them: a card without a primary is unresolved."""
    summary: dict[str, int] = {}
    by_stage: dict[str, dict[str, int]] = {}
    for card in cards:
        name = card.primary or UNRESOLVED
        summary[name] = summary.get(name, 0) + 1
        stage = by_stage.setdefault(card.stage, {})
        stage[name] = stage.get(name, 0) + 1
    return summary, by_stage


def rules_text(rules: RuleSet) -> str:
    t = rules.thresholds
    parts = {
        COMPUTE_BOUND: f"compute_bound: sm or tensor pipe >= {t.compute_pct:g}%",
        DRAM_BANDWIDTH_BOUND: f"dram_bandwidth_bound: dram >= {t.dram_pct:g}%",
        L2_BANDWIDTH_BOUND: f"l2_bandwidth_bound: lts >= {t.l2_pct:g}% & dram < {t.dram_pct:g}%",
        PARTIAL_WAVE_TAIL: f"partial_wave_tail: sm_active/elapsed < {t.tail_active_ratio:g} & waves <= "
        f"{t.tail_max_waves:g}",
        LATENCY_OR_OCCUPANCY_LIMITED: f"latency_or_occupancy_limited: all < {t.latency_max_pct:g}% & "
        f"(warps_active < {t.latency_warps_active_pct:g}% or waves < {t.latency_waves:g})",
    }
    return "; ".join(parts[name] for name in rules.order) + "; else unresolved"


def classify_report(report: Report, rules: RuleSet | None = None) -> Report:
    """A copy of the report with every card re-classified and the counts rebuilt."""
    rules = rules or RuleSet()
    out = copy.copy(report)
    out.cards = [classify_card(c, rules) for c in report.cards]
    out.summary, out.by_stage = class_counts(out.cards)
    out.rules = rules_text(rules)
    return out
