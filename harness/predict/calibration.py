"""How good the predictions were where they were measured: the median |error| (predicted / measured - 1), the share
of the measurements inside their 80% intervals, and the intervals' median width (hi / lo).

ncu's own rule estimates are scored with the same figures where a card carries them (`ncu_rules` on its
kernels, kept by `report import-ncu` and the ncu backend): ncu states a rule's speedup as the percent of time it
would save, of the kernel's own time (`local`) or of the whole profiled workload's (`global`), here the card's;
a card's estimate is its best rule's, the fraction f saved read as a speedup 1 / (1 - f). ncu gives no
interval.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Mapping, Sequence

from harness.cards.model import Card
from harness.predict.prediction import Prediction

GLOBAL, LOCAL = "global", "local"


@dataclass(frozen=True)
class Calibration:
    """The figures over the rows measured and predicted; `unpredicted`: measured rows the model gave no number."""

    scored: int
    median_abs_error: float | None
    inside: float | None  # share of the measured speedups inside the 80% interval
    median_width: float | None  # hi / lo
    unpredicted: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        """'3 measured: median |error| 12.0%, 2 of 3 (67%) inside the 80% intervals, median width 1.31x'."""
        if not self.scored:
            return "no prediction measured yet" + (f" ({self.unpredicted} measured without a prediction)"
                                                   if self.unpredicted else "")
        inside = (f", {round(self.inside * self.scored)} of {self.scored} ({self.inside:.0%}) inside the 80% "
                  f"intervals, median width {self.median_width:.3g}x" if self.inside is not None else
                  ", no intervals")
        unpredicted = f"; {self.unpredicted} measured without a prediction" if self.unpredicted else ""
        assert self.median_abs_error is not None
        return f"{self.scored} measured: median |error| {self.median_abs_error:.1%}{inside}{unpredicted}"


def with_measured(row: Prediction, speedup: float, ci: Sequence[float] | None = None) -> Prediction:
    """The row with its measured speedup and, where it predicted one, its error."""
    row.measured = float(speedup)
    row.measured_interval = [float(v) for v in ci] if ci is not None else None
    row.error = row.speedup / row.measured - 1.0 if row.speedup is not None else None
    return row


def calibrate(rows: Iterable[Prediction]) -> Calibration:
    """The figures of the module docstring over the rows that were measured."""
    measured = [r for r in rows if r.measured is not None]
    scored = [r for r in measured if r.speedup is not None and r.error is not None]
    if not scored:
        return Calibration(0, None, None, None, len(measured))
    intervals = [r for r in scored if r.interval is not None]
    inside = [r for r in intervals if r.interval is not None and r.measured is not None
              and r.interval[0] <= r.measured <= r.interval[1]]
    return Calibration(
        scored=len(scored),
        median_abs_error=statistics.median(abs(r.error) for r in scored if r.error is not None),
        inside=len(inside) / len(intervals) if intervals else None,
        median_width=statistics.median(r.interval[1] / r.interval[0] for r in intervals if r.interval) if intervals
        else None,
        unpredicted=len(measured) - len(scored),
    )


@dataclass(frozen=True)
class NcuEstimate:
    """A card's best ncu rule estimate as a speedup of the card."""

    speedup: float
    rule: str  # its id, with the percent and type ncu stated
    fraction: float  # of the card's time saved


def ncu_estimate(card: Card) -> NcuEstimate | None:
    """The card's best ncu rule estimate (the module docstring); None where no kernel carries one."""
    total = sum(k.metric("dur_us") or 0.0 for k in card.kernels) or (card.summed_kernel_us or 0.0)
    best: NcuEstimate | None = None
    for kernel in card.kernels:
        rules = kernel.extra.get("ncu_rules")
        for rule in rules if isinstance(rules, list) else []:
            fraction = _fraction(rule, kernel.metric("dur_us"), total)
            if fraction is not None and (best is None or fraction > best.fraction):
                text = f"{rule.get('id')} {rule.get('speedup'):g}% {rule.get('speedup_type')}"
                best = NcuEstimate(1.0 / (1.0 - fraction), text, fraction)
    return best


def _fraction(rule: Any, kernel_us: float | None, card_us: float) -> float | None:
    """The share of the card's time a rule says would be saved (below 1), or None."""
    if not isinstance(rule, Mapping):
        return None
    speedup, kind = rule.get("speedup"), rule.get("speedup_type")
    if not isinstance(speedup, (int, float)) or isinstance(speedup, bool) or not 0 < speedup < 100:
        return None
    if kind == GLOBAL:
        return speedup / 100.0
    if kind == LOCAL and kernel_us and card_us:
        return speedup / 100.0 * min(kernel_us / card_us, 1.0)
    return None


def ncu_calibration(rows: Iterable[Prediction], cards: Mapping[str, Card]
                    ) -> tuple[Calibration, list[dict[str, Any]]]:
    """ncu's estimates scored on the measured rows of the cards that carry them (each card once per row), and the
    scored entries (card, experiment, variant, ncu's speedup and rule, measured, error)."""
    entries: list[dict[str, Any]] = []
    for row in rows:
        card = cards.get(row.card)
        estimate = ncu_estimate(card) if card is not None and row.measured is not None else None
        if estimate is None or row.measured is None:
            continue
        entries.append({"card": row.card, "experiment": row.experiment, "variant": row.variant,
                        "params": row.params, "speedup": estimate.speedup, "rule": estimate.rule,
                        "measured": row.measured, "error": estimate.speedup / row.measured - 1.0})
    if not entries:
        return Calibration(0, None, None, None), []
    return Calibration(len(entries), statistics.median(abs(e["error"]) for e in entries), None, None), entries
