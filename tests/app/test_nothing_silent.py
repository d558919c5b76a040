"""Nothing changes silently: `auto.plan_only=true` plans any experiment (cards, trials, ETA) and measures nothing;
a trial count cut to the space says so; a run that fails before measuring leaves no empty folder behind."""

from __future__ import annotations

import json
import subprocess
import sys

CARD = "vae-480-conv3d-96to3k333t3-842ecd"


def _harness(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True, timeout=300)


def test_plan_only_plans_a_single_experiment_and_measures_nothing(tmp_path):
    run_dir = tmp_path / "plan"
    proc = _harness(f"hydra.run.dir={run_dir}", "experiment=vae_bf16", "auto.plan_only=true", f"cards=[{CARD}]",
                    "search.n_trials=30")
    assert proc.returncode == 0, proc.stderr[-2000:]
    plan = json.loads((run_dir / "plan.json").read_text())
    assert plan["experiment"] == "vae_bf16" and [c["card"] for c in plan["cards"]] == [CARD]
    assert 1 <= plan["trials_per_card"] < 30 and plan["estimate"].startswith("Estimated wall time on this device")
    text = (run_dir / "plan.md").read_text()
    assert f"search.n_trials=30 cut to {plan['trials_per_card']} per card" in text and "Nothing was measured" in text
    assert f"outputs: {run_dir}  (plan.json, plan.md; nothing measured)" in proc.stdout
    measured = [p.name for p in run_dir.iterdir() if p.name in ("baseline.json", "trials", "summary.md", "run.json")]
    assert measured == []  # was: the experiment ran in full


def test_a_run_that_fails_before_measuring_leaves_no_folder(tmp_path):
    run_dir = tmp_path / "run"
    proc = _harness(f"hydra.run.dir={run_dir}", "cards=[no-such-card]")
    assert proc.returncode == 2 and proc.stderr.strip().startswith("error: ") and "no-such-card" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not run_dir.exists()  # was: a folder holding only Hydra's __main__.log


def test_a_folder_with_a_run_in_it_is_kept_when_a_later_start_fails(tmp_path):
    run_dir = tmp_path / "run"
    (run_dir / "trials").mkdir(parents=True)  # what an earlier run measured
    proc = _harness(f"hydra.run.dir={run_dir}", "cards=[no-such-card]")
    assert proc.returncode == 2 and (run_dir / "trials").is_dir()
