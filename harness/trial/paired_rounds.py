"""The confirm rounds' loop: baseline and best timed back to back in ABBA order, more rounds while undecided.

Round i times A then B when i is even, B then A when odd, so a linear drift hits both sides alike. After the
planned rounds the verdict of harness.cards.disturbance is taken on what they gave; while it is undecided the
loop runs the rounds `rounds_wanted` asks for (replacements for disturbed rounds, then what the interval
needs), never more than `max_rounds` in all nor, past the planned rounds, longer than `extra_time` times what
the planned rounds took. The loop knows nothing of torch: `time_side` times one side once and says what it
measured, so a test can hand it a planted clock.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from harness.cards.disturbance import RoundTiming, disturbed_share, robust_verdict, rounds_wanted
from harness.hardware.cpu_load import CpuLoad

SIDES = ("base", "best")
EXTRA_TIME = 2.0  # rounds past the planned ones may take at most this many times the planned rounds' time


@dataclass(frozen=True)
class SideTiming:
    """One side timed once: its samples (per invocation) and the competition measured meanwhile."""

    samples_us: list[float]
    competing: bool = False
    other_cores: float | None = None


def competition(samples_us: list[float], load: CpuLoad, cores_in_use: int | None) -> SideTiming:
    """A side's samples with the competition measured over them (`load`): none is judged where `cores_in_use` is
    None (a GPU's timing, which other processes' CPU time does not slow the same way)."""
    competing = cores_in_use is not None and load.competing(cores_in_use)
    others = None if load.other_cores is None else round(load.other_cores, 3)
    return SideTiming(samples_us, competing, others)


@dataclass
class PairedRounds:
    """Each side's rounds: summaries per original call, samples per invocation as timed."""

    calls: dict[str, int]
    rounds: dict[str, list[RoundTiming]] = field(default_factory=lambda: {side: [] for side in SIDES})
    samples: dict[str, list[list[float]]] = field(default_factory=lambda: {side: [] for side in SIDES})

    def add(self, side: str, timed: SideTiming) -> None:
        self.rounds[side].append(RoundTiming.of(timed.samples_us, self.calls[side], competing=timed.competing,
                                                other_cores=timed.other_cores))
        self.samples[side].append(list(timed.samples_us))

    def __len__(self) -> int:
        return len(self.rounds["base"])

    def disturbed(self, side: str) -> tuple[int, int]:
        """(disturbed samples, samples) of one side over every round."""
        calls = max(self.calls[side], 1)
        return disturbed_share([[s / calls for s in samples] for samples in self.samples[side]], self.rounds[side])


def run_rounds(time_side: Callable[[str], SideTiming], calls: dict[str, int], planned: int, max_rounds: int,
               band: float, clock: Callable[[], float] = time.perf_counter,
               extra_time: float = EXTRA_TIME) -> PairedRounds:
    """`planned` ABBA rounds, then more while the robust verdict is undecided (module docstring)."""
    paired = PairedRounds(calls=dict(calls))

    def one_round() -> None:
        order = SIDES if len(paired) % 2 == 0 else SIDES[::-1]
        for side in order:
            paired.add(side, time_side(side))

    started = clock()
    for _ in range(planned):
        one_round()
    deadline = clock() + extra_time * (clock() - started)
    while clock() < deadline:
        verdict = robust_verdict(paired.rounds["base"], paired.rounds["best"], band)
        wanted = rounds_wanted(verdict, planned, max_rounds - len(paired))
        if not wanted:
            break
        for _ in range(wanted):
            one_round()
            if clock() >= deadline:
                break
    return paired
