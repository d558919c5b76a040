"""What a card records of the variants earlier rounds adopted on it (`extra["applied"]`, oldest first).

Each entry, an `AppliedVariant`, names the experiment, module, variant and parameters, what it carries, its
recipe and the verdict that adopted it; harness.trial.rounds rebuilds a round's baseline and inputs from them
in the worker. This part is torch-free: the run reads and writes the entries.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Iterable, Mapping, Sequence

from harness.cards.ids import CHUNK_OP_KINDS
from harness.cards.model import Card, ReportError, load_report
from harness.errors import HarnessError

APPLIED_KEY = "applied"


class RoundError(HarnessError):
    """A best.json whose applied variants cannot be rebuilt; one line, with the fix."""


@dataclass(frozen=True, kw_only=True)
class AppliedVariant:
    """One variant a run adopted on a card, as best.json records it (read back by the next round)."""

    experiment: str
    module: str  # the experiment's module: the next round re-prepares the variant from it
    variant: str
    params: dict[str, Any] = field(default_factory=dict)
    # What the variant does to the card's inputs, by input name: {"dtype": ...} and/or {"memory_format": ...}.
    carries: dict[str, dict[str, Any]] = field(default_factory=dict)
    recipe: str | None = None
    # What the card was built in (harness.cards.dtype): every later round's too.
    workload_dtype: str | None = None
    math: str | None = None
    # The lowered precision the variant was judged at (None: the original op's): holds every later round to it.
    precision: str | None = None
    speedup: float | None = None  # the confirmed verdict that adopted it
    ci: list[float] | None = None
    run: str | None = None  # the run folder that adopted it

    @classmethod
    def from_dict(cls, entry: Any) -> AppliedVariant:
        """An entry of `extra["applied"]`; RoundError when it is not one the harness wrote."""
        if not isinstance(entry, Mapping) or not all(entry.get(key) for key in ("experiment", "module", "variant")):
            raise RoundError(f"extra.{APPLIED_KEY} must be a list of {{experiment, module, variant, params}}; "
                             "take best.json as the harness wrote it")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(entry) - known)
        if unknown:
            raise RoundError(f"extra.{APPLIED_KEY}: unknown keys {', '.join(unknown)} in the entry of "
                             f"{entry['variant']} (written by another harness version?)")
        values = {name: value for name, value in entry.items() if value is not None}
        return cls(**{**values, "params": dict(values.get("params") or {}),
                      "carries": {name: dict(change) for name, change in (values.get("carries") or {}).items()}})

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, every key present (None where not recorded), as best.json has kept them."""
        return asdict(self)

    @property
    def label(self) -> str:
        """One line: 'experiment: variant(k=v, ...)'."""
        shown = f"({', '.join(f'{k}={v}' for k, v in self.params.items())})" if self.params else ""
        return f"{self.experiment}: {self.variant}{shown}"


def applied_of(card_extra: Mapping[str, Any]) -> list[AppliedVariant]:
    """The applied variants a card records (oldest first); [] for a card of the profiled report."""
    applied = card_extra.get(APPLIED_KEY) or []
    if not isinstance(applied, list):
        raise RoundError(f"extra.{APPLIED_KEY} must be a list of {{experiment, module, variant, params}}; "
                         "take best.json as the harness wrote it")
    return [AppliedVariant.from_dict(entry) for entry in applied]


def recorded(applied: Iterable[AppliedVariant]) -> list[dict[str, Any]]:
    """The entries as a card's `extra["applied"]` keeps them."""
    return [entry.as_dict() for entry in applied]


def applied_entry(*, experiment: str, module: str, variant: str, params: Mapping[str, Any],
                  facts: Mapping[str, Any], workload_dtype: str | None, confirmation: Mapping[str, Any] | None,
                  run: str, precision: str | None = None, math: str | None = None) -> AppliedVariant:
    """What a kept card records of the variant this run adopted, from the trial's variant facts (its
    carries and recipe) and the confirmation that adopted it."""
    verdict = confirmation or {}
    return AppliedVariant(
        experiment=experiment, module=module, variant=variant, params=dict(params),
        carries={name: dict(change) for name, change in (facts.get("carries") or {}).items()},
        recipe=facts.get("recipe"), workload_dtype=workload_dtype, math=math, precision=precision,
        speedup=verdict.get("speedup"), ci=None if verdict.get("ci") is None else list(verdict["ci"]), run=run,
    )


def adopted_by_card(reports: Iterable[Any], card_ids: Iterable[str]) -> dict[str, list[AppliedVariant]]:
    """What earlier runs' best.json reports adopted on each of `card_ids` (the applied entries, oldest first),
    for a chunk card that contains those op cards to compose; later reports win for a card given twice."""
    wanted = set(card_ids)
    found: dict[str, list[AppliedVariant]] = {}
    for report in reports:
        for card in report.cards:
            if card.id in wanted and (applied := applied_of(card.extra)):
                found[card.id] = applied
    return found


def adopted_in_chunk(card: Card, compose_from: str | Sequence[str] | None) -> dict[str, list[AppliedVariant]]:
    """For a chunk card, what the runs `experiment.compose_from` names (their best.json files) adopted on the op
    cards it contains; {} for any other card, or without such runs."""
    if not compose_from or card.op_kind not in CHUNK_OP_KINDS:
        return {}
    paths = [compose_from] if isinstance(compose_from, str) else list(compose_from)
    try:
        return adopted_by_card([load_report(path) for path in paths], card.extra.get("contains") or [])
    except (ReportError, RoundError) as exc:
        raise RoundError(f"experiment.compose_from: {exc}") from None
