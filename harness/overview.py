"""The end-to-end view across cards: where the report's time is, and what the measured wins would save.

Each card's time is its summed kernel time in the report (one call of that op at that shape; the
report gives no call counts, so shares are of the summed card times). A card's saving, if its
winning variant were adopted, is report_us x (1 - 1/speedup), counted only for a win: a FASTER
timing verdict on a fair (same-machine) comparison of a feasible variant. Savings are summed per
resolution and stage (dit, vae, attention, output). A speedup measured on another device or at a
reduced workload scale is a projection, and the table says so.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from harness.cards.diff import CardDiff, card_time_us
from harness.cards.model import Card, Report

FASTER = "FASTER"


@dataclass(frozen=True)
class CardResult:
    """What one experiment found for one card of the report."""

    card: Card  # the report's card
    experiment: str
    variant: str | None
    diff: CardDiff | None  # baseline vs best; None when no variant was feasible

    @property
    def win(self) -> float | None:
        """The speedup, when it counts as a win; else None."""
        d = self.diff
        if d is None or d.speedup is None or d.timing_verdict != FASTER or not d.fair:
            return None
        return d.speedup


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


def render_end_to_end(report: Report, results: list[CardResult], measured_on: str) -> str:
    """Markdown: per card share and saving, then per resolution and stage totals."""
    chosen = best_per_card(results)
    stage_total: dict[tuple[str, str], float] = defaultdict(float)
    resolution_total: dict[str, float] = defaultdict(float)
    for card in report.cards:
        stage_total[(card.resolution, card.stage)] += _us(card)
        resolution_total[card.resolution] += _us(card)
    lines = [
        "## End to end: the report's time and what adopting the wins would save",
        "",
        f"Speedups measured on {measured_on}, applied to the report's GPU card times: a projection, "
        "valid as such only where the speedup was measured on the report's GPU at scale 1. Shares are "
        "of the report's summed card times (it gives no call counts). A saving counts only for a FASTER, "
        "fair, feasible result.",
        "",
        "| card | stage | report us | share of stage | share of resolution | experiment: variant | speedup | "
        "time | check | saves us |",
        "|---|---|---:|---:|---:|---|---:|---|---|---:|",
    ]
    saved: dict[tuple[str, str], float] = defaultdict(float)
    measured: dict[tuple[str, str], float] = defaultdict(float)
    for card_id, result in chosen.items():
        card = result.card
        key = (card.resolution, card.stage)
        us = _us(card)
        win = result.win
        saving = us * (1 - 1 / win) if win else 0.0
        saved[key] += saving
        measured[key] += us
        d = result.diff
        share_stage = us / stage_total[key] if stage_total[key] else 0.0
        share_res = us / resolution_total[card.resolution] if resolution_total[card.resolution] else 0.0
        speedup = f"{d.speedup:.2f}x" if d and d.speedup else "n/a"
        lines.append(
            f"| `{card_id}` | {card.stage} | {us:.1f} | {share_stage:.1%} | {share_res:.1%} | "
            f"{result.experiment}: {result.variant or 'none'} | {speedup} | "
            f"{d.timing_verdict if d else 'n/a'} | {d.verdict if d else 'n/a'} | {saving:.1f} |"
        )
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
