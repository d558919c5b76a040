"""`python -m harness.report predict [REPORT] [--device GPU] [--json]`: every card's counter-experiments' expected
speedups on a device, before any of them runs.

The device is a GPU of the peak table by name (the report's own by default: its declaration, e.g. H200), or
`cpu`: this machine's CPU by the peaks a run measured and cached here. The text lists the rows with a number,
the best saving first, and counts the rows without one by reason; `--json` prints every row.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any, TextIO

from harness.cards.cells import shorten
from harness.cards.lint import lint_report
from harness.cards.model import Report, load_report
from harness.cards.reproduce import reported_device
from harness.cards.rules import classify_report
from harness.predict.device import DeviceError, DeviceModel, cpu_device, gpu_device
from harness.predict.plan import shipped_experiments
from harness.predict.prediction import Prediction, params_key
from harness.predict.report_rows import report_predictions

JSON_FIELDS = ("card", "experiment", "variant", "params", "device", "speedup", "interval", "saving_us",
               "saving_in_model_us", "baseline_us", "variant_us", "basis", "interval_from")


def device_model(name: str | None, report: Report) -> DeviceModel:
    """`--device`, else the report's GPU; `cpu`: this machine's cached peaks."""
    wanted = name or reported_device(report)
    if not wanted:
        raise DeviceError("the report names no device it was profiled on: give --device (a GPU of the peak table, "
                          "e.g. H200, or cpu)")
    if wanted.lower() == "cpu":
        from harness.profile.cpu_peaks import cached_here

        peaks = cached_here()
        if peaks is None:
            raise DeviceError("--device cpu: no measured peaks of this CPU are cached: run `python -m harness` once "
                              "here (it measures and caches them)")
        return cpu_device(peaks.as_dict())
    return gpu_device(wanted)


def predict_report(path: str | None, device: str | None) -> list[Prediction]:
    """The rows for the report at `path` (the shipped one for None) on `device`."""
    report = classify_report(lint_report(load_report(path)).normalized)
    model = device_model(device, report)
    return report_predictions(report, shipped_experiments(), model, reported_device(report))


def print_rows(rows: list[Prediction], out: TextIO, as_json: bool) -> None:
    if as_json:
        json.dump(as_json_rows(rows), out, indent=1)
        out.write("\n")
        return
    numbered = sorted((r for r in rows if r.speedup is not None), key=lambda r: -(r.saving_us or 0.0))
    header = ["card", "experiment: variant(params)", "speedup [80%]", "saves us", "basis"]
    table = [[r.card, f"{r.experiment}: {r.variant}" + (f"({params_key(r.params)})" if r.params else ""),
              f"{r.speedup:.3g}x [{r.interval[0]:.3g}, {r.interval[1]:.3g}]" if r.interval else f"{r.speedup:.3g}x",
              f"{r.saving_us:.1f}" if r.saving_us is not None else "-", shorten(r.basis, 110)] for r in numbered]
    widths = [max(len(row[i]) for row in [header, *table]) for i in range(len(header))]
    for row in [header, ["-" * w for w in widths], *table]:
        out.write("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() + "\n")
    device = rows[0].device if rows else "?"
    out.write(f"\n{len(numbered)} of {len(rows)} configurations predicted on {device} (per original call; the best "
              "saving first). `--json` gives every row with its interval's sources.\n")
    for reason, n in _reasons(rows).most_common():
        out.write(f"- {n} without a number: {reason}\n")


def _reasons(rows: list[Prediction]) -> Counter[str]:
    """Why rows have no number, by experiment and reason."""
    return Counter(f"{r.experiment}: {r.basis}" for r in rows if r.speedup is None)


def as_json_rows(rows: list[Prediction]) -> list[dict[str, Any]]:
    return [{k: getattr(r, k) for k in JSON_FIELDS} for r in rows]
