"""Rounds: a run on an earlier run's best.json starts from what that run adopted.

Each card of best.json records the variants applied to it so far (`extra["applied"]`, oldest first:
experiment, module, variant, parameters, what it carries, its recipe and the verdict that adopted it).
A run whose report is such a best.json measures, for that card:

- as its baseline, the last applied variant, re-prepared from its own experiment module on the inputs
  the earlier applied variants left (so round 2's baseline reproduces round 1's best);
- its own variants on the inputs all applied variants leave (their `carries`: a memory format or a
  dtype of named inputs), so a new variant composes on top where it can: bf16 on channels_last inputs.

Nothing here is timed; the worker calls `carry` and `round_baseline` when it builds a card. The entries
themselves are harness.cards.applied's (torch-free: the run reads and writes them), re-exported here.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Sequence

from harness.cards.applied import APPLIED_KEY, AppliedVariant, RoundError, adopted_by_card, applied_entry, applied_of
from harness.workloads.base import Workload
from harness.workloads.params import MEMORY_FORMATS, WorkloadError, parse_dtype, parse_layout

__all__ = ["APPLIED_KEY", "AppliedVariant", "RoundError", "adopted_by_card", "applied_entry", "applied_of", "carry",
           "round_baseline"]


def carry(workload: Workload, applied: Iterable[AppliedVariant]) -> Workload:
    """The workload with each applied variant's carries done to its inputs, in order.

    The float64 reference stays the original inputs' (the workload's closure): every round is judged
    against the model's own op, not against an earlier round's rounding.
    """
    inputs = dict(workload.inputs)
    layout, dtype = workload.layout, workload.dtype
    for entry in applied:
        for name, change in entry.carries.items():
            if name not in inputs:
                continue  # an input this op kind lacks (a bias-less op): nothing to carry
            tensor = inputs[name]
            if "dtype" in change:
                tensor = tensor.to(parse_dtype(change["dtype"]))  # keeps the memory format
                dtype = tensor.dtype if name in ("input", "x") else dtype
            if "memory_format" in change:
                fmt = parse_layout(change["memory_format"], dims=tensor.dim())  # channels_last: 4-D's own
                needs = {"channels_last_3d": 5, "channels_last": 4}.get(fmt)
                if needs is not None and tensor.dim() != needs:
                    raise WorkloadError(f"carries[{name!r}]: {fmt} needs a {needs}-d tensor, got {tensor.dim()}-d")
                tensor = tensor.contiguous(memory_format=MEMORY_FORMATS[fmt])
                layout = fmt if name in ("input", "x") else layout
            inputs[name] = tensor
    return dataclasses.replace(workload, inputs=inputs, layout=layout, dtype=dtype)


def round_baseline(workload: Workload, applied: Sequence[AppliedVariant], load: Any) -> tuple[Any, Workload]:
    """The last applied variant, prepared on the inputs the ones before it left: round 2's baseline, and
    the workload it was prepared on (the calls of a batch it takes are that workload's).

    `load` is harness.api.experiment.load_experiment (passed in: this module stays free of experiments).
    """
    last = applied[-1]
    try:
        experiment = load(last.module, expected_name=last.experiment)
    except Exception as exc:  # an experiment module that moved or is not on PYTHONPATH here
        raise RoundError(f"the applied variant {last.variant} of {last.experiment} cannot be rebuilt: "
                         f"{exc}") from None
    prepared_on = carry(workload, applied[:-1])
    return experiment.prepare(last.variant, prepared_on, dict(last.params)), prepared_on
