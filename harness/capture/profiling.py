"""Each kept group replayed in isolation on its captured inputs and profiled, by the harness's own run.

The capture writes its cards (not yet profiled) and their inputs, then runs `python -m harness
experiment=reprofile` on them at scale 1 with `inputs.dir=` the captured inputs: every card is built by
its workload from the hash-verified files, checked against its float64 reference, timed and profiled by
the chosen backend exactly as a trial's baseline is (ncu in its NVTX range with the report's metric set
on a GPU, the roofline estimates on a CPU), and classified by the same rules. Its `baseline.json` holds
the measured cards; the capture's report takes their kernels and classes. A card whose baseline cannot
be measured (its replay fails, its op has no workload here) ends that run with one line naming it: it is
left unprofiled with that reason, the cards measured before it are kept, and the rest run again.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from harness.cards.model import Card, ReportError, load_report

PROFILED_FIELDS = ("summed_kernel_us", "dominant_kernel", "primary", "primary_rule", "alternative_explanation",
                   "counter_experiment", "status")
# What of a measured card's extras a captured card keeps: where its numbers came from and what they used.
KEPT_EXTRAS = ("metrics_source", "profiler", "peaks", "profiler_notes")


@dataclass
class Profiled:
    cards: dict[str, Card]  # measured, by card id
    failed: dict[str, str] = field(default_factory=dict)  # card id -> why it could not be measured
    runs: list[Path] = field(default_factory=list)


def reprofile_command(report: Path, inputs: Path, card_ids: list[str], run_dir: Path, device: str,
                      profiler: str, overrides: Sequence[str] = ()) -> list[str]:
    """The harness run that re-profiles `card_ids` of `report` on their captured inputs, at scale 1, with the
    user's own `overrides` last (profiler.keep_dir=..., timing.budget_s=...)."""
    return [sys.executable, "-m", "harness", "experiment=reprofile", f"report={report}", f"inputs.dir={inputs}",
            f"cards=[{','.join(card_ids)}]", f"device={device}", f"profiler={profiler}", "workload.scale=1.0",
            f"hydra.run.dir={run_dir}", *overrides]


def _last_error(output: str) -> str:
    """The run's `error:` line, else its last line but Hydra's hint about full stack traces."""
    lines = [line.strip() for line in output.splitlines()
             if line.strip() and not line.startswith("Set the environment variable HYDRA_FULL_ERROR")]
    errors = [line for line in lines if line.startswith("error:")]
    return (errors or lines or ["no output"])[-1]


def _culprit(why: str, pending: list[str]) -> str | None:
    """The card a run's error line names (`card X: ...`, `cannot run card X on this install: ...`): the longest
    pending id in it, since one id can begin another (`x` and `x-2`)."""
    named = [card_id for card_id in pending if re.search(rf"card {re.escape(card_id)}\b(?!-)", why)]
    return max(named, key=len, default=None)


def _finished(run_dir: Path) -> list[Card]:
    """The cards a run measured before it stopped: it rewrites baseline.json after each card."""
    try:
        return load_report(run_dir / "baseline.json").cards
    except ReportError:  # no card finished
        return []


def profile_cards(report: Path, inputs: Path, card_ids: list[str], out_dir: Path, device: str,
                  profiler: str, overrides: Sequence[str] = ()) -> Profiled:
    """Re-profile the cards; one bad card never sinks the rest. A run that ends on one card's error keeps the
    cards it finished, leaves that card out with its reason and goes on with the others; an error naming no
    card splits the run's cards in two halves, each run again, so that it is left to the cards it belongs to
    (a half that fails with the same error as the whole: its cards all left out with it)."""
    result = Profiled(cards={})
    queue: list[tuple[list[str], str | None]] = [(list(card_ids), None)]  # cards, the error of the run they split
    while queue:
        pending, parent_error = queue.pop(0)
        run_dir = out_dir / ("reprofile" if not result.runs else f"reprofile.{len(result.runs)}")
        command = reprofile_command(report, inputs, pending, run_dir, device, profiler, overrides)
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        result.runs.append(run_dir)
        measured = {card.id: card for card in _finished(run_dir) if card.id in pending}
        result.cards.update(measured)
        if done.returncode == 0:
            continue
        why = _last_error(done.stdout + done.stderr).removeprefix("error: ")
        rest = [card_id for card_id in pending if card_id not in measured]
        culprit = _culprit(why, rest)
        if culprit is not None:
            result.failed[culprit] = why
            rest.remove(culprit)
            if rest:
                queue.insert(0, (rest, None))
        elif len(rest) == 1 or why == parent_error:
            result.failed.update({card_id: why for card_id in rest})
        elif rest:
            half = len(rest) // 2
            queue[:0] = [(rest[:half], why), (rest[half:], why)]
    return result


def merge_profile(card: Card, measured: Card) -> None:
    """The captured card with the kernels, classes and sources of its re-profile."""
    card.kernels = measured.kernels
    for name in PROFILED_FIELDS:
        setattr(card, name, getattr(measured, name))
    card.nominal_mac_flops = measured.nominal_mac_flops
    for name in KEPT_EXTRAS:
        if name in measured.extra:
            card.extra[name] = measured.extra[name]
    timing: dict[str, Any] = measured.extra.get("timing") or {}
    correctness: dict[str, Any] = measured.extra.get("correctness") or {}
    workload: dict[str, Any] = measured.extra.get("workload") or {}
    card.extra["replay"] = {
        "median_us": timing.get("median_us"),
        "max_rel_error": correctness.get("max_rel"),
        "input_source": workload.get("input_source"),
        "notes": list(workload.get("notes") or []),
        "run": str((measured.extra.get("harness") or {}).get("run", "")),
    }
