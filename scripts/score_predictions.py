"""Score the model's predictions (harness.predict) against run folders' measurements, over several runs: runs made
here (their own predictions.json, made before they measured) and runs made elsewhere, before runs predicted
(e.g. the H200 runs of ../shared/gpu_runs/2026-12-04/runs.tgz).

    python scripts/score_predictions.py RUN_DIR [RUN_DIR ...] [--device H200] [--json]

A run folder with a predictions.json is scored on its measured rows as the run predicted them. Otherwise, for
every card of its diff.json with a confirmed speedup (its paired rounds), the variant tried is predicted for the
device (default: the GPU its run.json names) from the shipped report, at the card's own size, exactly as
`python -m harness.report predict` would. Each row is printed with its prediction, interval and measurement,
then the calibration figures over all of them (harness.predict.calibration); a measured variant the model gives
no number counts as measured without a prediction.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from harness.cards.lint import lint_report
from harness.cards.model import Report, load_report
from harness.cards.reproduce import reported_device
from harness.cards.rules import classify_report
from harness.predict.calibration import calibrate, with_measured
from harness.predict.command import device_model
from harness.predict.plan import ExperimentPlan, predict_rows, shipped_experiments
from harness.predict.prediction import Prediction
from harness.predict.report_rows import context_maker, model_time_us


def measured_rows(run_dir: Path) -> list[dict[str, Any]]:
    """(card, experiment, variant, params, speedup, ci, device) of every confirmed row of the run's diff.json."""
    try:
        diff = json.loads((run_dir / "diff.json").read_text(encoding="utf-8"))
        run = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    device = (run.get("environment") or {}).get("device_name")
    out = []
    for card in diff.get("cards") or []:
        variant, ci = card.get("variant") or {}, card.get("speedup_ci")
        if card.get("speedup") is None or ci is None or not variant.get("name"):
            continue
        out.append({"card": card["card"], "experiment": variant.get("experiment"), "variant": variant["name"],
                    "params": variant.get("params") or {}, "speedup": card["speedup"], "ci": ci, "device": device})
    return out


def score(run_dirs: list[Path], device: str | None) -> list[Prediction]:
    report = classify_report(lint_report(load_report(None)).normalized)
    experiments = {e.name: e for e in shipped_experiments()}
    rows = []
    for run_dir in run_dirs:
        own = _own_rows(run_dir) if device is None else None
        if own is not None:
            rows += own
            continue
        rows += _predicted_now(run_dir, device, report, experiments)
    return rows


def _own_rows(run_dir: Path) -> list[Prediction] | None:
    """The measured rows of the run's own predictions.json; None where it made none."""
    try:
        content = json.loads((run_dir / "predictions.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return [Prediction.from_dict(r) for r in content.get("rows") or [] if r.get("measured") is not None]


def _predicted_now(run_dir: Path, device: str | None, report: Report, experiments: dict[str, ExperimentPlan]
                   ) -> list[Prediction]:
    rows = []
    for measured in measured_rows(run_dir):
        shipped = experiments[measured["experiment"]]
        one = ExperimentPlan(shipped.name, shipped.op_kinds, shipped.classes,
                             {measured["variant"]: {k: [v] for k, v in measured["params"].items()}},
                             workload_dtype=shipped.workload_dtype)
        model = device_model(device or measured["device"], report)
        found = predict_rows([report.card(measured["card"])], [one],
                             context_maker(report, model, reported_device(report)), model_time_us, every_card=False)
        rows += [with_measured(row, measured["speedup"], measured["ci"]) for row in found]
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dirs", nargs="+", type=Path)
    parser.add_argument("--device", help="the device to predict for (default: each run's GPU)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = score(args.run_dirs, args.device)
    if args.json:
        print(json.dumps({"rows": [r.to_dict() for r in rows], "calibration": calibrate(rows).as_dict()}, indent=1))
        return 0
    print_scored(rows)
    print(f"\n{calibrate(rows).line()}")
    return 0


def print_scored(rows: list[Prediction]) -> None:
    """Each measured row: its prediction and interval, its measurement and error, and the prediction's basis."""
    for r in rows:
        predicted = "no number" if r.speedup is None or r.interval is None else \
            f"{r.speedup:.3g}x [{r.interval[0]:.3g}, {r.interval[1]:.3g}]"
        error = "" if r.error is None else f", error {r.error:+.1%}"
        print(f"{r.card} {r.experiment}: {r.variant}{r.params or ''} on {r.device}: predicted {predicted}, "
              f"measured {r.measured:.3g}x{error}\n    {r.basis}")


if __name__ == "__main__":
    sys.exit(main())
