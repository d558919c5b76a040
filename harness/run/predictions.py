"""A run's predictions.json: what the model expects of every configuration the run may measure, written before the
first card (harness.predict); each row gains `measured` (the confirmed speedup of its card, variant and
parameters) and `error` as the cards finish, with the run's calibration figures and ncu's own estimates scored
beside them where the cards carry them.

The device model is the run's device, as the worker describes it (with the shape each card's op runs at the
run's scale): a GPU by its name in the peak table, this CPU by the peaks the worker measured and cached. A
prediction that cannot be made (a GPU the table lacks) leaves a note in the file, never a failed run.
`experiment=auto` ranks its plan by the predictions (`rank_plan`).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from harness.boundary.replies import ExperimentFacts
from harness.boundary.requests import Describe
from harness.cards.atomic import write_json_atomic
from harness.cards.dtype import DtypeError, card_dtype, declared_rules
from harness.cards.model import Card, Report
from harness.cards.reproduce import reported_device
from harness.config.schema import HarnessConfig, experiment_of
from harness.errors import HarnessError
from harness.predict.calibration import calibrate, ncu_calibration, with_measured
from harness.predict.device import DeviceModel, cpu_device, gpu_device, with_reference_kernels
from harness.predict.plan import ExperimentPlan, predict_rows
from harness.predict.prediction import Prediction, params_key
from harness.predict.report_rows import best_savings, context_maker, model_time_us
from harness.run.card_search import card_scale
from harness.run.state import CardOutcome
from harness.run.worker import TrialWorker, WorkerError
from harness.search import drawable

log = logging.getLogger("harness")
PREDICTIONS_FILE = "predictions.json"


@dataclass(frozen=True)
class Planned:
    """One experiment of a run or a plan: its facts, the space it draws on this device, the cards it runs."""

    experiment: ExperimentFacts
    space: Mapping[str, Any]
    cards: Sequence[Card]


def predict_run(cfg: HarnessConfig, worker: TrialWorker, planned: Sequence[Planned], report: Report, device: str
                ) -> dict[str, Any]:
    """predictions.json's content: every card of each planned experiment, every configuration of its space."""
    planned = [p for p in planned if p.space and p.cards]
    if not planned:
        return {"device": device, "rows": [], "note": "no variant to predict (the experiment measures its baseline)"}
    cards = list({card.id: card for p in planned for card in p.cards}.values())
    scales = {card.id: card_scale(cfg.workload.scale, cfg.workload.cpu_scale, device, card) for card in cards}
    try:
        model, shapes = _device_and_shapes(cfg, worker, cards, report, device, scales,
                                           planned[0].experiment.workload_dtype)
    except (HarnessError, WorkerError) as exc:
        log.warning("predictions: none made: %s", exc)
        return {"device": device, "rows": [], "note": f"no predictions: {exc}"}
    report_device = reported_device(report, cfg.report_device)
    context_of = context_maker(report, model, report_device, shapes=shapes, scales=scales, dtype=cfg.workload.dtype)
    rows = [row for p in planned for row in predict_rows(p.cards, [_plan_of(p)], context_of, model_time_us,
                                                            every_card=False)]
    return {"device": model.name, "report_device": report_device, "experiments": [p.experiment.name for p in planned],
            "scales": scales, "notes": list(model.notes), "rows": [r.to_dict() for r in rows]}


def _plan_of(planned: Planned) -> ExperimentPlan:
    facts = planned.experiment
    return ExperimentPlan(facts.name, tuple(facts.op_kinds), tuple(facts.classes), dict(planned.space),
                          workload_dtype=facts.workload_dtype)


def _device_and_shapes(cfg: HarnessConfig, worker: TrialWorker, cards: Sequence[Card], report: Report, device: str,
                       scales: Mapping[str, float], fallback_dtype: str) -> tuple[DeviceModel, dict[str, Any]]:
    """The device's model and the shape each card runs at its scale, as the worker plans them (the shape does not
    depend on the dtype: the first planned experiment's stands in where the card says none)."""
    declared = declared_rules(report.extra)
    plans: dict[str, dict[str, Any]] = {}
    for card in cards:
        try:
            dtype = card_dtype(card, applied=[], override=cfg.workload.dtype, declared=declared,
                               experiment_dtype=fallback_dtype, device=device).dtype
        except DtypeError:
            continue
        plans[card.id] = {"op_kind": card.op_kind, "shape_parameters": card.shape_parameters, "dtype": dtype,
                          "scale": scales[card.id], "resolution": card.resolution}
    described = worker.request(Describe(device=device, peaks=True, plans=plans), cfg.search.trial_deadline_s)
    if not described.ok:
        raise WorkerError(f"the worker could not describe the peaks and shapes: {described.reason}")
    peaks = described.peaks or {}
    model = with_reference_kernels(gpu_device(str(peaks.get("device_name") or device)), peaks) \
        if device.startswith("cuda") else cpu_device(peaks)
    shapes = {card: plan["shape"] for card, plan in described.plans.items() if "shape" in plan}
    return model, shapes


def write_predictions(run_dir: Path, content: Mapping[str, Any]) -> None:
    write_json_atomic(run_dir / PREDICTIONS_FILE, dict(content))


def read_predictions(run_dir: Path) -> dict[str, Any] | None:
    """predictions.json of a run folder; None where there is none (or it is not readable)."""
    try:
        content = json.loads((run_dir / PREDICTIONS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return content if isinstance(content, dict) else None


def rows_of(content: Mapping[str, Any]) -> list[Prediction]:
    return [Prediction.from_dict(r) for r in content.get("rows") or [] if isinstance(r, dict)]


def record_measured(run_dir: Path, experiment: str, outcomes: Sequence[CardOutcome], report: Report) -> None:
    """Each confirmed outcome's speedup on its row (card, experiment, variant, parameters), the error, and the
    calibration figures: ours, and ncu's rule estimates where the cards carry them."""
    content = read_predictions(run_dir)
    if content is None:
        return
    rows = rows_of(content)
    by_key = {r.key: r for r in rows}
    for outcome in outcomes:
        confirmed = outcome.confirmation or {}
        speedup = confirmed.get("speedup")
        if outcome.tried_variant is None or not isinstance(speedup, (int, float)):
            continue
        key = (outcome.card_id, experiment, outcome.tried_variant, params_key(outcome.tried_params))
        if key in by_key:
            with_measured(by_key[key], speedup, confirmed.get("ci"))
    cards = {c.id: c for c in report.cards}
    cards.update({o.card_id: o.baseline for o in outcomes if _carries_rules(o.baseline)})
    ncu, entries = ncu_calibration(rows, cards)
    write_predictions(run_dir, {**content, "rows": [r.to_dict() for r in rows],
                                "calibration": calibrate(rows).as_dict(),
                                "ncu": {"calibration": ncu.as_dict(), "rows": entries}})


def _carries_rules(card: Card) -> bool:
    return any(isinstance(k.extra.get("ncu_rules"), list) for k in card.kernels)


def calibration_lines(run_dir: Path) -> list[str]:
    """summary.md's block: each measured row's prediction against its measurement, and the run's figures."""
    content = read_predictions(run_dir)
    if content is None:
        return []
    rows = rows_of(content)
    if not rows:
        return [f"Predictions: {content.get('note') or 'none'} ({PREDICTIONS_FILE})."]
    measured = [r for r in rows if r.measured is not None]
    lines = [f"Predicted before measuring ({PREDICTIONS_FILE}: {len(rows)} configurations on {content.get('device')}, "
             f"{sum(r.speedup is not None for r in rows)} with a number); the measured ones:", ""]
    if measured:
        lines += ["| card | variant | predicted [80%] | measured [95% CI] | error |", "|---|---|---:|---:|---:|"]
        lines += [f"| `{r.card}` | {_variant(r)} | {_speedup(r.speedup, r.interval)} | "
                  f"{_speedup(r.measured, r.measured_interval)} | "
                  f"{'n/a' if r.error is None else f'{r.error:+.0%}'} |" for r in measured]
        lines.append("")
    lines.append(f"Calibration: {calibrate(rows).line()}.")
    ncu = (content.get("ncu") or {}).get("calibration") or {}
    if ncu.get("scored"):
        lines.append(f"ncu's rule estimates on the same cards: {ncu['scored']} scored, median |error| "
                     f"{ncu['median_abs_error']:.1%} (no intervals).")
    return lines


def _variant(row: Prediction) -> str:
    return f"{row.variant}({params_key(row.params)})" if row.params else row.variant


def _speedup(value: float | None, interval: Sequence[float] | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.2f}x" + (f" [{interval[0]:.2f}, {interval[1]:.2f}]" if interval else "")


def rank_plan(cfg: HarnessConfig, worker: TrialWorker, by_experiment: Mapping[str, Sequence[Card]],
              configs: Mapping[str, HarnessConfig], experiments: Mapping[str, ExperimentFacts], report: Report,
              device: str, run_dir: Path) -> tuple[dict[str, list[Card]], dict[str, tuple[Prediction, float]]]:
    """`experiment=auto`'s plan by predicted saving: predictions.json for every planned card and configuration
    (each experiment's space as drawn on this device); each experiment's cards by their best predicted saving in
    the model (harness.predict.report_rows.best_savings: the card's time in the model x the fraction saved), the
    experiments by their best card's; and each card's best configuration with its saving."""
    planned = [Planned(experiments[name], drawable(dict(experiment_of(configs[name]).space or {}),
                                                   experiments[name].unmet)[0], list(cards))
               for name, cards in by_experiment.items()]
    content = predict_run(cfg, worker, planned, report, device)
    write_predictions(run_dir, content)
    best = best_savings(rows_of(content), {card.id: card for cards in by_experiment.values() for card in cards})

    def saving(card: Card) -> float:
        return best[card.id][1] if card.id in best else float("-inf")

    ranked = {name: sorted(cards, key=saving, reverse=True) for name, cards in by_experiment.items()}
    order = sorted(ranked, key=lambda name: max(map(saving, ranked[name]), default=float("-inf")), reverse=True)
    return {name: ranked[name] for name in order}, best
