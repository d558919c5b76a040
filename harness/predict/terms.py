"""A card's time as terms: its layout conversions (which tensor each moves), its elementwise kernels, and its
compute, each with its time per call on the device and the share of it its busiest unit was busy.

On the report's GPU at full size a term's time is its kernel's duration on the normalized card. A kernel
list the report truncated leaves time unlisted (summed_kernel_us above the listed kernels): it is the
missing dominant kernel's, a compute term; where the list lost the output's conversion back, that one is
estimated from the output's bytes at the rate the card's own input conversion ran, and taken out of the
unlisted time. Elsewhere (another device, a run's scale) each term is timed by its roofline on the device at
the shape it runs: a conversion moves its tensor (read + write), an elementwise kernel the output, the
compute does the op's FLOPs over its minimum bytes (a convolution's at the share of its roofline the device's
nearest reference convolution reached, where it has them: harness.predict.references).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Sequence

from harness.cards.kernel_families import kernel_family
from harness.cards.layout_conversions import is_layout_conversion
from harness.cards.model import Kernel
from harness.predict.context import Context
from harness.predict.references import conv_share
from harness.predict.work import Work, work_of

INPUT, WEIGHT, OUTPUT = "input", "weight", "output"  # what a conversion moves
ELEMENTWISE, COMPUTE = "elementwise", "compute"
CONVERSIONS = (INPUT, WEIGHT, OUTPUT)
_TO_CHANNELS_LAST = ("nchwtonhwc", "nchw2nhwc")
_TO_CHANNELS_FIRST = ("nhwctonchw", "nhwc2nchw")
_UTILIZATION = ("sm_pct", "tensor_pct", "dram_pct", "l2_pct")
UNLISTED_MIN_US = 0.5  # below it, summed_kernel_us and the listed kernels agree (rounding)


@dataclass(frozen=True)
class Term:
    label: str  # the kernel family, or what the time is
    role: str  # INPUT, WEIGHT, OUTPUT (a conversion of that tensor), ELEMENTWISE or COMPUTE
    us: float  # per call on the device
    busy: float | None = None  # the busiest unit's share of the kernel's time (the report's metrics)
    derived: str | None = None  # how a time the card does not list was derived

    def text(self) -> str:
        what = f"{self.label} ({self.role})" if self.role in CONVERSIONS else self.label
        return f"{what} {self.us:.3g} us"


@dataclass(frozen=True)
class Terms:
    terms: list[Term]
    # The other side of the report's defect: where the truncated list lost the output's conversion back and it
    # was estimated, the terms with that estimate counted as the unlisted compute instead (None: nothing estimated).
    unestimated: list[Term] | None
    where: str

    @property
    def total_us(self) -> float:
        return sum(t.us for t in self.terms)

    def of(self, *roles: str) -> list[Term]:
        return [t for t in self.terms if t.role in roles]


def card_terms(ctx: Context) -> Terms | None:
    """The card's terms on the device; None when the card has no kernel times to start from."""
    listed = _listed(ctx)
    if not listed:
        return None
    terms, unestimated = _with_unlisted(ctx, listed)
    if ctx.measured_here:
        return Terms(terms, unestimated, ctx.where())
    timed = _on_device(ctx, terms)
    if timed is None:
        return None
    return Terms(timed, _on_device(ctx, unestimated) if unestimated is not None else None, ctx.where())


def _listed(ctx: Context) -> list[Term]:
    kernels = [k for k in ctx.card.kernels if (k.metric("dur_us") or 0) > 0]
    to_last = [k for k in kernels if is_layout_conversion(k.name) and _role_by_name(k) != OUTPUT]
    inputs = _input_side_roles(ctx, to_last)
    out = []
    for kernel in kernels:
        family = kernel_family(kernel.name)
        if is_layout_conversion(kernel.name):
            role = _role_by_name(kernel) or inputs.get(id(kernel), INPUT)
        else:
            role = ELEMENTWISE if "elementwise" in family.lower() else COMPUTE
        out.append(Term(family, role, float(kernel.metric("dur_us") or 0.0), _busy(kernel)))
    return out


def _role_by_name(kernel: Kernel) -> str | None:
    family = kernel_family(kernel.name).lower()
    if any(token in family for token in _TO_CHANNELS_FIRST):
        return OUTPUT
    return None


def _input_side_roles(ctx: Context, kernels: Sequence[Kernel]) -> dict[int, str]:
    """Which conversion into channels-last moves the input and which the weight: by its DRAM read against the
    two tensors' bytes at the card's size; without bytes, the longest is the input's."""
    work = _report_work(ctx)
    sizes = {INPUT: work.nbytes(ctx.element_bytes, [INPUT]), WEIGHT: work.nbytes(ctx.element_bytes, [WEIGHT])} \
        if work is not None else None
    roles: dict[int, str] = {}
    longest = max(kernels, key=lambda k: k.metric("dur_us") or 0.0, default=None)
    for kernel in kernels:
        read = kernel.metric("dram_read_mb")
        if sizes and read:
            roles[id(kernel)] = min(sizes, key=lambda r: abs(math.log(max(read * 1e6, 1.0) / max(sizes[r], 1.0))))
        else:
            roles[id(kernel)] = INPUT if kernel is longest else WEIGHT
    return roles


def _busy(kernel: Kernel) -> float | None:
    values = [v for v in (kernel.metric(name) for name in _UTILIZATION) if v is not None]
    return min(max(values) / 100.0, 1.0) if values else None


def _with_unlisted(ctx: Context, listed: list[Term]) -> tuple[list[Term], list[Term] | None]:
    """The listed terms plus the time the report's truncated list leaves out; and, where an output conversion
    was estimated in it, the same time without that estimate (all of it the unlisted compute)."""
    summed = ctx.card.summed_kernel_us
    unlisted = (summed or 0.0) - sum(t.us for t in listed)
    if summed is None or unlisted < max(UNLISTED_MIN_US, 0.01 * summed):
        return listed, None
    compute = Term("unlisted", COMPUTE, unlisted, None,
                   "summed_kernel_us less the listed kernels: the truncated list's dominant kernel")
    inputs = [t for t in listed if t.role == INPUT]
    work = _report_work(ctx)
    if not inputs or any(t.role == OUTPUT for t in listed) or work is None:
        return [*listed, compute], None
    rate = 2 * work.nbytes(ctx.element_bytes, [INPUT]) / inputs[0].us  # bytes/us of its own conversion
    back = min(2 * work.nbytes(ctx.element_bytes, [OUTPUT]) / rate, unlisted)
    estimated = Term("nhwcToNchwKernel", OUTPUT, back, None,
                     "not in the truncated list: the output's bytes at the card's input-conversion rate")
    return [*listed, estimated, replace(compute, us=unlisted - back)], [*listed, compute]


def _report_work(ctx: Context) -> Work | None:
    """The op's work at the card's own shape, which its kernels' times and bytes are of."""
    return work_of(ctx.card.op_kind, ctx.card.shape_parameters)


def _on_device(ctx: Context, terms: Sequence[Term]) -> list[Term] | None:
    """The terms timed by their rooflines on the device at the shape it runs, the compute kernels as one op
    (its FLOPs over its minimum bytes); None without the op's work or a peak for its math."""
    work, size = ctx.work, ctx.element_bytes
    dtype, math_mode = ctx.dtype.dtype, ctx.dtype.math
    if work is None or not ctx.device.has(dtype, math_mode):
        return None
    out: list[Term] = []
    for term in terms:
        if term.role in CONVERSIONS:
            us = ctx.device.roofline_us(0.0, 2 * work.nbytes(size, [term.role]), dtype, math_mode)
        elif term.role == ELEMENTWISE:
            us = ctx.device.roofline_us(0.0, 2 * work.nbytes(size, ["output", "y"]), dtype, math_mode)
        elif any(t.role == COMPUTE for t in out):
            continue
        else:
            term = replace(term, label="compute")
            us = ctx.device.roofline_us(work.flops, work.nbytes(size), dtype, math_mode)
            share = conv_share(ctx)
            if share is not None:
                out.append(replace(term, us=us / share[0], busy=1.0, derived=f"roofline {share[1]}"))
                continue
        out.append(replace(term, us=us, busy=1.0, derived="roofline"))
    return out
