"""scripts/cpu_calibration.py: each configuration measured by its own run, every run's predictions scored."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from scripts.cpu_calibration import overrides, slug

REPO = Path(__file__).resolve().parents[1]


def test_a_configuration_is_the_space_cut_to_it():
    space = {"low_precision": {"dtype": ["bfloat16", "float16"], "memory_format": ["as_given", "channels_last_3d"]},
             "other": {}}
    assert overrides(space, "low_precision", {"dtype": "bfloat16", "memory_format": "channels_last_3d"}) == [
        "~experiment.space.other", 'experiment.space.low_precision.dtype=["bfloat16"]',
        'experiment.space.low_precision.memory_format=["channels_last_3d"]']
    assert overrides({"batched": {"k": [2, 4]}, "gemv": {}}, "batched", {"k": 4}) == [
        "~experiment.space.gemv", "experiment.space.batched.k=[4]"]


def test_a_configurations_folder_has_no_equals_sign():
    """Hydra reads '=' in hydra.run.dir's value as an override: every configuration with parameters failed."""
    assert "=" not in slug("low_precision", {"dtype": "bfloat16", "memory_format": "as_given"})
    assert slug("batched", {"k": 4}) != slug("batched", {"k": 8})


@pytest.mark.slow
def test_one_configuration_on_one_card_is_measured_and_scored(tmp_path):
    """CI's reduced setting of the benchmark: one float32 run (whatever bf16 math the CPU has), its prediction
    scored against what it measured."""
    card = "vae-480-conv3d-96to3k333t6-04a8d9"
    proc = subprocess.run([sys.executable, "scripts/cpu_calibration.py", str(tmp_path), "--experiments",
                           "vae_channels_last", "--variants", "channels_last_3d", "--cards", card],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "1 runs. 1 measured: median |error|" in proc.stdout
    found = json.loads((tmp_path / "calibration.json").read_text(encoding="utf-8"))
    (row,) = found["rows"]
    assert row["card"] == card and row["variant"] == "channels_last_3d"
    assert row["measured"] > 0 and row["error"] == pytest.approx(row["speedup"] / row["measured"] - 1)
    assert found["calibration"]["scored"] == 1
