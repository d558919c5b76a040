"""One harness run: for each selected card, re-profile the baseline, search the variants, diff.

Everything measured is written as soon as it exists (atomic writes): the baseline card and every
trial card under `trials/<card>/`, the Optuna study in its storage. The run-level files (baseline.json,
best.json, diff.md/json, summary.md) are rewritten after each card, so an interrupted run keeps
what it finished; report.html, which reads all of them and the studies, once at the end or on a stop.
"""

from __future__ import annotations

import logging
import time
import warnings
from pathlib import Path
from typing import Any, Mapping

import optuna

from harness.card_search import run_card
from harness.cards.lint import lint_report
from harness.cards.model import load_report, write_json_atomic
from harness.cards.rules import RuleSet, classify_report
from harness.chunks import add_chunk_cards
from harness.environment import describe_environment, resolve_device
from harness.experiment import load_experiment
from harness.measure import TimingSettings
from harness.outputs import card_results, write_outputs, write_page
from harness.profile import registry as profilers
from harness.profile.base import Profiler, ProfilerUnavailable
from harness.provenance import claim_run_dir
from harness.run_state import CardOutcome, RunContext, RunError
from harness.search import drawable, validate_space
from harness.selection import SelectionError, select_cards
from harness.stopping import earlier_drift, keep_drift, note_progress
from harness.workloads.registry import unavailable

log = logging.getLogger("harness")

__all__ = ["CardOutcome", "RunContext", "RunError", "card_results", "execute", "make_profiler"]


def make_profiler(cfg: Mapping[str, Any], device: str) -> tuple[Profiler, list[str]]:
    """The run's profiler (harness.profile.registry) and the notes of a fallback, each also warned."""
    try:
        name, notes = profilers.resolve(cfg, device)
    except profilers.UnknownProfiler as exc:
        raise RunError(str(exc)) from None
    for note in notes:
        warnings.warn(note, stacklevel=2)
    return profilers.make(name, cfg), notes


def execute(cfg: Mapping[str, Any], run_dir: Path) -> tuple[RunContext, list[CardOutcome]]:
    """Validate everything (config, inputs, device, output folder, storage), then run each card.

    Nothing is measured before the checks pass: a bad value, an unwritable run directory, an
    unreachable storage or (without search.resume) an existing study is a one-line error first.
    """
    from harness.search import check_new_studies, describe_url, make_storage, study_name
    from harness.validate import check_output_dir, validate_config

    started = time.perf_counter()
    validate_config(cfg)
    try:
        rules = RuleSet.from_config(cfg.get("rules"))
    except ValueError as exc:
        raise RunError(str(exc)) from None
    experiment = load_experiment(cfg["experiment"]["module"], expected_name=cfg["experiment"]["name"])
    space = dict(cfg["experiment"].get("space") or {})
    if space or len(experiment.variants) > 1:
        validate_space(space, list(experiment.variants), experiment.name)
        experiment.check_space(space)
    report_path = cfg.get("report")
    report = load_report(report_path)
    normalized = add_chunk_cards(classify_report(lint_report(report).normalized, rules))
    try:
        device = resolve_device(str(cfg.get("device", "auto")))
    except ValueError as exc:
        raise RunError(str(exc)) from None
    try:
        cards = select_cards(normalized, cfg.get("cards"), experiment, cfg["experiment"].get("default_cards"),
                             device)
    except SelectionError as exc:
        raise RunError(str(exc)) from None
    # A card whose workload needs a package this install lacks (diffusers for the chunk cards) could only
    # fail once the worker builds it: say so now, with what to install.
    for card in cards:
        if (why := unavailable(card.op_kind)) is not None:
            raise RunError(f"{experiment.name} cannot run card {card.id} on this install: {why}")
    try:
        profiler_cfg = dict(cfg.get("profiler") or {})
        if experiment.metric_set:
            profiler_cfg["metric_set"] = experiment.metric_set
        profiler, notes = make_profiler(profiler_cfg, device)
    except ProfilerUnavailable as exc:
        raise RunError(str(exc)) from None
    for note in notes:
        log.warning(note)
    check_output_dir(run_dir)
    claim_run_dir(run_dir, cfg, device=device, profiler=profiler.name, cards=[c.id for c in cards])
    storage = cfg["search"].get("storage") or f"sqlite:///{(run_dir / 'optuna.db').resolve()}"
    if dict(cfg["experiment"].get("space") or {}) or len(experiment.variants) > 1:
        check_new_studies(make_storage(storage, cfg["search"]), [study_name(experiment.name, c.id) for c in cards],
                          bool(cfg["search"].get("resume")), describe_url(storage))
    timing = cfg["timing"]
    _, not_drawn = drawable(space, experiment.unmet_needs(device))
    ctx = RunContext(
        cfg=cfg, run_dir=run_dir, experiment=experiment, rules=rules, device=device, profiler=profiler,
        # The profiler's fallback notes travel in the environment: run.json (also a stopped run's) and summary.md.
        environment={**describe_environment(device, cfg), "profiler_notes": list(notes)}, storage=storage,
        report=normalized,
        settings=TimingSettings(warmup=None if timing["warmup"] is None else int(timing["warmup"]),
                                min_repeats=int(timing["min_repeats"]),
                                budget_s=float(timing["budget_s"]), cuda_graph=bool(timing.get("cuda_graph"))),
        not_drawn=not_drawn,
    )
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    outcomes: list[CardOutcome] = []
    try:
        for card in cards:
            earlier = earlier_drift(run_dir, card.id)  # a resumed card keeps the stopped run's drift checks
            outcomes.append(keep_drift(run_card(ctx, card, report_path), earlier, run_dir))
            write_outputs(ctx, outcomes)
    except KeyboardInterrupt as stop:  # SIGINT/SIGTERM: how far the run got, for run.json and the banners
        note_progress(stop, ctx, [o.card_id for o in outcomes], [c.id for c in cards])
        if outcomes:
            write_page(run_dir)  # the page of the cards finished; the stop's banner goes atop it
        raise
    except RunError:
        if outcomes:
            write_page(run_dir)
        raise
    wall = time.perf_counter() - started
    ctx.phases["wall_s"] = wall
    ctx.phases["outside_measurement_s"] = wall - ctx.phases["measurement_s"]
    write_json_atomic(run_dir / "run.json", {"phases": ctx.phases, "environment": ctx.environment,
                                             "cards": [o.card_id for o in outcomes],
                                             "storage": describe_url(storage),
                                             "worker": cfg["search"].get("worker")})
    # Once, at the end (it reads every card file and the studies), with run.json's environment and phases.
    write_page(run_dir)
    return ctx, outcomes
