"""The A/A probe a run starts with: one fixed call timed against itself, as the confirm rounds time a pair.

A 192x192 float32 matmul (about 14 MFLOP: tens of microseconds on a CPU core, a few on a GPU) in ABBA rounds of
both "sides", under the same rule and with the same competition measured (harness.trial.paired_rounds); both
sides are the same code, so anything but SAME, any round dropped, or samples far above the fast mode say the
machine itself moved the timings. What the run's noise verdict reads (harness.run.noise).
"""

from __future__ import annotations

import time
from typing import Any

import torch

from harness.boundary.spec import TimingSettings
from harness.cards.disturbance import robust_verdict
from harness.hardware.cpu_load import load_between, snapshot
from harness.trial.measure import time_callable, warm_up_until_stable
from harness.trial.paired_rounds import SideTiming, competition, run_rounds

PROBE_ROUNDS = 8
PROBE_BAND = 0.05  # a CPU's SAME band: the probe judges the machine, whatever the run's device


def probe(seconds: float, device: str) -> dict[str, Any]:
    """The probe's figures: its A/A verdict, rounds dropped, share of disturbed samples, competition measured."""
    started = time.perf_counter()
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(192, 192, generator=generator).to(device)

    def call() -> torch.Tensor:
        return a @ a

    warm_up_until_stable(call, device)
    settings = TimingSettings(warmup=0, min_repeats=3, budget_s=seconds / (2 * PROBE_ROUNDS))
    cores = torch.get_num_threads() if device == "cpu" else None

    def time_side(_: str) -> SideTiming:
        before = snapshot()
        samples = time_callable(call, device, settings).samples_us
        return competition(samples, load_between(before, snapshot()), cores)

    whole = snapshot()
    paired = run_rounds(time_side, {"base": 1, "best": 1}, PROBE_ROUNDS, PROBE_ROUNDS, PROBE_BAND)
    overall = load_between(whole, snapshot())
    verdict = robust_verdict(paired.rounds["base"], paired.rounds["best"], PROBE_BAND)
    disturbed = [paired.disturbed(side) for side in ("base", "best")]
    return {"verdict": verdict.verdict, "rule": verdict.rule(), "rounds": len(paired),
            "rounds_dropped": len(verdict.disturbed),
            # over the whole probe: its rounds are a few clock ticks each, too short to measure competition in
            "competing": cores is not None and overall.competing(cores),
            "disturbed_samples": sum(d for d, _ in disturbed),
            "samples": sum(n for _, n in disturbed), "load": overall.as_dict(), "worker_threads": cores,
            "seconds": round(time.perf_counter() - started, 3)}
