"""One harness run: for each selected card, re-profile the baseline, search the variants, diff.

Everything measured is written as soon as it exists (atomic writes): the baseline card and every
trial card under `trials/<card>/`, the Optuna study in its storage. The run-level files (baseline.json,
best.json, diff.md/json, summary.md) are rewritten after each card, so an interrupted run keeps
what it finished.
"""

from __future__ import annotations

import functools
import inspect
import logging
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import optuna
from tqdm import tqdm

from harness.cards.diff import CardDiff, ReportDiff, card_time_us, diff_cards, render_markdown
from harness.cards.lint import lint_report
from harness.cards.model import Card, Report, load_report, save_report, write_json_atomic
from harness.cards.rules import RuleSet, class_counts, classify_report, rules_text
from harness.environment import describe_environment, resolve_device
from harness.experiment import Experiment, VariantSkipped, load_experiment
from harness.measure import Measurement, TimingSettings, measure, time_callable
from harness.overview import CardResult, render_end_to_end
from harness.profile.base import Profiler, ProfilerUnavailable
from harness.search import (
    best_feasible,
    open_study,
    plan_search,
    remaining_trials,
    suggest,
    validate_space,
)
from harness.workloads.attention import AttentionConfig
from harness.workloads.base import WorkloadError
from harness.workloads.cast import CastConfig
from harness.workloads.registry import build_workload

log = logging.getLogger("harness")


class RunError(ValueError):
    """Bad configuration or input found before measuring; one line, with the fix."""


def pick_cards(report: Report, selector: Any) -> list[Card]:
    """Cards by id (a string or a list of ids) or by a filter {stage, op, op_kind, resolution}."""
    if isinstance(selector, str):
        selector = [selector]
    if isinstance(selector, (list, tuple)):
        try:
            return [report.card(str(card_id)) for card_id in selector]
        except Exception as exc:
            raise RunError(str(exc)) from None
    if isinstance(selector, Mapping):
        allowed = {"stage", "op", "op_kind", "resolution"}
        unknown = set(selector) - allowed
        if unknown:
            raise RunError(f"cards filter: unknown key(s) {sorted(unknown)}; use {sorted(allowed)} or a list of ids")
        return [c for c in report.cards if all(str(getattr(c, key)) == str(value) for key, value in selector.items())]
    raise RunError(f"cards={selector!r}: give a list of card ids or a filter like {{stage: vae}}")


def select_cards(report: Report, selector: Any, experiment: Experiment, defaults: list[str] | None) -> list[Card]:
    """`pick_cards`, or the experiment's defaults; every card must be of an op kind the experiment takes."""
    if selector is None:
        selector = list(defaults) if defaults else {}
    cards = pick_cards(report, selector)
    by_id = isinstance(selector, (list, tuple, str))
    wrong = [c.id for c in cards if not experiment.applies_to(c.op_kind)]
    if wrong and by_id:
        raise RunError(
            f"experiment {experiment.name} applies to {', '.join(experiment.op_kinds)} cards; "
            f"not to {', '.join(wrong[:3])}"
        )
    cards = [c for c in cards if experiment.applies_to(c.op_kind)]
    if not cards:
        raise RunError(f"cards={selector!r} selects no card this experiment applies to; "
                       "list them with `python -m harness.cards show`")
    return cards


def make_profiler(cfg: Mapping[str, Any], device: str) -> tuple[Profiler, list[str]]:
    name = cfg.get("name", "auto")
    notes: list[str] = []
    if name == "auto":
        if not device.startswith("cuda"):
            name = "cpu"
        else:
            from harness.profile.ncu_backend import ncu_usable

            usable, why = ncu_usable(cfg)
            name = "ncu" if usable else "torch_cuda"
            if not usable:
                message = f"ncu unusable ({why}); falling back to the torch.profiler CUDA trace: metrics are estimated"
                warnings.warn(message, stacklevel=2)
                notes.append(message)
    if name == "cpu":
        from harness.profile.cpu import CpuProfiler

        return CpuProfiler(), notes
    if name == "torch_cuda":
        from harness.profile.torch_cuda import TorchCudaProfiler

        return TorchCudaProfiler(), notes
    if name == "ncu":
        from harness.profile.ncu_backend import NcuProfiler

        return NcuProfiler(cfg), notes
    raise RunError(f"profiler={name!r}: choose auto, cpu, torch_cuda or ncu")


@dataclass
class CardOutcome:
    card_id: str
    report_card: Card
    baseline: Card
    best: Card | None
    best_variant: str | None
    best_params: dict[str, Any]
    skipped: dict[str, str] = field(default_factory=dict)
    infeasible: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    n_trials: int = 0


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
    phases: dict[str, float] = field(default_factory=lambda: {"measurement_s": 0.0, "profiling_s": 0.0,
                                                                  "setup_s": 0.0})
    diff: ReportDiff | None = None  # the latest before/after diff written

    def account(self, m: Measurement) -> None:
        self.phases["measurement_s"] += m.seconds.get("timing_s", 0.0)
        self.phases["profiling_s"] += m.seconds.get("profile_s", 0.0)
        self.phases["setup_s"] += m.seconds.get("setup_s", 0.0)


def _accepted(fn: Any, params: dict[str, Any]) -> dict[str, Any]:
    names = set(inspect.signature(fn).parameters)
    return {k: v for k, v in params.items() if k in names}


def run_card(ctx: RunContext, card: Card, report_path: str | None) -> CardOutcome:
    cfg, experiment = ctx.cfg, ctx.experiment
    workload_cfg = cfg["workload"]
    scale = workload_cfg.get("scale") or (1.0 if ctx.device.startswith("cuda") else workload_cfg["cpu_scale"])
    cast_cfg = {k: v for k, v in dict(workload_cfg.get("cast") or {}).items()}
    try:
        workload = build_workload(
            card.op_kind, card.shape_parameters, device=ctx.device, dtype=experiment.workload_dtype,
            scale=scale, seed=int(workload_cfg.get("seed", 0)), inputs_dir=(cfg.get("inputs") or {}).get("dir"),
            input_sha256=card.input_sha256, attention=AttentionConfig(**dict(workload_cfg.get("attention") or {})),
            cast=CastConfig(**cast_cfg), resolution=card.resolution,
        )
    except (WorkloadError, TypeError) as exc:
        raise RunError(f"card {card.id}: cannot build its workload ({exc})") from None
    trials_dir = ctx.run_dir / "trials" / card.id
    label = {"experiment": experiment.name, "variant": experiment.baseline_name, "params": {},
             "role": "baseline", "report": report_path or "(shipped)"}
    baseline = experiment.prepare(experiment.baseline_name, workload, {})
    baseline_fn = baseline.fn
    tolerance = float(cfg["experiment"]["tolerance"]["max_rel"])
    exact = workload.reference() if experiment.reference == "exact" else None
    spec = {
        "report": report_path, "card_id": card.id, "experiment_module": cfg["experiment"]["module"],
        "device": ctx.device, "scale": scale, "seed": int(workload_cfg.get("seed", 0)),
        "inputs_dir": (cfg.get("inputs") or {}).get("dir"), "attention": dict(workload_cfg.get("attention") or {}),
        "cast": cast_cfg, "warmup": ctx.settings.warmup,
    }
    base = measure(source_card=card, workload=workload, prepared=baseline, reference=exact, tolerance=tolerance,
                   profiler=ctx.profiler, settings=ctx.settings, rules=ctx.rules, label=label,
                   environment=ctx.environment, spec={**spec, "variant": experiment.baseline_name, "params": {}})
    ctx.account(base)
    annotate(experiment, base.card, workload)
    reference = base.output if exact is None else exact
    base.card.extra["report_card"] = {"primary": card.primary, "summed_kernel_us": card.summed_kernel_us,
                                      "dominant_kernel": card.dominant_kernel}
    drift: list[dict[str, Any]] = []
    base.card.extra["baseline_drift"] = drift
    save_report(Report(cards=[base.card]), trials_dir / "baseline.json")

    space = dict(cfg["experiment"].get("space") or {})
    outcome = CardOutcome(card.id, card, base.card, None, None, {})
    if not space and len(experiment.variants) == 1:
        return outcome  # a baseline-only experiment: nothing to search
    validate_space(space, list(experiment.variants), experiment.name)
    plan = plan_search(space, cfg["search"])
    study_name = f"{experiment.name}:{card.id}"
    study = open_study(study_name, ctx.storage, plan.sampler, bool(cfg["search"].get("resume", False)))

    def objective(trial: optuna.Trial) -> float:
        variant, params = suggest(trial, space)
        trial.set_user_attr("variant", variant)
        trial_label = {**label, "variant": variant, "params": params, "role": "trial", "trial": trial.number}
        try:
            prepared = experiment.prepare(variant, workload, _accepted(experiment.variants[variant], params))
        except VariantSkipped as exc:
            trial.set_user_attr("status", "skipped")
            trial.set_user_attr("reason", str(exc))
            raise optuna.TrialPruned(str(exc)) from None
        accepted = _accepted(experiment.variants[variant], params)
        m = measure(source_card=card, workload=workload, prepared=prepared, reference=reference,
                    tolerance=tolerance, profiler=ctx.profiler, settings=ctx.settings, rules=ctx.rules,
                    label=trial_label, environment=ctx.environment,
                    spec={**spec, "variant": variant, "params": accepted})
        ctx.account(m)
        annotate(experiment, m.card, workload)
        path = trials_dir / f"trial_{trial.number:04d}_{variant}.json"
        save_report(Report(cards=[m.card]), path)
        trial.set_user_attr("card", str(path))
        trial.set_user_attr("correctness", m.correctness.as_dict())
        if not m.correctness.feasible:
            trial.set_user_attr("status", "infeasible")
            raise optuna.TrialPruned(f"max_rel {m.correctness.max_rel:.3g} > tolerance {tolerance:g}")
        trial.set_user_attr("status", "complete")
        again = time_callable(baseline_fn, ctx.device, TimingSettings(
            warmup=1, min_repeats=3, budget_s=float(cfg["timing"]["drift_budget_s"])))
        drift.append({"after_trial": trial.number, "median_us": again.median_us})
        assert m.timing is not None
        return m.timing.median_us / prepared.calls

    todo = remaining_trials(study, plan.n_trials)
    if todo:
        with tqdm(total=todo, desc=f"{card.id} [{plan.sampler_name}]", unit="trial", leave=False) as bar:
            study.optimize(objective, n_trials=todo, timeout=cfg["search"].get("timeout"),
                           catch=(Exception,), callbacks=[lambda s, t: bar.update(1)])
    save_report(Report(cards=[base.card]), trials_dir / "baseline.json")
    for trial in study.get_trials(deepcopy=False):
        variant = trial.user_attrs.get("variant", "?")
        key = f"{variant} {trial.params}" if trial.params else variant
        status = trial.user_attrs.get("status")
        if status == "skipped":
            outcome.skipped[key] = trial.user_attrs.get("reason", "")
        elif status == "infeasible":
            c = trial.user_attrs.get("correctness", {})
            outcome.infeasible[key] = f"max_rel {c.get('max_rel', float('nan')):.3g} > {c.get('tolerance')}"
        elif trial.state == optuna.trial.TrialState.FAIL:
            outcome.failed[key] = str(trial.system_attrs.get("fail_reason", "failed"))[:200]
    outcome.n_trials = len(study.trials)
    best = best_feasible(study)
    if best is not None:
        best_card = load_report(best.user_attrs["card"]).cards[0]
        outcome.best, outcome.best_variant = best_card, best.user_attrs.get("variant")
        outcome.best_params = {k.split(".", 1)[-1]: v for k, v in best.params.items() if k != "variant"}
        best_fn = experiment.prepare(outcome.best_variant, workload,
                                     _accepted(experiment.variants[outcome.best_variant], outcome.best_params)).fn
        confirm(ctx, base.card, baseline_fn, best_card, best_fn)
        save_report(Report(cards=[base.card]), trials_dir / "baseline.json")
        save_report(Report(cards=[best_card]), trials_dir / "best.json")
    return outcome


def annotate(experiment: Experiment, card: Card, workload: Any) -> None:
    """The experiment's own evidence on a measured card; an infeasible card (never timed) gets none."""
    if experiment.annotate_fn is not None and card.extra.get("timing") is not None:
        experiment.annotate_fn(card, workload)


def confirm(ctx: RunContext, base_card: Card, base_fn: Any, best_card: Card, best_fn: Any) -> None:
    """Re-time baseline and best in alternating rounds, so that drift hits both alike.

    The search timed each trial once, minutes apart from the baseline; the before/after ratio is
    taken from these interleaved samples instead. The search's own timings are kept.
    """
    rounds = int(ctx.cfg["timing"].get("confirm_rounds", 3))
    if rounds < 1:
        return
    budget = float(ctx.cfg["timing"]["budget_s"]) / 2
    samples: dict[str, list[float]] = {"base": [], "best": []}
    last: dict[str, Any] = {}
    t0 = time.perf_counter()
    for _ in range(rounds):
        for key, fn in (("base", base_fn), ("best", best_fn)):
            result = time_callable(fn, ctx.device, TimingSettings(warmup=1, min_repeats=3, budget_s=budget))
            samples[key].extend(result.samples_us)
            last[key] = result
    ctx.phases["measurement_s"] += time.perf_counter() - t0
    for key, card in (("base", base_card), ("best", best_card)):
        pooled = type(last[key]).from_samples(
            samples[key], warmup=1, method=f"{last[key].method}, {rounds} interleaved rounds with the other side",
            device_name=last[key].device_name, clock_mhz=last[key].clock_mhz)
        card.extra["search_timing"] = card.extra.get("timing")
        card.extra["timing"] = pooled.to_dict()


def _report(cards: list[Card], rules: RuleSet, scope: str) -> Report:
    summary, by_stage = class_counts(cards)
    return Report(cards=cards, generated_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"), rules=rules_text(rules),
                  summary=summary, by_stage=by_stage, scope=scope)


def _baseline_only(experiment: Experiment) -> bool:
    return len(experiment.variants) == 1


def write_outputs(ctx: RunContext, outcomes: list[CardOutcome]) -> ReportDiff:
    scope = (f"harness {ctx.experiment.name} on {ctx.environment.get('device_name')}; metrics from "
             f"{ctx.profiler.name}; workload scale recorded per card")
    baselines = [o.baseline for o in outcomes]
    bests = [o.best for o in outcomes if o.best is not None]
    save_report(_report(baselines, ctx.rules, scope), ctx.run_dir / "baseline.json")
    save_report(_report(bests, ctx.rules, scope), ctx.run_dir / "best.json")
    threshold = float(ctx.cfg["timing"]["threshold"])
    if _baseline_only(ctx.experiment):
        # Nothing to search: the experiment's check is judged on the report's card vs its re-profile.
        diffs = [diff_cards(o.report_card, o.baseline, check=ctx.experiment.check,
                            hypothesis=ctx.experiment.hypothesis, threshold=threshold) for o in outcomes]
        title = f"{ctx.experiment.name}: the report's card vs its re-profile here"
        diff = ReportDiff(cards=diffs, only_before=[], only_after=[])
    else:
        diffs = [diff_cards(o.baseline, o.best, check=ctx.experiment.check, hypothesis=ctx.experiment.hypothesis,
                            threshold=threshold) for o in outcomes if o.best is not None]
        title = f"{ctx.experiment.name}: baseline vs best"
        diff = ReportDiff(cards=diffs, only_before=[o.card_id for o in outcomes if o.best is None], only_after=[])
    ctx.diff = diff
    write_json_atomic(ctx.run_dir / "diff.json", diff.as_dict())
    reproduction = ReportDiff(
        cards=[diff_cards(o.report_card, o.baseline, check="effective_flops",
                          hypothesis="the re-profiled baseline reproduces the report's card")
               for o in outcomes],
        only_before=[], only_after=[],
    )
    _write_text(ctx.run_dir / "baseline_reproduction.md",
                render_markdown(reproduction, "Baseline reproduction: the report's card vs the baseline "
                                "re-profiled here (at the recorded workload scale)"))
    _write_text(ctx.run_dir / "diff.md", render_markdown(diff, title))
    _write_text(ctx.run_dir / "summary.md", render_summary(ctx, outcomes, diffs))
    return diff


def card_results(experiment: Experiment, outcomes: list[CardOutcome], diffs: list[CardDiff]) -> list[CardResult]:
    """The run's findings per report card, for the end-to-end view (baseline-only runs find no speedup)."""
    by_card = {d.card: d for d in diffs}
    return [
        CardResult(card=o.report_card, experiment=experiment.name,
                   variant="baseline only" if _baseline_only(experiment) else _variant_label(o),
                   diff=None if _baseline_only(experiment) else by_card.get(o.card_id))
        for o in outcomes
    ]


def _variant_label(o: CardOutcome) -> str | None:
    if o.best_variant is None:
        return None
    params = ", ".join(f"{k}={v}" for k, v in o.best_params.items())
    return f"{o.best_variant}({params})" if params else o.best_variant


def _write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


# Card extras every measurement writes; anything else was added by the experiment's annotate hook.
_MEASURED_EXTRAS = {"id", "ncu_output", "scheduler_note", "harness", "timing", "search_timing", "correctness",
                    "memory", "workload", "environment", "metrics_source", "profiler", "peaks",
                    "profiler_settings", "profiler_notes", "report_card", "baseline_drift", "variant"}


def _facts_text(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}={_facts_text(v)}" for k, v in value.items() if v is not None)
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _evidence_lines(label: str, card: Card) -> list[str]:
    variant = {k: v for k, v in (card.extra.get("variant") or {}).items() if k != "nominal_flops_per_call"}
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
             "Times are per original call of the op (a batched variant's time is divided by its calls).", "",
             "| card | baseline us | best us | speedup | time | class before -> after | max rel error | variant | check |",
             "|---|---:|---:|---:|---|---|---:|---|---|"]
    for o in outcomes:
        base_t = card_time_us(o.baseline)
        if o.best is None:
            d = by_card.get(o.card_id)
            why = "baseline only" if baseline_only else "no feasible variant"
            check = f"{d.verdict}: {d.verdict_detail}" if baseline_only and d else "n/a"
            lines.append(f"| `{o.card_id}` | {base_t:.1f} | n/a | n/a | n/a | {o.report_card.primary} -> "
                         f"{o.baseline.primary} | n/a | {why} | {check} |")
            continue
        d = by_card[o.card_id]
        err = o.best.extra.get("correctness", {}).get("max_rel")
        lines.append(
            f"| `{o.card_id}` | {d.before_us:.1f} | {d.after_us:.1f} | {d.speedup:.2f}x | {d.timing_verdict} | "
            f"{d.class_before} -> {d.class_after} | {err:.2e} | {_variant_label(o)} | {d.verdict} |"
        )
    lines.append("")
    for o in outcomes:
        lines += [f"- `{o.card_id}` {line[2:]}" for line in _evidence_lines("baseline", o.baseline)]
        if o.best is not None:
            lines += [f"- `{o.card_id}` {line[2:]}" for line in _evidence_lines("best", o.best)]
        for title, entries in (("skipped", o.skipped), ("infeasible (over tolerance, never best)", o.infeasible),
                               ("failed", o.failed)):
            for key, why in entries.items():
                lines.append(f"- `{o.card_id}` {key}: {title}: {why}")
        drift = o.baseline.extra.get("baseline_drift") or []
        if drift:
            values = [d["median_us"] for d in drift]
            lines.append(f"- `{o.card_id}` baseline re-timed {len(values)}x between trials: "
                         f"{min(values):.1f} to {max(values):.1f} us (first timing "
                         f"{(o.baseline.extra.get('search_timing') or o.baseline.extra['timing'])['median_us']:.1f} us)")
    metrics_source = {o.baseline.extra.get("metrics_source") for o in outcomes}
    lines += ["", f"Metrics source: {', '.join(sorted(str(s) for s in metrics_source))} "
              "(estimated metrics are roofline estimates, not counters).", ""]
    scales = sorted({str((o.baseline.extra.get("workload") or {}).get("scale")) for o in outcomes})
    lines.append(render_end_to_end(
        _normalized_report(ctx.cfg.get("report")), card_results(ctx.experiment, outcomes, diffs),
        measured_on=f"{ctx.environment.get('device_name')} ({ctx.device}) at workload scale {', '.join(scales)}"))
    return "\n".join(lines) + "\n"


@functools.lru_cache(maxsize=4)
def _normalized_report(path: str | None) -> Report:
    return lint_report(load_report(path)).normalized


def execute(cfg: Mapping[str, Any], run_dir: Path) -> tuple[RunContext, list[CardOutcome]]:
    started = time.perf_counter()
    try:
        rules = RuleSet.from_config(cfg.get("rules"))
    except ValueError as exc:
        raise RunError(str(exc)) from None
    experiment = load_experiment(cfg["experiment"]["module"])
    tolerance = cfg["experiment"].get("tolerance", {}).get("max_rel")
    if not isinstance(tolerance, (int, float)) or tolerance < 0:
        raise RunError(f"experiment.tolerance.max_rel={tolerance!r}: must be a number >= 0")
    scale = cfg["workload"].get("scale")
    if scale is not None and not (0 < float(scale) <= 1):
        raise RunError(f"workload.scale={scale}: must be in (0, 1]")
    report_path = cfg.get("report")
    report = load_report(report_path)
    normalized = classify_report(lint_report(report).normalized, rules)
    cards = select_cards(normalized, cfg.get("cards"), experiment, cfg["experiment"].get("default_cards"))
    try:
        device = resolve_device(str(cfg.get("device", "auto")))
    except ValueError as exc:
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
    run_dir.mkdir(parents=True, exist_ok=True)
    storage = cfg["search"].get("storage") or f"sqlite:///{(run_dir / 'optuna.db').resolve()}"
    timing = cfg["timing"]
    ctx = RunContext(
        cfg=cfg, run_dir=run_dir, experiment=experiment, rules=rules, device=device, profiler=profiler,
        environment=describe_environment(device, cfg), storage=storage,
        settings=TimingSettings(warmup=int(timing["warmup"]), min_repeats=int(timing["min_repeats"]),
                                budget_s=float(timing["budget_s"]), cuda_graph=bool(timing.get("cuda_graph"))),
    )
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    outcomes: list[CardOutcome] = []
    for card in cards:
        outcomes.append(run_card(ctx, card, report_path))
        write_outputs(ctx, outcomes)
    wall = time.perf_counter() - started
    ctx.phases["wall_s"] = wall
    ctx.phases["outside_measurement_s"] = wall - ctx.phases["measurement_s"]
    write_json_atomic(run_dir / "run.json", {"phases": ctx.phases, "environment": ctx.environment,
                                             "cards": [o.card_id for o in outcomes], "storage": storage})
    return ctx, outcomes
