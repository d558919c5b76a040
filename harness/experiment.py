"""What a counter-experiment is: the cards it applies to, one baseline, registered variants.

An experiment module in `experiments/` creates one `Experiment` and registers small functions on it,
TritonBench style. Each variant takes the card's built workload (inputs already made, nothing timed)
plus its Optuna parameters, and returns the callable that is timed and profiled. A variant that
cannot run here raises `VariantSkipped` with the reason, which the summary shows.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from harness.workloads.base import Workload

VariantFn = Callable[..., Callable[[], torch.Tensor]]


class VariantSkipped(RuntimeError):
    """This variant cannot run on this device or install; the message says why."""


class ExperimentError(ValueError):
    """An experiment that does not exist or is misconfigured; one line, with the fix."""


@dataclass
class Experiment:
    name: str
    op_kinds: tuple[str, ...]
    hypothesis: str
    check: str  # a harness.cards.diff.CHECKS name
    classes: tuple[str, ...] = ()  # bottleneck classes whose counter-experiment this tests
    workload_dtype: str = "float32"  # dtype the baseline's inputs are built in
    variants: dict[str, VariantFn] = field(default_factory=dict)
    baseline_name: str | None = None

    def variant(self, fn: VariantFn) -> VariantFn:
        if fn.__name__ in self.variants:
            raise ExperimentError(f"{self.name}: variant {fn.__name__!r} registered twice")
        self.variants[fn.__name__] = fn
        return fn

    def baseline(self, fn: VariantFn) -> VariantFn:
        if self.baseline_name is not None:
            raise ExperimentError(f"{self.name}: two baselines ({self.baseline_name}, {fn.__name__})")
        self.baseline_name = fn.__name__
        return self.variant(fn)

    def prepare(self, variant: str, workload: Workload, params: dict[str, Any]) -> Callable[[], torch.Tensor]:
        if variant not in self.variants:
            raise ExperimentError(
                f"{self.name}: unknown variant {variant!r}; registered: {', '.join(self.variants)}"
            )
        return self.variants[variant](workload, **params)

    def applies_to(self, op_kind: str) -> bool:
        return op_kind in self.op_kinds


def load_experiment(module: str) -> Experiment:
    """Import `module` (e.g. experiments.vae_bf16) and return its EXPERIMENT."""
    try:
        loaded = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        raise ExperimentError(f"experiment module {module!r} not found ({exc.name} missing)") from None
    experiment = getattr(loaded, "EXPERIMENT", None)
    if not isinstance(experiment, Experiment):
        raise ExperimentError(f"{module} defines no EXPERIMENT = Experiment(...)")
    if experiment.baseline_name is None:
        raise ExperimentError(f"{module}: no variant is registered as the baseline")
    return experiment
