"""Attention of a DiT chunk (FlashAttention 2/3 in the report), as torch SDPA on [B, heads, L, head_dim].

Card shape parameters: `role` ("self" or "cross"), `valid_keys`, `allocated_keys`. The report stores them
as a JSON string; the card model decodes it and `decode_parameters` accepts either form.

Queries: the chunk's tokens, all of them on every rank (Ulysses splits heads, not queries, for
attention): 3 latent frames x (H/16) x (W/16), i.e. 4680 at 480x832 and 10560 at 704x1280, for both
self- and cross-attention. The report's FA3 DRAM bytes agree (output writes of 12 MB at 480x832 and
27 MB at 704x1280 = queries x 10 heads x 128 x 2 bytes). Taken from, first found: shape parameter
`queries`, `AttentionConfig.queries`, the resolution (shape parameter `resolution` or the card's).

Keys: a KV cache of `allocated_keys` slots of which the first `valid_keys` are filled (cross-attention:
512 text tokens, all valid). `inputs` holds q [B, H, Lq, D] and the whole cache k, v [B, H, allocated, D];
the baseline attends to the valid prefix (`valid_prefix_attention`, a view, no copy), no causal mask
inside the chunk. `masked_allocation_attention` is the other form: all allocated keys with a boolean
mask that hides the unfilled slots. heads and head_dim come from `AttentionConfig` (10 x 128: 40 heads
over 4 Ulysses ranks).

FLOPs: 4 * B * heads * Lq * valid_keys * head_dim (QK^T and PV). Minimum bytes: q, the valid k and v,
and the output, once each. Reduction length: the valid keys, the longest sum of the op (the softmax
denominator and P.V run over them; QK^T sums only head_dim terms), so what bounds accumulated rounding.

Synthetic q, k, v have std 1: scores q.k/sqrt(head_dim) have std 1, so the softmax is neither uniform
nor one-hot and every valid key carries weight, and the slots past the valid prefix hold values of the
same scale (as a reused cache would), so a variant that scores them or drops a block of valid keys
errs by a sizeable share of the output (no term is small by construction, unlike a 1/sqrt(K) bias).

Scaling shrinks Lq and the allocation (never below 16), and keeps valid/allocated as the card has it.

Activations (what varies from call to call): q; in self-attention also the chunk's own keys and values,
which the block writes into the cache behind the cached ones (harness.workloads.dit_block), i.e. the last
`queries` slots of the valid prefix. The cache before them and the unfilled slots after are the cache's
fixed part, the same in every draw (`Draws.varying`). Cross-attention's keys and values are the text
context's, the same for every call of a video: constants. Attention does not batch calls.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from harness.boundary.spec import AttentionSettings
from harness.workloads.base import Bound, Plan, parse_resolution
from harness.workloads.inputs import Source
from harness.workloads.params import WorkloadError, element_size, positive_int, require, scale_dim

KIND = "attention"
FLOOR = 16
ROLES = ("self", "cross")


# The workload's settings travel in a CardSpec (`workload.attention`): one dataclass, torch-free, in
# harness.boundary.spec.
AttentionConfig = AttentionSettings


def queries_for_resolution(resolution: Any, config: AttentionConfig | None = None) -> int | None:
    """Tokens of one chunk at a pixel resolution: 480x832 -> 4680, 704x1280 -> 10560."""
    config = config or AttentionConfig()
    parsed = parse_resolution(resolution)
    if parsed is None:
        return None
    height, width = parsed
    step = config.pixels_per_token
    if height % step or width % step:
        raise WorkloadError(f"{KIND}: resolution {height}x{width} is not a multiple of {step} pixels per token")
    return config.frames_per_chunk * (height // step) * (width // step)


def allocation_mask(allocated_keys: int, valid_keys: int, device: Any = "cpu") -> torch.Tensor:
    """Boolean key mask [1, 1, 1, allocated]: True for the filled prefix (True = takes part, as SDPA reads it)."""
    mask = torch.zeros(allocated_keys, dtype=torch.bool, device=device)
    mask[:valid_keys] = True
    return mask.view(1, 1, 1, allocated_keys)


def valid_prefix_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, valid_keys: int) -> torch.Tensor:
    """SDPA over the first `valid_keys` slots of the cache (the slice is a view)."""
    return F.scaled_dot_product_attention(q, k[:, :, :valid_keys], v[:, :, :valid_keys])


def masked_allocation_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, valid_keys: int, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """SDPA over every allocated slot, with the unfilled ones masked out (pass `mask` to reuse one)."""
    if mask is None:
        mask = allocation_mask(k.shape[2], valid_keys, q.device)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def reference_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    valid_keys: int,
    dtype: torch.dtype = torch.float64,
    block_bytes: int = 1 << 28,
) -> torch.Tensor:
    """softmax(q k^T / sqrt(D)) v over the valid prefix in `dtype`, a block of queries at a time."""
    kd = k[:, :, :valid_keys].to(dtype)
    vd = v[:, :, :valid_keys].to(dtype)
    batch, heads, lq, dim = q.shape
    itemsize = torch.empty((), dtype=dtype).element_size()
    rows = max(1, block_bytes // max(1, batch * heads * valid_keys * itemsize))
    scale = 1.0 / math.sqrt(dim)
    out = torch.empty((batch, heads, lq, dim), dtype=dtype, device=q.device)
    for start in range(0, lq, rows):
        qd = q[:, :, start : start + rows].to(dtype)
        scores = torch.matmul(qd, kd.transpose(-1, -2)).mul_(scale)
        out[:, :, start : start + rows] = torch.matmul(torch.softmax(scores, dim=-1), vd)
    return out


def plan(
    params: dict[str, Any],
    *,
    dtype: torch.dtype,
    scale: float,
    config: AttentionConfig,
    resolution: Any = None,
) -> Plan:
    role = require(KIND, params, "role")
    if role not in ROLES:
        raise WorkloadError(f"{KIND}: role must be one of {', '.join(ROLES)}, got {role!r}")
    valid = positive_int(KIND, "valid_keys", require(KIND, params, "valid_keys"))
    allocated = positive_int(KIND, "allocated_keys", params.get("allocated_keys", valid))
    if valid > allocated:
        raise WorkloadError(f"{KIND}: valid_keys {valid} exceeds allocated_keys {allocated}")
    heads = positive_int(KIND, "heads", params.get("heads", config.heads))
    head_dim = positive_int(KIND, "head_dim", params.get("head_dim", config.head_dim))
    batch = positive_int(KIND, "batch", params.get("batch", config.batch))

    notes: list[str] = []
    if params.get("queries") is not None:
        queries = positive_int(KIND, "queries", params["queries"])
        origin = "shape_parameters"
    elif config.queries is not None:
        queries = positive_int(KIND, "queries", config.queries)
        origin = "AttentionConfig.queries"
    else:
        res = params.get("resolution", resolution)
        derived = queries_for_resolution(res, config) if res is not None else None
        if derived is None:
            raise WorkloadError(
                f"{KIND}: cannot tell the number of queries: give shape_parameters 'queries', a resolution "
                "(e.g. '480x832'), or AttentionConfig(queries=...)"
            )
        queries = derived
        origin = f"resolution {res}"
    notes.append(f"queries={queries} from {origin}; heads={heads}, head_dim={head_dim}")

    queries_s = scale_dim(queries, scale, FLOOR)
    allocated_s = scale_dim(allocated, scale, FLOOR)
    if allocated_s == allocated:
        valid_s = valid
    else:
        valid_s = max(1, min(allocated_s, int(round(valid * allocated_s / allocated))))

    def shape(lq: int, lv: int, la: int) -> dict[str, Any]:
        return {
            "role": role,
            "batch": batch,
            "heads": heads,
            "head_dim": head_dim,
            "queries": lq,
            "valid_keys": lv,
            "allocated_keys": la,
        }

    per_token = batch * heads * head_dim
    return Plan(
        op_kind=KIND,
        shape=shape(queries_s, valid_s, allocated_s),
        original_shape=shape(queries, valid, allocated),
        scale=scale,
        dtype=dtype,
        output_shape=(batch, heads, queries_s, head_dim),
        flops=4.0 * per_token * queries_s * valid_s,
        reduction_length=valid_s,
        min_bytes=float((2 * queries_s + 2 * valid_s) * per_token * element_size(dtype)),
        notes=tuple(notes),
    )


def _bhld(batch: int, heads: int, length: int, dim: int):
    def adapt(tensor: torch.Tensor) -> torch.Tensor:
        # flash-attn keeps [B, L, H, D]; SDPA wants [B, H, L, D].
        if tuple(tensor.shape) == (batch, length, heads, dim) and length != heads:
            return tensor.transpose(1, 2)
        return tensor

    return adapt


def build(plan_: Plan, source: Source, layout: str | None) -> dict[str, Any]:
    if layout not in (None, "contiguous"):
        raise WorkloadError(f"{KIND}: layout {layout!r} does not apply (only contiguous)")
    o, s, dtype = plan_.original_shape, plan_.shape, plan_.dtype
    b, h, d = s["batch"], s["heads"], s["head_dim"]
    q = source.take(
        "q",
        (b, h, o["queries"], d),
        (b, h, s["queries"], d),
        dtype,
        aliases=("query",),
        primary=True,
        adapt=_bhld(b, h, o["queries"], d),
    )
    cache = {}
    for name, alias in (("k", "key"), ("v", "value")):
        cache[name] = source.take(
            name,
            (b, h, o["allocated_keys"], d),
            (b, h, s["allocated_keys"], d),
            dtype,
            aliases=(alias, f"{name}_cache"),
            adapt=_bhld(b, h, o["allocated_keys"], d),
        ).contiguous()
    q = q.contiguous()
    valid = s["valid_keys"]
    fixed = {name: cache[name] for name in ("k", "v")}

    def bind(activations: dict[str, torch.Tensor]) -> Bound:
        keys = {**fixed, **activations}
        queries, k, v = keys["q"], keys["k"], keys["v"]

        def reference(wide: torch.dtype) -> torch.Tensor:
            return reference_attention(queries, k, v, valid, dtype=wide)

        return Bound(lambda: valid_prefix_attention(queries, k, v, valid), reference)

    activations: tuple[str, ...]
    if s["role"] == "self":  # the chunk's own keys and values: the last `queries` of the valid prefix
        activations, varying = ("q", "k", "v"), {name: (2, max(0, valid - s["queries"]), valid) for name in "kv"}
    else:
        activations, varying = ("q",), {}
    return {"inputs": {"q": q, **cache}, "activations": activations, "varying": varying, "bind": bind}
