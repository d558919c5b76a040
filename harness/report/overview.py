"""The end-to-end view across cards: where the model's time is, and what the measured wins would save.

Each card's time is its time in the model (harness.cards.measures.time_in_model): for a capture, its share of the
captured forward (all its calls), the shares being of the forward and of the stage's time in the model (every op
the capture recorded in that stage, cards or not); for a report with no call counts (the shipped one), its summed
kernel time per invocation, the shares being of the summed card times. The page says which, per card. A card's
saving, if its adopted variant were taken into the model, is its time in the model x (1 - 1/speedup), counted
only when the speedup can stand for the report's device: the variant was adopted (feasible, confirmed FASTER on
a fair same-machine comparison) and it was measured on the report's device (harness.cards.reproduce.reported_device:
`report_device` where given, else what the report declares, the shipped report's H200, or the device a capture
ran on) at workload scale 1. Anywhere else (another device, a reduced scale) the table shows the measured speedup
and "n/a (not projected: why)": a saving never reads 0 where it is not known (harness.report.savings). Cards are
listed costliest in the model first; savings are summed per resolution and stage, n/a where any card's is unknown.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from harness.cards.diff_markdown import speedup_text, verdict_text
from harness.cards.diff_rows import CardDiff
from harness.cards.measures import time_in_model, time_sources
from harness.cards.model import CAPTURE_KEY, Card, Report
from harness.report.savings import Saving, card_saving
from harness.report.savings import total as savings_total

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
    found = time_in_model(card)
    return found.us if found is not None else 0.0


@dataclass(frozen=True)
class _Totals:
    """What the shares of the view are of: a capture's forward and its stages' time in the model (every recorded
    group of the stage, cards or not), else the report's card times summed per stage and resolution."""

    stage: dict[tuple[str | None, str], float]
    resolution: dict[str | None, float]
    whole: str  # what the second share is of: "forward" or "resolution"
    captured: bool

    @classmethod
    def of(cls, report: Report) -> _Totals:
        stage: dict[tuple[str | None, str], float] = defaultdict(float)
        resolution: dict[str | None, float] = defaultdict(float)
        for card in report.cards:
            stage[(card.resolution, card.stage)] += _us(card)
            resolution[card.resolution] += _us(card)
        found = report.extra.get(CAPTURE_KEY)
        record: dict[str, Any] = found if isinstance(found, dict) else {}
        forward = record.get("forward_us")
        if not isinstance(forward, (int, float)) or forward <= 0:
            return cls(stage, resolution, "resolution", False)
        # One forward: every card shares its resolution; a stage's time is every group of it (capture.stage_us).
        stage_us = record.get("stage_us")
        stages: dict[str, Any] = stage_us if isinstance(stage_us, dict) else {}
        for key in stage:
            stage[key] = max(stage[key], float(stages.get(key[1]) or 0.0))
        return cls(stage, {key: float(forward) for key in resolution}, "forward", True)


def _intro(totals: _Totals, report: Report, measured_on: str, report_device: str | None) -> list[str]:
    if totals.captured:
        basis = ("Time in model us: the card's time in one forward of the captured model (its share of the plain "
                 "forward's time, all its calls); shares are of the forward and of the stage's time in the model "
                 "(every op of the stage the capture recorded, cards or not).")
    else:
        basis = ("Report us: the report card's kernel-duration sum per invocation (one call of that op at that "
                 "shape); shares are of these sums.")
    return [
        "## End to end: the report's time and what adopting the wins would save",
        "",
        f"Speedups measured on {measured_on}. A saving (the card's time in the model x (1 - 1/speedup)) is "
        "projected only for an adopted win (feasible, confirmed FASTER, fair) measured on the report's device "
        f"({report_device or 'none named'}, setting `report_device`) at workload scale 1; elsewhere the measured "
        "speedup is shown and the saving reads \"n/a\" with why, as does an undecided verdict's: unknown, never 0. "
        f"{basis} Where each card's time came from: {time_sources(report.cards)}.",
        "",
    ]


def render_end_to_end(report: Report, results: list[CardResult], measured_on: str,
                      report_device: str | None) -> str:
    """Markdown: per card (costliest in the model first) its time, shares, calls and saving, then per resolution
    and stage totals."""
    chosen = best_per_card(results)
    totals = _Totals.of(report)
    time_head = "time in model us" if totals.captured else "report us"
    lines = [
        *_intro(totals, report, measured_on, report_device),
        f"| card | stage | {time_head} | calls | share of stage | share of {totals.whole} | experiment: variant | "
        "speedup | time verdict (what decided it) | check | saves us |",
        "|---|---|---:|---:|---:|---:|---|---:|---|---|---:|",
    ]
    saved: dict[tuple[str | None, str], list[Saving]] = defaultdict(list)
    measured: dict[tuple[str | None, str], float] = defaultdict(float)
    for card_id, result in sorted(chosen.items(), key=lambda item: -_us(item[1].card)):
        card = result.card
        key = (card.resolution, card.stage)
        us = _us(card)
        saving = card_saving(result, us or None, report_device)  # a card the report gives no time has none
        saved[key].append(saving)
        measured[key] += us
        d = result.diff
        share_stage = us / totals.stage[key] if totals.stage[key] else 0.0
        whole = totals.resolution[card.resolution]
        found = time_in_model(card)
        calls = found.calls if found is not None and found.calls is not None else "n/a"
        lines.append(
            f"| `{card_id}` | {card.stage} | {us:.1f} | {calls} | {share_stage:.1%} | "
            f"{us / whole if whole else 0.0:.1%} | {result.experiment}: {result.variant or 'none'} | "
            f"{speedup_text(d) if d else 'n/a'} | "
            f"{verdict_text(d.timing_verdict, d.verdict_numbers) if d else 'n/a'} | {d.verdict if d else 'n/a'} | "
            f"{saving.text()} |"
        )
    lines += [
        "",
        f"| resolution | stage | {time_head} (stage) | cards run (us) | saves us | saves % of stage | "
        f"saves % of {totals.whole} |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for (resolution, stage), total in sorted(totals.stage.items(), key=lambda item: (str(item[0][0]), item[0][1])):
        key = (resolution, stage)
        whole = totals.resolution[resolution]
        saving = savings_total(saved.get(key, []))
        lines.append(f"| {resolution} | {stage} | {total:.1f} | {measured.get(key, 0.0):.1f} | {saving.text()} | "
                     f"{saving.share(total, '.1%')} | {saving.share(whole, '.2%')} |")
    return "\n".join(lines) + "\n"

