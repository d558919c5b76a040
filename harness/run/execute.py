"""One harness run: for each selected card, re-profile the baseline, search the variants, diff.

Everything measured is written as soon as it exists (atomic writes): the baseline card and every
trial card under `trials/<card>/`, the Optuna study in its storage. The run-level files (baseline.json,
best.json, diff.md/json, summary.md) are rewritten after each card, so an interrupted run keeps
what it finished; report.html, which reads all of them and the studies, once at the end or on a stop.
"""

from __future__ import annotations

import gc
import importlib
import logging
import time
import warnings
from dataclasses import dataclass, replace
from pathlib import Path

import optuna

from harness.boundary.replies import Described, ExperimentFacts
from harness.boundary.requests import Describe
from harness.boundary.spec import TimingSettings
from harness.cards.atomic import write_json_atomic
from harness.cards.lint import lint_report
from harness.cards.model import Card, Report, load_report, parse_report
from harness.cards.rules import RuleSet, classify_report
from harness.config.schema import HarnessConfig, experiment_of, plain
from harness.config.validate import check_output_dir, validate_config
from harness.errors import HarnessError
from harness.run.card_search import run_card
from harness.run.outputs import card_results, write_outputs, write_page
from harness.run.predictions import Planned, predict_run, write_predictions
from harness.run.progress import RunProgress, cost_settings
from harness.run.provenance import claim_run_dir
from harness.run.selection import SelectionError, select_cards
from harness.run.state import CardOutcome, RunContext, RunError
from harness.run.stopping import earlier_drift, keep_drift, note_progress
from harness.run.worker import TrialWorker, WorkerError, warn_unused_memory_limit, worker_for
from harness.search import (
    check_new_studies,
    default_storage,
    describe_url,
    drawable,
    journal_path,
    make_storage,
    plan_search,
    study_name,
    validate_space,
)
from harness.signals import check

log = logging.getLogger("harness")

__all__ = ["CardOutcome", "RunContext", "RunError", "card_results", "describe", "execute", "rules_of",
           "with_report_cards"]


def rules_of(cfg: HarnessConfig) -> RuleSet:
    """The run's classification rules (conf/rules); a bad rules section is a RunError (one line)."""
    try:
        return RuleSet.from_config(cfg.rules)
    except ValueError as exc:
        raise RunError(str(exc)) from None


def describe(worker: TrialWorker, request: Describe, deadline_s: float | None) -> Described:
    """What the worker answers `request`; RunError (one line) when it cannot answer (it could not start, died,
    missed the deadline, or describing failed)."""
    try:
        described = worker.request(request, deadline_s)
    except WorkerError as exc:
        raise RunError(str(exc)) from None
    if not described.ok:
        raise RunError(f"the worker could not describe the run: {described.reason}{worker.log_tail()}")
    return described


def with_report_cards(report: Report, described: Described) -> Report:
    """The normalized report with the cards the worker derived from it (its chunk cards) appended."""
    derived = parse_report({"cards": described.chunk_cards}, "the report's chunk cards").cards
    return replace(report, cards=[*report.cards, *derived])


@dataclass(frozen=True)
class SetUp:
    """What a run is set up with before its first card: every check passed, nothing measured."""

    experiment: ExperimentFacts
    report: Report  # normalized and classified, with the report's chunk cards
    cards: list[Card]
    described: Described  # the experiment, the device and its environment
    derived: Described  # from the report and the device: the profiler, the cast cards' frames


# Modules the run imports later anyway (the verdicts' t quantiles; a database storage's layer), imported while
# the worker imports torch rather than after it.
_IMPORTED_WHILE_THE_WORKER_STARTS = ("scipy.special",)
_IMPORTED_FOR_A_DATABASE = ("sqlalchemy.orm", "alembic.command", "alembic.migration")


def set_up(cfg: HarnessConfig, rules: RuleSet, worker: TrialWorker, storage: str) -> SetUp:
    """The experiment, the report, the device, the cards and the profiler, each checked in that order;
    what needs torch is described by the worker (a Describe request), its errors raised here in order.
    `storage` (the run's URL) says whether the database layer is worth importing while the worker starts."""
    experiment_cfg = experiment_of(cfg)
    deadline = cfg.search.trial_deadline_s
    # Read while the worker starts (harness.run.worker.TrialWorker.spawn); its error is raised in its turn.
    try:
        normalized, report_error = classify_report(lint_report(load_report(cfg.report)).normalized, rules), None
    except HarnessError as exc:
        report_error = exc
    database = () if journal_path(storage) is not None else _IMPORTED_FOR_A_DATABASE
    for module in (*_IMPORTED_WHILE_THE_WORKER_STARTS, *database):
        importlib.import_module(module)
    described = describe(worker, Describe(experiments={"run": (experiment_cfg.module, experiment_cfg.name)},
                                          device=cfg.device, config=plain(cfg),
                                          noise_probe_s=cfg.timing.noise_probe_s), deadline)
    experiment = described.experiment("run")
    space = dict(experiment_cfg.space or {})
    if space or len(experiment.variants) > 1:
        validate_space(space, list(experiment.variants), experiment.name)
        experiment.check_space(space)
    if report_error is not None:
        raise report_error
    profiler = {**(cfg.profiler or {}), **({"metric_set": experiment.metric_set} if experiment.metric_set else {})}
    derived = describe(worker, Describe(report=normalized.to_dict(), device=described.device, profiler=profiler),
                       deadline)
    report = with_report_cards(normalized, derived)
    if described.device is None:
        raise RunError(str(described.device_error))
    try:
        cards = select_cards(report, cfg.cards, experiment, experiment_cfg.default_cards, described.device)
    except SelectionError as exc:
        raise RunError(str(exc)) from None
    # A card whose workload needs a package this install lacks (diffusers for the chunk cards) could only
    # fail once the worker builds it: say so now, with what to install.
    for card in cards:
        if (why := derived.unavailable.get(card.op_kind)) is not None:
            raise RunError(f"{experiment.name} cannot run card {card.id} on this install: {why}")
    if derived.profiler is None:
        raise RunError(str(derived.profiler_error))
    for note in derived.profiler_notes:
        warnings.warn(note, stacklevel=2)
        log.warning(note)
    return SetUp(experiment, report, cards, described, derived)


def execute(cfg: HarnessConfig, run_dir: Path) -> tuple[RunContext, list[CardOutcome]]:
    """Validate everything (config, inputs, device, output folder, storage), then run each card.

    Nothing is measured before the checks pass: a bad value, an unwritable run directory, an
    unreachable storage or (without search.resume) an existing study is a one-line error first.
    """
    started = time.perf_counter()
    validate_config(plain(cfg))
    rules = rules_of(cfg)
    describing = worker_for(cfg)
    describing.spawn()  # torch's import in the child, while this process reads the report
    starts_before = len(describing.startups)  # the starts of a worker that served an earlier run are not this one's
    storage = cfg.search.storage or default_storage(run_dir)
    setup = set_up(cfg, rules, describing, storage)
    # Hydra's, Optuna's and the report's objects (and SQLAlchemy's, with a database storage) live as long as the
    # run: frozen out of the collector, whose full collections walked them every time (0.3 s of the default CPU run).
    gc.freeze()
    experiment, cards, device, profiler = setup.experiment, setup.cards, setup.described.device, setup.derived.profiler
    assert device is not None and profiler is not None  # set_up raised their errors
    worker = worker_for(cfg, device)  # another one where the device it resolved takes other limits (CUDA)
    warn_unused_memory_limit(cfg, device)
    check_output_dir(run_dir)
    claim_run_dir(run_dir, plain(cfg), device=device, profiler=profiler, cards=[c.id for c in cards])
    worker.use_run_dir(run_dir)
    space = dict(experiment_of(cfg).space or {})
    if space or len(experiment.variants) > 1:
        check_new_studies(make_storage(storage, cfg.search), [study_name(experiment.name, c.id) for c in cards],
                          cfg.search.resume, describe_url(storage))
    timing = cfg.timing
    ctx = RunContext(
        cfg=cfg, run_dir=run_dir, experiment=experiment, rules=rules, device=device, profiler=profiler,
        # The profiler's fallback notes travel in the environment: run.json (also a stopped run's) and summary.md.
        environment={**setup.described.environment, "profiler_notes": list(setup.derived.profiler_notes)},
        storage=storage, report=setup.report, worker=worker,
        starts_counted=starts_before if worker is describing else 0,
        cast_frames=setup.derived.cast_frames,
        settings=TimingSettings(warmup=timing.warmup, min_repeats=timing.min_repeats, budget_s=timing.budget_s,
                                cuda_graph=timing.cuda_graph),
        not_drawn=drawable(space, experiment.unmet)[1],
        noise_probe=setup.described.noise_probe,
    )
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    drawn = drawable(space, experiment.unmet)[0]
    # What the run expects before it measures (harness.predict): predictions.json, scored as the cards finish.
    predicting = time.perf_counter()  # on a machine's first run, with its peaks and reference kernels measured
    write_predictions(run_dir, predict_run(cfg, worker, [Planned(experiment, drawn, cards)], setup.report, device))
    ctx.phases["predictions_s"] = time.perf_counter() - predicting
    per_card = plan_search(drawn, cfg.search).n_trials if drawn else 0
    if (cut := trials_cut(cfg.search.n_trials, per_card if drawn else None)) is not None:
        log.info(cut)  # once: "trial 1 of 3" with search.n_trials=30 would otherwise go unexplained
    ctx.progress = RunProgress(cards=len(cards), trials=per_card * len(cards)).open()
    try:
        outcomes = _run_cards(ctx, cards)
    finally:
        ctx.progress.close()
    wall = time.perf_counter() - started
    ctx.phases["wall_s"] = wall
    ctx.phases["outside_measurement_s"] = wall - ctx.phases["measurement_s"]
    costs = ctx.progress.costs(cost_settings(cfg, device, profiler))
    write_json_atomic(run_dir / "run.json", {"phases": ctx.phases, "costs": costs,
                                             "noise": ctx.noise(outcomes).as_dict(),
                                             "environment": ctx.environment,
                                             "cards": [o.card_id for o in outcomes],
                                             "storage": describe_url(storage), "worker": cfg.search.worker})
    # Once, at the end (it reads every card file and the studies), with run.json's environment and phases.
    write_page(run_dir)
    return ctx, outcomes


def trials_cut(requested: int, planned: int | None) -> str | None:
    """What a run says, once, where the space cut `search.n_trials` (each configuration is measured once); None
    where it did not, or where nothing is searched (`planned` None)."""
    if planned is None or planned >= requested:
        return None
    return (f"search.n_trials={requested} cut to {planned} per card: the drawable space has {planned} "
            "configuration(s), each measured once")


def _run_cards(ctx: RunContext, cards: list[Card]) -> list[CardOutcome]:
    """Each card in turn, the run-level files rewritten after each; on a stop or a run error, the page of
    the cards finished (a stop's banner goes atop it) and how far the run got (run.json)."""
    outcomes: list[CardOutcome] = []
    try:
        for card in cards:
            check()  # a stop signal received since the last card (harness.signals): the finished cards' page
            earlier = earlier_drift(ctx.run_dir, card.id)  # a resumed card keeps the stopped run's drift checks
            outcomes.append(keep_drift(run_card(ctx, card, ctx.cfg.report), earlier, ctx.run_dir))
            write_outputs(ctx, outcomes)
            if ctx.progress is not None:
                ctx.progress.card_done(card.id)
    except KeyboardInterrupt as stop:  # a stop signal's Stopped: how far the run got, for run.json and the banners
        note_progress(stop, ctx, outcomes, [c.id for c in cards])
        if outcomes:
            write_page(ctx.run_dir)
        raise
    except HarnessError:  # a card's one-line error: the cards before it keep their page
        if outcomes:
            write_page(ctx.run_dir)
        raise
    return outcomes
