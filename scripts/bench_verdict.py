"""How well the paired-rounds verdict (harness.cards.noise.paired_verdict) behaves on this CPU.

    python scripts/bench_verdict.py [--repeats 20] [--rounds 12] [--budget-s 0.05]

A benchmark, not a test: CI does not run it. The op is a 256x256 @ 256x256 float32 matmul, torch on
one thread (two workers sharing the cores would otherwise fight over them). Two pairs, each judged
`--repeats` times by the protocol of the worker's confirm step:

- A/A: the same function on both sides (two calls of the op each); any FASTER or SLOWER is false.
- planted 1.5x slowdown: the baseline makes two calls of the op, the variant three: exactly 1.5x
  the work with the same kernel and shapes. The actual factor is measured independently by one long
  unpaired timing of each side (the ratio of medians) and printed next to the planted one.

Protocol per verdict: both sides warmed up until stable (harness.profile.timing.warm_up), then
`--rounds` rounds in ABBA order, each side timed by time_cpu for `--budget-s` seconds a round (one
warm-up call), one median per side a round; then paired_verdict(baseline, variant, band=0.05).

Printed: the A/A false-verdict rate, the 1.5x detection rate (SLOWER), the median 95% CI half-width
(relative: exp(h) - 1 for the half-width h of the log-speedup interval), and the smallest change the
settings resolve: a change is resolved when its whole interval clears the band edge 1+band, i.e.
when log(1+change) > log(1+band) + h, so with the median A/A half-width h, (1+band) * exp(h) - 1.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections import Counter
from typing import Any, Callable

import torch

from harness.cards.noise import PairedVerdict, paired_verdict
from harness.profile.timing import time_cpu, warm_up

BAND = 0.05
SIZE = 256
PLANTED = 1.5


def judge(base: Callable[[], Any], variant: Callable[[], Any], rounds: int, budget_s: float) -> PairedVerdict:
    """One paired-rounds verdict of `variant` against `base`, as the worker's confirm step makes it."""
    warm_up(base)
    warm_up(variant)
    sides = {"base": base, "variant": variant}
    medians: dict[str, list[float]] = {"base": [], "variant": []}
    for number in range(rounds):
        for key in ("base", "variant") if number % 2 == 0 else ("variant", "base"):
            medians[key].append(time_cpu(sides[key], warmup=1, min_repeats=3, budget_s=budget_s).median_us)
    return paired_verdict(medians["base"], medians["variant"], BAND)


def half_width(v: PairedVerdict) -> float:
    """Half-width of the interval of log speedup."""
    return (math.log(v.ci[1]) - math.log(v.ci[0])) / 2


def report(name: str, verdicts: list[PairedVerdict]) -> float:
    """Print one pair's verdict counts and CI width; return its median half-width (log space)."""
    counts = Counter(v.verdict for v in verdicts)
    h = statistics.median(half_width(v) for v in verdicts)
    speedups = statistics.median(v.speedup for v in verdicts)
    print(f"{name}: {dict(sorted(counts.items()))}; median speedup {speedups:.3f}x, "
          f"median 95% CI half-width +/-{math.expm1(h):.2%}")
    return h


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=20, help="verdicts per pair")
    parser.add_argument("--rounds", type=int, default=12, help="paired ABBA rounds per verdict")
    parser.add_argument("--budget-s", type=float, default=0.05, help="timing budget per side per round")
    args = parser.parse_args()

    torch.set_num_threads(1)
    torch.manual_seed(0)
    a, b = torch.randn(SIZE, SIZE), torch.randn(SIZE, SIZE)

    def two() -> None:
        a @ b
        a @ b

    def three() -> None:
        a @ b
        a @ b
        a @ b

    def two_again() -> None:  # a separate function object with the same work: the A/A variant
        a @ b
        a @ b

    started = time.perf_counter()
    long_two, long_three = (time_cpu(fn, budget_s=1.0).median_us for fn in (two, three))
    print(f"op: {SIZE}x{SIZE} @ {SIZE}x{SIZE} float32 matmul, torch {torch.__version__}, 1 thread; "
          f"baseline (2 calls) {long_two:.1f} us")
    print(f"planted slowdown: {PLANTED}x the work (3 calls vs 2); measured unpaired {long_three / long_two:.3f}x")
    print(f"protocol: {args.repeats} verdicts per pair, {args.rounds} ABBA rounds each, "
          f"{args.budget_s} s per side per round, SAME band +/-{BAND:.0%}")

    same = [judge(two, two_again, args.rounds, args.budget_s) for _ in range(args.repeats)]
    slow = [judge(two, three, args.rounds, args.budget_s) for _ in range(args.repeats)]
    h_same = report("A/A", same)
    report(f"{PLANTED}x slowdown", slow)
    false = sum(v.verdict in ("FASTER", "SLOWER") for v in same)
    detected = sum(v.verdict == "SLOWER" for v in slow)
    print(f"A/A false-verdict rate (FASTER or SLOWER): {false}/{args.repeats}")
    print(f"{PLANTED}x detection rate (SLOWER): {detected}/{args.repeats}")
    print(f"smallest resolved change: about {(1 + BAND) * math.exp(h_same) - 1:.1%} "
          f"((1 + band) x exp(median A/A half-width) - 1: the interval must clear the band edge)")
    print(f"wall time: {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
