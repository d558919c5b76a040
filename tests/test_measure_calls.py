"""How many calls a measured variant costs, and which of them the checks judge (harness.trial.measure).

The memory probe's call (the variant's second) is judged like the first; on the CPU it is the timing's first
warm-up call, so a trial pays no call for it beyond the warm-up it makes anyway.
"""

from __future__ import annotations

import pytest

from harness.trial.measure import TimingSettings
from tests.counted_calls import Counted, measure_counted, small_linear


@pytest.fixture(scope="module")
def linear():
    return small_linear()


def test_on_the_cpu_the_memory_probe_is_the_first_warm_up_call(seed_report, linear):
    fn = Counted(linear)
    m = measure_counted(seed_report, linear, fn, TimingSettings(warmup=2, min_repeats=3, budget_s=0.0))
    assert m.correctness.feasible and m.timing is not None
    assert fn.calls == 1 + 2 + 3  # the first call, two warm-up calls (the probe among them), three timed
    assert m.timing.warmup == 2 and m.timing.n == 3
    assert m.card.extra["memory"]["method"].startswith(("RSS growth", "unavailable"))
    assert "repeated_calls" in m.card.extra["checks"]["passed"]


def test_without_warm_up_the_probe_is_a_call_of_its_own(seed_report, linear):
    fn = Counted(linear)
    m = measure_counted(seed_report, linear, fn, TimingSettings(warmup=0, min_repeats=3, budget_s=0.0))
    assert m.timing is not None and m.timing.warmup == 0 and m.timing.n == 3
    assert fn.calls == 1 + 1 + 3  # no timed sample is taken under the probe's sampling thread


@pytest.mark.parametrize("warmup", [None, 2, 0])
def test_a_variant_wrong_on_its_second_call_is_refused_there(seed_report, linear, warmup):
    fn = Counted(linear, wrong_call=2)
    m = measure_counted(seed_report, linear, fn, TimingSettings(warmup=warmup, min_repeats=3, budget_s=0.0))
    assert not m.correctness.feasible and m.timing is None
    assert m.card.extra["checks"]["refused_by"] == "repeated_calls"
    assert "its second call's output is wrong" in m.correctness.note
    assert fn.calls == 2  # the timing stopped at the call that was wrong
