"""What the kernel bars are (their profiled calls beside the verdict's timed samples), and the note that says to
believe the verdict where the bars' ratio lies outside its interval widened by the sides' spreads."""

from __future__ import annotations

import copy

from harness.cards.model import Card, load_report
from harness.report.bars import bars_source, disagreement


def _card(kernel_us: float, calls: int | None, samples: int, spread: float) -> Card:
    card = copy.deepcopy(load_report().card("vae-480-conv3d-96to3k333t3-842ecd"))
    card.summed_kernel_us = kernel_us  # what the profiler summed for one invocation
    card.extra.update(timing={"n": samples, "spread": spread},
                      profiler_settings={} if calls is None else {"calls": calls})
    return card


def test_the_bars_say_how_many_profiled_calls_each_side_is_beside_the_timed_samples():
    text = bars_source(_card(100.0, 3, 200, 0.1), _card(90.0, 1, 202, 0.1), ("baseline", "variant"))
    assert text == ("the baseline's from 3 profiled calls, the variant's from 1 profiled call, without an "
                    "interval; the time verdict stands on 402 timed samples")
    assert "an unrecorded number of profiled calls" in bars_source(_card(1.0, None, 5, 0.0), None, ("a", "b"))


def test_bars_that_read_slower_beside_a_faster_interval_say_to_believe_the_verdict():
    # The 96to3 card: 31,892 -> 42,774 us in the bars (0.75x) beside a verdict's interval above 1.
    before, after = _card(31892.0, 1, 40, 0.1), _card(42774.0, 1, 40, 0.1)
    note = disagreement(before, after, {"speedup_ci": [1.06, 1.33]})
    # The interval widened by 1 + 0.1 + 0.1: [1.06 / 1.2, 1.33 * 1.2] = [0.883, 1.596]; 0.746 lies below it.
    assert note is not None and "0.75x" in note and "[0.88, 1.60]" in note and "believe the verdict" in note


def test_bars_within_the_widened_interval_need_no_note():
    before, after = _card(100.0, 1, 40, 0.1), _card(95.0, 1, 40, 0.1)  # 1.05x
    assert disagreement(before, after, {"speedup_ci": [1.10, 1.20]}) is None  # 1.05 >= 1.10 / 1.2
    assert disagreement(before, after, {"speedup_ci": None}) is None  # nothing to compare with
    assert disagreement(before, None, {"speedup_ci": [1.1, 1.2]}) is None
