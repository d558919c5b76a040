"""Optuna around an experiment's variant space: one study per (experiment, card), shareable by processes.

One idea per module: `space` (the conditional variant space and its enumeration), `interrupt`
(stopping a process without leaving a study inconsistent), `storage` (storages with a heartbeat,
recovery of dead trials) and `study` (the study whose trial budget processes share); `errors` holds
the SearchError they all raise. Their public names are re-exported here.
"""

from harness.search.errors import SearchError
from harness.search.interrupt import interrupted, note_interrupt, safe_to_interrupt
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
    "RUN_DATABASE",
    "RUN_JOURNAL",
    "SURPLUS_KEY",
    "RetryStale",
    "SearchError",
    "SearchPlan",
    "SharedBudgetSampler",
    "Space",
    "StorageSettings",
    "best_feasible",
    "budget_trials",
    "check_new_studies",
    "completed",
    "configurations",
    "default_storage",
    "describe_url",
    "discrete_size",
    "drawable",
    "fill_queue",
    "interrupted",
    "journal_path",
    "make_storage",
    "note_interrupt",
    "open_study",
    "plan_search",
    "recover_trials",
    "remaining_trials",
    "safe_to_interrupt",
    "study_name",
    "suggest",
    "validate_space",
]
