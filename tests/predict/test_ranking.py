"""`auto` ranks its plan by predicted saving: a card's time in the model x the fraction its best configuration is
predicted to save (harness.predict.report_rows.best_savings, harness.run.auto.plan_entries)."""

from __future__ import annotations

import pytest

from harness.cards.model import Card, Kernel, Report
from harness.predict.prediction import Prediction
from harness.predict.report_rows import best_savings
from harness.run.auto import write_plan


def _card(n: int, us: float) -> Card:
    return Card(group=f"g{n}", resolution="480x832", stage="dit", op="aten.linear.default",
                shape_parameters={"M": n, "N": n, "K": n}, kernels=[Kernel(name="nvjet", metrics={"dur_us": us})],
                summed_kernel_us=us, primary="compute_bound")


def _row(card: Card, variant: str, speedup: float | None) -> Prediction:
    return Prediction(card.id, "e", variant, {"k": 2}, "planted", speedup, [speedup, speedup] if speedup else None,
                      None, None, "planted")


@pytest.fixture
def report() -> Report:
    # 1000 us in the model at 1.25x saves 200 us; 300 us at 4x saves 225 us: the cheaper card saves more.
    return Report(cards=[_card(1024, 1000.0), _card(256, 300.0)])


def test_each_cards_best_saving_is_its_time_in_the_model_times_the_fraction_saved(report):
    big, small = report.cards
    rows = [_row(big, "a", 1.25), _row(big, "b", 1.1), _row(small, "a", 4.0), _row(small, "b", None)]
    best = best_savings(rows, {c.id: c for c in report.cards})
    assert best[big.id][0].variant == "a" and best[big.id][1] == pytest.approx(1000.0 * (1 - 1 / 1.25))
    assert best[small.id][1] == pytest.approx(300.0 * (1 - 1 / 4.0))


def test_the_plan_lists_the_largest_predicted_saving_first(report, tmp_path):
    big, small = report.cards
    best = best_savings([_row(big, "a", 1.25), _row(small, "a", 4.0)], {c.id: c for c in report.cards})
    text = write_plan(report, {}, [], tmp_path, "0" * 64, unavailable={}, device="cpu", predicted=best)
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert rows[0].startswith(f"| `{small.id}` | compute_bound | 300.0 (calls not known) | 225.0 (e: a(k=2) 4.00x) |")
    assert rows[1].startswith(f"| `{big.id}` | compute_bound | 1000.0 (calls not known) | 200.0 (e: a(k=2) 1.25x) |")
    without = write_plan(report, {}, [], tmp_path, "0" * 64, unavailable={}, device="cpu")
    assert [line for line in without.splitlines() if line.startswith("| `")][0].startswith(f"| `{big.id}`")
