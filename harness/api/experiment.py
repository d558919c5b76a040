"""What a counter-experiment is: the cards it applies to, one baseline, registered variants.

An experiment module in `experiments/` creates one `Experiment` and registers small functions on it,
TritonBench style. Each variant takes the card's built workload (inputs already made, nothing timed)
plus its Optuna parameters, and returns the callable that is timed and profiled, or a `Prepared`
when it has more to say (several original calls batched into one, FLOPs executed beyond the nominal
ones, the lower precision it computes in, facts for the card). Every output is checked against the
workload's float64 reference (harness.trial.correctness); a variant batching k calls computes the k calls the
harness built (`w.calls(k)`), each checked against its own reference. A variant that
cannot run here raises `VariantSkipped` with the reason, which the summary shows; one that can never
run on some devices or installs says so when it is registered (`@EXPERIMENT.variant(needs="cuda")`,
`needs=("cuda", "triton")`, or `needs=` a function of the device), and the search leaves it out there
instead of spending trials on it. An optional `annotate` hook adds the experiment's own evidence to every
measured card (achieved TFLOP/s, bandwidth bound, warp stalls). A parameter annotated with `typing.Literal[...]`
declares the values it takes, one annotated int, float, str or bool its type: the run refuses a space that gives
it another in one line before measuring, and `prepare` refuses such a value (the variant itself need not check).
An optional `workload` hook changes what is
measured: it takes the card's workload as built and returns the one the experiment times (e.g. the card's op
extended with its producer, so that a fusion is measured against the unfused chain), applied wherever a
trial's workload is built (harness.trial.build.build_trial_workload).
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import InitVar, dataclass, field
from typing import Any, Callable, Literal, get_args, get_origin, overload

import torch

from harness.api.numerics import CorrectnessError, unit_roundoff
from harness.api.optional import needs_module
from harness.boundary.replies import ExperimentError, ParamDomain, check_space_params
from harness.cards.applied import RoundError
from harness.workloads.base import Workload
from harness.workloads.params import WorkloadError, parse_dtype, parse_layout

# What a variant may carry for an input (`Prepared.carries`), for a later round's variants to start from
# (harness.trial.rounds.carry does it to the inputs).
CARRY_KINDS = ("memory_format", "dtype")
EXPECTED_REMOVED = ("Prepared.expected is no longer taken: build the k calls with w.calls(k); the harness computes "
                    "each call's float64 reference")


@dataclass
class Prepared:
    """A variant ready to time: the callable and what the card must know about it."""

    fn: Callable[[], torch.Tensor]
    # Original calls of the op one invocation performs (batching); time is per call. With calls=k > 1, fn
    # computes the k calls the harness built with w.calls(k) and returns their outputs stacked on dim 0, each
    # checked against its own float64 reference (harness.workloads.draws.batch_for, harness.trial.correctness).
    calls: int = 1
    executed_flops: float | None = None  # FLOPs the kernels execute, padding to tiles included
    # The dtype it computes in when that is below the baseline's (e.g. "bfloat16"): held to that
    # dtype's rounding instead of the baseline's error. None: the baseline's precision (or higher).
    precision: str | None = None
    facts: dict[str, Any] = field(default_factory=dict)  # configuration and evidence shown on the card
    # What it leaves for a later round's variants to build on: {input name: {memory_format | dtype: ...}}
    # (harness.trial.rounds). A kernel or tile choice carries nothing: the next round re-runs the variant itself.
    carries: dict[str, dict[str, str]] = field(default_factory=dict)
    # What to change in the model to get this variant (recipe.md), when the docstring does not say it.
    recipe: str | None = None
    # Refused: what a batch's other calls must give is the harness's to compute, not the variant's to claim.
    expected: InitVar[Any] = None

    def __post_init__(self, expected: Any) -> None:
        if expected is not None:
            raise ExperimentError(EXPECTED_REMOVED)
        if self.calls < 1:
            raise ExperimentError(f"Prepared.calls={self.calls}: must be at least 1")
        if self.precision is not None:
            try:
                floating = unit_roundoff(self.precision) > 0
            except CorrectnessError as exc:
                raise ExperimentError(f"Prepared.precision={self.precision!r}: {exc}") from None
            if not floating:
                raise ExperimentError(f"Prepared.precision={self.precision!r}: name a floating-point dtype")
        try:
            _check_carries(self.carries)
        except (RoundError, WorkloadError) as exc:
            raise ExperimentError(f"Prepared.{exc}") from None


def _check_carries(carries: dict[str, dict[str, str]]) -> None:
    """`{input name: {memory_format: ..., dtype: ...}}`, each value one torch knows."""
    for name, change in carries.items():
        unknown = set(change) - set(CARRY_KINDS)
        if unknown:
            raise RoundError(f"carries[{name!r}]: unknown key(s) {sorted(unknown)}; use {', '.join(CARRY_KINDS)}")
        if "memory_format" in change and parse_layout(change["memory_format"]) is None:
            raise RoundError(f"carries[{name!r}].memory_format: name a layout")
        if "dtype" in change:
            parse_dtype(change["dtype"], what=f"carries[{name!r}].dtype")


VariantFn = Callable[..., "Callable[[], torch.Tensor] | Prepared"]
AnnotateFn = Callable[[Any, Workload], None]  # (measured Card, its Workload) -> None, edits card.extra
WorkloadFn = Callable[[Workload], Workload]  # the card's workload as built -> the workload the experiment measures
# What a variant needs of the run's device ("cpu", "cuda", "cuda:1"): why it cannot run there, or None.
NeedsFn = Callable[[str], "str | None"]


def needs_cuda(device: str) -> str | None:
    """`needs="cuda"`: a CUDA device."""
    return None if device.startswith("cuda") else f"needs CUDA; device is {device}"


# The names `needs=` takes besides a function: a CUDA device, and the optional packages a variant cannot run
# without at all (checked without importing them; the base install has neither).
NEEDS: dict[str, NeedsFn] = {"cuda": needs_cuda, "triton": needs_module("triton"), "cupy": needs_module("cupy")}


def all_needs(checks: list[NeedsFn]) -> NeedsFn:
    """Every one of `checks` met; otherwise all the unmet ones, so a CPU without Triton hears of both."""

    def check(device: str) -> str | None:
        unmet = [why for why in (c(device) for c in checks) if why]
        return "; ".join(unmet) or None

    return check


class VariantSkipped(RuntimeError):
    """This variant cannot run on this device or install; the message says why."""


_PLAIN_KINDS = {int: "int", float: "float", str: "str", bool: "bool"}


def parameter_domains(fn: VariantFn) -> dict[str, ParamDomain]:
    """The parameters of a variant (after the workload) whose annotation says what they take: a Literal's values,
    or a plain type. An annotation that does not resolve (a name only a type checker sees) declares nothing."""
    domains: dict[str, ParamDomain] = {}
    for name, param in list(inspect.signature(fn).parameters.items())[1:]:
        annotation = param.annotation
        if isinstance(annotation, str):  # `from __future__ import annotations`: resolved as the module reads it
            try:
                annotation = eval(annotation, getattr(fn, "__globals__", {}))  # the module's own annotation text
            except Exception:
                continue
        if get_origin(annotation) is Literal:
            domains[name] = ParamDomain(values=list(get_args(annotation)))
        elif annotation in _PLAIN_KINDS:
            domains[name] = ParamDomain(kind=_PLAIN_KINDS[annotation])
    return domains


@dataclass
class Experiment:
    name: str
    op_kinds: tuple[str, ...]
    hypothesis: str
    check: str  # a check's name: harness.cards.checks' own, or one registered with register_check
    classes: tuple[str, ...] = ()  # bottleneck classes whose counter-experiment this tests
    workload_dtype: str = "float32"  # dtype the baseline's inputs are built in
    # ncu metric set this experiment needs (harness.profile.ncu.metrics); None: the profiler's own.
    metric_set: str | None = None
    variants: dict[str, VariantFn] = field(default_factory=dict)
    baseline_name: str | None = None
    annotate_fn: AnnotateFn | None = None
    workload_fn: WorkloadFn | None = None
    needs: dict[str, NeedsFn] = field(default_factory=dict)  # variant -> what it needs of the device
    # variant -> its parameters that declare what they take (parameter_domains)
    domains: dict[str, dict[str, ParamDomain]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        from harness.cards.checks import CheckError, check_named

        try:
            check_named(self.check)
        except CheckError as exc:
            raise ExperimentError(f"{self.name}: {exc}") from None

    @overload
    def variant(self, fn: VariantFn) -> VariantFn: ...

    @overload
    def variant(self, *, needs: str | NeedsFn | tuple[str | NeedsFn, ...]) -> Callable[[VariantFn], VariantFn]: ...

    def variant(self, fn: VariantFn | None = None, *, needs: str | NeedsFn | tuple[str | NeedsFn, ...] | None = None
                ) -> VariantFn | Callable[[VariantFn], VariantFn]:
        """Register a variant: `@EXPERIMENT.variant`, or `@EXPERIMENT.variant(needs=...)` for one that
        can never run on some devices or installs. `needs` is a name of NEEDS ("cuda", "triton", "cupy"),
        a function of the run's device returning why the variant cannot run there (None: it can), or a
        tuple of them, all required; where one says no, the search does not draw the variant (the summary
        lists it as not drawn, with every unmet need) rather than spend trials on skips. A variant that
        fails only for some parameters, or only at run time, raises VariantSkipped instead."""
        wanted = needs if isinstance(needs, tuple) else () if needs is None else (needs,)
        checks: list[NeedsFn] = []
        for need in wanted:
            if isinstance(need, str) and need not in NEEDS:
                raise ExperimentError(f"{self.name}: needs={need!r}: give one of {', '.join(NEEDS)} or a function "
                                      "of the device returning why the variant cannot run there (None: it can)")
            checks.append(NEEDS[need] if isinstance(need, str) else need)
        check = None if not checks else checks[0] if len(checks) == 1 else all_needs(checks)

        def register(f: VariantFn) -> VariantFn:
            if f.__name__ in self.variants:
                raise ExperimentError(f"{self.name}: variant {f.__name__!r} registered twice")
            domains = parameter_domains(f)
            for name, param in inspect.signature(f).parameters.items():
                why = None if param.default is param.empty or name not in domains else domains[name].refuses(
                    param.default)
                if why is not None:
                    raise ExperimentError(f"{self.name}: variant {f.__name__}'s default {name}={param.default!r}: "
                                          f"{why}; make its annotation and its default agree")
            self.variants[f.__name__] = f
            self.domains[f.__name__] = domains
            if check is not None:
                self.needs[f.__name__] = check
            return f

        return register(fn) if fn is not None else register

    def baseline(self, fn: VariantFn) -> VariantFn:
        if self.baseline_name is not None:
            raise ExperimentError(f"{self.name}: two baselines ({self.baseline_name}, {fn.__name__})")
        self.baseline_name = fn.__name__
        return self.variant(fn)

    def annotate(self, fn: AnnotateFn) -> AnnotateFn:
        if self.annotate_fn is not None:
            raise ExperimentError(f"{self.name}: annotate registered twice")
        self.annotate_fn = fn
        return fn

    def workload(self, fn: WorkloadFn) -> WorkloadFn:
        """Register `fn(card's workload) -> measured workload`: its inputs, run, float64 reference, FLOPs
        and minimum bytes are what the baseline and variants are prepared on, checked and judged by."""
        if self.workload_fn is not None:
            raise ExperimentError(f"{self.name}: workload registered twice")
        self.workload_fn = fn
        return fn

    def measured_workload(self, workload: Workload) -> Workload:
        """The workload this experiment measures: the card's own, or what its `workload` hook makes of it."""
        return workload if self.workload_fn is None else self.workload_fn(workload)

    def prepare(self, variant: str, workload: Workload, params: dict[str, Any]) -> Prepared:
        if variant not in self.variants:
            raise ExperimentError(
                f"{self.name}: unknown variant {variant!r}; registered: {', '.join(self.variants)}"
            )
        fn = self.variants[variant]
        for name, value in params.items():
            domain = self.domains[variant].get(name)
            why = domain.refuses(value) if domain is not None else None
            if why is not None:
                raise ExperimentError(f"{self.name}: variant {variant}'s {name}: {why}")
        made = fn(workload, **params)
        prepared = made if isinstance(made, Prepared) else Prepared(made)
        if prepared.recipe is None:  # the variant's docstring says what it changes
            prepared.recipe = inspect.getdoc(fn)
        return prepared

    def unmet_needs(self, device: str) -> dict[str, str]:
        """The variants whose `needs` this device does not meet, each with why."""
        unmet = {name: check(device) for name, check in self.needs.items()}
        return {name: why for name, why in unmet.items() if why}

    def applies_to(self, op_kind: str) -> bool:
        return op_kind in self.op_kinds

    def parameters(self) -> dict[str, list[str]]:
        """Each variant, in registration order, with the parameters it takes after the workload."""
        return {name: list(inspect.signature(fn).parameters)[1:] for name, fn in self.variants.items()}

    def check_space(self, space: dict[str, Any]) -> None:
        """Every parameter of the space is one its variant takes, with values it takes: a typo must not be
        searched silently."""
        check_space_params(self.name, self.parameters(), space, self.domains)


def load_experiment(module: str, expected_name: str | None = None) -> Experiment:
    """Import `module` (e.g. experiments.vae_bf16, or a user's own package on PYTHONPATH); its EXPERIMENT.

    `expected_name` is the config's `experiment.name`: it must be the module's `Experiment.name`,
    which names the studies and the outputs (several configs may share one module and one name).
    """
    try:
        loaded = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        raise ExperimentError(f"experiment module {module!r} not found ({exc.name} missing)") from None
    experiment = getattr(loaded, "EXPERIMENT", None)
    if not isinstance(experiment, Experiment):
        raise ExperimentError(f"{module} defines no EXPERIMENT = Experiment(...)")
    if experiment.baseline_name is None:
        raise ExperimentError(f"{module}: no variant is registered as the baseline")
    if expected_name is not None and expected_name != experiment.name:
        raise ExperimentError(f"experiment.name={expected_name!r} but {module} defines Experiment(name="
                              f"{experiment.name!r}); make them equal")
    return experiment
