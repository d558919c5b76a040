"""A self-contained HTML page for a run directory, or for a before/after diff of two reports.

The page opens from disk with no network: no scripts at all, styles inline, plots inline as SVG, and a
Content-Security-Policy that forbids every external load (harness.report.html_parts).

Building blocks, shared by both entry points:
- `CardView`: one card's baseline, best (None when there is none), its diff entry and Optuna study;
- the summary table; per card the kernel bars, classes with evidence, correctness, roofline, search.
Drawn elsewhere: the plots (harness.report.plots), the roofs (harness.report.roofline), the Search section
(harness.report.studies); a run directory's files are read by harness.report.run_files.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from harness.cards.atomic import write_text_atomic
from harness.cards.cells import fmt, shorten
from harness.cards.diff_markdown import (
    basis_header,
    interval_text,
    kernel_sum_text,
    outcome_text,
)
from harness.cards.diff_rows import ReportDiff
from harness.cards.diff_sides import variant_of
from harness.cards.kernel_families import kernel_rows
from harness.cards.labels import class_label
from harness.cards.measured import experiment_evidence, facts_not_in_tables
from harness.cards.measures import (
    KERNEL_SUM_BASIS,
    TIMING_BASIS,
    calls_per_invocation,
    card_time_us,
    time_basis,
)
from harness.cards.model import Card, Report
from harness.cards.time_verdict import VERDICT_RULE_TEXT
from harness.report.bars import bars_source, disagreement
from harness.report.calibration import calibration_section
from harness.report.glance import read_glance
from harness.report.glance_html import glance_section
from harness.report.html_parts import CSP, CSS, Num, anchor, esc, html_table
from harness.report.markdown_html import markdown_to_html
from harness.report.next_steps import resume_step
from harness.report.plots import MAX_KERNEL_ROWS, kernel_bars_svg, roofline_svg
from harness.report.roofline import Roofs, device_roofs, roofline_points
from harness.report.run_files import read_run_files
from harness.report.run_sections import overview_sections, reproduction_html, run_details
from harness.report.studies import StudyView, load_studies, missing_reason, study_block


@dataclass
class CardView:
    """What one card's section is made from; the run's page adds the study and why a card has no variant."""

    card_id: str
    before: Card
    after: Card | None
    diff: dict[str, Any] | None  # CardDiff.as_dict()
    study: StudyView | None = None
    missing_reason: str = ""
    sides: tuple[str, str] = ("baseline", "variant")  # a run's words; the diff CLI says before/after


def _views(before: Report, after: Report | None, diff: Mapping[str, Any], sides: tuple[str, str]) -> list[CardView]:
    """One view per before card, in its order; a card without an after side keeps its before side."""
    after_by_id = {c.id: c for c in after.cards} if after else {}
    diff_by_id = {d["card"]: d for d in diff.get("cards", [])}
    return [CardView(c.id, c, after_by_id.get(c.id), diff_by_id.get(c.id), sides=sides) for c in before.cards]


# ---------------------------------------------------------------------------------------------
# HTML pieces


def _variant(card: Card) -> str:
    """The card's variant, 'name(k=v)' as its diff row names it; '' for a report card."""
    found = variant_of(card)
    return found["label"] if found else ""


def _max_rel(card: Card | None) -> float | None:
    value = ((card.extra.get("correctness") or {}) if card else {}).get("max_rel")
    return float(value) if isinstance(value, (int, float)) else None


def _speedup(d: Mapping[str, Any]) -> str:
    """The diff row's speedup with its 95% interval, as diff.md and summary.md print it."""
    return interval_text(d.get("speedup"), d.get("speedup_ci"))


def _outcome(d: Mapping[str, Any]) -> str:
    """What the run did with the variant, as diff.md says it; '' when the row has no adoption."""
    if d.get("adopted") is None:
        return ""
    label = (d.get("variant") or {}).get("label") or "none"
    return outcome_text(label, d["adopted"], _speedup(d), d.get("timing_verdict"))


def _row_basis(view: CardView) -> str:
    """The basis of the times in a view's summary row: its diff row's, or the lone before card's own."""
    if view.after is None or view.diff is None:
        return time_basis(view.before)
    return str(view.diff.get("time_basis") or "")


def _verdict_cell(d: Mapping[str, Any]) -> str:
    """The time verdict, coloured, with the interval-vs-band comparison that decided it."""
    verdict = d.get("timing_verdict") or "n/a"
    numbers = d.get("verdict_numbers")
    decided = f" <small>({esc(numbers)})</small>" if numbers else ""
    return f'<span class="{esc(verdict)}">{esc(verdict)}</span>{decided}'


def summary_table(views: list[CardView]) -> str:
    before, after = views[0].sides if views else ("baseline", "variant")
    basis = esc(basis_header({_row_basis(v) for v in views}))
    header = ["card", f"{before} us{basis}", f"{after} us{basis}", "speedup [95% CI]",
              "time verdict (what decided it)", "class before -&gt; after", "max rel error", "variant",
              "experiment's check", "card's own check"]
    rows = []
    for v in views:
        link = f'<a href="#{anchor(v.card_id)}"><code>{esc(v.card_id)}</code></a>'
        d = v.diff
        if v.after is None or d is None:
            rows.append([link, Num(fmt(card_time_us(v.before), 1)), "n/a", "n/a", "n/a",
                         f"{esc(v.before.primary or 'none')} -&gt; n/a", "n/a", esc(v.missing_reason), "n/a", "n/a"])
            continue
        err = _max_rel(v.after)
        rows.append([
            link, Num(fmt(d.get("before_us"), 1)), Num(fmt(d.get("after_us"), 1)),
            Num(esc(_speedup(d))),
            _verdict_cell(d),
            esc(d.get("class_transition") or f"{d.get('class_before') or 'none'} -> {d.get('class_after') or 'none'}"),
            Num(f"{err:.2e}" if err is not None else "n/a"), esc(_outcome(d) or _variant(v.after)),
            f"<b>{esc(d.get('verdict'))}</b> <small>({esc(d.get('check'))})</small>",
            f"<b>{esc(d.get('card_verdict') or 'n/a')}</b> <small>({esc(d.get('card_check') or 'none')})</small>",
        ])
    return html_table(header, rows)


def _kernel_block(view: CardView) -> str:
    rows = kernel_rows(view.before, view.after)
    has_after = view.after is not None
    svg = kernel_bars_svg(rows, has_after, view.sides)
    if svg is None:
        return '<p class="note">no kernels recorded on either side</p>'
    more = (f'<p class="note">plot shows the {MAX_KERNEL_ROWS} longest of {len(rows)} kernel families</p>'
            if len(rows) > MAX_KERNEL_ROWS else "")
    before, after = view.sides
    calls_b = calls_per_invocation(view.before)
    calls_a = calls_per_invocation(view.after) if view.after is not None else 1
    batched = calls_b > 1 or calls_a > 1  # the per-invocation sums then differ from the per-call bars: show both
    table_rows, classes = [], []
    for row in rows:
        status = row.status if has_after else ""
        tag = f'<span class="tag {status}">{status}</span>' if status in ("removed", "added") else esc(status)
        names = "<br>".join(f'<code title="{esc(n)}">{esc(shorten(n, 110))}</code>' for n in row.names)
        per_call = [Num(fmt(row.before_per_call_us)), Num(fmt(row.after_per_call_us))] if batched else []
        table_rows.append([f"<code>{esc(row.family)}</code>", names, Num(fmt(row.before_us)),
                           Num(fmt(row.after_us)), *per_call, tag])
        classes.append(status)
    per_call_header = [f"{before} us per original call (/ {calls_b})",
                       f"{after} us per original call (/ {calls_a})"] if batched else []
    table = html_table(["family", "kernels", f"{before} us ({KERNEL_SUM_BASIS})", f"{after} us ({KERNEL_SUM_BASIS})",
                        *per_call_header, ""], table_rows, classes)
    disagrees = disagreement(view.before, view.after, view.diff)
    return (f'<figure class="kernels">{svg}<figcaption>Kernels by family, {before} vs {after}, the profiler\'s '
            f"kernel-duration sums per original call (the table gives them per invocation): a family present "
            f"before and absent after is marked removed (hatched), a new one added. Bars: "
            f"{esc(bars_source(view.before, view.after, view.sides))}.</figcaption></figure>"
            + (f'<p class="note" role="note"><b>Bars vs verdict:</b> {esc(disagrees)}</p>' if disagrees else "")
            + f"{more}<details{' open' if len(rows) <= 8 else ''}><summary>kernel table</summary>{table}</details>")


def _evidence_table(evidence: Mapping[str, Any]) -> str:
    rows = [[esc(k), esc(fmt(v, 3) if not isinstance(v, (list, dict)) else json.dumps(v))]
            for k, v in evidence.items()]
    return html_table(["evidence", "value"], rows)


def _class_side(title: str, card: Card) -> str:
    dominant = next((k for k in card.kernels if k.name == card.dominant_kernel), None)
    if dominant is None and card.kernels:
        dominant = max(card.kernels, key=lambda k: k.metric("dur_us") or 0.0)
    parts = [f"<h4>{esc(title)}: <code>{esc(class_label(card))}</code></h4>",
             f"<p>rule: {esc(card.primary_rule or 'n/a')}</p>"]
    if dominant is not None:
        parts.append(f"<p>dominant kernel: <code>{esc(shorten(dominant.name, 120))}</code> "
                     f"({esc(dominant.classification or 'unclassified')})</p>")
        if dominant.evidence:
            parts.append(_evidence_table(dominant.evidence))
    source = card.extra.get("metrics_source")
    if source:
        parts.append(f"<p>metrics source: <code>{esc(source)}</code></p>")
    for note in card.extra.get("profiler_notes") or []:
        parts.append(f'<p class="note">{esc(note)}</p>')
    # The variant's facts but its search-time per_call_us (the header's time, from the confirm rounds, is
    # the card's), and what the experiment's annotate hook wrote.
    facts = facts_not_in_tables(card)
    own = {**({"variant": facts} if facts else {}), **experiment_evidence(card)}
    if own:
        parts.append(f"<details><summary>experiment evidence ({esc(', '.join(own))})</summary>"
                     f"<pre>{esc(json.dumps(own, indent=1, default=str))}</pre></details>")
    return '<div class="side">' + "".join(parts) + "</div>"


def _class_block(view: CardView) -> str:
    d = view.diff or {}
    parts = ['<div class="plots">', _class_side(f"{view.sides[0]} class", view.before)]
    if view.after is not None:
        parts.append(_class_side(f"{view.sides[1]} class", view.after))
    parts.append("</div>")
    if d:
        parts.append(f"<p>Hypothesis: {esc(d.get('hypothesis'))}</p>")
        parts.append(f"<p>Class: {esc(d.get('class_transition') or '')}</p>")
        parts.append(f"<p>Experiment's check <code>{esc(d.get('check'))}</code>: <b>{esc(d.get('verdict'))}</b>: "
                     f"{esc(d.get('verdict_detail'))}</p>")
        parts.append(f"<p>The card's own check &ldquo;{esc(d.get('card_check') or 'none')}&rdquo;: "
                     f"<b>{esc(d.get('card_verdict') or 'n/a')}</b>: {esc(d.get('card_verdict_detail') or '')}</p>")
        deltas = d.get("metric_deltas") or {}
        if deltas:
            rows = [[esc(k)] + [Num(fmt(v.get(side), 3)) for side in ("before", "after", "delta")]
                    for k, v in deltas.items()]
            parts.append(html_table(["check metric", "before", "after", "delta"], rows))
        for note in d.get("notes") or []:
            parts.append(f"<p><b>{esc(note)}</b></p>")
    return "".join(parts)


def _correctness_block(view: CardView) -> str:
    c = (view.after.extra.get("correctness") if view.after else None) or {}
    if not c:
        where = f"on the {view.sides[1]} card" if view.after is not None else f"(no {view.sides[1]} card)"
        return f'<p class="note">no correctness record {where}</p>'
    rows = [[esc(k), esc(fmt(c.get(k), 3) if not isinstance(c.get(k), float) else f"{c[k]:.3e}")]
            for k in ("max_abs", "max_rel", "bound", "derivation", "baseline_error", "precision", "feasible", "note")
            if k in c]
    return html_table([f"correctness ({view.sides[1]} output vs the float64 reference)", ""], rows)


def _roofline_block(view: CardView) -> str:
    sides = [(view.sides[0], view.before)] + ([(view.sides[1], view.after)] if view.after is not None else [])
    roofs: list[Roofs] = []
    for _, card in sides:
        roof = device_roofs(card)
        if roof and all((r.compute_flops_s, r.bandwidth_bytes_s) != (roof.compute_flops_s, roof.bandwidth_bytes_s)
                        for r in roofs):
            roofs.append(roof)
    if not roofs:
        return '<p class="note">roofline: no device peaks recorded on these cards (extra["peaks"])</p>'
    placed = roofline_points(sides)
    if placed is None:
        return '<p class="note">roofline: no FLOPs, bytes or time to place the cards</p>'
    points, basis = placed
    return (f'<figure>{roofline_svg(roofs, points)}<figcaption>Roofline: achieved FLOP/s = workload FLOPs / '
            f"timing median; {esc(basis)}. Roofs are the profiler's peaks.</figcaption></figure>")


def card_section(view: CardView) -> str:
    d = view.diff or {}
    if view.after is None:
        head = (f"<p><b>No {esc(view.sides[1])} for this card</b>: {esc(view.missing_reason)}. "
                f"{esc(view.sides[0].capitalize())} {fmt(card_time_us(view.before), 1)} us "
                f"({esc(time_basis(view.before))}).</p>")
    else:
        sums = kernel_sum_text(d.get("kernel_sum_us") or {}, d.get("calls") or {})
        head = (f"<p>{fmt(d.get('before_us'), 2)} us -&gt; {fmt(d.get('after_us'), 2)} us "
                f"({esc(d.get('time_basis'))}), {esc(_speedup(d))}, {_verdict_cell(d)}"
                + (f"; {esc(_outcome(d))}" if _outcome(d) else
                   f"; variant <code>{esc(_variant(view.after))}</code>" if _variant(view.after) else "")
                + "</p>"
                + (f"<p>Kernels, the profiler's durations (not the time above): {esc(sums)}</p>"
                   if sums and d.get("time_basis") == TIMING_BASIS else "")
                + (f'<p class="note">{esc(d.get("verdict_rule"))}</p>' if d.get("verdict_rule") else ""))
    return (f'<section class="card" id="{anchor(view.card_id)}"><h2><code>{esc(view.card_id)}</code></h2>{head}'
            f"<h3>Kernels</h3>{_kernel_block(view)}"
            f"<h3>Classification</h3>{_class_block(view)}"
            f"<h3>Correctness</h3>{_correctness_block(view)}"
            f"<h3>Roofline</h3>{_roofline_block(view)}"
            + (f"<h3>Search</h3>{study_block(view.study)}" if view.study is not None else "")
            + "</section>")


def page(title: str, intro: str, views: list[CardView], tail: str = "", overview: str = "") -> str:
    """The page: `intro`, the summary table, `overview` (a run's end-to-end view and recipe), the cards, `tail`."""
    sections = "".join(card_section(v) for v in views)
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body>"
        f"<h1>{esc(title)}</h1>{intro}<h2>Summary</h2>{summary_table(views)}"
        f'<p class="note">{esc(VERDICT_RULE_TEXT)}</p>'
        f"{overview}{sections}{tail}"
        f'<p class="note">Generated {esc(time.strftime("%Y-%m-%d %H:%M:%S"))} by harness.report.html.</p>'
        "</body></html>\n"
    )


# ---------------------------------------------------------------------------------------------
# Entry points


def _experiment(baseline: Report) -> str | None:
    """The experiment the run measured, from its cards' harness label."""
    return next(((c.extra.get("harness") or {}).get("experiment") for c in baseline.cards), None)


def render_run_html(run_dir: Path) -> str:
    """The page for one run directory (baseline.json is required; every other file is optional)."""
    run_dir = Path(run_dir)
    files = read_run_files(run_dir)
    views = _views(files.baseline, files.tried, files.diff, ("baseline", "variant"))
    for view, study in zip(views, load_studies([view.before for view in views], files.storage)):
        view.study = study
        if view.after is None:
            view.missing_reason = missing_reason(study)
    experiment = _experiment(files.baseline)
    tail = calibration_section(run_dir)  # predicted before measuring, against measured (harness.predict)
    # What won, by how much, how sure and what next first; the run's bookkeeping collapsed under it.
    intro = (glance_section(read_glance(run_dir), files.run.get("noise"), resume_step(files.run))
             + run_details(run_dir, files, experiment) + reproduction_html(files.reproduction))
    return page(f"harness run: {experiment or run_dir.name}", intro, views, tail, overview_sections(files))


def render_diff_html(diff: ReportDiff, before: Report, after: Report, title: str, note: str = "") -> str:
    """The page for `python -m harness.report diff --html`: no study, the rest as for a run.

    `note` says what kind of comparison this is (harness.cards.diff_sides.comparison_note), e.g. two runs' cards."""
    views = _views(before, after, diff.as_dict(), ("before", "after"))
    for view in views:
        if view.after is None:
            view.missing_reason = "only in the before report"
    intro = (f"<p>before: <code>{esc(before.source)}</code><br>after: <code>{esc(after.source)}</code></p>"
             + (f"<p><b>{esc(note)}</b></p>" if note else ""))
    if diff.only_after:
        intro += "<p>Only in after: " + ", ".join(f"<code>{esc(c)}</code>" for c in diff.only_after) + "</p>"
    return page(title, intro, views)


def render_index_html(title: str, summary: str, head: str = "") -> str:
    """A page over several runs (experiment=auto, a multirun): their summary.md as HTML, its tables as tables and
    its links (to each run's report.html and summary.md) as links; `head` (their runs at a glance:
    harness.report.glance_html) under its title."""
    first, _, rest = summary.partition("\n")
    titled = first.startswith("# ")
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body>"
        f"{markdown_to_html(first) if titled else ''}{head}{markdown_to_html(rest if titled else summary)}"
        "</body></html>\n"
    )


def write_run_html(run_dir: Path) -> Path:
    """Render run_dir/report.html from the run's files; returns its path."""
    return write_text_atomic(Path(run_dir) / "report.html", render_run_html(Path(run_dir)))
