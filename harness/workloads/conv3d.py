"""aten.conv3d: the Wan VAE decoder's causal 3-D convolutions.

Card shape parameters: `input` [N, C, T, H, W], `weight` [Cout, Cin/groups, kT, kH, kW], `stride`,
`padding`, `dilation` (3 ints each, or one int), `groups`, `output` (checked against the computed shape;
a mismatch is a WorkloadError), optionally `bias` (bool). Bias defaults to True: Wan's CausalConv3d is an
nn.Conv3d with the default bias=True. The causal zero padding is applied by F.pad before the conv in the
model, so the cards already show padded inputs (482x210) and padding 0.

FLOPs are 2 * Cout * (Cin/groups) * kT*kH*kW * (N*To*Ho*Wo), as the report's `nominal_mac_flops`;
(Cin/groups) * kT*kH*kW is the `reduction_length`, the terms summed into one output.

Synthetic inputs: input of std 1, weight of std 1/sqrt(reduction_length) (so the sum has std 1) and
bias of std 1, of the same order as the sum, so that a lost or misplaced bias is an error of order 1.

Scaling shrinks the output's H and W (never below 8; smaller ones are kept) and derives the input
extent that produces them; batch, channels, frames (T) and the kernel stay exact, so the input is
always at least the kernel's extent.

Layout "channels_last_3d" puts input and weight in torch.channels_last_3d (NDHWC) memory format.

The input is the activation (each streaming call has its own frames); weight and bias are constants. k
calls are k consecutive windows of one frame sequence (harness.workloads.frames).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from harness.workloads import conv
from harness.workloads.base import Plan
from harness.workloads.conv import input_extent, output_extent
from harness.workloads.frames import streaming_calls
from harness.workloads.inputs import Source

KIND = "conv3d"
CONV = conv.ConvKind(KIND, 3, F.conv3d, "channels_last_3d", torch.channels_last_3d,
                     "bias assumed (Wan CausalConv3d is nn.Conv3d with bias)", streaming_calls)

__all__ = ["KIND", "build", "input_extent", "output_extent", "plan"]


def plan(params: dict[str, Any], *, dtype: torch.dtype, scale: float) -> Plan:
    return conv.plan(CONV, params, dtype=dtype, scale=scale)


def build(plan_: Plan, source: Source, layout: str | None) -> dict[str, Any]:
    return conv.build(CONV, plan_, source, layout)
