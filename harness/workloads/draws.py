"""Other draws of a workload's activations, and k calls of its op, built by the harness.

A variant is prepared on `w.inputs`, so a check of its output on those values alone can pass for a
variant that is right only there (a result cached from the first call, a constant that happens to
fit), and a variant that batches k calls must not supply the other calls, nor their expected output,
itself: whatever it supplies it can get wrong the same way twice. So the harness makes them:

- `Workload.activations` name the inputs that vary from call to call (linear x; conv3d input;
  attention q, and in self-attention the chunk's own keys and values, the last `queries` of the valid
  prefix; cast frames; vae_decode latent; dit_block hidden_states and the timestep projection). The
  rest are constants: weights, biases, a KV cache's fixed part, a chunk's modules with their state.
- `redraw(w, d)`: the workload on draw d of its activations: each a seeded tensor of the same shape,
  dtype, device and memory format (strides), drawn from the activation's spread (the distribution
  the builder drew it from; for a captured tensor its own mean and standard deviation, or its range),
  with its own float64 reference (the op's `bind`). The constants are the same tensor objects. Draw 0
  is the workload itself. Draw 1 of a captured activation whose file also holds the op's second call
  (harness.capture) is that call; its other draws are seeded (the workload's notes say so).
- `calls(w, k)`: k calls of the op, call 0 being exactly the workload's inputs, with each call's
  reference and the stacked form a batched op takes: a linear's k calls are the draws 0..k-1 of its rows
  (`independent_calls`), a conv3d's k consecutive streaming windows of one frame sequence
  (harness.workloads.frames). On a redrawn workload they are that draw's: call 0 is its inputs, the
  others seeded apart from every other draw's. Other op kinds do not batch (WorkloadError).
- `batch_for(w, calls)`: the batch a variant with `Prepared(calls=k)` built on w, so that its output
  is checked against every call's reference (`CallBatch.reference`).
- `rebind`: a workload whose op an experiment's `workload` hook replaced, redrawable by the new op's
  bind.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from harness.workloads.base import BindFn, Bound, CallBatch, Draws, Workload, WorkloadError
from harness.workloads.inputs import Spread


class BatchError(WorkloadError):
    """A variant batched calls the harness did not build; one line saying so."""


def draw_key(draw: int, call: int = 0) -> str:
    """The seed name of call `call` of draw `draw`: call j of draw 0 is draw j (so a workload's k calls are
    its draws 0..k-1), and the calls of a later draw are seeded apart from every draw."""
    if call == 0:
        return f"draw{draw}"
    return f"draw{call}" if draw == 0 else f"draw{draw}.call{call}"


def _non_negative(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise WorkloadError(f"{what} must be a non-negative integer, got {value!r}")
    return value


def draws_of(w: Workload) -> Draws:
    """The workload's Draws, refused where its op was replaced without a bind for the new op."""
    if w._draws is None:
        raise WorkloadError(f"{w.op_kind}: this workload was not built by harness.workloads, so it has no draws")
    if w._reference is not w._bound:
        raise WorkloadError(f"{w.op_kind}: this workload's op was replaced (an experiment's workload hook) without a "
                            "bind for the new op: make it with harness.workloads.draws.rebind, which other draws "
                            "and calls need")
    return w._draws


def drawn_like(w: Workload, name: str, key: str) -> torch.Tensor:
    """Activation `name` drawn anew (seed name `name@key`): the shape, dtype, device and strides of w's own,
    values from its spread; of an activation with a varying block, only that block is drawn anew."""
    draws = draws_of(w)
    current = w.inputs[name]
    if key == draw_key(1) and name in draws.second_call:  # the model's own second call, captured
        return torch.empty_like(current).copy_(draws.second_call[name])
    spread = draws.spreads[name]
    block = draws.varying.get(name)
    if block is None:
        fresh = spread.draw(f"{name}@{key}", tuple(current.shape), draws.seed)
        return torch.empty_like(current).copy_(fresh)  # empty_like keeps dtype, device and memory format
    dim, start, stop = block
    out = current.clone()  # the fixed part kept as it is
    part = out.narrow(dim, start, stop - start)
    part.copy_(spread.draw(f"{name}@{key}", tuple(part.shape), draws.seed))
    return out


def activations_of(w: Workload, key: str) -> dict[str, torch.Tensor]:
    """Every activation of w drawn anew under seed name `key`."""
    return {name: drawn_like(w, name, key) for name in w.activations}


def bind_call(w: Workload, activations: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], Bound]:
    """One call's inputs (w's constants, these activations, what the op derives from them) and its op."""
    bound = draws_of(w).bind(activations)
    return {**w.inputs, **activations, **bound.derived}, bound


def redraw(w: Workload, draw: int) -> Workload:
    """w on draw `draw` of its activations, with its own reference; draw 0 (w's own) is w itself. A draw
    is made once: asking again gives the same workload (its tensors and its batches)."""
    draw = _non_negative(draw, "draw")
    if draw == w.draw:
        return w
    if w.draw != 0:
        raise WorkloadError(f"this workload is draw {w.draw}: take draw {draw} from the workload it was drawn from")
    if draw in w._redraws:
        return w._redraws[draw]
    inputs, bound = bind_call(w, activations_of(w, draw_key(draw)))
    names = ", ".join(w.activations)
    made = dataclasses.replace(
        w, inputs=inputs, run=bound.run, _reference=bound.reference, _bound=bound.reference, draw=draw,
        input_source=f"{w.input_source}; draw {draw}: {names} seeded", input_hash=None,
        notes=[*w.notes, f"draw {draw}: {names} drawn anew at the spread of draw 0's; every other input is "
                         "draw 0's tensor"],
    )
    w._redraws[draw] = made
    return made


def calls(w: Workload, k: int) -> CallBatch:
    """k calls of w's op (call 0: w's inputs), built once and kept in `w.batches`."""
    if _non_negative(k, "calls") < 1:
        raise WorkloadError("calls must be at least 1")
    make = draws_of(w).calls
    if make is None:
        raise WorkloadError(f"{w.op_kind}: batching calls does not apply: w.calls(k) builds the calls of a linear "
                            "(rows sharing its weight) or of a conv3d (streaming frame windows)")
    if k not in w.batches:
        w.batches[k] = make(w, k)
    return w.batches[k]


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
