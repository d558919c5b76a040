"""Round 2 on a card whose round 1 adopted a batched variant: its baseline is that batch, judged against
the harness's own k calls and timed per original call, in the measure and in the confirm rounds."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import experiments.dit_small_m_batching as batching
from harness.boundary.requests import ConfirmPlan
from harness.boundary.spec import CardSpec, CorrectnessRule, TimingSettings
from harness.cards.lint import lint_report
from harness.cards.measured import TrialLabel
from harness.cards.model import load_report
from harness.run.worker import CardSession, TrialWorker
from harness.trial.rounds import applied_entry

CARD = "dit-480-linear-m3n5120k256-ff7b7c"  # the M=3 time-embedding linear, K=256

TRIAL = TrialLabel(experiment="dit_small_m_batching", variant="batched", role="trial")


def test_round_two_after_a_batched_adoption_is_judged_and_timed_per_original_call(tmp_path: Path):
    entry = applied_entry(experiment="dit_small_m_batching", module="experiments.dit_small_m_batching",
                          variant="batched", params={"k": 4}, facts={"recipe": "batch 4 calls"},
                          workload_dtype="bfloat16", confirmation={"speedup": 2.0, "ci": [1.8, 2.2]}, run="r1")
    card = lint_report(load_report()).normalized.card(CARD)
    spec = CardSpec(card=card.to_dict(), experiment_module=batching.__name__, device="cpu", scale=0.05,
                    applied=[entry], correctness=CorrectnessRule(4, 4),
                    timing=TimingSettings(warmup=1, min_repeats=3, budget_s=0.02), profiler={"name": "none"},
                    physics_slack=20.0, reference_path=str(tmp_path / "reference.pt"))
    worker = TrialWorker(log_path=tmp_path / "worker.log")
    session = CardSession(worker, spec, deadline_s=300)
    try:
        base = session.measure(baseline=True, variant="batched", params={"k": 4}, label=replace(TRIAL, role="baseline"),
                               card_path=tmp_path / "baseline.json")
        assert base.ok, base.reason
        assert base.calls == 4 and base.per_call_us == base.median_us / 4
        trial = session.measure(variant="batched", params={"k": 8}, label=TRIAL,
                                card_path=tmp_path / "trial.json")
        assert trial.ok, trial.reason
        plan = ConfirmPlan("batched", {"k": 8}, 2, 2, 0.05, 0.02, str(tmp_path / "baseline.json"), str(trial.card_path),
                           str(tmp_path / "baseline_confirmed.json"), str(tmp_path / "tried.json"))
        confirmed = session.confirm(plan)
        assert confirmed.ok, confirmed.reason
        assert confirmed.baseline_rounds.calls == 4 and confirmed.tried_rounds.calls == 8
        restated = load_report(tmp_path / "baseline_confirmed.json").cards[0].extra
        rounds = restated["timing"]["round_medians_us"]  # per invocation of 4 calls, as the card's timing
        assert [r.median_us for r in confirmed.baseline_rounds.rounds] == [r / 4 for r in rounds]
        assert restated["variant"]["per_call_us"] == restated["timing"]["median_us"] / 4
    finally:
        worker.close()
