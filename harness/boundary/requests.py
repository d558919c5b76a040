"""What the run asks its worker child: four requests, each a typed dataclass carrying all its work needs,
each answered by its own reply (`Request.reply`, harness.boundary.replies).

- `Describe`: what the run needs of the torch side before it measures. The run's process never imports torch:
  experiment modules, device resolution, the profiler backends and the workloads all do, so it asks the child
  for the experiments' facts, the configured device resolved (with the machine's environment for run.json),
  the profiler section resolved for that device and made once, and what only the workloads derive from a
  normalized report (its chunk cards, each output cast card's frame count, the op kinds this install cannot
  build). Each part is answered when given.
- `Measure`: the card's baseline (it sets the correctness standard and saves the reference every trial is
  held to) or one trial: checked, timed, profiled, its card written before the answer.
- `Retime`: the kept baseline timed again, with its own timing (the drift check between trials).
- `Confirm`: the baseline and the search's best in paired rounds (`ConfirmPlan`); both cards restated.

The three card requests carry the card's `CardSpec` (harness.boundary.spec), so any one of them rebuilds the
card. harness.boundary.framing names each request's type on the wire.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar

from harness.boundary.replies import Confirmed, Described, Measured, Reply, Retimed
from harness.boundary.spec import CardSpec, TimingSettings
from harness.cards.measured import TrialLabel

R = TypeVar("R", bound=Reply)


class Request(Generic[R]):
    """A request answered by a reply of type `reply` (R), a failure included."""

    reply: ClassVar[type[Reply]]


@dataclass(frozen=True, kw_only=True)
class Describe(Request[Described]):
    """What the run asks before it measures; each part is answered when given."""

    reply = Described
    # label -> (module, the name the config expects it to define; None: any)
    experiments: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    device: str | None = None  # as configured: resolved, and the experiments' needs judged on it
    config: dict[str, Any] | None = None  # the run's config, plain: with a device, the environment (its hash)
    profiler: dict[str, Any] | None = None  # the profiler section (its metric set): resolved for the device
    report: dict[str, Any] | None = None  # a normalized report (Report.to_dict()): what the workloads derive
    noise_probe_s: float | None = None  # with a device: the A/A probe of the machine's noise, this long
    peaks: bool = False  # with a device: its peaks (a CPU's measured and cached), for the run's predictions
    # card id -> {op_kind, shape_parameters, dtype, scale, resolution}: the shape each card's op runs at that scale
    plans: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class CardRequest(Request[R]):
    """A request about one card; its spec is all the child needs to build the card, or to find it kept."""

    spec: CardSpec


@dataclass(frozen=True, kw_only=True)
class Measure(CardRequest[Measured]):
    """The baseline or one trial, measured into a card."""

    reply = Measured
    variant: str  # the variant a trial runs; for the baseline, the name its card's label gives it
    params: dict[str, Any] = field(default_factory=dict)
    baseline: bool = False  # the card's baseline: it sets the standard, and saves the reference, trials are held to
    card_path: str  # where the measured card is written, before the answer
    label: TrialLabel | None = None  # the card's `harness` record; None: measured outside a run (a script)
    extra: dict[str, Any] = field(default_factory=dict)  # written into the measured card's extras


@dataclass(frozen=True, kw_only=True)
class Retime(CardRequest[Retimed]):
    """The kept baseline timed again."""

    reply = Retimed
    timing: TimingSettings


@dataclass(frozen=True)
class ConfirmPlan:
    """The paired rounds of a Confirm, and the cards they restate."""

    variant: str
    params: dict[str, Any]
    rounds: int  # planned; more while the verdict is undecided (harness.cards.disturbance.rounds_wanted) ...
    max_rounds: int  # ... up to this many in all
    band: float  # the SAME band the verdict is judged by
    budget_s: float  # each side's timing budget in a round
    baseline_card: str  # the cards the search wrote ...
    tried_card: str
    baseline_out: str  # ... and where the child writes them restated from the rounds
    tried_out: str


@dataclass(frozen=True, kw_only=True)
class Confirm(CardRequest[Confirmed]):
    """The baseline and the search's best in paired rounds."""

    reply = Confirmed
    plan: ConfirmPlan
