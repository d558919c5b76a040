"""Find the report's defects (docs/domain.md section 1) and offer a normalized view that fixes the safe ones.

Unit errors are found by cross-checks that the report carries itself, calibrated on the report
(harness.cards.units):
- a duration: `cycles_elapsed / dur_us` is the SM clock in MHz; the report's median clock is the
  reference, and a duration whose clock is off by a power of 1000 was written in ms (or s);
- a byte count: `(dram_read_mb + dram_write_mb) / (dur_us * dram_pct / 100)` is the DRAM peak
  bandwidth; the report's median is the reference, and the one combination of scale factors for
  read and write that lands on it (and no runner-up close to it) is the correction;
- `smem_static_b` is a whole number of bytes: a fraction that becomes whole times 1000 was in KB;
- a percentage (any `*_pct` field) above 100 is no reading at all: null in the normalized view, never
  classified on (`impossible_percent`);
- `summed_kernel_us` against the sum of the (normalized) listed kernels.
A value is corrected only when exactly one reading is consistent; otherwise it is reported as
`unit_suspect` and left alone. Every correction is written into the card under `normalization`.

Each finding code has one severity (SEVERITY), so that a reader, and a script by the exit status of
`python -m harness.report lint`, can tell lost data from a fixed unit from a harmless quirk:
- error: data is lost and no cross-check brings it back; what the card says rests on part of its
  kernels. damaged_entry, merged_name, dominant_missing.
- warning: a stored value is wrong or disagrees with the rest of the report; the normalized view
  corrects it (the finding says how: `x1000 gives 1967 MHz`) or leaves it marked as unsettled.
  unit_scaled, unit_suspect, impossible_percent, sum_mismatch, dominant_mismatch, classification_mismatch,
  summary_mismatch, primary_missing, duplicate_id (a card read under another id than it stored).
- info: a value is absent or stored in an unusual form, nothing in it is wrong; the harness works
  around it (card time from the kernel sum, a cast's lost shape rebuilt by the run, ids that tell
  apart cards of one group). null_field, missing_field, null_metrics, missing_metrics,
  shape_parameters_encoded, duplicate_group.
Exit status of `lint` (EXIT_BY_SEVERITY): 0 with no finding or only info, 1 when the worst is a
warning, 3 when there is an error; 2 stays what it is for every command: the report could not be read.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any

from harness.cards.fields import MEASURED_SOURCES, METRIC_FIELDS, UNRESOLVED
from harness.cards.findings import REPORT_LEVEL, Correction, Finding
from harness.cards.kernel_names import damaged_stem, is_merged_name
from harness.cards.launches import kernel_total_us, per_invocation, per_invocation_value
from harness.cards.model import ID_RENAMED, Card, Kernel, Report
from harness.cards.rules import CLASS_TEXT, class_counts, classify_metrics, undecided
from harness.cards.units import (
    SCALE_FACTORS,
    Calibration,
    byte_factors,
    calibrate,
    duration_factor,
    impossible_percent,
    number,
)

SUM_TOLERANCE = 0.005  # relative disagreement tolerated between summed_kernel_us and the list


# ---------------------------------------------------------------------------------------------
# Lint and normalize in one pass: lint reports what normalize fixes, so they cannot disagree.


@dataclass
class _CardResult:
    card: Card
    findings: list[Finding]
    corrections: list[Correction]


@dataclass
class _Notes:
    """What one card's pass found and corrected, in the order found (the lint lines keep that order)."""

    card_id: str
    findings: list[Finding]
    corrections: list[Correction]

    def find(self, kernel: str | None, code: str, detail: str, field: str | None = None) -> None:
        self.findings.append(Finding(self.card_id, kernel, code, detail, field))

    def correct(self, code: str, kernel: Kernel | None, field: str, before: Any, after: Any, reason: str) -> None:
        self.corrections.append(Correction(kernel.name if kernel else None, field, before, after, reason, code))


def _normalize_card(card: Card, cal: Calibration) -> _CardResult:
    out = copy.deepcopy(card)
    notes = _Notes(card.id, [], [])
    _card_fields(card, out, notes)
    unknown_durations: list[Kernel] = []
    for index, kernel in enumerate(out.kernels):
        if kernel.metrics is None:
            out.kernels[index] = _damaged(kernel, notes)
            unknown_durations.append(out.kernels[index])
        elif _kernel_units(kernel, card.kernels[index], cal, notes):
            unknown_durations.append(kernel)
    _kernel_sum(card, out, unknown_durations, notes)
    _dominant(card, out, notes)
    if notes.corrections:
        out.extra["normalization"] = [c.as_dict() for c in notes.corrections]
    return _CardResult(out, notes.findings, notes.corrections)


def _card_fields(card: Card, out: Card, notes: _Notes) -> None:
    """The card's own fields: an encoded shape (decoded in `out`), absent or null fields, no primary class."""
    if card.shape_parameters_encoded:
        notes.find(None, "shape_parameters_encoded", "shape_parameters is a JSON-encoded string, not an object",
                   "shape_parameters")
        out.shape_parameters_encoded = False
        notes.correct("shape_parameters_encoded", None, "shape_parameters", "<json string>", "<object>",
                      "decoded the JSON string")
    for name in ("summed_kernel_us", "nominal_mac_flops", "input_sha256"):
        if name not in card.keys:
            notes.find(None, "missing_field", f"card has no {name!r}", name)
        elif getattr(card, name) is None:
            notes.find(None, "null_field", f"{name} is null", name)
    if not card.shape_parameters:
        notes.find(None, "null_field", "shape_parameters is empty: the op's shape was lost", "shape_parameters")
    # An estimate or a reading the rules could not settle has no class by design, and says why in primary_rule.
    if card.primary is None and not undecided(card.primary_rule):
        notes.find(None, "primary_missing", f"card has no primary class (status {card.status!r})", "primary")


def _damaged(kernel: Kernel, notes: _Notes) -> Kernel:
    """A kernel entry whose metrics a `<...>` cut ate: recovered from its evidence (its duration unknown)."""
    stem = damaged_stem(kernel.name)
    notes.find(kernel.name, "damaged_entry",
               f"metrics, classification and rule lost (name runs into rule text; kernel was {stem!r}); "
               "only evidence survives")
    recovered = _recover(kernel, stem)
    notes.correct("damaged_entry", recovered, "kernel", kernel.name, stem,
                  "damaged entry: name cut at the leaked rule text, metrics taken from its evidence, "
                  "class recomputed from the evidence")
    return recovered


def _kernel_units(kernel: Kernel, original: Kernel, cal: Calibration, notes: _Notes) -> bool:
    """One intact kernel's findings, its values written in a larger unit corrected in place; whether its
    duration is still unknown."""
    if is_merged_name(kernel.name):
        notes.find(kernel.name, "merged_name",
                   "function name and parameter type belong to different kernels: entries between them were lost")
    metrics = kernel.metrics
    assert metrics is not None  # a kernel without metrics is a damaged entry (_damaged)
    nulls = [f for f in METRIC_FIELDS if f in metrics and metrics[f] is None]
    # An estimating backend (CPU roofline, torch.profiler trace) cannot know some fields: its
    # nulls say so by design; only a measured or the report's own kernel should have them all.
    estimated = kernel.extra.get("metrics_source") not in (None, *MEASURED_SOURCES)
    if nulls and not estimated:
        notes.find(kernel.name, "null_metrics", "null: " + ", ".join(nulls))
    missing = [f for f in METRIC_FIELDS if f not in metrics]
    if missing:
        notes.find(kernel.name, "missing_metrics", "absent: " + ", ".join(missing))
    _duration_unit(kernel, metrics, cal, notes)
    unknown = number(metrics.get("dur_us")) is None
    _byte_units(kernel, metrics, cal, notes)
    _static_smem_unit(kernel, metrics, notes)
    _percent_range(kernel, metrics, notes)
    if original.classification is not None:
        decision = classify_metrics(original.metrics or {})
        if decision.classification != original.classification:
            notes.find(kernel.name, "classification_mismatch",
                       f"stored {original.classification}, the rules give {decision.classification}")
    return unknown


def _duration_unit(kernel: Kernel, metrics: dict[str, Any], cal: Calibration, notes: _Notes) -> None:
    factor, why = duration_factor(metrics, cal)
    if factor is None:
        notes.find(kernel.name, "unit_suspect", why, "dur_us")
    elif factor != 1.0:
        notes.find(kernel.name, "unit_scaled", f"dur_us written in a larger unit: {why}", "dur_us")
        before = metrics["dur_us"]
        assert before is not None  # a factor other than 1 comes from a numeric dur_us (its clock)
        metrics["dur_us"] = before * factor
        notes.correct("unit_scaled", kernel, "dur_us", before, metrics["dur_us"], why)


def _byte_units(kernel: Kernel, metrics: dict[str, Any], cal: Calibration, notes: _Notes) -> None:
    factors, why = byte_factors(metrics, number(metrics.get("dur_us")), cal)
    if factors is None:
        notes.find(kernel.name, "unit_suspect", why, "dram_read_mb")
        return
    for field, f in zip(("dram_read_mb", "dram_write_mb"), factors):
        if f is None:
            notes.find(kernel.name, "unit_suspect", f"{field}: {why}", field)
        elif f != 1.0:
            before = metrics[field]
            assert before is not None  # a factor other than 1 comes from numeric bytes
            metrics[field] = before * f
            notes.find(kernel.name, "unit_scaled", f"{field} written in a larger unit: {why}", field)
            notes.correct("unit_scaled", kernel, field, before, metrics[field], why)


def _static_smem_unit(kernel: Kernel, metrics: dict[str, Any], notes: _Notes) -> None:
    static = number(metrics.get("smem_static_b"))
    if static is None or static == int(static):
        return
    scaled = static * 1000
    if abs(scaled - round(scaled)) < 1e-6:
        why = f"{static:g} is not a whole number of bytes; x1000 gives {round(scaled)} B"
        notes.find(kernel.name, "unit_scaled", f"smem_static_b written in KB: {why}", "smem_static_b")
        metrics["smem_static_b"] = float(round(scaled))
        notes.correct("unit_scaled", kernel, "smem_static_b", static, metrics["smem_static_b"], why)
    else:
        notes.find(kernel.name, "unit_suspect", f"smem_static_b {static:g} is not a whole number of bytes",
                   "smem_static_b")


def _percent_range(kernel: Kernel, metrics: dict[str, Any], notes: _Notes) -> None:
    for field in METRIC_FIELDS:
        value = metrics.get(field)
        if impossible_percent(field, value):
            why = f"{field} {value:g}% is above 100%: a counter artefact, not a share; null in the normalized view"
            notes.find(kernel.name, "impossible_percent", why, field)
            metrics[field] = None
            notes.correct("impossible_percent", kernel, field, value, None, why)


def _kernel_sum(card: Card, out: Card, unknown_durations: list[Kernel], notes: _Notes) -> None:
    """summed_kernel_us against the listed kernels (each entry's launches counted: harness.cards.launches): one
    unknown duration inferred from it, a sum in another unit corrected, any other difference a sum_mismatch."""
    listed = sum(per_invocation_value(out, k, number(k.metric("dur_us"))) or 0.0 for k in out.kernels)
    if card.summed_kernel_us is None:
        return
    total = float(card.summed_kernel_us)
    if len(unknown_durations) == 1 and total > listed:
        kernel = unknown_durations[0]
        inferred = (total - listed) / per_invocation(out, kernel)
        assert kernel.metrics is not None
        kernel.metrics["dur_us"] = inferred
        kernel.extra["dur_us_inferred"] = True
        notes.correct("dur_us_inferred", kernel, "dur_us", None, inferred,
                      "inferred as summed_kernel_us minus the other listed kernels (may include lost kernels)")
        listed = total
    if math.isclose(listed, total, rel_tol=SUM_TOLERANCE, abs_tol=0.01):
        return
    ratio = total / listed if listed else math.inf
    sum_factor = next((f for f in SCALE_FACTORS[1:] if math.isclose(ratio, 1 / f, rel_tol=SUM_TOLERANCE)), None)
    if sum_factor:
        why = f"summed_kernel_us {total:g} is 1/{sum_factor:g} of the listed sum {listed:g}"
        notes.find(None, "unit_scaled", why, "summed_kernel_us")
        out.summed_kernel_us = listed
        notes.correct("unit_scaled", None, "summed_kernel_us", total, listed, why)
    else:
        notes.find(None, "sum_mismatch",
                   f"summed_kernel_us {total:g} us, listed kernels sum to {listed:g} us "
                   f"({total - listed:+.4g} us unaccounted)", "summed_kernel_us")


def _dominant(card: Card, out: Card, notes: _Notes) -> None:
    """The stored dominant kernel: listed at all, and the longest one."""
    names = {k.name for k in card.kernels}
    if card.dominant_kernel is not None and card.dominant_kernel not in names:
        notes.find(None, "dominant_missing",
                   f"dominant kernel {card.dominant_kernel[:80]!r} is not in the kernel list (list truncated)",
                   "dominant_kernel")
        return
    if card.dominant_kernel is None:
        return
    longest = max((k for k in out.kernels if k.metric("dur_us") is not None),
                  key=lambda k: kernel_total_us(k) or 0.0, default=None)

    def known_as(kernel: Kernel) -> str:
        return kernel.extra.get("recovered_from", kernel.name)

    if longest is not None and known_as(longest) != card.dominant_kernel and not any(
        known_as(k) == card.dominant_kernel and kernel_total_us(k) == kernel_total_us(longest)
        for k in out.kernels
    ):
        notes.find(None, "dominant_mismatch",
                   f"stored dominant {card.dominant_kernel[:60]!r} is not the longest kernel "
                   f"({longest.name[:60]!r})", "dominant_kernel")


def _recover(kernel: Kernel, stem: str) -> Kernel:
    evidence = dict(kernel.evidence or {})
    metrics: dict[str, Any] = {name: None for name in METRIC_FIELDS}
    for key in ("sm_pct", "tensor_pct", "dram_pct", "l2_pct", "warps_active_pct", "waves"):
        metrics[key] = number(evidence.get(key))
    ratio = number(evidence.get("sm_active_over_elapsed"))
    decision = classify_metrics({**metrics, "sm_active_over_elapsed": ratio})
    tail_matches = [
        name for name, text in CLASS_TEXT.items() if kernel.name.endswith(text.rule[-20:])
    ]
    extra = {
        **kernel.extra,
        "recovered_from": kernel.name,
        "rule_text_tail_suggests": tail_matches,
    }
    if ratio is not None:
        extra["sm_active_over_elapsed"] = ratio
    recovered = Kernel(
        name=stem,
        metrics=metrics,
        classification=decision.classification,
        rule=decision.rule,
        evidence=decision.evidence,
        extra=extra,
    )
    if tail_matches and decision.classification not in tail_matches:
        recovered.extra["recovery_conflict"] = (
            f"evidence gives {decision.classification}, leaked rule text suggests {tail_matches}"
        )
    return recovered


def _report_findings(report: Report) -> list[Finding]:
    findings: list[Finding] = []
    summary, by_stage = class_counts(report.cards)
    if report.summary is not None and report.summary != summary:
        diff = _count_diff(report.summary, summary)
        findings.append(Finding(REPORT_LEVEL, None, "summary_mismatch", f"summary vs cards: {diff}", "summary"))
    if report.by_stage is not None:
        for stage in sorted(set(report.by_stage) | set(by_stage)):
            stored, actual = report.by_stage.get(stage, {}), by_stage.get(stage, {})
            if stored != actual:
                findings.append(Finding(REPORT_LEVEL, None, "summary_mismatch",
                                        f"by_stage.{stage} vs cards: {_count_diff(stored, actual)}", "by_stage"))
    groups: dict[str, list[str]] = {}
    for card in report.cards:
        groups.setdefault(card.group, []).append(card.id)
    for group, ids in groups.items():
        if len(ids) > 1:
            findings.append(Finding(REPORT_LEVEL, None, "duplicate_group",
                                    f"group {group!r} is shared by {len(ids)} cards: {', '.join(ids)}", "group"))
    for card in report.cards:  # the loader made a repeated id unique (harness.cards.model._unique_ids)
        if isinstance(note := card.extra.get(ID_RENAMED), dict):
            findings.append(Finding(card.id, None, "duplicate_id",
                                    f"card {note['card']} has the id {note['stored_id']!r} of card "
                                    f"{note['same_as_card']}: read as {card.id!r}", "id"))
    return findings


def _count_diff(stored: dict[str, int], actual: dict[str, int]) -> str:
    keys = sorted(set(stored) | set(actual))
    parts = [f"{k} {stored.get(k, 0)} stored, {actual.get(k, 0)} counted" for k in keys
             if stored.get(k, 0) != actual.get(k, 0)]
    return "; ".join(parts) + f" (a card without a primary counts as {UNRESOLVED})"


@dataclass
class LintResult:
    findings: list[Finding]
    normalized: Report
    corrections: dict[str, list[Correction]]
    calibration: Calibration


def lint_report(report: Report) -> LintResult:
    cal = calibrate(report.cards)
    results = [_normalize_card(card, cal) for card in report.cards]
    normalized = copy.copy(report)
    normalized.cards = [r.card for r in results]
    findings = [f for r in results for f in r.findings] + _report_findings(report)
    corrections = {r.card.id: r.corrections for r in results if r.corrections}
    normalized.extra = {
        **report.extra,
        "normalized": {
            "clock_mhz_reference": cal.clock_mhz,
            "dram_tb_s_reference": cal.dram_tb_s,
            "corrections": sum(len(c) for c in corrections.values()),
        },
    }
    return LintResult(findings, normalized, corrections, cal)


def normalize(report: Report) -> Report:
    return lint_report(report).normalized
