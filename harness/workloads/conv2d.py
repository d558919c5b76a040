"""aten.conv2d: the 2-D convolutions a captured model runs (the VAE's per-frame convs, image encoders).

Card shape parameters: `input` [N, C, H, W], `weight` [Cout, Cin/groups, kH, kW], `stride`, `padding`,
`dilation` (2 ints each, or one int), `groups`, `output` (checked against the computed shape; a mismatch
is a WorkloadError), optionally `bias` (bool). Bias defaults to True, nn.Conv2d's default: a capture that
knows better says so.

FLOPs are 2 * Cout * (Cin/groups) * kH*kW * (N*Ho*Wo), as conv3d's; (Cin/groups) * kH*kW is the
`reduction_length`, the terms summed into one output.

Synthetic inputs: input of std 1, weight of std 1/sqrt(reduction_length) (so the sum has std 1) and
bias of std 1, of the same order as the sum, so that a lost or misplaced bias is an error of order 1.

Scaling shrinks the output's H and W (never below 8; smaller ones are kept) and derives the input
extent that produces them; batch, channels and the kernel stay exact, so the input is always at least
the kernel's extent.

Layout "channels_last" puts input and weight in torch.channels_last (NHWC) memory format.

The input is the activation; weight and bias are constants. A 2-D conv carries no state from one call to
the next, so k calls are k independent draws of the input stacked on the batch dim N
(harness.workloads.draws.independent_calls): the conv of the stacked batch is the k calls' convs, one
after the other, so its reference is theirs.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from harness.workloads import conv
from harness.workloads.base import Plan
from harness.workloads.draws import independent_calls
from harness.workloads.inputs import Source

KIND = "conv2d"
CONV = conv.ConvKind(KIND, 2, F.conv2d, "channels_last", torch.channels_last,
                     "bias assumed (nn.Conv2d's default bias=True)", independent_calls)


def plan(params: dict[str, Any], *, dtype: torch.dtype, scale: float) -> Plan:
    return conv.plan(CONV, params, dtype=dtype, scale=scale)


def build(plan_: Plan, source: Source, layout: str | None) -> dict[str, Any]:
    return conv.build(CONV, plan_, source, layout)
