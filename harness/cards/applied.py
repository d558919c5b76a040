"""What a card records of the variants earlier rounds adopted on it (`extra["applied"]`, oldest first).

Each entry names the experiment, module, variant and parameters, what it carries, its recipe and the verdict
that adopted it; harness.trial.rounds rebuilds a round's baseline and inputs from them in the worker. This part is
torch-free: the run reads and writes the entries.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from harness.errors import HarnessError

APPLIED_KEY = "applied"


class RoundError(HarnessError):
    """A best.json whose applied variants cannot be rebuilt; one line, with the fix."""


def applied_of(card_extra: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The applied variants a card records (oldest first); [] for a card of the profiled report."""
    applied = card_extra.get(APPLIED_KEY) or []
    if not isinstance(applied, list) or not all(isinstance(a, dict) and a.get("variant") and a.get("module")
                                                for a in applied):
        raise RoundError(f"extra.{APPLIED_KEY} must be a list of {{experiment, module, variant, params}}; "
                         "take best.json as the harness wrote it")
    return [dict(a) for a in applied]


def applied_entry(*, experiment: str, module: str, variant: str, params: Mapping[str, Any],
                  facts: Mapping[str, Any], workload_dtype: str | None, confirmation: Mapping[str, Any] | None,
                  run: str, precision: str | None = None, math: str | None = None) -> dict[str, Any]:
    """What a kept card records of the variant this run adopted (read back by the next round); `precision`,
    the lowered precision it was judged at (None: the original op's), holds every later round to it;
    `workload_dtype` and `math`, what the card was built in (harness.cards.dtype), every later round's too."""
    return {
        "experiment": experiment, "module": module, "variant": variant, "params": dict(params),
        "carries": dict(facts.get("carries") or {}), "recipe": facts.get("recipe"),
        "workload_dtype": workload_dtype, "math": math, "precision": precision,
        "speedup": (confirmation or {}).get("speedup"), "ci": (confirmation or {}).get("ci"), "run": run,
    }


def adopted_by_card(reports: Iterable[Any], card_ids: Iterable[str]) -> dict[str, list[dict[str, Any]]]:
    """What earlier runs' best.json reports adopted on each of `card_ids` (the applied entries, oldest first),
    for a chunk card that contains those op cards to compose; later reports win for a card given twice."""
    wanted = set(card_ids)
    found: dict[str, list[dict[str, Any]]] = {}
    for report in reports:
        for card in report.cards:
            if card.id in wanted and applied_of(card.extra):
                found[card.id] = applied_of(card.extra)
    return found


def label_text(entry: Mapping[str, Any]) -> str:
    params = entry.get("params") or {}
    shown = f"({', '.join(f'{k}={v}' for k, v in params.items())})" if params else ""
    return f"{entry.get('experiment')}: {entry['variant']}{shown}"
