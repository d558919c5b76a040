"""What the run's side asks of the torch side before it measures (`JobKind.DESCRIBE`), and the answer.

The parent process never imports torch (the process boundary is the spine, docs' ARCHITECTURE): experiment
modules, device resolution, the profiler backends and the workloads all do. What the run needs of them it asks
the worker child with one `DescribeJob`, and the child answers one `Description`, plain data:

- experiments (by a label the parent chooses): each module's `ExperimentFacts` (name, op kinds, classes,
  hypothesis and check, its variants and the parameters each takes, what the device cannot run), or why it
  cannot be loaded;
- the device as configured (auto, cpu, cuda, cuda:N) resolved, with the machine's environment for run.json;
- the profiler section resolved for that device (auto: ncu where it profiles here) and made once;
- of a normalized report, what only the workloads can derive: its chunk cards, each output cast card's frame
  count, and the op kinds this install cannot build (with what to install).

Every error travels as its one-line message; the parent raises it where its check stands in a run's set-up, so
the order of a run's errors does not depend on which process found them. Pure Python: both processes import it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Sequence

from harness.errors import HarnessError
from harness.jobs import JobKind, json_plain, known_fields


class ExperimentError(HarnessError):
    """An experiment that does not exist or is misconfigured; one line, with the fix."""


def check_space_params(experiment: str, takes: Mapping[str, Sequence[str]], space: Mapping[str, Any]) -> None:
    """Every parameter of the space is one its variant takes (`takes`: each variant's parameters after the
    workload): a typo must not be searched silently. Unknown variants are harness.search.validate_space's."""
    for variant, params in space.items():
        if variant not in takes:
            continue
        for name in params or {}:
            if name not in takes[variant]:
                raise ExperimentError(
                    f"experiment.space.{variant}.{name}: {experiment}'s variant {variant} takes no parameter "
                    f"{name!r}; it takes: {', '.join(takes[variant]) or 'none'}")


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

    def applies_to(self, op_kind: str) -> bool:
        return op_kind in self.op_kinds

    def check_space(self, space: Mapping[str, Any]) -> None:
        check_space_params(self.name, self.variants, space)

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> ExperimentFacts:
        values = known_fields(cls, obj, "experiment facts")
        values["op_kinds"], values["classes"] = tuple(values["op_kinds"]), tuple(values["classes"])
        return cls(**values)


@dataclass(frozen=True)
class DescribeJob:
    """What the parent asks; each part is answered when given."""

    # label -> (module, the name the config expects it to define; None: any)
    experiments: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    device: str | None = None  # as configured: resolved, and the experiments' needs judged on it
    config: dict[str, Any] | None = None  # the run's config, plain: with a device, the environment (its hash)
    profiler: dict[str, Any] | None = None  # the profiler section (its metric set): resolved for the device
    report: dict[str, Any] | None = None  # a normalized report (Report.to_dict()): what the workloads derive
    kind: JobKind = JobKind.DESCRIBE

    def to_json(self) -> dict[str, Any]:
        return json_plain(asdict(self))

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> DescribeJob:
        values = known_fields(cls, obj, "describe job")
        refs = values.get("experiments") or {}
        values["experiments"] = {label: (str(module), name) for label, (module, name) in refs.items()}
        values["kind"] = JobKind(values.get("kind", JobKind.DESCRIBE))
        return cls(**values)


@dataclass(frozen=True)
class Description:
    """The answer: what the child found, and for each part it could not describe, why (one line)."""

    experiments: dict[str, ExperimentFacts] = field(default_factory=dict)  # by the job's labels
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

    def experiment(self, label: str) -> ExperimentFacts:
        """The facts of one described experiment; ExperimentError (its one line) when it could not be loaded."""
        if label in self.experiment_errors:
            raise ExperimentError(self.experiment_errors[label])
        return self.experiments[label]

    def to_json(self) -> dict[str, Any]:
        return json_plain(asdict(self))

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Description:
        values = known_fields(cls, obj, "description")
        values["experiments"] = {label: ExperimentFacts.from_json(facts)
                                 for label, facts in (values.get("experiments") or {}).items()}
        return cls(**values)
