"""What the harness does with a workload's draws beyond making them (`Workload.redraw`, `Workload.calls`,
harness.workloads.base, where the drawing is):

- `independent_calls(w, k)`: the k calls of an op independent per row (a linear, a conv2d): the draws 0..k-1
  of its rows, stacked on dim 0, each with its reference (a conv3d's calls are harness.workloads.frames');
- `batch_for(w, calls)`: the batch a variant with `Prepared(calls=k)` built on w, so that its output
  is checked against every call's reference (`CallBatch.reference`);
- `rebind`: a workload whose op an experiment's `workload` hook replaced, redrawable by the new op's
  bind.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from harness.workloads.base import BindFn, CallBatch, Draws, Workload, activations_of, bind_call, draw_key, draws_of
from harness.workloads.params import WorkloadError
from harness.workloads.seeded import Spread


class BatchError(WorkloadError):
    """A variant batched calls the harness did not build; one line saying so."""


def independent_calls(w: Workload, k: int) -> CallBatch:
    """k calls on independent draws of the activations, stacked on dim 0 (a linear's rows of k calls)."""
    others = [bind_call(w, activations_of(w, draw_key(w.draw, j))) for j in range(1, k)]
    inputs = [w.inputs, *(call_inputs for call_inputs, _ in others)]
    stacked = {name: torch.cat([call_inputs[name] for call_inputs in inputs]) for name in w.activations}
    _, whole = bind_call(w, stacked)  # rows are independent: the op on all k calls' rows is their calls' ops
    return CallBatch(k, inputs, stacked, [w.reference, *(bound.reference for _, bound in others)],
                     whole=whole.reference)


def batch_for(w: Workload, calls: int) -> CallBatch:
    """The batch of `calls` calls a variant built on w with w.calls(calls), for judging its output."""
    batch = w.batches.get(calls)
    if batch is None:
        raise BatchError(f"Prepared.calls={calls} but the variant built no {calls} calls with w.calls({calls}): the "
                         "harness builds a batch's other calls so that it can check them")
    return batch


def rebind(w: Workload, *, inputs: dict[str, torch.Tensor], activations: tuple[str, ...], bind: BindFn,
           **changes: Any) -> Workload:
    """w computing another op on `inputs` (an experiment's `workload` hook): `bind(activations)` is the new
    op on one call's activations. An activation keeps its spread where w has one of that name, else it is
    redrawn at its own mean and standard deviation. The new op does not batch calls."""
    draws = draws_of(w)
    missing = [name for name in activations if name not in inputs]
    if missing:
        raise WorkloadError(f"rebind: activations {', '.join(missing)} are not among the inputs")
    bound = bind({name: inputs[name] for name in activations})
    spreads = {name: draws.spreads.get(name) or Spread.measured(inputs[name], uniform=False) for name in activations}
    varying = {name: block for name, block in draws.varying.items() if name in activations}
    new = Draws(bind=bind, spreads=spreads, seed=draws.seed, varying=varying)
    return dataclasses.replace(w, inputs={**inputs, **bound.derived}, run=bound.run, _reference=bound.reference,
                               _bound=bound.reference, activations=tuple(activations), _draws=new, **changes)
