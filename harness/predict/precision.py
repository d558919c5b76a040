"""Precision: the op in another dtype or math mode (vae_bf16's TF32 -> bf16/fp16; dit_gemm_tiles' bf16 -> fp32).

Each of the card's terms keeps its efficiency: its time moves by the ratio of its rooflines on the device, new
over old. A conversion or an elementwise kernel moves its tensor, so its time goes with the element size (bf16
halves it); the compute's roofline is max(FLOPs / the new math's peak, its bytes at the new size / the
bandwidth) over the old (TF32 -> bf16 on an H200: 395 -> 790 TFLOP/s and half the bytes: half the time).

Stated uncertainty: a kernel far from its roofline is not bound by the work it does (latency, a partial wave):
at the other extreme only the share of each kernel's time its busiest unit was busy (the report's sm, tensor,
dram and l2 percentages) scales, the rest stays. On a device other than the report's, also the new math's
peak over its stated range; and where the device's peaks were measured at several product sizes (a CPU's), the
two maths' rate ratio at each size for the peaks' ratio: the new kernel need not run at the old one's share of
its peak (on an AMD EPYC, bfloat16 over float32 1.8x to 2.5x by size against the peaks' 2.1x).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from harness.cards.dtype import IEEE, NATIVE, TF32
from harness.predict.context import Context
from harness.predict.device import ELEMENT_BYTES, DeviceError, math_key
from harness.predict.layout import LIBRARY, removed_text, without
from harness.predict.prediction import Estimate, Outcome, Unpredictable, register
from harness.predict.terms import COMPUTE, INPUT, OUTPUT, WEIGHT, Term, card_terms
from harness.predict.uncertainty import estimate

PARTIAL = "only the busy share of each kernel's time scales (the report's sm/tensor/dram/l2 %): the rest is latency"
_CONVERSIONS = (INPUT, WEIGHT, OUTPUT)


def _math(dtype: str, op_kind: str) -> str:
    """The math mode a variant in `dtype` runs: float32 convolutions TF32 and matmuls IEEE, torch's defaults;
    half precision has none."""
    if dtype != "float32":
        return NATIVE
    return TF32 if op_kind.startswith("conv") else IEEE


def term_ratios(ctx: Context, dtype: str, *, at: str = "value") -> dict[str, float]:
    """Each role's time ratio, new over old, from the rooflines (`at`: the end of the new peak's range)."""
    old, new = ELEMENT_BYTES.get(ctx.dtype.dtype, 4), ELEMENT_BYTES.get(dtype, 4)
    work = ctx.work
    ratios = {role: new / old for role in (*_CONVERSIONS, "elementwise")}
    if work is not None:
        math = _math(dtype, ctx.card.op_kind)
        before = ctx.device.roofline_us(work.flops, work.nbytes(old), ctx.dtype.dtype, ctx.dtype.math)
        after = max(work.flops / getattr(ctx.device.rate(dtype, math), at) * 1e6,
                    ctx.device.roofline_us(0.0, work.nbytes(new), dtype, math))
        ratios[COMPUTE] = after / before
    return ratios


def in_dtype(terms: Sequence[Term], ratios: Mapping[str, float], *, partial: bool = False) -> float:
    """The terms' time in the new dtype: each term times its role's ratio (with `partial`, its busy share only)."""
    total = 0.0
    for term in terms:
        ratio = ratios.get(term.role, 1.0)
        busy = term.busy if partial and term.busy is not None else 1.0
        total += term.us * (busy * ratio + (1.0 - busy))
    return total


def dtype_estimate(ctx: Context, dtype: str, removes: Sequence[str] = ()) -> Estimate | Unpredictable:
    """The card in `dtype` (and without the conversions of `removes`), with this family's uncertainties."""
    terms = card_terms(ctx)
    if terms is None or ctx.work is None:
        return Unpredictable("the card has no kernel times or its op no work to derive the new dtype's time from")
    math = _math(dtype, ctx.card.op_kind)
    try:
        ratios = term_ratios(ctx, dtype)
        ends = [term_ratios(ctx, dtype, at=at) for at in ("low", "high")] if not ctx.measured_here else []
    except DeviceError as exc:
        return Unpredictable(str(exc))

    def scenario(ts: Sequence[Term], r: Mapping[str, float] = ratios, partial: bool = False,
                 gone: Sequence[str] = removes) -> tuple[float, float]:
        return sum(t.us for t in ts), in_dtype(without(ts, gone), r, partial=partial)

    rate_old, rate_new = ctx.device.rate(ctx.dtype.dtype, ctx.dtype.math), ctx.device.rate(dtype, math)
    basis = (f"{ctx.dtype.dtype} ({ctx.dtype.math}) -> {dtype}: math peak {rate_old.value / 1e12:.4g} -> "
             f"{rate_new.value / 1e12:.4g} TFLOP/s, bytes x{ratios[INPUT]:g}: compute x{ratios[COMPUTE]:.3g}, "
             f"data movement x{ratios[INPUT]:g} (each term's roofline, same efficiency)")
    if removes:
        basis += "; " + removed_text(terms, removes)
    extra = [Outcome(PARTIAL, *scenario(terms.terms, partial=True))]
    extra += [Outcome(f"this device's {dtype} peak over its stated range", *scenario(terms.terms, r))
              for r in ends]
    extra += _efficiency_outcomes(ctx, dtype, math, ratios, lambda r: scenario(terms.terms, r))
    if set(removes) & {INPUT, WEIGHT} and terms.of(INPUT, WEIGHT):
        extra.append(Outcome(LIBRARY, *scenario(terms.terms, gone=(OUTPUT,))))
    return estimate(ctx, terms, scenario, basis, extra)


def _efficiency_outcomes(ctx: Context, dtype: str, math: str, ratios: Mapping[str, float],
                         scenario: Callable[[Mapping[str, float]], tuple[float, float]]) -> list[Outcome]:
    """The compute at the efficiencies the two maths' products reached at the other sizes the device's peaks were
    measured at (a CPU's: harness.profile.cpu_peaks), each size's rate ratio taken for the peaks' ratio."""
    old, new = math_key(ctx.dtype.dtype, ctx.dtype.math), math_key(dtype, math)
    factors = ctx.device.efficiency_factors(old, new) if old and new else []
    if not old or not new or not factors:
        return []
    peaks = ctx.device.compute[new].value / ctx.device.compute[old].value
    name = (f"the two maths' products at each size measured: {dtype} over {ctx.dtype.dtype} "
            f"{peaks * min(factors):.3g}x to {peaks * max(factors):.3g}x, against the peaks' {peaks:.3g}x (a kernel's "
            "efficiency is not its peak's)")
    return [Outcome(name, *scenario({**ratios, COMPUTE: ratios[COMPUTE] / factor}))
            for factor in (min(factors), max(factors))]


@register("vae_bf16")
def predict_low_precision(ctx: Context, variant: str, params: Mapping[str, Any]) -> Estimate | Unpredictable:
    if variant != "low_precision":
        return Unpredictable(f"{variant}: a variant this model does not know")
    dtype = str(params.get("dtype", "bfloat16"))
    if ctx.device.kind == "cpu" and dtype == "float16":
        return Unpredictable("fp16 convolutions have no fast CPU kernel: the experiment skips them on a CPU")
    removes = _CONVERSIONS if params.get("memory_format") == "channels_last_3d" else ()
    return dtype_estimate(ctx, dtype, removes)
