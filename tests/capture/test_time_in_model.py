"""A planted capture whose shares and calls are known: how its cards rank, what the end-to-end view saves, the
scale its cards run at, and the device a report is judged against (a CPU capture, a report declaring H200)."""

from __future__ import annotations

import copy

import pytest

from harness.cards.diff import diff_cards
from harness.cards.labels import transition
from harness.cards.measures import FROM_CALLS, FROM_KERNELS, FROM_SHARE, time_in_model
from harness.cards.model import Card, Kernel, Report, load_report
from harness.cards.reproduce import reported_device
from harness.report.overview import CardResult, render_end_to_end
from harness.run.auto import write_plan
from harness.run.card_search import card_scale
from harness.run.selection import apply_rule

CPU = "Planted EPYC 9000"
FORWARD_US = 1000.0


def _linear(n: int, kernel_us: float, calls: int, share: float | None) -> Card:
    """A captured linear: `kernel_us` per invocation in its re-profile, `calls` calls and `share` of the forward."""
    record: dict = {"calls": calls, "module": "blocks.0"}
    if share is not None:
        record.update(share_of_forward=share, time_us=share * FORWARD_US)
    return Card(group=f"blocks:aten.linear.default:{n}", resolution="16x16", stage="blocks",
                op="aten.linear.default", shape_parameters={"M": n, "N": n, "K": n, "input_dtype": "float32"},
                kernels=[Kernel(name="aten::addmm", metrics={"dur_us": kernel_us})], summed_kernel_us=kernel_us,
                primary="compute_bound", extra={"capture": record, "metrics_source": "cpu_roofline_estimate"})


@pytest.fixture
def captured() -> Report:
    """The issue's case: 24 calls of a 256x256 linear, 56% of the forward, each call cheap; one call of a
    1024x1024 linear, 34%, whose one invocation costs 30 times more."""
    cards = [_linear(1024, 300.0, 1, 0.34), _linear(256, 10.0, 24, 0.56)]
    return Report(cards=cards, extra={"capture": {"device": "cpu", "device_name": CPU, "forward_us": FORWARD_US,
                                                  "stage_us": {"blocks": 950.0}}})


def test_the_costliest_card_is_the_one_that_costs_the_model_most(captured):
    many, one = captured.cards[1], captured.cards[0]
    assert apply_rule(captured, {"costliest": 1}, device="cpu") == [many]  # the kernel sum alone picks `one`
    assert apply_rule(captured, {"cheapest": 1}, device="cpu") == [one]
    found = time_in_model(many)
    assert found is not None and (found.us, found.source, found.calls) == (560.0, FROM_SHARE, 24)
    assert found.line() == "56.0% of the forward, 24 calls"


def test_without_a_share_the_calls_multiply_the_kernel_time_and_without_calls_the_report_time_stands(captured):
    counted = _linear(256, 10.0, 24, None)
    found = time_in_model(counted)
    assert found is not None and (found.us, found.source) == (240.0, FROM_CALLS)
    report_card = load_report().cards[0]  # the shipped report: no capture, no call counts
    found = time_in_model(report_card)
    assert found is not None and (found.us, found.source) == (report_card.summed_kernel_us, FROM_KERNELS)


def _measured(card: Card, median_us: float, device: str = CPU, scale: float = 1.0) -> Card:
    out = copy.deepcopy(card)
    out.extra.update(timing={"median_us": median_us}, workload={"scale": scale, "dtype": "float32"},
                     environment={"device_name": device, "device_kind": "cpu", "hostname": "h"})
    return out


def _confirmed(speedup: float) -> dict:
    return {"verdict": "FASTER", "speedup": speedup, "ci": [speedup * 0.95, speedup * 1.05], "rule": "planted"}


def test_the_end_to_end_view_saves_the_time_in_the_model_times_what_the_variant_saved(captured):
    many, one = captured.cards[1], captured.cards[0]
    device = reported_device(captured)
    assert device == CPU  # a CPU capture names its CPU: no GPU to judge it against
    results = []
    for card in (one, many):
        base = _measured(card, 100.0)
        row = diff_cards(base, _measured(card, 50.0), confirmation=_confirmed(2.0), adopted=True,
                         report_device=device)
        results.append(CardResult(card, "planted", "half", row, measured=base))
    text = render_end_to_end(captured, results, measured_on=CPU, report_device=device)
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert rows[0].startswith(f"| `{many.id}` | blocks | 560.0 | 24 | 58.9% | 56.0% |")  # 560 of 950, of 1000
    assert rows[0].endswith("| 280.0 |")  # 560 us x (1 - 1/2)
    assert rows[1].startswith(f"| `{one.id}` | blocks | 340.0 | 1 |") and rows[1].endswith("| 170.0 |")
    assert "| 16x16 | blocks | 950.0 | 900.0 | 450.0 | 47.4% | 45.00% |" in text  # 450 of 950, of the forward
    assert "the capture's share of the forward (2 cards)" in text and "H200" not in text
    elsewhere = [CardResult(many, "planted", "half", results[1].diff, measured=_measured(many, 100.0, "Other CPU"))]
    assert "not projected" in render_end_to_end(captured, elsewhere, measured_on="Other CPU", report_device=device)


def test_a_captured_card_runs_at_scale_1_unless_the_user_sets_a_scale(captured):
    card, report_card = captured.cards[0], load_report().cards[0]
    assert card_scale(None, 0.25, "cpu", card) == 1.0  # it ran at that size in the forward on this machine
    assert card_scale(None, 0.25, "cpu", report_card) == 0.25  # an H200 report's op shrunk for a CPU
    assert card_scale(None, 0.25, "cuda", report_card) == 1.0
    assert card_scale(0.5, 0.25, "cpu", card) == 0.5  # the user's scale is honoured


def test_a_comparison_across_scales_says_so_and_gives_no_time_verdict(captured):
    card = captured.cards[0]
    row = diff_cards(card, _measured(card, 20.0, scale=0.5), report_device=reported_device(captured))
    assert row.timing_verdict is None and row.speedup is None
    assert "no time verdict: scale: 1 vs 0.5" in row.verdict_rule
    assert not row.fair and "scale: 1 vs 0.5" in row.fairness_note and "device" not in row.fairness_note


def test_a_report_is_judged_on_the_device_it_names_both_ways(captured):
    card = captured.cards[0]
    here = _measured(card, 300.0)
    on_cpu = diff_cards(card, here, report_device=reported_device(captured))
    assert on_cpu.fair and "H200" not in on_cpu.fairness_note + on_cpu.class_transition
    assert f"the report's device ({CPU})" in on_cpu.fairness_note
    assert transition(card, here, reported_device(captured)).startswith(f"report: compute_bound (cpu estimate, {CPU})")
    assert reported_device(captured, "H100") == "H100"  # report_device= / --report-device over the capture's
    shipped = load_report()  # declares H200 (<report>.declared.json)
    assert reported_device(shipped) == "H200"
    report_card = shipped.cards[0]
    off = diff_cards(report_card, _measured(report_card, 30.0), report_device=reported_device(shipped))
    assert not off.fair and f"device: the report's H200 vs {CPU}" in off.fairness_note
    unnamed = Report(cards=[card], extra={"capture": {"device": "cpu"}})  # a capture made before device_name
    assert reported_device(unnamed) is None


def test_the_plan_lists_the_costliest_in_the_model_first_with_share_and_calls(captured, tmp_path):
    text = write_plan(captured, {}, [], tmp_path, "0" * 64, unavailable={}, device="cpu")
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert rows[0].startswith(f"| `{captured.cards[1].id}` | compute_bound | 560.0 (56.0% of the forward, 24 calls) |")
    assert rows[1].startswith(f"| `{captured.cards[0].id}` | compute_bound | 340.0 (34.0% of the forward, 1 call) |")
    assert "time in model from the capture's share of the forward (2 cards)" in text
    assert "tf32" not in text  # a CPU has no math mode to choose
