"""Variants that make the mistakes a tuning harness must not adopt, each built to be faster than the
baseline so that only the harness's checks can refuse it, beside honest twins that must stay.

The baseline does the card's linear twice (the second call's output returned), so one honest linear is
a 2x win; every plant does at most one linear's work.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from harness.api.experiment import Experiment, Prepared
from harness.workloads.base import Workload

EXPERIMENT = Experiment(name="plants", op_kinds=("linear",), check="effective_flops",
                        hypothesis="planted mistakes are refused, honest twins adopted")

_CACHE: dict[tuple[int, ...], torch.Tensor] = {}
_BUILDS = {"flaky_build": 0}


def _inputs(w: Workload) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    return w.inputs["x"], w.inputs["weight"], w.inputs.get("bias")


@EXPERIMENT.baseline
def twice(w: Workload):
    x, weight, bias = _inputs(w)

    def run() -> torch.Tensor:
        F.linear(x, weight, bias)
        return F.linear(x, weight, bias)

    return run


@EXPERIMENT.variant
def once(w: Workload):
    """Honest: half the baseline's work."""
    x, weight, bias = _inputs(w)
    return lambda: F.linear(x, weight, bias)


@EXPERIMENT.variant
def stale(w: Workload):
    """Computes the output once, when prepared, and returns it on every call (a replayed buffer)."""
    x, weight, bias = _inputs(w)
    out = F.linear(x, weight, bias)
    return lambda: out


@EXPERIMENT.variant
def cached_input(w: Workload):
    """Reads a copy of the first input it ever saw for this shape: right on that draw only."""
    x, weight, bias = _inputs(w)
    seen = _CACHE.setdefault(tuple(x.shape), x.clone())
    return lambda: F.linear(seen, weight, bias)


@EXPERIMENT.variant
def accumulate(w: Workload):
    """Adds into a buffer it never zeroes: right on the first call, twice the answer on the second."""
    x, weight, bias = _inputs(w)
    buffer = torch.zeros(x.shape[0], weight.shape[0], dtype=x.dtype, device=x.device)

    def run() -> torch.Tensor:
        buffer.add_(F.linear(x, weight, bias))
        return buffer

    return run


@EXPERIMENT.variant
def mutate_input(w: Workload):
    """Halves its input in place after computing its output."""
    x, weight, bias = _inputs(w)

    def run() -> torch.Tensor:
        out = F.linear(x, weight, bias)
        x.mul_(0.5)
        return out

    return run


@EXPERIMENT.variant
def claimed_batch(w: Workload):
    """The one linear, claiming it did 4 calls (no harness-built calls behind the claim)."""
    x, weight, bias = _inputs(w)
    return Prepared(lambda: F.linear(x, weight, bias), calls=4)


@EXPERIMENT.variant
def repeated_batch(w: Workload):
    """Takes the harness's 4 calls, computes the first and repeats it for the other three."""
    batch = w.calls(4)
    x, weight, bias = batch.inputs[0]["x"], batch.inputs[0]["weight"], batch.inputs[0].get("bias")
    return Prepared(lambda: F.linear(x, weight, bias).repeat(4, 1), calls=4)


@EXPERIMENT.variant
def honest_batch(w: Workload):
    """Honest: the harness's 4 calls' rows in one GEMM (the weight read once per 4 calls)."""
    batch = w.calls(4)
    rows = torch.cat([call["x"] for call in batch.inputs])
    weight, bias = batch.inputs[0]["weight"], batch.inputs[0].get("bias")
    return Prepared(lambda: F.linear(rows, weight, bias), calls=4)


def _drop_last_two(w: Workload, dtype: torch.dtype):
    x, weight, bias = _inputs(w)
    xs, ws = x[:, :-2].to(dtype).contiguous(), weight[:, :-2].to(dtype).contiguous()
    b = None if bias is None else bias.to(dtype)
    return lambda: F.linear(xs, ws, b)


@EXPERIMENT.variant
def declared_bf16(w: Workload):
    """Drops the last 2 of K reduction terms in float32, declaring bfloat16 to widen its bound."""
    return Prepared(_drop_last_two(w, torch.float32), precision="bfloat16")


@EXPERIMENT.variant
def bf16_drops_terms(w: Workload):
    """Really computes in bfloat16, and drops the last 2 of K reduction terms."""
    return Prepared(_drop_last_two(w, torch.bfloat16), precision="bfloat16")


@EXPERIMENT.variant
def honest_bf16(w: Workload):
    """Honest: the linear in bfloat16 (inputs cast once, when prepared), declared."""
    x, weight, bias = _inputs(w)
    xb, wb, bb = x.bfloat16(), weight.bfloat16(), None if bias is None else bias.bfloat16()
    return Prepared(lambda: F.linear(xb, wb, bb), precision="bfloat16")


@EXPERIMENT.variant
def leaks_threads(w: Workload):
    """Sets the process's torch threads to 1 when prepared and never restores them."""
    torch.set_num_threads(1)
    x, weight, bias = _inputs(w)
    return lambda: F.linear(x, weight, bias)


@EXPERIMENT.variant
def leaks_autocast(w: Workload):
    """Turns on CPU autocast in bfloat16 when prepared and never turns it off."""
    torch.set_autocast_enabled("cpu", True)
    torch.set_autocast_dtype("cpu", torch.bfloat16)
    x, weight, bias = _inputs(w)
    return lambda: F.linear(x, weight, bias)


@EXPERIMENT.variant
def flaky_build(w: Workload):
    """Right the first two times it is prepared (the search's draws), then drops its bias: a build that
    differs from the one checked, as a nondeterministic autotuner's can."""
    _BUILDS["flaky_build"] += 1
    x, weight, bias = _inputs(w)
    kept = bias if _BUILDS["flaky_build"] <= 2 else None
    return lambda: F.linear(x, weight, kept)
