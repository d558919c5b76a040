"""What adopting a card's result would save in the model: a number only where it is known, else why not.

Unknown is never zero. A saving is known where the card was measured as the report's device runs it (its GPU, at
workload scale 1, its kernels: `CardResult.projectable`) and the time verdict decided: a confirmed, adopted, fair
win saves its time in the model x (1 - 1/speedup); a decided non-win (SAME, SLOWER; nothing adopted) saves 0.
Anywhere else (another device, a reduced scale, an INCONCLUSIVE or UNCONFIRMED verdict, no feasible variant, a
report that gives the card no time) the saving is None, with the reasons. The end-to-end view (harness.report.overview)
and the run's at-a-glance lines (harness.report.glance) both print it from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

if TYPE_CHECKING:
    from harness.report.overview import CardResult

DECIDED_NO_GAIN = ("SAME", "SLOWER")
NOT_APPLICABLE = "n/a"


@dataclass(frozen=True)
class Saving:
    """A card's saving in the model, us; None when it is not known, `why` then saying why. A sum over cards some of
    which are unknown is the known part, a lower bound (no card is adopted slower), `unknown` counting the others."""

    us: float | None
    why: str = ""
    unknown: int = 0

    def text(self, digits: int = 1) -> str:
        """'123.4', 'at least 12.3 (2 of 5 cards n/a)', or 'n/a (why)'."""
        if self.us is None:
            return f"{NOT_APPLICABLE} ({self.why})" if self.why else NOT_APPLICABLE
        value = f"{self.us:.{digits}f}"
        return f"at least {value} ({self.why})" if self.unknown else value

    def share(self, of: float, spec: str) -> str:
        """The saving over `of`, formatted by `spec` ('.1%'): 'n/a' where unknown, 'at least' where partly known."""
        if self.us is None or not of:
            return NOT_APPLICABLE
        return ("at least " if self.unknown else "") + format(self.us / of, spec)


def card_saving(result: CardResult, model_us: float | None, report_device: str | None) -> Saving:
    """The rule of the module docstring for one card; `model_us`, its time in the model (None: the report gives
    none)."""
    d = result.diff
    if d is None:
        return Saving(None, "no variant measured" if result.variant != "baseline only" else "baseline only")
    reasons = []
    projectable, why = result.projectable(report_device)
    if not projectable:
        reasons.append(f"not projected: {why}")
    win = result.win
    if win is None and not d.fair:
        reasons.append(d.fairness_note or "not a fair comparison")
    elif win is None and d.timing_verdict not in DECIDED_NO_GAIN:
        verdict = d.timing_verdict or "none"
        reasons.append(f"time verdict {verdict}: " + ("not adopted" if verdict == "FASTER" else "undecided"))
    if model_us is None:
        reasons.append("the report gives no time for this card")
    if reasons:
        return Saving(None, "; ".join(reasons))
    assert model_us is not None
    return Saving(model_us * (1 - 1 / win) if win else 0.0)


def total(savings: Iterable[Saving]) -> Saving:
    """The sum of savings: the known ones', at least, with the unknown ones counted; None when none is known."""
    found = list(savings)
    known = [s.us for s in found if s.us is not None]
    unknown = len(found) - len(known)
    if not found:
        return Saving(None, "no card of it run")
    why = f"{unknown} of {len(found)} cards {NOT_APPLICABLE}" if unknown else ""
    return Saving(sum(known), why, unknown) if known else Saving(None, why)
