"""The one vocabulary of outcomes, and what each means to the search and the summary.

`TrialStatus` names what a request came to: the child's answers (every reply carries one,
harness.boundary.replies), the run's own (a crash, a missed deadline: harness.run.worker) and the
search's (not drawn, interrupted, surplus). `OUTCOMES` maps each to Optuna's trial state and to the
summary's wording, so no status string is compared anywhere else.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class TrialStatus(str, Enum):
    COMPLETE = "complete"
    INFEASIBLE = "infeasible"  # measured, and its output is wrong (or it cheats a check)
    SKIPPED = "skipped"  # the variant raised VariantSkipped: it cannot run here
    NOT_DRAWN = "not_drawn"  # left out of the search: this device can never run it
    FAILED = "failed"  # it raised
    OOM = "oom"
    CRASHED = "crashed"  # the worker process died
    DEADLINE = "deadline"  # no answer within search.trial_deadline_s; the worker was killed
    INTERRUPTED = "interrupted"  # the run was stopped mid-trial; the trial went back in the queue
    SURPLUS = "surplus"  # created past the shared queue by a race; never measured
    SETUP = "setup"  # the card's workload cannot be built: the configuration's fault, not the variant's


@dataclass(frozen=True)
class Outcome:
    """What a status means to the search and the summary."""

    optuna_state: str  # the name of optuna.trial.TrialState the trial ends in
    summary: str | None  # the summary's list it is shown in (skipped / infeasible / failed); None: not listed
    restarts_worker: bool = False  # the child did not survive: a new one serves the next request


OUTCOMES: dict[TrialStatus, Outcome] = {
    TrialStatus.COMPLETE: Outcome("COMPLETE", None),
    TrialStatus.INFEASIBLE: Outcome("PRUNED", "infeasible"),
    TrialStatus.SKIPPED: Outcome("PRUNED", "skipped"),
    TrialStatus.NOT_DRAWN: Outcome("PRUNED", None),
    TrialStatus.FAILED: Outcome("FAIL", "failed"),
    TrialStatus.OOM: Outcome("FAIL", "failed"),
    TrialStatus.CRASHED: Outcome("FAIL", "failed", restarts_worker=True),
    TrialStatus.DEADLINE: Outcome("FAIL", "failed", restarts_worker=True),
    TrialStatus.INTERRUPTED: Outcome("FAIL", "failed"),
    TrialStatus.SURPLUS: Outcome("PRUNED", None),
    TrialStatus.SETUP: Outcome("FAIL", "failed"),
}


def status_of(value: str | None) -> TrialStatus | None:
    """A stored status (a trial's user attribute), or None for a trial that recorded none."""
    try:
        return TrialStatus(value) if value else None
    except ValueError:
        return None
