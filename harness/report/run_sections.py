"""The run page's sections besides its cards: the run's bookkeeping (collapsed), the reproduction of the report,
and the end-to-end view and the recipe, rendered from the run's own Markdown (summary.md, recipe.md)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from harness.cards.cells import fmt
from harness.report.html_parts import Num, esc, html_table
from harness.report.markdown_html import markdown_to_html
from harness.report.run_files import RunFiles

END_TO_END_HEADING = "## End to end"
RUN_FILES = ("summary.md", "diff.md", "diff.json", "recipe.md", "baseline.json", "best.json", "tried.json",
             "run.json", "glance.json", "trials/")


def run_details(run_dir: Path, files: RunFiles, experiment: str | None) -> str:
    """The run's facts, phases and environment, collapsed: bookkeeping, not results."""
    run, baseline, storage = files.run, files.baseline, files.storage
    env = run.get("environment") or {}
    facts = [["run directory", f"<code>{esc(run_dir)}</code>"], ["experiment", esc(experiment or "n/a")],
             ["device", esc(f"{env.get('device_name') or 'n/a'} ({env.get('device_kind') or '?'})")],
             ["scope", esc(baseline.scope or "")], ["Optuna storage", f"<code>{esc(storage or 'none')}</code>"],
             ["files", " ".join(f"<code>{esc(name)}</code>" for name in RUN_FILES
                                if (run_dir / name.rstrip("/")).exists())]]
    for name, value in (run.get("phases") or {}).items():
        facts.append([esc(name), Num(esc(fmt(value, 2)))])
    env_rows = [[esc(k), esc(v)] for k, v in env.items()]
    details = f"<details><summary>environment</summary>{html_table(['key', 'value'], env_rows)}</details>"
    wall = (run.get("phases") or {}).get("wall_s")
    said = f"{esc(env.get('device_name') or 'n/a')}" + (f", {fmt(wall, 1)} s" if wall is not None else "")
    return (f'<details id="run"><summary>run: {said}; its folder, files, phases and environment</summary>'
            f"{html_table(['run', ''], facts)}{details if env_rows else ''}</details>")


def reproduction_html(reproduction: dict[str, Any]) -> str:
    """The baselines' reproduction verdicts against the report (harness.cards.reproduce), on a GPU."""
    cards = reproduction.get("cards") or []
    if not cards:
        return ""
    rows = [[f"<code>{esc(c['card'])}</code>", f"<b>{esc(c['verdict'])}</b>", Num(esc(fmt(c.get('time_ratio'), 2))),
             esc(", ".join(c.get("families_report") or [])), esc(", ".join(c.get("families_here") or [])),
             esc(c.get("dtype_here") or ""), esc(c.get("reason") or "")] for c in cards]
    return (f"<h2>Reproduction of the report ({esc(reproduction.get('report_device') or 'no GPU named')})</h2>"
            + html_table(["card", "verdict", "time x report", "report's kernels", "kernels here", "built in", "why"],
                         rows))


def markdown_part(markdown: str | None, heading: str) -> str:
    """The part of `markdown` from the line starting with `heading` to the next heading of its level or above."""
    if not markdown:
        return ""
    lines = markdown.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(heading)), None)
    if start is None:
        return ""
    level = len(heading) - len(heading.lstrip("#"))
    end = next((i for i in range(start + 1, len(lines)) if re.match(rf"#{{1,{level}}}\s", lines[i])), len(lines))
    return "\n".join(lines[start:end])


def demoted(markdown: str) -> str:
    """`markdown` with each heading one level down: a file's title becomes a section of the page."""
    return "\n".join("#" + line if re.match(r"#{1,5}\s", line) else line for line in markdown.splitlines())


def overview_sections(files: RunFiles) -> str:
    """The end-to-end view (from summary.md) and recipe.md, as HTML."""
    end_to_end = markdown_part(files.summary, END_TO_END_HEADING)
    parts = [f'<section id="end-to-end">{markdown_to_html(end_to_end)}</section>' if end_to_end else "",
             f'<section id="recipe">{markdown_to_html(demoted(files.recipe))}</section>' if files.recipe else ""]
    return "".join(parts)
