"""What a card's kernel bars are, and which to believe where they and the time verdict disagree.

The bars are the profiler's kernel-duration sums of a few profiled calls a side (harness.profile: the CPU
backend profiles up to 3 calls, ncu replays one), with no interval: one draw of each side, taken apart from
the other. The time verdict stands on every sample of the paired confirm rounds. So the bars say where the
time went; whether it changed, and by how much, is the verdict's to say. Where the bars' ratio lies outside
the verdict's interval widened by the two sides' sample spreads (what one draw of a side may be off by),
the page says so, and says to believe the verdict.
"""

from __future__ import annotations

from typing import Any, Mapping

from harness.cards.measures import calls_per_invocation, kernel_sum_us
from harness.cards.model import Card


def profiled_calls(card: Card) -> int | None:
    """How many calls of the card's op its profiler's figures come from (None: not recorded)."""
    calls = (card.extra.get("profiler_settings") or {}).get("calls")
    return int(calls) if isinstance(calls, int) and calls > 0 else None


def _samples(card: Card) -> int | None:
    n = (card.extra.get("timing") or {}).get("n")
    return int(n) if isinstance(n, int) else None


def _spread(card: Card) -> float:
    spread = (card.extra.get("timing") or {}).get("spread")
    return float(spread) if isinstance(spread, (int, float)) else 0.0


def bars_source(before: Card, after: Card | None, sides: tuple[str, str]) -> str:
    """'the baseline's from 3 profiled calls, the variant's from 1 profiled call, without an interval; the time
    verdict stands on 402 timed samples': the bars' sample counts beside the timing's."""
    cards = [(side, card) for side, card in zip(sides, (before, after)) if card is not None]
    counts = ", ".join(f"the {side}'s from {_count(profiled_calls(card), 'profiled call')}" for side, card in cards)
    timed = [n for _, card in cards if (n := _samples(card)) is not None]
    tail = f"; the time verdict stands on {sum(timed)} timed samples" if timed else ""
    return f"{counts}, without an interval{tail}"


def disagreement(before: Card, after: Card | None, diff: Mapping[str, Any] | None) -> str | None:
    """Why to believe the verdict, where the bars' ratio lies outside its interval widened by the sides'
    spreads; None where they agree or there is no interval to compare with."""
    ci = (diff or {}).get("speedup_ci")
    if after is None or not ci:
        return None
    sums = [kernel_sum_us(card) for card in (before, after)]
    if None in sums or not all(sums):
        return None
    assert sums[0] is not None and sums[1] is not None  # for mypy: checked just above
    ratio = (sums[0] / calls_per_invocation(before)) / (sums[1] / calls_per_invocation(after))
    slack = 1 + _spread(before) + _spread(after)
    low, high = ci[0] / slack, ci[1] * slack
    if low <= ratio <= high:
        return None
    return (f"The bars' ratio, {ratio:.2f}x, lies outside the verdict's interval [{ci[0]:.2f}, {ci[1]:.2f}] even "
            f"widened by the sides' sample spreads (to [{low:.2f}, {high:.2f}]): believe the verdict. The bars are "
            f"one profiled draw a side, taken apart; the verdict pairs the sides round by round over every timed "
            f"sample, so a slow moment of the machine during one side's profiling moves the bars, not the verdict.")


def _count(n: int | None, what: str) -> str:
    if n is None:
        return f"an unrecorded number of {what}s"
    return f"{n} {what}{'s' if n != 1 else ''}"
