"""Which confirm rounds interference touched, and the paired verdict from the rounds it did not.

On a CPU another job only ever adds time to a call. Under irregular load the samples of one op are
bimodal: a fast mode both sides of an A/A pair share to within ~2%, and a slow mode (1.6-2x, sometimes far
more) whose share differs from round to round. A median-based ratio reads a slow mode that landed more on
one side's rounds as a change of speed (an A/A pair read 0.69x [0.57, 0.84] SLOWER that way, while the low
quantiles of the same samples read 1.02x). So the verdict of a measured change is taken by this rule:

1. Each side of a round is summarised by the lower quartile of its samples (`RoundTiming.low_us`): the part
   of the round interference did not touch, as long as it touched fewer than three samples in four.
2. A side's fast mode is the lowest lower quartile of its rounds without competition (of all its rounds when
   every one had some), and a round's *elevation* on that side is its lower quartile over the fast mode.
   Competition is measured (harness.hardware.cpu_load: the threads waited for a CPU more than a tenth of a
   core's worth of the round, or the hypervisor took a tenth of the CPU time; `RoundTiming.competing`).
3. A round decides when both sides met the same competition (both or neither) and their elevations differ by
   at most `DISTURBED_ABOVE` (10%): what hit both alike cancels in their ratio. Every other round is dropped:
   one side hit harder than the other (a longer call is preempted more often under the same load) never
   decides, nor does a round with competition on one side only (that side may have run slow in every round,
   with no fast round to tell it by).
4. The paired verdict (harness.cards.noise.paired_verdict: Student's t on the mean log ratio, the SAME band)
   over the kept rounds' lower quartiles; with fewer than two of them, INCONCLUSIVE.
5. While the verdict is INCONCLUSIVE the rounds go on (`rounds_wanted`): first a round for each dropped
   one, then the rounds the interval needs to clear a band edge, up to `MORE_ROUNDS_CAP` times the planned
   rounds (and, harness.trial.paired_rounds, twice the planned rounds' time).

A sample more than `DISTURBED_ABOVE` above its side's fast mode counts as a disturbed sample: the share of
them is the rounds' contribution to the run's noise verdict.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Sequence

from harness.cards.noise import PairedVerdict, paired_verdict

DISTURBED_ABOVE = 0.10  # two sides' elevations in a round this far apart: the round was disturbed unevenly
LOW_QUANTILE = "lower quartile"
MIN_KEPT = 2  # an interval needs two rounds
MORE_ROUNDS_CAP = 3  # the rounds may go on up to this many times the planned rounds while undecided
DECIDED = ("FASTER", "SLOWER", "SAME")


@dataclass(frozen=True)
class RoundTiming:
    """One side of one round, per original call: the lower quartile and the median of its samples, and whether
    other processes were measured competing for its cores through most of it (with how many cores they took)."""

    low_us: float
    median_us: float
    n: int
    competing: bool = False
    other_cores: float | None = None

    @classmethod
    def of(cls, samples_us: Sequence[float], calls: int = 1, *, competing: bool = False,
           other_cores: float | None = None) -> RoundTiming:
        """A round's samples (per invocation) summarised per original call (`calls` in each invocation)."""
        values = sorted(float(s) / max(int(calls), 1) for s in samples_us)
        if not values:
            raise ValueError("a round needs at least one sample")
        low = statistics.quantiles(values, n=4, method="inclusive")[0] if len(values) >= 2 else values[0]
        return cls(low, statistics.median(values), len(values), competing, other_cores)


@dataclass(frozen=True)
class RobustVerdict:
    """The paired verdict of the kept rounds, with which rounds were dropped and why it decided."""

    paired: PairedVerdict | None  # None: fewer than MIN_KEPT rounds kept
    verdict: str
    rounds_run: int
    disturbed: tuple[int, ...]  # indices of the rounds dropped
    fast_before_us: float
    fast_after_us: float

    @property
    def kept(self) -> int:
        return self.rounds_run - len(self.disturbed)

    def rule(self) -> str:
        """Which rule decided, with its numbers, in one line."""
        dropped = (f"{len(self.disturbed)} of {self.rounds_run} rounds dropped (other processes competing with one "
                   f"side only, or one side's lower quartile more than {DISTURBED_ABOVE:.0%} further above its fast "
                   "mode than the other's)" if self.disturbed else f"none of {self.rounds_run} rounds dropped")
        if self.paired is None:
            return (f"INCONCLUSIVE: {dropped}; fewer than {MIN_KEPT} rounds left to decide "
                    "(a busy machine: run on a quiet one, with timing.cpu_threads=1, or more timing.confirm_rounds)")
        return f"{self.paired.describe()}; each round's {LOW_QUANTILE} per side; {dropped}"

    def as_dict(self) -> dict[str, Any]:
        """The confirmation record's verdict keys: the paired verdict's, the rule, and the disturbance."""
        paired = self.paired.as_dict() if self.paired is not None else {
            "speedup": None, "ci": None, "rounds": 0, "more_rounds": None, "confidence": 0.95,
            "method": "no interval: fewer than two rounds kept"}
        return {**paired, "verdict": self.verdict, "rule": self.rule(), "estimator": LOW_QUANTILE,
                "rounds_run": self.rounds_run, "disturbed_rounds": list(self.disturbed),
                "disturbed_above": DISTURBED_ABOVE}


def fast_mode(rounds: Sequence[RoundTiming]) -> float:
    """A side's fast mode: the lowest lower quartile of its rounds no competition was measured in (of all its
    rounds when every one had some)."""
    quiet = [r.low_us for r in rounds if not r.competing]
    return min(quiet or [r.low_us for r in rounds])


def balanced(before: RoundTiming, after: RoundTiming, fast_before: float, fast_after: float,
             above: float = DISTURBED_ABOVE) -> bool:
    """Whether a round decides (rule 3): the same competition on both sides, elevations within `above`."""
    elevations = math.log(before.low_us / fast_before) - math.log(after.low_us / fast_after)
    return before.competing == after.competing and abs(elevations) <= math.log1p(above)


def robust_verdict(before: Sequence[RoundTiming], after: Sequence[RoundTiming], band: float,
                   confidence: float = 0.95) -> RobustVerdict:
    """The rule of the module docstring over paired rounds (before[i] and after[i] timed back to back)."""
    if len(before) != len(after) or not before:
        raise ValueError(f"paired rounds need equal, non-zero lengths, got {len(before)} and {len(after)}")
    fast = (fast_mode(before), fast_mode(after))
    dropped = tuple(i for i, (b, a) in enumerate(zip(before, after)) if not balanced(b, a, *fast))
    kept = [i for i in range(len(before)) if i not in dropped]
    if len(kept) < MIN_KEPT:
        return RobustVerdict(None, "INCONCLUSIVE", len(before), dropped, *fast)
    paired = paired_verdict([before[i].low_us for i in kept], [after[i].low_us for i in kept], band, confidence)
    return RobustVerdict(paired, paired.verdict, len(before), dropped, *fast)


def rounds_wanted(verdict: RobustVerdict, planned: int, room: int) -> int:
    """How many more rounds to run (0: stop): a round for each one dropped while fewer than `planned` are kept,
    else the rounds an INCONCLUSIVE interval needs to clear a band edge if they fit in `room` more rounds."""
    if verdict.verdict in DECIDED or room <= 0:
        return 0
    if verdict.kept < planned:
        return min(planned - verdict.kept, room)
    more = verdict.paired.more_rounds if verdict.paired is not None else None
    return more if more is not None and more <= room else 0


def disturbed_share(rounds: Sequence[Sequence[float]], summaries: Sequence[RoundTiming],
                    above: float = DISTURBED_ABOVE) -> tuple[int, int]:
    """(disturbed samples, samples) of one side: every sample of a round with competition measured, and elsewhere
    those more than `above` over the side's fast mode. `rounds` are the samples per original call, as `summaries`."""
    limit = fast_mode(summaries) * (1 + above)
    flags = [summary.competing or s > limit for samples, summary in zip(rounds, summaries) for s in samples]
    return sum(flags), len(flags)


def round_record(rounds: Sequence[RoundTiming]) -> dict[str, list[Any]]:
    """One side's rounds as the confirmation record keeps them."""
    return {"low_us": [r.low_us for r in rounds], "median_us": [r.median_us for r in rounds],
            "n": [r.n for r in rounds], "competing": [r.competing for r in rounds],
            "other_cores": [r.other_cores for r in rounds]}
