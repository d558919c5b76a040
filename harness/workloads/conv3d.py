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

import math
from typing import Any

import torch
import torch.nn.functional as F

from harness.workloads.base import (
    Bound,
    Plan,
    WorkloadError,
    element_size,
    int_list,
    numel,
    positive_int,
    require,
    scale_dim,
)
from harness.workloads.frames import streaming_calls
from harness.workloads.inputs import Source

KIND = "conv3d"
FLOOR = 8


def output_extent(size: int, kernel: int, stride: int, padding: int, dilation: int) -> int:
    return (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


def input_extent(out: int, kernel: int, stride: int, padding: int, dilation: int) -> int:
    """The smallest input extent that gives `out` outputs."""
    return (out - 1) * stride + dilation * (kernel - 1) + 1 - 2 * padding


def plan(params: dict[str, Any], *, dtype: torch.dtype, scale: float) -> Plan:
    x = int_list(KIND, "input", require(KIND, params, "input"), 5, minimum=1)
    w = int_list(KIND, "weight", require(KIND, params, "weight"), 5, minimum=1)
    stride = int_list(KIND, "stride", params.get("stride", 1), 3, minimum=1)
    padding = int_list(KIND, "padding", params.get("padding", 0), 3, minimum=0)
    dilation = int_list(KIND, "dilation", params.get("dilation", 1), 3, minimum=1)
    groups = positive_int(KIND, "groups", params.get("groups", 1))
    notes: list[str] = []
    if x[1] != w[1] * groups:
        raise WorkloadError(
            f"{KIND}: input has {x[1]} channels but weight {w} with groups={groups} takes {w[1] * groups}"
        )
    if w[0] % groups:
        raise WorkloadError(f"{KIND}: {w[0]} output channels do not split into groups={groups}")
    if "bias" in params and params["bias"] is not None:
        if not isinstance(params["bias"], (bool, list, tuple)):
            raise WorkloadError(f"{KIND}: bias must be true/false or a shape, got {params['bias']!r}")
        bias = bool(params["bias"]) if isinstance(params["bias"], bool) else True
    else:
        bias = True
        notes.append("bias assumed (Wan CausalConv3d is nn.Conv3d with bias)")

    spatial = []
    for axis in range(3):
        out = output_extent(x[2 + axis], w[2 + axis], stride[axis], padding[axis], dilation[axis])
        if out < 1:
            raise WorkloadError(
                f"{KIND}: input {x} is smaller than the kernel {w[2:]} (dilation {dilation}, padding {padding})"
            )
        spatial.append(out)
    output = [x[0], w[0], *spatial]
    if "output" in params and params["output"] is not None:
        card_out = int_list(KIND, "output", params["output"], 5, minimum=1)
        if card_out != output:
            raise WorkloadError(f"{KIND}: computed output {output} differs from the card's output {card_out}")
    else:
        notes.append("card gives no output shape; computed")

    # Scale H and W of the output, then derive the input that yields exactly that output.
    scaled_in, scaled_out = list(x), list(output)
    for axis in (1, 2):  # H, W
        out = output[2 + axis]
        out_s = scale_dim(out, scale, FLOOR)
        if out_s != out:
            scaled_out[2 + axis] = out_s
            scaled_in[2 + axis] = input_extent(out_s, w[2 + axis], stride[axis], padding[axis], dilation[axis])
    if any(e < 1 for e in scaled_in):
        raise WorkloadError(f"{KIND}: cannot scale input {x} by {scale} (padding {padding} exceeds the scaled extent)")

    macs_per_output = w[1] * w[2] * w[3] * w[4]
    outputs = numel(scaled_out)  # N * Cout * To * Ho * Wo
    weight_elems = numel(w) + (w[0] if bias else 0)
    elements = numel(scaled_in) + weight_elems + outputs

    def shape(inp: list[int], out: list[int]) -> dict[str, Any]:
        return {
            "input": inp,
            "weight": list(w),
            "output": out,
            "stride": stride,
            "padding": padding,
            "dilation": dilation,
            "groups": groups,
            "bias": bias,
        }

    return Plan(
        op_kind=KIND,
        shape=shape(scaled_in, scaled_out),
        original_shape=shape(list(x), output),
        scale=scale,
        dtype=dtype,
        output_shape=tuple(scaled_out),
        flops=2.0 * macs_per_output * outputs,
        min_bytes=float(elements * element_size(dtype)),
        reduction_length=macs_per_output,
        notes=tuple(notes),
    )


def build(plan_: Plan, source: Source, layout: str | None) -> dict[str, Any]:
    o, s, dtype = plan_.original_shape, plan_.shape, plan_.dtype
    w = s["weight"]
    x = source.take("input", tuple(o["input"]), tuple(s["input"]), dtype, aliases=("x",), primary=True)
    # The sum over Cin/groups*kT*kH*kW terms has std 1 with this weight; the bias gets std 1 too, so a
    # variant that drops or misplaces it errs by the order of the output, not by 1/sqrt(K) of it.
    std = 1.0 / math.sqrt(w[1] * w[2] * w[3] * w[4])
    weight = source.take("weight", tuple(w), tuple(w), dtype, aliases=("w",), std=std)
    bias = source.take("bias", (w[0],), (w[0],), dtype, aliases=("b",)) if s["bias"] else None
    if layout == "channels_last_3d":
        x = x.contiguous(memory_format=torch.channels_last_3d)
        weight = weight.contiguous(memory_format=torch.channels_last_3d)
    else:
        x, weight = x.contiguous(), weight.contiguous()
    stride, padding, dilation, groups = s["stride"], s["padding"], s["dilation"], s["groups"]

    inputs = {"input": x, "weight": weight}
    if bias is not None:
        inputs["bias"] = bias

    def bind(activations: dict[str, torch.Tensor]) -> Bound:
        frames = activations["input"]

        def run() -> torch.Tensor:
            return F.conv3d(frames, weight, bias, stride, padding, dilation, groups)

        def reference(wide: torch.dtype) -> torch.Tensor:
            return F.conv3d(frames.to(wide), weight.to(wide), None if bias is None else bias.to(wide), stride,
                            padding, dilation, groups)

        return Bound(run, reference)

    return {"inputs": inputs, "activations": ("input",), "bind": bind, "calls": streaming_calls}
