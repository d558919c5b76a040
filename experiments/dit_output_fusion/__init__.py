"""Fuse the DiT's output head: norm_out + modulation + proj_out (the N=64 linears) read the activation once.

The report's N=64 linears (M=4680 and M=10560 rows, K=5120) are dram_bandwidth_bound: proj_out reads a
[M, 5120] bf16 activation (48 / 108 MB per call) for a 0.65 MB weight. The activation is the output of
norm_out and the modulation, which pass over it several times before proj_out reads it (chain.py has
the chain as diffusers runs it). The card's op is therefore extended with that producer (the
`workload` hook: chain.extend_with_producer) and the variants are fusions of the whole chain:

- baseline `eager_chain`: diffusers' chain op by op (fp32 norm, fp32 modulation, cast to bf16, bf16
  proj_out): six passes, 38 bytes per activation element;
- `compiled(mode)`: torch.compile of the same chain. Inductor fuses the norm and the modulation into one
  kernel writing bf16 (6 bytes per element with the GEMM's read) and may fuse the cast into the GEMM's
  prologue on a GPU. On a CPU it needs a C++ compiler: skipped with the error's first line without one;
- `folded(fold)`: the modulation folded into proj_out's weight and bias (exact algebra: diag(1 + scale)
  then W is W * (1 + scale), and shift's contribution is W @ shift added to b), so only the norm (bf16 in,
  fp32 math, bf16 out) and one GEMM per frame remain: 6 bytes per element;
- `triton_fused(BLOCK_M, BLOCK_K, num_warps, num_stages)`: one Triton kernel (kernel.py) computing the row
  statistics, normalizing and modulating each K slab in registers and feeding it to the N=64 GEMM: the
  activation leaves DRAM once (CUDA only).

Only the N=64 cards are extended (default_cards selects them by `shape: {N: 64}`); on any other linear
the baseline is the card's op as built and every variant skips, saying why. The `annotate` hook puts the
minimum DRAM bytes of the unfused chain and of the fused one, this variant's own, and the profiler's
measured bytes side by side on the card, so that "bytes and time fall together" can be judged.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Callable, Literal

import torch
import torch.nn.functional as F

from experiments.dit_output_fusion import chain
from experiments.dit_output_fusion.chain import (
    EAGER_PASSES,
    ELEMENTWISE_FLOPS,
    EPS,
    FUSED_PASSES,
    Pass,
    chain_inputs,
    extend_with_producer,
    is_extended,
    min_bytes,
)
from experiments.dit_output_fusion.kernel import fused_head
from harness.api.compiled import CompileMode, compile_call
from harness.api.experiment import Experiment, Prepared
from harness.api.tiles import TileConfig, executed_flops, padded
from harness.api.triton_support import check_launchable, first_launch
from harness.cards.fields import DRAM_BANDWIDTH_BOUND
from harness.cards.measures import dram_bytes
from harness.workloads.base import Workload

EXPERIMENT = Experiment(
    name="dit_output_fusion",
    op_kinds=("linear",),
    hypothesis="the N=64 output projection is bound by reading its [M, 5120] activation, which norm_out and "
    "the modulation have just read and written several times; fusing the norm and modulation into the "
    "projection (one compiled chain, the modulation folded into the weight, or one Triton kernel) reads "
    "the activation once, so DRAM bytes and time fall together",
    check="bytes_and_time_fall",
    classes=(DRAM_BANDWIDTH_BOUND,),
    workload_dtype="bfloat16",
)
EXPERIMENT.workload(extend_with_producer)

FoldWhen = Literal["once", "per_call"]
COMPILED_PASSES = (Pass("Inductor: norm + modulation in one kernel (bf16 out)", 2, 2),
                   Pass("proj_out reads its input", 2, 0))
FOLDED_PASSES = (Pass("layer_norm (bf16 in, fp32 math, bf16 out)", 2, 2),
                 Pass("GEMM with the folded weight reads its input", 2, 0))


def pass_facts(w: Workload, passes: tuple[Pass, ...]) -> dict[str, Any]:
    """The variant's passes over the activation and the minimum DRAM bytes they imply for this call."""
    hidden, shift, _, weight, bias = chain_inputs(w)
    rows, k = hidden.shape
    return {"activation_passes": [asdict(p) for p in passes],
            "bytes_per_activation_element": sum(p.bytes for p in passes),
            "min_bytes": min_bytes(rows, k, weight.shape[0], shift.shape[0], passes, bias is not None)}


# ---------------------------------------------------------------------------------------------
# Baseline


@EXPERIMENT.baseline
def eager_chain(w: Workload) -> Callable[[], torch.Tensor] | Prepared:
    """diffusers' output head as is: FP32LayerNorm(hidden.float()) * (1 + scale) + shift, .type_as(hidden),
    then proj_out in bf16 (on a card that is not the N=64 proj_out: the card's op as built)."""
    if not is_extended(w):
        return w.run
    return Prepared(w.run, facts=pass_facts(w, EAGER_PASSES))


# ---------------------------------------------------------------------------------------------
# torch.compile


@EXPERIMENT.variant
def compiled(w: Workload, mode: CompileMode = "default") -> Prepared:
    """torch.compile of the whole head (Inductor fuses norm_out and the modulation; on a GPU it may fuse
    them into proj_out's prologue): wrap norm_out, the modulation and proj_out in one compiled function."""
    run, compile_s = compile_call(chain.eager_chain, chain_inputs(w), mode, w.device, what=" of the head")
    facts = {"compile_mode": mode, "compile_s": round(compile_s, 2), **pass_facts(w, COMPILED_PASSES),
             "passes_note": "assumes Inductor keeps the GEMM separate; with its prologue fused the activation "
                            "is read once (2 bytes per element)"}
    return Prepared(run, facts=facts)


# ---------------------------------------------------------------------------------------------
# The modulation folded into proj_out


def fold(weight: torch.Tensor, bias: torch.Tensor | None, shift: torch.Tensor, scale: torch.Tensor
         ) -> tuple[torch.Tensor, torch.Tensor]:
    """Per frame f: W'_f = W * (1 + scale_f) and b'_f = b + W @ shift_f, in float32 (float64 for float64
    weights), rounded once to W's dtype.

    (n * (1 + s) + t) @ W^T + b = n @ (W * (1 + s))^T + (W @ t + b): exact algebra. Returns W' [F, N, K]
    and b' [F, N].
    """
    wide = torch.promote_types(weight.dtype, torch.float32)
    w_wide = weight.to(wide)
    folded_weight = w_wide.unsqueeze(0) * (1 + scale.to(wide)).unsqueeze(1)
    folded_bias = shift.to(wide) @ w_wide.T
    if bias is not None:
        folded_bias = folded_bias + bias.to(wide)
    return folded_weight.to(weight.dtype), folded_bias.to(weight.dtype)


def folded_head(hidden: torch.Tensor, folded_weight: torch.Tensor, folded_bias: torch.Tensor) -> torch.Tensor:
    """norm_out in the activation's dtype (fp32 math inside), then one batched GEMM: frame f's rows by W'_f."""
    frames, n, k = folded_weight.shape
    normed = F.layer_norm(hidden, (k,), eps=EPS).view(frames, -1, k)
    out = torch.baddbmm(folded_bias.unsqueeze(1), normed, folded_weight.transpose(1, 2))
    return out.reshape(hidden.shape[0], n)


@EXPERIMENT.variant
def folded(w: Workload, fold_when: FoldWhen = "once") -> Prepared:
    """Fold the modulation into proj_out: W' = W * (1 + scale), b' = b + W @ shift (exact algebra), then
    norm_out (no affine) and one GEMM with W', b'. shift/scale depend only on the timesteps, so W', b' are
    computed once per denoising step of the schedule (per chunk; reused by every chunk when the schedule
    repeats), not per call: a [F, 64, 5120] fold, 1/73 of the M=4680 activation. fold_when=per_call times
    the fold too."""
    hidden, shift, scale, weight, bias = chain_inputs(w)
    facts = {"fold_when": fold_when, **pass_facts(w, FOLDED_PASSES)}
    if fold_when == "per_call":
        def run() -> torch.Tensor:
            return folded_head(hidden, *fold(weight, bias, shift, scale))

        # The fold reads W and writes W' per frame, and the GEMM reads W' back.
        facts["min_bytes"] += 3.0 * shift.shape[0] * weight.numel() * weight.element_size()
        return Prepared(run, facts=facts)
    folded_weight, folded_bias = fold(weight, bias, shift, scale)
    return Prepared(lambda: folded_head(hidden, folded_weight, folded_bias), facts=facts)


# ---------------------------------------------------------------------------------------------
# One Triton kernel


@EXPERIMENT.variant(needs=("cuda", "triton"))
def triton_fused(w: Workload, BLOCK_M: int = 32, BLOCK_K: int = 128, num_warps: int = 4,
                 num_stages: int = 2) -> Prepared:
    """One Triton kernel for the head (kernel.py): per BLOCK_M rows, the row statistics, then the norm and
    modulation of each K slab in registers feeding the N=64 GEMM; the activation leaves DRAM once."""
    hidden, shift, scale, weight, bias = chain_inputs(w)
    rows, k = hidden.shape
    n = weight.shape[0]
    # The whole N is one tile: the launch check of a BLOCK_M x N x BLOCK_K GEMM tile (harness.api.tiles).
    config = TileConfig(BLOCK_M, n, BLOCK_K, 1, num_stages, num_warps)
    check_launchable(config, hidden.element_size(), w.device)

    def launch() -> tuple[torch.Tensor, Any]:
        return fused_head(hidden, shift, scale, weight, bias, EPS, BLOCK_M, BLOCK_K, num_warps, num_stages)

    programs = -(-rows // BLOCK_M)
    facts = {"kernel": "triton _norm_modulate_project_kernel", "tile": asdict(config), "programs": programs,
             "num_warps": num_warps, **first_launch(launch, w.device),
             "rows_bytes_per_program": BLOCK_M * k * hidden.element_size(),
             **pass_facts(w, FUSED_PASSES),
             "passes_note": "the statistics pass and the output pass both read the rows; the second read is "
                            "meant to hit L2 (rows_bytes_per_program per program in flight)"}
    facts.update(smem_bytes_estimate=config.smem_bytes(hidden.element_size()))
    executed = (executed_flops(rows, n, k, BLOCK_M, n, BLOCK_K)
                + ELEMENTWISE_FLOPS * padded(rows, BLOCK_M) * padded(k, BLOCK_K))
    return Prepared(lambda: launch()[0], executed_flops=float(executed), facts=facts)


# ---------------------------------------------------------------------------------------------
# Evidence: the chain's bytes, unfused and fused, next to what the profiler measured


@EXPERIMENT.annotate
def add_fusion_bytes(card: Any, w: Workload) -> None:
    """card.extra["fusion_bytes"]: the minimum DRAM bytes of the unfused chain (diffusers' six passes, 38 B
    per activation element) and of the fused one (one read, 2 B), this variant's own, and the profiler's."""
    if not is_extended(w):
        card.extra["fusion_bytes"] = {"note": "not the N=64 output projection: the card's op was not extended"}
        return
    hidden, shift, _, weight, bias = chain_inputs(w)
    rows, k = hidden.shape
    n, frames = weight.shape[0], shift.shape[0]
    variant = card.extra.get("variant") or {}
    unfused = min_bytes(rows, k, n, frames, EAGER_PASSES, bias is not None)
    fused = min_bytes(rows, k, n, frames, FUSED_PASSES, bias is not None)
    own = variant.get("min_bytes")
    profiled = dram_bytes(card)
    per_call_us = variant.get("per_call_us")
    card.extra["fusion_bytes"] = {
        "formula": "rows x K x (bytes per activation element over the variant's passes) + W + b + shift/scale "
                   "+ y; unfused = diffusers' passes (2+4, 4+4, 4+4, 4+4, 4+2, 2 = 38 B), fused = one read (2 B)",
        "unfused_min_bytes": unfused,
        "fused_min_bytes": fused,
        "fused_over_unfused": fused / unfused,
        "variant_min_bytes": own,
        "variant_over_unfused": own / unfused if isinstance(own, (int, float)) else None,
        "profiled_dram_bytes": profiled,
        "profiled_over_variant_min": profiled / own if profiled and isinstance(own, (int, float)) and own else None,
        "dram_bytes_source": card.extra.get("metrics_source"),
        "per_call_us": per_call_us,
        "min_bytes_gbps": own / per_call_us / 1e3 if isinstance(own, (int, float)) and per_call_us else None,
    }
