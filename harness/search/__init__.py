"""Optuna around an experiment's variant space: one study per (experiment, card), shareable by processes.

One idea per module: `space` (the conditional variant space and its enumeration), `storage` (storages
with a heartbeat, recovery of dead trials), `study` (the study whose trial budget processes share) and
`repeats` (a configuration proposed again, answered from the earlier trial); `errors` holds the
SearchError they all raise. Their public names are re-exported here. A stop signal is acted on between
trials and inside the objective only (harness.signals), never inside a storage write or Optuna's
bookkeeping, so no study is left half-written.
"""

from harness.search.errors import SearchError
from harness.search.repeats import SearchTally, answer_repeat, earlier_trial, tally
from harness.search.space import Space, configurations, discrete_size, drawable, suggest, validate_space
from harness.search.storage import (
    HEARTBEAT_KEY,
    JOURNAL_PREFIX,
    JOURNAL_SUFFIX,
    OWNER_KEY,
    RDB_BACKENDS,
    RUN_DATABASE,
    RUN_JOURNAL,
    RetryStale,
    StorageSettings,
    default_storage,
    describe_url,
    journal_path,
    make_storage,
    recover_trials,
)
from harness.search.study import (
    BUDGET_ATTR,
    INTERRUPTED_KEY,
    REPEAT_KEY,
    SURPLUS_KEY,
    SearchPlan,
    SharedBudgetSampler,
    best_feasible,
    budget_trials,
    check_new_studies,
    completed,
    fill_queue,
    open_study,
    plan_search,
    remaining_trials,
    stop_when_asked,
    study_name,
)

__all__ = [
    "BUDGET_ATTR",
    "HEARTBEAT_KEY",
    "INTERRUPTED_KEY",
    "JOURNAL_PREFIX",
    "JOURNAL_SUFFIX",
    "OWNER_KEY",
    "RDB_BACKENDS",
    "REPEAT_KEY",
    "RUN_DATABASE",
    "RUN_JOURNAL",
    "SURPLUS_KEY",
    "RetryStale",
    "SearchError",
    "SearchPlan",
    "SearchTally",
    "SharedBudgetSampler",
    "Space",
    "StorageSettings",
    "answer_repeat",
    "best_feasible",
    "budget_trials",
    "check_new_studies",
    "completed",
    "configurations",
    "default_storage",
    "describe_url",
    "discrete_size",
    "drawable",
    "earlier_trial",
    "fill_queue",
    "journal_path",
    "make_storage",
    "open_study",
    "plan_search",
    "recover_trials",
    "remaining_trials",
    "stop_when_asked",
    "study_name",
    "tally",
    "suggest",
    "validate_space",
]
