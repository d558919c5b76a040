"""channels_last_3d conv3d: remove the NCDHW <-> NDHWC conversions around the VAE convolutions.

On a GPU cuDNN wraps NCDHW tensors with nchwToNhwc / nhwcToNchw transpose kernels; on a CPU oneDNN
reorders likewise (visible as copy/reorder ops). Keeping input, weight and output channels_last_3d
through the op should remove them and the bytes they move.

A captured model's conv2d cards get the same variants in the 4-D format, torch.channels_last (NHWC): the
variant names stay the conv3d's, so one space serves both, and what they carry to a later round (and to the
whole model, `harness.capture --apply`) is that 4-D format.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from harness.api.experiment import Experiment, Prepared
from harness.cards.fields import COMPUTE_BOUND, L2_BANDWIDTH_BOUND, PARTIAL_WAVE_TAIL, UNRESOLVED
from harness.workloads.base import Workload

EXPERIMENT = Experiment(
    name="vae_channels_last",
    op_kinds=("conv3d", "conv2d"),
    hypothesis="channels_last_3d (a conv2d's channels_last) input and weight, kept through the op, remove the "
    "layout-conversion kernels and the bytes they move, so the conv takes less time",
    check="transposes_removed",
    classes=(L2_BANDWIDTH_BOUND, PARTIAL_WAVE_TAIL, COMPUTE_BOUND, UNRESOLVED),
)


def _conv(w: Workload, x: torch.Tensor, weight: torch.Tensor) -> Callable[[], torch.Tensor]:
    bias = w.inputs.get("bias")
    s = w.shape
    stride, padding, dilation, groups = s["stride"], s["padding"], s["dilation"], s["groups"]
    conv = F.conv2d if w.op_kind == "conv2d" else F.conv3d
    return lambda: conv(x, weight, bias, stride, padding, dilation, groups)


def _formats(w: Workload, input_format: str, weight_format: str) -> tuple[torch.Tensor, torch.Tensor]:
    x = w.inputs["input"].contiguous(memory_format=_format(w, input_format))
    weight = w.inputs["weight"].contiguous(memory_format=_format(w, weight_format))
    return x, weight


def _format(w: Workload, name: str) -> torch.memory_format:
    """contiguous, or the channels-last format of the conv's rank (NHWC for a conv2d, NDHWC for a conv3d)."""
    if name == "contiguous":
        return torch.contiguous_format
    return torch.channels_last if w.op_kind == "conv2d" else torch.channels_last_3d


@EXPERIMENT.baseline
def ncdhw(w: Workload) -> Callable[[], torch.Tensor]:
    """The report's baseline: fp32 NCDHW (a conv2d's NCHW) input and weight."""
    return _conv(w, *_formats(w, "contiguous", "contiguous"))


# The lines that get a variant into the model, by the conv's rank (a conv2d's 4-D tensors, a conv3d's 5-D).
_TO_MODEL = {
    5: {"input": "x = x.contiguous(memory_format=torch.channels_last_3d)  # the decoder's input, once",
        "weight": "vae.decoder.to(memory_format=torch.channels_last_3d)  # every Conv3d weight, once at load"},
    4: {"input": "x = x.contiguous(memory_format=torch.channels_last)  # the conv's input, once",
        "weight": "model.to(memory_format=torch.channels_last)  # every Conv2d weight, once at load"},
}


def _kept(w: Workload, input_format: str, weight_format: str) -> Prepared:
    """The conv on these formats; what it carries to a later round, and the lines that get it in the model."""
    formats = {"input": input_format, "weight": weight_format}
    changed = [name for name, fmt in formats.items() if fmt == "channels_last_3d"]
    planar = w.op_kind == "conv2d"
    carried = "channels_last" if planar else "channels_last_3d"
    carries = {name: {"memory_format": carried} for name in changed}
    return Prepared(_conv(w, *_formats(w, input_format, weight_format)), carries=carries,
                    recipe="\n".join(_TO_MODEL[4 if planar else 5][name] for name in changed))


@EXPERIMENT.variant
def channels_last_3d(w: Workload) -> Prepared:
    """Input and weight channels_last_3d (a conv2d's channels_last); the output stays so (no conversion back)."""
    return _kept(w, "channels_last_3d", "channels_last_3d")


@EXPERIMENT.variant
def channels_last_input(w: Workload) -> Prepared:
    """Only the activation channels_last_3d (channels_last): shows whether the weight's conversion matters."""
    return _kept(w, "channels_last_3d", "contiguous")


@EXPERIMENT.variant
def channels_last_weight(w: Workload) -> Prepared:
    """Only the weight channels_last_3d (channels_last): the activation stays NCDHW/NCHW as after a cat or repeat."""
    return _kept(w, "contiguous", "channels_last_3d")
