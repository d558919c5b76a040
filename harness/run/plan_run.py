"""`auto.plan_only=true` with one experiment: the cards it would measure, its trials per card and the estimated
wall time on this device, in plan.md and plan.json; nothing measured.

The run is set up exactly as it would be (harness.run.execute.set_up: the experiment, the report, the device, the
cards, the profiler, each checked, so a plan fails where the run would), then stops: no baseline, no trial, no
A/A probe of the machine.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from harness.cards.atomic import write_json_atomic, write_text_atomic
from harness.cards.measures import time_in_model
from harness.config.schema import HarnessConfig, experiment_of
from harness.run.estimate import estimate_line
from harness.run.execute import rules_of, set_up, trials_cut
from harness.run.progress import cost_settings
from harness.run.worker import worker_for
from harness.search import default_storage, drawable, plan_search


def plan_run(cfg: HarnessConfig, run_dir: Path) -> str:
    """Write plan.json and plan.md for `cfg`'s one experiment in `run_dir`; return plan.md's text."""
    unprobed = replace(cfg, timing=replace(cfg.timing, noise_probe_s=0.0))  # a plan measures nothing
    worker = worker_for(cfg)
    worker.spawn()
    setup = set_up(unprobed, rules_of(cfg), worker, cfg.search.storage or default_storage(run_dir))
    device, profiler = str(setup.described.device), setup.derived.profiler
    space, not_drawn = drawable(dict(experiment_of(cfg).space or {}), setup.experiment.unmet)
    trials = plan_search(space, cfg.search).n_trials if space else 0
    name = setup.experiment.name
    folders = [run_dir.resolve().parent, run_dir.resolve().parent.parent]  # runs beside it, other experiments'
    estimate = estimate_line({name: (len(setup.cards), trials)}, device, profiler, folders,
                             setup.described.environment, cost_settings(cfg, device, profiler))
    cards = [{"card": c.id, "class": c.primary, "time_in_model_us": found.us if (found := time_in_model(c)) else None}
             for c in setup.cards]
    write_json_atomic(run_dir / "plan.json", {"experiment": name, "device": device, "profiler": profiler,
                                              "trials_per_card": trials, "n_trials": cfg.search.n_trials,
                                              "not_drawn": not_drawn, "cards": cards, "estimate": estimate})
    cut = trials_cut(cfg.search.n_trials, trials if space else None)
    lines = [f"# plan: {name}", "", f"{len(cards)} card(s), {trials} trial(s) each (the search's budget on the "
             f"{'drawable space' if space else 'baseline alone: nothing to search'}), on {device} with profiler "
             f"{profiler}; run it without `auto.plan_only=true`. Nothing was measured.", "", estimate, "",
             *([cut, ""] if cut else []),
             *[f"- not drawn: {variant} ({why})" for variant, why in not_drawn.items()], *([""] if not_drawn else []),
             "| card | class | time in model us |", "|---|---|---:|",
             *[f"| `{c['card']}` | {c['class'] or 'no class'} | "
               f"{'n/a' if c['time_in_model_us'] is None else format(c['time_in_model_us'], '.1f')} |" for c in cards]]
    text = "\n".join(lines) + "\n"
    write_text_atomic(run_dir / "plan.md", text)
    return text
