"""The page's first section, `<section id="at-a-glance">`: the machine's noise verdict, a line per card (what won,
by how much, how sure, what it saves), the forest plot of every measured variant, and the next commands to copy.

The same for one run's page and for the pages over several runs (an `experiment=auto` run, a multirun), whose rows
link to the run each comes from.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence
from urllib.parse import quote

from harness.cards.diff_markdown import interval_text
from harness.report.forest import forest_svg, plotted
from harness.report.glance import Glance, GlanceRow
from harness.report.html_parts import Num, esc, html_table
from harness.report.markdown_html import inline_html
from harness.report.next_steps import NextStep
from harness.report.savings import NOT_APPLICABLE

FOREST_CAPTION = ("Each card's best variant tried against its baseline: the point is the speedup (the geometric mean "
                  "of the paired confirm rounds' ratios), the bar its 95% interval, the grey band the SAME band the "
                  "time verdict was judged against; filled diamonds were adopted (best.json), hollow circles not.")


def noise_html(noise: Mapping[str, Any] | None) -> str:
    """The run's noise verdict (harness.run.noise): quiet, or noisy with what to do, and why under it."""
    if not noise:
        return ""
    if noise.get("verdict") == "quiet":
        return f'<div id="noise" class="note">Machine: quiet ({esc(noise.get("summary") or "")}).</div>'
    reasons = noise.get("reasons") or []
    why = "".join(f"<li>{esc(reason)}</li>" for reason in reasons)
    return (f'<div id="noise" role="alert"><b>Machine: noisy</b>: {inline_html(noise.get("advice") or "")}.'
            f'<details><summary>why: {len(reasons)} measurement(s) of this machine</summary><ul>{why}</ul>'
            "</details></div>")


def _reasons(row: GlanceRow) -> list[str]:
    """Why a row's saving is not known, each reason apart (harness.report.savings joins them with '; ')."""
    return [why for why in row.saving_why.split("; ") if why] or ["not known"]


def _rows_table(rows: Sequence[GlanceRow], several: bool) -> str:
    """The rows; an unknown saving reads n/a with its reasons' numbers, each reason said once under the table."""
    linked = any(r.run for r in rows)
    reasons = list(dict.fromkeys(why for r in rows if r.saving_us is None for why in _reasons(r)))
    header = ["card", *(["experiment"] if several else []), "outcome", "speedup [95% CI]", "time verdict",
              "saves us in the model", *(["run"] if linked else [])]
    body = []
    for r in rows:
        verdict = f'<span class="{esc(r.verdict)}">{esc(r.verdict)}</span>' if r.verdict else "n/a"
        saving = (Num(f"{r.saving_us:.1f}") if r.saving_us is not None
                  else f"{NOT_APPLICABLE} ({', '.join(str(reasons.index(why) + 1) for why in _reasons(r))})")
        run = f'<a href="{esc(quote(r.run))}/report.html">{esc(r.run)}</a>' if r.run else ""
        body.append([f"<code>{esc(r.card)}</code>", *([esc(r.experiment)] if several else []), esc(r.outcome),
                     Num(esc(interval_text(r.speedup, r.ci))), verdict, saving, *([run] if linked else [])])
    why = "; ".join(f"({n}) {esc(reason)}" for n, reason in enumerate(reasons, 1))
    return html_table(header, body) + (f'<p class="note">Saving {NOT_APPLICABLE}: {why}.</p>' if reasons else "")


def _steps_html(steps: Sequence[NextStep]) -> str:
    if not steps:
        return '<p class="note">Next: nothing to run; every card\'s time verdict is decided.</p>'
    items = "".join(f"<li>{inline_html(step.why)}:<pre><code>{esc(step.command)}</code></pre></li>" for step in steps)
    return f'<h3>Next</h3><ul class="next">{items}</ul>'


def glance_section(glance: Glance | None, noise: Mapping[str, Any] | None = None,
                   resume: NextStep | None = None) -> str:
    """The section; `resume`, a stopped run's resume step, goes first among the next commands."""
    steps = [*([resume] if resume else []), *(glance.next if glance else [])]
    if glance is None or not glance.rows:
        body = '<p class="note">No card finished yet: nothing to show at a glance.</p>'
        if not steps:
            return f'<section id="at-a-glance"><h2>At a glance</h2>{noise_html(noise)}{body}</section>'
    else:
        forest = forest_svg(glance.rows)
        figure = (f'<figure class="forest">{forest}<figcaption>{esc(FOREST_CAPTION)}</figcaption></figure>'
                  if forest else "")
        drawn = len(plotted(glance.rows))
        body = (_rows_table(glance.rows, glance.several_experiments()) + figure
                + ("" if drawn == len(glance.rows) else
                   f'<p class="note">{len(glance.rows) - drawn} card(s) had no variant timed: not drawn.</p>'))
    return f'<section id="at-a-glance"><h2>At a glance</h2>{noise_html(noise)}{body}{_steps_html(steps)}</section>'
