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
from harness.workloads.conv3d import input_extent, output_extent
from harness.workloads.draws import independent_calls
from harness.workloads.inputs import Source

KIND = "conv2d"
FLOOR = 8


def _bias(params: dict[str, Any]) -> tuple[bool, str | None]:
    value = params.get("bias")
    if value is None:
        return True, "bias assumed (nn.Conv2d's default bias=True)"
    if not isinstance(value, (bool, list, tuple)):
        raise WorkloadError(f"{KIND}: bias must be true/false or a shape, got {value!r}")
    return (value if isinstance(value, bool) else True), None


def plan(params: dict[str, Any], *, dtype: torch.dtype, scale: float) -> Plan:
    x = int_list(KIND, "input", require(KIND, params, "input"), 4, minimum=1)
    w = int_list(KIND, "weight", require(KIND, params, "weight"), 4, minimum=1)
    stride = int_list(KIND, "stride", params.get("stride", 1), 2, minimum=1)
    padding = int_list(KIND, "padding", params.get("padding", 0), 2, minimum=0)
    dilation = int_list(KIND, "dilation", params.get("dilation", 1), 2, minimum=1)
    groups = positive_int(KIND, "groups", params.get("groups", 1))
    if x[1] != w[1] * groups:
        raise WorkloadError(
            f"{KIND}: input has {x[1]} channels but weight {w} with groups={groups} takes {w[1] * groups}"
        )
    if w[0] % groups:
        raise WorkloadError(f"{KIND}: {w[0]} output channels do not split into groups={groups}")
    bias, note = _bias(params)
    notes = [note] if note else []

    spatial = [output_extent(x[2 + axis], w[2 + axis], stride[axis], padding[axis], dilation[axis])
               for axis in range(2)]
    if min(spatial) < 1:
        raise WorkloadError(
            f"{KIND}: input {x} is smaller than the kernel {w[2:]} (dilation {dilation}, padding {padding})"
        )
    output = [x[0], w[0], *spatial]
    if params.get("output") is not None:
        card_out = int_list(KIND, "output", params["output"], 4, minimum=1)
        if card_out != output:
            raise WorkloadError(f"{KIND}: computed output {output} differs from the card's output {card_out}")
    else:
        notes.append("card gives no output shape; computed")

    # Scale H and W of the output, then derive the input that yields exactly that output.
    scaled_in, scaled_out = list(x), list(output)
    for axis in range(2):
        out_s = scale_dim(output[2 + axis], scale, FLOOR)
        if out_s != output[2 + axis]:
            scaled_out[2 + axis] = out_s
            scaled_in[2 + axis] = input_extent(out_s, w[2 + axis], stride[axis], padding[axis], dilation[axis])
    if any(e < 1 for e in scaled_in):
        raise WorkloadError(f"{KIND}: cannot scale input {x} by {scale} (padding {padding} exceeds the scaled extent)")

    reduction = w[1] * w[2] * w[3]
    outputs = numel(scaled_out)  # N * Cout * Ho * Wo
    elements = numel(scaled_in) + numel(w) + (w[0] if bias else 0) + outputs

    def shape(inp: list[int], out: list[int]) -> dict[str, Any]:
        return {"input": inp, "weight": list(w), "output": out, "stride": stride, "padding": padding,
                "dilation": dilation, "groups": groups, "bias": bias}

    return Plan(
        op_kind=KIND,
        shape=shape(scaled_in, scaled_out),
        original_shape=shape(list(x), output),
        scale=scale,
        dtype=dtype,
        output_shape=tuple(scaled_out),
        flops=2.0 * reduction * outputs,
        min_bytes=float(elements * element_size(dtype)),
        reduction_length=reduction,
        notes=tuple(notes),
    )


def build(plan_: Plan, source: Source, layout: str | None) -> dict[str, Any]:
    o, s, dtype = plan_.original_shape, plan_.shape, plan_.dtype
    w = s["weight"]
    x = source.take("input", tuple(o["input"]), tuple(s["input"]), dtype, aliases=("x",), primary=True)
    # The sum over Cin/groups*kH*kW terms has std 1 with this weight; the bias gets std 1 too, so a
    # variant that drops or misplaces it errs by the order of the output, not by 1/sqrt(K) of it.
    weight = source.take("weight", tuple(w), tuple(w), dtype, aliases=("w",), std=1.0 / math.sqrt(w[1] * w[2] * w[3]))
    bias = source.take("bias", (w[0],), (w[0],), dtype, aliases=("b",)) if s["bias"] else None
    fmt = torch.channels_last if layout == "channels_last" else torch.contiguous_format
    x, weight = x.contiguous(memory_format=fmt), weight.contiguous(memory_format=fmt)
    stride, padding, dilation, groups = s["stride"], s["padding"], s["dilation"], s["groups"]

    inputs = {"input": x, "weight": weight}
    if bias is not None:
        inputs["bias"] = bias

    def bind(activations: dict[str, torch.Tensor]) -> Bound:
        images = activations["input"]

        def run() -> torch.Tensor:
            return F.conv2d(images, weight, bias, stride, padding, dilation, groups)

        def reference(wide: torch.dtype) -> torch.Tensor:
            return F.conv2d(images.to(wide), weight.to(wide), None if bias is None else bias.to(wide), stride,
                            padding, dilation, groups)

        return Bound(run, reference)

    return {"inputs": inputs, "activations": ("input",), "bind": bind, "calls": independent_calls}
