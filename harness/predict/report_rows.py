"""Predictions for a report's cards on a device: `python -m harness.report predict`'s rows, and a run's.

A card's context: what it is built in on the device (harness.cards.dtype, the experiment's workload dtype where
nothing on the card says), the shape the device runs (the card's own; a run's planned shape at its scale),
and whether its kernel times are this device's (the report's GPU at full size).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

from harness.cards.dtype import DtypeError, card_dtype, declared_rules
from harness.cards.measures import time_in_model
from harness.cards.model import Card, Report
from harness.predict.context import Context, make_context
from harness.predict.device import DeviceModel
from harness.predict.plan import ExperimentPlan, predict_rows
from harness.predict.prediction import Prediction


def context_maker(report: Report, device: DeviceModel, report_device: str | None, *,
                  shapes: Mapping[str, Any] | None = None, scales: Mapping[str, float] | None = None,
                  dtype: str | None = None) -> Callable[[Card, ExperimentPlan], Context | str]:
    """A card's context for an experiment on `device` (or why it has none); `shapes` and `scales`: card id -> the
    shape the device runs it at its scale (a run's plan), the card's own where absent; `dtype`: the run's
    `workload.dtype`, where given."""
    declared = declared_rules(report.extra)
    built_on = "cpu" if device.kind == "cpu" else "cuda"

    def context_of(card: Card, experiment: ExperimentPlan) -> Context | str:
        try:
            built_in = card_dtype(card, applied=[], override=dtype, declared=declared,
                                  experiment_dtype=experiment.workload_dtype, device=built_on)
        except DtypeError as exc:
            return str(exc)
        shape = (shapes or {}).get(card.id)
        scale = (scales or {}).get(card.id, 1.0) if shape is not None else 1.0
        return make_context(card, device, built_in, report_device=report_device, shape=shape, scale=scale)

    return context_of


def model_time_us(card: Card) -> float | None:
    """The card's time in the model (harness.cards.measures.time_in_model), per forward."""
    found = time_in_model(card)
    return found.us if found is not None else None


def report_predictions(report: Report, experiments: Iterable[ExperimentPlan], device: DeviceModel,
                       report_device: str | None) -> list[Prediction]:
    """Every card of the report under every experiment that applies to it, as auto plans, on `device`."""
    return predict_rows(report.cards, list(experiments), context_maker(report, device, report_device),
                        model_time_us)


def predicted_saving_us(row: Prediction, card: Card) -> float | None:
    """What the row's configuration is predicted to save of the card's time in the model: that time x the fraction
    saved (1 - 1/speedup), whatever device the fraction was predicted for; None without either."""
    in_model = model_time_us(card)
    if row.speedup is None or in_model is None:
        return None
    return in_model * (1.0 - 1.0 / row.speedup)


def best_savings(rows: Iterable[Prediction], cards: Mapping[str, Card]) -> dict[str, tuple[Prediction, float]]:
    """Each card's configuration with the largest predicted saving in the model, with that saving."""
    best: dict[str, tuple[Prediction, float]] = {}
    for row in rows:
        card = cards.get(row.card)
        saving = predicted_saving_us(row, card) if card is not None else None
        if saving is not None and (row.card not in best or saving > best[row.card][1]):
            best[row.card] = (row, saving)
    return best
