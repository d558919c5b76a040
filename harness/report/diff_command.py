"""`python -m harness.report diff`: two reports matched by card id, as Markdown, JSON or the page; each side a
report file or a run folder.

A run folder as the before side is its baseline (baseline.json: each card re-profiled as the report has it), as
the after side its best (best.json: each card's adopted variant, the baseline where none was adopted). One folder
alone is that run's baseline against its best; two folders, the first's baseline against the second's best (a
second round against the first's start). A folder holding runs one level down (an `experiment=auto` run's
sub-runs, a multirun's jobs) is an error naming them. The diff says which files it read.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from harness.cards.atomic import write_text_atomic
from harness.cards.diff import diff_reports
from harness.cards.diff_markdown import render_markdown
from harness.cards.diff_rows import ReportDiff
from harness.cards.diff_sides import comparison_note, side_name
from harness.cards.lint import lint_report
from harness.cards.model import Report, load_report
from harness.cards.reproduce import reported_device
from harness.cards.rules import RuleSet, classify_report
from harness.errors import HarnessError

SIDE_FILES = {"before": ("baseline.json", "its baseline"), "after": ("best.json", "its best: the adopted variants")}


class DiffError(HarnessError):
    """What the diff cannot do with its arguments (a side neither a report nor a run folder, no card in common, a
    page it cannot write); one line, with what to pass instead."""


def resolve_side(path: str | Path, side: str) -> tuple[Path, str]:
    """The report file `path` names for `side` ("before" or "after"), and how the diff names it."""
    path = Path(path)
    if not path.is_dir():
        return path, str(path)
    name, what = SIDE_FILES[side]
    found = path / name
    if found.is_file():
        return found, f"{found} ({what})"
    runs = sorted(p.parent.name for p in path.glob(f"*/{name}"))
    if runs:
        raise DiffError(f"{path}: no {name} here, but in the runs it holds (an experiment=auto folder's sub-runs, a "
                        "multirun's jobs); give one of them: " + ", ".join(str(path / run) for run in runs))
    raise DiffError(f"{path}: a folder with no {name}: give a run folder (its baseline.json is the before side, its "
                    "best.json the after side) or a report file")


def resolve_sides(before: str, after: str | None) -> tuple[tuple[Path, str], tuple[Path, str]]:
    """Both sides; `after` None: `before` must be a run folder, read as its baseline against its best."""
    if after is None and not Path(before).is_dir():
        raise DiffError(f"{before}: one argument must be a run folder (its baseline against its best); give AFTER "
                        "to diff two report files")
    return resolve_side(before, "before"), resolve_side(after if after is not None else before, "after")


def cmd_diff(args: argparse.Namespace) -> int:
    """The diff of args.before and args.after (files or run folders), printed and written where asked."""
    rules = RuleSet()
    (before_path, before_read), (after_path, after_read) = resolve_sides(args.before, args.after)
    if (before_path, after_path) != (Path(args.before), Path(args.after or "")):  # a run folder: say what was read
        print(f"before: {before_read}\nafter: {after_read}", file=sys.stderr)  # stderr: stdout is the diff
    args.before, args.after = str(before_path), str(after_path)
    before = classify_report(lint_report(load_report(args.before)).normalized, rules)
    after = classify_report(lint_report(load_report(args.after)).normalized, rules)
    # The side whose cards record no environment is a report's: judged where that report says it was profiled.
    device = args.report_device or reported_device(before) or reported_device(after)
    diff = diff_reports(before, after, report_device=device)
    if not diff.cards:
        raise DiffError(f"{args.before} and {args.after} share no card id; nothing to compare")
    # Named by each side's folder, experiment and variant: two best.json files are otherwise indistinguishable.
    title = f"{side_name(before, args.before)} vs {side_name(after, args.after)}"
    note = comparison_note(before, after)
    markdown = render_markdown(diff, title, note)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(markdown, encoding="utf-8")
    if args.html:
        _write_page(diff, before, after, args, title, note)
    if args.json:
        print(json.dumps({"title": title, "comparison": note, **diff.as_dict()}, indent=1))
    else:
        print(markdown)
    return 0


def _write_page(diff: ReportDiff, before: Report, after: Report, args: argparse.Namespace, title: str,
                     note: str) -> None:
    from harness.report.html import render_diff_html  # matplotlib: only when asked

    target = Path(args.html)
    if target.is_dir():  # before rendering: a page of many cards takes seconds
        raise DiffError(f"{target}: is a directory; give a file name, e.g. {target / 'diff.html'}")
    page = render_diff_html(diff, before, after, title=title, note=note)
    try:
        write_text_atomic(target, page)
    except (FileExistsError, NotADirectoryError):
        raise DiffError(f"{target}: cannot write the HTML report (a parent of it is a file, not a folder)") from None
    except OSError as exc:
        raise DiffError(f"{target}: cannot write the HTML report ({exc.strerror or exc})") from None
