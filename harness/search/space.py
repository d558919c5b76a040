"""An experiment's variant space: validated, counted, enumerated, and suggested to an Optuna trial.

A space maps each variant name to its own parameters; a parameter is a list of choices or a range
`{low, high, step?, log?}`. Variants are suggested first, then that variant's parameters (named
`<variant>.<param>`), so the space is conditional; an exhaustive search ("bruteforce") enumerates it
(`configurations`) and queues every configuration once.
"""

from __future__ import annotations

import itertools
import math
from typing import Any, Mapping

import optuna

from harness.search.errors import SearchError

Space = Mapping[str, Mapping[str, Any]]


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


def drawable(space: Space, unmet: Mapping[str, str]) -> tuple[dict[str, Mapping[str, Any]], dict[str, str]]:
    """The space the sampler draws from on this device, and the variants of `space` left out of it, each
    with why (`unmet`: Experiment.unmet_needs). A variant that can never run here would only cost
    trials that end skipped, which with a small search.n_trials may be most of the budget."""
    left_out = {variant: unmet[variant] for variant in space if variant in unmet}
    return {variant: params for variant, params in space.items() if variant not in left_out}, left_out


def _is_int_range(choices: Mapping[str, Any]) -> bool:
    return all(isinstance(choices[k], int) for k in ("low", "high")) and isinstance(choices.get("step", 1), int)


def discrete_size(space: Space) -> int | None:
    """How many configurations a discrete space has (None when a parameter is a continuous range)."""
    total = 0
    for params in space.values():
        count = 1
        for choices in (params or {}).values():
            if isinstance(choices, Mapping):
                step = choices.get("step", 1 if _is_int_range(choices) else None)
                if step is None or choices.get("log"):
                    return None
                count *= int(math.floor((choices["high"] - choices["low"]) / step)) + 1
            else:
                count *= len(choices)
        total += count
    return total


def configurations(space: Space) -> list[dict[str, Any]]:
    """Every configuration of a discrete space, as the Optuna parameters `suggest` would record."""
    out: list[dict[str, Any]] = []
    for variant, params in space.items():
        names, values = [], []
        for name, choices in (params or {}).items():
            names.append(f"{variant}.{name}")
            if isinstance(choices, Mapping):
                low, high = choices["low"], choices["high"]
                step = choices.get("step", 1 if _is_int_range(choices) else None)
                if step is None or choices.get("log"):
                    raise SearchError(f"experiment.space.{variant}.{name}: a continuous range has no enumeration")
                count = int(math.floor((high - low) / step)) + 1
                values.append([low + i * step if _is_int_range(choices) else float(low + i * step)
                               for i in range(count)])
            else:
                values.append(list(choices))
        for combo in itertools.product(*values):
            out.append({"variant": variant, **dict(zip(names, combo))})
    return out


def suggest(trial: optuna.Trial, space: Space) -> tuple[str, dict[str, Any]]:
    variant = trial.suggest_categorical("variant", list(space))
    params: dict[str, Any] = {}
    for name, choices in (space[variant] or {}).items():
        key = f"{variant}.{name}"
        if isinstance(choices, Mapping):
            low, high = choices["low"], choices["high"]
            if _is_int_range(choices):
                params[name] = trial.suggest_int(key, low, high, step=choices.get("step", 1),
                                                 log=bool(choices.get("log", False)))
            else:
                params[name] = trial.suggest_float(key, float(low), float(high), step=choices.get("step"),
                                                   log=bool(choices.get("log", False)))
        else:
            params[name] = trial.suggest_categorical(key, list(choices))
    return variant, params
