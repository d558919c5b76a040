"""What a variant's declared precision is checked with: evidence it cannot write itself, and the emulated
reference an honest kernel of that precision computes up to (harness.trial.correctness uses both).

Evidence (`observed_precisions`): the variant's call runs once under a TorchDispatchMode, which sees
every aten op the call dispatches, those inside F.linear (aten.addmm), F.conv3d (aten.convolution) and
scaled_dot_product_attention (the backend's own aten op) included. It records the floating dtypes the
ops compute on (of their tensor inputs and outputs; a factory op such as torch.zeros, with no tensor
input, computes on nothing and does not count), and TF32: an op that ran on CUDA on float32 tensors
while torch allowed TF32 for matmuls or cuDNN convolutions (read at each op, so a switch set inside the
call counts). A Triton or CuPy kernel is invisible to the mode, but the casts that feed it (aten._to_copy
into bf16) are seen, and so are a float32 call's ops on CUDA for the TF32 switches the project's Triton
kernels follow (harness.api.triton_support.input_precision). A cast that is computed and thrown away is
evidence too: evidence only decides which check applies; the emulated reference is what a variant
cannot pass by declaring.

The emulated reference (`emulated_reference`): the op's float64 reference computed on the workload's
inputs rounded to the declared precision (bf16 and fp16 by torch's cast, round to nearest even; TF32 by
rounding a float32 to 10 fraction bits, to nearest even, on its bits), summed exactly, and rounded as
the variant's output is. It does not touch the op modules: a workload's reference reads the workload's
own input tensors (its closure), so each input finer than the precision is overwritten in place with
its rounded value, the reference computed, and every input restored bit for bit from a copy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from harness.api.numerics import TF32, CorrectnessError, precision_name, storage_dtype, unit_roundoff
from harness.cards.ids import CHUNK_OP_KINDS
from harness.workloads.base import CallBatch, Workload
from harness.workloads.params import dtype_name

_TF32_DROPPED_BITS = 13  # float32 keeps 23 fraction bits, TF32 10


def round_to_tf32(values: torch.Tensor) -> torch.Tensor:
    """float32 values rounded to TF32 (10 fraction bits), to nearest, ties to even; Inf and NaN kept.

    On the bits: adding 2^12 - 1 plus the lowest kept bit and clearing the 13 dropped bits rounds the
    magnitude to nearest even (a carry into the exponent is the correct next binade, or Inf past the
    largest TF32 value); the sign bit is untouched, so negative values round symmetrically.
    """
    if values.dtype != torch.float32:
        raise CorrectnessError(f"TF32 rounding takes float32 values, got {dtype_name(values.dtype)}")
    bits = values.view(torch.int32)
    lowest_kept = (bits >> _TF32_DROPPED_BITS) & 1
    half_minus_one = (1 << (_TF32_DROPPED_BITS - 1)) - 1
    rounded = ((bits + half_minus_one + lowest_kept) & ~((1 << _TF32_DROPPED_BITS) - 1)).view(torch.float32)
    return torch.where(torch.isfinite(values), rounded, values)  # a NaN's payload could round into Inf


def _rounded(values: torch.Tensor, precision: str) -> torch.Tensor:
    """`values` rounded to `precision`, in their own dtype."""
    if precision == TF32:
        return round_to_tf32(values.float()).to(values.dtype)  # a float64 input: to float32 first
    return values.to(storage_dtype(precision)).to(values.dtype)


class _Recorder(TorchDispatchMode):
    """Every aten op of a call: the floating dtypes it computes on, TF32 use, and (asked for) the storages
    it reads."""

    def __init__(self, track_reads: bool = False) -> None:
        super().__init__()
        self.dtypes: set[torch.dtype] = set()
        self.tf32 = False
        self.track_reads = track_reads  # only a reference's: a variant's tensors may have no plain storage
        self.read: set[int] = set()  # data pointers of the storages the ops' tensor inputs view

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        out = func(*args, **(kwargs or {}))
        inputs = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        outputs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        if self.track_reads:
            self.read.update(t.untyped_storage().data_ptr() for t in inputs)
        if inputs:
            self.dtypes.update(t.dtype for t in (*inputs, *outputs) if t.is_floating_point())
        if not self.tf32 and any(t.is_cuda and t.dtype == torch.float32 for t in (*inputs, *outputs)):
            self.tf32 = _tf32_allowed()
        return out


def _tf32_allowed() -> bool:
    """Whether torch lets float32 matmuls or cuDNN convolutions use TF32 now."""
    matmul = torch.backends.cuda.matmul.allow_tf32 or torch.get_float32_matmul_precision() != "highest"
    return bool(matmul or torch.backends.cudnn.allow_tf32)


@dataclass(frozen=True)
class Observed:
    """What one call of a variant was seen to compute in (observed_precisions)."""

    # Floating dtypes its aten ops computed on ("bfloat16", "float32", ...), and "tf32" where TF32 was used.
    precisions: frozenset[str]
    error: str = ""  # the observed call raised: nothing was seen

    def shows(self, precision: str) -> bool:
        """Whether the call computed in `precision` (any spelling: "bf16", "bfloat16")."""
        return precision_name(precision) in self.precisions

    def describe(self) -> str:
        if self.error:
            return f"its call failed when observed ({self.error})"
        return f"its call computes in {', '.join(sorted(self.precisions)) or 'no floating dtype'}"


def observed_precisions(fn: Callable[[], Any]) -> Observed:
    """Run `fn` once under a dispatch mode and say which precisions its ops computed in.

    A call that raises under the mode is recorded as such (`Observed.error`) with nothing seen, so its
    declaration is then evidenced by its output dtype alone.
    """
    recorder = _Recorder()
    try:
        with recorder:
            fn()
    except Exception as exc:  # whatever the variant raises: the judgement notes it, the trial goes on
        first_line = (str(exc).splitlines() or [""])[0]
        return Observed(frozenset(), f"{type(exc).__name__}: {first_line}".rstrip(": "))
    seen = {dtype_name(d) for d in recorder.dtypes} | ({TF32} if recorder.tf32 else set())
    return Observed(frozenset(seen))


def emulated_reference(source: Workload | CallBatch, precision: str,
                       output_dtype: torch.dtype) -> torch.Tensor | None:
    """The float64 reference of `source`'s op on its inputs rounded to `precision`, summed exactly, and
    rounded to `output_dtype` when that is bf16 or fp16 (a float32 output is left unrounded here; the
    judge rounds the reference when such an output's values lie on the lowered grid). float64, on the
    reference's device. None for a chunk workload (harness.cards.ids.CHUNK_OP_KINDS): its module's
    weights and every op in between round too, which rounding its inputs does not model.

    `source` is a workload whose reference reads its own `inputs` (the workload as built, e.g. the first
    of harness.trial.build.build_trial_workload, not the one with carried inputs, whose inputs are copies
    the reference does not read), or a CallBatch (each call's inputs and references). Inputs finer than
    `precision` (of a smaller unit roundoff: float32 and float16 for bf16, float32 for fp16 and tf32) are
    rounded; inputs as coarse stay. Every input is restored bit for bit, also when the reference raises.
    """
    if isinstance(source, Workload) and source.op_kind in CHUNK_OP_KINDS:
        return None
    name = precision_name(precision)
    calls = source.inputs if isinstance(source, CallBatch) else [source.inputs]
    inputs = {f"call {i} {key}" if len(calls) > 1 else key: tensor
              for i, call in enumerate(calls) for key, tensor in call.items()}
    finer: list[torch.Tensor] = []
    for tensor in inputs.values():
        shared = any(tensor is t for t in finer)  # a constant of every call (a weight) is one tensor: once
        if tensor.is_floating_point() and unit_roundoff(tensor.dtype) < unit_roundoff(name) and not shared:
            finer.append(tensor)
    recorder = _Recorder(track_reads=True)
    with torch.no_grad():
        saved = [(tensor, tensor.clone(memory_format=torch.preserve_format)) for tensor in finer]
        try:
            for tensor in finer:
                tensor.copy_(_rounded(tensor, name))
            with recorder:
                exact = source.reference(torch.float64)
        finally:
            # Newest first: an input that views another's storage was saved after the other was rounded.
            for tensor, copy in reversed(saved):
                tensor.copy_(copy)
    unread = [key for key, t in inputs.items() if t.untyped_storage().data_ptr() not in recorder.read]
    if unread:
        raise CorrectnessError(f"the reference does not read the input(s) {', '.join(unread)} it was given: pass the "
                               "workload as built (not one with carried inputs), whose reference reads its inputs")
    grid = output_dtype if output_dtype in (torch.bfloat16, torch.float16) else None
    return exact if grid is None else exact.to(grid).to(torch.float64)
