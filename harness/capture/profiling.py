"""Each kept group replayed in isolation on its captured inputs and profiled, by the harness's own run.

The capture writes its cards (not yet profiled) and their inputs, then runs `python -m harness
experiment=reprofile` on them at scale 1 with `inputs.dir=` the captured inputs: every card is built by
its workload from the hash-verified files, checked against its float64 reference, timed and profiled by
the chosen backend exactly as a trial's baseline is (ncu in its NVTX range with the report's metric set
on a GPU, the roofline estimates on a CPU), and classified by the same rules. Its `baseline.json` holds
the measured cards; the capture's report takes their kernels and classes. A card whose baseline cannot
be measured ends that run with one line naming it: it is left unprofiled with that reason, and the run
goes again without it.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from harness.cards.model import Card, load_report

PROFILED_FIELDS = ("summed_kernel_us", "dominant_kernel", "primary", "primary_rule", "alternative_explanation",
                   "counter_experiment", "status")
# What of a measured card's extras a captured card keeps: where its numbers came from and what they used.
KEPT_EXTRAS = ("metrics_source", "profiler", "peaks", "profiler_notes")
_FAILED_CARD = re.compile(r"card (\S+?):")


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


def profile_cards(report: Path, inputs: Path, card_ids: list[str], out_dir: Path, device: str,
                  profiler: str, overrides: Sequence[str] = ()) -> Profiled:
    """Re-profile the cards; a card that fails its baseline is dropped with its reason and the rest run again."""
    result = Profiled(cards={})
    pending = list(card_ids)
    attempt = 0
    while pending:
        run_dir = out_dir / ("reprofile" if attempt == 0 else f"reprofile.{attempt}")
        attempt += 1
        command = reprofile_command(report, inputs, pending, run_dir, device, profiler, overrides)
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        result.runs.append(run_dir)
        if done.returncode == 0:
            for card in load_report(run_dir / "baseline.json").cards:
                result.cards[card.id] = card
            return result
        why = _last_error(done.stdout + done.stderr)
        match = _FAILED_CARD.search(why)
        culprit = match.group(1) if match and match.group(1) in pending else None
        if culprit is None:  # not one card's fault: none of them is profiled
            result.failed.update({card_id: why for card_id in pending})
            return result
        result.failed[culprit] = why.removeprefix("error: ")
        pending.remove(culprit)
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
