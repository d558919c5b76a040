"""The shared-budget study: one per (experiment, card), its trial queue filled once and shared by processes.

Shared budget (`SharedBudgetSampler`, `open_study`): several processes may run one study (same
storage, `search.resume=true`). `search.n_trials` is the study's total, not each process's: the
process that creates the study puts that many trials in Optuna's queue (WAITING; the configurations
themselves for an exhaustive search, in an order seeded by `search.seed`), and every process takes
trials from that queue, which the storage hands out once each, and stops when it is empty. A trial
created past the queue by a race between two processes is recorded as `surplus` (pruned before it
measures, never counted). Each trial's sampler is seeded from `search.seed` and the trial number, so
processes with the same seed do not draw the same parameters and a trial's draw does not depend on
which process ran it.
"""

from __future__ import annotations

import json
import os
import random
import socket
import time
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping

import optuna
from optuna.storages import BaseStorage
from optuna.trial import FrozenTrial, TrialState

from harness.boundary.outcomes import TrialStatus
from harness.search.errors import SearchError
from harness.search.space import Space, configurations, discrete_size
from harness.search.storage import OWNER_KEY, RetryStale, describe_url, make_storage, recover_trials
from harness.signals import check, pending, stopping

if TYPE_CHECKING:  # annotations only: the page (harness.report) opens storages without Hydra's schema
    from harness.config.schema import SearchConfig

# Trial system attributes written by the harness.
INTERRUPTED_KEY = "harness:interrupted"  # the signal that stopped the process while this trial ran
SURPLUS_KEY = "harness:surplus"          # created past the queue by a race; not measured, not counted
REPEAT_KEY = "harness:repeat_of"         # proposed an earlier trial's configuration: answered from it (repeats.py)
# Study user attribute: the n_trials the queue was filled to (absent while the creator is filling it).
BUDGET_ATTR = "budget_n_trials"


def trial_seed(seed: int | None, number: int) -> int | None:
    return None if seed is None else (int(seed) * 1_000_003 + number) % (2**32)


def _from_queue(trial: FrozenTrial) -> bool:
    return "fixed_params" in trial.system_attrs or "failed_trial" in trial.system_attrs


def _stop(study: optuna.Study) -> None:
    try:
        study.stop()
    except RuntimeError:  # outside study.optimize (ask/tell): nothing to stop
        pass


def stop_when_asked(study: optuna.Study, trial: FrozenTrial) -> None:
    """An optimize callback: no next trial once a stop signal is pending (harness.signals), so a signal that
    landed in Optuna's bookkeeping of a trial stops the search after it; `check()` once optimize returns
    raises the stop."""
    if pending() is not None:
        _stop(study)


class SharedBudgetSampler(optuna.samplers.BaseSampler):
    """The search's sampler (bruteforce, tpe or random) plus the budget shared by every process.

    Delegates sampling to a fresh inner sampler per trial, seeded from (seed, trial number). Stops
    the optimize loop when the study's queue is empty; a trial created past the queue (two processes
    raced for its last entry) is marked surplus and pruned at its first sampled parameter.
    """

    # An exhaustive search is the queue itself (every configuration queued once); its inner sampler
    # only fills parameters a re-queued trial of an older study lacks. Optuna's BruteForceSampler is
    # not used: it fails on finished trials without parameters (a trial interrupted before its first
    # suggestion, a surplus trial), and it cannot keep two processes off the same configuration.
    _FACTORIES: dict[str, Callable[..., optuna.samplers.BaseSampler]] = {
        "bruteforce": optuna.samplers.RandomSampler,
        "tpe": optuna.samplers.TPESampler,
        "random": optuna.samplers.RandomSampler,
    }

    def __init__(self, name: str, seed: int | None, space: Space, n_trials: int, exhaustive: bool) -> None:
        self.name, self.seed, self.space, self.n_trials, self.exhaustive = name, seed, space, n_trials, exhaustive
        self.inner = self._new_inner(seed)
        self._surplus: set[int] = set()

    def _new_inner(self, seed: int | None) -> optuna.samplers.BaseSampler:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return self._FACTORIES[self.name](seed=seed)

    def reseed_rng(self) -> None:
        self.inner.reseed_rng()

    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial) -> dict[str, Any]:
        return self.inner.infer_relative_search_space(study, trial)

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, Any]) -> dict[str, Any]:
        if trial._trial_id in self._surplus:
            return {}
        return self.inner.sample_relative(study, trial, search_space)

    def sample_independent(self, study: optuna.Study, trial: FrozenTrial, param_name: str,
                           param_distribution: optuna.distributions.BaseDistribution) -> Any:
        if trial._trial_id in self._surplus:
            raise optuna.TrialPruned("surplus trial: the study's n_trials are all taken by other processes")
        return self.inner.sample_independent(study, trial, param_name, param_distribution)

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self.inner = self._new_inner(trial_seed(self.seed, trial.number))
        study._storage.set_trial_system_attr(trial._trial_id, OWNER_KEY,
                                             {"host": socket.gethostname(), "pid": os.getpid()})
        if not _from_queue(trial) and BUDGET_ATTR in study.user_attrs:
            self._surplus.add(trial._trial_id)
            study._storage.set_trial_system_attr(trial._trial_id, SURPLUS_KEY, True)
            _stop(study)
            return
        self.inner.before_trial(study, trial)

    def after_trial(self, study: optuna.Study, trial: FrozenTrial, state: TrialState,
                    values: Any) -> None:
        if trial._trial_id in self._surplus:
            return
        if state == TrialState.FAIL and (stopped := stopping()):
            # Optuna files a trial the stop (harness.signals.Stopped) ended as FAIL whatever we do; it is marked
            # as interrupted, with that reason (no failure of the variant), and its re-queued copy replaces it
            # in the budget (`budget_trials`), so a stopped and resumed search counts each configuration once.
            storage = study._storage
            storage.set_trial_system_attr(trial._trial_id, INTERRUPTED_KEY, stopped)
            storage.set_trial_user_attr(trial._trial_id, "status", TrialStatus.INTERRUPTED.value)
            storage.set_trial_user_attr(trial._trial_id, "reason", f"interrupted ({stopped}): not a failure; "
                                        "the trial went back in the queue and runs again on resume")
            RetryStale(None)(study, storage.get_trial(trial._trial_id), interrupted=True)
        self.inner.after_trial(study, trial, state, values)
        if BUDGET_ATTR in study.user_attrs and not study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
            _stop(study)


@dataclass(frozen=True)
class SearchPlan:
    sampler: SharedBudgetSampler
    sampler_name: str
    n_trials: int


def plan_search(space: Space, search: SearchConfig) -> SearchPlan:
    """The sampler and budget of one card's study (`search.sampler` auto: exhaustive for a discrete space of
    at most `search.exhaustive_max` configurations; TPE otherwise). A discrete space's size caps
    `search.n_trials` whatever the sampler: no configuration is measured twice (harness.search.repeats), so
    a search of a discrete space ends when every configuration was tried."""
    n_trials = search.n_trials
    size = discrete_size(space)
    choice = search.sampler
    if choice == "auto":
        choice = "bruteforce" if size is not None and size <= search.exhaustive_max else "tpe"
    if choice == "bruteforce" and size is None:
        raise SearchError("search.sampler=bruteforce needs a discrete space (ranges with a step)")
    if size is not None:
        n_trials = min(n_trials, size)
    sampler = SharedBudgetSampler(choice, search.seed, space, n_trials, exhaustive=choice == "bruteforce")
    return SearchPlan(sampler, choice, n_trials)


def open_study(name: str, storage: str | BaseStorage, sampler: optuna.samplers.BaseSampler,
               resume: bool) -> optuna.Study:
    """Create the study, or join/continue it when `resume`; a clash without resume is an error.

    `storage` is a storage object or a URL (opened with `make_storage`, default settings unless
    `make_storage` already opened it with the run's). With a SharedBudgetSampler the study's trial
    queue is filled to its n_trials, and on resume trials left RUNNING by a dead process are failed
    and re-queued.
    """
    store = make_storage(storage) if isinstance(storage, str) else storage
    shown = describe_url(storage) if isinstance(storage, str) else type(storage).__name__
    try:
        existing = optuna.study.get_all_study_names(store)
    except Exception as exc:  # Optuna wraps SQLAlchemy/journal errors in several types
        raise SearchError(f"search.storage={shown!r} cannot be opened ({type(exc).__name__}: {exc})") from None
    clash = SearchError(
        f"study {name!r} already exists in {shown}; pass search.resume=true to continue it, or another storage"
    )
    if name in existing and not resume:
        raise clash
    created = False
    if name not in existing:
        try:
            study = optuna.create_study(study_name=name, storage=store, sampler=sampler, direction="minimize")
            created = True
        except optuna.exceptions.DuplicatedStudyError:  # another process created it a moment ago
            if not resume:
                raise clash from None
    if not created:
        study = optuna.load_study(study_name=name, storage=store, sampler=sampler)
        recover_trials(study)
    if isinstance(sampler, SharedBudgetSampler):
        fill_queue(study, sampler, created)
    return study


def budget_trials(trials: list[FrozenTrial]) -> list[FrozenTrial]:
    """The trials that count against n_trials: all but surplus ones, failed ones since retried and repeats
    (answered from an earlier trial, not measured)."""
    again = requeued(trials)
    return [t for t in trials if not t.system_attrs.get(SURPLUS_KEY) and REPEAT_KEY not in t.system_attrs
            and t.number not in again]


def requeued(trials: list[FrozenTrial]) -> set[int]:
    """The numbers of the failed trials that went back in the queue (interrupted, or their process died)."""
    return {n for t in trials for n in t.system_attrs.get("retry_history", [])}


def config_key(params: Mapping[str, Any]) -> str:
    return json.dumps(sorted(params.items()), default=str)


def fill_queue(study: optuna.Study, sampler: SharedBudgetSampler, created: bool, wait_s: float = 60.0) -> int:
    """Queue trials until the study's budget (queued, running and finished) is `sampler.n_trials`.

    Only one process fills a fresh study: its creator. A process joining a study that has no trials
    and no budget mark yet waits (up to `wait_s`) for the creator to finish filling it. On resume
    with a larger n_trials the queue is topped up (start one process first when raising n_trials,
    two processes topping up at once would both add). Returns how many trials it queued.
    """
    if not created:
        # Nothing but queued trials and no budget mark: the creator is filling the queue right now.
        deadline = time.monotonic() + wait_s
        while BUDGET_ATTR not in study.user_attrs and time.monotonic() < deadline and all(
                t.state == TrialState.WAITING for t in study.get_trials(deepcopy=False)):
            check()  # a stop signal (harness.signals) ends the wait
            time.sleep(0.2)
        if BUDGET_ATTR in study.user_attrs and int(study.user_attrs[BUDGET_ATTR]) >= sampler.n_trials:
            return 0
    budget = budget_trials(study.get_trials(deepcopy=False))
    deficit = sampler.n_trials - len(budget)
    queued = 0
    if deficit > 0:
        if sampler.exhaustive:
            taken = {config_key(t.system_attrs.get("fixed_params") or t.params) for t in budget}
            todo = [c for c in configurations(sampler.space) if config_key(c) not in taken]
            random.Random(sampler.seed).shuffle(todo)
            todo = todo[:deficit]
        else:
            todo = [{} for _ in range(deficit)]
        for params in todo:
            study.enqueue_trial(params)
        queued = len(todo)
    study.set_user_attr(BUDGET_ATTR, max(sampler.n_trials, int(study.user_attrs.get(BUDGET_ATTR, 0))))
    return queued


def completed(study: optuna.Study) -> list[FrozenTrial]:
    """The completed trials that measured (a repeat has its earlier trial's value, not a measurement)."""
    return [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if REPEAT_KEY not in t.system_attrs]


def best_feasible(study: optuna.Study) -> FrozenTrial | None:
    """Only completed trials count: infeasible and skipped ones are pruned, failed ones failed; a repeat is
    its earlier trial's, which counts instead (confirmed once)."""
    done = completed(study)
    return min(done, key=_completed_value) if done else None


def _completed_value(trial: FrozenTrial) -> float:
    assert trial.value is not None  # a completed trial has its value
    return trial.value


def remaining_trials(study: optuna.Study, n_trials: int) -> int:
    """How many trials of the study's n_trials no process has started yet: its queue, which no trial outside of
    runs (a surplus one stops), so a repeat that left no configuration to put back in it shortens it."""
    trials = study.get_trials(deepcopy=False)
    started = [t for t in budget_trials(trials) if t.state != TrialState.WAITING]
    waiting = [t for t in trials if t.state == TrialState.WAITING]
    return max(min(n_trials - len(started), len(waiting)), 0)


def study_name(experiment: str, card_id: str) -> str:
    """The study of one (experiment, card)."""
    return f"{experiment}:{card_id}"


def check_new_studies(storage: BaseStorage, names: list[str], resume: bool, shown: str) -> None:
    """Before anything is measured: without resume, none of the run's studies may exist yet."""
    if resume:
        return
    existing = set(optuna.study.get_all_study_names(storage))
    clash = [name for name in names if name in existing]
    if clash:
        raise SearchError(f"study {clash[0]!r} already exists in {shown}; pass search.resume=true to continue it, "
                          "or another storage")
