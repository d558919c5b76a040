"""The harness's config as dataclasses: every key's type and default, and the range or choices it admits.

Stored in Hydra's ConfigStore as `harness_schema`, which conf/config.yaml names first in its defaults
list (https://hydra.cc/docs/tutorials/structured_config/schema/): every config file and override is
merged into it, so a value of the wrong type fails as Hydra composes the config, and harness.config.validate
checks the ranges and choices recorded here in each field's metadata (`Bounds`, `CHOICES`).

Each default lives once: here, or, for the search and profiler groups and each experiment's own
settings, in its YAML file (a field without a default here is MISSING until a file gives it).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping, cast

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from harness.boundary.spec import AttentionSettings, CastSettings, CorrectnessRule

SCHEMA_NAME = "harness_schema"
# `experiment=auto` is not an experiment but the mode that picks them per card: its file sets `experiment: null`.
AUTO = "auto"
SAMPLERS = ("auto", "bruteforce", "tpe", "random")
# Field metadata keys: a number's range, a string's choices.
BOUNDS, CHOICES = "bounds", "choices"
# Sections an experiment file may extend with keys of its own (`experiment.predict_from` began so):
# open at composition; harness.config.validate admits there the keys a shipped experiment file declares.
OPEN_SECTIONS = ("experiment", "workload")


@dataclass(frozen=True)
class Bounds:
    """The interval a number must lie in; None: unbounded on that side."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False

    def admits(self, value: float) -> bool:
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return self.high is None or (value < self.high if self.high_open else value <= self.high)


def bounded(default: Any = MISSING, *, low: float | None = None, high: float | None = None,
            low_open: bool = False, high_open: bool = False) -> Any:
    """A numeric field with its range (harness.config.validate says "a number in (0, 1]", "an integer >= 1")."""
    return field(default=default, metadata={BOUNDS: Bounds(low, high, low_open, high_open)})


def one_of(default: Any, *choices: str) -> Any:
    """A string field that admits only `choices`."""
    return field(default=default, metadata={CHOICES: choices})


@dataclass
class CorrectnessConfig:
    # Outputs are judged against the float64 reference (harness.trial.correctness): a variant in the baseline's
    # precision may err at most same_factor x max(the baseline's own error, the dtype's unit roundoff); one
    # that lowers the precision on purpose (Prepared.precision), at most lowered_factor x (u_p + sqrt(K) x
    # u_fp32) for its dtype's u_p and the reduction length K, and, against the reference emulating its
    # precision (its inputs rounded to it, summed exactly), at most emulated_factor x (u_p if its output is
    # rounded to that dtype + sqrt(K) x u_fp32); below 2, one rounding step at the largest element fails.
    # 0 or less would reject every variant, a baseline-exact one too.
    same_factor: float = bounded(CorrectnessRule.same_factor, low=0, low_open=True)
    lowered_factor: float = bounded(CorrectnessRule.lowered_factor, low=0, low_open=True)
    emulated_factor: float = bounded(CorrectnessRule.emulated_factor, low=0, low_open=True)


@dataclass
class ExperimentConfig:
    """What conf/experiment/NAME.yaml sets; correctness is shared unless the file says otherwise."""

    name: str = MISSING  # must equal the module's Experiment.name
    module: str = MISSING  # the Python module that registers the experiment
    correctness: CorrectnessConfig = field(default_factory=CorrectnessConfig)
    # Variants Optuna searches, each with its parameters' choices (empty: no parameters); null: none.
    space: dict[str, Any] | None = None
    # Which cards a run takes without cards=: a selection rule (harness.run.selection) or card ids.
    default_cards: Any = None
    # An earlier run's diff.json (or a list of them) whose op cards predict a chunk card's speedup.
    predict_from: Any = None
    # Earlier op-card runs' best.json (or a list): what they adopted on a chunk card's op cards, which the
    # chunk experiment's `composed` variant applies to the whole module (harness.cards.applied.adopted_in_chunk).
    compose_from: Any = None


@dataclass
class SearchConfig:
    """conf/search/default.yaml gives every value, with what each means."""

    sampler: str = one_of(MISSING, *SAMPLERS)
    exhaustive_max: int = bounded(low=1)
    n_trials: int = bounded(low=1)
    timeout: float | None = bounded(low=0, low_open=True)
    storage: str | None = MISSING
    resume: bool = MISSING
    seed: int | None = bounded(low=0)
    trial_deadline_s: float | None = bounded(low=0, low_open=True)
    worker_memory_limit_gb: float | None = bounded(low=0, low_open=True)
    heartbeat_interval_s: int | None = bounded(low=1)
    grace_period_s: int | None = bounded(low=1)
    max_retry: int | None = bounded(low=0)
    worker: int | str | None = MISSING


@dataclass
class SameBandConfig:
    # The SAME band per device class: a speedup whose whole 95% interval lies within [1/(1+band), 1+band]
    # is SAME; wholly above, FASTER; wholly below, SLOWER; else INCONCLUSIVE. A GPU resolves a 2% change
    # that a shared CPU cannot. Also the band of the single-sample rule for report cards (kernel sums).
    cpu: float = bounded(0.05, low=0, high=1, low_open=True, high_open=True)
    cuda: float = bounded(0.02, low=0, high=1, low_open=True, high_open=True)


@dataclass
class PhysicsSlackConfig:
    # How far below the device's physical floor (minimum bytes at peak bandwidth, FLOPs at the highest math
    # peak: harness.trial.physics) a variant's time may be before it is infeasible as stale, memoized or skipped
    # work. A GPU's peaks are its own; a CPU's are a measured copy rate that cached data beats several-fold.
    cpu: float = bounded(20.0, low=1)
    cuda: float = bounded(2.0, low=1)


@dataclass
class TimingConfig:
    # Calls before the first timed sample: null warms up until the timing is stable (the median of the
    # last 3 calls within 10% of the 3 before); an integer makes exactly that many.
    warmup: int | None = bounded(None, low=0)
    min_repeats: int = bounded(5, low=1)
    budget_s: float = bounded(0.4, low=0, low_open=True)
    # The baseline is re-timed between trials with this budget to catch drift.
    drift_budget_s: float = bounded(0.15, low=0, low_open=True)
    # Baseline and best are re-timed in this many paired rounds (ABBA order) for the before/after verdict:
    # the speedup is the geometric mean of the rounds' ratios, with its 95% interval. 0: no confirmation
    # (every verdict UNCONFIRMED, nothing adopted); a verdict needs at least 2.
    confirm_rounds: int = bounded(8, low=0)
    # CUDA only: replay the call in a CUDA graph (for launch-bound calls such as the M=3 linears).
    cuda_graph: bool = False
    same_band: SameBandConfig = field(default_factory=SameBandConfig)
    physics_slack: PhysicsSlackConfig = field(default_factory=PhysicsSlackConfig)
    # CPU only: torch threads of the measuring worker; null keeps torch's default (one per core). On a
    # shared machine, 1 avoids the multi-millisecond stalls of threads waiting for a busy core.
    cpu_threads: int | None = bounded(None, low=1)
    # Seconds of the A/A probe the worker runs before the first card (harness.trial.noise_probe): with the confirm
    # rounds, what the run's noise verdict (run.json's `noise`, summary.md's first lines) is read from. 0: none.
    noise_probe_s: float = bounded(0.1, low=0)


@dataclass
class WorkloadConfig:
    # Shrinks the largest dimensions so a small machine can run the cards; recorded in every card.
    # null: 1.0 on cuda, cpu_scale on cpu.
    scale: float | None = bounded(None, low=0, high=1, low_open=True)
    cpu_scale: float = bounded(0.25, low=0, high=1, low_open=True)
    seed: int = bounded(0, low=0)
    # The dtype every card of the run is built in (bfloat16, float16, float32, tf32: float32 with TF32 math);
    # null: each card's own, from its evidence (harness.cards.dtype). For a run over a card filter (cards=).
    dtype: str | None = None
    attention: AttentionSettings = field(default_factory=AttentionSettings)
    cast: CastSettings = field(default_factory=CastSettings)


@dataclass
class InputsConfig:
    # Folder of captured inputs named by their sha256 (<sha256>.safetensors or .pt); null: synthetic.
    dir: str | None = None
    # Where float64 references are kept by their inputs' hash, reused by a resume, a later round and auto's
    # experiments (harness.trial.reference_cache); null: `references/` beside the run folder.
    references: str | None = None


@dataclass
class AutoConfig:
    """experiment=auto's own settings (harness.run.auto); other runs ignore them."""

    # Write plan.json and plan.md (every card of the report, the experiments that test its proposal,
    # whether this run's cards= selects it) and measure nothing.
    plan_only: bool = False
    # The cards auto runs without cards= (a rule or ids, harness.run.selection); conf/experiment/auto.yaml sets it.
    default_cards: Any = None


@dataclass
class HarnessConfig:
    # null for experiment=auto (conf/experiment/auto.yaml): auto composes each experiment's own config.
    experiment: ExperimentConfig | None = field(default_factory=ExperimentConfig)
    profiler: Any = MISSING  # conf/profiler/NAME.yaml: each backend has keys of its own
    search: SearchConfig = field(default_factory=SearchConfig)
    rules: Any = MISSING  # conf/rules/default.yaml, checked by harness.cards.rules.RuleSet
    # A report path; null means the baseline report shipped inside the package.
    report: str | None = None
    # Which cards to run: null (the experiment's default selection), a list of card ids, or a filter
    # such as {stage: vae, op: conv3d, resolution: 480x832}. `python -m harness.report show` lists ids.
    cards: Any = None
    # auto picks cuda when torch sees a GPU, else cpu.
    device: str = "auto"
    # The GPU the report was profiled on; null: what the report declares (its `device` key, or
    # <report>.declared.json beside it: the shipped report's says H200; a capture declares the GPU it ran on).
    # Baselines are said to reproduce the report, and the end-to-end view projects a saving onto the report's
    # times, only for cards measured on this GPU (the latter at workload scale 1).
    report_device: str | None = None
    auto: AutoConfig = field(default_factory=AutoConfig)
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    inputs: InputsConfig = field(default_factory=InputsConfig)
    timing: TimingConfig = field(default_factory=TimingConfig)


def is_auto(cfg: Mapping[str, Any]) -> bool:
    """Whether a composed config is `experiment=auto`'s (no experiment: it picks them)."""
    return cfg.get("experiment") is None


def experiment_of(config: HarnessConfig) -> ExperimentConfig:
    """The experiment a config runs: every config names one but experiment=auto's, which harness.run.auto splits
    into one config per experiment it picks."""
    if config.experiment is None:
        raise ValueError("experiment=auto names no experiment to run; harness.run.auto runs each one it picks")
    return config.experiment


def typed(config: Mapping[str, Any]) -> HarnessConfig:
    """A composed and checked config (harness.config.validate) as HarnessConfig, every value typed: how the run's
    code reads it. Converted once where a run starts (harness.__main__, and each experiment auto runs)."""
    return cast(HarnessConfig, OmegaConf.to_object(OmegaConf.merge(schema_node(), config)))


def plain(config: HarnessConfig) -> dict[str, Any]:
    """The config as plain data, as composed: what is hashed, recorded (the run identity) and sent to the worker."""
    return dataclasses.asdict(config)


def schema_node() -> DictConfig:
    """HarnessConfig as the node Hydra merges the config files into."""
    node = OmegaConf.structured(HarnessConfig)
    for name in OPEN_SECTIONS:
        OmegaConf.set_struct(node[name], False)
    return node


ConfigStore.instance().store(name=SCHEMA_NAME, node=schema_node())
