"""A test-only experiment that records the cuDNN conv TF32 permission its variant is prepared and called under
(tests/profile/test_ncu_session.py: the ncu child runs a card under the card's math mode, as the worker does)."""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from harness.api.experiment import Experiment
from harness.api.numerics import cudnn_conv_tf32
from harness.workloads.base import Workload

EXPERIMENT = Experiment(
    name="math_probe",
    op_kinds=("conv3d",),
    hypothesis="the card's math mode holds wherever the card runs",
    check="effective_flops",
)

SEEN: list[tuple[str, bool]] = []  # (phase, torch.backends.cudnn.allow_tf32) in the order seen


@EXPERIMENT.baseline
def base(w: Workload) -> Callable[[], torch.Tensor]:
    SEEN.append(("prepare", cudnn_conv_tf32()))
    x, weight, bias = w.inputs["input"], w.inputs["weight"], w.inputs.get("bias")
    s = w.shape

    def run() -> torch.Tensor:
        SEEN.append(("call", cudnn_conv_tf32()))
        return F.conv3d(x, weight, bias, s["stride"], s["padding"], s["dilation"], s["groups"])

    return run
