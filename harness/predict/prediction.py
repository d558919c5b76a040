"""A prediction: one card, one variant configuration, its expected speedup on a device, the terms it was derived
from and an 80% interval from stated uncertainties; and the registry of predictors, one per experiment.

A predictor (registered by experiment name, one module per family of counter-experiments) returns an
`Estimate`: the baseline's and the variant's time per original call on the device, the basis (the terms and
numbers used) and, for each stated uncertainty, the outcome at its extremes. It returns `Unpredictable` with
the reason where the model cannot say, and the row then has `speedup: null`, never a made-up number.

The interval: each uncertainty's extreme moves the speedup by a log ratio from the point; the moves down are
combined in quadrature, and so are the moves up, each stated range being taken as an 80% range of
independent sources. So a row's interval is [point x exp(-sqrt(sum of the squared moves down)),
point x exp(+sqrt(sum of the squared moves up))]: asymmetric where the sources are.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

if TYPE_CHECKING:
    from harness.predict.context import Context


@dataclass(frozen=True)
class Outcome:
    """The baseline's and the variant's time per original call (us) at one extreme of one uncertainty."""

    uncertainty: str  # what the uncertainty is and where its range is stated
    baseline_us: float
    variant_us: float

    @property
    def speedup(self) -> float:
        return self.baseline_us / self.variant_us


@dataclass(frozen=True)
class Estimate:
    """What a predictor derived: the point (times per original call on the device), its basis, and the outcomes
    at the extremes of each stated uncertainty (none: the interval is the point)."""

    baseline_us: float
    variant_us: float
    basis: str
    outcomes: Sequence[Outcome] = ()

    @property
    def speedup(self) -> float:
        return self.baseline_us / self.variant_us


@dataclass(frozen=True)
class Unpredictable:
    """Why the model gives no number for a configuration."""

    reason: str


Predictor = Callable[["Context", str, Mapping[str, Any]], "Estimate | Unpredictable"]
PREDICTORS: dict[str, Predictor] = {}


def register(experiment: str) -> Callable[[Predictor], Predictor]:
    """Register `predictor` as the one for `experiment`'s variants (one per experiment)."""

    def add(predictor: Predictor) -> Predictor:
        if experiment in PREDICTORS:
            raise ValueError(f"experiment {experiment!r} already has a predictor ({PREDICTORS[experiment].__name__})")
        PREDICTORS[experiment] = predictor
        return predictor

    return add


def interval_of(point: float, outcomes: Sequence[Outcome]) -> tuple[float, float]:
    """The 80% interval of the module docstring: each uncertainty's largest move down and up, in quadrature."""
    down: dict[str, float] = {}
    up: dict[str, float] = {}
    for outcome in outcomes:
        if min(outcome.baseline_us, outcome.variant_us) <= 0:
            continue
        move = math.log(outcome.speedup / point)
        if move < 0:
            down[outcome.uncertainty] = min(down.get(outcome.uncertainty, 0.0), move)
        else:
            up[outcome.uncertainty] = max(up.get(outcome.uncertainty, 0.0), move)
    low = point * math.exp(-math.sqrt(sum(m * m for m in down.values())))
    high = point * math.exp(math.sqrt(sum(m * m for m in up.values())))
    return low, high


def spread_text(point: float, outcomes: Sequence[Outcome]) -> list[str]:
    """Each uncertainty with the speedups at its extremes, for the row's `interval_from`."""
    by_name: dict[str, list[float]] = {}
    for outcome in outcomes:
        if min(outcome.baseline_us, outcome.variant_us) > 0:
            by_name.setdefault(outcome.uncertainty, []).append(outcome.speedup)
    return [f"{name}: {', '.join(f'{s:.3g}x' for s in sorted(values))} (point {point:.3g}x)"
            for name, values in by_name.items()]


@dataclass
class Prediction:
    """One row: a card, an experiment's variant configuration, and what the model expects of it on `device`."""

    card: str
    experiment: str
    variant: str
    params: dict[str, Any]
    device: str
    speedup: float | None  # baseline time / variant time per original call; None: the model cannot say
    interval: list[float] | None  # [lo, hi], 80%
    saving_us: float | None  # per invocation (one original call) on the device
    saving_in_model_us: float | None  # the card's time in the model x the fraction saved (report device only)
    basis: str  # the terms and numbers used, or why there is no number
    interval_from: list[str] = field(default_factory=list)
    baseline_us: float | None = None  # per original call on the device, as the model has it
    variant_us: float | None = None
    measured: float | None = None  # the confirmed speedup of this card + variant + params, once measured
    measured_interval: list[float] | None = None  # its 95% CI
    error: float | None = None  # speedup / measured - 1

    @property
    def key(self) -> tuple[str, str, str, str]:
        """What a measurement is matched by: card, experiment, variant, parameters."""
        return self.card, self.experiment, self.variant, params_key(self.params)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> Prediction:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in obj.items() if k in known})


def params_key(params: Mapping[str, Any]) -> str:
    """Parameters as one comparable text, in name order (JSON turns a tuple into a list: both read alike)."""
    return ", ".join(f"{k}={list(v) if isinstance(v, tuple) else v}" for k, v in sorted(params.items()))


def row(card: str, experiment: str, variant: str, params: Mapping[str, Any], device: str,
        found: Estimate | Unpredictable, time_in_model_us: float | None) -> Prediction:
    """The row of one configuration from what its predictor found; `time_in_model_us` where the card's time in
    the model is known on this device (the report's own)."""
    if isinstance(found, Estimate) and min(found.baseline_us, found.variant_us) <= 0:
        found = Unpredictable(f"no time left to predict ({found.basis})")
    if isinstance(found, Unpredictable):
        return Prediction(card, experiment, variant, dict(params), device, None, None, None, None, found.reason)
    point = found.speedup
    low, high = interval_of(point, found.outcomes)
    fraction = 1.0 - 1.0 / point
    return Prediction(card, experiment, variant, dict(params), device, point, [low, high],
                      found.baseline_us - found.variant_us,
                      time_in_model_us * fraction if time_in_model_us is not None else None,
                      found.basis, spread_text(point, found.outcomes), found.baseline_us, found.variant_us)
