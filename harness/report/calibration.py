"""report.html's calibration section: what the run predicted before measuring (predictions.json, harness.predict)
against what it measured, as a log-log plot with the diagonal (a perfect prediction), each prediction's 80%
interval across and each measurement's 95% interval up and down, ncu's own rule estimates beside ours where
the cards carried them; then the run's figures and a table of the measured rows."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Sequence

from matplotlib.figure import Figure

from harness.predict.calibration import calibrate
from harness.predict.prediction import Prediction, params_key
from harness.report.html_parts import Num, esc, html_table
from harness.report.plots import AFTER_COLOR, BEFORE_COLOR, svg

PREDICTIONS_FILE = "predictions.json"


def calibration_svg(rows: Sequence[Prediction], ncu: Sequence[dict[str, Any]] = ()) -> str:
    """Predicted (x) against measured (y) speedup, log-log; rows with a number and a measurement only."""
    fig = Figure(figsize=(5.6, 4.6))
    ax = fig.subplots()
    points = [r for r in rows if r.speedup is not None and r.measured is not None]
    values = [v for r in points for v in (*(r.interval or ()), *(r.measured_interval or ()), r.speedup, r.measured)]
    values += [v for e in ncu for v in (e["speedup"], e["measured"])]
    lo, hi = min(values) / 1.25, max(values) * 1.25
    ax.plot([lo, hi], [lo, hi], "-", color="#888", linewidth=1, label="predicted = measured")
    for i, row in enumerate(points):
        assert row.speedup is not None and row.measured is not None
        across = _bar(row.speedup, row.interval)
        up = _bar(row.measured, row.measured_interval)
        ax.errorbar([row.speedup], [row.measured], xerr=across, yerr=up, fmt="o", color=BEFORE_COLOR,
                    ecolor=BEFORE_COLOR, capsize=3, markersize=6, label="harness.predict (80% interval)" if i == 0
                    else None)
    if ncu:
        ax.plot([e["speedup"] for e in ncu], [e["measured"] for e in ncu], "s", color=AFTER_COLOR, markersize=6,
                label="ncu's rule estimate")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("predicted speedup (before measuring)")
    ax.set_ylabel("measured speedup (paired rounds)")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    return svg(fig)


def _bar(point: float, interval: Sequence[float] | None) -> list[list[float]]:
    """An error bar's [[down], [up]] from the point to the interval's ends (none without one)."""
    if not interval:
        return [[0.0], [0.0]]
    return [[max(point - interval[0], 0.0)], [max(interval[1] - point, 0.0)]]


def calibration_section(run_dir: Path) -> str:
    """The section of the page, from the run's predictions.json; empty where the run has none."""
    try:
        content = json.loads((Path(run_dir) / PREDICTIONS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    rows = [Prediction.from_dict(r) for r in content.get("rows") or [] if isinstance(r, dict)]
    title = "<h2>Predicted, then measured</h2>"
    if not rows:
        note = esc(content.get("note") or "no predictions")
        return f'<section class="card calibration">{title}<p class="note">{note}</p></section>'
    ncu = [e for e in (content.get("ncu") or {}).get("rows") or [] if _finite(e.get("speedup"), e.get("measured"))]
    measured = [r for r in rows if r.measured is not None]
    scored = [r for r in measured if r.speedup is not None]
    intro = (f"<p>{len(rows)} configurations predicted on {esc(content.get('device'))} before the first card "
             f"(<code>{PREDICTIONS_FILE}</code>), {sum(r.speedup is not None for r in rows)} with a number; "
             f"{esc(calibrate(rows).line())}.</p>")
    plot = f"<figure>{calibration_svg(scored, ncu)}</figure>" if scored or ncu else ""
    table = html_table(["card", "experiment: variant", "predicted [80%]", "measured [95% CI]", "error", "basis"],
                       [_cells(r) for r in measured]) if measured else ""
    return f'<section class="card calibration">{title}{intro}{plot}{table}</section>'


def _cells(row: Prediction) -> list[str]:
    variant = f"{row.variant}({params_key(row.params)})" if row.params else row.variant
    return [f"<code>{esc(row.card)}</code>", esc(f"{row.experiment}: {variant}"),
            Num(_speedup(row.speedup, row.interval)), Num(_speedup(row.measured, row.measured_interval)),
            Num("n/a" if row.error is None else f"{row.error:+.1%}"), esc(row.basis)]


def _speedup(value: float | None, interval: Sequence[float] | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.3g}x" + (f" [{interval[0]:.3g}, {interval[1]:.3g}]" if interval else "")


def _finite(*values: Any) -> bool:
    return all(isinstance(v, (int, float)) and math.isfinite(v) and v > 0 for v in values)
