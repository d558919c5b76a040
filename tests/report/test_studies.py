"""Why a card has no variant, from its study: a repeat answered from an earlier trial is not counted as a try."""

from __future__ import annotations

import optuna
from optuna.trial import TrialState, create_trial

from harness.report.studies import StudyView, missing_reason
from harness.search.study import REPEAT_KEY


def _trial(state: TrialState, status: str, repeat_of: int | None = None) -> optuna.trial.FrozenTrial:
    return create_trial(state=state, params={}, distributions={}, user_attrs={"status": status},
                        system_attrs={} if repeat_of is None else {REPEAT_KEY: repeat_of})


def test_a_repeat_is_not_counted_among_a_searchs_tries():
    trials = [_trial(TrialState.PRUNED, "skipped"), _trial(TrialState.PRUNED, "skipped", repeat_of=0),
              _trial(TrialState.FAIL, "failed")]
    view = StudyView(name="s", trials=trials, importances=None, importance_note="")
    assert missing_reason(view) == "no feasible variant (1 failed, 1 skipped)"  # was: 2 skipped
