"""A run's outputs: baseline.json, best.json, tried.json, recipe.md, diff.md/json, glance.json, summary.md,
report.html."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from harness.boundary.replies import ExperimentFacts
from harness.cards.atomic import write_json_atomic, write_text_atomic
from harness.cards.cells import fmt_noisy
from harness.cards.chunk_breakdown import attach_op_breakdowns
from harness.cards.diff import diff_cards
from harness.cards.diff_markdown import adoption_text, render_markdown, speedup_text, verdict_text
from harness.cards.diff_rows import CardDiff, ReportDiff
from harness.cards.dtype import DEFAULT as DEFAULT_DTYPE
from harness.cards.labels import transition
from harness.cards.measured import experiment_evidence, facts_not_in_tables
from harness.cards.measures import TIMING_BASIS, card_time_us
from harness.cards.model import Card, Report, renamed_id_lines, save_report
from harness.cards.reproduce import CardReproduction, Reproduction, headline, reported_device, reproduce
from harness.cards.rules import RuleSet, class_counts, rules_text
from harness.cards.time_verdict import VERDICT_RULE_TEXT
from harness.config.schema import experiment_of
from harness.report.glance import Glance, glance_rows, write_glance
from harness.report.html import write_run_html
from harness.report.next_steps import next_steps, run_overrides
from harness.report.overview import CardResult, render_end_to_end
from harness.report.recipe import render_recipe
from harness.run.predictions import calibration_lines, record_measured
from harness.run.state import CardOutcome, RunContext, baseline_only, same_band

log = logging.getLogger("harness")
REPRODUCTION_FILE = "reproduction.json"  # the baselines' reproduce verdicts, on a GPU (report.html reads it)
# What a run folder holds when it is done, in the order the outputs line names them (those written).
OUTPUT_FILES = ("summary.md", "report.html", "recipe.md", "diff.md", "diff.json", "glance.json", "baseline.json",
                "best.json", "tried.json", "run.json", REPRODUCTION_FILE, "baseline_reproduction.md", "trials/")


def _report(cards: list[Card], rules: RuleSet, scope: str) -> Report:
    summary, by_stage = class_counts(cards)
    return Report(cards=cards, generated_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"), rules=rules_text(rules),
                  summary=summary, by_stage=by_stage, scope=scope)


def write_outputs(ctx: RunContext, outcomes: list[CardOutcome]) -> ReportDiff:
    scope = (f"harness {ctx.experiment.name} on {ctx.environment.get('device_name')}; metrics from "
             f"{ctx.profiler}; workload scale recorded per card")
    save_report(_report([o.baseline for o in outcomes], ctx.rules, scope), ctx.run_dir / "baseline.json")
    # best.json: what to take home, card by card (an adopted variant, else the baseline kept);
    # tried.json: the best variant each search found, adopted or not, for the diff and the page.
    save_report(_report([o.kept for o in outcomes], ctx.rules, scope), ctx.run_dir / "best.json")
    save_report(_report([o.tried for o in outcomes if o.tried is not None], ctx.rules, scope),
                ctx.run_dir / "tried.json")
    write_text_atomic(ctx.run_dir / "recipe.md", render_recipe([o.kept for o in outcomes], ctx.run_dir))
    band = same_band(ctx)
    device = reported_device(ctx.report, ctx.cfg.report_device)
    if baseline_only(ctx.experiment):
        # Nothing to search: the experiment's check is judged on the report's card vs its re-profile.
        diffs = [diff_cards(o.report_card, o.baseline, check=ctx.experiment.check,
                            hypothesis=ctx.experiment.hypothesis, threshold=band, report_device=device)
                 for o in outcomes]
        title = f"{ctx.experiment.name}: the report's card vs its re-profile here"
        diff = ReportDiff(cards=diffs, only_before=[], only_after=[])
    else:
        diffs = [diff_cards(o.baseline, o.tried, check=ctx.experiment.check, hypothesis=ctx.experiment.hypothesis,
                            threshold=band, confirmation=o.confirmation, adopted=o.adopted)
                 for o in outcomes if o.tried is not None]
        attach_op_breakdowns(diffs, outcomes, experiment_of(ctx.cfg).predict_from)
        title = f"{ctx.experiment.name}: baseline vs the best variant tried"
        diff = ReportDiff(cards=diffs, only_before=[o.card_id for o in outcomes if o.tried is None], only_after=[])
    diff.refused = {o.card_id: lists for o in outcomes
                    if (lists := {name: entries for name, entries in
                                  (("skipped", o.skipped), ("infeasible", o.infeasible), ("failed", o.failed))
                                  if entries})}
    ctx.diff = diff
    write_json_atomic(ctx.run_dir / "diff.json", diff.as_dict())
    reproduction = ReportDiff(
        cards=[diff_cards(o.report_card, o.baseline, check="effective_flops", threshold=band,
                          hypothesis="the re-profiled baseline reproduces the report's card", report_device=device)
               for o in outcomes],
        only_before=[], only_after=[],
    )
    write_text_atomic(ctx.run_dir / "baseline_reproduction.md",
                render_markdown(reproduction, "Baseline reproduction: the report's card vs the baseline "
                                "re-profiled here (at the recorded workload scale)"))
    write_text_atomic(ctx.run_dir / "diff.md", render_markdown(diff, title))
    reproduced = reproduction_of(ctx, outcomes)
    if reproduced is not None:
        write_json_atomic(ctx.run_dir / REPRODUCTION_FILE, {"report_device": device,
                                                            "cards": [r.as_dict() for r in reproduced]})
    record_measured(ctx.run_dir, ctx.experiment.name, outcomes, ctx.report)  # predictions.json's measured rows
    glance = run_glance(ctx, outcomes, diffs, reproduced)
    write_glance(ctx.run_dir, glance)
    write_text_atomic(ctx.run_dir / "summary.md", render_summary(ctx, outcomes, diffs, reproduced, glance))
    return diff


def run_glance(ctx: RunContext, outcomes: list[CardOutcome], diffs: list[CardDiff],
               reproduced: list[CardReproduction] | None) -> Glance:
    """The run at a glance (harness.report.glance), from the results the end-to-end view reads."""
    other_kernels = {r.card for r in reproduced or [] if r.verdict is Reproduction.OTHER_KERNELS}
    confirmations = {o.card_id: o.confirmation for o in outcomes}
    rows = glance_rows(card_results(ctx.experiment, outcomes, diffs, other_kernels), confirmations,
                       reported_device(ctx.report, ctx.cfg.report_device))
    return Glance(rows, next_steps(rows, ctx.experiment.name, ctx.device, run_overrides(ctx.run_dir)))


def written_outputs(run_dir: Path) -> list[str]:
    """The outputs the run folder holds, in OUTPUT_FILES' order."""
    return [name for name in OUTPUT_FILES if (run_dir / name.rstrip("/")).exists()]


def reproduction_of(ctx: RunContext, outcomes: list[CardOutcome]) -> list[CardReproduction] | None:
    """Each baseline's reproduction verdict against its report card, on a GPU (None elsewhere: only estimates)."""
    if not ctx.device.startswith("cuda"):
        return None
    return reproduce(Report(cards=[o.baseline for o in outcomes]), ctx.report, ctx.cfg.report_device)


def _reproduction_lines(reproduced: list[CardReproduction] | None) -> list[str]:
    if reproduced is None:
        return []
    return [f"Reproduction of the report (`python -m harness.report reproduce`; {REPRODUCTION_FILE}):", "",
            *[f"- {r.line()}" for r in reproduced], ""]


def _dtype_lines(outcomes: list[CardOutcome]) -> list[str]:
    """Where a card's dtype is the experiment's guess, say so and how to set it (harness.cards.dtype)."""
    lines = []
    for o in outcomes:
        workload = o.baseline.extra.get("workload") or {}
        if workload.get("dtype_source") == DEFAULT_DTYPE:
            lines.append(f"Dtype guessed: `{o.card_id}` was built in {workload.get('dtype')}, the experiment's "
                         "default: nothing on the card says what its model ran in; set `workload.dtype` "
                         f"(with cards=[{o.card_id}]) or declare it beside the report (<report>.declared.json)")
    return [*lines, ""] if lines else []


def write_page(run_dir: Path) -> None:
    """report.html from the files of the run so far."""
    try:
        write_run_html(run_dir)
    except Exception as exc:  # the page is a view of files already written: it must not fail the run
        log.warning("report.html not written: %s: %s", type(exc).__name__, exc)


def card_results(experiment: ExperimentFacts, outcomes: list[CardOutcome], diffs: list[CardDiff],
                 other_kernels: set[str] | None = None) -> list[CardResult]:
    """The run's findings per report card, for the end-to-end view (baseline-only runs find no speedup);
    `other_kernels`: cards whose baseline ran other kernels than the report's, from which nothing is projected."""
    by_card = {d.card: d for d in diffs}
    return [
        CardResult(card=o.report_card, experiment=experiment.name,
                   variant="baseline only" if baseline_only(experiment) else _variant_label(o),
                   diff=None if baseline_only(experiment) else by_card.get(o.card_id),
                   measured=o.baseline, other_kernels=o.card_id in (other_kernels or set()))
        for o in outcomes
    ]


def _variant_label(o: CardOutcome) -> str | None:
    if o.tried_variant is None:
        return None
    params = ", ".join(f"{k}={v}" for k, v in o.tried_params.items())
    return f"{o.tried_variant}({params})" if params else o.tried_variant


def _facts_text(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}={_facts_text(v)}" for k, v in value.items() if v is not None)
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _evidence_lines(label: str, card: Card) -> list[str]:
    variant = facts_not_in_tables(card)
    lines = [f"- {label}'s facts: {_facts_text(variant)}"] if variant else []
    lines += [f"- {label} {key}: {_facts_text(value)}" for key, value in experiment_evidence(card).items()]
    return lines


def render_summary(ctx: RunContext, outcomes: list[CardOutcome], diffs: list[CardDiff],
                   reproduced: list[CardReproduction] | None = None, glance: Glance | None = None) -> str:
    by_card = {d.card: d for d in diffs}
    nothing_searched = baseline_only(ctx.experiment)
    report_device = reported_device(ctx.report, ctx.cfg.report_device)
    # Why the run's profiler is not the one asked for (profiler=auto falling back from ncu), from run.py.
    fallback = [f"Profiler note: {note}" for note in ctx.environment.get("profiler_notes") or []]
    other = headline(reproduced or [])
    lines = [f"# {ctx.experiment.name}", "", ctx.noise(outcomes).line(), "", *(glance.markdown() if glance else []),
             *([f"**{other}**", ""] if other else []),
             f"Hypothesis: {ctx.experiment.hypothesis}", "",
             f"Device: {ctx.environment.get('device_name')} ({ctx.device}); profiler: {ctx.profiler}", "",
             *fallback, *([""] if fallback else []), *_reproduction_lines(reproduced), *_dtype_lines(outcomes),
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
            why = ("baseline only" if nothing_searched
                   else "no variant of the space can run on this device (not drawn): baseline kept"
                   if ctx.not_drawn and not o.n_trials else "no feasible variant: baseline kept")
            check = f"{d.verdict}: {d.verdict_detail}" if nothing_searched and d else "n/a"
            own = f"{d.card_verdict}: {d.card_verdict_detail}" if nothing_searched and d else "n/a"
            lines.append(f"| `{o.card_id}` | {_fmt_us(base_t, o.baseline)} | n/a | n/a | n/a | "
                         f"{transition(o.report_card, o.baseline, report_device)} | n/a | {why} | {check} | {own} |")
            continue
        err = (o.tried.extra.get("correctness") or {}).get("max_rel")
        lines.append(
            f"| `{o.card_id}` | {_fmt_us(d.before_us, o.baseline)} | {_fmt_us(d.after_us, o.tried)} | "
            f"{speedup_text(d)} | "
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
            lines += [f"- `{o.card_id}` {line[2:]}" for line in _evidence_lines(f"variant {o.tried_variant}", o.tried)]
        for title, entries in (("skipped", o.skipped),
                               ("infeasible (its output off the float64 reference, or a check of the harness refused "
                                "it; never best)", o.infeasible),
                               ("failed", o.failed)):
            for key, why in entries.items():
                lines.append(f"- `{o.card_id}` {key}: {title}: {why}")
        if o.search is not None:
            lines.append(f"- `{o.card_id}` {o.search.describe()}")
        drift = o.baseline.extra.get("baseline_drift") or []
        if drift:
            values = [d["median_us"] for d in drift]
            low, high = min(values), max(values)
            lines.append(f"- `{o.card_id}` baseline re-timed {len(values)}x between trials (drift check): "
                         f"{fmt_noisy(low, high - low)} to {fmt_noisy(high, high - low)} us per call")
    # Left out of every card's search before any trial (Experiment.variant's needs), unlike a skip.
    lines += [f"- not drawn: {variant} ({why})" for variant, why in ctx.not_drawn.items()]
    lines += renamed_id_lines(ctx.report)  # a repeated id in the report: the later card read under another
    metrics_source = {o.baseline.extra.get("metrics_source") for o in outcomes}
    lines += ["", *calibration_lines(ctx.run_dir)]
    lines += ["", f"Metrics source: {', '.join(sorted(str(s) for s in metrics_source))} "
              "(estimated metrics are roofline estimates, not counters).", ""]
    scales = sorted({str((o.baseline.extra.get("workload") or {}).get("scale")) for o in outcomes})
    other_kernels = {r.card for r in reproduced or [] if r.verdict is Reproduction.OTHER_KERNELS}
    lines.append(render_end_to_end(
        ctx.report, card_results(ctx.experiment, outcomes, diffs, other_kernels),
        measured_on=f"{ctx.environment.get('device_name')} ({ctx.device}) at workload scale {', '.join(scales)}",
        report_device=report_device))
    return "\n".join(lines) + "\n"


def _fmt_us(value: float | None, card: Card) -> str:
    """A time to the digits its card's timing spread (interquartile range over median) allows."""
    spread = (card.extra.get("timing") or {}).get("spread")
    return fmt_noisy(value, value * spread if value is not None and isinstance(spread, (int, float)) else None)


