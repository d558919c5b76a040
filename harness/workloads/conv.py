"""What a 2-D and a 3-D convolution workload share (harness.workloads.conv2d, conv3d): the shape arithmetic,
scaling, FLOPs and bytes of an N-d conv, and its tensors, bound op and float64 reference.

Shape parameters: `input` [N, C, *spatial], `weight` [Cout, Cin/groups, *kernel], `stride`, `padding`,
`dilation` (one int per spatial dim, or one int), `groups`, `output` (checked against the computed shape),
optionally `bias` (bool; each kind says what it assumes without one). FLOPs are 2 * Cout * (Cin/groups) *
prod(kernel) * N * prod(output spatial); (Cin/groups) * prod(kernel) is the `reduction_length`.

Scaling shrinks the output's last two extents (H and W; never below FLOOR, smaller ones are kept) and derives
the input extent that produces them; batch, channels, frames and the kernel stay exact.

Synthetic inputs: input of std 1, weight of std 1/sqrt(reduction_length) (so the sum has std 1) and bias of
std 1, of the same order as the sum, so that a lost or misplaced bias is an error of order 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import torch

from harness.workloads.base import Bound, CallBatch, Plan, Workload
from harness.workloads.inputs import Source
from harness.workloads.params import WorkloadError, element_size, int_list, numel, positive_int, require, scale_dim

FLOOR = 8


def output_extent(size: int, kernel: int, stride: int, padding: int, dilation: int) -> int:
    return (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


def input_extent(out: int, kernel: int, stride: int, padding: int, dilation: int) -> int:
    """The smallest input extent that gives `out` outputs."""
    return (out - 1) * stride + dilation * (kernel - 1) + 1 - 2 * padding


# A float64 conv on a CPU runs as im2col + GEMM, its column buffer reduction x output positions x 8 bytes: 1.6 GB
# for the VAE's 96-channel conv3d at the default scale, mapped anew and faulted in at every call (allocations
# that large never come back from the heap). In slabs of output rows whose buffer stays under this, one buffer's
# memory serves every slab: the same values, 1.3-1.6x faster on a 2-core Xeon.
REFERENCE_SLAB_BYTES = 16 * 2**20


def reference_in_slabs(op: Callable[..., torch.Tensor], x: torch.Tensor, weight: torch.Tensor,
                       bias: torch.Tensor | None, stride: list[int], padding: list[int], dilation: list[int],
                       groups: int, slab_bytes: int = REFERENCE_SLAB_BYTES) -> torch.Tensor:
    """op(x, weight, bias, ...) computed in slabs along the output's second-to-last axis (H), each slab's input
    rows cut from `x` padded once along that axis; the whole op in one call where one slab would hold it all."""
    axis = x.dim() - 2  # H
    spatial = axis - 2
    kernel = weight.shape[axis]
    rows_out = output_extent(x.shape[axis], kernel, stride[spatial], padding[spatial], dilation[spatial])
    other = math.prod(output_extent(x.shape[2 + i], weight.shape[2 + i], stride[i], padding[i], dilation[i])
                      for i in range(x.dim() - 2) if i != spatial)
    row_bytes = math.prod(weight.shape[1:]) * other * x.element_size()
    rows = max(1, slab_bytes // max(1, row_bytes))
    if rows >= rows_out:
        return op(x, weight, bias, stride, padding, dilation, groups)
    pad = padding[spatial]
    padded = torch.nn.functional.pad(x, [0, 0] * (x.dim() - 1 - axis) + [pad, pad]) if pad else x
    unpadded = [0 if i == spatial else p for i, p in enumerate(padding)]
    reach = dilation[spatial] * (kernel - 1) + 1  # input rows one output row reads
    slabs = []
    for first in range(0, rows_out, rows):
        last = min(rows_out, first + rows) - 1
        start = first * stride[spatial]
        slab = padded.narrow(axis, start, last * stride[spatial] + reach - start)
        slabs.append(op(slab, weight, bias, stride, unpadded, dilation, groups))
    return torch.cat(slabs, dim=axis)


@dataclass(frozen=True)
class ConvKind:
    """One conv workload family: its name, spatial rank, op, memory format and how its calls batch."""

    name: str  # conv2d, conv3d
    spatial: int  # 2 or 3
    op: Callable[..., torch.Tensor]  # F.conv2d, F.conv3d
    layout: str  # the workload layout that puts input and weight in `memory_format`
    memory_format: torch.memory_format
    bias_note: str  # what is assumed when the card says nothing of a bias
    calls: Callable[[Workload, int], CallBatch]


def _bias(kind: ConvKind, params: dict[str, Any]) -> tuple[bool, str | None]:
    value = params.get("bias")
    if value is None:
        return True, kind.bias_note
    if not isinstance(value, (bool, list, tuple)):
        raise WorkloadError(f"{kind.name}: bias must be true/false or a shape, got {value!r}")
    return (value if isinstance(value, bool) else True), None


def _output(kind: ConvKind, params: dict[str, Any], x: list[int], w: list[int], stride: list[int],
            padding: list[int], dilation: list[int], notes: list[str]) -> list[int]:
    spatial = [output_extent(x[2 + axis], w[2 + axis], stride[axis], padding[axis], dilation[axis])
               for axis in range(kind.spatial)]
    if min(spatial) < 1:
        raise WorkloadError(
            f"{kind.name}: input {x} is smaller than the kernel {w[2:]} (dilation {dilation}, padding {padding})"
        )
    output = [x[0], w[0], *spatial]
    if params.get("output") is not None:
        card_out = int_list(kind.name, "output", params["output"], kind.spatial + 2, minimum=1)
        if card_out != output:
            raise WorkloadError(f"{kind.name}: computed output {output} differs from the card's output {card_out}")
    else:
        notes.append("card gives no output shape; computed")
    return output


def plan(kind: ConvKind, params: dict[str, Any], *, dtype: torch.dtype, scale: float) -> Plan:
    name, dims = kind.name, kind.spatial
    x = int_list(name, "input", require(name, params, "input"), dims + 2, minimum=1)
    w = int_list(name, "weight", require(name, params, "weight"), dims + 2, minimum=1)
    stride = int_list(name, "stride", params.get("stride", 1), dims, minimum=1)
    padding = int_list(name, "padding", params.get("padding", 0), dims, minimum=0)
    dilation = int_list(name, "dilation", params.get("dilation", 1), dims, minimum=1)
    groups = positive_int(name, "groups", params.get("groups", 1))
    if x[1] != w[1] * groups:
        raise WorkloadError(
            f"{name}: input has {x[1]} channels but weight {w} with groups={groups} takes {w[1] * groups}"
        )
    if w[0] % groups:
        raise WorkloadError(f"{name}: {w[0]} output channels do not split into groups={groups}")
    bias, note = _bias(kind, params)
    notes = [note] if note else []
    output = _output(kind, params, x, w, stride, padding, dilation, notes)

    # Scale H and W of the output (the last two axes), then derive the input that yields exactly that output.
    scaled_in, scaled_out = list(x), list(output)
    for axis in range(dims - 2, dims):
        out_s = scale_dim(output[2 + axis], scale, FLOOR)
        if out_s != output[2 + axis]:
            scaled_out[2 + axis] = out_s
            scaled_in[2 + axis] = input_extent(out_s, w[2 + axis], stride[axis], padding[axis], dilation[axis])
    if any(e < 1 for e in scaled_in):
        raise WorkloadError(f"{name}: cannot scale input {x} by {scale} (padding {padding} exceeds the scaled extent)")

    reduction = math.prod(w[1:])  # Cin/groups * prod(kernel)
    outputs = numel(scaled_out)
    elements = numel(scaled_in) + numel(w) + (w[0] if bias else 0) + outputs

    def shape(inp: list[int], out: list[int]) -> dict[str, Any]:
        return {"input": inp, "weight": list(w), "output": out, "stride": stride, "padding": padding,
                "dilation": dilation, "groups": groups, "bias": bias}

    return Plan(op_kind=name, shape=shape(scaled_in, scaled_out), original_shape=shape(list(x), output),
                scale=scale, dtype=dtype, output_shape=tuple(scaled_out), flops=2.0 * reduction * outputs,
                min_bytes=float(elements * element_size(dtype)), reduction_length=reduction, notes=tuple(notes))


def build(kind: ConvKind, plan_: Plan, source: Source, layout: str | None) -> dict[str, Any]:
    o, s, dtype = plan_.original_shape, plan_.shape, plan_.dtype
    w = s["weight"]
    x = source.take("input", tuple(o["input"]), tuple(s["input"]), dtype, aliases=("x",), primary=True)
    # The sum over Cin/groups*prod(kernel) terms has std 1 with this weight; the bias gets std 1 too, so a
    # variant that drops or misplaces it errs by the order of the output, not by 1/sqrt(K) of it.
    weight = source.take("weight", tuple(w), tuple(w), dtype, aliases=("w",), std=1.0 / math.sqrt(math.prod(w[1:])))
    bias = source.take("bias", (w[0],), (w[0],), dtype, aliases=("b",)) if s["bias"] else None
    fmt = kind.memory_format if layout == kind.layout else torch.contiguous_format
    x, weight = x.contiguous(memory_format=fmt), weight.contiguous(memory_format=fmt)
    stride, padding, dilation, groups = s["stride"], s["padding"], s["dilation"], s["groups"]

    inputs = {"input": x, "weight": weight}
    if bias is not None:
        inputs["bias"] = bias

    def bind(activations: dict[str, torch.Tensor]) -> Bound:
        frames = activations["input"]

        def run() -> torch.Tensor:
            return kind.op(frames, weight, bias, stride, padding, dilation, groups)

        def reference(wide: torch.dtype) -> torch.Tensor:
            x, w, b = frames.to(wide), weight.to(wide), None if bias is None else bias.to(wide)
            if x.device.type != "cpu":  # cuDNN's own workspace: no column buffer to fault in
                return kind.op(x, w, b, stride, padding, dilation, groups)
            return reference_in_slabs(kind.op, x, w, b, stride, padding, dilation, groups)

        return Bound(run, reference)

    return {"inputs": inputs, "activations": ("input",), "bind": bind, "calls": kind.calls}
