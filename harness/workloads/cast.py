"""aten.to.dtype: the cast of the decoded video frames (the report lost its shape: `{}`).

What the report still tells (checked against its evidence):
- Element count: the dominant kernel is `unrolled_elementwise_kernel` (128 threads x 4 elements = 512 per
  block, 16 blocks per SM, 132 SMs). Its `waves` (9.97 and 13.3 at 480x832, 22.5 and 30.0 at 704x1280)
  equal 3 channels x {9, 12} frames x H x W / 512 / 2112 for the FULL frame, not a rank's width slice.
  So the tensor is [1, 3, T, H, W] with T = 9 or 12 (the shorter card of a resolution is the 9-frame one).
- dtypes: PyTorch copies float32 -> bfloat16/float16 with a dedicated non-casting kernel
  (`vectorized_elementwise_kernel` on contiguous data); `unrolled_elementwise_kernel` is the dynamic-cast
  path, used e.g. for bfloat16 -> float32 or float32 -> uint8. The VAE runs in float32 (TF32 conv
  kernels), so the frames are float32, and the default here is float32 -> uint8 (frames for a video
  writer). This is an inference, not a record: set CastConfig(dst_dtype=...) / dtype= to change it.

Defaults: source dtype = the workload's `dtype` (float32), destination uint8, 3 channels, H x W from the
resolution, frames from shape parameters `frames`, else CastConfig.frames, else (build_for_card) from the
pair of cast cards of the same resolution, else 12 with a note. A shape parameter `shape` (the full
tensor shape) overrides all of it. Synthetic frames are uniform in [0, 255) for an integer destination
(values a real pipeline would cast after scaling) and in [-1, 1) otherwise.

FLOPs: 0, reduction length 1 (nothing is summed). Minimum bytes: numel x (source + destination element
size). Scaling shrinks H and W (never below 8). `reference()` is the exact conversion, in float64 by
default: truncation toward zero for integer destinations (so the uint8 output must be exact), the source
values themselves for floating ones (held to the destination's rounding).

The frames are the activation (each call casts its own); a cast has no constants. Casts do not batch calls.
"""

from __future__ import annotations

from typing import Any

import torch

from harness.boundary.spec import CastSettings
from harness.workloads.base import Bound, Plan, parse_resolution
from harness.workloads.inputs import Source
from harness.workloads.params import (
    WorkloadError,
    dtype_name,
    element_size,
    int_list,
    numel,
    parse_dtype,
    positive_int,
    scale_dim,
)

KIND = "cast"
FLOOR = 8
DEFAULT_FRAMES = 12


# The workload's settings travel in a CardSpec (`workload.cast`): one dataclass, torch-free, in harness.boundary.spec.
CastConfig = CastSettings


def plan(
    params: dict[str, Any],
    *,
    dtype: torch.dtype,
    scale: float,
    config: CastConfig,
    resolution: Any = None,
) -> Plan:
    notes: list[str] = []
    src = parse_dtype(params.get("src_dtype") or config.src_dtype or dtype, "cast source dtype")
    dst = parse_dtype(params.get("dtype") or params.get("dst_dtype") or config.dst_dtype, "cast destination dtype")
    if params.get("shape") is not None:
        full = params["shape"]
        if not isinstance(full, (list, tuple)) or not full:
            raise WorkloadError(f"{KIND}: shape must be a list of integers, got {full!r}")
        shape = int_list(KIND, "shape", full, len(full), minimum=1)
    else:
        if params.get("frames") is not None:
            frames = positive_int(KIND, "frames", params["frames"])
        elif config.frames is not None:
            frames = positive_int(KIND, "frames", config.frames)
        else:
            frames = DEFAULT_FRAMES
            notes.append(f"frames unknown (report lost the shape); assumed {DEFAULT_FRAMES}")
        channels = positive_int(KIND, "channels", params.get("channels", config.channels))
        batch = positive_int(KIND, "batch", params.get("batch", config.batch))
        height = params.get("height", config.height)
        width = params.get("width", config.width)
        if height is None or width is None:
            parsed = parse_resolution(params.get("resolution", resolution))
            if parsed is None:
                raise WorkloadError(
                    f"{KIND}: the frame size is unknown: give a resolution (e.g. '480x832') "
                    "or CastConfig(height, width)"
                )
            height = parsed[0] if height is None else height
            width = parsed[1] if width is None else width
        shape = [batch, channels, frames, positive_int(KIND, "height", height), positive_int(KIND, "width", width)]
    notes.append(f"{dtype_name(src)} -> {dtype_name(dst)}")

    scaled = list(shape)
    for axis in (len(shape) - 2, len(shape) - 1):
        if axis >= 0:
            scaled[axis] = scale_dim(shape[axis], scale, FLOOR)
    count = numel(scaled)

    def record(dims: list[int]) -> dict[str, Any]:
        return {"shape": dims, "src_dtype": dtype_name(src), "dst_dtype": dtype_name(dst)}

    return Plan(
        op_kind=KIND,
        shape=record(scaled),
        original_shape=record(list(shape)),
        scale=scale,
        dtype=src,
        output_shape=tuple(scaled),
        flops=0.0,
        min_bytes=float(count * (element_size(src) + element_size(dst))),
        reduction_length=1,  # elementwise: nothing is summed
        notes=tuple(notes),
    )


def build(plan_: Plan, source: Source, layout: str | None) -> dict[str, Any]:
    o, s = plan_.original_shape, plan_.shape
    src, dst = plan_.dtype, parse_dtype(s["dst_dtype"])
    if layout == "channels_last_3d" and len(s["shape"]) != 5:
        raise WorkloadError(f"{KIND}: channels_last_3d needs a 5-D tensor, the shape is {s['shape']}")
    integer = not dst.is_floating_point and not dst.is_complex
    values = (0.0, 255.0) if integer else (-1.0, 1.0)
    frames = source.take(
        "frames",
        tuple(o["shape"]),
        tuple(s["shape"]),
        src,
        aliases=("input", "x", "video"),
        primary=True,
        uniform=values,
    )
    if layout == "channels_last_3d":
        frames = frames.contiguous(memory_format=torch.channels_last_3d)
    else:
        frames = frames.contiguous()

    def bind(activations: dict[str, torch.Tensor]) -> Bound:
        video = activations["frames"]

        def reference(wide: torch.dtype) -> torch.Tensor:
            values = video.to(wide)
            return values.trunc() if integer else values

        return Bound(lambda: video.to(dst), reference)

    return {"inputs": {"frames": frames}, "activations": ("frames",), "bind": bind}
