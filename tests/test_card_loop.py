"""The run's card loop (harness.run.execute): a later card's one-line error, of whatever kind, leaves the page
of the cards finished before it."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.cards.dtype import DtypeError
from harness.cards.model import load_report
from harness.run import execute
from harness.run.state import CardOutcome, RunError


@pytest.mark.parametrize("error", [RunError("card b: the baseline base failed"),
                                   DtypeError("precision[0]: give at least a dtype")])
def test_a_later_cards_error_leaves_the_finished_cards_page(tmp_path: Path, monkeypatch, error):
    cards = load_report().cards[:2]  # the shipped report's
    pages: list[Path] = []
    written: list[list[str]] = []

    def run_card(ctx, card, report_path):
        if card is cards[1]:
            raise error
        return CardOutcome(card.id, card, card)

    monkeypatch.setattr(execute, "run_card", run_card)
    monkeypatch.setattr(execute, "write_outputs", lambda ctx, outcomes: written.append([o.card_id for o in outcomes]))
    monkeypatch.setattr(execute, "write_page", pages.append)
    ctx = SimpleNamespace(run_dir=tmp_path, progress=None, cfg=SimpleNamespace(report=None))
    with pytest.raises(type(error)):
        execute._run_cards(ctx, cards)  # type: ignore[arg-type]
    assert written == [[cards[0].id]] and pages == [tmp_path]
