"""What a win must survive is one list (harness.trial.checks): docs/verdicts.md's table says exactly it, and the worker
runs every check under a name from it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.trial import checks
from harness.trial.checks import BY_NAME, CHECKS, Check, Output, Phase
from harness.trial.measure import TimingSettings
from tests.counted_calls import Counted, measure_counted, small_linear

REPO = Path(__file__).resolve().parents[1]
RUNS_THEM = ("harness/trial/measure.py", "harness/trial/server.py", "harness/trial/handlers.py")


def _readme_rows() -> list[list[str]]:
    text = (REPO / "docs" / "verdicts.md").read_text(encoding="utf-8")
    section = text[text.index("## What a win must survive"):]
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
    used |= {check.name for check in CHECKS if check.judge is not None}  # run on every output of its phases
    used |= {name for group in re.findall(r'\(((?:"\w+",?\s*)+)\)', sources) for name in re.findall(r'"(\w+)"', group)
             if name in BY_NAME}
    assert used <= set(BY_NAME), used - set(BY_NAME)
    assert set(BY_NAME) <= used, set(BY_NAME) - used  # a listed check nobody runs is a promise kept by no one


def _carries_a_graph(output: Output) -> str | None:
    if getattr(output.value, "requires_grad", False):
        return f"its {output.call} call's output carries an autograd graph (it keeps its inputs alive)"
    return None


PLANTED = Check("no_autograd_graph", (Phase.FIRST_CALL, Phase.SECOND_CALL, Phase.TIMED_CALLS),
                "an output that keeps its inputs alive", "carries an autograd graph", judge=_carries_a_graph)


def test_a_judge_of_an_output_at_a_phase_that_hands_it_none_is_refused_when_made():
    """The worker hands outputs to a judge at the first call, the second and the last timed call only: a judge
    listed for the second draw or the confirm rounds would never run, so the check is refused at once."""
    with pytest.raises(ValueError, match="not at second draw, confirm rounds"):
        Check("never_runs", (Phase.FIRST_CALL, Phase.SECOND_DRAW, Phase.CONFIRM), "a mistake", "a reason",
              judge=_carries_a_graph)
    assert Check("not_a_judge", (Phase.CONFIRM,), "a mistake", "a reason").judge is None  # run by name there


class _GraphFrom(Counted):
    """Right values; from call `from_call` on, the output requires grad (a graph a caller would keep)."""

    def __init__(self, workload, from_call: int):
        super().__init__(workload)
        self.from_call = from_call

    def __call__(self):
        out = super().__call__()
        return out.requires_grad_() if self.calls >= self.from_call else out


@pytest.fixture(scope="module")
def linear():
    return small_linear()


@pytest.fixture
def planted(monkeypatch):
    """A new check of an output: one entry in the list, nothing else."""
    monkeypatch.setattr(checks, "CHECKS", (*CHECKS, PLANTED))
    monkeypatch.setattr(checks, "BY_NAME", {**BY_NAME, PLANTED.name: PLANTED})


@pytest.mark.parametrize("from_call,call", [(1, "first"), (2, "second"), (6, "last timed")])
def test_a_new_output_check_is_one_entry_and_runs_at_each_of_its_phases(planted, seed_report, linear,
                                                                         from_call, call):
    fn = _GraphFrom(linear, from_call)  # 6 calls: first, 2 warm-up (the second among them), 3 timed
    m = measure_counted(seed_report, linear, fn, TimingSettings(warmup=2, min_repeats=3, budget_s=0.0))
    assert not m.correctness.feasible and m.timing is None
    assert m.card.extra["checks"]["refused_by"] == "no_autograd_graph"
    assert f"its {call} call's output carries an autograd graph" in m.correctness.note


def test_an_honest_variant_passes_the_new_check(planted, seed_report, linear):
    m = measure_counted(seed_report, linear, Counted(linear), TimingSettings(warmup=2, min_repeats=3, budget_s=0.0))
    assert m.correctness.feasible and "no_autograd_graph" in m.card.extra["checks"]["passed"]
