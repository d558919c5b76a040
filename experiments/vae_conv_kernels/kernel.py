"""Our Triton implicit-GEMM conv3d: the convolution as one GEMM whose A operand is gathered from the input.

GEMM view (groups=1): M = N*To*Ho*Wo output positions, N = Cout output channels, K = Cin*kT*kH*kW taps.
Row m of A is output position (n, to, ho, wo); column k is tap (c, kt, kh, kw), in the weight's own
[Cout, Cin, kT, kH, kW] order, so B[k, co] is weight[co, c, kt, kh, kw] read in place. A[m, k] is
input[n, c, to*s_t + kt*d_t - p_t, ho*s_h + kh*d_h - p_h, wo*s_w + kw*d_w - p_w], zero outside the input
(the padding). Nothing is materialized: each program gathers its BLOCK_M x BLOCK_K slab of A per step.

One BLOCK_M x BLOCK_N output tile per program, grouped tile order for L2 reuse (as the GEMM in
experiments/dit_gemm_tiles/kernel.py), fp32 accumulator, bias epilogue, masked edges. Every tensor is
addressed through its strides, so NCDHW and channels_last_3d inputs and weights both work unchanged;
the output takes the input's memory format, as F.conv3d's does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from harness.api.experiment import VariantSkipped
from harness.api.tiles import TileConfig
from harness.api.triton_support import TRITON_MISSING, grouped_tile, tl, triton

INT32_LIMIT = 2**31  # the kernel's offsets are int32: a tensor whose span exceeds this is refused


@dataclass(frozen=True)
class ConvGemm:
    """A conv3d's shape and its GEMM view (groups=1)."""

    batch: int
    cin: int
    cout: int
    input_thw: tuple[int, int, int]
    kernel_thw: tuple[int, int, int]
    stride: tuple[int, int, int]
    padding: tuple[int, int, int]
    dilation: tuple[int, int, int]
    output_thw: tuple[int, int, int]

    @classmethod
    def from_shape(cls, shape: dict[str, Any]) -> ConvGemm:
        """From a conv3d workload's (or card's normalized) shape: input, weight, output, stride, padding, dilation."""
        groups = int(shape.get("groups", 1))
        if groups != 1:
            raise VariantSkipped(f"groups={groups}: the implicit GEMM is written for groups=1 (the VAE's convs)")
        x, w, y = shape["input"], shape["weight"], shape["output"]
        return cls(batch=int(x[0]), cin=int(x[1]), cout=int(w[0]), input_thw=_three(x[2:]),
                   kernel_thw=_three(w[2:]), stride=_three(shape["stride"]), padding=_three(shape["padding"]),
                   dilation=_three(shape["dilation"]), output_thw=_three(y[2:]))

    @property
    def m(self) -> int:
        return self.batch * math.prod(self.output_thw)

    @property
    def n(self) -> int:
        return self.cout

    @property
    def k(self) -> int:
        return self.cin * math.prod(self.kernel_thw)

    def as_dict(self) -> dict[str, int]:
        return {"M": self.m, "N": self.n, "K": self.k}


def _three(values: Any) -> tuple[int, int, int]:
    items = [int(v) for v in values] if isinstance(values, (list, tuple)) else [int(values)] * 3
    return items[0], items[1], items[2]


if triton is not None:

    @triton.jit
    def _conv3d_kernel(
        x_ptr, w_ptr, bias_ptr, y_ptr,
        M, N, K,
        T, H, W, To, Ho, Wo,
        sx_n, sx_c, sx_t, sx_h, sx_w,
        sw_o, sw_c, sw_t, sw_h, sw_w,
        sy_n, sy_c, sy_t, sy_h, sy_w,
        KT: tl.constexpr, KH: tl.constexpr, KW: tl.constexpr,
        STRIDE_T: tl.constexpr, STRIDE_H: tl.constexpr, STRIDE_W: tl.constexpr,
        PAD_T: tl.constexpr, PAD_H: tl.constexpr, PAD_W: tl.constexpr,
        DIL_T: tl.constexpr, DIL_H: tl.constexpr, DIL_W: tl.constexpr,
        HAS_BIAS: tl.constexpr,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
        INPUT_PRECISION: tl.constexpr,
    ):
        """Y[m, co] = sum_k A[m, k] W[co, k] + bias[co], A gathered from x: one BLOCK_M x BLOCK_N tile per program."""
        pid_m, pid_n = grouped_tile(M, N, BLOCK_M, BLOCK_N, GROUP_M)

        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        mask_m = offs_m < M
        mask_n = offs_n < N
        # Output position of each row: m = ((n * To + to) * Ho + ho) * Wo + wo.
        wo = offs_m % Wo
        ho = (offs_m // Wo) % Ho
        to = (offs_m // (Wo * Ho)) % To
        nb = offs_m // (Wo * Ho * To)
        t_base = to * STRIDE_T - PAD_T
        h_base = ho * STRIDE_H - PAD_H
        w_base = wo * STRIDE_W - PAD_W
        x_rows = x_ptr + nb * sx_n

        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            offs_k = k0 + tl.arange(0, BLOCK_K)
            mask_k = offs_k < K
            # Tap of each column: k = ((c * KT + kt) * KH + kh) * KW + kw, the weight's own order.
            kw = offs_k % KW
            kh = (offs_k // KW) % KH
            kt = (offs_k // (KW * KH)) % KT
            c = offs_k // (KW * KH * KT)
            t = t_base[:, None] + (kt * DIL_T)[None, :]
            h = h_base[:, None] + (kh * DIL_H)[None, :]
            w = w_base[:, None] + (kw * DIL_W)[None, :]
            a_mask = mask_m[:, None] & mask_k[None, :]
            if PAD_T + PAD_H + PAD_W > 0:  # only padding can reach outside the input (stride/dilation cannot)
                a_mask = a_mask & (t >= 0) & (t < T) & (h >= 0) & (h < H) & (w >= 0) & (w < W)
            a = tl.load(x_rows[:, None] + c[None, :] * sx_c + t * sx_t + h * sx_h + w * sx_w,
                        mask=a_mask, other=0.0)
            w_offs = c * sw_c + kt * sw_t + kh * sw_h + kw * sw_w
            b = tl.load(w_ptr + w_offs[:, None] + offs_n[None, :] * sw_o,
                        mask=mask_k[:, None] & mask_n[None, :], other=0.0)
            acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)

        if HAS_BIAS:  # epilogue: bias added to the fp32 accumulator, then one rounding to the output dtype
            bias = tl.load(bias_ptr + offs_n, mask=mask_n, other=0.0)
            acc += bias.to(tl.float32)[None, :]
        y_rows = nb * sy_n + to * sy_t + ho * sy_h + wo * sy_w
        y_ptrs = y_ptr + y_rows[:, None] + offs_n[None, :] * sy_c
        tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])


def conv_input_precision() -> str:
    """tl.dot's precision for float32 operands: TF32 exactly when torch lets its convolutions use it
    (torch.backends.cudnn.allow_tf32, on by default: the baseline's math mode), where
    harness.api.triton_support.input_precision follows the matmul switch; bf16/fp16 operands ignore it."""
    return "tf32" if torch.backends.cudnn.allow_tf32 else "ieee"


def _span(t: torch.Tensor) -> int:
    """Elements from the first to the last one a tensor addresses, plus one."""
    return sum((size - 1) * stride for size, stride in zip(t.shape, t.stride())) + 1 if t.numel() else 0


def memory_format_of(t: torch.Tensor) -> torch.memory_format:
    """channels_last_3d for a tensor in that layout (and not also plain contiguous), else contiguous: the
    memory format F.conv3d gives its output for such an input."""
    if t.is_contiguous(memory_format=torch.channels_last_3d) and not t.is_contiguous():
        return torch.channels_last_3d
    return torch.contiguous_format


def triton_conv3d(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, gemm: ConvGemm,
                  config: TileConfig) -> tuple[torch.Tensor, Any]:
    """F.conv3d(x, weight, bias, gemm's stride/padding/dilation) with the Triton kernel; y and the compiled kernel."""
    if triton is None:
        raise VariantSkipped(TRITON_MISSING or "triton not installed")
    y = torch.empty((gemm.batch, gemm.cout, *gemm.output_thw), device=x.device, dtype=x.dtype,
                    memory_format=memory_format_of(x))
    too_big = [name for name, t in (("input", x), ("weight", weight), ("output", y)) if _span(t) >= INT32_LIMIT]
    if too_big:
        raise VariantSkipped(f"the {', '.join(too_big)} spans 2^31 elements or more: the kernel's offsets are int32")
    grid = (triton.cdiv(gemm.m, config.BLOCK_M) * triton.cdiv(gemm.n, config.BLOCK_N),)
    (kt, kh, kw), (st, sh, sw), (pt, ph, pw), (dt, dh, dw) = (gemm.kernel_thw, gemm.stride, gemm.padding,
                                                               gemm.dilation)
    compiled = _conv3d_kernel[grid](
        x, weight, bias if bias is not None else y, y,
        gemm.m, gemm.n, gemm.k,
        *gemm.input_thw, *gemm.output_thw,
        *x.stride(), *weight.stride(), *y.stride(),
        KT=kt, KH=kh, KW=kw, STRIDE_T=st, STRIDE_H=sh, STRIDE_W=sw, PAD_T=pt, PAD_H=ph, PAD_W=pw,
        DIL_T=dt, DIL_H=dh, DIL_W=dw,
        HAS_BIAS=bias is not None,
        BLOCK_M=config.BLOCK_M, BLOCK_N=config.BLOCK_N, BLOCK_K=config.BLOCK_K, GROUP_M=config.GROUP_M,
        INPUT_PRECISION=conv_input_precision(),
        num_warps=config.num_warps, num_stages=config.num_stages,
    )
    return y, compiled
