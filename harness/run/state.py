"""What a run carries: its context, each card's outcome, and its one-line error."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.boundary.replies import ExperimentFacts
from harness.boundary.spec import TimingSettings
from harness.cards.diff_rows import ReportDiff
from harness.cards.model import Card, Report
from harness.cards.rules import RuleSet
from harness.config.schema import HarnessConfig
from harness.errors import HarnessError
from harness.run.noise import NoiseVerdict, judge_noise
from harness.run.progress import RunProgress
from harness.run.worker import TrialWorker

if TYPE_CHECKING:
    from harness.search import SearchTally


class RunError(HarnessError):
    """Bad configuration or input found before measuring; one line, with the fix."""


@dataclass
class CardOutcome:
    """One card's result: its baseline, the best variant the search tried, and whether it was adopted.

    A variant is adopted only when it is feasible and its paired confirm rounds say FASTER; otherwise
    the card keeps its baseline (best.json holds the baseline card) and the tried variant is still
    shown with its verdict.
    """

    card_id: str
    report_card: Card
    baseline: Card
    tried: Card | None = None  # the search's best feasible variant, re-timed in the confirm rounds
    tried_variant: str | None = None
    tried_params: dict[str, Any] = field(default_factory=dict)
    confirmation: dict[str, Any] | None = None  # harness.cards.noise.PairedVerdict.as_dict(), or why none
    skipped: dict[str, str] = field(default_factory=dict)
    infeasible: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    n_trials: int = 0
    search: SearchTally | None = None  # distinct configurations tried of those drawable, repeats answered

    @property
    def adopted(self) -> bool:
        return self.tried is not None and (self.confirmation or {}).get("verdict") == "FASTER"

    @property
    def best(self) -> Card | None:
        """The adopted variant's card; None when the baseline is kept."""
        return self.tried if self.adopted else None

    @property
    def kept(self) -> Card:
        """What best.json holds for this card: the adopted variant, else the baseline."""
        return self.tried if self.adopted and self.tried is not None else self.baseline


@dataclass
class RunContext:
    cfg: HarnessConfig
    run_dir: Path
    experiment: ExperimentFacts
    rules: RuleSet
    device: str
    profiler: str  # the backend's name, resolved by the worker (harness.profile.registry)
    environment: dict[str, Any]
    settings: TimingSettings
    storage: str
    report: Report  # the input report, normalized and classified, with its chunk cards: time shares, selection
    worker: TrialWorker
    starts_counted: int  # the worker's starts before this run (harness.run.worker.TrialWorker.startups)
    cast_frames: dict[str, int] = field(default_factory=dict)  # a cast card's frames, from its report pair
    phases: dict[str, float] = field(default_factory=lambda: {"measurement_s": 0.0, "profiling_s": 0.0,
                                                                  "setup_s": 0.0})
    diff: ReportDiff | None = None  # the latest before/after diff written
    # Variants of the space left out of the search because this device cannot run them, with why.
    not_drawn: dict[str, str] = field(default_factory=dict)
    progress: RunProgress | None = None  # trials done, time spent, ETA (shown; its costs go into run.json)
    noise_probe: dict[str, Any] = field(default_factory=dict)  # the worker's A/A probe (harness.trial.noise_probe)

    def noise(self, outcomes: list[CardOutcome]) -> NoiseVerdict:
        """The run's noise verdict so far: the probe and the confirm rounds of `outcomes` (harness.run.noise)."""
        return judge_noise(self.noise_probe, [o.confirmation for o in outcomes])

    def count_worker_starts(self) -> None:
        """The worker's starts since the last count into the phases: paid once per run, again per restart."""
        started = self.worker.startups[self.starts_counted:]
        self.starts_counted = len(self.worker.startups)
        self.phases["worker_startup_s"] = self.phases.get("worker_startup_s", 0.0) + sum(started)
        self.phases["worker_starts"] = self.phases.get("worker_starts", 0) + len(started)


def same_band(ctx: RunContext) -> float:
    """The SAME band of this run's device class (timing.same_band.cpu or .cuda)."""
    bands = ctx.cfg.timing.same_band
    return bands.cuda if ctx.device.startswith("cuda") else bands.cpu


def reference_folder(cfg: HarnessConfig, run_dir: Path) -> Path:
    """Where the run's float64 references are kept by their inputs' hash (harness.trial.reference_cache):
    `inputs.references`, else `references/` beside the run folder."""
    return Path(cfg.inputs.references) if cfg.inputs.references else run_dir.resolve().parent / "references"


def baseline_only(experiment: ExperimentFacts) -> bool:
    return len(experiment.variants) == 1


