"""The GPU paths end to end; skipped without CUDA (and without ncu for the ncu test)."""

import json
import subprocess
import sys

import pytest

TINY = ["device=cuda", "workload.scale=0.1", "timing.budget_s=0.05", "timing.drift_budget_s=0.02",
        "timing.confirm_rounds=1"]


def _run(tmp_path, *overrides):
    return subprocess.run([sys.executable, "-m", "harness", f"hydra.run.dir={tmp_path}", *TINY, *overrides],
                          capture_output=True, text=True, timeout=600)


@pytest.mark.gpu
def test_torch_cuda_trace_backend_runs_an_experiment(tmp_path):
    proc = _run(tmp_path, "profiler=torch_cuda", "cards=[vae-480-conv3d-96to3k333t3-842ecd]")
    assert proc.returncode == 0, proc.stderr[-2000:]
    card = json.loads((tmp_path / "baseline.json").read_text())["cards"][0]
    assert card["kernels"] and card["metrics_source"] == "torch_cuda_trace"
    assert all(k["metrics"]["dur_us"] > 0 for k in card["kernels"])
    assert card["environment"]["device_kind"] == "cuda"


@pytest.mark.ncu
def test_ncu_backend_reprofiles_every_op_kind(tmp_path):
    proc = _run(tmp_path, "experiment=reprofile", "profiler=ncu")
    assert proc.returncode == 0, proc.stderr[-2000:]
    cards = json.loads((tmp_path / "baseline.json").read_text())["cards"]
    assert {c["op"] for c in cards} >= {"aten.linear.default", "aten.conv3d.default"}
    for card in cards:
        assert card["metrics_source"] == "ncu"
        assert all(k["metrics"]["cycles_elapsed"] for k in card["kernels"])
    assert (tmp_path / "baseline_reproduction.md").exists()
