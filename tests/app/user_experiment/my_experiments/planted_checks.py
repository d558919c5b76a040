"""The planted experiment's own check, registered beside it. It imports harness.cards only, so a diff of
two stored runs can judge by it without torch (the cards record this module's name)."""

from harness.cards.checks import register_check

HALVED = 1.5  # "halves its time": a confirmed speedup of at least this much, whatever the noise band


@register_check("time_halved", "the confirmed speedup is at least 1.5x (half the work: 2x planted)")
def time_halved(diff, before, after):
    lo = diff.speedup_ci[0] if diff.speedup_ci else None
    if diff.timing_verdict not in ("FASTER", "SLOWER", "SAME") or lo is None:
        return "not measurable", f"time verdict {diff.timing_verdict}: not a confirmed change"
    holds = diff.timing_verdict == "FASTER" and lo >= HALVED
    return ("yes" if holds else "no"), f"speedup {diff.speedup:.2f}x, 95% CI from {lo:.2f}x; needs >= {HALVED}x"
