"""A run predicts before it measures: predictions.json, each measured row's speedup and error, the summary's
calibration block and the page's plot (harness.run.predictions, harness.report.calibration)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from harness.cards.model import load_report

CARD = "vae-480-conv3d-96to3k333t3-842ecd"
TINY = ["workload.cpu_scale=0.08", "timing.budget_s=0.05", "timing.drift_budget_s=0.02", "timing.confirm_rounds=3"]


@pytest.mark.slow
def test_a_run_writes_its_predictions_and_scores_the_measured_one(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "harness", f"hydra.run.dir={tmp_path}", *TINY, f"cards=[{CARD}]"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    predictions = json.loads((tmp_path / "predictions.json").read_text())
    rows = predictions["rows"]
    # Every configuration of the space on the card, each with a number on this CPU's measured peaks.
    assert sorted(r["variant"] for r in rows) == ["channels_last_3d", "channels_last_input", "channels_last_weight"]
    assert all(r["card"] == CARD and r["speedup"] > 0 and r["interval"][0] <= r["speedup"] <= r["interval"][1]
               for r in rows)
    assert predictions["scales"] == {CARD: 0.08} and predictions["device"].startswith("CPU")
    # The tried variant's row holds what its confirm rounds measured, and its error; rounds a busy machine all
    # dropped confirm nothing, and the row stays unmeasured.
    tried = load_report(tmp_path / "tried.json").cards[0]
    confirmed = (tried.extra.get("confirmation") or {}).get("speedup")
    measured = [r for r in rows if r["measured"] is not None]
    summary = (tmp_path / "summary.md").read_text()
    page = (tmp_path / "report.html").read_text()
    section = page[page.index("Predicted, then measured"):]
    assert "Predicted before measuring" in summary and "3 configurations predicted" in section
    if confirmed is None:
        assert measured == [] and predictions["calibration"]["scored"] == 0
        return
    assert len(measured) == 1 and measured[0]["variant"] == tried.extra["harness"]["variant"]
    assert measured[0]["measured"] == pytest.approx(confirmed)
    assert measured[0]["error"] == pytest.approx(measured[0]["speedup"] / confirmed - 1)
    assert predictions["calibration"]["scored"] == 1 and "Calibration: 1 measured: median |error|" in summary
    assert "<svg" in section and CARD in section
