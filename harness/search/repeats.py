"""A configuration the sampler proposes again: answered from the earlier trial, never measured twice.

TPE and random sampling propose configurations already tried, on a small discrete space for most of a
budget (vae_conv_kernels on a CPU, 6 configurations: 12 TPE trials measured 4 of them, one 6 times; on a
GPU each repeat is an ncu trial). As in Optuna's FAQ ("How can I ignore duplicated samples?"), the
objective looks the proposed parameters up among the study's finished trials and answers with the earlier
trial's result instead of measuring (`answer_repeat`). The repeat is counted apart: marked `REPEAT_KEY`,
it is left out of the budget (`budget_trials`), of the best (`best_feasible`: confirmed once) and of the
summary's lists, and its place in the budget goes back to the queue: on a discrete space a configuration
no trial has taken yet (none left: none goes back), so that n_trials trials try n_trials distinct
configurations and a search that covered its space ends; on a continuous one another draw, at most
n_trials of them per study.

Which earlier trial answers: the first finished one with the same parameters that is no repeat itself
and did not go back in the queue. A completed one gives its value; a pruned one (skipped: the variant
cannot run here; infeasible: its output is wrong) its pruning; a failed one its failure, without running
it again: a failure is the configuration's on this card (the same code on the same inputs), and a crash
or a missed deadline would cost a new worker or a whole `search.trial_deadline_s` again. A trial the stop
interrupted, or whose process died, answers nothing: it went back in the queue, and its copy runs
(`search.max_retry` bounds the dead ones). A configuration another process is measuring right now is not
waited for.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from harness.boundary.outcomes import OUTCOMES, status_of
from harness.search.space import configurations, discrete_size
from harness.search.study import (
    REPEAT_KEY,
    SURPLUS_KEY,
    SearchPlan,
    SharedBudgetSampler,
    budget_trials,
    config_key,
    requeued,
    trial_seed,
)

REQUEUED_KEY = "harness:requeued"  # on a repeat: its place in the budget went back to the queue
_FINISHED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)


def earlier_trial(trial: optuna.Trial) -> FrozenTrial | None:
    """The finished trial that already answered `trial`'s parameters, if one did."""
    trials = trial.study.get_trials(deepcopy=False)
    again = requeued(trials)
    for earlier in trials:
        if (earlier.number != trial.number and earlier.state in _FINISHED and REPEAT_KEY not in earlier.system_attrs
                and not earlier.system_attrs.get(SURPLUS_KEY) and earlier.number not in again
                and earlier.params == trial.params):
            return earlier
    return None


def answer_repeat(trial: optuna.Trial, sampler: SharedBudgetSampler) -> FrozenTrial | None:
    """The earlier trial that answers `trial` (call it once the parameters are suggested), with `trial` marked as
    its repeat and its place in the budget put back in the queue; None when `trial` is to be measured."""
    earlier = earlier_trial(trial)
    if earlier is None:
        return None
    storage = trial.study._storage
    storage.set_trial_system_attr(trial._trial_id, REPEAT_KEY, earlier.number)
    if earlier.user_attrs.get("status"):
        trial.set_user_attr("status", earlier.user_attrs["status"])
    trial.set_user_attr("reason", f"a repeat of trial {earlier.number}: answered from it, not measured again")
    if _put_back(trial, sampler):
        storage.set_trial_system_attr(trial._trial_id, REQUEUED_KEY, True)
    return earlier


def _put_back(trial: optuna.Trial, sampler: SharedBudgetSampler) -> bool:
    """Queue the place of a repeat: a configuration no trial has taken (a discrete space), or a draw (at most
    n_trials per study); whether one was queued."""
    study = trial.study
    trials = study.get_trials(deepcopy=False)
    if sum(1 for t in trials if t.system_attrs.get(REQUEUED_KEY)) >= sampler.n_trials:
        return False
    params: dict[str, Any] = {}
    if discrete_size(sampler.space) is not None:
        taken = {config_key(t.system_attrs.get("fixed_params") or t.params) for t in trials
                 if not t.system_attrs.get(SURPLUS_KEY)}
        untried = [c for c in configurations(sampler.space) if config_key(c) not in taken]
        if not untried:
            return False
        params = random.Random(trial_seed(sampler.seed, trial.number)).choice(untried)
    study.enqueue_trial(params)
    return True


@dataclass(frozen=True)
class SearchTally:
    """What one card's search tried: distinct configurations of how many drawable, and the repeats answered."""

    sampler: str
    tried: int  # distinct configurations among the counted trials that finished
    trials: int  # the counted trials that finished (more than `tried` only where two processes raced)
    drawable: int | None  # the drawable space's size; None for a continuous space
    repeats: int  # proposals of a configuration already tried: answered, not measured
    outcomes: dict[str, int] = field(default_factory=dict)  # measured / infeasible / skipped / failed: how many

    def describe(self) -> str:
        of = f" of the {self.drawable} drawable" if self.drawable is not None else ""
        each = ", each once" if self.trials == self.tried else f" in {self.trials} trials"
        split = ", ".join(f"{n} {what}" for what, n in self.outcomes.items() if n)
        again = (f"; {self.repeats} proposal{'s' if self.repeats != 1 else ''} of a configuration already tried "
                 "answered from its trial, not measured again" if self.repeats else "")
        continuous = "; the space is continuous: no count of what is drawable" if self.drawable is None else ""
        return (f"search ({self.sampler}): {self.tried}{of} configuration{'s' if self.tried != 1 else ''} tried"
                f"{each}{f' ({split})' if split else ''}{again}{continuous}")


def tally(study: optuna.Study, plan: SearchPlan) -> SearchTally:
    trials = study.get_trials(deepcopy=False)
    counted = [t for t in budget_trials(trials) if t.state in _FINISHED]
    outcomes = {"measured": 0, "infeasible": 0, "skipped": 0, "failed": 0}
    for t in counted:
        status = status_of(t.user_attrs.get("status"))
        listed = OUTCOMES[status].summary if status is not None else "failed" if t.state == TrialState.FAIL else None
        if listed in outcomes:
            outcomes[str(listed)] += 1
        elif t.state == TrialState.COMPLETE:
            outcomes["measured"] += 1
    return SearchTally(sampler=plan.sampler_name, tried=len({config_key(t.params) for t in counted}),
                       trials=len(counted), drawable=discrete_size(plan.sampler.space),
                       repeats=sum(1 for t in trials if REPEAT_KEY in t.system_attrs), outcomes=outcomes)
