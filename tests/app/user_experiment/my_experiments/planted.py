"""A user's own counter-experiment with planted outcomes (docs/experiments.md "Your own experiment").

The baseline computes the card's linear twice, as a model doing the work twice would; each variant
plants one outcome: `once` is 2x faster, `identical` is the baseline itself, `thrice` is 1.5x
slower, `no_bias` is faster but wrong (the bias dropped).
"""

import torch.nn.functional as F

from harness.api.experiment import Experiment
from my_experiments import planted_checks  # noqa: F401  registers time_halved

EXPERIMENT = Experiment(
    name="planted",
    op_kinds=("linear",),
    hypothesis="doing the linear once instead of twice halves its time",
    check="time_halved",
)


def _repeat(w, times, bias=True):
    x, weight, b = w.inputs["x"], w.inputs["weight"], w.inputs.get("bias") if bias else None

    def run():
        for _ in range(times - 1):
            F.linear(x, weight, b)
        return F.linear(x, weight, b)

    return run


@EXPERIMENT.baseline
def twice(w):
    return _repeat(w, 2)


@EXPERIMENT.variant
def once(w):
    return _repeat(w, 1)


@EXPERIMENT.variant
def identical(w):
    return _repeat(w, 2)


@EXPERIMENT.variant
def thrice(w):
    return _repeat(w, 3)


@EXPERIMENT.variant
def no_bias(w):
    return _repeat(w, 1, bias=False)
