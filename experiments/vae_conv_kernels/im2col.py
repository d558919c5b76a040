"""Explicit im2col conv3d: the input's sliding windows over T, H and W materialized as one matrix, then one GEMM.

The same GEMM view as the implicit kernel (kernel.ConvGemm: M output positions, N = Cout, K taps in
the weight's (c, kt, kh, kw) order), but the K x M column matrix is written out first: K times the
input's bytes (27x for a 3x3x3 kernel), so it is a CPU counter-experiment at the harness's scaled
shapes, not one for a full-scale GPU call (the 704x1280 96->96 card's columns would be 37 GB).

Two layouts of that matrix, one BLAS call each:
- "ncdhw": columns [N, K, L] (L = To*Ho*Wo), Y = W[Cout, K] @ columns + bias: the NCDHW output
  directly, as the native vol2col path computes it but in one batched GEMM;
- "ndhwc": rows [M, K], Y = rows @ W^T + bias: output positions major, so the output is
  channels_last_3d (returned as that view of [N, Cout, To, Ho, Wo], no copy back).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, get_args

import torch
import torch.nn.functional as F

from experiments.vae_conv_kernels.kernel import ConvGemm

Im2colLayout = Literal["ncdhw", "ndhwc"]
LAYOUTS: tuple[str, ...] = get_args(Im2colLayout)


def windows(x: torch.Tensor, gemm: ConvGemm) -> torch.Tensor:
    """x [N, C, T, H, W] as a view [N, C, To, Ho, Wo, kT, kH, kW] of its (padded) sliding windows."""
    pt, ph, pw = gemm.padding
    if pt or ph or pw:
        x = F.pad(x, (pw, pw, ph, ph, pt, pt))
    for dim, kernel, stride, dilation in zip((2, 3, 4), gemm.kernel_thw, gemm.stride, gemm.dilation):
        x = x.unfold(dim, dilation * (kernel - 1) + 1, stride)  # appends the window as the last dim
        if dilation > 1:
            x = x[..., ::dilation]
    return x


def im2col_conv3d(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, gemm: ConvGemm,
                  layout: str) -> Callable[[], torch.Tensor]:
    """The conv as im2col + one GEMM in `layout`; the weight is reshaped to [Cout, K] once, here."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout={layout!r}: choose {', '.join(LAYOUTS)}")
    n, (to, ho, wo), k, cout = gemm.batch, gemm.output_thw, gemm.k, gemm.cout
    weight_2d = weight.reshape(cout, k).contiguous()
    if layout == "ncdhw":
        weight_batched = weight_2d.expand(n, cout, k)
        bias_col = bias.view(1, cout, 1) if bias is not None else None

        def run_ncdhw() -> torch.Tensor:
            columns = windows(x, gemm).permute(0, 1, 5, 6, 7, 2, 3, 4).reshape(n, k, to * ho * wo)
            y = (torch.baddbmm(bias_col, weight_batched, columns) if bias_col is not None
                 else torch.bmm(weight_batched, columns))
            return y.view(n, cout, to, ho, wo)

        return run_ncdhw
    weight_t = weight_2d.t()

    def run_ndhwc() -> torch.Tensor:
        rows = windows(x, gemm).permute(0, 2, 3, 4, 1, 5, 6, 7).reshape(gemm.m, k)
        y = torch.addmm(bias, rows, weight_t) if bias is not None else torch.mm(rows, weight_t)
        return y.view(n, to, ho, wo, cout).permute(0, 4, 1, 2, 3)

    return run_ndhwc
