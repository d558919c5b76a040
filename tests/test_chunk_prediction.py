"""A chunk's speedup predicted from its op cards, and the op cards whose win did not carry over (planted)."""

from __future__ import annotations

import pytest

from harness.trial.chunks import not_carried_over, predicted_speedup

BREAKDOWN = [
    {"card": "a", "before_us": 100.0, "after_us": 100.0},  # 1.5x alone, unchanged inside: lost
    {"card": "b", "before_us": 100.0, "after_us": 70.0},   # 1.5x alone, 1.43x inside: carried over
    {"card": "c", "before_us": 100.0, "after_us": 100.0},  # 1.02x alone: within the band, no win to lose
    {"card": "other", "before_us": 100.0, "after_us": 100.0},
]
ALONE = {"a": 1.5, "b": 1.5, "c": 1.02}


def test_the_prediction_weights_each_cards_speedup_by_its_time_in_the_chunk():
    predicted, covered = predicted_speedup(BREAKDOWN, ALONE)
    # 400 us before; after: 100/1.5 + 100/1.5 + 100/1.02 + 100 (other unchanged)
    assert predicted == pytest.approx(400 / (200 / 1.5 + 100 / 1.02 + 100))
    assert covered == pytest.approx(0.75)


def test_only_wins_beyond_the_band_that_vanish_inside_the_chunk_are_listed():
    assert not_carried_over(BREAKDOWN, ALONE, band=0.05) == ["a 1.50x -> 1.00x"]
