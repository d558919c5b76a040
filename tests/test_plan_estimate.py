"""experiment=auto's estimated wall time (harness.run.estimate), from planted run.json costs and the ncu
arithmetic of docs/ncu-cost.md: no timing."""

from __future__ import annotations

import json
import os
from pathlib import Path

from harness.run.estimate import NCU_COLD_EXTRA_S, NCU_TRIAL_S, Costs, estimate_line, last_run_costs, plan_seconds

HERE = {"device_kind": "cpu", "cpu_name": "Xeon", "hostname": "box"}
DEFAULT = {"scale": 0.25, "warmup": None, "min_repeats": 5, "budget_s": 0.4, "drift_budget_s": 0.15,
           "confirm_rounds": 8, "cuda_graph": False, "profiler": "cpu"}


def _run(folder: Path, name: str, trial_s: float, card_s: float, environment: dict, age_s: float,
         settings: dict | None = DEFAULT) -> Path:
    """A run.json; `settings` None: one written before run.json recorded them."""
    path = folder / name / "run.json"
    path.parent.mkdir(parents=True)
    costs = {"trials": 9, "cards": 3, "trial_s": trial_s, "card_s": card_s,
             **({"settings": settings} if settings is not None else {})}
    path.write_text(json.dumps({"phases": {}, "costs": costs, "environment": environment}))
    stamp = path.stat().st_mtime - age_s
    os.utime(path, (stamp, stamp))
    return path


def test_the_newest_run_on_this_device_gives_the_costs(tmp_path: Path):
    _run(tmp_path, "old", 1.0, 2.0, HERE, age_s=100)
    newest = _run(tmp_path, "new", 3.0, 7.0, HERE, age_s=10)
    _run(tmp_path, "other_host", 9.0, 9.0, {**HERE, "hostname": "elsewhere"}, age_s=0)
    _run(tmp_path, "gpu", 9.0, 9.0, {"device_kind": "cuda", "device_name": "NVIDIA H200"}, age_s=0)
    costs = last_run_costs([tmp_path], "cpu", HERE, DEFAULT)
    assert costs is not None and (costs.trial_s, costs.card_s) == (3.0, 7.0) and str(newest) in costs.source
    assert last_run_costs([tmp_path], "cuda", {"device_name": "NVIDIA H100"}, DEFAULT) is None


def test_a_run_made_with_other_settings_gives_no_costs(tmp_path: Path):
    """A test run at scale 0.05 with a short budget, newer than the default run, says nothing of its costs."""
    kept = _run(tmp_path, "default", 3.0, 7.0, HERE, age_s=100)
    _run(tmp_path, "tiny", 0.1, 0.1, HERE, age_s=0, settings={**DEFAULT, "scale": 0.05, "budget_s": 0.05})
    _run(tmp_path, "unrecorded", 0.1, 0.1, HERE, age_s=0, settings=None)
    costs = last_run_costs([tmp_path], "cpu", HERE, DEFAULT)
    assert costs is not None and (costs.trial_s, costs.card_s) == (3.0, 7.0) and str(kept) in costs.source
    assert last_run_costs([tmp_path], "cpu", HERE, {**DEFAULT, "profiler": "ncu"}) is None


def test_the_plan_is_its_cards_trials_and_cards_at_those_costs(tmp_path: Path):
    _run(tmp_path, "new", 3.0, 7.0, HERE, age_s=0)
    # 2 experiments: 3 cards x 4 trials and 1 card x 0 trials; a harness start of 3 s on a CPU
    line = estimate_line({"a": (3, 4), "b": (1, 0)}, "cpu", "cpu", [tmp_path], HERE, DEFAULT)
    seconds = 3.0 + 3 * (4 * 3.0 + 7.0) + 1 * 7.0  # 67 s
    assert line.startswith("Estimated wall time on this device (cpu, profiler cpu): about 1 min 07 s: "
                           "12 trials at 3.0 s and 4 cards at 7.0 s"), line
    assert seconds == 67.0


def test_under_ncu_each_baseline_and_trial_is_an_ncu_trial():
    costs = Costs(trial_s=3.0, card_s=5.0, source="planted")
    # 3 cards x 3 trials: 12 ncu trials at 6 s, the first 3.5 s more, each card's own 5 s, a 12 s start
    expected = 12.0 + 3 * (4 * NCU_TRIAL_S + 5.0) + NCU_COLD_EXTRA_S
    assert plan_seconds({"vae_channels_last": (3, 3)}, costs, "cuda", "ncu") == expected == 102.5


def test_a_default_run_and_a_default_plan_record_the_same_settings():
    """The settings a default run records are the ones a default plan looks for: the schema's documented
    defaults (scale 0.25 on a CPU, 0.4 s a trial's budget, 8 confirm rounds ...)."""
    from hydra import compose, initialize_config_dir

    from harness.__main__ import CONF_DIR
    from harness.config.schema import typed
    from harness.run.progress import cost_settings

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        cfg = typed(compose(config_name="config"))
    assert cost_settings(cfg, "cpu", "cpu") == DEFAULT
    assert cost_settings(cfg, "cuda:0", "ncu")["scale"] == 1.0
