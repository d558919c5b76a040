"""What the harness writes on a card it measured (`card.extra`), typed, and what is the experiment's own.

`MeasuredRecord` is what every measurement writes (harness.trial.measure is its one writer); the run adds its
search, drift, confirmation and rounds keys (`RUN_EXTRAS`), and the card keeps its identity from the
report (`IDENTITY_EXTRAS`). Any other key was written by the experiment's annotate hook: its own evidence,
which summary.md and report.html show as such (`experiment_evidence`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from harness.cards.model import Card

# Kept from the report card: its id, its op kind where the card names one (a captured op replayed as captured),
# where the report got it, what a capture recorded of it (its share of the forward: what `capture --apply`
# predicts from), what a chunk card contains (harness.trial.chunks).
IDENTITY_EXTRAS = frozenset({"id", "op_kind", "ncu_output", "scheduler_note", "capture", "contains", "chunk"})
# Added by the run around the measurement (harness.run.card_search, harness.trial.rounds), and the checks of a
# variant beyond its output (harness.trial.physics: its time against the device's floor; torch state it left).
RUN_EXTRAS = frozenset({"search_timing", "report_card", "baseline_drift", "confirmation", "warm_up",
                        "confirm_error", "applied", "annotate_error", "physics", "state_changes",
                        "second_draw"})
# Variant facts shown elsewhere: the time (the tables', from the confirm rounds), the recipe (recipe.md).
FACTS_SHOWN_ELSEWHERE = frozenset({"nominal_flops_per_call", "per_call_us", "recipe", "carries"})


@dataclass(frozen=True, kw_only=True)
class TrialLabel:
    """A measured card's `harness` record: the run writes it (harness.run.card_search), the worker child stores it
    on the card, and a diff of the stored cards reads it (which run and role each side is, the hypothesis and the
    check that judges it)."""

    experiment: str
    variant: str
    params: dict[str, Any] = field(default_factory=dict)
    role: str  # "baseline" or "trial"
    report: str | None = None  # the report the card came from; "(shipped)": the packaged one
    run: str | None = None  # the run folder, resolved
    hypothesis: str | None = None
    check: str | None = None  # the check (harness.cards.checks) that judges the hypothesis
    check_module: str | None = None  # the module that registers that check, where the experiment has its own
    builds_on: list[str] | None = None  # round 2 on: the variants adopted before it (harness.cards.applied)
    trial: int | None = None  # the Optuna trial's number

    def as_dict(self) -> dict[str, Any]:
        """The record as a card stores it: a key only where it has a value."""
        record = {f.name: getattr(self, f.name) for f in fields(self)}
        return {k: (list(v) if isinstance(v, list) else dict(v) if isinstance(v, dict) else v)
                for k, v in record.items() if v is not None}


@dataclass(frozen=True)
class MeasuredRecord:
    harness: dict[str, Any]  # the label (TrialLabel.as_dict()); {} for a card measured outside a run
    timing: dict[str, Any] | None  # harness.profile.timing.TimingResult; None: wrong output, not timed
    correctness: dict[str, Any]  # harness.trial.correctness.Correctness against the float64 reference
    memory: dict[str, Any]  # {peak_bytes, method}
    workload: dict[str, Any]  # harness.workloads.base.Workload.describe()
    environment: dict[str, Any]  # harness.trial.environment: machine, versions
    metrics_source: str | None  # per card; each kernel says its own too
    profiler: str | None
    peaks: dict[str, Any] | None  # what the profiler judged against (harness.cards.peaks)
    profiler_settings: dict[str, Any] | None
    profiler_notes: list[str]
    variant: dict[str, Any]  # the variant's facts (harness.trial.measure.variant_facts)
    torch_state: dict[str, Any]  # the process-global torch settings it ran under (harness.trial.torch_state)
    # The checks of harness.trial.checks it passed ("passed", in the order they ran) and the one that refused it
    # ("refused_by", None); a card restated from the confirm rounds adds the ones they held ("confirm").
    checks: dict[str, Any] | None = None

    def write(self, card: Card) -> None:
        card.extra.update(asdict(self))

    @classmethod
    def read(cls, card: Card) -> MeasuredRecord | None:
        """The record of a measured card; None for a report card."""
        if not isinstance(card.extra.get("harness"), dict):
            return None
        values: dict[str, Any] = {f.name: card.extra.get(f.name) for f in fields(cls)}
        return cls(**values)


MEASURED_EXTRAS = frozenset(f.name for f in fields(MeasuredRecord))
HARNESS_EXTRAS = IDENTITY_EXTRAS | RUN_EXTRAS | MEASURED_EXTRAS


def facts_not_in_tables(card: Card) -> dict[str, Any]:
    """The variant's facts that no table shows: its configuration and what it measured of itself."""
    facts = card.extra.get("variant")
    return {k: v for k, v in facts.items() if k not in FACTS_SHOWN_ELSEWHERE} if isinstance(facts, dict) else {}


def experiment_evidence(card: Card) -> dict[str, Any]:
    """What the experiment's annotate hook wrote on the card (every key the harness does not write)."""
    return {k: v for k, v in card.extra.items() if k not in HARNESS_EXTRAS}
