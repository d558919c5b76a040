"""One bad card never sinks the rest (issue 31): the capture's re-profile against a planted run that fails on
chosen cards the ways a real one does (harness.run.card_search's error lines), without running anything."""

import subprocess

import pytest

from harness.capture import profiling
from harness.capture.pipeline import why_each
from harness.cards.model import Card, Report, save_report


class FakeRuns:
    """`python -m harness experiment=reprofile`: measures its cards in order and writes baseline.json after each
    (as the run does); a card in `named` ends the run with `error: card X: ...`, a card in `silent` with an error
    line that names no card, and `general` (when set) fails every run before any card."""

    def __init__(self, named=(), silent=(), general=None):
        self.named, self.silent, self.general = set(named), set(silent), general
        self.runs: list[list[str]] = []

    def __call__(self, command, **kwargs):
        cards = next(a for a in command if a.startswith("cards=["))[len("cards=["):-1].split(",")
        run_dir = next(a for a in command if a.startswith("hydra.run.dir=")).split("=", 1)[1]
        self.runs.append(cards)
        if self.general:
            return subprocess.CompletedProcess(command, 1, "", f"error: {self.general}\n")
        done = []
        for card_id in cards:
            if card_id in self.named | self.silent:
                why = (f"card {card_id}: the baseline baseline failed: replay raised RuntimeError"
                       if card_id in self.named else "worker died: exit code -9")
                return subprocess.CompletedProcess(command, 1, "", f"some log\nerror: {why}\n")
            done.append(Card(group=card_id, resolution=None, stage="s", op="o", shape_parameters={}, kernels=[],
                             extra={"id": card_id}))
            save_report(Report(cards=done), f"{run_dir}/baseline.json")
        return subprocess.CompletedProcess(command, 0, "", "")


def _profile(tmp_path, monkeypatch, fake, ids):
    monkeypatch.setattr(profiling.subprocess, "run", fake)
    return profiling.profile_cards(tmp_path / "captured.json", tmp_path / "inputs", ids, tmp_path, "cpu", "cpu")


IDS = [f"c{i}" for i in range(8)]


def test_a_named_card_is_left_out_and_the_cards_before_it_are_not_measured_again(tmp_path, monkeypatch):
    fake = FakeRuns(named={"c2", "c5"})
    result = _profile(tmp_path, monkeypatch, fake, IDS)
    assert set(result.cards) == set(IDS) - {"c2", "c5"}
    assert set(result.failed) == {"c2", "c5"} and "replay raised RuntimeError" in result.failed["c5"]
    assert fake.runs == [IDS, ["c3", "c4", "c5", "c6", "c7"], ["c6", "c7"]]  # finished cards kept, not re-run


def test_an_error_naming_no_card_is_narrowed_to_its_card(tmp_path, monkeypatch):
    fake = FakeRuns(silent={"c6"})
    result = _profile(tmp_path, monkeypatch, fake, IDS)
    assert set(result.cards) == set(IDS) - {"c6"}
    assert result.failed == {"c6": "worker died: exit code -9"}


def test_an_error_of_every_run_leaves_every_card_out_with_it_after_one_split(tmp_path, monkeypatch):
    fake = FakeRuns(general="profiler=ncu: ncu is not on PATH")
    result = _profile(tmp_path, monkeypatch, fake, IDS)
    assert not result.cards and set(result.failed) == set(IDS) and len(fake.runs) == 3
    assert why_each(result.failed) == f"{', '.join(IDS)}: profiler=ncu: ncu is not on PATH"


def test_an_id_that_begins_another_is_not_taken_for_it():
    assert profiling._culprit("card x-2: the baseline failed", ["x", "x-2"]) == "x-2"
    assert profiling._culprit("card x: the baseline failed", ["x", "x-2"]) == "x"
    assert profiling._culprit("reprofile cannot run card x on this install: needs diffusers", ["x", "y"]) == "x"
    assert profiling._culprit("worker died", ["x"]) is None


@pytest.mark.parametrize("failed, text", [
    ({"a": "boom", "b": "boom", "c": "bang"}, "a, b: boom; c: bang"),
    ({}, "no reason recorded"),
])
def test_why_each_groups_the_cards_of_one_reason(failed, text):
    assert why_each(failed) == text
