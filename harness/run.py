"""One harness run: for each selected card, re-profile the baseline, search the variants, diff.

Everything measured is written as soon as it exists (atomic writes): the baseline card and every
trial card under `trials/<card>/`, the Optuna study in its storage. The run-level files (baseline.json,
best.json, diff.md/json, summary.md) are rewritten after each card, so an interrupted run keeps
what it finished; report.html, which reads all of them and the studies, once at the end or on a stop.
"""

from __future__ import annotations

import logging
import sys
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping

import optuna
from tqdm import tqdm

from harness.cards.diff import (
    VERDICT_RULE_TEXT,
    CardDiff,
    ReportDiff,
    adoption_text,
    calls_per_invocation,
    card_time_us,
    diff_cards,
    render_markdown,
    speedup_text,
    verdict_text,
)
from harness.cards.html import write_run_html
from harness.cards.labels import transition
from harness.cards.lint import lint_report
from harness.cards.measures import TIMING_BASIS
from harness.cards.model import Card, Report, load_report, save_report, write_json_atomic, write_text_atomic
from harness.cards.noise import paired_verdict
from harness.cards.rules import RuleSet, class_counts, classify_report, rules_text
from harness.chunks import add_chunk_cards, attach_op_breakdowns
from harness.environment import describe_environment, resolve_device
from harness.experiment import Experiment, load_experiment
from harness.measure import TimingSettings
from harness.overview import CardResult, render_end_to_end
from harness.profile import registry as profilers
from harness.profile.base import Profiler, ProfilerUnavailable
from harness.provenance import claim_run_dir
from harness.recipe import render_recipe
from harness.rounds import APPLIED_KEY, RoundError, applied_entry, applied_of, label_text
from harness.search import (
    best_feasible,
    budget_trials,
    drawable,
    open_study,
    plan_search,
    remaining_trials,
    suggest,
    validate_space,
)
from harness.selection import SelectionError, select_cards
from harness.stopping import earlier_drift, keep_drift, note_progress
from harness.workloads.registry import cast_frames_from_report
from harness.worker import (
    CardSession,
    Reply,
    TrialFailed,
    WorkerError,
    deadline_from,
    quiet_trial_failures,
    worker_for,
)

log = logging.getLogger("harness")


class RunError(ValueError):
    """Bad configuration or input found before measuring; one line, with the fix."""


def make_profiler(cfg: Mapping[str, Any], device: str) -> tuple[Profiler, list[str]]:
    """The run's profiler (harness.profile.registry) and the notes of a fallback, each also warned."""
    try:
        name, notes = profilers.resolve(cfg, device)
    except profilers.UnknownProfiler as exc:
        raise RunError(str(exc)) from None
    for note in notes:
        warnings.warn(note, stacklevel=2)
    return profilers.make(name, cfg), notes


@dataclass
class CardOutcome:
    """One card's result: its baseline, the best variant the search tried, and whether it was adopted.

    A variant is adopted only when it is feasible and its paired confirm rounds say FASTER; otherwise
    the card keeps its baseline (best.json holds the baseline card) and the tried variant is still
    shown with its verdict.
    """

    card_id: str
    report_card: Card
    baseline: Card
    tried: Card | None = None  # the search's best feasible variant, re-timed in the confirm rounds
    tried_variant: str | None = None
    tried_params: dict[str, Any] = field(default_factory=dict)
    confirmation: dict[str, Any] | None = None  # harness.cards.noise.PairedVerdict.as_dict(), or why none
    skipped: dict[str, str] = field(default_factory=dict)
    infeasible: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    n_trials: int = 0

    @property
    def adopted(self) -> bool:
        return self.tried is not None and (self.confirmation or {}).get("verdict") == "FASTER"

    @property
    def best(self) -> Card | None:
        """The adopted variant's card; None when the baseline is kept."""
        return self.tried if self.adopted else None

    @property
    def kept(self) -> Card:
        """What best.json holds for this card: the adopted variant, else the baseline."""
        return self.tried if self.adopted and self.tried is not None else self.baseline


@dataclass
class RunContext:
    cfg: Mapping[str, Any]
    run_dir: Path
    experiment: Experiment
    rules: RuleSet
    device: str
    profiler: Profiler
    environment: dict[str, Any]
    settings: TimingSettings
    storage: str
    report: Report  # the input report, normalized and classified: the cards' time shares, cast frames
    phases: dict[str, float] = field(default_factory=lambda: {"measurement_s": 0.0, "profiling_s": 0.0,
                                                                  "setup_s": 0.0})
    diff: ReportDiff | None = None  # the latest before/after diff written
    # Variants of the space left out of the search because this device cannot run them, with why.
    not_drawn: dict[str, str] = field(default_factory=dict)


def run_card(ctx: RunContext, card: Card, report_path: str | None) -> CardOutcome:
    """Measure the card's baseline, search its variants and confirm the best, all in the worker process.

    A trial that raises, runs out of memory, crashes the worker or passes `search.trial_deadline_s`
    is recorded as FAIL with its reason and the search goes on (see harness.worker). A baseline that
    cannot be measured is a RunError for the run (one line): without it nothing can be compared; the
    cards finished before it keep their outputs. A failed confirm step keeps the search's timings.
    """
    cfg, experiment = ctx.cfg, ctx.experiment
    workload_cfg = cfg["workload"]
    scale = workload_cfg.get("scale") or (1.0 if ctx.device.startswith("cuda") else workload_cfg["cpu_scale"])
    cast_cfg = {k: v for k, v in dict(workload_cfg.get("cast") or {}).items()}
    if card.op_kind == "cast" and cast_cfg.get("frames") is None:
        # The report lost the cast's shape; its pair of cast cards per resolution tells 9 from 12 frames.
        frames = cast_frames_from_report(ctx.report.card(card.id), ctx.report)
        if frames is not None:
            cast_cfg["frames"] = frames
    trials_dir = ctx.run_dir / "trials" / card.id
    try:
        applied = applied_of(card.extra)  # variants earlier rounds adopted: the baseline builds on them
    except RoundError as exc:
        raise RunError(f"card {card.id}: {exc}") from None
    label = {"experiment": experiment.name, "variant": experiment.baseline_name, "params": {},
             "role": "baseline", "report": report_path or "(shipped)", "run": str(ctx.run_dir.resolve()),
             "hypothesis": experiment.hypothesis, "check": experiment.check}
    if applied:  # round 2 and later: the baseline is the last variant adopted, as it was adopted
        last = applied[-1]
        label.update(experiment=last["experiment"], variant=last["variant"], params=dict(last.get("params") or {}),
                     builds_on=[label_text(a) for a in applied])
    correctness = dict(cfg["experiment"]["correctness"])  # harness.correctness.Rule: judged in the worker
    spec = {
        "report": report_path, "card_id": card.id, "experiment_module": cfg["experiment"]["module"],
        "device": ctx.device, "scale": scale, "seed": int(workload_cfg.get("seed", 0)),
        "inputs_dir": (cfg.get("inputs") or {}).get("dir"), "attention": dict(workload_cfg.get("attention") or {}),
        "cast": cast_cfg, "warmup": ctx.settings.warmup, "applied": applied,
    }
    profiler_cfg = dict(cfg.get("profiler") or {})
    if experiment.metric_set:
        profiler_cfg["metric_set"] = experiment.metric_set
    profiler_cfg["name"] = ctx.profiler.name  # resolved: the worker makes the same backend
    try:
        deadline = deadline_from(cfg)
    except ValueError as exc:
        raise RunError(str(exc)) from None
    worker = worker_for(ctx)
    session = CardSession(worker, {
        "card": card.to_dict(), "spec": spec, "correctness": correctness, "settings": dict(vars(ctx.settings)),
        "rules": cfg.get("rules"), "profiler": profiler_cfg, "environment": ctx.environment,
        "reference_path": str(trials_dir / "reference.pt"),
    }, deadline)
    quiet_trial_failures()
    seen = [len(worker.startups)]  # starts before this card (a worker may serve several runs)
    ctx.phases.setdefault("worker_startup_s", 0.0)
    ctx.phases.setdefault("worker_starts", 0)

    def account(reply: Reply) -> Reply:
        seconds = reply.result.get("seconds") or {}
        ctx.phases["measurement_s"] += seconds.get("timing_s", 0.0)
        ctx.phases["profiling_s"] += seconds.get("profile_s", 0.0)
        ctx.phases["setup_s"] += seconds.get("setup_s", 0.0) + seconds.get("build_s", 0.0)
        started = worker.startups[seen[0]:]
        seen[0] = len(worker.startups)
        ctx.phases["worker_startup_s"] += sum(started)  # paid once per run, and again per restart
        ctx.phases["worker_starts"] += len(started)
        return reply

    try:
        reply = account(session.measure(
            role="baseline", variant=experiment.baseline_name, params={}, label=label,
            card_path=trials_dir / "baseline.json",
            extra={"report_card": {"primary": card.primary, "summed_kernel_us": card.summed_kernel_us,
                                   "dominant_kernel": card.dominant_kernel}, "baseline_drift": []}))
    except WorkerError as exc:
        raise RunError(f"card {card.id}: {exc}") from None
    if not reply.ok:
        if reply.kind == "setup":
            raise RunError(f"card {card.id}: cannot build its workload ({reply.reason})")
        raise RunError(f"card {card.id}: the baseline {label['variant']} failed: {reply.reason}")
    base_card = load_report(reply.result["card_path"]).cards[0]
    base_card.extra[APPLIED_KEY] = applied  # kept as it is when this run adopts nothing
    drift: list[dict[str, Any]] = base_card.extra.setdefault("baseline_drift", [])

    space, _ = drawable(cfg["experiment"].get("space") or {}, ctx.not_drawn)
    outcome = CardOutcome(card.id, card, base_card)
    if not space:
        return outcome  # a baseline-only experiment, or no variant of its space can run here: nothing to search
    plan = plan_search(space, cfg["search"])
    study_name = f"{experiment.name}:{card.id}"
    study = open_study(study_name, ctx.storage, plan.sampler, bool(cfg["search"].get("resume", False)))
    drift_settings = TimingSettings(warmup=1, min_repeats=3, budget_s=float(cfg["timing"]["drift_budget_s"]),
                                    cuda_graph=ctx.settings.cuda_graph)
    no_worker: list[str] = []  # why no worker process could be started again, if that happened

    def objective(trial: optuna.Trial) -> float:
        variant, params = suggest(trial, space)
        trial.set_user_attr("variant", variant)
        trial_label = {**label, "experiment": experiment.name, "variant": variant, "params": params, "role": "trial",
                       "trial": trial.number}
        path = trials_dir / f"trial_{trial.number:04d}_{variant}.json"
        try:
            reply = account(session.measure(role="trial", variant=variant,
                                            params=params,
                                            label=trial_label, card_path=path))
        except WorkerError as exc:  # not this trial's fault, and no later trial can run either
            no_worker.append(str(exc))
            trial.set_user_attr("status", "failed")
            trial.set_user_attr("reason", str(exc))
            trial.study.stop()
            raise TrialFailed(str(exc)) from None
        if reply.result.get("card_path"):  # written by the worker before it answered
            trial.set_user_attr("card", reply.result["card_path"])
        if reply.kind == "skipped":
            trial.set_user_attr("status", "skipped")
            trial.set_user_attr("reason", reply.reason)
            raise optuna.TrialPruned(reply.reason)
        if not reply.ok:
            trial.set_user_attr("status", "failed")
            trial.set_user_attr("reason", reply.reason)
            log.warning("card %s trial %d %s%s failed: %s", card.id, trial.number, variant,
                        f" {params}" if params else "", reply.reason)
            raise TrialFailed(reply.reason)
        result = reply.result
        trial.set_user_attr("correctness", result["correctness"])
        if not result["correctness"]["feasible"]:
            trial.set_user_attr("status", "infeasible")
            judged = result["correctness"]
            raise optuna.TrialPruned(f"max_rel {judged['max_rel']:.3g} > bound {judged['bound']:.3g}")
        trial.set_user_attr("status", "complete")
        try:
            again = session.retime(drift_settings)
        except WorkerError as exc:
            again = Reply(False, "crash", {}, str(exc))
        if again.ok:
            drift.append({"after_trial": trial.number, "median_us": again.result["median_us"]})
        else:  # the trial itself was measured; only its drift check is lost
            trial.set_user_attr("drift_error", again.reason)
            log.warning("card %s: baseline re-timing after trial %d failed: %s", card.id, trial.number, again.reason)
        return result["median_us"] / result["calls"]

    todo = remaining_trials(study, plan.n_trials)
    if todo:
        with progress(todo, f"{card.id} [{plan.sampler_name}]") as bar:
            study.optimize(objective, n_trials=todo, timeout=cfg["search"].get("timeout"),
                           catch=(Exception,), callbacks=[lambda s, t: bar.update(1)])
        if no_worker:
            raise RunError(f"card {card.id}: {no_worker[0]}")
    save_report(Report(cards=[base_card]), trials_dir / "baseline.json")
    counted = budget_trials(study.get_trials(deepcopy=False))  # surplus and since-retried trials left out
    for trial in counted:
        variant = trial.user_attrs.get("variant", "?")
        params = {k.split(".", 1)[-1]: v for k, v in trial.params.items() if k != "variant"}
        key = f"{variant}({', '.join(f'{k}={v}' for k, v in params.items())})" if params else variant
        status = trial.user_attrs.get("status")
        if status == "skipped":
            outcome.skipped[key] = trial.user_attrs.get("reason", "")
        elif status == "infeasible":
            c = trial.user_attrs.get("correctness", {})
            why = f" ({c['note']})" if c.get("note") else ""
            outcome.infeasible[key] = (f"max_rel {c.get('max_rel', float('nan')):.3g} > bound "
                                       f"{c.get('bound', float('nan')):.3g}{why}")
        elif trial.state == optuna.trial.TrialState.FAIL:
            stopped = trial.system_attrs.get("harness:interrupted")  # the process was stopped mid-trial
            reason = trial.user_attrs.get("reason") or (f"interrupted ({stopped})" if stopped else None)
            outcome.failed[key] = str(reason or "failed (no reason recorded)")[:200]
    outcome.n_trials = len(counted)
    best = best_feasible(study)
    if best is not None:
        outcome.tried = load_report(best.user_attrs["card"]).cards[0]
        outcome.tried_variant = best.user_attrs.get("variant")
        outcome.tried_params = {k.split(".", 1)[-1]: v for k, v in best.params.items() if k != "variant"}
        reply, outcome.confirmation = confirm(ctx, session, base_card, outcome.tried, outcome.tried_variant,
                                              outcome.tried_params)
        account(reply)
        if outcome.adopted:  # what the next round's baseline is built from (harness.rounds)
            built_in = applied[0].get("workload_dtype") if applied else experiment.workload_dtype
            outcome.tried.extra[APPLIED_KEY] = [*applied, applied_entry(
                experiment=experiment.name, module=cfg["experiment"]["module"], variant=outcome.tried_variant,
                params=outcome.tried_params, facts=outcome.tried.extra.get("variant") or {},
                workload_dtype=built_in, confirmation=outcome.confirmation, run=label["run"])]
        save_report(Report(cards=[base_card]), trials_dir / "baseline.json")
        save_report(Report(cards=[outcome.tried]), trials_dir / "tried.json")
        save_report(Report(cards=[outcome.kept]), trials_dir / "best.json")
    return outcome


@contextmanager
def progress(total: int, what: str) -> Iterator[Any]:
    """A tqdm bar on a terminal; in a redirected log, one plain line per trial instead of `\\r` redraws."""
    if sys.stderr.isatty():
        with tqdm(total=total, desc=what, unit="trial", leave=False) as bar:
            yield bar
        return

    class Lines:
        done = 0

        def update(self, n: int) -> None:
            self.done += n
            log.info("%s: trial %d of %d done", what, self.done, total)

    yield Lines()


def same_band(ctx: RunContext) -> float:
    """The SAME band of this run's device class (timing.same_band.cpu or .cuda)."""
    bands = ctx.cfg["timing"]["same_band"]
    return float(bands["cuda" if ctx.device.startswith("cuda") else "cpu"])


def confirm(ctx: RunContext, session: CardSession, base_card: Card, tried: Card, variant: str,
            params: dict[str, Any]) -> tuple[Reply, dict[str, Any]]:
    """Re-time baseline and the tried variant in paired ABBA rounds (in the worker); judge the pair.

    The search timed each trial once, minutes apart from the baseline; the verdict is taken from
    these interleaved rounds instead (harness.cards.noise.paired_verdict), per original call. The
    search's own timings are kept under `search_timing`. Without rounds (timing.confirm_rounds=0, or
    they failed) the verdict is UNCONFIRMED and nothing is adopted; the cards say why.
    """
    rounds = int(ctx.cfg["timing"].get("confirm_rounds", 0))
    band = same_band(ctx)
    if rounds < 2:
        why = ("timing.confirm_rounds=0: no paired rounds" if rounds < 1
               else "timing.confirm_rounds=1: an interval needs at least 2 paired rounds")
        return Reply(True, "ok"), _unconfirmed(tried, why, band)
    budget = float(ctx.cfg["timing"]["budget_s"]) / 4
    try:
        reply = session.confirm(variant, params, rounds, budget, ctx.settings.cuda_graph)
    except WorkerError as exc:
        reply = Reply(False, "crash", {}, str(exc))
    if not reply.ok:
        for card in (base_card, tried):
            card.extra["confirm_error"] = reply.reason
        log.warning("card %s: the confirm rounds failed (%s); nothing is adopted", base_card.id, reply.reason)
        return reply, _unconfirmed(tried, f"the confirm rounds failed: {reply.reason}", band)
    calls = calls_per_invocation(tried)
    for key, card in (("base", base_card), ("best", tried)):
        card.extra["search_timing"] = card.extra.get("timing")
        card.extra["timing"] = {k: v for k, v in reply.result[key].items() if k != "warm_up"}
        card.extra["warm_up"] = reply.result[key].get("warm_up")
        restate_rates(card)
    before = list(reply.result["base"]["round_medians_us"])
    after = [t / calls for t in reply.result["best"]["round_medians_us"]]
    verdict = paired_verdict(before, after, band)
    confirmation = {**verdict.as_dict(), "rule": verdict.describe(), "before_rounds_us": before,
                    "after_rounds_us": after, "order": "ABBA"}
    tried.extra["confirmation"] = confirmation
    return reply, confirmation


def restate_rates(card: Card) -> None:
    """The variant facts derived from a time (per-call time, achieved TFLOP/s), from the card's timing
    now that the confirm rounds replaced the search's: one time per card, whatever shows it."""
    facts, timing = card.extra.get("variant"), card.extra.get("timing")
    if not isinstance(facts, dict) or not isinstance(timing, dict) or not timing.get("median_us"):
        return
    per_call = float(timing["median_us"]) / int(facts.get("calls") or 1)
    facts["per_call_us"] = per_call
    if facts.get("nominal_flops_per_call"):
        facts["achieved_tflops"] = facts["nominal_flops_per_call"] / per_call / 1e6


def _unconfirmed(tried: Card, why: str, band: float) -> dict[str, Any]:
    confirmation = {"verdict": "UNCONFIRMED", "speedup": None, "ci": None, "band": band, "rounds": 0,
                    "rule": f"UNCONFIRMED: {why}; nothing is adopted"}
    tried.extra["confirmation"] = confirmation
    return confirmation


def _report(cards: list[Card], rules: RuleSet, scope: str) -> Report:
    summary, by_stage = class_counts(cards)
    return Report(cards=cards, generated_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"), rules=rules_text(rules),
                  summary=summary, by_stage=by_stage, scope=scope)


def _baseline_only(experiment: Experiment) -> bool:
    return len(experiment.variants) == 1


def write_outputs(ctx: RunContext, outcomes: list[CardOutcome]) -> ReportDiff:
    scope = (f"harness {ctx.experiment.name} on {ctx.environment.get('device_name')}; metrics from "
             f"{ctx.profiler.name}; workload scale recorded per card")
    save_report(_report([o.baseline for o in outcomes], ctx.rules, scope), ctx.run_dir / "baseline.json")
    # best.json: what to take home, card by card (an adopted variant, else the baseline kept);
    # tried.json: the best variant each search found, adopted or not, for the diff and the page.
    save_report(_report([o.kept for o in outcomes], ctx.rules, scope), ctx.run_dir / "best.json")
    save_report(_report([o.tried for o in outcomes if o.tried is not None], ctx.rules, scope),
                ctx.run_dir / "tried.json")
    write_text_atomic(ctx.run_dir / "recipe.md", render_recipe([o.kept for o in outcomes], ctx.run_dir))
    band = same_band(ctx)
    if _baseline_only(ctx.experiment):
        # Nothing to search: the experiment's check is judged on the report's card vs its re-profile.
        diffs = [diff_cards(o.report_card, o.baseline, check=ctx.experiment.check,
                            hypothesis=ctx.experiment.hypothesis, threshold=band) for o in outcomes]
        title = f"{ctx.experiment.name}: the report's card vs its re-profile here"
        diff = ReportDiff(cards=diffs, only_before=[], only_after=[])
    else:
        diffs = [diff_cards(o.baseline, o.tried, check=ctx.experiment.check, hypothesis=ctx.experiment.hypothesis,
                            threshold=band, confirmation=o.confirmation, adopted=o.adopted)
                 for o in outcomes if o.tried is not None]
        attach_op_breakdowns(diffs, outcomes, ctx.cfg["experiment"].get("predict_from"))
        title = f"{ctx.experiment.name}: baseline vs the best variant tried"
        diff = ReportDiff(cards=diffs, only_before=[o.card_id for o in outcomes if o.tried is None], only_after=[])
    ctx.diff = diff
    write_json_atomic(ctx.run_dir / "diff.json", diff.as_dict())
    reproduction = ReportDiff(
        cards=[diff_cards(o.report_card, o.baseline, check="effective_flops", threshold=band,
                          hypothesis="the re-profiled baseline reproduces the report's card")
               for o in outcomes],
        only_before=[], only_after=[],
    )
    write_text_atomic(ctx.run_dir / "baseline_reproduction.md",
                render_markdown(reproduction, "Baseline reproduction: the report's card vs the baseline "
                                "re-profiled here (at the recorded workload scale)"))
    write_text_atomic(ctx.run_dir / "diff.md", render_markdown(diff, title))
    write_text_atomic(ctx.run_dir / "summary.md", render_summary(ctx, outcomes, diffs))
    return diff


def write_page(run_dir: Path) -> None:
    """report.html from the files of the run so far."""
    try:
        write_run_html(run_dir)
    except Exception as exc:  # the page is a view of files already written: it must not fail the run
        log.warning("report.html not written: %s: %s", type(exc).__name__, exc)


def card_results(experiment: Experiment, outcomes: list[CardOutcome], diffs: list[CardDiff]) -> list[CardResult]:
    """The run's findings per report card, for the end-to-end view (baseline-only runs find no speedup)."""
    by_card = {d.card: d for d in diffs}
    return [
        CardResult(card=o.report_card, experiment=experiment.name,
                   variant="baseline only" if _baseline_only(experiment) else _variant_label(o),
                   diff=None if _baseline_only(experiment) else by_card.get(o.card_id),
                   measured=o.baseline)
        for o in outcomes
    ]


def _variant_label(o: CardOutcome) -> str | None:
    if o.tried_variant is None:
        return None
    params = ", ".join(f"{k}={v}" for k, v in o.tried_params.items())
    return f"{o.tried_variant}({params})" if params else o.tried_variant


# Card extras every measurement writes; anything else was added by the experiment's annotate hook.
_MEASURED_EXTRAS = {"id", "ncu_output", "scheduler_note", "harness", "timing", "search_timing", "correctness",
                    "memory", "workload", "environment", "metrics_source", "profiler", "peaks",
                    "profiler_settings", "profiler_notes", "report_card", "baseline_drift", "variant",
                    "confirmation", "warm_up", "confirm_error", "torch_state", "applied", "contains", "chunk"}
# Variant facts shown elsewhere: the time (the table's, from the confirm rounds), the recipe (recipe.md).
_FACTS_SHOWN_ELSEWHERE = {"nominal_flops_per_call", "per_call_us", "recipe", "carries"}


def _facts_text(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}={_facts_text(v)}" for k, v in value.items() if v is not None)
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _evidence_lines(label: str, card: Card) -> list[str]:
    variant = {k: v for k, v in (card.extra.get("variant") or {}).items() if k not in _FACTS_SHOWN_ELSEWHERE}
    lines = [f"- {label} variant facts: {_facts_text(variant)}"] if variant else []
    for key, value in card.extra.items():
        if key not in _MEASURED_EXTRAS:
            lines.append(f"- {label} {key}: {_facts_text(value)}")
    return lines


def render_summary(ctx: RunContext, outcomes: list[CardOutcome], diffs: list[CardDiff]) -> str:
    by_card = {d.card: d for d in diffs}
    baseline_only = _baseline_only(ctx.experiment)
    lines = [f"# {ctx.experiment.name}", "", f"Hypothesis: {ctx.experiment.hypothesis}", "",
             f"Device: {ctx.environment.get('device_name')} ({ctx.device}); profiler: {ctx.profiler.name}", "",
             f"Baseline us and variant us: {TIMING_BASIS} of the op (a batched variant's median is divided by "
             "its calls), from the paired confirm rounds when there were any. The profiler's kernel-duration sums "
             "are another quantity: diff.md and report.html give them, labelled per invocation. A variant is "
             "adopted (best.json) only when it is feasible and FASTER.", "", VERDICT_RULE_TEXT, "",
             "| card | baseline us | variant us | speedup [95% CI] | time verdict (what decided it) | "
             "class before -> after | max rel error | outcome | experiment's check | card's own check |",
             "|---|---:|---:|---:|---|---|---:|---|---|---|"]
    for o in outcomes:
        base_t = card_time_us(o.baseline)
        d = by_card.get(o.card_id)
        if o.tried is None or d is None:
            why = ("baseline only" if baseline_only
                   else "no variant of the space can run on this device (not drawn): baseline kept"
                   if ctx.not_drawn and not o.n_trials else "no feasible variant: baseline kept")
            check = f"{d.verdict}: {d.verdict_detail}" if baseline_only and d else "n/a"
            own = f"{d.card_verdict}: {d.card_verdict_detail}" if baseline_only and d else "n/a"
            lines.append(f"| `{o.card_id}` | {_fmt_us(base_t)} | n/a | n/a | n/a | "
                         f"{transition(o.report_card, o.baseline)} | n/a | {why} | {check} | {own} |")
            continue
        err = (o.tried.extra.get("correctness") or {}).get("max_rel")
        lines.append(
            f"| `{o.card_id}` | {_fmt_us(d.before_us)} | {_fmt_us(d.after_us)} | {speedup_text(d)} | "
            f"{verdict_text(d.timing_verdict, d.verdict_numbers)} | {d.class_transition} | "
            f"{'n/a' if err is None else f'{err:.2e}'} | {adoption_text(d)} | {d.verdict} | {d.card_verdict} |"
        )
    lines.append("")
    for d in diffs:
        if d.verdict_rule:
            lines.append(f"- `{d.card}` time verdict: {d.verdict_rule}")
        lines.append(f"- `{d.card}` the card's own check \"{d.card_check or 'none'}\": {d.card_verdict}: "
                     f"{d.card_verdict_detail}")
        lines += [f"- `{d.card}` note: {note}" for note in d.notes]
    for o in outcomes:
        lines += [f"- `{o.card_id}` {line[2:]}" for line in _evidence_lines("baseline", o.baseline)]
        if o.tried is not None:
            lines += [f"- `{o.card_id}` {line[2:]}" for line in _evidence_lines("variant", o.tried)]
        for title, entries in (("skipped", o.skipped), ("infeasible (over its bound against the float64 reference, never best)", o.infeasible),
                               ("failed", o.failed)):
            for key, why in entries.items():
                lines.append(f"- `{o.card_id}` {key}: {title}: {why}")
        drift = o.baseline.extra.get("baseline_drift") or []
        if drift:
            values = [d["median_us"] for d in drift]
            lines.append(f"- `{o.card_id}` baseline re-timed {len(values)}x between trials (drift check): "
                         f"{min(values):.1f} to {max(values):.1f} us per call")
    # Left out of every card's search before any trial (Experiment.variant's needs), unlike a skip.
    lines += [f"- not drawn: {variant} ({why})" for variant, why in ctx.not_drawn.items()]
    metrics_source = {o.baseline.extra.get("metrics_source") for o in outcomes}
    lines += ["", f"Metrics source: {', '.join(sorted(str(s) for s in metrics_source))} "
              "(estimated metrics are roofline estimates, not counters).", ""]
    scales = sorted({str((o.baseline.extra.get("workload") or {}).get("scale")) for o in outcomes})
    lines.append(render_end_to_end(
        ctx.report, card_results(ctx.experiment, outcomes, diffs),
        measured_on=f"{ctx.environment.get('device_name')} ({ctx.device}) at workload scale {', '.join(scales)}",
        report_device=str(ctx.cfg.get("report_device") or "H200")))
    return "\n".join(lines) + "\n"


def _fmt_us(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


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
        environment=describe_environment(device, cfg), storage=storage, report=normalized,
        settings=TimingSettings(warmup=None if timing["warmup"] is None else int(timing["warmup"]), min_repeats=int(timing["min_repeats"]),
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
