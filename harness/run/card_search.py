"""One card's search: the baseline, the Optuna trials in the worker, and the paired confirm rounds.

A trial that raises, runs out of memory, crashes the worker or passes `search.trial_deadline_s` is
recorded as FAIL with its reason and the search goes on (see harness.run.worker).
"""

from __future__ import annotations

import logging
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, TypeVar

import optuna

from harness.boundary.outcomes import OUTCOMES, TrialStatus, status_of
from harness.boundary.replies import Confirmed, Judgement, Measured, Reply, Retimed
from harness.boundary.requests import ConfirmPlan
from harness.boundary.spec import CardSpec, CorrectnessRule, TimingSettings
from harness.cards.applied import (
    APPLIED_KEY,
    AppliedVariant,
    RoundError,
    adopted_in_chunk,
    applied_entry,
    applied_of,
    recorded,
)
from harness.cards.disturbance import MORE_ROUNDS_CAP, robust_verdict, round_record
from harness.cards.dtype import card_dtype, declared_rules
from harness.cards.kernel_match import report_names
from harness.cards.measured import TrialLabel
from harness.cards.measures import captured
from harness.cards.model import Card, Report, load_report, save_report
from harness.config.schema import experiment_of
from harness.run.state import CardOutcome, RunContext, RunError, reference_folder, same_band
from harness.run.worker import CardSession, TrialFailed, WorkerError, quiet_trial_failures
from harness.search import (
    REPEAT_KEY,
    SearchPlan,
    answer_repeat,
    best_feasible,
    budget_trials,
    drawable,
    open_study,
    plan_search,
    remaining_trials,
    stop_when_asked,
    study_name,
    suggest,
    tally,
)
from harness.signals import check

log = logging.getLogger("harness")

_R = TypeVar("_R", bound=Reply)


def run_card(ctx: RunContext, card: Card, report_path: str | None) -> CardOutcome:
    """Measure the card's baseline, search its variants and confirm the best, all in the worker process.

    A trial that raises, runs out of memory, crashes the worker or passes `search.trial_deadline_s`
    is recorded as FAIL with its reason and the search goes on (see harness.run.worker). A baseline that
    cannot be measured is a RunError for the run (one line): without it nothing can be compared; the
    cards finished before it keep their outputs. A failed confirm step keeps the search's timings.
    """
    trials_dir = ctx.run_dir / "trials" / card.id
    spec = _card_spec(ctx, card, trials_dir)
    label = _baseline_label(ctx, report_path, spec.applied)
    session = CardSession(ctx.worker, spec, ctx.cfg.search.trial_deadline_s)
    quiet_trial_failures()
    ctx.count_worker_starts()  # the run's set-up started the worker (or a new one after an earlier run's)
    if ctx.progress is not None:
        ctx.progress.start_card(card.id)
    base_card = _measure_baseline(ctx, session, card, label, trials_dir)
    base_card.extra[APPLIED_KEY] = recorded(spec.applied)  # kept as it is when this run adopts nothing
    space, _ = drawable(experiment_of(ctx.cfg).space or {}, ctx.not_drawn)
    outcome = CardOutcome(card.id, card, base_card)
    if not space:
        return outcome  # a baseline-only experiment, or no variant of its space can run here: nothing to search
    study, plan = _search(ctx, session, card, label, space, base_card.extra.setdefault("baseline_drift", []))
    save_report(Report(cards=[base_card]), trials_dir / "baseline.json")
    _tally(outcome, study)
    outcome.search = tally(study, plan)
    best = best_feasible(study)
    if best is not None:
        _confirm_best(ctx, session, outcome, best, label)
    return outcome


def _baseline_label(ctx: RunContext, report_path: str | None, applied: list[AppliedVariant]) -> TrialLabel:
    """The baseline card's `harness` record (a trial's starts from it): run, role, variant, hypothesis, check."""
    experiment = ctx.experiment
    label = TrialLabel(experiment=experiment.name, variant=experiment.baseline_name, role="baseline",
                       report=report_path or "(shipped)", run=str(ctx.run_dir.resolve()),
                       hypothesis=experiment.hypothesis, check=experiment.check,
                       # a check the experiment registered: a diff of the stored cards imports it from there
                       check_module=experiment.check_module or None)
    if applied:  # round 2 and later: the baseline is the last variant adopted, as it was adopted
        last = applied[-1]
        label = replace(label, experiment=last.experiment, variant=last.variant, params=dict(last.params),
                        builds_on=[a.label for a in applied])
    return label


def _card_spec(ctx: RunContext, card: Card, trials_dir: Path) -> CardSpec:
    """The card's spec, carried by every request of the card (so a new child can rebuild the card): what earlier
    rounds adopted on it (the baseline builds on them), its dtype and math mode, its chunk's adopted variants."""
    try:
        applied = applied_of(card.extra)
    except RoundError as exc:
        raise RunError(f"card {card.id}: {exc}") from None
    cfg, experiment_cfg = ctx.cfg, experiment_of(ctx.cfg)
    scale = card_scale(cfg.workload.scale, cfg.workload.cpu_scale, ctx.device, card)
    cast_cfg = cfg.workload.cast
    if card.op_kind == "cast" and cast_cfg.frames is None and card.id in ctx.cast_frames:
        # The report lost the cast's shape; its pair of cast cards per resolution tells 9 from 12 frames.
        cast_cfg = replace(cast_cfg, frames=ctx.cast_frames[card.id])
    profiler_cfg = dict(cfg.profiler or {})
    if ctx.experiment.metric_set:
        profiler_cfg["metric_set"] = ctx.experiment.metric_set
    profiler_cfg["name"] = ctx.profiler  # resolved: the worker makes the same backend
    slack = cfg.timing.physics_slack
    return CardSpec(
        dtype=card_dtype(card, applied=applied, override=cfg.workload.dtype, declared=declared_rules(ctx.report.extra),
                         experiment_dtype=ctx.experiment.workload_dtype, device=ctx.device),
        adopted=adopted_in_chunk(card, experiment_cfg.compose_from),
        card=card.to_dict(), experiment_module=experiment_cfg.module, device=ctx.device, scale=scale,
        seed=cfg.workload.seed, inputs_dir=cfg.inputs.dir, attention=cfg.workload.attention, cast=cast_cfg,
        applied=applied, reference_path=str(trials_dir / "reference.pt"),
        reference_cache=str(reference_folder(cfg, ctx.run_dir)),
        correctness=CorrectnessRule(**asdict(experiment_cfg.correctness)), timing=ctx.settings,
        physics_slack=slack.cuda if ctx.device.startswith("cuda") else slack.cpu,
        rules=ctx.rules, profiler=profiler_cfg, environment=ctx.environment,
    )


def card_scale(scale: float | None, cpu_scale: float, device: str, card: Card) -> float:
    """The scale a card is built at: `workload.scale` where the user set it (honoured; a comparison with the
    report's card then says the scales differ and gives no time verdict); else 1 on a GPU, and 1 for a captured
    card, which ran at that size in its model's forward on the capture's machine; else `cpu_scale`."""
    if scale is not None:
        return scale
    return 1.0 if device.startswith("cuda") or captured(card) is not None else cpu_scale


def _account(ctx: RunContext, reply: _R) -> _R:
    """A reply's phase timings (and the worker's starts since the last reply) into the run's phases."""
    seconds = reply.seconds
    ctx.phases["measurement_s"] += seconds.get("timing_s", 0.0)
    ctx.phases["checks_s"] = ctx.phases.get("checks_s", 0.0) + seconds.get("checks_s", 0.0)
    ctx.phases["references_s"] = ctx.phases.get("references_s", 0.0) + seconds.get("references_s", 0.0)
    ctx.phases["profiling_s"] += seconds.get("profile_s", 0.0)
    ctx.phases["setup_s"] += seconds.get("setup_s", 0.0) + seconds.get("build_s", 0.0)
    ctx.count_worker_starts()
    return reply


def _measure_baseline(ctx: RunContext, session: CardSession, card: Card, label: TrialLabel,
                      trials_dir: Path) -> Card:
    """The baseline measured, its card; without it nothing can be compared: a RunError (one line)."""
    try:
        reply = _account(ctx, session.measure(
            baseline=True, variant=ctx.experiment.baseline_name, params={}, label=label,
            card_path=trials_dir / "baseline.json",
            # The report's kernel names too: whether the baseline ran the report's kernel is judged on them.
            extra={"report_card": {"primary": card.primary, "summed_kernel_us": card.summed_kernel_us,
                                   **report_names(card)}, "baseline_drift": []}))
    except WorkerError as exc:
        raise RunError(f"card {card.id}: {exc}") from None
    if not reply.ok:
        if reply.status is TrialStatus.SETUP:
            raise RunError(f"card {card.id}: cannot build its workload ({reply.reason})")
        raise RunError(f"card {card.id}: the baseline {label.variant} failed: {reply.reason}")
    return load_report(str(reply.card_path)).cards[0]


def _search(ctx: RunContext, session: CardSession, card: Card, label: TrialLabel, space: dict[str, Any],
            drift: list[dict[str, Any]]) -> tuple[optuna.Study, SearchPlan]:
    """The card's study, run to its budget: each trial measured in the worker, the baseline re-timed between two
    measured trials (its drift, into `drift`; not after the last: the confirm rounds re-time it next). No worker at
    all ends the run (RunError)."""
    experiment, trials_dir = ctx.experiment, ctx.run_dir / "trials" / card.id
    plan = plan_search(space, ctx.cfg.search)
    study = open_study(study_name(experiment.name, card.id), ctx.storage, plan.sampler, ctx.cfg.search.resume)
    drift_settings = TimingSettings(warmup=1, min_repeats=3, budget_s=ctx.cfg.timing.drift_budget_s,
                                    cuda_graph=ctx.settings.cuda_graph)
    no_worker: list[str] = []  # why no worker process could be started again, if that happened
    completed: list[int] = []  # the last measured trial whose drift re-time is still to come

    def objective(trial: optuna.Trial) -> float:
        variant, params = suggest(trial, space)
        trial.set_user_attr("variant", variant)
        if (earlier := answer_repeat(trial, plan.sampler)) is not None:
            return _repeated(earlier)  # proposed again: answered from the earlier trial, not measured
        if completed:
            _retime(ctx, session, card, completed.pop(), trial, drift_settings, drift)
        trial_label = replace(label, experiment=experiment.name, variant=variant, params=params, role="trial",
                              trial=trial.number)
        path = trials_dir / f"trial_{trial.number:04d}_{variant}.json"
        try:
            reply = _account(ctx, session.measure(variant=variant, params=params, label=trial_label, card_path=path))
        except WorkerError as exc:  # not this trial's fault, and no later trial can run either
            no_worker.append(str(exc))
            reply = Measured(TrialStatus.FAILED, reason=str(exc))
            trial.study.stop()
        _record(trial, reply)
        state = OUTCOMES[reply.status].optuna_state
        if state == "PRUNED":
            raise optuna.TrialPruned(reply.reason)
        if state == "FAIL":
            if not no_worker:
                log.warning("card %s trial %d %s%s failed: %s", card.id, trial.number, variant,
                            f" {params}" if params else "", reply.reason)
            raise TrialFailed(reply.reason)
        completed.append(trial.number)
        assert reply.per_call_us is not None  # a complete measurement is timed
        return reply.per_call_us

    todo = remaining_trials(study, plan.n_trials)
    shown = ctx.progress
    if shown is not None:
        shown.trials_left(plan.n_trials, todo)
    if todo:
        def shown_done(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
            if shown is not None and REPEAT_KEY not in trial.system_attrs:  # a repeat took no time
                shown.trial_done(f"{card.id} [{plan.sampler_name}]")

        # The queue ends the loop (SharedBudgetSampler); a repeat may put one trial back in it, at most
        # n_trials per study (harness.search.repeats), so this bound is never what stops it.
        study.optimize(objective, n_trials=todo + plan.n_trials, timeout=ctx.cfg.search.timeout, catch=(Exception,),
                       callbacks=[stop_when_asked, shown_done])
        check()  # a stop signal received during the last trial's bookkeeping
        if no_worker:
            raise RunError(f"card {card.id}: {no_worker[0]}")
    return study, plan


def _repeated(earlier: optuna.trial.FrozenTrial) -> float:
    """A repeat's answer, as its earlier trial ended: that trial's value, pruning or failure."""
    reason = str(earlier.user_attrs.get("reason", ""))
    if earlier.state == optuna.trial.TrialState.PRUNED:
        raise optuna.TrialPruned(reason)
    if earlier.state == optuna.trial.TrialState.FAIL:
        raise TrialFailed(reason)
    assert earlier.value is not None  # a completed trial has its value
    return earlier.value


def _record(trial: optuna.Trial, reply: Measured) -> None:
    """What a trial came to, on the trial (its status, card, judgement and reason)."""
    trial.set_user_attr("status", reply.status.value)
    if reply.card_path:  # written by the worker before it answered
        trial.set_user_attr("card", reply.card_path)
    if reply.judgement is not None:
        trial.set_user_attr("correctness", asdict(reply.judgement))
    if reply.reason:
        trial.set_user_attr("reason", reply.reason)


def _retime(ctx: RunContext, session: CardSession, card: Card, after: int, trial: optuna.Trial,
            settings: TimingSettings, drift: list[dict[str, Any]]) -> None:
    """The baseline timed again after measured trial `after`, before `trial` (the drift check); a failure loses
    only the check."""
    try:
        again = _account(ctx, session.retime(settings))
    except WorkerError as exc:
        again = Retimed(TrialStatus.CRASHED, reason=str(exc))
    if again.ok:
        drift.append({"after_trial": after, "median_us": again.per_call_us})
    else:
        trial.set_user_attr("drift_error", again.reason)
        log.warning("card %s: baseline re-timing after trial %d failed: %s", card.id, after, again.reason)


def _tally(outcome: CardOutcome, study: optuna.Study) -> None:
    """The study's trials that count (surplus and since-retried ones left out) into the card's skipped,
    infeasible and failed lists, by each trial's status (harness.boundary.outcomes.OUTCOMES)."""
    counted = budget_trials(study.get_trials(deepcopy=False))
    for trial in counted:
        variant = trial.user_attrs.get("variant", "?")
        params = {k.split(".", 1)[-1]: v for k, v in trial.params.items() if k != "variant"}
        key = f"{variant}({', '.join(f'{k}={v}' for k, v in params.items())})" if params else variant
        status = status_of(trial.user_attrs.get("status"))
        if status is None and trial.state == optuna.trial.TrialState.FAIL:
            status = TrialStatus.FAILED  # a trial that died before it recorded anything
        listed = OUTCOMES[status].summary if status is not None else None
        if listed == "skipped":
            outcome.skipped[key] = trial.user_attrs.get("reason", "")
        elif listed == "infeasible":
            judged = trial.user_attrs.get("correctness")
            outcome.infeasible[key] = (Judgement.from_dict(judged).why_infeasible() if judged
                                       else str(trial.user_attrs.get("reason", "")))
        elif listed == "failed":
            stopped = trial.system_attrs.get("harness:interrupted")  # the process was stopped mid-trial
            reason = trial.user_attrs.get("reason") or (f"interrupted ({stopped})" if stopped else None)
            outcome.failed[key] = str(reason or "failed (no reason recorded)")[:200]
    outcome.n_trials = len(counted)


def _confirm_best(ctx: RunContext, session: CardSession, outcome: CardOutcome, best: optuna.trial.FrozenTrial,
                  label: TrialLabel) -> None:
    """The search's best in paired confirm rounds against the baseline; adopted when FASTER, and the card
    files (baseline.json, tried.json, best.json) written with the verdict."""
    trials_dir = ctx.run_dir / "trials" / outcome.card_id
    outcome.tried = load_report(best.user_attrs["card"]).cards[0]
    tried_variant = best.user_attrs.get("variant")
    assert isinstance(tried_variant, str)  # every trial records its variant first (objective)
    outcome.tried_variant = tried_variant
    outcome.tried_params = {k.split(".", 1)[-1]: v for k, v in best.params.items() if k != "variant"}
    reply, outcome.confirmation = confirm(ctx, session, trials_dir, best.user_attrs["card"],
                                          tried_variant, outcome.tried_params)
    _account(ctx, reply)
    if reply.ok and reply.tried_rounds is not None:  # the child restated both cards from the rounds
        outcome.baseline = load_report(trials_dir / "baseline.json").cards[0]
        outcome.tried = load_report(trials_dir / "tried.json").cards[0]
    _confirmed(outcome.tried, outcome.baseline, reply, outcome.confirmation)
    if outcome.adopted:  # what the next round's baseline is built from (harness.cards.applied)
        applied, built_as = session.spec.applied, session.spec.dtype
        assert built_as is not None  # the run decides every card's dtype (_card_spec)
        outcome.tried.extra[APPLIED_KEY] = recorded([*applied, applied_entry(
            experiment=ctx.experiment.name, module=ctx.experiment.module, variant=tried_variant,
            params=outcome.tried_params, facts=outcome.tried.extra.get("variant") or {},
            workload_dtype=built_as.dtype, math=built_as.math, confirmation=outcome.confirmation,
            run=str(ctx.run_dir.resolve()), precision=_judged_precision(outcome.tried))])
    save_report(Report(cards=[outcome.baseline]), trials_dir / "baseline.json")
    save_report(Report(cards=[outcome.tried]), trials_dir / "tried.json")
    save_report(Report(cards=[outcome.kept]), trials_dir / "best.json")


def confirm(ctx: RunContext, session: CardSession, trials_dir: Path, tried_path: str, variant: str,
            params: dict[str, Any]) -> tuple[Confirmed, dict[str, Any]]:
    """Re-time baseline and the tried variant in paired ABBA rounds (in the worker); judge the pair.

    The search timed each trial once, minutes apart from the baseline; the verdict is taken from
    these interleaved rounds instead, per original call, by the rule of harness.cards.disturbance (each round's
    lower quartile per side, rounds interference touched dropped, more rounds while undecided). The
    worker restates both cards from the rounds (baseline.json and tried.json), keeping the search's
    own timings under `search_timing`. Without rounds (timing.confirm_rounds=0, or they failed) the
    verdict is UNCONFIRMED and nothing is adopted; the cards say why.
    """
    rounds = ctx.cfg.timing.confirm_rounds
    band = same_band(ctx)
    if rounds < 2:
        why = ("timing.confirm_rounds=0: no paired rounds" if rounds < 1
               else "timing.confirm_rounds=1: an interval needs at least 2 paired rounds")
        return Confirmed(TrialStatus.COMPLETE), _unconfirmed(why, band)
    baseline = str(trials_dir / "baseline.json")
    plan = ConfirmPlan(variant=variant, params=params, rounds=rounds, max_rounds=MORE_ROUNDS_CAP * rounds, band=band,
                       budget_s=ctx.cfg.timing.budget_s / 4, baseline_card=baseline, tried_card=tried_path,
                       baseline_out=baseline, tried_out=str(trials_dir / "tried.json"))
    try:
        reply = session.confirm(plan)
    except WorkerError as exc:
        reply = Confirmed(TrialStatus.CRASHED, reason=str(exc))
    if not reply.ok or reply.baseline_rounds is None or reply.tried_rounds is None:
        log.warning("card %s: the confirm rounds failed (%s); nothing is adopted", session.spec.card_id, reply.reason)
        return reply, _unconfirmed(f"the confirm rounds failed: {reply.reason}", band)
    before, after = reply.baseline_rounds, reply.tried_rounds
    verdict = robust_verdict(before.rounds, after.rounds, band)
    return reply, {**verdict.as_dict(), "band": band, "order": "ABBA",
                   "before_rounds": round_record(before.rounds), "after_rounds": round_record(after.rounds),
                   "disturbed_samples": before.disturbed_samples + after.disturbed_samples,
                   "samples": before.samples + after.samples}


def _judged_precision(card: Card) -> str | None:
    """The lowered precision a measured card was held to (harness.trial.correctness), None for the baseline's."""
    precision = (card.extra.get("correctness") or {}).get("precision")
    return None if precision in (None, "same") else str(precision)


def _confirmed(tried: Card, base_card: Card, reply: Confirmed, confirmation: dict[str, Any]) -> None:
    """The verdict on the tried card; a failed confirm's reason on both."""
    tried.extra["confirmation"] = confirmation
    if not reply.ok:
        for card in (base_card, tried):
            card.extra["confirm_error"] = reply.reason


def _unconfirmed(why: str, band: float) -> dict[str, Any]:
    return {"verdict": "UNCONFIRMED", "speedup": None, "ci": None, "band": band, "rounds": 0,
            "rule": f"UNCONFIRMED: {why}; nothing is adopted"}


