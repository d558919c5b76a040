"""How many calls a measured variant costs, and which of them the checks judge (harness.trial.measure).

The memory probe's call (the variant's second) is judged like the first; on the CPU it is the timing's first
warm-up call, so a trial pays no call for it beyond the warm-up it makes anyway.
"""

from __future__ import annotations

import pytest
import torch

from harness.api.experiment import Prepared
from harness.cards.rules import RuleSet
from harness.trial.correctness import Rule, judge_baseline
from harness.trial.measure import TimingSettings, measure
from harness.workloads import build_workload

CARD = "dit-480-linear-m3n5120k5120-d55d81"


@pytest.fixture(scope="module")
def linear():
    return build_workload("linear", {"M": 3, "N": 64, "K": 32, "bias": True}, device="cpu", dtype="float32",
                          scale=1.0, seed=0)


class _Counted:
    """The workload's own op, counted; `wrong_call` (1-based) returns zeros instead."""

    def __init__(self, workload, wrong_call: int | None = None):
        self.workload, self.wrong_call, self.calls = workload, wrong_call, 0

    def __call__(self) -> torch.Tensor:
        self.calls += 1
        out = self.workload.run()
        return torch.zeros_like(out) if self.calls == self.wrong_call else out


def _measure(seed_report, workload, fn: _Counted, settings: TimingSettings):
    standard = judge_baseline(workload.run(), workload.reference(), Rule(4, 4), workload.reduction_length)[0]
    return measure(source_card=seed_report.card(CARD), workload=workload, prepared=Prepared(fn=fn),
                   check=lambda out: standard.judge(out, workload.reference()), profiler=None,
                   settings=settings, rules=RuleSet.from_config(None), label={"variant": "counted"},
                   environment={})


def test_on_the_cpu_the_memory_probe_is_the_first_warm_up_call(seed_report, linear):
    fn = _Counted(linear)
    m = _measure(seed_report, linear, fn, TimingSettings(warmup=2, min_repeats=3, budget_s=0.0))
    assert m.correctness.feasible and m.timing is not None
    assert fn.calls == 1 + 2 + 3  # the first call, two warm-up calls (the probe among them), three timed
    assert m.timing.warmup == 2 and m.timing.n == 3
    assert m.card.extra["memory"]["method"].startswith(("RSS growth", "unavailable"))
    assert "repeated_calls" in m.card.extra["checks"]["passed"]


def test_without_warm_up_the_probe_is_a_call_of_its_own(seed_report, linear):
    fn = _Counted(linear)
    m = _measure(seed_report, linear, fn, TimingSettings(warmup=0, min_repeats=3, budget_s=0.0))
    assert m.timing is not None and m.timing.warmup == 0 and m.timing.n == 3
    assert fn.calls == 1 + 1 + 3  # no timed sample is taken under the probe's sampling thread


@pytest.mark.parametrize("warmup", [None, 2, 0])
def test_a_variant_wrong_on_its_second_call_is_refused_there(seed_report, linear, warmup):
    fn = _Counted(linear, wrong_call=2)
    m = _measure(seed_report, linear, fn, TimingSettings(warmup=warmup, min_repeats=3, budget_s=0.0))
    assert not m.correctness.feasible and m.timing is None
    assert m.card.extra["checks"]["refused_by"] == "repeated_calls"
    assert "its second call's output is wrong" in m.correctness.note
    assert fn.calls == 2  # the timing stopped at the call that was wrong
