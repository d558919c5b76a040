"""The two sides of a diff: which run and variant each card is, and the title and note that name them.

Two runs' cards were never timed together, so a diff must never read as one run's before/after. A
measured card's harness label says the run that measured it and the variant it is; from that the
time verdict knows when no paired verdict applies (`runs_differ`), and the CLI titles a diff of two
files by each side's run folder and variants and says what kind of comparison it is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.cards.model import Card, Report

MAX_NAMED_VARIANTS = 3  # a title naming more variants than this is unreadable; it counts them instead


def variant_of(card: Card) -> dict[str, Any] | None:
    """{experiment, name, params, label} of a measured card (from its harness label); None for a report card."""
    label = card.extra.get("harness")
    if not isinstance(label, dict) or not label.get("variant"):
        return None
    params = dict(label.get("params") or {})
    name = str(label["variant"])
    text = f"{name}({', '.join(f'{k}={v}' for k, v in params.items())})" if params else name
    return {"experiment": label.get("experiment"), "name": name, "params": params, "label": text}


def runs_differ(before: Card, after: Card) -> bool:
    """Both cards name the run that measured them, and the runs differ: never timed together."""
    run_b = (before.extra.get("harness") or {}).get("run")
    run_a = (after.extra.get("harness") or {}).get("run")
    return run_b is not None and run_a is not None and run_b != run_a


def side_name(report: Report, path: str | Path) -> str:
    """'outputs/x (vae_channels_last: channels_last_3d)': a run's file by its folder (and its name unless it
    is best.json), with the experiments and variants of its cards; a file of report cards by its path."""
    variants: dict[str, list[str]] = {}
    for card in report.cards:
        found = variant_of(card)
        if found is not None:
            labels = variants.setdefault(str(found["experiment"]), [])
            if found["label"] not in labels:
                labels.append(found["label"])
    path = Path(path)
    if not variants:
        return str(path)
    where = str(path.parent) if path.name == "best.json" else str(path)
    named = [f"{experiment}: " + (", ".join(labels) if len(labels) <= MAX_NAMED_VARIANTS else f"{len(labels)} variants")
             for experiment, labels in variants.items()]
    return f"{where} ({'; '.join(named)})"


def comparison_note(before: Report, after: Report) -> str:
    """What kind of comparison two files make, so that two runs' cards are never read as one run's before/after."""
    runs_b, runs_a = _runs(before), _runs(after)
    if not runs_b and not runs_a:
        return ("Report cards compared: each time is the profiler's kernel-duration sum per invocation, one sample "
                "per side.")
    if not runs_b or not runs_a:
        return ("A report's cards against a run's measured cards: the report has no timing, so the times compared "
                "are kernel-duration sums; the measured side's timing median is not among them.")
    if runs_b == runs_a and len(runs_b) == 1:
        return (f"Cards of one run ({next(iter(runs_b))}): a time verdict comes from that run's paired confirm "
                "rounds where the after card records them against this very baseline; otherwise UNCONFIRMED.")
    return (f"Two runs' cards compared, not one run's before and after: before from {', '.join(sorted(runs_b))}, "
            f"after from {', '.join(sorted(runs_a))}. Cards of different runs were never timed together, so "
            "their time verdict is UNCONFIRMED and the speedup shown is the ratio of the two timing medians.")


def _runs(report: Report) -> set[str]:
    """The runs that measured a report's cards (their harness label's `run`)."""
    labels = (card.extra.get("harness") for card in report.cards)
    return {str(label["run"]) for label in labels if isinstance(label, dict) and label.get("run")}
