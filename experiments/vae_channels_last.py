"""channels_last_3d conv3d: remove the NCDHW <-> NDHWC conversions around the VAE convolutions.

On a GPU cuDNN wraps NCDHW tensors with nchwToNhwc / nhwcToNchw transpose kernels; on a CPU oneDNN
reorders likewise (visible as copy/reorder ops). Keeping input, weight and output channels_last_3d
through the op should remove them and the bytes they move.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from harness.cards.fields import L2_BANDWIDTH_BOUND, PARTIAL_WAVE_TAIL, UNRESOLVED, COMPUTE_BOUND
from harness.experiment import Experiment
from harness.workloads.base import Workload

EXPERIMENT = Experiment(
    name="vae_channels_last",
    op_kinds=("conv3d",),
    hypothesis="channels_last_3d input and weight, kept through the op, remove the layout-conversion "
    "kernels and the bytes they move, so the conv takes less time",
    check="transposes_removed",
    classes=(L2_BANDWIDTH_BOUND, PARTIAL_WAVE_TAIL, COMPUTE_BOUND, UNRESOLVED),
)


def _conv(w: Workload, x: torch.Tensor, weight: torch.Tensor) -> Callable[[], torch.Tensor]:
    bias = w.inputs.get("bias")
    s = w.shape
    stride, padding, dilation, groups = s["stride"], s["padding"], s["dilation"], s["groups"]
    return lambda: F.conv3d(x, weight, bias, stride, padding, dilation, groups)


def _formats(w: Workload, input_format: str, weight_format: str) -> tuple[torch.Tensor, torch.Tensor]:
    formats = {"contiguous": torch.contiguous_format, "channels_last_3d": torch.channels_last_3d}
    x = w.inputs["input"].contiguous(memory_format=formats[input_format])
    weight = w.inputs["weight"].contiguous(memory_format=formats[weight_format])
    return x, weight


@EXPERIMENT.baseline
def ncdhw(w: Workload) -> Callable[[], torch.Tensor]:
    """The report's baseline: fp32 NCDHW input and weight."""
    return _conv(w, *_formats(w, "contiguous", "contiguous"))


@EXPERIMENT.variant
def channels_last_3d(w: Workload) -> Callable[[], torch.Tensor]:
    """Input and weight channels_last_3d; the output stays channels_last_3d (no conversion back)."""
    return _conv(w, *_formats(w, "channels_last_3d", "channels_last_3d"))


@EXPERIMENT.variant
def channels_last_input(w: Workload) -> Callable[[], torch.Tensor]:
    """Only the activation channels_last_3d: shows whether the weight's conversion matters."""
    return _conv(w, *_formats(w, "channels_last_3d", "contiguous"))


@EXPERIMENT.variant
def channels_last_weight(w: Workload) -> Callable[[], torch.Tensor]:
    """Only the weight channels_last_3d: the activation stays NCDHW as after a cat or repeat."""
    return _conv(w, *_formats(w, "contiguous", "channels_last_3d"))
