"""What crosses the worker boundary: the job a trial is, what it came to, and one table of outcomes.

The run (harness.run.card_search) sends one `TrialJob` per request as a JSON line; the worker child
(harness.trial.handlers) and the ncu child (harness.profile.ncu_child) rebuild the trial from it alone:
it carries the card itself, as the run has it (a chunk card derived from the report, a round-2 card from
best.json), so no child re-reads or re-lints the report. The child answers with one `TrialResult`.
Before it measures, the run asks the same child what it needs of the torch side (`JobKind.DESCRIBE`: the
device, the experiment, the profiler, the report's chunk cards; harness.descriptions).

`TrialStatus` is the one vocabulary of outcomes: the child's answers, the parent's own (a crash, a
missed deadline) and the search's (not drawn, interrupted, surplus). `OUTCOMES` maps each to Optuna's
trial state and to the summary's wording; no status string is compared anywhere else.

Pure Python (no torch, no Optuna): both processes import it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields, is_dataclass, replace
from enum import Enum
from typing import Any, Mapping, TypeVar

from harness.cards.dtype import CardDtype

BASELINE = "baseline"
# The correctness rule's default emulated_factor (harness.config.schema.CorrectnessConfig, and
# harness.trial.correctness.Rule for a section without one): one step of the lowered grid at the largest element.
# Here because both sides of the worker boundary read it.
EMULATED_FACTOR = 2.0


class TrialStatus(str, Enum):
    COMPLETE = "complete"
    INFEASIBLE = "infeasible"  # measured, and its output is wrong (or it cheats a check)
    SKIPPED = "skipped"  # the variant raised VariantSkipped: it cannot run here
    NOT_DRAWN = "not_drawn"  # left out of the search: this device can never run it
    FAILED = "failed"  # it raised
    OOM = "oom"
    CRASHED = "crashed"  # the worker process died
    DEADLINE = "deadline"  # no answer within search.trial_deadline_s; the worker was killed
    INTERRUPTED = "interrupted"  # the run was stopped mid-trial; the trial went back in the queue
    SURPLUS = "surplus"  # created past the shared queue by a race; never measured
    SETUP = "setup"  # the card's workload cannot be built: the configuration's fault, not the variant's


@dataclass(frozen=True)
class Outcome:
    """What a status means to the search and the summary."""

    optuna_state: str  # the name of optuna.trial.TrialState the trial ends in
    summary: str | None  # the summary's list it is shown in (skipped / infeasible / failed); None: not listed
    restarts_worker: bool = False  # the child did not survive: a new one serves the next request


OUTCOMES: dict[TrialStatus, Outcome] = {
    TrialStatus.COMPLETE: Outcome("COMPLETE", None),
    TrialStatus.INFEASIBLE: Outcome("PRUNED", "infeasible"),
    TrialStatus.SKIPPED: Outcome("PRUNED", "skipped"),
    TrialStatus.NOT_DRAWN: Outcome("PRUNED", None),
    TrialStatus.FAILED: Outcome("FAIL", "failed"),
    TrialStatus.OOM: Outcome("FAIL", "failed"),
    TrialStatus.CRASHED: Outcome("FAIL", "failed", restarts_worker=True),
    TrialStatus.DEADLINE: Outcome("FAIL", "failed", restarts_worker=True),
    TrialStatus.INTERRUPTED: Outcome("FAIL", "failed"),
    TrialStatus.SURPLUS: Outcome("PRUNED", None),
    TrialStatus.SETUP: Outcome("FAIL", "failed"),
}


def status_of(value: str | None) -> TrialStatus | None:
    """A stored status (a trial's user attribute), or None for a trial that recorded none."""
    try:
        return TrialStatus(value) if value else None
    except ValueError:
        return None


class JobKind(str, Enum):
    MEASURE = "measure"  # the baseline or one trial: checked, timed, profiled, its card written
    RETIME = "retime"  # the baseline timed again (the drift check between trials)
    CONFIRM = "confirm"  # baseline and best in paired rounds; both cards restated from them
    DESCRIBE = "describe"  # what the run needs of the torch side (harness.descriptions.DescribeJob)


@dataclass
class AttentionSettings:
    """How an attention card's workload is shaped where the card does not say (harness.workloads.attention:
    its AttentionConfig; `workload.attention` in the config, `TrialJob.attention` on the way)."""

    heads: int = 10  # per rank: 40 heads / 4 Ulysses ranks
    head_dim: int = 128
    queries: int | None = None  # overrides the count derived from the resolution
    batch: int = 1
    frames_per_chunk: int = 3  # latent frames per chunk
    pixels_per_token: int = 16  # VAE stride 8 x patch 2


@dataclass
class CastSettings:
    """How an output cast card's workload is shaped (harness.workloads.cast: its CastConfig; `workload.cast`,
    `TrialJob.cast`)."""

    dst_dtype: str = "uint8"
    src_dtype: str | None = None  # None: the workload's dtype
    frames: int | None = None  # None: shape parameters, the report pair, else DEFAULT_FRAMES
    channels: int = 3
    height: int | None = None  # None: from the resolution
    width: int | None = None
    batch: int = 1


@dataclass(frozen=True)
class TimingSettings:
    warmup: int | None = None  # None: warm up until the timing is stable; an int: that many calls
    min_repeats: int = 5
    budget_s: float = 0.4
    cuda_graph: bool = False


@dataclass(frozen=True)
class ConfirmPlan:
    """The paired rounds of a confirm job, and the cards they restate."""

    variant: str
    params: dict[str, Any]
    rounds: int
    budget_s: float
    baseline_card: str  # the cards the search wrote ...
    tried_card: str
    baseline_out: str  # ... and where the child writes them restated from the rounds
    tried_out: str


@dataclass(frozen=True)
class TrialJob:
    """Everything one request needs: how to build the card's workload, which trial, how to judge and time it."""

    # -- the workload: the same for every request of one card (`workload_key`) --
    card: dict[str, Any]  # the card as the run has it (Card.to_dict())
    experiment_module: str
    device: str
    scale: float
    seed: int = 0
    inputs_dir: str | None = None
    attention: AttentionSettings = field(default_factory=AttentionSettings)
    cast: CastSettings = field(default_factory=CastSettings)
    applied: list[dict[str, Any]] = field(default_factory=list)  # what earlier rounds adopted (harness.trial.rounds)
    # A chunk card's contained op cards' adopted variants (harness.trial.rounds.adopted_by_card), to compose.
    adopted: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    reference_path: str | None = None  # the card's float64 reference and standard, written with the baseline
    # Where float64 references are kept by their inputs' hash across runs (harness.trial.reference_cache).
    reference_cache: str | None = None
    # The card's dtype and math mode, decided by the run (harness.cards.dtype); None: the experiment's dtype.
    dtype: CardDtype | None = None
    # -- how it is judged, timed and profiled --
    correctness: dict[str, Any] = field(default_factory=dict)  # harness.trial.correctness.Rule
    physics_slack: float | None = None  # how far below the device's floor a time may be (harness.trial.physics)
    timing: TimingSettings = field(default_factory=TimingSettings)
    rules: dict[str, Any] | None = None  # conf/rules; None: the shipped default
    profiler: dict[str, Any] = field(default_factory=dict)  # the resolved backend's config; name none: time only
    environment: dict[str, Any] = field(default_factory=dict)
    # -- this request --
    kind: JobKind = JobKind.MEASURE
    role: str = BASELINE  # baseline, trial, drift, confirm ...
    variant: str | None = None  # the variant a trial runs (the baseline's name for role baseline)
    params: dict[str, Any] = field(default_factory=dict)
    label: dict[str, Any] = field(default_factory=dict)  # the card's `harness` record: run, role, trial ...
    card_path: str | None = None  # where the measured card is written
    extra: dict[str, Any] = field(default_factory=dict)  # written into the measured card's extras
    retime: TimingSettings | None = None
    confirm: ConfirmPlan | None = None

    @property
    def warmup(self) -> int | None:
        return self.timing.warmup

    @property
    def card_id(self) -> str:
        return self.load_card().id

    def load_card(self) -> Any:
        """The card, parsed (harness.cards.model.Card)."""
        from harness.cards.model import parse_report

        return parse_report({"cards": [self.card]}, "trial job").cards[0]

    def workload_key(self) -> str:
        """Equal for requests the child can serve from one built workload and prepared baseline."""
        building = ("card", "experiment_module", "device", "scale", "seed", "inputs_dir", "attention", "cast",
                    "applied", "adopted", "reference_path", "dtype")
        return json.dumps({name: json_plain(getattr(self, name)) for name in building}, sort_keys=True, default=str)

    def for_trial(self, variant: str | None, params: Mapping[str, Any], role: str, **changes: Any) -> TrialJob:
        return replace(self, variant=variant, params=dict(params), role=role, **changes)

    def to_json(self) -> dict[str, Any]:
        return json_plain(asdict(self))

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> TrialJob:
        values = known_fields(cls, obj, "trial job")
        if isinstance(values.get("timing"), Mapping):
            values["timing"] = TimingSettings(**known_fields(TimingSettings, values["timing"], "trial job timing"))
        if isinstance(values.get("retime"), Mapping):
            values["retime"] = TimingSettings(**known_fields(TimingSettings, values["retime"], "trial job retime"))
        if isinstance(values.get("confirm"), Mapping):
            values["confirm"] = ConfirmPlan(**known_fields(ConfirmPlan, values["confirm"], "trial job confirm"))
        if isinstance(values.get("dtype"), Mapping):
            values["dtype"] = CardDtype.from_dict(values["dtype"])
        for name, settings in (("attention", AttentionSettings), ("cast", CastSettings)):
            if isinstance(values.get(name), Mapping):
                values[name] = settings(**known_fields(settings, values[name], f"trial job {name}"))
        if "kind" in values:
            values["kind"] = JobKind(values["kind"])
        return cls(**values)


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
        return cls(**known_fields(cls, obj, "judgement", strict=False))

    def why_infeasible(self) -> str:
        """One line: the numbers, and the check's own reason when it has one (a check beyond the output's
        error, the physical floor say, refuses an output within its bound: then the reason alone)."""
        if self.note and self.max_rel <= self.bound:
            return self.note
        why = f" ({self.note})" if self.note else ""
        return f"max_rel {self.max_rel:.3g} > bound {self.bound:.3g}{why}"


@dataclass(frozen=True)
class SideRounds:
    """One side of the confirm rounds: its median per original call in each round."""

    round_us: list[float]  # per original call (a batched side's invocation divided by its calls)
    calls: int


@dataclass(frozen=True)
class TrialResult:
    """What one request came to."""

    status: TrialStatus
    reason: str = ""
    card_path: str | None = None  # the measured card, written before the answer (also for an infeasible one)
    median_us: float | None = None  # per invocation
    per_call_us: float | None = None  # per original call: what the search minimises
    calls: int = 1
    judgement: Judgement | None = None
    seconds: dict[str, float] = field(default_factory=dict)  # wall time by phase: timing_s, profile_s, setup_s ...
    baseline_rounds: SideRounds | None = None  # a confirm job's two sides
    tried_rounds: SideRounds | None = None
    restart: bool = False  # the child's CUDA context is unusable: the parent starts a new one

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

    def to_json(self) -> dict[str, Any]:
        return json_plain(asdict(self))

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> TrialResult:
        values = known_fields(cls, obj, "trial result")
        values["status"] = TrialStatus(values["status"])
        if isinstance(values.get("judgement"), Mapping):
            values["judgement"] = Judgement.from_dict(values["judgement"])
        for side in ("baseline_rounds", "tried_rounds"):
            if isinstance(values.get(side), Mapping):
                values[side] = SideRounds(**values[side])
        return cls(**values)


def per_call(median_us: float, calls: int) -> float:
    """A time per invocation as a time per original call: the one place a batch's time is divided."""
    return float(median_us) / max(int(calls), 1)


_T = TypeVar("_T")


def known_fields(cls: type[_T], obj: Mapping[str, Any], what: str, strict: bool = True) -> dict[str, Any]:
    """The values of `obj` that are fields of the dataclass `cls`; with `strict`, a key it lacks is an error."""
    names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(obj) - names)
    if unknown and strict:
        raise ValueError(f"{what}: unknown keys {', '.join(unknown)} (written by another harness version?)")
    return {k: v for k, v in obj.items() if k in names}


def json_plain(value: Any) -> Any:
    """JSON's own types: enums by value, tuples as lists, dataclasses as their fields."""
    if isinstance(value, Enum):
        return value.value
    if is_dataclass(value) and not isinstance(value, type):
        return json_plain(asdict(value))
    if isinstance(value, Mapping):
        return {k: json_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_plain(v) for v in value]
    return value
