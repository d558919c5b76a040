"""The Workload: one card's op at one (possibly scaled) shape, with its inputs and baseline callable.

A workload is built in two steps. `plan` is pure arithmetic on the card's shape parameters: the scaled
shape, the output shape, the FLOPs and the minimum bytes (no tensors, so it is cheap at full scale and
is what the roofline of the unscaled card should use). `build` then materializes the inputs (captured or
seeded synthetic) on a device, in a dtype and layout, names which of them are activations (they vary from
call to call; the rest are constants such as weights), and gives `bind`: the op and its reference on any
draw of the activations, over the same constants.

Other draws and k calls, made by the harness. A variant is prepared on `w.inputs`, so a check of its output
on those values alone can pass for a variant that is right only there (a result cached from the first call,
a constant that happens to fit), and a variant that batches k calls must not supply the other calls, nor
their expected output, itself: whatever it supplies it can get wrong the same way twice. So:

- `Workload.activations` name the inputs that vary from call to call (linear x; conv3d input;
  attention q, and in self-attention the chunk's own keys and values, the last `queries` of the valid
  prefix; cast frames; vae_decode latent; dit_block hidden_states and the timestep projection). The
  rest are constants: weights, biases, a KV cache's fixed part, a chunk's modules with their state.
- `w.redraw(d)`: the workload on draw d of its activations: each a seeded tensor of the same shape,
  dtype, device and memory format (strides), drawn from the activation's spread (the distribution
  the builder drew it from; for a captured tensor its own mean and standard deviation, or its range),
  with its own float64 reference (the op's `bind`). The constants are the same tensor objects. Draw 0
  is the workload itself. Draw 1 of a captured activation whose file also holds the op's second call
  (harness.capture) is that call; its other draws are seeded (the workload's notes say so).
- `w.calls(k)`: k calls of the op, call 0 being exactly the workload's inputs, with each call's
  reference and the stacked form a batched op takes: a linear's k calls are the draws 0..k-1 of its rows
  (harness.workloads.draws.independent_calls), a conv3d's k consecutive streaming windows of one frame
  sequence (harness.workloads.frames). On a redrawn workload they are that draw's: call 0 is its inputs,
  the others seeded apart from every other draw's. Other op kinds do not batch (WorkloadError).

The drawing is here, with the Workload whose methods make it; harness.workloads.draws has what else the
harness does with draws (a variant's batch, a replaced op's bind).

Every failure to build a card is a `WorkloadError` with a one-line message.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

# Re-exported for the workloads: their one place is harness.cards.ids (torch-free, the run's side reads them).
from harness.cards.applied import AppliedVariant
from harness.cards.ids import CHUNK_OP_KINDS, parse_resolution  # noqa: F401
from harness.workloads.params import WorkloadError, dtype_name
from harness.workloads.seeded import Spread


@dataclass(frozen=True)
class Plan:
    """A workload's arithmetic without tensors: what was asked, what will run, what it costs."""

    op_kind: str
    shape: dict[str, Any]  # the scaled shape actually used (JSON-able)
    original_shape: dict[str, Any]  # the card's shape, normalized (JSON-able)
    scale: float
    dtype: torch.dtype  # the dtype of the op's inputs (a cast's source dtype)
    output_shape: tuple[int, ...]
    flops: float
    min_bytes: float
    # Terms summed into one output element (linear K, conv3d Cin/groups*kT*kH*kW, attention the valid
    # keys, cast 1): how far rounding errors can accumulate (harness.trial.correctness).
    reduction_length: int
    notes: tuple[str, ...] = ()


def check_reference_dtype(dtype: torch.dtype) -> None:
    if dtype not in (torch.float64, torch.float32):
        raise WorkloadError(f"reference dtype must be float64 or float32, got {dtype}")


@dataclass(frozen=True)
class Bound:
    """The op bound to one call's activations (and the workload's constants): its run and its reference."""

    run: Callable[[], torch.Tensor]
    reference: Callable[[torch.dtype], torch.Tensor]
    # Inputs computed from the activations, as the model computes them (dit_block's per-token temb from the
    # per-frame timestep projection): a draw replaces them along with the activations.
    derived: dict[str, torch.Tensor] = field(default_factory=dict)
    # What must run before each call of `run`, outside every clock and profiled range (an in-place replay's
    # target restored from its input: harness.workloads.replay); None: nothing.
    before_call: Callable[[], None] | None = None


BindFn = Callable[[dict[str, torch.Tensor]], Bound]  # the activations of one call -> that call's op


@dataclass(frozen=True)
class Draws:
    """What another draw of a workload's activations needs (`Workload.redraw`, `Workload.calls`); set by every
    build."""

    bind: BindFn
    spreads: dict[str, Spread]  # each activation's spread (harness.workloads.seeded.Spread): a draw's scale
    seed: int
    # An activation of which only one block varies per call, as (dim, start, stop): the chunk's own keys in
    # a KV cache; the rest is the cache's fixed part, kept in every draw.
    varying: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    # The op's k calls (w, k) -> CallBatch; None: batching calls does not apply to this op kind.
    calls: Callable[[Workload, int], CallBatch] | None = None
    # Activations of a captured second call of the op (harness.workloads.inputs.SECOND_CALL): their draw 1.
    second_call: dict[str, torch.Tensor] = field(default_factory=dict)


@dataclass(frozen=True)
class FrameWindows:
    """Where each of `calls` consecutive calls of a streaming conv3d reads in the frame sequence they share
    (harness.workloads.frames makes them)."""

    calls: int
    t_in: int  # frames one call reads (its new frames after the cached ones)
    overlap: int  # frames shared with the call before: the causal cache, d_t x (kT - 1)

    @property
    def t_new(self) -> int:
        """Frames each call adds, and the frames of its output."""
        return self.t_in - self.overlap

    @property
    def total(self) -> int:
        """Frames the sequence holds: calls x T_new + overlap."""
        return self.calls * self.t_new + self.overlap

    def window(self, call: int) -> slice:
        start = call * self.t_new
        return slice(start, start + self.t_in)


@dataclass
class CallBatch:
    """k calls of a workload's op, built by the harness (`Workload.calls`): call 0 is the workload's own
    inputs, the others seeded draws of its activations over the same constants."""

    k: int
    inputs: list[dict[str, torch.Tensor]]  # each call's inputs; inputs[0] is the workload's own dict
    # The calls' activations in the form the batched op takes (linear: "x", the calls' rows stacked on dim
    # 0; conv3d: "input", one frame sequence all k windows lie in)
    stacked: dict[str, torch.Tensor]
    references: list[Callable[[torch.dtype], torch.Tensor]] = field(repr=False)  # each call's reference
    windows: FrameWindows | None = None  # conv3d: where each call reads in stacked["input"]
    # The op's reference on the stacked activations, where the op is independent per row (a linear): the
    # same numbers as the calls' references stacked, in one wide op instead of k (each widening the weight).
    whole: Callable[[torch.dtype], torch.Tensor] | None = field(default=None, repr=False)

    def reference(self, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        """Each call's reference stacked on dim 0, call-major: what a variant batching the k calls returns."""
        check_reference_dtype(dtype)
        if self.whole is not None:
            return self.whole(dtype)
        return torch.cat([reference(dtype) for reference in self.references])


@dataclass
class Workload:
    """One card's op, built and ready to time.

    `run()` is the baseline op on `inputs`; experiments build variants from the same `inputs`.
    `flops` and `min_bytes` are for the shape actually built (`shape`); `plan` of the same card at
    scale 1 gives them for the card as profiled. `activations` name the inputs that vary from call to
    call; `redraw(d)` is the workload on another draw of them, `calls(k)` k calls of the op.
    """

    op_kind: str
    shape: dict[str, Any]
    original_shape: dict[str, Any]
    scale: float
    device: str
    dtype: torch.dtype
    layout: str | None
    inputs: dict[str, torch.Tensor]
    run: Callable[[], torch.Tensor]
    flops: float
    min_bytes: float
    reduction_length: int  # as Plan.reduction_length
    input_source: str
    output_shape: tuple[int, ...] = ()
    notes: list[str] = field(default_factory=list)
    seed: int | None = None
    input_hash: dict[str, Any] | None = None  # sha256, path, over ("file" | "tensor:<name>"), tensors, sliced
    built_as: Any = None  # harness.cards.dtype.CardDtype: why this dtype and math mode (None: not decided)
    _reference: Callable[[torch.dtype], torch.Tensor] | None = field(default=None, repr=False)
    # The model a chunk workload runs (CHUNK_OP_KINDS; None for one op): variants derive theirs from it.
    module: torch.nn.Module | None = field(default=None, repr=False)
    # For a chunk workload: what earlier op-card runs adopted on the cards it contains, by card id
    # (harness.trial.rounds entries, `experiment.compose_from`), for a variant to compose them on the whole module.
    adopted: dict[str, list[AppliedVariant]] = field(default_factory=dict)
    activations: tuple[str, ...] = ()  # the inputs that vary per call; every other input is a constant
    # Run before each call of `run`, outside any clock or profiled range (Bound.before_call); None: nothing.
    before_call: Callable[[], None] | None = field(default=None, repr=False)
    draw: int = 0  # which draw of the activations `inputs` holds (0: the card's own)
    _draws: Draws | None = field(default=None, repr=False)
    # The reference `_draws.bind` made for these inputs: a workload whose `_reference` is another (an
    # experiment's workload hook that replaced the op) cannot be redrawn by the bind of the op it replaced.
    _bound: Callable[[torch.dtype], torch.Tensor] | None = field(default=None, repr=False)
    # Made on demand and kept, so that asking twice gives the same tensors, and so that the harness finds the
    # batch a variant built (harness.workloads.draws.batch_for). Not copied by dataclasses.replace: a replaced
    # workload (carried inputs) builds its own.
    batches: dict[int, CallBatch] = field(default_factory=dict, init=False, repr=False)
    _redraws: dict[int, Workload] = field(default_factory=dict, init=False, repr=False)

    def reference(self, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        """The baseline output recomputed in a wide dtype (on the inputs' device) from the same inputs.

        float64 (the default) is exact enough for any variant and keeps CUDA from using TF32, so a GPU
        reference is as good as a CPU one. float32 is much faster for conv3d on a CPU, where it is
        plain IEEE float32; on CUDA a float32 reference follows the process's TF32 settings, so use
        float64 there. harness.trial.correctness holds every output to the float64 one.
        """
        if self._reference is None:
            raise WorkloadError(f"{self.op_kind}: this workload has no reference")
        check_reference_dtype(dtype)
        return self._reference(dtype)

    def redraw(self, draw: int) -> Workload:
        """The same workload on draw `draw` of its activations (0: itself), with its own reference. A draw is
        made once: asking again gives the same workload (its tensors and its batches)."""
        draw = _non_negative(draw, "draw")
        if draw == self.draw:
            return self
        if self.draw != 0:
            raise WorkloadError(f"this workload is draw {self.draw}: take draw {draw} from the workload it was "
                                "drawn from")
        if draw in self._redraws:
            return self._redraws[draw]
        inputs, bound = bind_call(self, activations_of(self, draw_key(draw)))
        names = ", ".join(self.activations)
        made = dataclasses.replace(
            self, inputs=inputs, run=bound.run, _reference=bound.reference, _bound=bound.reference, draw=draw,
            before_call=bound.before_call,
            input_source=f"{self.input_source}; draw {draw}: {names} seeded", input_hash=None,
            notes=[*self.notes, f"draw {draw}: {names} drawn anew at the spread of draw 0's; every other input is "
                                "draw 0's tensor"],
        )
        self._redraws[draw] = made
        return made

    def calls(self, k: int) -> CallBatch:
        """k calls of the op, call 0 this workload's own, built once and kept in `batches`."""
        if _non_negative(k, "calls") < 1:
            raise WorkloadError("calls must be at least 1")
        make = draws_of(self).calls
        if make is None:
            raise WorkloadError(f"{self.op_kind}: batching calls does not apply: w.calls(k) builds the calls of a "
                                "linear (rows sharing its weight) or of a conv3d (streaming frame windows)")
        if k not in self.batches:
            self.batches[k] = make(self, k)
        return self.batches[k]

    def describe(self) -> dict[str, Any]:
        """A JSON-able summary for the card: shape, scale, dtype, layout, input source, FLOPs, bytes, K,
        the activations (and the draw, when not the card's own)."""
        out: dict[str, Any] = {
            "op_kind": self.op_kind,
            "shape": self.shape,
            "original_shape": self.original_shape,
            "scale": self.scale,
            "output_shape": list(self.output_shape),
            "device": self.device,
            "dtype": dtype_name(self.dtype),
            "layout": self.layout,
            "input_source": self.input_source,
            "flops": self.flops,
            "min_bytes": self.min_bytes,
            "reduction_length": self.reduction_length,
            "activations": list(self.activations),
            "notes": list(self.notes),
        }
        if self.draw:
            out["draw"] = self.draw
        if self.seed is not None:
            out["seed"] = self.seed
        if self.input_hash is not None:
            out["input_hash"] = dict(self.input_hash)
        if self.built_as is not None:
            out.update(dtype_source=self.built_as.source, math=self.built_as.math,
                       dtype_evidence=self.built_as.evidence)
        return out

    def facts(self) -> Any:
        """The roofline facts the profiler interface takes (harness.profile.base.WorkloadFacts)."""
        from harness.profile.base import WorkloadFacts

        return WorkloadFacts(
            flops=self.flops, min_bytes=self.min_bytes, dtype=dtype_name(self.dtype), op_kind=self.op_kind,
            per_shape=self.op_kind in CHUNK_OP_KINDS, before_call=self.before_call,
        )


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


def _drawn_like(w: Workload, name: str, key: str) -> torch.Tensor:
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
    return {name: _drawn_like(w, name, key) for name in w.activations}


def bind_call(w: Workload, activations: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], Bound]:
    """One call's inputs (w's constants, these activations, what the op derives from them) and its op."""
    bound = draws_of(w).bind(activations)
    return {**w.inputs, **activations, **bound.derived}, bound
