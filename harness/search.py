"""Optuna around an experiment's variant space: one study per (experiment, card).

A space maps each variant name to its own parameters; a parameter is a list of choices or a range
`{low, high, step?, log?}`. Variants are suggested first, then that variant's parameters (named
`<variant>.<param>`), so the space is conditional and the exhaustive sampler walks it as a tree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import optuna

Space = Mapping[str, Mapping[str, Any]]


class SearchError(ValueError):
    """A search configuration that cannot work; the message says what to change."""


def validate_space(space: Space, known_variants: list[str], experiment: str) -> None:
    if not space:
        raise SearchError(f"experiment {experiment}: experiment.space is empty; name at least one variant")
    for variant, params in space.items():
        if variant not in known_variants:
            raise SearchError(
                f"experiment {experiment}: space names variant {variant!r}; registered: {', '.join(known_variants)}"
            )
        for name, choices in (params or {}).items():
            if isinstance(choices, (list, tuple)):
                if not choices:
                    raise SearchError(f"experiment.space.{variant}.{name}: empty list of choices")
            elif isinstance(choices, Mapping):
                if "low" not in choices or "high" not in choices or choices["low"] > choices["high"]:
                    raise SearchError(f"experiment.space.{variant}.{name}: a range needs low <= high")
            else:
                raise SearchError(f"experiment.space.{variant}.{name}: give a list of choices or {{low, high}}")


def discrete_size(space: Space) -> int | None:
    """How many configurations a discrete space has (None when a parameter is a continuous range)."""
    total = 0
    for params in space.values():
        count = 1
        for choices in (params or {}).values():
            if isinstance(choices, Mapping):
                step = choices.get("step")
                if step is None or choices.get("log"):
                    return None
                count *= int(math.floor((choices["high"] - choices["low"]) / step)) + 1
            else:
                count *= len(choices)
        total += count
    return total


def suggest(trial: optuna.Trial, space: Space) -> tuple[str, dict[str, Any]]:
    variant = trial.suggest_categorical("variant", list(space))
    params: dict[str, Any] = {}
    for name, choices in (space[variant] or {}).items():
        key = f"{variant}.{name}"
        if isinstance(choices, Mapping):
            low, high = choices["low"], choices["high"]
            if all(isinstance(v, int) for v in (low, high)) and isinstance(choices.get("step", 1), int):
                params[name] = trial.suggest_int(key, low, high, step=choices.get("step", 1),
                                                 log=bool(choices.get("log", False)))
            else:
                params[name] = trial.suggest_float(key, float(low), float(high), step=choices.get("step"),
                                                   log=bool(choices.get("log", False)))
        else:
            params[name] = trial.suggest_categorical(key, list(choices))
    return variant, params


@dataclass(frozen=True)
class SearchPlan:
    sampler: optuna.samplers.BaseSampler
    sampler_name: str
    n_trials: int


def plan_search(space: Space, cfg: Mapping[str, Any]) -> SearchPlan:
    n_trials = int(cfg.get("n_trials", 16))
    if n_trials < 1:
        raise SearchError(f"search.n_trials={n_trials}: must be at least 1")
    size = discrete_size(space)
    choice = cfg.get("sampler", "auto")
    seed = cfg.get("seed", 0)
    if choice == "auto":
        choice = "bruteforce" if size is not None and size <= int(cfg.get("exhaustive_max", 64)) else "tpe"
    if choice == "bruteforce":
        if size is None:
            raise SearchError("search.sampler=bruteforce needs a discrete space (ranges with a step)")
        return SearchPlan(optuna.samplers.BruteForceSampler(seed=seed), "bruteforce", min(n_trials, size))
    if choice == "tpe":
        return SearchPlan(optuna.samplers.TPESampler(seed=seed), "tpe", n_trials)
    if choice == "random":
        return SearchPlan(optuna.samplers.RandomSampler(seed=seed), "random", n_trials)
    raise SearchError(f"search.sampler={choice!r}: choose auto, bruteforce, tpe or random")


def open_study(name: str, storage: str, sampler: optuna.samplers.BaseSampler, resume: bool) -> optuna.Study:
    """Create the study, or continue it when `resume`; a clash without resume is an error."""
    try:
        existing = optuna.study.get_all_study_names(storage)
    except Exception as exc:  # Optuna wraps SQLAlchemy/journal errors in several types
        raise SearchError(f"search.storage={storage!r} cannot be opened ({type(exc).__name__}: {exc})") from None
    if name in existing and not resume:
        raise SearchError(
            f"study {name!r} already exists in {storage}; pass search.resume=true to continue it, or another storage"
        )
    return optuna.create_study(study_name=name, storage=storage, sampler=sampler, direction="minimize",
                               load_if_exists=resume)


def completed(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    return [t for t in study.get_trials(deepcopy=False) if t.state == optuna.trial.TrialState.COMPLETE]


def best_feasible(study: optuna.Study) -> optuna.trial.FrozenTrial | None:
    """Only completed trials count: infeasible and skipped ones are pruned, failed ones failed."""
    done = completed(study)
    return min(done, key=lambda t: t.value) if done else None


def remaining_trials(study: optuna.Study, n_trials: int) -> int:
    finished = [t for t in study.get_trials(deepcopy=False) if t.state.is_finished()]
    return max(n_trials - len(finished), 0)
