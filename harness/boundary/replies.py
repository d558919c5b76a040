"""What the worker child answers: one typed reply per request (harness.boundary.requests), each carrying
its `TrialStatus` (harness.boundary.outcomes) and, when it is not COMPLETE, why in one line.

- `Measured` (a Measure): where the measured card was written, its time per invocation and per original call,
  the judgement of its output;
- `Retimed` (a Retime): the baseline's time again, per original call;
- `Confirmed` (a Confirm): each side's median per original call in every paired round;
- `Described` (a Describe): what the run needs of the torch side (the experiments' `ExperimentFacts`, the
  device and its environment, the profiler, what only the workloads derive from the report).

Every failure is a reply too, never an exception across the pipe: the child's own (the variant raised, ran out
of memory, the card cannot be built: harness.trial.handlers) and the run's (the child died or missed its
deadline: harness.run.worker). The base `Reply` holds what every reply carries, so a failure reads as the
reply its request expects. Each part a Describe could not describe travels as its one-line message; the run
raises it where its check stands in a run's set-up, so the order of a run's errors does not depend on which
process found them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Callable, Mapping, Sequence

from harness.boundary.outcomes import OUTCOMES, Outcome, TrialStatus
from harness.cards.disturbance import RoundTiming
from harness.errors import HarnessError


@dataclass(frozen=True)
class Reply:
    """What every reply carries: how the request ended, and the child's wall time by phase."""

    status: TrialStatus
    reason: str = ""  # why, in one line (one_line), when it is not COMPLETE
    seconds: dict[str, float] = field(default_factory=dict)  # by phase: timing_s, profile_s, setup_s, build_s ...
    restart: bool = False  # the child's CUDA context is unusable: the run starts a new child

    @property
    def ok(self) -> bool:
        return self.status is TrialStatus.COMPLETE

    @property
    def outcome(self) -> Outcome:
        return OUTCOMES[self.status]

    @property
    def restarted(self) -> bool:
        """The child did not survive this request (a new one serves the next)."""
        return self.outcome.restarts_worker


@dataclass(frozen=True)
class Judgement:
    """An output against its float64 reference (harness.trial.correctness.Correctness, as it travels)."""

    max_abs: float
    max_rel: float
    bound: float
    derivation: str
    baseline_error: float | None
    precision: str
    feasible: bool
    note: str = ""

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> Judgement:
        """From a Correctness's dict (or a trial's stored copy of one): the keys a judgement has, the rest left."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in obj.items() if k in names})

    def why_infeasible(self) -> str:
        """One line: the numbers, and the check's own reason when it has one (a check beyond the output's
        error, the physical floor say, refuses an output within its bound: then the reason alone)."""
        if self.note and self.max_rel <= self.bound:
            return self.note
        why = f" ({self.note})" if self.note else ""
        return f"max_rel {self.max_rel:.3g} > bound {self.bound:.3g}{why}"


@dataclass(frozen=True)
class Measured(Reply):
    """A measured baseline or trial."""

    card_path: str | None = None  # the measured card, written before the answer (also for an infeasible one)
    median_us: float | None = None  # per invocation
    per_call_us: float | None = None  # per original call: what the search minimises
    calls: int = 1
    judgement: Judgement | None = None


@dataclass(frozen=True)
class Retimed(Reply):
    """The kept baseline timed again: what the drift check compares."""

    per_call_us: float | None = None


@dataclass(frozen=True)
class SideRounds:
    """One side of the confirm rounds: each round's lower quartile and median per original call (a batched side's
    invocation divided by its calls), and how many of its samples interference touched (harness.cards.disturbance)."""

    rounds: list[RoundTiming]
    calls: int
    disturbed_samples: int = 0
    samples: int = 0


@dataclass(frozen=True)
class Confirmed(Reply):
    """The paired confirm rounds, each side's (the cards they restate are written where the plan said)."""

    baseline_rounds: SideRounds | None = None
    tried_rounds: SideRounds | None = None


class ExperimentError(HarnessError):
    """An experiment that does not exist or is misconfigured; one line, with the fix."""


_KINDS: dict[str, Callable[[Any], bool]] = {
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "float": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "str": lambda v: isinstance(v, str),
    "bool": lambda v: isinstance(v, bool),
}


@dataclass(frozen=True)
class ParamDomain:
    """The values a variant's parameter takes, read from its annotation (harness.api.experiment): the values
    of a `typing.Literal`, or a plain type (int, float, str, bool). Anything else annotated takes anything."""

    values: list[Any] | None = None
    kind: str | None = None  # one of _KINDS

    def refuses(self, value: Any) -> str | None:
        """Why the parameter does not take `value` (None: it does)."""
        if self.values is not None:
            # By type too: True is not 1, and "2" is not 2.
            if any(type(value) is type(v) and value == v for v in self.values):
                return None
            return f"{value!r} is not one of {', '.join(map(str, self.values))}"
        if self.kind is not None and not _KINDS[self.kind](value):
            return f"{value!r} is not {'an' if self.kind == 'int' else 'a'} {self.kind}"
        return None

    def refuses_range(self, low: Any, high: Any) -> str | None:
        """Why the parameter does not take a range {low, high} (None: it does)."""
        if self.values is not None:
            return f"takes one of {', '.join(map(str, self.values))}: give them as a list, not a range"
        if self.kind in ("str", "bool"):
            return f"takes a {self.kind}: give a list of choices, not a range"
        if self.kind == "int" and not (_KINDS["int"](low) and _KINDS["int"](high)):
            return f"takes an int: a range of it needs integer low and high, not {low!r} and {high!r}"
        return None


def check_space_params(experiment: str, takes: Mapping[str, Sequence[str]], space: Mapping[str, Any],
                       domains: Mapping[str, Mapping[str, ParamDomain]] | None = None) -> None:
    """Every parameter of the space is one its variant takes (`takes`: each variant's parameters after the
    workload), and every value one it takes (`domains`, from the variant's annotations): a typo must not be
    searched silently, nor cost a trial per value. Unknown variants and the space's shape are
    harness.search.validate_space's."""
    for variant, params in space.items():
        if variant not in takes:
            continue
        for name, choices in (params or {}).items():
            if name not in takes[variant]:
                raise ExperimentError(
                    f"experiment.space.{variant}.{name}: {experiment}'s variant {variant} takes no parameter "
                    f"{name!r}; it takes: {', '.join(takes[variant]) or 'none'}")
            domain = (domains or {}).get(variant, {}).get(name)
            if domain is None:
                continue
            if isinstance(choices, Mapping):
                why = domain.refuses_range(choices.get("low"), choices.get("high"))
            else:
                why = next(filter(None, map(domain.refuses, choices)), None)
            if why is not None:
                raise ExperimentError(f"experiment.space.{variant}.{name}: {why} ({experiment}'s variant {variant})")


@dataclass(frozen=True)
class ExperimentFacts:
    """An experiment module as the run's side knows it: what harness.api.experiment.Experiment says of itself."""

    name: str
    module: str
    op_kinds: tuple[str, ...]
    classes: tuple[str, ...]
    hypothesis: str
    check: str
    check_module: str | None  # the module that registered the check (torch-free); None: harness.cards.checks'
    baseline_name: str
    variants: dict[str, list[str]]  # each variant, in registration order, with the parameters it takes
    unmet: dict[str, str]  # the variants the described device cannot run, each with why (Experiment.unmet_needs)
    metric_set: str | None
    workload_dtype: str
    # each variant's parameters that declare their values or type, with them (ParamDomain)
    domains: dict[str, dict[str, ParamDomain]] = field(default_factory=dict)

    def applies_to(self, op_kind: str) -> bool:
        return op_kind in self.op_kinds

    def check_space(self, space: Mapping[str, Any]) -> None:
        check_space_params(self.name, self.variants, space, self.domains)


@dataclass(frozen=True)
class Described(Reply):
    """What the child found, and for each part it could not describe, why (one line)."""

    experiments: dict[str, ExperimentFacts] = field(default_factory=dict)  # by the request's labels
    experiment_errors: dict[str, str] = field(default_factory=dict)
    device: str | None = None
    device_error: str | None = None
    environment: dict[str, Any] = field(default_factory=dict)  # harness.trial.environment.describe_environment
    profiler: str | None = None  # the backend's name (harness.profile.registry)
    profiler_notes: list[str] = field(default_factory=list)  # why it is not the one asked for (auto's fallback)
    profiler_error: str | None = None
    chunk_cards: list[dict[str, Any]] = field(default_factory=list)  # the report's chunk cards (harness.trial.chunks)
    cast_frames: dict[str, int] = field(default_factory=dict)  # cast card id -> frames its report pair tells
    unavailable: dict[str, str] = field(default_factory=dict)  # the report's op kinds this install cannot build
    noise_probe: dict[str, Any] = field(default_factory=dict)  # harness.trial.noise_probe's figures, when asked
    peaks: dict[str, Any] | None = None  # the device's peaks, when asked (harness.cards.peaks reads the layout)
    plans: dict[str, dict[str, Any]] = field(default_factory=dict)  # card id -> {shape} or {error}, when asked

    def experiment(self, label: str) -> ExperimentFacts:
        """The facts of one described experiment; ExperimentError (its one line) when it could not be loaded."""
        if label in self.experiment_errors:
            raise ExperimentError(self.experiment_errors[label])
        return self.experiments[label]


def per_call(median_us: float, calls: int) -> float:
    """A time per invocation as a time per original call: the one place a batch's time is divided."""
    return float(median_us) / max(int(calls), 1)


def one_line(exc: BaseException, limit: int = 300) -> str:
    """A failure as a reply's reason: `ExceptionType: first line of the message`, at most `limit` characters."""
    text = str(exc).strip().splitlines()
    message = f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
    return message if len(message) <= limit else message[: limit - 3] + "..."
