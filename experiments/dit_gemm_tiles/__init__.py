"""GEMM kernel and tile choice for the compute-bound and tail-limited DiT linears.

The report's DiT linears run one cuBLAS nvjet kernel each (bf16, bias epilogue). The big ones
(M=1170/2640/4680 rows, K=5120/13824) sit near the bf16 roofline; the small-M ones (M=3, K=256) are a
partial wave: too few output tiles to fill 132 SMs. Levers (docs/domain.md section 5):

- `blas_library(library)`: cuBLAS or cuBLASLt through `torch.backends.cuda.preferred_blas_library`,
  set around each call and restored after it, so no trial leaks its choice into the next (CUDA only);
- `triton_matmul(BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, num_stages, num_warps)`: a Triton kernel of our
  own (grouped tile order for L2 reuse, fp32 accumulator, bias epilogue, masked edges) whose tile is
  searched. A configuration that cannot launch (shared memory over the device's per-block limit,
  tile sizes Triton cannot lower, an accumulator over the register file) is pruned before anything
  is compiled. The kernel executes whole tiles, so its FLOPs are those of the shape padded to the
  tile (`Prepared.executed_flops`): for M=3 that padding is the waste the tile search trades
  against the wave count (CUDA only);
- `compiled(mode)`: torch.compile of the same linear (Inductor; max-autotune benchmarks its own
  Triton/CUTLASS templates against cuBLAS), as a reference for what a search can reach;
- `dtype_layout(compute_dtype, weight_layout)`: the CPU's own counter-experiment. On a CPU without
  native bf16 dot products (AVX2, no AVX512-BF16/AMX) oneDNN emulates bf16 GEMM at a fraction of the
  fp32 sgemm rate, so float32 compute (weights stored in float32, the activation cast per call, the
  output cast back to bf16) is a different kernel, not a rounding change; `weight_layout=kn` stores
  the weight pre-transposed [K, N] and calls addmm (the BLAS NN path instead of NT). On a GPU float32
  runs the FP32 SIMT path (TF32 off by torch's default), a kernel change that should lose there.

Dtype: bf16 on every device, as the model runs it (the workload is built in bf16).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Callable, Literal, get_args

import torch
import torch.nn.functional as F

from experiments.dit_gemm_tiles.kernel import triton_linear
from harness.api.compiled import CompileMode, compile_call, frozen_module
from harness.api.experiment import Experiment, Prepared, VariantSkipped
from harness.api.numerics import unit_roundoff
from harness.api.peaks import compute_peak, sm_count
from harness.api.tiles import TileConfig, executed_flops, tile_count, waves
from harness.api.triton_support import check_launchable, first_launch
from harness.cards.fields import COMPUTE_BOUND, L2_BANDWIDTH_BOUND, PARTIAL_WAVE_TAIL
from harness.workloads.base import Workload
from harness.workloads.params import dtype_name, element_size, parse_dtype

EXPERIMENT = Experiment(
    name="dit_gemm_tiles",
    op_kinds=("linear",),
    hypothesis="another GEMM kernel or tile (cuBLAS vs cuBLASLt, a searched Triton tile, Inductor "
    "max-autotune; on a CPU float32 sgemm instead of emulated bf16, or a pre-transposed weight) raises "
    "effective TFLOP/s at the same nominal FLOPs; for an L2-bound linear, the tile and its group size are the "
    "blocking that changes reuse",
    check="effective_flops",
    classes=(COMPUTE_BOUND, PARTIAL_WAVE_TAIL, L2_BANDWIDTH_BOUND),
    workload_dtype="bfloat16",
)

BlasLibrary = Literal["cublas", "cublaslt"]
BLAS_LIBRARIES: tuple[str, ...] = get_args(BlasLibrary)
WeightLayout = Literal["nk", "kn"]  # nk: nn.Linear's [N, K] (F.linear, NT GEMM); kn: pre-transposed [K, N] (addmm, NN)

def _inputs(w: Workload) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    return w.inputs["x"], w.inputs["weight"], w.inputs.get("bias")


def _is_cuda(w: Workload) -> bool:
    return str(w.device).startswith("cuda")


# ---------------------------------------------------------------------------------------------
# Baseline


@EXPERIMENT.baseline
def linear(w: Workload) -> Callable[[], torch.Tensor]:
    """F.linear on bf16 x [M, K], weight [N, K], bias [N], as the model runs it (cuBLAS heuristics)."""
    x, weight, bias = _inputs(w)
    return lambda: F.linear(x, weight, bias)


# ---------------------------------------------------------------------------------------------
# cuBLAS vs cuBLASLt


@EXPERIMENT.variant(needs="cuda")
def blas_library(w: Workload, library: BlasLibrary = "cublaslt") -> Prepared:
    """The same F.linear with cuBLAS or cuBLASLt preferred for this call only."""
    if not _is_cuda(w):
        raise VariantSkipped(f"needs CUDA: preferred_blas_library picks a CUDA BLAS library (device is {w.device})")
    x, weight, bias = _inputs(w)
    prefer = torch.backends.cuda.preferred_blas_library

    def run() -> torch.Tensor:
        previous = prefer()
        prefer(library)
        try:
            return F.linear(x, weight, bias)
        finally:
            prefer(previous)  # set per call and restored, so the choice never outlives the trial

    return Prepared(run, facts={"blas_library": library})


# ---------------------------------------------------------------------------------------------
# Triton tile search


@EXPERIMENT.variant(needs=("cuda", "triton"))
def triton_matmul(
    w: Workload,
    BLOCK_M: int = 128,
    BLOCK_N: int = 128,
    BLOCK_K: int = 64,
    GROUP_M: int = 8,
    num_stages: int = 4,
    num_warps: int = 8,
) -> Prepared:
    """Our Triton GEMM with one tile configuration (pruned before compiling if it cannot launch)."""
    config = TileConfig(BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, num_stages, num_warps)
    x, weight, bias = _inputs(w)
    elem = element_size(x.dtype)
    check_launchable(config, elem, w.device)
    m, k = x.shape
    n = weight.shape[0]
    facts = {
        "kernel": "triton _linear_kernel",
        "tile": asdict(config),
        "tiles": tile_count(m, n, BLOCK_M, BLOCK_N),
        "smem_bytes_estimate": config.smem_bytes(elem),
        **first_launch(lambda: triton_linear(x, weight, bias, config), w.device),
    }
    return Prepared(lambda: triton_linear(x, weight, bias, config)[0],
                    executed_flops=executed_flops(m, n, k, BLOCK_M, BLOCK_N, BLOCK_K), facts=facts)


# ---------------------------------------------------------------------------------------------
# torch.compile reference


@EXPERIMENT.variant
def compiled(w: Workload, mode: CompileMode = "default") -> Prepared:
    """torch.compile of nn.Linear with the workload's weight and bias as frozen parameters."""
    x, weight, bias = _inputs(w)
    module = frozen_module(torch.nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None,
                                           device=weight.device, dtype=weight.dtype), weight=weight, bias=bias)
    run, compile_s = compile_call(module, (x,), mode, w.device)
    return Prepared(run, facts={"compile_mode": mode, "compile_s": round(compile_s, 2)})


# ---------------------------------------------------------------------------------------------
# Compute dtype and weight layout (the CPU's counter-experiment)


@EXPERIMENT.variant
def dtype_layout(w: Workload, compute_dtype: str = "float32", weight_layout: WeightLayout = "nk") -> Prepared:
    """GEMM in `compute_dtype` with weights stored in it, [N, K] (F.linear) or pre-transposed [K, N] (addmm)."""
    try:
        dtype = parse_dtype(compute_dtype, "compute_dtype")
    except ValueError as exc:
        raise VariantSkipped(str(exc)) from None
    x, weight, bias = _inputs(w)
    out_dtype = x.dtype
    if dtype == out_dtype and weight_layout == "nk":
        raise VariantSkipped(f"compute_dtype={compute_dtype}, weight_layout=nk is the baseline itself")
    if dtype == torch.float16 and not _is_cuda(w):
        raise VariantSkipped("float16 GEMM has no fast CPU kernel; it runs on CUDA only")
    # Stored once in the compute dtype and layout, as a model converted for this backend would hold them.
    weight_c = weight.to(dtype)
    bias_c = bias.to(dtype) if bias is not None else None
    facts = {"compute_dtype": dtype_name(dtype), "weight_layout": weight_layout,
             "weight_bytes_stored": weight_c.numel() * weight_c.element_size()}
    if weight_layout == "kn":
        weight_kn = weight_c.t().contiguous()

        def run() -> torch.Tensor:
            xc = x.to(dtype)
            y = torch.addmm(bias_c, xc, weight_kn) if bias_c is not None else torch.mm(xc, weight_kn)
            return y.to(out_dtype)
    else:

        def run() -> torch.Tensor:
            return F.linear(x.to(dtype), weight_c, bias_c).to(out_dtype)

    # float32 (or fp16 from bf16) is at least the baseline's precision; below the workload's dtype is lowered.
    lowered = unit_roundoff(dtype) > unit_roundoff(out_dtype)
    return Prepared(run, precision=dtype_name(dtype) if lowered else None, facts=facts)


# ---------------------------------------------------------------------------------------------
# Evidence on every measured card


@EXPERIMENT.annotate
def add_gemm_evidence(card: Any, w: Workload) -> None:
    """card.extra["gemm"]: share of the math peak, executed-FLOP rate and tile waves (what the
    variant facts, which already hold per_call_us, achieved_tflops and the tile, do not say)."""
    variant = card.extra.get("variant") or {}
    per_call_us = variant.get("per_call_us")
    achieved = variant.get("achieved_tflops")
    dtype = variant.get("compute_dtype") or dtype_name(w.dtype)
    peak, source = compute_peak(card.extra.get("peaks"), dtype, w.device)
    pct = achieved * 1e12 / peak * 100.0 if achieved and peak else None
    gemm: dict[str, Any] = {"peak_tflops": peak / 1e12 if peak else None, "peak_source": source, "pct_of_peak": pct}
    if pct is not None and pct > 100.0:
        gemm["peak_note"] = ("over 100%: the recorded peak is below what this call reached (a peak measured "
                             "on a busy machine, or on a slower path for this dtype)")
    executed = variant.get("executed_flops")
    if executed and per_call_us:
        gemm["executed_tflops"] = executed / variant.get("calls", 1) / per_call_us / 1e6
        gemm["padding_pct"] = (variant.get("executed_over_nominal", 1.0) - 1.0) * 100.0
    tile = variant.get("tile")
    sms = sm_count(w.device, card.extra.get("peaks"))
    if isinstance(tile, dict) and sms:
        tiles = tile_count(w.shape["M"], w.shape["N"], tile["BLOCK_M"], tile["BLOCK_N"])
        gemm["waves_one_tile_per_sm"], gemm["last_wave_fill_pct"] = waves(tiles, sms)
    card.extra["gemm"] = gemm
