"""The run's noise verdict: was the machine quiet enough for its timings, and if not, what to do.

Read from two sources, each a measurement of the run's own machine:
- the A/A probe the worker ran at start (harness.trial.noise_probe): one call timed against itself in paired
  rounds, with the time the worker waited for a CPU, the other processes' CPU time and the hypervisor's steal
  measured meanwhile (harness.hardware.cpu_load);
- the confirm rounds of every card (harness.cards.disturbance): rounds dropped, side-rounds with competition
  measured, samples more than 10% above their side's fast mode.
The run is **noisy** when any of these holds, **quiet** otherwise:
- the probe's A/A pair did not read SAME, or competition was measured over it;
- more than `DISTURBED_SHARE` of the confirm rounds' samples were disturbed (not the probe's: its call is tens of
  microseconds, and a quiet machine moved up to 39% of its samples more than 10% above their fast mode);
- more than `DROPPED_SHARE` of the probe's or the confirm rounds were dropped, or competition was measured in
  more than `DROPPED_SHARE` of the confirm rounds' side-rounds.
A verdict from a measure of the machine, not from whether a result looks plausible: a quiet machine can still
give an INCONCLUSIVE card, and a noisy one a right verdict (the rule of the rounds holds either way).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from harness.cards.disturbance import DISTURBED_ABOVE

DISTURBED_SHARE = 1 / 3
DROPPED_SHARE = 0.25


def advice(worker_threads: int | None) -> str:
    """What to do about a noisy machine; `timing.cpu_threads=1` only where the worker used more threads."""
    threads = ("" if worker_threads == 1 else
               ", or with `timing.cpu_threads=1` (a core left to the others: oneDNN waits for its slowest thread)")
    return f"run where nothing else does{threads}, or with more `timing.confirm_rounds`"


@dataclass(frozen=True)
class NoiseVerdict:
    verdict: str  # "quiet" | "noisy"
    reasons: list[str] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        """The verdict in one line, what made it and what to do."""
        if self.verdict == "quiet":
            return f"Machine: quiet ({self.figures.get('summary', 'no disturbance measured')})."
        return f"Machine: **noisy** ({'; '.join(self.reasons)}): {self.advice()}."

    def advice(self) -> str:
        return advice((self.figures.get("probe") or {}).get("worker_threads"))

    def as_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "reasons": self.reasons, **self.figures,
                **({"advice": self.advice()} if self.verdict == "noisy" else {})}


def confirm_figures(confirmations: Iterable[Mapping[str, Any] | None]) -> dict[str, int]:
    """The confirm rounds of a run, summed: rounds run and dropped, side-rounds competing, samples disturbed."""
    totals = {"rounds": 0, "rounds_dropped": 0, "competing_side_rounds": 0, "side_rounds": 0,
              "disturbed_samples": 0, "samples": 0}
    for found in confirmations:
        if not found or not found.get("rounds_run"):
            continue
        totals["rounds"] += int(found["rounds_run"])
        totals["rounds_dropped"] += len(found.get("disturbed_rounds") or [])
        for side in ("before_rounds", "after_rounds"):
            competing = (found.get(side) or {}).get("competing") or []
            totals["competing_side_rounds"] += sum(bool(c) for c in competing)
            totals["side_rounds"] += len(competing)
        totals["disturbed_samples"] += int(found.get("disturbed_samples") or 0)
        totals["samples"] += int(found.get("samples") or 0)
    return totals


def judge_noise(probe: Mapping[str, Any] | None, confirmations: Iterable[Mapping[str, Any] | None]) -> NoiseVerdict:
    """The rule of the module docstring."""
    reasons: list[str] = []
    if probe:
        if probe.get("verdict") != "SAME":
            reasons.append(f"the A/A probe read {probe.get('verdict')}, not SAME")
        if probe.get("rounds") and probe.get("rounds_dropped", 0) / probe["rounds"] > DROPPED_SHARE:
            reasons.append(f"the A/A probe dropped {probe['rounds_dropped']} of {probe['rounds']} rounds")
        if probe.get("competing"):
            load = probe.get("load") or {}
            reasons.append(f"the worker's threads waited for a CPU {load.get('waited_cores')} of a core's worth of "
                           f"the probe (other processes took {load.get('other_cores')} cores)")
    rounds = confirm_figures(confirmations)
    reasons += _share("the confirm rounds' samples", rounds["disturbed_samples"], rounds["samples"])
    for what, part, whole in (("confirm rounds dropped", rounds["rounds_dropped"], rounds["rounds"]),
                              ("confirm side-rounds with other processes competing", rounds["competing_side_rounds"],
                               rounds["side_rounds"])):
        if whole and part / whole > DROPPED_SHARE:
            reasons.append(f"{part} of {whole} {what}")
    load = (probe or {}).get("load") or {}
    summary = (f"A/A probe {probe.get('verdict')}, the worker waited for a CPU {load.get('waited_cores')} of a core, "
               f"other processes {load.get('other_cores')} cores, steal {load.get('steal_share')}; "
               if probe else "no A/A probe; ")
    summary += (f"{rounds['rounds_dropped']} of {rounds['rounds']} confirm rounds dropped, "
                f"{rounds['disturbed_samples']} of {rounds['samples']} samples disturbed")
    return NoiseVerdict("noisy" if reasons else "quiet", reasons,
                        {"summary": summary, "probe": dict(probe or {}), "confirm": rounds})


def _share(what: str, part: int | None, whole: int | None) -> list[str]:
    if not whole or part is None or part / whole <= DISTURBED_SHARE:
        return []
    return [f"{part} of {whole} of {what} ({part / whole:.0%}) disturbed (in rounds with other processes competing, "
            f"or more than {DISTURBED_ABOVE:.0%} above their side's fast mode)"]
