"""The uncertainties every family states the same way:

- on the report's GPU, the report's kernel times as they reproduce: a variant's time, derived from them, within
  +/-5% (the H200 re-profile reproduced the report's conv3d and cast times within 1% to 5%: DOMAIN.md section 9);
- the report's own defect, where its kernel list was truncated and the output's conversion back was estimated
  among the lost kernels: none there, its time counted as the lost compute;
- on another device, where every term is timed by its roofline (harness.predict.terms), the device itself: the
  compute at its roofline or at half of it (an op's rate is at most the peak its best matmul reached, as the
  peak is measured), and the device's peaks at the ends of their stated ranges (practical and datasheet on a
  GPU; the worst and best try on a CPU), the math and the bandwidth moved apart, which is what changes a ratio
  of two times. Those are the whole prediction made again on the device so moved (`device_outcomes`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Mapping, Sequence

from harness.predict.context import Context
from harness.predict.prediction import Estimate, Outcome, Predictor, Unpredictable
from harness.predict.terms import Term, Terms

# terms -> (baseline us, variant us) per original call
Scenario = Callable[[Sequence[Term]], tuple[float, float]]

REPRODUCTION = "the report's kernel times as they reproduce: the variant's time +/-5% (DOMAIN.md section 9: 1% to 5%)"
TRUNCATED = ("the report's truncated kernel list: no conversion back among its lost kernels (the one estimated "
             "counted as compute)")
EFFICIENCY = "the compute at its roofline on this device, or at half of it"
PEAKS = "this device's peaks at the ends of their stated ranges"
REPRODUCED_WITHIN = 0.05
SLOWEST_SHARE_OF_PEAK = 0.5


def estimate(ctx: Context, terms: Terms, scenario: Scenario, basis: str, extra: Sequence[Outcome] = ()
             ) -> Estimate:
    """The scenario's point on the card's terms, with the report's uncertainties' outcomes and `extra`."""
    baseline, variant = scenario(terms.terms)
    outcomes = list(extra)
    if ctx.measured_here:
        outcomes += [Outcome(REPRODUCTION, baseline, variant * (1 + side * REPRODUCED_WITHIN)) for side in (-1, 1)]
    if terms.unestimated is not None:
        outcomes.append(Outcome(TRUNCATED, *scenario(terms.unestimated)))
    return Estimate(baseline, variant, f"{basis} ({terms.where})", outcomes)


def predict_one(predictor: Predictor, ctx: Context, variant: str, params: Mapping[str, Any]
                ) -> Estimate | Unpredictable:
    """The predictor's estimate; on a device other than the report's, with the device's own uncertainties."""
    found = predictor(ctx, variant, params)
    if not isinstance(found, Estimate) or ctx.measured_here:
        return found
    moved = []
    for name, device in device_extremes(ctx):
        again = predictor(replace(ctx, device=device), variant, params)
        if isinstance(again, Estimate):
            moved.append(Outcome(name, again.baseline_us, again.variant_us))
    return replace(found, outcomes=[*found.outcomes, *moved])


def device_extremes(ctx: Context) -> list[tuple[str, Any]]:
    device = ctx.device
    return [(EFFICIENCY, device.moved(compute_scale=SLOWEST_SHARE_OF_PEAK)),
            *((PEAKS, device.moved(compute_end=end)) for end in ("low", "high")),
            *((PEAKS, device.moved(bandwidth_end=end)) for end in ("low", "high"))]


def share_text(part_us: float, terms: Terms) -> str:
    return f"{100 * part_us / terms.total_us:.1f}% of the card's {terms.total_us:.4g} us"
