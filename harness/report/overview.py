"""The end-to-end view across cards: where the report's time is, and what the measured wins would save.

Each card's time is its summed kernel time in the report (one call of that op at that shape; the
report gives no call counts, so shares are of the summed card times). A card's saving, if its
adopted variant were taken into the model, is report_us x (1 - 1/speedup), counted only when the
speedup can stand for the report's GPU: the variant was adopted (feasible, confirmed FASTER on a
fair same-machine comparison) and it was measured on the report's GPU model (`report_device` where given,
else what the report declares: the shipped report's H200) at workload scale 1. Anywhere else (a CPU, another GPU, a
reduced scale) the table shows the measured speedup and "not projected". Savings are summed per
resolution and stage (dit, vae, attention, output).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from harness.cards.diff_markdown import speedup_text, verdict_text
from harness.cards.diff_rows import CardDiff
from harness.cards.measures import card_time_us
from harness.cards.model import Card, Report

FASTER = "FASTER"


@dataclass(frozen=True)
class CardResult:
    """What one experiment found for one card of the report."""

    card: Card  # the report's card
    experiment: str
    variant: str | None
    diff: CardDiff | None  # baseline vs the best variant tried; None when no variant was feasible
    measured: Card | None = None  # the re-profiled baseline: where and at what scale it was measured
    other_kernels: bool = False  # its baseline ran other kernels than the report's (harness.cards.reproduce)

    @property
    def win(self) -> float | None:
        """The speedup, when it is a confirmed, adopted, fair win; else None."""
        d = self.diff
        if d is None or d.speedup is None or d.timing_verdict != FASTER or not d.fair or d.adopted is False:
            return None
        return d.speedup

    def projectable(self, report_device: str | None) -> tuple[bool, str]:
        """Whether the win may be applied to the report's times, and if not, why."""
        extra = self.measured.extra if self.measured is not None else {}
        device = str((extra.get("environment") or {}).get("device_name") or "")
        scale = (extra.get("workload") or {}).get("scale")
        if report_device is None:
            return False, "the report names no GPU: set report_device"
        if report_device.lower() not in device.lower():
            return False, f"measured on {device or 'an unknown device'}, not the report's {report_device}"
        if scale != 1 and scale != 1.0:
            return False, f"measured at workload scale {scale}, not 1"
        if self.other_kernels:
            return False, "its baseline ran other kernels than the report's (OTHER_KERNELS): another op"
        return True, ""


def best_per_card(results: list[CardResult]) -> dict[str, CardResult]:
    """For each card, the result with the largest win (when none won, the largest speedup measured)."""
    def rank(result: CardResult) -> tuple[float, float]:
        speedup = result.diff.speedup if result.diff and result.diff.speedup else 0.0
        return result.win or 0.0, speedup

    chosen: dict[str, CardResult] = {}
    for result in results:
        current = chosen.get(result.card.id)
        if current is None or rank(result) > rank(current):
            chosen[result.card.id] = result
    return chosen


def _us(card: Card) -> float:
    return card_time_us(card, prefer_timing=False) or 0.0


def render_end_to_end(report: Report, results: list[CardResult], measured_on: str,
                      report_device: str | None) -> str:
    """Markdown: per card share and saving, then per resolution and stage totals."""
    chosen = best_per_card(results)
    # Keyed by the card's resolution (None for a card without one) and stage.
    stage_total: dict[tuple[str | None, str], float] = defaultdict(float)
    resolution_total: dict[str | None, float] = defaultdict(float)
    for card in report.cards:
        stage_total[(card.resolution, card.stage)] += _us(card)
        resolution_total[card.resolution] += _us(card)
    lines = [
        "## End to end: the report's time and what adopting the wins would save",
        "",
        f"Speedups measured on {measured_on}. A saving is projected onto the report's card times only for "
        "an adopted win (feasible, confirmed FASTER, fair) measured on the report's GPU "
        f"({report_device or 'none named'}, setting `report_device`) at workload scale 1; elsewhere the measured "
        "speedup is shown and the saving reads \"not projected\". Report us: the report card's kernel-duration "
        "sum per invocation (one call of that op at that shape); shares are of these sums (the report gives no "
        "call counts).",
        "",
        "| card | stage | report us | share of stage | share of resolution | experiment: variant | speedup | "
        "time verdict (what decided it) | check | saves us |",
        "|---|---|---:|---:|---:|---|---:|---|---|---:|",
    ]
    saved: dict[tuple[str | None, str], float] = defaultdict(float)
    measured: dict[tuple[str | None, str], float] = defaultdict(float)
    reasons: set[str] = set()
    for card_id, result in chosen.items():
        card = result.card
        key = (card.resolution, card.stage)
        us = _us(card)
        win = result.win
        projectable, why = result.projectable(report_device)
        if win and projectable:
            saving = us * (1 - 1 / win)
            saving_text = f"{saving:.1f}"
        else:
            saving = 0.0
            saving_text = "not projected" if win else "0.0"
            if win:
                reasons.add(why)
        saved[key] += saving
        measured[key] += us
        d = result.diff
        share_stage = us / stage_total[key] if stage_total[key] else 0.0
        share_res = us / resolution_total[card.resolution] if resolution_total[card.resolution] else 0.0
        lines.append(
            f"| `{card_id}` | {card.stage} | {us:.1f} | {share_stage:.1%} | {share_res:.1%} | "
            f"{result.experiment}: {result.variant or 'none'} | {speedup_text(d) if d else 'n/a'} | "
            f"{verdict_text(d.timing_verdict, d.verdict_numbers) if d else 'n/a'} | {d.verdict if d else 'n/a'} | "
            f"{saving_text} |"
        )
    if reasons:
        lines += ["", "Not projected: " + "; ".join(sorted(reasons)) + "."]
    lines += [
        "",
        "| resolution | stage | report us (all cards) | cards run (us) | saves us | saves % of stage | "
        "saves % of resolution |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for (resolution, stage), total in sorted(stage_total.items()):
        key = (resolution, stage)
        lines.append(
            f"| {resolution} | {stage} | {total:.1f} | {measured.get(key, 0.0):.1f} | {saved.get(key, 0.0):.1f} | "
            f"{saved.get(key, 0.0) / total if total else 0.0:.1%} | "
            f"{saved.get(key, 0.0) / resolution_total[resolution] if resolution_total[resolution] else 0.0:.2%} |"
        )
    return "\n".join(lines) + "\n"
