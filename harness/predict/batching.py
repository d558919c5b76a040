"""Batching: the rows of k calls that share a weight in one GEMM (dit_small_m_batching's batched(k)).

An M=3 linear streams its whole weight for 3 rows. The k calls' rows stacked, [3k, K] @ W^T + b, read the
weight once: the invocation's roofline grows only by the other calls' rows (x and y) and their FLOPs, and it
serves k original calls. The kernel keeps its efficiency: the card's time moves by the ratio of the two
rooflines, and the time per original call is that over k.

Where the device's few-row products were measured (a CPU's: harness.profile.library_kernels), a product of M
rows runs at the share of its roofline the reference product of as many rows reached (interpolated in log M),
by the reference weight nearest the card's in bytes (in DRAM or in the last-level cache): the call of M rows and
the batch of kM rows each at their own share, not the same efficiency.

Stated uncertainty: a kernel far from its roofline (the 256->5120 linear: a few microseconds, a partial wave) is
latency, not work: at the other extreme only its busy share grows with the rooflines, the rest stays per
invocation (and is shared by the k calls); with measured few-row products, the weight at the other place (the
cache's reference for DRAM's, or DRAM's for the cache's), and the call's or the batch's reference at the slowest
of its repeats (one measurement of it moves that much). A call whose weight is under half its bytes is skipped
by the experiment (the N=64 heads read a 4680x5120 activation): no number for it.
"""

from __future__ import annotations

from typing import Any, Mapping

from harness.predict.context import Context
from harness.predict.prediction import Estimate, Outcome, Unpredictable, register
from harness.predict.references import few_row_shares
from harness.predict.terms import Term, card_terms
from harness.predict.uncertainty import estimate
from harness.predict.work import Work

EXPERIMENT = "dit_small_m_batching"
MIN_WEIGHT_SHARE = 0.5  # experiments.dit_small_m_batching's: below it the variant is skipped
LATENCY = "only the busy share of the kernel's time grows with the rooflines (the report's sm/tensor/dram/l2 %)"
REPEATS = "one measurement of the reference products: the call's or the batch's at its slowest repeat"


def batched_work(work: Work, k: int) -> Work:
    """The work of one GEMM over k calls' rows: M and the per-row tensors (x, y) and the FLOPs times k."""
    elements = {name: n * k if name in ("x", "y") else n for name, n in work.elements.items()}
    return Work(work.op_kind, work.flops * k, elements, {**work.shape, "M": int(work.shape["M"]) * k})


@register(EXPERIMENT)
def predict_batching(ctx: Context, variant: str, params: Mapping[str, Any]) -> Estimate | Unpredictable:
    if variant == "gemv":
        return Unpredictable("a GEMV kernel's achieved bandwidth is what the variant measures: no shipped "
                             "microbenchmark measures it, so there is no efficiency to derive it from")
    if variant != "batched":
        return Unpredictable(f"{variant}: a variant this model does not know")
    k = params.get("k", 5)
    work, terms = ctx.work, card_terms(ctx)
    if work is None or terms is None or not isinstance(k, int) or k < 1:
        return Unpredictable("the card has no time or no linear shape (M, N, K) to derive a batch from")
    size = ctx.element_bytes
    share = work.nbytes(size, ["weight"]) / work.nbytes(size)
    if share < MIN_WEIGHT_SHARE:
        return Unpredictable(f"skipped by the experiment: the weight is {share:.0%} of the call's bytes (M="
                             f"{work.shape['M']}), so batching calls that share it cannot cut much")
    dtype, math = ctx.dtype.dtype, ctx.dtype.math
    one = ctx.device.roofline_us(work.flops, work.nbytes(size), dtype, math)
    many = ctx.device.roofline_us(k * work.flops, batched_work(work, k).nbytes(size), dtype, math)
    growth = many / one
    rows = int(work.shape["M"])
    shares = {} if ctx.measured_here else few_row_shares(ctx, work.nbytes(size, ["weight"]), (rows, k * rows))

    def scenario(ts: list[Term] | Any, latency: bool = False, at: tuple[float, ...] | None = None
                 ) -> tuple[float, float]:
        """Per original call: the call's time and the batch's over k (`at`: the call's and the batch's shares of
        their rooflines, each time its roofline's over its share)."""
        base = sum(t.us for t in ts)
        grown = sum(t.us * ((t.busy if latency and t.busy is not None else 1.0) * (growth - 1.0) + 1.0) for t in ts)
        if at is None:
            return base, grown / k
        call, batch = at
        return base / call, grown / batch / k

    basis = (f"M={rows}: weight reads shared by k={k} calls: the invocation's roofline "
             f"{one:.3g} -> {many:.3g} us (weight {work.nbytes(size, ['weight']) / 1e6:.4g} MB, "
             f"{share:.0%} of the bytes), x{growth:.3g} on the card's {terms.total_us:.4g} us, over {k} calls")
    if not shares:
        return estimate(ctx, terms, scenario, basis, [Outcome(LATENCY, *scenario(terms.terms, latency=True))])
    nearest, *other = shares
    (call, batch), (slow_call, slow_batch) = shares[nearest]
    basis += (f"; the device's products of {rows} and {k * rows} rows by its {nearest} reference weight ran at "
              f"{call:.0%} and {batch:.0%} of their rooflines (harness.profile.library_kernels)")
    extra = [Outcome(f"the weight in {where}: its reference products' shares of their rooflines", *scenario(
        terms.terms, at=shares[where][0])) for where in other]
    extra += [Outcome(REPEATS, *scenario(terms.terms, at=at)) for at in ((slow_call, batch), (call, slow_batch))]
    return estimate(ctx, terms, lambda ts: scenario(ts, at=(call, batch)), basis,
                    [Outcome(LATENCY, *scenario(terms.terms, latency=True, at=(call, batch))), *extra])
