"""What a win must survive is one list (harness.trial.checks): README's table says exactly it, and the worker runs
every check under a name from it."""

from __future__ import annotations

import re
from pathlib import Path

from harness.trial.checks import BY_NAME, CHECKS

REPO = Path(__file__).resolve().parents[1]
RUNS_THEM = ("harness/trial/measure.py", "harness/trial/server.py", "harness/trial/handlers.py")


def _readme_rows() -> list[list[str]]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text[text.index("### What a win must survive"):]
    table = section[section.index("| check |"):section.index("\n\n", section.index("| check |"))]
    return [[cell.strip() for cell in row.strip().strip("|").split(" | ")] for row in table.splitlines()[2:]]


def test_the_readme_table_is_the_list_in_its_order():
    rows = _readme_rows()
    assert [row[0].strip("`") for row in rows] == [check.name for check in CHECKS]
    for row, check in zip(rows, CHECKS):
        assert row[1] == ", ".join(phase.value for phase in check.phases), check.name
        assert row[2] == check.mistake, check.name
        assert check.reason in row[4], check.name


def test_the_worker_names_only_listed_checks_and_runs_every_one():
    sources = "\n".join((REPO / path).read_text(encoding="utf-8") for path in RUNS_THEM)
    # look("name", ...), held("name"), and the tuples of names handed to them
    used = set(re.findall(r'(?:look|held)\("(\w+)"', sources))
    used |= {name for group in re.findall(r'\(((?:"\w+",?\s*)+)\)', sources) for name in re.findall(r'"(\w+)"', group)
             if name in BY_NAME}
    assert used <= set(BY_NAME), used - set(BY_NAME)
    assert set(BY_NAME) <= used, set(BY_NAME) - used  # a listed check nobody runs is a promise kept by no one
