"""A report whose cards repeat an id is read, linted and run, not refused (issue 31): the later card is read
under `<id>-2` with a note, lint says so (duplicate_id), and a run's summary.md has one line about it."""

import copy
import subprocess
import sys
from pathlib import Path

from harness.cards.findings import SEVERITY, WARNING
from harness.cards.lint import lint_report
from harness.cards.model import load_report, parse_report, save_report

ROOT = Path(__file__).resolve().parents[2]


def _twice(tmp_path: Path, index: int = 3) -> tuple[Path, str]:
    """The shipped report's card `index` twice, as the issue's capture wrote its two cat groups."""
    report = load_report()
    card = report.cards[index]
    report.cards = [card, copy.deepcopy(card)]
    report.summary = report.by_stage = None
    path = tmp_path / "dup.json"
    save_report(report, path)
    return path, card.id


def test_a_repeated_id_is_read_under_a_new_one_with_a_note(tmp_path):
    path, stored = _twice(tmp_path)
    report = load_report(path)
    assert [c.id for c in report.cards] == [stored, f"{stored}-2"]
    assert report.cards[1].extra["id_renamed"] == {"stored_id": stored, "card": 1, "same_as_card": 0}
    assert report.card(f"{stored}-2") is report.cards[1]
    # An id already taken by a third card is skipped over: never two cards under one id.
    obj = {"cards": [{"group": "g", "stage": "s", "op": "o", "kernels": [], "id": i} for i in ("a", "a", "a-2")]}
    assert [c.id for c in parse_report(obj).cards] == ["a", "a-3", "a-2"]
    # Read again (a run's worker, the ncu child), the same names.
    assert [c.id for c in load_report(path).cards] == [c.id for c in report.cards]


def test_lint_names_the_duplicate_as_a_warning(tmp_path):
    path, stored = _twice(tmp_path)
    found = [f for f in lint_report(load_report(path)).findings if f.code == "duplicate_id"]
    assert len(found) == 1 and found[0].card == f"{stored}-2" and stored in found[0].detail
    assert SEVERITY["duplicate_id"] == WARNING
    lint = subprocess.run([sys.executable, "-m", "harness.report", "lint", str(path)], capture_output=True,
                          text=True, cwd=ROOT)
    assert lint.returncode == 1 and "duplicate_id" in lint.stdout, lint.stdout + lint.stderr


def test_a_reprofile_of_a_report_with_a_repeated_id_runs_both_cards(tmp_path):
    path, stored = _twice(tmp_path)  # a linear of M=3: seconds on any CPU
    run = subprocess.run([sys.executable, "-m", "harness", "experiment=reprofile", f"report={path}",
                          f"cards=[{stored},{stored}-2]", "device=cpu", f"hydra.run.dir={tmp_path / 'run'}",
                          "timing.budget_s=0.05"], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    summary = (tmp_path / "run" / "summary.md").read_text()
    notes = [line for line in summary.splitlines() if "duplicate_id" in line]
    assert notes == [f"- card 1 has the id `{stored}` of card 0: read as `{stored}-2` (duplicate_id)"]
    assert f"| `{stored}` |" in summary and f"| `{stored}-2` |" in summary
    assert {c.id for c in load_report(tmp_path / "run" / "baseline.json").cards} == {stored, f"{stored}-2"}
