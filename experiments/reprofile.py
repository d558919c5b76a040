"""Re-profile each card's baseline op as the report ran it: the baseline reproduction check.

No variants: the run measures the baseline on this machine and diffs it against the report's card
(kernel families, duration ratio, class) in baseline_reproduction.md.
"""

from __future__ import annotations

from typing import Callable

import torch

from harness.api.experiment import Experiment
from harness.workloads.base import Workload
from harness.workloads.registry import OP_KINDS

EXPERIMENT = Experiment(
    name="reprofile",
    op_kinds=OP_KINDS,  # every op card, a captured model's conv2d and replayed ops included
    hypothesis="the baseline re-profiled here reproduces the report's card (kernel families and class)",
    check="effective_flops",
)


@EXPERIMENT.baseline
def as_reported(w: Workload) -> Callable[[], torch.Tensor]:
    """The workload's own baseline op (F.linear, F.conv3d, F.conv2d, SDPA on the valid keys, Tensor.to, a
    replayed call)."""
    return w.run
