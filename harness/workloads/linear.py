"""aten.linear: y = x @ W^T + b with x [M, K], W [N, K], b [N].

Card shape parameters: M, N, K, and optionally `bias` (bool). Bias defaults to True: every linear kernel
in the report is an nvjet GEMM with a bias epilogue (`..._bias_TNT` / `_bias_TNN`), and the Wan DiT
linears are nn.Linear with bias. FLOPs are 2*M*N*K (the bias add is not counted), which is what the
report's `nominal_mac_flops` holds for linear cards.

Scaling shrinks M and N (dimensions of 64 or less are kept: M=3 and N=64 are what those cards are
about); K, the reduction depth (`reduction_length`), is never scaled.

Synthetic inputs: x of std 1, W of std 1/sqrt(K) (so x @ W^T has std 1) and b of std 1, of the same
order as the product, so a variant that loses or misplaces any term errs by the order of the output.

x is the activation (each call has its own rows); W and b are constants. k calls are k draws of the rows
sharing W and b, stacked on dim 0 into one [k x M, K] GEMM (harness.workloads.draws.independent_calls).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from harness.workloads.base import Bound, Plan
from harness.workloads.draws import independent_calls
from harness.workloads.inputs import Source
from harness.workloads.params import WorkloadError, element_size, positive_int, require, scale_dim

KIND = "linear"
FLOOR = 64


def _bias_flag(params: dict[str, Any]) -> tuple[bool, str | None]:
    if "bias" not in params or params["bias"] is None:
        return True, "bias assumed (report kernels use a bias epilogue; Wan linears have bias)"
    value = params["bias"]
    if isinstance(value, bool):
        return value, None
    if isinstance(value, (list, tuple)):  # a bias shape, e.g. [N]
        return True, None
    raise WorkloadError(f"{KIND}: bias must be true/false or a shape, got {value!r}")


def plan(params: dict[str, Any], *, dtype: torch.dtype, scale: float) -> Plan:
    m = positive_int(KIND, "M", require(KIND, params, "M"))
    n = positive_int(KIND, "N", require(KIND, params, "N"))
    k = positive_int(KIND, "K", require(KIND, params, "K"))
    bias, note = _bias_flag(params)
    ms, ns = scale_dim(m, scale, FLOOR), scale_dim(n, scale, FLOOR)
    elements = ms * k + ns * k + (ns if bias else 0) + ms * ns
    return Plan(
        op_kind=KIND,
        shape={"M": ms, "N": ns, "K": k, "bias": bias},
        original_shape={"M": m, "N": n, "K": k, "bias": bias},
        scale=scale,
        dtype=dtype,
        output_shape=(ms, ns),
        flops=2.0 * ms * ns * k,
        min_bytes=float(elements * element_size(dtype)),
        reduction_length=k,
        notes=(note,) if note else (),
    )


def _as_matrix(m: int, k: int):
    def adapt(tensor: torch.Tensor) -> torch.Tensor:
        # A captured activation is often [B, L, K]; the GEMM sees it as [B*L, K].
        if tensor.dim() >= 2 and tensor.shape[-1] == k and math.prod(tensor.shape[:-1]) == m:
            return tensor.reshape(m, k)
        return tensor

    return adapt


def build(plan_: Plan, source: Source, layout: str | None) -> dict[str, Any]:
    if layout not in (None, "contiguous"):
        raise WorkloadError(f"{KIND}: layout {layout!r} does not apply (only contiguous)")
    o, s, dtype = plan_.original_shape, plan_.shape, plan_.dtype
    k = s["K"]
    x = source.take(
        "x",
        (o["M"], k),
        (s["M"], k),
        dtype,
        aliases=("input", "hidden_states", "a"),
        primary=True,
        adapt=_as_matrix(o["M"], k),
    )
    # x @ W^T has std 1 with W of std 1/sqrt(K); the bias gets std 1 too, so that every term of the
    # output matters: a bias of the weight's std (1/sqrt(K)) is lost in bf16 rounding, and a variant
    # that dropped it passed the correctness check.
    weight = source.take("weight", (o["N"], k), (s["N"], k), dtype, aliases=("w",), std=1.0 / math.sqrt(k))
    bias = source.take("bias", (o["N"],), (s["N"],), dtype, aliases=("b",)) if s["bias"] else None

    inputs = {"x": x, "weight": weight}
    if bias is not None:
        inputs["bias"] = bias

    def bind(activations: dict[str, torch.Tensor]) -> Bound:
        rows = activations["x"]

        def reference(wide: torch.dtype) -> torch.Tensor:
            return F.linear(rows.to(wide), weight.to(wide), None if bias is None else bias.to(wide))

        return Bound(lambda: F.linear(rows, weight, bias), reference)

    return {"inputs": inputs, "activations": ("x",), "bind": bind, "calls": independent_calls}
