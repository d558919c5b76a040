"""The card's spec: everything the worker child needs to build one card's workload and to judge, time and
profile what runs on it, the same for every request of that card.

The run (harness.run.card_search) makes one `CardSpec` per card, and every card request carries it
(harness.boundary.requests), so the worker child (harness.trial.server), a new child after a crash and the
ncu child (harness.trial.ncu_child) each rebuild the card from any one request alone. It carries the card
itself, as the run has it (a chunk card derived from the report, a round-2 card from best.json), so no child
re-reads or re-lints the report. The settings it carries are here, torch-free, because both sides read them:
the config's schema (harness.config.schema) is made of them, and the workloads build from them.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, is_dataclass
from typing import Any, Mapping

from harness.cards.applied import AppliedVariant
from harness.cards.dtype import CardDtype
from harness.cards.model import Card, parse_report
from harness.cards.rules import RuleSet
from harness.errors import CorrectnessError

# The correctness rule's default emulated_factor (harness.config.schema.CorrectnessConfig, and CorrectnessRule for
# a section without one): one step of the lowered grid at the largest element.
EMULATED_FACTOR = 2.0


@dataclass
class AttentionSettings:
    """How an attention card's workload is shaped where the card does not say (harness.workloads.attention:
    its AttentionConfig; `workload.attention` in the config, `CardSpec.attention` on the way)."""

    heads: int = 10  # per rank: 40 heads / 4 Ulysses ranks
    head_dim: int = 128
    queries: int | None = None  # overrides the count derived from the resolution
    batch: int = 1
    frames_per_chunk: int = 3  # latent frames per chunk
    pixels_per_token: int = 16  # VAE stride 8 x patch 2


@dataclass
class CastSettings:
    """How an output cast card's workload is shaped (harness.workloads.cast: its CastConfig; `workload.cast`,
    `CardSpec.cast`)."""

    dst_dtype: str = "uint8"
    src_dtype: str | None = None  # None: the workload's dtype
    frames: int | None = None  # None: shape parameters, the report pair, else DEFAULT_FRAMES
    channels: int = 3
    height: int | None = None  # None: from the resolution
    width: int | None = None
    batch: int = 1


@dataclass(frozen=True)
class CorrectnessRule:
    """The correctness rule's factors (`experiment.correctness` in the config: what each means is said there,
    harness.config.schema.CorrectnessConfig); harness.trial.correctness applies them. Here because the run sets
    them on a card's spec and the worker child judges by them."""

    same_factor: float = 4.0
    lowered_factor: float = 4.0
    emulated_factor: float = EMULATED_FACTOR

    def __post_init__(self) -> None:
        for name in ("same_factor", "lowered_factor", "emulated_factor"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise CorrectnessError(f"experiment.correctness.{name}={value!r}: must be a number > 0")

    @classmethod
    def from_config(cls, section: Mapping[str, Any]) -> CorrectnessRule:
        """The rule of a config section (`experiment.correctness`)."""
        return cls(float(section["same_factor"]), float(section["lowered_factor"]),
                   float(section.get("emulated_factor", EMULATED_FACTOR)))


@dataclass(frozen=True)
class TimingSettings:
    warmup: int | None = None  # None: warm up until the timing is stable; an int: that many calls
    min_repeats: int = 5
    budget_s: float = 0.4
    cuda_graph: bool = False


# The fields that build the card's workload and prepared baseline (CardSpec.workload_key).
_BUILDING = ("card", "experiment_module", "device", "scale", "seed", "inputs_dir", "attention", "cast", "applied",
             "adopted", "reference_path", "dtype")


@dataclass(frozen=True)
class CardSpec:
    """One card's workload, and how what runs on it is judged, timed and profiled."""

    # -- the workload --
    card: dict[str, Any]  # the card as the run has it (Card.to_dict())
    experiment_module: str
    device: str
    scale: float
    seed: int = 0
    inputs_dir: str | None = None
    attention: AttentionSettings = field(default_factory=AttentionSettings)
    cast: CastSettings = field(default_factory=CastSettings)
    applied: list[AppliedVariant] = field(default_factory=list)  # what earlier rounds adopted (harness.trial.rounds)
    # A chunk card's contained op cards' adopted variants (harness.cards.applied.adopted_in_chunk), to compose.
    adopted: dict[str, list[AppliedVariant]] = field(default_factory=dict)
    reference_path: str | None = None  # the card's float64 reference and standard, written with the baseline
    # Where float64 references are kept by their inputs' hash across runs (harness.trial.reference_cache).
    reference_cache: str | None = None
    # The card's dtype and math mode, decided by the run (harness.cards.dtype); None: the experiment's dtype.
    dtype: CardDtype | None = None
    # -- how it is judged, timed and profiled --
    correctness: CorrectnessRule = field(default_factory=CorrectnessRule)
    physics_slack: float | None = None  # how far below the device's floor a time may be (harness.trial.physics)
    timing: TimingSettings = field(default_factory=TimingSettings)
    rules: RuleSet = field(default_factory=RuleSet)  # conf/rules, as the run read and checked it
    profiler: dict[str, Any] = field(default_factory=dict)  # the resolved backend's config; name none: time only
    environment: dict[str, Any] = field(default_factory=dict)

    @property
    def card_id(self) -> str:
        return self.load_card().id

    def load_card(self) -> Card:
        """The card, parsed."""
        return parse_report({"cards": [self.card]}, "card spec").cards[0]

    def workload_key(self) -> str:
        """Equal for the specs whose requests the child can serve from one built workload and prepared baseline:
        what judges, times or profiles them may differ."""
        return json.dumps({name: getattr(self, name) for name in _BUILDING}, sort_keys=True, default=_json_value)


def _json_value(value: Any) -> Any:
    """A settings dataclass as its fields (the card itself is JSON already: nothing of it is copied)."""
    return asdict(value) if is_dataclass(value) and not isinstance(value, type) else str(value)
