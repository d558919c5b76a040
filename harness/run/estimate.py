"""The estimated wall time of an `experiment=auto` plan on this device, stated in plan.md.

Per card a plan costs its baseline and confirm rounds (`card_s`) and its trials (`trial_s` each). Where an
earlier run on the same device, made with the same scale, timing budgets and profiler, left its costs in
run.json (harness.run.progress: the measured mean of its trials and cards), those are used, the newest run
first; otherwise the defaults below, each saying where it comes from. Under ncu every trial and every
baseline is an ncu trial of its own: docs/ncu-cost.md's arithmetic (about 6 s started ahead, 3.5 s more for
the first, cold one), on top of the card's confirm.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from harness.boundary.replies import ExperimentFacts
from harness.boundary.requests import Describe
from harness.config.schema import HarnessConfig, experiment_of, plain
from harness.run.progress import cost_settings, duration
from harness.run.worker import TrialWorker
from harness.search import drawable, plan_search

# docs/ncu-cost.md, "Per trial on an H200": a trial started ahead, and what the first (cold) one adds.
NCU_TRIAL_S = 6.0
NCU_COLD_EXTRA_S = 3.5
# Without an earlier run here. CPU: the median of three default runs' run.json costs on the 2-core CPU this was
# built on (scale 0.25; 1.3-4.3 s a trial, 5.3-19 s a card on that shared, at times loaded machine). CUDA:
# scripts/gpu_check_steps/plan.py's costs of a traced trial (3 s), and a card's baseline measured like one plus
# its confirmation (2 s).
DEFAULTS = {"cpu": {"trial_s": 1.6, "card_s": 6.4}, "cuda": {"trial_s": 3.0, "card_s": 5.0}}
# The worker's start and the set-up before the first card: 1.3-2.0 s and about 1 s on that CPU (run.json);
# scripts/gpu_check_steps/plan.py's harness start on a GPU (torch, Hydra, Optuna, the report, a worker with its
# CUDA context).
HARNESS_START_S = {"cpu": 3.0, "cuda": 12.0}


@dataclass(frozen=True)
class Costs:
    trial_s: float
    card_s: float
    source: str  # where the numbers come from, for the plan's line


def same_device(environment: Mapping[str, Any], device: str, here: Mapping[str, Any]) -> bool:
    """Whether a run's environment is this device: the GPU's name, or the CPU's name on this host."""
    if device.startswith("cuda"):
        return environment.get("device_kind") == "cuda" and environment.get("device_name") == here.get("device_name")
    return (environment.get("device_kind") == "cpu" and environment.get("cpu_name") == here.get("cpu_name")
            and environment.get("hostname") == here.get("hostname"))


def last_run_costs(folders: list[Path], device: str, here: Mapping[str, Any],
                   settings: Mapping[str, Any]) -> Costs | None:
    """The costs of the newest run.json under `folders` (3 levels: runs, auto's sub-runs) on this device, measured
    under these `settings` (harness.run.progress.cost_settings)."""
    found: list[Path] = []
    for folder in folders:
        for pattern in ("*/run.json", "*/*/run.json", "*/*/*/run.json"):
            found.extend(folder.glob(pattern))
    for path in sorted(set(found), key=lambda p: p.stat().st_mtime, reverse=True):
        try:
            run = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        costs = run.get("costs") if isinstance(run, dict) else None
        if (isinstance(costs, dict) and costs.get("trial_s") and costs.get("card_s")
                and costs.get("settings") == dict(settings)
                and same_device(run.get("environment") or {}, device, here)):
            return Costs(float(costs["trial_s"]), float(costs["card_s"]), f"the last run on this device ({path})")
    return None


def plan_seconds(trials_by_experiment: Mapping[str, tuple[int, int]], costs: Costs, device: str,
                 profiler: str | None) -> float:
    """Seconds for the plan: per experiment (cards, trials per card); a harness start once."""
    kind = "cuda" if device.startswith("cuda") else "cpu"
    total = HARNESS_START_S[kind]
    for cards, trials in trials_by_experiment.values():
        if profiler == "ncu":  # the baseline and each trial under ncu; the confirm rounds are the card's own
            total += cards * ((trials + 1) * NCU_TRIAL_S + costs.card_s)
        else:
            total += cards * (trials * costs.trial_s + costs.card_s)
    if profiler == "ncu" and trials_by_experiment:
        total += NCU_COLD_EXTRA_S
    return total


def estimate_line(trials_by_experiment: Mapping[str, tuple[int, int]], device: str, profiler: str | None,
                  folders: list[Path], here: Mapping[str, Any], settings: Mapping[str, Any]) -> str:
    """plan.md's line: the estimated wall time on this device, and what it is made of."""
    kind = "cuda" if device.startswith("cuda") else "cpu"
    costs = last_run_costs(folders, device, here, settings) or Costs(
        DEFAULTS[kind]["trial_s"], DEFAULTS[kind]["card_s"], f"the defaults for {kind} in harness/run/estimate.py "
        "(no earlier run on this device with these settings)")
    seconds = plan_seconds(trials_by_experiment, costs, device, profiler)
    cards = sum(c for c, _ in trials_by_experiment.values())
    trials = sum(c * t for c, t in trials_by_experiment.values())
    made = (f"{trials + cards} ncu trials at {NCU_TRIAL_S:.0f} s (docs/ncu-cost.md) and {cards} cards' confirm rounds"
            if profiler == "ncu" else f"{trials} trials at {costs.trial_s:.1f} s and {cards} cards at "
            f"{costs.card_s:.1f} s (baseline and confirm)")
    return (f"Estimated wall time on this device ({device}, profiler {profiler or 'unknown'}): about "
            f"{duration(seconds)}: {made}, from {costs.source}.")


def plan_estimate(cfg: HarnessConfig, configs: Mapping[str, HarnessConfig], by_experiment: Mapping[str, list[Any]],
                  experiments: Mapping[str, ExperimentFacts], worker: TrialWorker, device: str | None,
                  run_dir: Path) -> str:
    """experiment=auto's plan line: its selected cards' trials (each experiment's search budget on its drawable
    space), on the device and profiler the worker resolves, at the last costs measured beside this run."""
    if device is None:
        return "Estimated wall time: unknown (no device resolved)."
    from harness.run.execute import describe  # the run's side; imported here: execute does not need this module

    here = describe(worker, Describe(device=device, config=plain(cfg), profiler=dict(cfg.profiler or {})),
                    cfg.search.trial_deadline_s)
    trials: dict[str, tuple[int, int]] = {}
    for name, cards in by_experiment.items():
        space = drawable(dict(experiment_of(configs[name]).space or {}), experiments[name].unmet)[0]
        trials[name] = (len(cards), plan_search(space, configs[name].search).n_trials if space else 0)
    # The runs beside this one and those of the other experiments (hydra's outputs/<experiment>/<date>).
    folders = [run_dir.resolve().parent, run_dir.resolve().parent.parent]
    return estimate_line(trials, device, here.profiler, folders, here.environment,
                         cost_settings(cfg, device, here.profiler))
