"""Before/after timing verdicts: a paired-rounds verdict with a confidence interval, and a plain one.

Paired rounds (`paired_verdict`, the verdict of a measured change). The caller times the baseline
(before) and the variant (after) back to back in n rounds, interleaved in ABBA order so that a linear
drift hits both sides of a pair alike, and passes one median per side per round. With the per-round
ratios r_i = before_i / after_i (above 1: the variant is faster):

    x_i      = log r_i                                    (i = 1..n, n >= 2)
    speedup  = exp(mean x)                                the geometric mean of the ratios
    h        = t_{(1+c)/2, n-1} * sd(x) / sqrt(n)         Student's t half-width, sd with n-1 dof
    CI       = [exp(mean x - h), exp(mean x + h)]         c = `confidence`, 0.95 by default
    band     = [1/(1+b), 1+b]                             the SAME band in speedup space, b = `band`

    FASTER        the whole CI lies above 1+b             (lower end > 1+b)
    SLOWER        the whole CI lies below 1/(1+b)         (upper end < 1/(1+b))
    SAME          the whole CI lies inside the band       (its edges count as inside)
    INCONCLUSIVE  otherwise: the CI straddles a band edge

Working on log ratios makes the rule symmetric (a 2x loss mirrors a 2x gain) and the pairing removes
what both sides of a round share (drift, clock state, a busy neighbour). A noisy pair widens the
interval and ends INCONCLUSIVE rather than flipping to a verdict. For INCONCLUSIVE, `more_rounds`
estimates how many more rounds would decide, assuming the mean and the spread of the log ratios stay
as measured: the smallest N > n whose half-width t_{(1+c)/2, N-1} * sd / sqrt(N) is below the
distance from the mean to the nearest band edge, minus n; capped at MAX_MORE_ROUNDS (a mean sitting
on an edge never decides). UNCONFIRMED, the fifth verdict, is given by callers that have no rounds.

Plain (`timing_verdict`), never the verdict of a measured card (those are UNCONFIRMED without
rounds): the card diff uses it for report cards, whose kernel-duration sums are one sample a side, and
passes no spreads, so the change is SAME within +/- the threshold (default 5%). In general, with
medians b (before) and a (after) and relative spreads sb, sa (interquartile range over median; 0 when
not given), the change is SAME when |a - b| / b <= max(threshold, sb + sa); otherwise FASTER when
a < b and SLOWER when a > b.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from typing import Any, Literal, Sequence

import numpy as np

Verdict = Literal["FASTER", "SLOWER", "SAME"]
VERDICTS = ("FASTER", "SLOWER", "SAME", "INCONCLUSIVE", "UNCONFIRMED")
DEFAULT_THRESHOLD = 0.05
MAX_MORE_ROUNDS = 1000


@dataclass(frozen=True)
class PairedVerdict:
    verdict: str  # FASTER / SLOWER / SAME / INCONCLUSIVE
    speedup: float  # before/after: geometric mean of the per-round ratios before_i/after_i
    ci: tuple[float, float]  # `confidence` interval of the speedup
    band: float  # the SAME band, relative (0.05: speedups within [1/1.05, 1.05])
    rounds: int  # paired rounds used
    confidence: float
    more_rounds: int | None  # INCONCLUSIVE only: about how many more rounds would likely decide
    method: str  # how the interval was computed

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: the interval as a list."""
        return {**asdict(self), "ci": list(self.ci)}

    def describe(self) -> str:
        """One line, e.g. '1.12x [1.08, 1.16] 95% CI over 8 paired rounds; SAME band +/-5%: FASTER'."""
        lo, hi = self.ci
        text = (f"{self.speedup:.2f}x [{lo:.2f}, {hi:.2f}] {self.confidence:.0%} CI over {self.rounds} "
                f"paired rounds; SAME band +/-{self.band:.0%}: {self.verdict}")
        if self.more_rounds is not None:
            text += f" (about {self.more_rounds} more rounds would likely decide)"
        return text


def paired_verdict(
    before_rounds_us: Sequence[float],
    after_rounds_us: Sequence[float],
    band: float,
    confidence: float = 0.95,
) -> PairedVerdict:
    """The verdict of paired rounds by the rule of the module docstring."""
    before, after = [float(v) for v in before_rounds_us], [float(v) for v in after_rounds_us]
    if len(before) != len(after):
        raise ValueError(f"paired rounds need equal lengths, got {len(before)} before and {len(after)} after")
    if len(before) < 2:
        raise ValueError(f"a confidence interval needs at least 2 paired rounds, got {len(before)}")
    if any(not math.isfinite(v) or v <= 0 for v in before + after):
        raise ValueError("round times must be finite and positive")
    if not 0 < band < 1:
        raise ValueError(f"band must be in (0, 1), got {band}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    # Student's t quantile is scipy.special.stdtrit (what scipy.stats.t.ppf computes): scipy.stats costs
    # 1 to 3 s to import on a 2-core CPU, scipy.special a fifth of that; imported here, when first judged.
    from scipy.special import stdtrit

    n = len(before)
    logs = [math.log(b) - math.log(a) for b, a in zip(before, after)]
    mean, sd = statistics.fmean(logs), statistics.stdev(logs)
    quantile = float(stdtrit(n - 1, (1 + confidence) / 2))
    half = quantile * sd / math.sqrt(n)
    edge = math.log1p(band)
    if mean - half > edge:
        verdict = "FASTER"
    elif mean + half < -edge:
        verdict = "SLOWER"
    elif -edge <= mean - half and mean + half <= edge:
        verdict = "SAME"
    else:
        verdict = "INCONCLUSIVE"
    more = _more_rounds(n, mean, sd, edge, confidence) if verdict == "INCONCLUSIVE" else None
    return PairedVerdict(
        verdict=verdict,
        speedup=math.exp(mean),
        ci=(math.exp(mean - half), math.exp(mean + half)),
        band=band,
        rounds=n,
        confidence=confidence,
        more_rounds=more,
        method=(f"Student's t interval (df={n - 1}) on the mean of log(before_i/after_i) over {n} "
                f"ABBA-paired rounds, exponentiated; speedup = geometric mean of the ratios"),
    )


def _more_rounds(n: int, mean: float, sd: float, edge: float, confidence: float) -> int:
    """Rounds beyond n until the half-width falls below the mean's distance to the nearest edge."""
    from scipy.special import stdtrit

    distance = min(abs(mean - edge), abs(mean + edge))
    totals = np.arange(n + 1, n + MAX_MORE_ROUNDS + 1)
    halves = stdtrit(totals - 1, (1 + confidence) / 2) * sd / np.sqrt(totals)
    enough = np.flatnonzero(halves < distance)
    return int(totals[enough[0]] - n) if enough.size else MAX_MORE_ROUNDS


def noise_band(before_spread: float | None, after_spread: float | None, threshold: float) -> float:
    """The plain rule's SAME band: the threshold, widened to the summed relative IQRs when larger."""
    return max(threshold, (before_spread or 0.0) + (after_spread or 0.0))


def timing_verdict(
    before_us: float,
    after_us: float,
    before_spread: float | None = None,
    after_spread: float | None = None,
    threshold: float = DEFAULT_THRESHOLD,
) -> Verdict:
    """The plain rule of the module docstring, for two timings that were not measured in rounds."""
    if before_us <= 0:
        raise ValueError("before_us must be positive")
    change = (after_us - before_us) / before_us
    if abs(change) <= noise_band(before_spread, after_spread, threshold):
        return "SAME"
    return "FASTER" if change < 0 else "SLOWER"
