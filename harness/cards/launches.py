"""Launches counted: a kernel entry that stands for several launches, and what one invocation of a card is.

An imported ncu report (`report import-ncu`) lists every launch ncu profiled; the launches of one kernel
with one launch configuration become one kernel entry with `launches: N`, its metrics per launch (the
mean) and the spread of its duration under `launch_stats`. A card says how many invocations of its op
those launches make (`invocations`) and what one invocation is (`invocation`): a card of one kernel name
has no other notion of an invocation than one launch, so its invocations are its launches and its time
is per launch; a card of an NVTX range is everything ncu profiled inside the range, one invocation.

Every sum over a card's kernels (its time, its bytes, its kernel families) weighs an entry by
`per_invocation`: launches / invocations. An entry without `launches` is one launch, a card without
`invocations` one invocation: a capture's, a run's and the shipped report's cards read as before.
"""

from __future__ import annotations

from typing import Any

from harness.cards.model import Card, Kernel

LAUNCHES = "launches"  # a kernel entry's: how many launches it stands for (absent: 1)
LAUNCH_STATS = "launch_stats"  # a kernel entry's: {dur_us_min, dur_us_max, dur_us_cv} over its launches
INVOCATIONS = "invocations"  # a card's: how many invocations its kernels' launches make (absent: 1)
INVOCATION = "invocation"  # a card's: what one invocation is, in words


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else 1


def launches(kernel: Kernel) -> int:
    """How many launches the kernel entry stands for."""
    return _count(kernel.extra.get(LAUNCHES))


def invocations(card: Card) -> int:
    """How many invocations of the card's op its kernels' launches make."""
    return _count(card.extra.get(INVOCATIONS))


def card_launches(card: Card) -> int:
    """Every launch the card's kernel entries stand for."""
    return sum(launches(k) for k in card.kernels)


def per_invocation(card: Card, kernel: Kernel) -> float:
    """How many of the entry's launches one invocation of the card runs (a share of one for a card of one kernel
    name whose launches differ in configuration)."""
    return launches(kernel) / invocations(card)


def kernel_total_us(kernel: Kernel) -> float | None:
    """The entry's time over all its launches: what ranks it among the card's kernels."""
    duration = kernel.metric("dur_us")
    return duration * launches(kernel) if duration is not None else None


def per_invocation_value(card: Card, kernel: Kernel, value: float | None) -> float | None:
    """An additive per-launch value of the entry (time, bytes) as one invocation of the card adds it up."""
    return value * per_invocation(card, kernel) if value is not None else None


def invocation_text(card: Card) -> str | None:
    """'an invocation is one launch: 10 launches in the report' for a card that counts launches; None for one
    that does not."""
    counted = card_launches(card)
    what = card.extra.get(INVOCATION)
    if counted == len(card.kernels) and not isinstance(what, str):
        return None
    count = f"{counted} launch{'es' if counted != 1 else ''} in the report"
    return f"an invocation is {what}: {count}" if isinstance(what, str) else count


def launch_comparison(before: Card, after: Card) -> str | None:
    """What a diff says of two cards' launches: how many each side had and what its time is per, and when the
    two are not per the same thing; None when neither side counts launches."""
    counts = (card_launches(before), card_launches(after))
    what = (before.extra.get(INVOCATION), after.extra.get(INVOCATION))
    if what == (None, None) and counts == (len(before.kernels), len(after.kernels)):
        return None
    if what[0] == what[1]:
        per = f"each side's time is per invocation, {what[0]} (the mean over its launches)"
    else:
        per = (f"not like with like: before per {what[0] or 'invocation as profiled'}, after per "
               f"{what[1] or 'invocation as profiled'}")
    return f"launches: {counts[0]} before, {counts[1]} after; {per}"
