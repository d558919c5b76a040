"""The device's reference kernels (a CPU's, measured with its peaks: harness.profile.library_kernels) read as the
share of its roofline each reached on the device, for the work nearest the card's: what a library's kernel
achieves where the roofline alone would say its peak.

- A convolution's compute: the float32 NCDHW reference nearest in channels (log Cin and log Cout apart) reached
  roofline / its time; a card's compute is its roofline over that share (a narrow 96 -> 3 convolution ran at 18%
  of the float32 peak on an AMD EPYC, so its layout conversions are a smaller part of it than the roofline says).
- A few-row product: the reference products by the weight nearest in bytes (in DRAM or in the cache), each row
  count's share interpolated in log rows.

The shares are taken with the device's own peaks, so a peak moved to an end of its range moves the share the
other way and the time the compute-bound work takes stays what the reference measured.
"""

from __future__ import annotations

import math
from typing import Mapping

from harness.predict.context import Context
from harness.predict.work import work_of


def conv_share(ctx: Context) -> tuple[float, str] | None:
    """The share of its roofline the float32 reference convolution nearest the card's channels reached, with its
    text; None where the device has none, or the card is not a float32 conv3d (the references are 3x3x3 ones)."""
    shape, refs = ctx.card.shape_parameters, ctx.device.conv_references
    if not refs or ctx.dtype.dtype != "float32" or ctx.card.op_kind != "conv3d" or ctx.work is None:
        return None
    try:
        cin, cout = int(shape["weight"][1]) * int(shape.get("groups") or 1), int(shape["weight"][0])
    except (KeyError, TypeError, ValueError, IndexError):
        return None
    r_cin, r_cout, output, seconds = min(refs, key=lambda r: abs(math.log(cin / r[0])) + abs(math.log(cout / r[1])))
    t, h, w = output
    work = work_of("conv3d", {"input": [1, r_cin, t + 2, h + 2, w + 2], "weight": [r_cout, r_cin, 3, 3, 3],
                              "output": [1, r_cout, t, h, w]})
    if work is None:
        return None
    share = ctx.device.roofline_us(work.flops, work.nbytes(4), "float32", ctx.dtype.math) / 1e6 / seconds
    return share, (f"at the {share:.0%} of its roofline the device's reference convolution {r_cin} -> {r_cout} "
                   "reached (harness.profile.library_kernels)")


def few_row_shares(ctx: Context, weight_bytes: float, rows: tuple[int, ...]
                   ) -> dict[str, tuple[tuple[float, ...], tuple[float, ...]]]:
    """For each place of the device's few-row products of the card's dtype, the nearest in weight bytes first: the
    share of its roofline the reference product of each of `rows` rows reached (interpolated in log rows), by its
    best repeat and by its slowest."""
    places = ctx.device.few_rows.get(ctx.dtype.dtype) or {}
    size = ctx.element_bytes
    order = sorted(places, key=lambda w: abs(math.log(places[w][0] ** 2 * size / max(weight_bytes, 1.0))))
    out = {}
    for where in order:
        n, best, slowest = places[where]
        out[where] = (_shares(ctx, n, best, rows), _shares(ctx, n, slowest, rows))
    return out


def _shares(ctx: Context, n: int, seconds: Mapping[int, float], rows: tuple[int, ...]) -> tuple[float, ...]:
    """The share of its roofline the reference product of each of `rows` rows reached, by a weight of side n."""
    measured = sorted((m, _roofline_s(ctx, m, n) / t) for m, t in seconds.items())
    return tuple(_interpolated(measured, r) for r in rows)


def _roofline_s(ctx: Context, rows: int, n: int) -> float:
    size = ctx.element_bytes
    return ctx.device.roofline_us(2.0 * rows * n * n, (n * n + 2 * rows * n) * size, ctx.dtype.dtype,
                                  ctx.dtype.math) / 1e6


def _interpolated(points: list[tuple[int, float]], rows: int) -> float:
    """The share at `rows`, linear in log rows between the measured counts around it (the nearest end outside)."""
    if rows <= points[0][0]:
        return points[0][1]
    for (m0, s0), (m1, s1) in zip(points, points[1:]):
        if rows <= m1:
            f = math.log(rows / m0) / math.log(m1 / m0)
            return s0 + f * (s1 - s0)
    return points[-1][1]
