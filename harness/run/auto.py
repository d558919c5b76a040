"""`experiment=auto`: every selected card gets the experiments whose hypothesis matches its class.

An experiment matches a card when it applies to the card's op kind and lists the card's primary
class in `Experiment.classes` (unresolved cards thus get stall_breakdown, plus any experiment that
also claims unresolved cards). Each matched experiment runs as its own sub-run, composed from its
own config with the user's overrides, under `<run dir>/<experiment>/`; the auto run then writes one
summary over all cards, with the end-to-end view.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping

from harness.boundary.replies import Described, ExperimentFacts
from harness.boundary.requests import Describe
from harness.cards.atomic import write_json_atomic, write_text_atomic
from harness.cards.dtype import CardDtype, DtypeError, card_dtype, declared_rules
from harness.cards.fields import UNRESOLVED
from harness.cards.ids import CHUNK_OP_KINDS
from harness.cards.lint import lint_report
from harness.cards.measures import TimeInModel, time_in_model, time_sources
from harness.cards.model import Card, Report, load_report, renamed_id_lines
from harness.cards.reproduce import Reproduction, reported_device
from harness.cards.rules import classify_report
from harness.config.schema import AUTO, ExperimentConfig, HarnessConfig, experiment_of
from harness.predict.prediction import Prediction, params_key
from harness.report.glance import auto_glance, gathered_noise, write_glance
from harness.report.glance_html import glance_section
from harness.report.html import render_index_html
from harness.report.overview import CardResult, render_end_to_end
from harness.run.estimate import plan_estimate
from harness.run.execute import RunError, card_results, describe, execute, rules_of, with_report_cards
from harness.run.outputs import reproduction_of
from harness.run.predictions import rank_plan
from harness.run.provenance import report_sha256
from harness.run.selection import SelectionError, in_scope, model_us, pick_cards
from harness.run.worker import TrialWorker, worker_for

log = logging.getLogger("harness")

NOT_AUTOMATIC = (AUTO, "reprofile")  # reprofile reproduces the baseline; it tests no hypothesis

Compose = Callable[[str], HarnessConfig]  # experiment name -> its full config, user overrides applied


@dataclass
class AutoPlan:
    by_experiment: dict[str, list[Card]] = field(default_factory=dict)
    unmatched: dict[str, str] = field(default_factory=dict)  # card id -> why no experiment applies


def candidate_experiments(configs: Mapping[str, ExperimentConfig], worker: TrialWorker,
                          deadline_s: float | None) -> dict[str, ExperimentFacts]:
    """The experiments `auto` may choose from (every composed experiment config but auto and reprofile), as the
    worker describes them; the first one that cannot be loaded, in the configs' order, is an ExperimentError."""
    described = describe(worker, Describe(experiments={name: (c.module, c.name) for name, c in configs.items()}),
                         deadline_s)
    return {name: described.experiment(name) for name in configs}


def plan_auto(cards: list[Card], experiments: Mapping[str, ExperimentFacts],
              scopes: Mapping[str, Any] | None = None) -> AutoPlan:
    """Each card to the experiments that take its op kind and claim its class, within the scope of each
    experiment's `default_cards` (its stage, op and shape filters: the N=64 projections only, say). A card
    the rules leave without a class (the report lost its kernel times) is as unresolved as one no rule
    decides: its op's experiments that claim unresolved cards take it, stall_breakdown among them."""
    plan = AutoPlan()
    scopes = scopes or {}
    for card in cards:
        wanted = card.primary or UNRESOLVED
        # A chunk card composes its op cards' counter-experiments: its experiments are those of its kind.
        chunk = card.op_kind in CHUNK_OP_KINDS
        matched = [name for name, e in experiments.items()
                   if e.applies_to(card.op_kind) and (chunk or wanted in e.classes)
                   and in_scope(card, scopes.get(name))]
        if not matched:
            plan.unmatched[card.id] = (f"no experiment claims {card.op_kind} cards of class {card.primary}"
                                       if card.primary else f"no experiment claims unclassified {card.op_kind} cards")
        for name in matched:
            plan.by_experiment.setdefault(name, []).append(card)
    return plan


def run_auto(cfg: HarnessConfig, run_dir: Path, compose: Compose, options: list[str]) -> str:
    """Run the plan, one sub-run per experiment; return the overall summary (also written to summary.md).

    `options` are the experiment group's options, those on `hydra.searchpath` included, so a user's
    own experiments are candidates like the shipped ones.
    """
    started = time.perf_counter()
    configs = {name: compose(name) for name in sorted(options) if name not in NOT_AUTOMATIC}
    worker = worker_for(cfg)
    deadline = cfg.search.trial_deadline_s
    experiments = candidate_experiments({name: experiment_of(c) for name, c in configs.items()}, worker, deadline)
    report = classify_report(lint_report(load_report(cfg.report)).normalized, rules_of(cfg))
    derived = describe(worker, Describe(report=report.to_dict(), device=cfg.device), deadline)
    with_chunks = with_report_cards(report, derived)
    # Cards whose workload this install cannot build (the chunk cards without diffusers) are left out with a
    # note, so the rest of the selection still runs.
    cards, left_out = buildable(_selected(cfg, report, with_chunks, derived), derived.unavailable)
    for line in left_out_lines(left_out):
        log.warning("auto: %s", line.removeprefix("- "))
    scopes = {name: experiment_of(config).default_cards for name, config in configs.items()}
    plan = plan_auto(cards, experiments, scopes)
    run_dir.mkdir(parents=True, exist_ok=True)
    # By predicted saving (predictions.json): the plan's every card when only planning, else the cards it runs.
    planned = plan_auto(with_chunks.cards, experiments, scopes) if cfg.auto.plan_only else plan
    plan.by_experiment, predicted = rank_plan(cfg, worker, planned.by_experiment, configs, experiments, with_chunks,
                                              str(derived.device), run_dir)
    if cfg.auto.plan_only:
        plan = plan_auto(cards, experiments, scopes)
    if cfg.auto.plan_only:
        estimate = plan_estimate(cfg, configs, plan.by_experiment, experiments, worker, derived.device, run_dir)
        return write_plan(with_chunks, experiments, cards, run_dir, report_sha256(cfg.report), scopes,
                          predicted=predicted,
                          unavailable=derived.unavailable, estimate=estimate, device=str(derived.device),
                          selected_by="this run's `cards=`" if cfg.cards else "`auto.default_cards` (no `cards=`)")
    if not cards:
        raise RunError(f"cards={_selector(cfg)}: no selected card can run on this install "
                       f"({next(iter(left_out.values()))})")
    results, sections, measured_on = _sub_runs(run_dir, configs, plan, experiments)
    glance = auto_glance(run_dir, list(plan.by_experiment), str(derived.device))  # the sub-runs' glance.json
    write_glance(run_dir, glance)
    lines = ["# auto: each card's counter-experiments, chosen by its class", "", *glance.markdown(),
             "| card | class | experiments |", "|---|---|---|"]
    for card in cards:
        names = [n for n, chosen in plan.by_experiment.items() if card in chosen]
        lines.append(f"| `{card.id}` | {card.primary or 'no class'} | "
                     f"{', '.join(names) or plan.unmatched.get(card.id, '')} |")
    notes = left_out_lines(left_out) + renamed_id_lines(report)
    lines += ["", "Sub-runs:", *sections, *([""] + notes if notes else []), "",
              render_end_to_end(report, results, measured_on, reported_device(report, cfg.report_device))]
    text = "\n".join(lines) + "\n"
    write_text_atomic(run_dir / "summary.md", text)
    head = glance_section(glance, gathered_noise({name: run_dir / name for name in plan.by_experiment}))
    write_text_atomic(run_dir / "report.html", render_index_html("harness auto run", text, head))
    write_json_atomic(run_dir / "run.json", {
        "experiments": {n: [c.id for c in chosen] for n, chosen in plan.by_experiment.items()},
        "unmatched": plan.unmatched, "left_out": left_out, "wall_s": time.perf_counter() - started})
    return text


def _selector(cfg: HarnessConfig) -> Any:
    """The cards auto runs: `cards=`, else auto.default_cards."""
    return cfg.cards or cfg.auto.default_cards


def _selected(cfg: HarnessConfig, report: Report, with_chunks: Report, derived: Described) -> list[Card]:
    """The cards `cards=` (or auto.default_cards) selects, on the device the worker resolved."""
    selector = _selector(cfg)
    if not selector:
        raise RunError("experiment=auto needs cards= (ids or a rule) or auto.default_cards")
    if derived.device is None:
        raise RunError(str(derived.device_error))
    try:
        # Chunk cards (harness.trial.chunks) run when named, by id or by their op kind: a rule over the report's
        # op cards ("the costliest of each op kind") must not grow a whole decoder per op kind.
        cards = pick_cards(with_chunks if _names_chunks(selector) else report, selector, device=derived.device)
    except SelectionError as exc:
        raise RunError(str(exc)) from None
    if not cards:
        raise RunError(f"cards={selector} selects no card of {cfg.report or 'the shipped report'}")
    return cards


def _sub_runs(run_dir: Path, configs: Mapping[str, HarnessConfig], plan: AutoPlan,
              experiments: Mapping[str, ExperimentFacts]) -> tuple[list[CardResult], list[str], str]:
    """One sub-run per planned experiment, the chunk experiments last (predicted from the op experiments'
    diff.json): the results per card, the summary's line per sub-run, and where they were measured."""
    results: list[CardResult] = []
    sections: list[str] = []
    measured_on = "this machine"
    op_runs: list[str] = []  # the op experiments' diff.json: what the chunk cards of this run are predicted from
    for name, chosen in _chunks_last(plan.by_experiment, experiments):
        sub_cfg = replace(configs[name], cards=[c.id for c in chosen])
        chunk = _is_chunk_experiment(experiments[name])
        if chunk:
            experiment = experiment_of(sub_cfg)
            given = experiment.predict_from
            given = [given] if isinstance(given, str) else list(given or [])
            sub_cfg = replace(sub_cfg, experiment=replace(experiment, predict_from=[*given, *op_runs]))
        ctx, outcomes = execute(sub_cfg, run_dir / name)
        if not chunk and (run_dir / name / "diff.json").exists():
            op_runs.append(str(run_dir / name / "diff.json"))
        diffs = ctx.diff.cards if ctx.diff is not None else []
        other = {r.card for r in reproduction_of(ctx, outcomes) or [] if r.verdict is Reproduction.OTHER_KERNELS}
        results += card_results(ctx.experiment, outcomes, diffs, other)
        measured_on = f"{ctx.environment.get('device_name')} ({ctx.device})"
        sections.append(f"- [{name}]({name}/report.html) ([summary.md]({name}/summary.md)): {len(outcomes)} card(s): "
                        + ", ".join(f"`{o.card_id}`" for o in outcomes))
    return results, sections, measured_on


def buildable(cards: list[Card], unavailable: Mapping[str, str]) -> tuple[list[Card], dict[str, str]]:
    """The cards whose workload this install can build, and the others (card id -> what is missing and how to
    install it: `unavailable`, by op kind, as the worker found it: harness.trial.describe)."""
    kept, left_out = [], {}
    for card in cards:
        why = unavailable.get(card.op_kind)
        if why is None:
            kept.append(card)
        else:
            left_out[card.id] = why
    return kept, left_out


def left_out_lines(left_out: Mapping[str, str]) -> list[str]:
    """One Markdown line per reason: the cards left out for it."""
    by_reason: dict[str, list[str]] = {}
    for card_id, why in left_out.items():
        by_reason.setdefault(why, []).append(card_id)
    return [f"- left out on this install ({why}): " + ", ".join(f"`{c}`" for c in ids)
            for why, ids in by_reason.items()]


def _chunks_last(by_experiment: Mapping[str, list[Card]], experiments: Mapping[str, ExperimentFacts]
                 ) -> list[tuple[str, list[Card]]]:
    """The plan's sub-runs, the chunk experiments after the op experiments whose results predict them."""
    return sorted(by_experiment.items(), key=lambda item: _is_chunk_experiment(experiments[item[0]]))


def _is_chunk_experiment(experiment: ExperimentFacts) -> bool:
    return set(experiment.op_kinds) <= set(CHUNK_OP_KINDS)


def _names_chunks(selector: Any) -> bool:
    """Whether `cards=` may take chunk cards: ids (any of them may be one), or a rule naming a chunk op kind."""
    if not isinstance(selector, Mapping):
        return True
    return str(selector.get("op_kind")) in CHUNK_OP_KINDS or str(selector.get("op")) in CHUNK_OP_KINDS


def plan_entries(report: Report, experiments: Mapping[str, ExperimentFacts], selected: list[Card],
                 scopes: Mapping[str, Any] | None = None, *, unavailable: Mapping[str, str],
                 device: str = "cuda", predicted: Mapping[str, tuple[Prediction, float]] | None = None
                 ) -> list[dict[str, Any]]:
    """One entry per card of the report (its chunk cards last, with `chunk: true` and the op cards they
    contain): its class and proposal, the experiments that test it, whether this run's selection runs them,
    what this install lacks to build it (`unavailable`, by op kind), and its best predicted configuration with
    its saving in the model (`predicted`: harness.run.predictions.rank_plan)."""
    every = plan_auto(report.cards, experiments, scopes)
    chosen = {card.id for card in selected}
    predicted = predicted or {}
    entries = []
    # The largest predicted saving first, then the costliest in the model (harness.cards.measures.time_in_model),
    # the chunk cards after the op cards.
    for card in sorted(report.cards, key=lambda c: (c.op_kind in CHUNK_OP_KINDS,
                                                    -predicted.get(c.id, (None, float("-inf")))[1], -model_us(c))):
        names = [name for name, cards in every.by_experiment.items() if card in cards]
        found = time_in_model(card)
        entry = {"card": card.id, "class": card.primary, "proposal": card.counter_experiment,
                 "experiments": names, "selected": card.id in chosen, "reason": every.unmatched.get(card.id),
                 "dtype": _planned_dtype(report, card, [experiments[n] for n in names], device).to_dict(),
                 "time_in_model": asdict(found) if found is not None else None,
                 "predicted": _predicted_entry(*predicted[card.id]) if card.id in predicted else None}
        if card.op_kind in CHUNK_OP_KINDS:
            entry.update(chunk=True, contains=list(card.extra.get("contains") or []))
        if (why := unavailable.get(card.op_kind)) is not None:
            entry["unavailable"] = why  # this install cannot build its workload: it is never selected here
        entries.append(entry)
    return entries


def _predicted_entry(row: Prediction, saving_us: float) -> dict[str, Any]:
    return {"experiment": row.experiment, "variant": row.variant, "params": row.params, "speedup": row.speedup,
            "interval": row.interval, "device": row.device, "saving_in_model_us": saving_us}


def _predicted_cell(entry: Mapping[str, Any] | None) -> str:
    """'1839.0 (vae_bf16: low_precision(dtype=bfloat16, ...) 2.00x)', or 'n/a'."""
    if not entry:
        return "n/a"
    variant = entry["variant"] + (f"({params_key(entry['params'])})" if entry["params"] else "")
    return f"{entry['saving_in_model_us']:.1f} ({entry['experiment']}: {variant} {entry['speedup']:.2f}x)"


def _planned_dtype(report: Report, card: Card, planned: list[ExperimentFacts], device: str) -> CardDtype:
    """What the card will be built in (harness.cards.dtype): the first planned experiment's default, if it comes to
    that (the chunk experiments' and a replayed op's own dtype, when nothing on the card says)."""
    fallback = planned[0].workload_dtype if planned else "float32"
    try:
        return card_dtype(card, applied=[], override=None, declared=declared_rules(report.extra),
                          experiment_dtype=fallback, device=device)
    except DtypeError as exc:
        raise RunError(str(exc)) from None


def write_plan(report: Report, experiments: Mapping[str, ExperimentFacts], selected: list[Card], run_dir: Path,
               sha256: str, scopes: Mapping[str, Any] | None = None, *, unavailable: Mapping[str, str],
               predicted: Mapping[str, tuple[Prediction, float]] | None = None,
               estimate: str | None = None, device: str = "cuda", selected_by: str = "this run's `cards=`") -> str:
    """plan.json and plan.md (`auto.plan_only=true`): what auto would run, for every card; nothing measured;
    `selected_by`, what chose the selected cards (`cards=`, else auto.default_cards);
    `estimate`, the selected cards' wall time on this device (harness.run.estimate)."""
    entries = plan_entries(report, experiments, selected, scopes, unavailable=unavailable, device=device,
                           predicted=predicted)
    write_json_atomic(run_dir / "plan.json", {"report_sha256": sha256, "cards": entries})
    left_out = left_out_lines({e["card"]: e["unavailable"] for e in entries if e.get("unavailable")})
    left_out += renamed_id_lines(report)
    op_entries = [e for e in entries if not e.get("chunk")]
    covered = sum(1 for e in op_entries if e["experiments"])
    chunks = len(entries) - len(op_entries)
    lines = ["# auto plan: the experiments that test each card's proposal", "",
             f"{covered} of {len(op_entries)} cards have at least one experiment"
             + (f" (and {chunks} chunk cards, each the op cards of one model part run together: cards=[their id] "
                "runs them)" if chunks else "") + f"; {sum(e['selected'] for e in entries)} "
             f"are selected by {selected_by} (run them without `auto.plan_only=true`). Nothing was measured.", "",
             *([estimate, ""] if estimate else []),
             *left_out, *([""] if left_out else []),
             "Cards by the saving predicted in the model (its time there x the fraction the best configuration is "
             f"predicted to save, on {device}: predictions.json), then the costliest in the model; time in model "
             f"from {time_sources(report.cards)}.", "",
             "| card | class | time in model us (share, calls) | predicted saving us (best) | proposal "
             "| built in (why) | experiments | selected |",
             "|---|---|---:|---|---|---|---|---|"]
    for e in entries:
        names = ", ".join(e["experiments"]) or f"none: {e['reason']}"
        kind = "chunk" if e.get("chunk") else (e["class"] or "no class")
        built_in = CardDtype.from_dict(e["dtype"]).line(why=False)
        found = TimeInModel(**e["time_in_model"]) if e.get("time_in_model") else None
        cost = f"{found.us:.1f} ({found.line()})" if found is not None else "n/a"
        lines.append(f"| `{e['card']}` | {kind} | {cost} | {_predicted_cell(e.get('predicted'))} | "
                     f"{e['proposal'] or ''} | {built_in} | {names} | {'yes' if e['selected'] else 'no'} |")
    text = "\n".join(lines) + "\n"
    write_text_atomic(run_dir / "plan.md", text)
    return text

