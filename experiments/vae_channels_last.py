"""channels_last_3d conv3d: remove the NCDHW <-> NDHWC conversions around the VAE convolutions.

On a GPU cuDNN wraps NCDHW tensors with nchwToNhwc / nhwcToNchw transpose kernels; on a CPU oneDNN
reorders likewise (visible as copy/reorder ops). Keeping input, weight and output channels_last_3d
through the op should remove them and the bytes they move.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from harness.cards.fields import COMPUTE_BOUND, L2_BANDWIDTH_BOUND, PARTIAL_WAVE_TAIL, UNRESOLVED
from harness.experiment import Experiment, Prepared
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


_TO_MODEL = {
    "input": "x = x.contiguous(memory_format=torch.channels_last_3d)  # the decoder's input, once",
    "weight": "vae.decoder.to(memory_format=torch.channels_last_3d)  # every Conv3d weight, once at load",
}


def _kept(w: Workload, input_format: str, weight_format: str) -> Prepared:
    """The conv on these formats; what it carries to a later round, and the lines that get it in the model."""
    formats = {"input": input_format, "weight": weight_format}
    changed = [name for name, fmt in formats.items() if fmt == "channels_last_3d"]
    return Prepared(_conv(w, *_formats(w, input_format, weight_format)),
                    carries={name: {"memory_format": "channels_last_3d"} for name in changed},
                    recipe="\n".join(_TO_MODEL[name] for name in changed))


@EXPERIMENT.variant
def channels_last_3d(w: Workload) -> Prepared:
    """Input and weight channels_last_3d; the output stays channels_last_3d (no conversion back)."""
    return _kept(w, "channels_last_3d", "channels_last_3d")


@EXPERIMENT.variant
def channels_last_input(w: Workload) -> Prepared:
    """Only the activation channels_last_3d: shows whether the weight's conversion matters."""
    return _kept(w, "channels_last_3d", "contiguous")


@EXPERIMENT.variant
def channels_last_weight(w: Workload) -> Prepared:
    """Only the weight channels_last_3d: the activation stays NCDHW as after a cat or repeat."""
    return _kept(w, "contiguous", "channels_last_3d")
