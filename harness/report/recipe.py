"""recipe.md: per card, the variants adopted so far and what to change in the model to get each.

The win a user takes home is a change to the model, not a JSON card. best.json's cards record the
variants applied to them, this run's and earlier rounds' (harness.trial.rounds); each entry keeps the
recipe its variant stated (`Prepared.recipe`, else the variant's docstring), what it carries to later
rounds and the paired-rounds verdict that adopted it. The file is written from those records only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from harness.cards.applied import AppliedVariant, applied_of
from harness.cards.model import Card


def _interval(entry: AppliedVariant) -> str:
    speedup, ci = entry.speedup, entry.ci
    if not speedup:
        return "speedup not recorded"
    shown = f"{speedup:.2f}x"
    return f"{shown} (95% interval {ci[0]:.2f}x to {ci[1]:.2f}x)" if ci else shown


def _carries(entry: AppliedVariant) -> str:
    parts = [f"{name} {', '.join(str(v) for v in change.values())}" for name, change in entry.carries.items()]
    return "; ".join(parts)


def _where(card: Card) -> str:
    environment = card.extra.get("environment") or {}
    scale = (card.extra.get("workload") or {}).get("scale")
    device = environment.get("device_name") or "an unrecorded device"
    return f"measured on {device}" + (f" at workload scale {scale}" if scale is not None else "")


def _card_section(card: Card, applied: Sequence[AppliedVariant], run_dir: Path) -> list[str]:
    lines = [f"## `{card.id}`", "", f"{card.stage} {card.op}, shape {card.shape_parameters}; {_where(card)}.", ""]
    here = str(run_dir.resolve())
    for number, entry in enumerate(applied, 1):
        when = "this run" if entry.run == here else f"an earlier round ({entry.run})"
        lines.append(f"{number}. **{entry.label}**: {_interval(entry)}, adopted in {when}.")
        carried = _carries(entry)
        if carried:
            lines.append(f"   Later rounds start from it: {carried}.")
        recipe = (entry.recipe or "").strip()
        if recipe:
            lines += ["", *[f"   > {line}" if line else "   >" for line in recipe.splitlines()]]
        lines.append("")
    return lines


def render_recipe(kept: Sequence[Card], run_dir: Path) -> str:
    """The Markdown of recipe.md for best.json's cards (`kept`)."""
    lines = ["# Recipe: what to change in the model", "",
             "Per card, the variants adopted so far, oldest first: each was correct against the float64 "
             "reference and confirmed FASTER in paired rounds against the baseline of its run. A run on this "
             "folder's best.json (`report=<this folder>/best.json`) starts from them. Speedups hold where "
             "they were measured: a CPU's are not a GPU's.", ""]
    unchanged: list[str] = []
    for card in kept:
        applied = applied_of(card.extra)
        if applied:
            lines += _card_section(card, applied, run_dir)
        else:
            unchanged.append(card.id)
    if unchanged:
        lines += ["## Nothing adopted", "", "These cards keep the report's op as it is: "
                  + ", ".join(f"`{card_id}`" for card_id in unchanged) + ".", ""]
    return "\n".join(lines).rstrip() + "\n"
