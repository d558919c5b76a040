"""Our Triton GEMM for the linears: y = x @ weight^T + bias, one BLOCK_M x BLOCK_N tile per program,
grouped tile order for L2 reuse, fp32 accumulator, bias epilogue, masked edges (Triton's matmul tutorial's
structure). Its tile (harness.api.tiles.TileConfig) is what dit_gemm_tiles searches.
"""

from __future__ import annotations

from typing import Any

import torch

from harness.api.experiment import VariantSkipped
from harness.api.tiles import TileConfig
from harness.api.triton_support import TRITON_MISSING, grouped_tile, input_precision, tl, triton

if triton is not None:

    @triton.jit
    def _linear_kernel(
        a_ptr, w_ptr, bias_ptr, c_ptr,
        M, N, K,
        stride_am, stride_ak, stride_wn, stride_wk, stride_cm, stride_cn,
        HAS_BIAS: tl.constexpr,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
        INPUT_PRECISION: tl.constexpr,
    ):
        """C[M, N] = A[M, K] @ W[N, K]^T + bias[N]: one BLOCK_M x BLOCK_N tile of C per program."""
        pid_m, pid_n = grouped_tile(M, N, BLOCK_M, BLOCK_N, GROUP_M)

        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        offs_k = tl.arange(0, BLOCK_K)
        a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
        # B = W^T read in place: element (k, n) of B is W[n, k].
        b_ptrs = w_ptr + offs_k[:, None] * stride_wk + offs_n[None, :] * stride_wn
        mask_m = offs_m[:, None] < M
        mask_n = offs_n[None, :] < N

        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for kk in range(0, tl.cdiv(K, BLOCK_K)):
            k_left = K - kk * BLOCK_K
            a = tl.load(a_ptrs, mask=mask_m & (offs_k[None, :] < k_left), other=0.0)
            b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & mask_n, other=0.0)
            acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
            a_ptrs += BLOCK_K * stride_ak
            b_ptrs += BLOCK_K * stride_wk

        if HAS_BIAS:  # epilogue: bias added to the fp32 accumulator, then one rounding to the output dtype
            bias = tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0)
            acc += bias.to(tl.float32)[None, :]
        c = acc.to(c_ptr.dtype.element_ty)
        c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
        tl.store(c_ptrs, c, mask=mask_m & mask_n)


def triton_linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, config: TileConfig
) -> tuple[torch.Tensor, Any]:
    """y = x @ weight^T + bias with the Triton kernel; returns y and the launch's compiled kernel."""
    if triton is None:
        raise VariantSkipped(TRITON_MISSING or "triton not installed")
    m, k = x.shape
    n = weight.shape[0]
    y = torch.empty((m, n), device=x.device, dtype=x.dtype)
    grid = (triton.cdiv(m, config.BLOCK_M) * triton.cdiv(n, config.BLOCK_N),)
    compiled = _linear_kernel[grid](
        x, weight, bias if bias is not None else y, y,
        m, n, k,
        x.stride(0), x.stride(1), weight.stride(0), weight.stride(1), y.stride(0), y.stride(1),
        HAS_BIAS=bias is not None,
        BLOCK_M=config.BLOCK_M, BLOCK_N=config.BLOCK_N, BLOCK_K=config.BLOCK_K, GROUP_M=config.GROUP_M,
        INPUT_PRECISION=input_precision(),
        num_warps=config.num_warps, num_stages=config.num_stages,
    )
    return y, compiled
