"""A variant whose calls are counted, measured as a trial is (harness.trial.measure.measure_prepared), on a
small linear."""

from __future__ import annotations

import torch

from harness.api.experiment import Prepared
from harness.boundary.spec import CorrectnessRule
from harness.cards.measured import TrialLabel
from harness.cards.model import Report
from harness.cards.rules import RuleSet
from harness.trial.correctness import judge_baseline
from harness.trial.measure import Measurement, TimingSettings, measure_prepared
from harness.workloads import build_workload
from harness.workloads.base import Workload

CARD = "dit-480-linear-m3n5120k5120-d55d81"

LABEL = TrialLabel(experiment="counted", variant="counted", role="trial")


def small_linear() -> Workload:
    return build_workload("linear", {"M": 3, "N": 64, "K": 32, "bias": True}, device="cpu", dtype="float32",
                          scale=1.0, seed=0)


class Counted:
    """The workload's own op, counted; `wrong_call` (1-based) returns zeros instead."""

    def __init__(self, workload: Workload, wrong_call: int | None = None):
        self.workload, self.wrong_call, self.calls = workload, wrong_call, 0

    def __call__(self) -> torch.Tensor:
        self.calls += 1
        out = self.workload.run()
        return torch.zeros_like(out) if self.calls == self.wrong_call else out


def measure_counted(report: Report, workload: Workload, fn: Counted, settings: TimingSettings) -> Measurement:
    """`fn` measured as a trial on the report's small-M linear card, judged against the float64 reference."""
    standard = judge_baseline(workload.run(), workload.reference(), CorrectnessRule(4, 4), workload.reduction_length)[0]
    return measure_prepared(source_card=report.card(CARD), workload=workload, prepared=Prepared(fn=fn),
                   check=lambda out: standard.judge(out, workload.reference()), profiler=None,
                   settings=settings, rules=RuleSet.from_config(None), label=LABEL,
                   environment={})
