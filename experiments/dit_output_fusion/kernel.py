"""A Triton kernel for the whole output head: layer norm + modulation fused into the N=64 projection.

Each program owns BLOCK_M rows and all N=64 outputs (the whole N is one tile, so no program re-reads
another's rows). Pass 1 walks K in BLOCK_K slabs and merges each slab's row mean and centred sum of
squares into the running ones (Chan et al.'s pairwise update: no E[x^2] - E[x]^2 cancellation). Pass 2
walks K again: normalizes each slab, modulates it with its rows' frame's shift and scale in fp32 (a block
of rows spans at most two frames, so two [BLOCK_K] rows of each are loaded per slab), rounds
it to the activation's dtype (diffusers' `.type_as(hidden)` before proj_out) and feeds tl.dot against the
[BLOCK_K, N] slab of W^T, accumulating in fp32; the bias is added before one rounding to the output.

DRAM: the activation is read by pass 1 and read again by pass 2. The second read is meant to come from
L2: between the two, the programs in flight hold BLOCK_M x K x 2 bytes each (160 KiB for BLOCK_M=16, K=5120),
a few tens of MB over 132 SMs against the H200's 50 MB L2; no [M, K] intermediate is ever written.
"""

from __future__ import annotations

from typing import Any

import torch

from harness.api.experiment import VariantSkipped
from harness.api.triton_support import TRITON_MISSING, input_precision, tl, triton

if triton is not None:

    @triton.jit
    def _norm_modulate_project_kernel(
        h_ptr, shift_ptr, scale_ptr, w_ptr, bias_ptr, y_ptr,
        M, K, rows_per_frame,
        stride_hm, stride_mod, stride_wn, stride_ym,
        eps,
        HAS_BIAS: tl.constexpr, N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr,
        INPUT_PRECISION: tl.constexpr,
    ):
        """y[BLOCK_M rows, N] = modulate(layer_norm(h rows)) @ W^T + b for one block of rows."""
        pid = tl.program_id(axis=0)
        offs_m = pid * BLOCK_M + tl.arange(0, BLOCK_M)
        mask_m = offs_m < M
        row_ptrs = h_ptr + offs_m[:, None].to(tl.int64) * stride_hm

        # Pass 1: row statistics, slab by slab.
        mean = tl.zeros((BLOCK_M,), dtype=tl.float32)
        m2 = tl.zeros((BLOCK_M,), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            offs_k = k0 + tl.arange(0, BLOCK_K)
            mask_k = offs_k[None, :] < K
            h = tl.load(row_ptrs + offs_k[None, :], mask=mask_m[:, None] & mask_k, other=0.0).to(tl.float32)
            seen = k0 * 1.0  # float32 (a Python float under the interpreter)
            in_slab = tl.minimum(K - k0, BLOCK_K) * 1.0
            total = seen + in_slab
            slab_mean = tl.sum(h, axis=1) / in_slab
            centred = tl.where(mask_k, h - slab_mean[:, None], 0.0)
            delta = slab_mean - mean
            mean = mean + delta * (in_slab / total)
            m2 = m2 + tl.sum(centred * centred, axis=1) + delta * delta * (seen * in_slab / total)
        rstd = 1.0 / tl.sqrt(m2 / K + eps)

        # Pass 2: normalize, modulate, round to the activation's dtype, multiply by W^T.
        offs_n = tl.arange(0, N)
        # A block spans at most two frames (the launcher ensures rows_per_frame >= BLOCK_M): each slab loads
        # two [BLOCK_K] rows of shift and scale, not a [BLOCK_M, BLOCK_K] gather.
        first_frame = (pid * BLOCK_M) // rows_per_frame
        last_frame = tl.minimum(pid * BLOCK_M + BLOCK_M - 1, M - 1) // rows_per_frame
        in_first = (offs_m // rows_per_frame == first_frame)[:, None]
        acc = tl.zeros((BLOCK_M, N), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            offs_k = k0 + tl.arange(0, BLOCK_K)
            mask = mask_m[:, None] & (offs_k[None, :] < K)
            h = tl.load(row_ptrs + offs_k[None, :], mask=mask, other=0.0).to(tl.float32)
            in_k = offs_k < K
            first, last = first_frame * stride_mod + offs_k, last_frame * stride_mod + offs_k
            scale = tl.where(in_first, tl.load(scale_ptr + first, mask=in_k, other=0.0)[None, :],
                             tl.load(scale_ptr + last, mask=in_k, other=0.0)[None, :])
            shift = tl.where(in_first, tl.load(shift_ptr + first, mask=in_k, other=0.0)[None, :],
                             tl.load(shift_ptr + last, mask=in_k, other=0.0)[None, :])
            a = (h - mean[:, None]) * rstd[:, None] * (1.0 + scale) + shift
            a = tl.where(mask, a, 0.0).to(w_ptr.dtype.element_ty)
            # W^T read in place: element (k, n) is W[n, k].
            wt = tl.load(w_ptr + offs_n[None, :] * stride_wn + offs_k[:, None], mask=offs_k[:, None] < K,
                         other=0.0)
            acc = tl.dot(a, wt, acc, input_precision=INPUT_PRECISION)

        if HAS_BIAS:
            acc += tl.load(bias_ptr + offs_n).to(tl.float32)[None, :]
        y_ptrs = y_ptr + offs_m[:, None].to(tl.int64) * stride_ym + offs_n[None, :]
        tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=mask_m[:, None])


def fused_head(hidden: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor, weight: torch.Tensor,
               bias: torch.Tensor | None, eps: float, block_m: int, block_k: int, num_warps: int,
               num_stages: int) -> tuple[torch.Tensor, Any]:
    """y = proj_out(modulate(norm_out(hidden))) in one launch; returns y and the launch's compiled kernel.

    shift and scale are [frames, K] float32, frame f modulating rows [f * M / frames, (f + 1) * M / frames).
    """
    if triton is None:
        raise VariantSkipped(TRITON_MISSING or "triton not installed")
    rows, k = hidden.shape
    n = weight.shape[0]
    shift, scale = shift.contiguous(), scale.contiguous()
    rows_per_frame = rows // shift.shape[0]
    if shift.shape[0] > 1 and rows_per_frame < block_m:
        raise VariantSkipped(f"BLOCK_M={block_m} rows would span more than two frames of {rows_per_frame} rows")
    for name, t in (("hidden", hidden), ("weight", weight), ("shift", shift), ("scale", scale)):
        if t.stride(-1) != 1:
            raise VariantSkipped(f"the fused kernel reads {name} with unit stride along K; it has {t.stride()}")
    y = torch.empty((rows, n), device=hidden.device, dtype=hidden.dtype)
    compiled = _norm_modulate_project_kernel[(triton.cdiv(rows, block_m),)](
        hidden, shift, scale, weight, bias if bias is not None else y, y,
        rows, k, rows_per_frame,
        hidden.stride(0), shift.stride(0), weight.stride(0), y.stride(0),
        eps,
        HAS_BIAS=bias is not None, N=n, BLOCK_M=block_m, BLOCK_K=block_k, INPUT_PRECISION=input_precision(),
        num_warps=num_warps, num_stages=num_stages,
    )
    return y, compiled
