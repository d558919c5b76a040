"""An adversarial suite: each planted mistake is refused with its own reason; the honest twins stay.

The plants (tests/app/plants/plant_experiment.py) run at the worker level, as trials of one card: the
report's K=13824 linear with small M and N, in the worker process a run uses. Each plant is faster
than the baseline (which does the linear twice), so "not faster" can never be what refuses it.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Iterator

import pytest

from harness.boundary.outcomes import TrialStatus
from harness.boundary.replies import Measured
from harness.boundary.requests import ConfirmPlan
from harness.boundary.spec import CardSpec, CorrectnessRule, TimingSettings
from harness.cards.disturbance import robust_verdict
from harness.cards.dtype import card_dtype
from harness.cards.lint import lint_report
from harness.cards.measured import TrialLabel
from harness.cards.model import load_report
from harness.run.worker import CardSession, TrialWorker
from harness.trial.checks import CHECKS

REPO = Path(__file__).resolve().parents[2]
CARD = "dit-480-linear-m1170n5120k13824-ffde6a"
SCALE = 0.05  # M 58, N 256, K 13824: the report's reduction length
# The GPU check runs the suite on the device too (HARNESS_PLANTS_DEVICE=cuda), with the GPU's slack.
DEVICE = os.environ.get("HARNESS_PLANTS_DEVICE", "cpu")
SLACK = 2.0 if DEVICE.startswith("cuda") else 20.0

BASELINE = TrialLabel(experiment="plants", variant="twice", role="baseline")


class Plants:
    def __init__(self, session: CardSession, folder: Path):
        self.session, self.folder, self.count = session, folder, 0

    def trial(self, variant: str) -> Measured:
        self.count += 1
        return self.session.measure(variant=variant, params={},
                                    label=TrialLabel(experiment="plants", variant=variant, role="trial"),
                                    card_path=self.folder / f"trial_{self.count:02d}_{variant}.json")

    def card(self, result: Measured) -> dict:
        return load_report(str(result.card_path)).cards[0].extra


@pytest.fixture(scope="module")
def plants(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plants]:
    folder = tmp_path_factory.mktemp("plants")
    card = lint_report(load_report()).normalized.card(CARD)
    # float32 as in plants.yaml: the plants are made against float32 inputs, not the card's bf16 kernels.
    dtype = card_dtype(card, applied=[], override="float32", declared=[], experiment_dtype="float32")
    spec = CardSpec(card=card.to_dict(), experiment_module="tests.app.plants.plant_experiment", device=DEVICE,
                    dtype=dtype,
                    scale=SCALE, correctness=CorrectnessRule(4, 4, 2),
                    physics_slack=SLACK, timing=TimingSettings(warmup=1, min_repeats=3, budget_s=0.05),
                    profiler={"name": "none"}, reference_path=str(folder / "reference.pt"))
    worker = TrialWorker(log_path=folder / "worker.log")
    session = CardSession(worker, spec, deadline_s=300)
    base = session.measure(baseline=True, variant="twice", params={}, label=BASELINE,
                           card_path=folder / "baseline.json")
    assert base.ok, base.reason
    try:
        yield Plants(session, folder)
    finally:
        worker.close()


# status, reason, and the check of harness.trial.checks its card names (None: refused when prepared, no card)
REFUSED = {
    "stale": (TrialStatus.INFEASIBLE, "faster than the device can do this work", "physical_floor"),
    "cached_input": (TrialStatus.INFEASIBLE, "second draw", "second_draw"),
    "accumulate": (TrialStatus.INFEASIBLE, "second call's output is wrong", "repeated_calls"),
    "mutate_input": (TrialStatus.INFEASIBLE, "mutates its input x in place", "pristine_inputs"),
    "claimed_batch": (TrialStatus.FAILED, "built no 4 calls", None),
    "repeated_batch": (TrialStatus.INFEASIBLE, "max_rel", "reference"),
    "declared_bf16": (TrialStatus.INFEASIBLE, "declares bfloat16 but", "declared_precision"),
    "bf16_drops_terms": (TrialStatus.INFEASIBLE, "emulated", "declared_precision"),
    "leaks_threads": (TrialStatus.INFEASIBLE, "leaves process state changed", None),
    "leaks_autocast": (TrialStatus.INFEASIBLE, "leaves process state changed", None),
}
# The checks an honest twin passes beyond every trial's (harness.trial.checks: its batch, its declaration).
EVERY_TRIAL = {"process_state", "reference", "anchored_bounds", "pristine_inputs", "repeated_calls", "second_draw",
               "physical_floor"}
HONEST = {"once": EVERY_TRIAL, "honest_batch": EVERY_TRIAL | {"harness_batch"},
          "honest_bf16": EVERY_TRIAL | {"declared_precision"}}


@pytest.mark.parametrize("variant", sorted(REFUSED))
def test_each_plant_is_refused_with_its_own_reason(plants: Plants, variant: str):
    status, reason, check = REFUSED[variant]
    result = plants.trial(variant)
    assert result.status is status, (result.status, result.reason)
    assert reason in result.reason, result.reason
    if check is not None:
        assert plants.card(result)["checks"]["refused_by"] == check
    # The next trial of an honest variant on the same card is not poisoned by what the plant did.
    after = plants.trial("once")
    assert after.ok, after.reason
    extra = plants.card(after)
    assert extra["correctness"]["bound"] < 1e-4  # float32's same-precision bound: no autocast leaked
    assert not extra.get("state_changes")


@pytest.mark.parametrize("variant", sorted(HONEST))
def test_the_honest_twins_are_feasible(plants: Plants, variant: str):
    result = plants.trial(variant)
    assert result.ok, result.reason
    assert math.isfinite(result.per_call_us or math.nan)
    # Every check it met, passed, in the list's order: the list is the order a trial meets them.
    checks = plants.card(result)["checks"]
    assert checks["passed"] == [c.name for c in CHECKS if c.name in HONEST[variant]] and checks["refused_by"] is None


@pytest.mark.parametrize("variant", ["once", "honest_batch"])
def test_the_honest_wins_are_confirmed_faster(plants: Plants, variant: str):
    measured = plants.trial(variant)
    assert measured.ok, measured.reason
    folder = plants.folder
    plan = ConfirmPlan(variant, {}, 6, 18, 0.05, 0.05, str(folder / "baseline.json"), str(measured.card_path),
                       str(folder / f"confirmed_base_{variant}.json"), str(folder / f"confirmed_{variant}.json"))
    confirmed = plants.session.confirm(plan)
    assert confirmed.ok, confirmed.reason
    assert confirmed.baseline_rounds and confirmed.tried_rounds
    verdict = robust_verdict(confirmed.baseline_rounds.rounds, confirmed.tried_rounds.rounds, 0.05)
    assert verdict.verdict == "FASTER", verdict.rule()
    # The batch's time is per original call: about a quarter of its invocation's.
    assert confirmed.tried_rounds.calls == (4 if variant == "honest_batch" else 1)
    # The restated card names what the rounds held it to, beside what its trial passed.
    restated = load_report(str(folder / f"confirmed_{variant}.json")).cards[0].extra["checks"]
    assert restated["confirm"] == ["rebuilt_for_confirm", "anchored_bounds", "process_state"]
    assert "second_draw" in restated["passed"]


def test_a_plant_is_refused_again_when_the_confirm_prepares_it_anew(plants: Plants):
    """A variant whose later build differs from the ones the search checked is not confirmed unchecked."""
    searched = plants.trial("flaky_build")
    assert searched.ok, searched.reason  # its first two builds (both draws) are right
    folder = plants.folder
    plan = ConfirmPlan("flaky_build", {}, 2, 2, 0.05, 0.02, str(folder / "baseline.json"), str(searched.card_path),
                       str(folder / "confirm_base_x.json"), str(folder / "confirm_tried_x.json"))
    confirmed = plants.session.confirm(plan)
    assert confirmed.status is TrialStatus.INFEASIBLE
    assert "prepared again for the confirm rounds" in confirmed.reason


@pytest.mark.slow
def test_a_whole_run_refuses_the_plants_in_summary_and_diff_and_adopts_the_honest_win(tmp_path: Path):
    """What a user reads: each refused plant with its reason in summary.md and diff.json; `once` adopted."""
    import json
    import os
    import subprocess
    import sys

    conf = REPO / "tests" / "app" / "plants" / "conf"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run(
        [sys.executable, "-m", "harness", f"hydra.searchpath=[file://{conf}]", "experiment=plants",
         f"hydra.run.dir={tmp_path}", f"workload.cpu_scale={SCALE}", "timing.budget_s=0.05",
         "timing.drift_budget_s=0.02", "timing.confirm_rounds=6", "search.n_trials=7", "profiler=cpu"],
        capture_output=True, text=True, timeout=900, env=env, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    diff = json.loads((tmp_path / "diff.json").read_text())
    row = diff["cards"][0]
    assert row["variant"]["name"] == "once" and row["adopted"] is True, row
    refused = diff["refused"][CARD]
    summary = (tmp_path / "summary.md").read_text()
    reasons = {"stale": "faster than the device can do this work", "accumulate": "second call's output is wrong",
               "mutate_input": "mutates its input x in place", "declared_bf16": "declares bfloat16 but",
               "leaks_autocast": "leaves process state changed", "claimed_batch": "built no 4 calls"}
    for variant, reason in reasons.items():
        listed = "failed" if variant == "claimed_batch" else "infeasible"
        assert reason in refused[listed][variant], (variant, refused)
        assert f"`{CARD}` {variant}: {listed}" in summary and reason in summary
