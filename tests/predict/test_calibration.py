"""Calibration figures and ncu's rule estimates, on planted rows and cards (harness.predict.calibration)."""

from __future__ import annotations

import pytest

from harness.cards.model import parse_report
from harness.predict.calibration import calibrate, ncu_calibration, ncu_estimate, with_measured
from harness.predict.prediction import Prediction


def planted(speedup: float | None, interval: list[float] | None, card: str = "c") -> Prediction:
    return Prediction(card, "e", "v", {}, "planted", speedup, interval, None, None, "planted")


def test_the_figures_are_the_median_error_the_share_inside_and_the_median_width():
    rows = [with_measured(planted(1.2, [1.0, 1.5]), 1.0),  # error +20%, on the interval's edge: inside
            with_measured(planted(2.0, [1.5, 2.5]), 2.2),  # error 2.0 / 2.2 - 1 = -9.1%, inside
            with_measured(planted(3.0, [2.9, 3.1]), 1.5),  # error +100%, outside
            with_measured(planted(None, None), 1.1),  # measured, no number
            planted(1.3, [1.0, 2.0])]  # not measured: not scored
    figures = calibrate(rows)
    assert figures.scored == 3 and figures.unpredicted == 1
    assert figures.median_abs_error == pytest.approx(0.2)
    assert figures.inside == pytest.approx(2 / 3)
    assert figures.median_width == pytest.approx(1.5)  # of 1.5 / 1.0, 2.5 / 1.5 and 3.1 / 2.9
    assert rows[1].error == pytest.approx(2.0 / 2.2 - 1)
    assert "3 measured: median |error| 20.0%, 2 of 3 (67%) inside" in figures.line()


def test_nothing_measured_says_so():
    assert calibrate([planted(1.2, [1.0, 1.5])]).line() == "no prediction measured yet"


def _card_with_rules(rules_a: list, rules_b: list):
    kernels = [{"kernel": "k_a", "metrics": {"dur_us": 40.0}, "ncu_rules": rules_a},
               {"kernel": "k_b", "metrics": {"dur_us": 60.0}, "ncu_rules": rules_b}]
    return parse_report({"cards": [{"group": "g", "resolution": "480x832", "stage": "vae", "op": "aten.conv3d.default",
                                    "shape_parameters": {"input": [1, 8, 3, 10, 10], "weight": [8, 8, 3, 3, 3],
                                                         "output": [1, 8, 1, 8, 8]},
                                    "summed_kernel_us": 100.0, "kernels": kernels}]}).cards[0]


def rule(speedup, kind, rule_id="R"):
    return {"id": rule_id, "name": rule_id, "section": "S", "title": "t", "message_type": "optimization",
            "speedup": speedup, "speedup_type": kind}


def test_ncus_estimate_is_its_best_rule_as_a_share_of_the_cards_time():
    """A local 50% on the 40 us kernel saves 20 us of 100 (0.2); a global 10% saves 0.1 of the card: the best is
    0.2, a speedup of 1 / 0.8. A payload ncu gave as text or without a type is not an estimate."""
    card = _card_with_rules([rule(50.0, "local", "L")], [rule(10.0, "global", "G"), rule("x", "global"),
                                                          rule(30.0, None)])
    estimate = ncu_estimate(card)
    assert estimate is not None and estimate.speedup == pytest.approx(1.25) and estimate.rule.startswith("L 50%")
    assert ncu_estimate(_card_with_rules([], [])) is None


def test_ncus_estimates_are_scored_on_the_measured_rows_of_the_cards_that_carry_them():
    card = _card_with_rules([rule(20.0, "global")], [])
    rows = [with_measured(planted(1.1, [1.0, 1.2], card.id), 1.5), planted(1.1, [1.0, 1.2], "other")]
    figures, entries = ncu_calibration(rows, {card.id: card})
    assert figures.scored == 1 and figures.median_abs_error == pytest.approx(abs(1.25 / 1.5 - 1))
    assert entries[0]["speedup"] == pytest.approx(1.25) and figures.inside is None
