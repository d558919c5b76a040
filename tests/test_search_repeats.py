"""A search never pays twice (harness.search.repeats): a configuration proposed again is answered from the
earlier trial, counted apart, and its place in the budget goes to a configuration not tried yet.

In process, on Optuna's in-memory storage, with the objective the run's card search uses (harness.run.card_search:
suggest, then answer_repeat, else measure). What each test expects is counted from the planted objective's
own calls, not from the study.
"""

from __future__ import annotations

from typing import Any, Callable

import optuna
import pytest
from optuna.trial import TrialState

from harness.search import (
    REPEAT_KEY,
    RetryStale,
    SearchTally,
    answer_repeat,
    best_feasible,
    budget_trials,
    open_study,
    plan_search,
    remaining_trials,
    suggest,
    tally,
)
from tests.search_settings import search_config

optuna.logging.set_verbosity(optuna.logging.WARNING)
# vae_conv_kernels' space as a CPU draws it: 6 configurations, two of them a quarter of TPE's random draws each.
CPU_SPACE = {"frame_batching": {"k": [2, 4]}, "native_cpu": {}, "im2col_gemm": {"layout": ["ncdhw", "ndhwc"]},
             "compiled": {"mode": ["default"]}}
Measure = Callable[[str, dict[str, Any]], float]


def _search(space: dict, measure: Measure, **settings: Any) -> tuple[optuna.Study, list[tuple], Any]:
    """Run a study to its end as the card search does; the configurations `measure` was called with."""
    plan = plan_search(space, search_config(**settings))
    study = open_study("s", optuna.storages.InMemoryStorage(), plan.sampler, resume=False)
    calls: list[tuple] = []

    def objective(trial: optuna.Trial) -> float:
        variant, params = suggest(trial, space)
        earlier = answer_repeat(trial, plan.sampler)
        if earlier is not None:
            if earlier.state == TrialState.PRUNED:
                raise optuna.TrialPruned("as earlier")
            if earlier.state == TrialState.FAIL:
                raise RuntimeError("as earlier")
            return earlier.value
        calls.append((variant, tuple(sorted(params.items()))))
        return measure(variant, params)

    study.optimize(objective, n_trials=remaining_trials(study, plan.n_trials) + plan.n_trials, catch=(Exception,))
    return study, calls, plan


def _native_fastest(variant: str, params: dict[str, Any]) -> float:
    return 1.0 if variant == "native_cpu" else 2.0 + len(params)


@pytest.mark.parametrize("sampler", ["tpe", "random"])
def test_twelve_trials_on_six_configurations_measure_each_once(sampler):
    repeats = 0
    for seed in range(4):
        study, calls, plan = _search(CPU_SPACE, _native_fastest, sampler=sampler, n_trials=12, seed=seed)
        assert plan.n_trials == 6  # the discrete space's size caps the budget: nothing more to try
        assert len(calls) == 6 and len(set(calls)) == 6, calls  # every configuration once, none twice
        counted = budget_trials(study.trials)
        assert [t.state for t in counted] == [TrialState.COMPLETE] * 6
        found = [t for t in study.trials if REPEAT_KEY in t.system_attrs]
        assert len(found) == len(study.trials) - 6
        for repeat in found:  # answered from the earlier trial of the same configuration, with its value
            earlier = study.trials[repeat.system_attrs[REPEAT_KEY]]
            assert earlier.params == repeat.params and earlier.value == repeat.value
            assert REPEAT_KEY not in earlier.system_attrs
        assert remaining_trials(study, plan.n_trials) == 0
        assert tally(study, plan) == SearchTally(sampler, tried=6, trials=6, drawable=6, repeats=len(found),
                                                 outcomes={"measured": 6, "infeasible": 0, "skipped": 0, "failed": 0})
        repeats += len(found)
    assert repeats > 0  # the samplers did propose configurations again: the case under test happened


def test_a_repeat_is_never_the_best_so_it_is_confirmed_once():
    study, calls, _ = _search(CPU_SPACE, _native_fastest, sampler="tpe", n_trials=12, seed=0)
    native = [t for t in study.trials if t.params == {"variant": "native_cpu"}]
    assert len(native) > 1  # the planted fastest was proposed again
    assert best_feasible(study).number == native[0].number


def test_a_skipped_or_failed_configuration_is_answered_as_it_ended_not_run_again():
    space = {"skipped": {}, "failing": {}, "fine": {"x": [1, 2]}}

    def measure(variant: str, params: dict[str, Any]) -> float:
        if variant == "skipped":
            raise optuna.TrialPruned("cannot run here")
        if variant == "failing":
            raise RuntimeError("it raised")
        return float(params["x"])

    repeats = 0
    for seed in range(4):
        study, calls, _ = _search(space, measure, sampler="random", n_trials=4, seed=seed)
        assert sorted(calls) == [("failing", ()), ("fine", (("x", 1),)), ("fine", (("x", 2),)), ("skipped", ())]
        for repeat in (t for t in study.trials if REPEAT_KEY in t.system_attrs):
            assert repeat.state == study.trials[repeat.system_attrs[REPEAT_KEY]].state
            repeats += 1
        assert [t.state for t in budget_trials(study.trials)].count(TrialState.PRUNED) == 1
    assert repeats > 0


def test_a_trial_that_went_back_in_the_queue_answers_nothing_its_copy_is_measured():
    """An interrupted trial (or one whose process died) is FAIL with a copy queued: the copy runs, once."""
    plan = plan_search({"a": {}, "b": {}}, search_config(sampler="bruteforce", n_trials=2, seed=0))
    study = open_study("s", optuna.storages.InMemoryStorage(), plan.sampler, resume=False)
    calls: list[str] = []

    def objective(trial: optuna.Trial) -> float:
        variant, _ = suggest(trial, {"a": {}, "b": {}})
        if answer_repeat(trial, plan.sampler) is not None:
            return -1.0
        calls.append(variant)
        return 1.0

    trial = study.ask()  # what the stopped process left: its first trial failed, and requeued
    suggest(trial, {"a": {}, "b": {}})
    study.tell(trial, state=TrialState.FAIL)
    RetryStale(None)(study, study.trials[trial.number], interrupted=True)
    study.optimize(objective, n_trials=5)
    assert sorted(calls) == ["a", "b"]  # the failed trial's configuration measured by its copy, no repeat
    assert not any(REPEAT_KEY in t.system_attrs for t in study.trials)


def test_on_a_continuous_space_repeats_are_answered_and_their_places_bounded():
    space = {"native_cpu": {}, "tile": {"x": {"low": 0.0, "high": 1.0}}}
    study, calls, plan = _search(space, lambda v, p: 1.0 if v == "native_cpu" else 2.0 + p["x"],
                                 sampler="random", n_trials=8, seed=0)
    assert calls.count(("native_cpu", ())) == 1
    found = [t for t in study.trials if REPEAT_KEY in t.system_attrs]
    assert found and len(study.trials) <= 2 * plan.n_trials  # at most n_trials places put back
    assert tally(study, plan).drawable is None


def test_the_summary_line_says_what_was_tried_of_what_is_drawable():
    line = SearchTally("tpe", tried=6, trials=6, drawable=6, repeats=3,
                       outcomes={"measured": 5, "infeasible": 0, "skipped": 1, "failed": 0}).describe()
    assert line == ("search (tpe): 6 of the 6 drawable configurations tried, each once (5 measured, 1 skipped); "
                    "3 proposals of a configuration already tried answered from its trial, not measured again")
    line = SearchTally("random", tried=7, trials=8, drawable=None, repeats=0, outcomes={"measured": 8}).describe()
    assert line == ("search (random): 7 configurations tried in 8 trials (8 measured); the space is continuous: "
                    "no count of what is drawable")
