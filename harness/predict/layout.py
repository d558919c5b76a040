"""Layout: channels-last tensors remove the card's layout conversions (vae_channels_last).

cuDNN wraps an NCDHW convolution in conversions: the input and the weight into NDHWC (nchwToNhwc), the output
back (nhwcToNchw); oneDNN reorders likewise into its blocked layouts. What a variant removes, by which tensors
it makes channels-last (the output follows its input's layout, so the conversion back goes whenever the input
or the weight is channels-last, torch then computing in channels-last):

- channels_last_3d: the input's, the weight's and the output's conversions;
- channels_last_input: the input's and the output's (the weight is still converted);
- channels_last_weight: the weight's and the output's (the input is converted all the same, by torch's own
  copy into channels-last before the conv: the same bytes).

The point is the card's time less the removed conversions' time. Its stated uncertainties: a library may convert
a channels-last input and weight to a layout of its own anyway (cuDNN's convertTensor kernels for some
channels_last_3d inputs: DOMAIN.md section 2; oneDNN's reorder of the weight into its blocked layout), so the
interval reaches down to only the output's conversion removed; and where the device's reference convolutions
were measured in the layout (harness.profile.library_kernels), the library's kernel for it need not run at the
NCDHW kernel's share of the peak: the compute at the slowest and the fastest of their speedups (oneDNN's
channels-last convolutions 0.94x to 1.27x their NCDHW time on an AMD EPYC).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping, Sequence

from harness.predict.context import Context
from harness.predict.prediction import Estimate, Outcome, Unpredictable, register
from harness.predict.terms import COMPUTE, INPUT, OUTPUT, WEIGHT, Term, Terms, card_terms
from harness.predict.uncertainty import estimate, share_text

EXPERIMENT = "vae_channels_last"
LIBRARY = ("a library converting a channels-last input and weight anyway (cuDNN's convertTensor, DOMAIN.md "
           "section 2; oneDNN's weight reorder): only the output's conversion removed")
# Which conversions each layout change removes (the module docstring).
REMOVES = {
    "channels_last_3d": (INPUT, WEIGHT, OUTPUT),
    "channels_last_input": (INPUT, OUTPUT),
    "channels_last_weight": (WEIGHT, OUTPUT),
}


def without(terms: Sequence[Term], roles: Sequence[str]) -> list[Term]:
    return [t for t in terms if t.role not in roles]


def removed_text(terms: Terms, roles: Sequence[str]) -> str:
    """'nchwToNhwcKernel (input) 70.3 us + ... = 28.2% of the card's 284 us', or what there was none of."""
    gone = [t for t in terms.terms if t.role in roles]
    if not gone:
        return "no layout conversion of " + "/".join(roles) + " on the card: nothing to remove"
    total = sum(t.us for t in gone)
    return f"{' + '.join(t.text() for t in gone)} = {share_text(total, terms)} removed"


def library_outcome(terms: Terms, roles: Sequence[str], variant_of: Any) -> list[Outcome]:
    """The outcome where a library converts the input side anyway (none where the variant removes none of it)."""
    if not set(roles) & {INPUT, WEIGHT} or not terms.of(INPUT, WEIGHT):
        return []
    base, variant = variant_of(terms.terms, (OUTPUT,) if OUTPUT in roles else ())
    return [Outcome(LIBRARY, base, variant)]


@register(EXPERIMENT)
def predict_layout(ctx: Context, variant: str, params: Mapping[str, Any]) -> Estimate | Unpredictable:
    roles = REMOVES.get(variant)
    if roles is None:
        return Unpredictable(f"{variant}: a layout this model does not know")
    terms = card_terms(ctx)
    if terms is None:
        return Unpredictable("the card has no kernel times to start from, and its op no work to time on this "
                             "device")

    def removing(kept: Sequence[Term], gone: Sequence[str]) -> tuple[float, float]:
        return sum(t.us for t in kept), sum(t.us for t in without(kept, gone))

    return estimate(ctx, terms, lambda ts: removing(ts, roles), removed_text(terms, roles),
                    [*library_outcome(terms, roles, removing), *kernel_outcomes(ctx, terms.terms, variant, removing)])


def kernel_outcomes(ctx: Context, terms: Sequence[Term], variant: str, variant_of: Any) -> list[Outcome]:
    """The variant's compute at the slowest and the fastest speedup the device's reference convolutions had in
    its layout (none where they were not measured)."""
    speedups = ctx.device.conv_layouts.get(variant) or []
    if not speedups:
        return []
    name = (f"the library's kernel for {variant} tensors: the device's reference convolutions ran "
            f"{min(speedups):.3g}x to {max(speedups):.3g}x their NCDHW time (harness.profile.library_kernels)")
    baseline = sum(t.us for t in terms)
    return [Outcome(name, baseline, variant_of([replace(t, us=t.us / factor) if t.role == COMPUTE else t
                                                for t in terms], REMOVES[variant])[1])
            for factor in (min(speedups), max(speedups))]
