"""What the run's page reads from a run directory: its reports, diff, run facts, summary and Optuna storage.

Only baseline.json is required: a baseline-only experiment tries no variant, and a run stopped early has
not written everything, so every other file is optional. An absent or unreadable one reads as empty,
and the page says what is missing instead of failing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from harness.cards.model import Report, ReportError, load_report
from harness.search.storage import default_storage, journal_path


@dataclass
class RunFiles:
    baseline: Report
    tried: Report | None  # the best variant each search tried, adopted or not (the diff's after side)
    diff: dict[str, Any]  # diff.json ({} when absent)
    run: dict[str, Any]  # run.json ({} when absent)
    storage: str | None  # the Optuna storage URL, None when the run has none
    summary: str | None  # summary.md
    recipe: str | None  # recipe.md
    reproduction: dict[str, Any]  # reproduction.json: the baselines' reproduce verdicts, on a GPU ({} elsewhere)


def read_run_files(run_dir: Path) -> RunFiles:
    """The run directory's files (baseline.json is required: its absence raises ReportError)."""
    baseline = load_report(run_dir / "baseline.json")
    try:
        tried: Report | None = load_report(run_dir / "tried.json")
    except ReportError:
        tried = None
    run = _read_json(run_dir / "run.json")
    return RunFiles(baseline, tried, _read_json(run_dir / "diff.json"), run, _storage_url(run_dir, run),
                    _read_text(run_dir / "summary.md"), _read_text(run_dir / "recipe.md"),
                    _read_json(run_dir / "reproduction.json"))


def _read_text(path: Path) -> str | None:
    """An optional Markdown file of the run; None when absent or unreadable."""
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return None


def _read_json(path: Path) -> dict[str, Any]:
    """An optional run file: absent or unreadable gives {} (the page says what is missing)."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _storage_url(run_dir: Path, run: Mapping[str, Any]) -> str | None:
    """run.json's storage if it can be read without creating anything, else the run dir's own studies
    (harness.search.storage.default_storage) if they are there."""
    url = run.get("storage")
    if isinstance(url, str) and url:
        journal = journal_path(url)
        if journal is not None:
            return url if journal.is_file() else None
        if not url.startswith("sqlite:///") or Path(url[len("sqlite:///"):]).is_file():
            return url
    own = default_storage(run_dir)
    return own if (journal_path(own) or Path(own[len("sqlite:///"):])).is_file() else None
