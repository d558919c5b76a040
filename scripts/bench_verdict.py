"""How well the confirm rounds' verdict (harness.cards.disturbance.robust_verdict) behaves on this CPU.

    python scripts/bench_verdict.py [--repeats 20] [--rounds 12] [--budget-s 0.05]

A benchmark, not a test: CI does not run it. The op is a 256x256 @ 256x256 float32 matmul, torch on
one thread (two workers sharing the cores would otherwise fight over them). Two pairs, each judged
`--repeats` times by the protocol of the worker's confirm step:

- A/A: the same function on both sides (two calls of the op each); any FASTER or SLOWER is false.
- planted 1.5x slowdown: the baseline makes two calls of the op, the variant three: exactly 1.5x
  the work with the same kernel and shapes. The actual factor is measured independently by one long
  unpaired timing of each side (the ratio of medians) and printed next to the planted one.

Protocol per verdict, the worker's confirm step's: both sides warmed up until stable (harness.profile.timing.
warm_up), then `--rounds` rounds in ABBA order (harness.trial.paired_rounds.run_rounds: more while undecided, up to
3x), each side timed by time_cpu for `--budget-s` seconds a round (one warm-up call) with the competition of other
processes measured; then robust_verdict(baseline, variant, band=0.05). Beside it, the old rule on the same rounds
(paired_verdict on each round's median), so a busy machine shows what the new rule changed.

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

from harness.cards.disturbance import MORE_ROUNDS_CAP, robust_verdict
from harness.cards.noise import PairedVerdict, paired_verdict
from harness.hardware.cpu_load import load_between, snapshot
from harness.profile.timing import time_cpu, warm_up
from harness.trial.paired_rounds import SideTiming, competition, run_rounds

BAND = 0.05
SIZE = 256
PLANTED = 1.5


def judge(base: Callable[[], Any], variant: Callable[[], Any], rounds: int,
          budget_s: float) -> tuple[PairedVerdict | None, PairedVerdict]:
    """(the robust verdict's interval, None when too few rounds were kept; the medians' verdict) of `variant`
    against `base`, as the worker's confirm step takes them."""
    warm_up(base)
    warm_up(variant)
    sides = {"base": base, "best": variant}

    def time_side(key: str) -> SideTiming:
        before = snapshot()
        samples = time_cpu(sides[key], warmup=1, min_repeats=3, budget_s=budget_s).samples_us
        return competition(samples, load_between(before, snapshot()), torch.get_num_threads())

    paired = run_rounds(time_side, {"base": 1, "best": 1}, rounds, MORE_ROUNDS_CAP * rounds, BAND)
    robust = robust_verdict(paired.rounds["base"], paired.rounds["best"], BAND)
    medians = [[r.median_us for r in paired.rounds[side][:rounds]] for side in ("base", "best")]
    return robust.paired if robust.paired else None, paired_verdict(*medians, BAND)


def half_width(v: PairedVerdict) -> float:
    """Half-width of the interval of log speedup."""
    return (math.log(v.ci[1]) - math.log(v.ci[0])) / 2


def report(name: str, verdicts: list[PairedVerdict | None]) -> float:
    """Print one pair's verdict counts and CI width; return its median half-width (log space)."""
    counts = Counter(v.verdict if v else "INCONCLUSIVE (too few rounds kept)" for v in verdicts)
    judged = [v for v in verdicts if v is not None]
    if not judged:
        print(f"{name}: {dict(counts)}")
        return math.inf
    h = statistics.median(half_width(v) for v in judged)
    speedups = statistics.median(v.speedup for v in judged)
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
    h_same = report("A/A (robust rule)", [robust for robust, _ in same])
    report("A/A (old rule: medians)", [medians for _, medians in same])
    report(f"{PLANTED}x slowdown (robust rule)", [robust for robust, _ in slow])
    report(f"{PLANTED}x slowdown (old rule: medians)", [medians for _, medians in slow])
    false = sum(v is not None and v.verdict in ("FASTER", "SLOWER") for v, _ in same)
    detected = sum(v is not None and v.verdict == "SLOWER" for v, _ in slow)
    print(f"A/A false-verdict rate (FASTER or SLOWER, robust rule): {false}/{args.repeats}")
    print(f"{PLANTED}x detection rate (SLOWER, robust rule): {detected}/{args.repeats}")
    print(f"smallest resolved change: about {(1 + BAND) * math.exp(h_same) - 1:.1%} "
          f"((1 + band) x exp(median A/A half-width) - 1: the interval must clear the band edge)")
    print(f"wall time: {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
