"""The time verdict of one before/after pair, with the rule it applied and the numbers that decided it.

Measured cards of one run are judged only on that run's paired confirm rounds (recorded on the
variant's card); two timings taken apart, or two runs' cards, cannot rule out drift and stay
UNCONFIRMED with the ratio of their medians. Report cards (ncu kernel sums, one sample a side) keep the
single-sample SAME band. Every row carries the rule as applied and a short account of the decisive
comparison, so no verdict is printed without what decided it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.cards.diff_sides import runs_differ
from harness.cards.disturbance import DISTURBED_ABOVE, MORE_ROUNDS_CAP
from harness.cards.measures import scale_crossing
from harness.cards.model import Card
from harness.cards.noise import timing_verdict


def confirmation_between(before: Card, after: Card) -> dict[str, Any] | None:
    """The paired-rounds verdict recorded on `after`, when it was measured against this very `before`.

    A run's confirm rounds time its baseline and its best variant interleaved; the verdict is kept
    on the variant's card with the run it belongs to. Cards of two different runs were never timed
    together, so no verdict of either run applies to their pair.
    """
    found = after.extra.get("confirmation")
    if not isinstance(found, dict) or not found.get("verdict"):
        return None
    label_b, label_a = before.extra.get("harness") or {}, after.extra.get("harness") or {}
    same_run = label_b.get("run") is not None and label_b.get("run") == label_a.get("run")
    return found if same_run and label_b.get("role") == "baseline" else None


def band_text(band: float) -> str:
    """The SAME band in speedup space: '[0.952, 1.05]' for 5%."""
    return f"[{1 / (1 + band):.3g}, {1 + band:.3g}]"


@dataclass(frozen=True)
class TimeVerdict:
    verdict: str | None
    speedup: float | None
    ci: list[float] | None
    band: float | None  # the SAME band that decided, None when none did
    rule: str  # the rule as applied, with its numbers (the row's `verdict_rule`)
    numbers: str  # the decisive comparison in a few words, for a table cell (the row's `verdict_numbers`)


def _paired_numbers(verdict: str, band: float, confidence: float) -> str:
    position = {"FASTER": "above", "SLOWER": "below", "SAME": "inside"}.get(verdict)
    interval = f"{confidence:.0%} CI"
    if position is None:  # INCONCLUSIVE: the interval straddles a band edge
        return f"{interval} across an edge of the SAME band {band_text(band)}"
    return f"whole {interval} {position} the SAME band {band_text(band)}"


def judge_time(before: Card, after: Card, both_timed: bool, before_us: float | None, after_us: float | None,
               threshold: float, confirmation: dict[str, Any] | None) -> TimeVerdict:
    """The time verdict of one before/after pair, with the rule and the numbers that decided it.

    Measured cards are judged only by their paired confirm rounds (harness.cards.disturbance.robust_verdict);
    without them the verdict is UNCONFIRMED, since two timings taken apart cannot rule out drift.
    Report cards (kernel-duration sums from ncu) keep the single-sample rule. Two sides at different workload
    scales ran different shapes: no verdict and no speedup, whatever else holds.
    """
    crossed = scale_crossing(before, after)
    if crossed is not None:  # other shapes: no ratio of their times says anything of one op
        return TimeVerdict(None, None, None, None, f"no time verdict: {crossed}", crossed.split(" (")[0])
    speedup = before_us / after_us if before_us and after_us else None
    if confirmation is not None:
        ci, band = confirmation.get("ci"), confirmation.get("band")
        verdict = confirmation["verdict"]
        if ci and isinstance(band, (int, float)):
            numbers = _paired_numbers(verdict, float(band), float(confirmation.get("confidence") or 0.95))
        elif confirmation.get("rounds_run"):
            numbers, band = "fewer than 2 rounds kept: no interval", None
        else:
            numbers, band = "no paired rounds: ratio of the timing medians", None
        if dropped := confirmation.get("disturbed_rounds"):
            numbers += f"; {len(dropped)} of {confirmation.get('rounds_run')} rounds dropped as disturbed"
        return TimeVerdict(verdict, confirmation.get("speedup") or speedup, list(ci) if ci else None, band,
                           confirmation.get("rule") or "", numbers)
    if before_us is None or not before_us or after_us is None:
        return TimeVerdict(None, speedup, None, None, "no times to compare", "no times to compare")
    if both_timed and runs_differ(before, after):
        return TimeVerdict("UNCONFIRMED", speedup, None, None,
                           "UNCONFIRMED: the two cards come from different runs and were never timed together; "
                           "the ratio of their timing medians is shown, nothing adopted",
                           "different runs, never timed together: ratio of the timing medians")
    if both_timed:
        return TimeVerdict("UNCONFIRMED", speedup, None, None,
                           "UNCONFIRMED: the two sides were not timed in paired rounds (timing.confirm_rounds=0 or "
                           "the confirm failed); the ratio of the timing medians is shown, nothing adopted",
                           "no paired rounds: ratio of the timing medians")
    verdict = timing_verdict(before_us, after_us, None, None, threshold=threshold)
    change = after_us / before_us - 1
    return TimeVerdict(verdict, speedup, None, threshold,
                       f"{verdict}: kernel-duration sums differ by {change:+.1%}; SAME within +/-{threshold:.0%} "
                       f"(one sample per side: no interval)",
                       f"kernel sums {change:+.1%}, SAME band +/-{threshold:.0%}")


# The time verdict as harness.cards.noise and judge_time implement it; every table's caption.
VERDICT_RULE_TEXT = (
    "Time verdict: measured cards of one run are judged on paired rounds, baseline and variant re-timed back "
    "to back in ABBA order, each side of a round read by the lower quartile of its samples (interference only "
    "adds time). A round where other processes competed with one side only, or where one side's lower quartile "
    f"rose more than {DISTURBED_ABOVE:.0%} further above its fastest round's than the other's, is dropped and run "
    f"again, and rounds go on while the verdict is undecided (up to {MORE_ROUNDS_CAP}x the planned rounds). The "
    "speedup is the geometric "
    "mean of the kept rounds' ratios (baseline / variant, per original call), so it need not equal the ratio of "
    "the two timing medians shown; its 95% interval is Student's t on the mean of their log ratios. FASTER or "
    "SLOWER when the whole interval lies above or below the SAME band [1/(1+b), 1+b], SAME when it lies inside, "
    "INCONCLUSIVE when it straddles an edge; UNCONFIRMED without paired rounds (so always for two runs' cards: "
    "never timed together). Report cards (kernel-duration sums, one sample a side): SAME within the threshold. "
    "Each row names the interval and the band that decided it."
)
