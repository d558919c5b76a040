"""Batch the M=3 DiT linears: read each weight once for several calls.

The time-embedding MLP (256->5120, 5120->5120) and the time projection (5120->30720) run with one row
per latent frame, M=3. Such a call is pure weight streaming: 30720x5120 bf16 = 315 MB read for 3 rows,
about 66 us at 4.8 TB/s, whatever the kernel (docs/domain.md section 2). Two levers (section 5):

- `batched(k)`: the rows of k calls that share the weight stacked into one GEMM, [3k, K] @ W^T + b, so
  the weight is read once per k calls. The k calls are the harness's (`w.calls(k)`): the first call's
  rows are the workload's own, the other k-1 calls' distinct seeded rows of the same scale (other
  timesteps). Their inputs exist ahead of time: the rows depend only on the timestep, and a chunk's
  timesteps are fixed by the sampler, so the sinusoidal embedding of all k timesteps is one op
  producing the [3k, K] block; no gather is timed. Correctness covers every row: the harness checks
  each call's rows against that call's own float64 reference.
- `gemv(block_size, vector_width)`: a CUDA C kernel (CuPy RawKernel) that streams W once for the
  call's few rows: one warp per output column, `vector_width`-element vector loads (up to 16 B),
  fp32 accumulation, a warp-shuffle reduction, the bias added before one rounding to the output
  dtype. CUDA only; skipped with the reason where CuPy or CUDA is missing.

Which k: a chunk runs 4 denoising steps plus 1 cache-writing pass, each calling these linears once
with its own timestep. k=2 is the smallest batch; k=4 batches a chunk's denoising steps (the cache
pass separately); k=5 a whole chunk, the natural unit; k=8 two chunks' denoising steps; k=20 four
whole chunks. Because the timestep schedule repeats every chunk, the extreme is computing the
embedding once per distinct timestep for the whole video: k=20 stands for that regime. Even there the
GEMM (60 rows: 60 FLOP per weight byte in bf16) stays under the H200's ridge (~790 TFLOP/s over
4.3 TB/s, ~180 FLOP/byte): still weight streaming, with 1/20 of the bytes per call.

Dtype: bf16 on every device, as the model runs it. On a CPU without native bf16 dot products M=3
takes a fast bf16 GEMV path but larger M an emulated bf16 GEMM, so batching there can lose: the
measurement says so rather than the hypothesis.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any, Callable

import torch
import torch.nn.functional as F

from harness.api.experiment import Experiment, Prepared, VariantSkipped
from harness.api.optional import install_hint
from harness.api.peaks import card_peaks
from harness.cards.fields import DRAM_BANDWIDTH_BOUND, PARTIAL_WAVE_TAIL
from harness.cards.measures import dram_bytes
from harness.workloads.base import Workload
from harness.workloads.params import WorkloadError, dtype_name, element_size

EXPERIMENT = Experiment(
    name="dit_small_m_batching",
    op_kinds=("linear",),
    hypothesis="the M=3 linears stream their whole weight for 3 rows; stacking the rows of k calls that "
    "share the weight into one GEMM reads it once per k calls (or a GEMV kernel streams it at full "
    "bandwidth), so DRAM bytes and time per call fall; for an M=3 call whose few tiles leave the SMs idle "
    "(a partial wave), the k calls' rows are the larger M that fills them",
    check="bytes_and_time_fall",
    classes=(DRAM_BANDWIDTH_BOUND, PARTIAL_WAVE_TAIL),
    workload_dtype="bfloat16",
)

# Weight streaming is the premise: a call whose weight is less than this share of its bytes (the N=64
# head reads a 4680x5120 activation for a 64x5120 weight) is not what batching calls can help.
MIN_WEIGHT_SHARE = 0.5
GEMV_MAX_ROWS = 8  # rows one warp keeps accumulators for; beyond it a GEMM tile is the right kernel
GEMV_DTYPES = ("bfloat16", "float32")
VECTOR_BYTES = {4: ("unsigned int", "float"), 8: ("uint2", "float2"), 16: ("uint4", "float4")}


def _inputs(w: Workload) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    return w.inputs["x"], w.inputs["weight"], w.inputs.get("bias")


def weight_share(w: Workload) -> float:
    """The weight's share of the call's minimum bytes (x + W + b + y)."""
    weight = w.inputs["weight"]
    nbytes = weight.numel() * weight.element_size()
    return nbytes / w.min_bytes if w.min_bytes else 1.0


def _require_weight_streaming(w: Workload) -> None:
    share = weight_share(w)
    if share < MIN_WEIGHT_SHARE:
        raise VariantSkipped(
            f"the weight is {share:.0%} of this call's bytes (M={w.shape['M']}): batching calls that share "
            "it cannot cut much; this experiment is for the weight-streaming M=3 linears"
        )


# ---------------------------------------------------------------------------------------------
# Baseline and batching


@EXPERIMENT.baseline
def one_call(w: Workload) -> Callable[[], torch.Tensor]:
    """One F.linear call with the call's own rows (M=3), as the model runs it."""
    x, weight, bias = _inputs(w)
    return lambda: F.linear(x, weight, bias)


@EXPERIMENT.variant
def batched(w: Workload, k: int = 5) -> Prepared:
    """One GEMM over the rows of k calls that share the weight; time per call = time / k."""
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise VariantSkipped(f"k={k!r}: a positive number of calls")
    _require_weight_streaming(w)
    _, weight, bias = _inputs(w)
    try:
        xs = w.calls(k).stacked["x"]  # the k calls' rows, the workload's own first: [k x M, K]
    except WorkloadError as exc:
        raise VariantSkipped(str(exc)) from None
    facts = {"k": k, "rows": xs.shape[0], "weight_reads_per_call": 1.0 / k}
    return Prepared(lambda: F.linear(xs, weight, bias), calls=k, facts=facts)


# ---------------------------------------------------------------------------------------------
# GEMV kernel (CuPy RawKernel)

_GEMV_SOURCE = r"""
// y[m, n] = sum_k x[m, k] * w[n, k] + bias[n] for the call's ROWS rows (a few: the M=3 linears).
// One warp per output column n streams row n of W once, VEC elements per load, and applies it to all
// ROWS rows of x (small, served from L1/L2); fp32 accumulators; a warp-shuffle reduction; lane 0
// adds the bias and rounds once to the output dtype.
#define ROWS @ROWS@
#define VEC @VEC@
#define BLOCK @BLOCK@  // threads per block: the launch bound lets ptxas size the registers for it
typedef @VEC_T@ vec_t;    // VEC elements in one 4, 8 or 16 byte load
typedef @ELEM_T@ elem_t;  // storage type: unsigned short holds bf16 bits

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(unsigned short v) { return __uint_as_float(((unsigned int)v) << 16); }

__device__ __forceinline__ void store(float* p, float v) { *p = v; }
__device__ __forceinline__ void store(unsigned short* p, float v) {
    // float -> bf16, round to nearest even; NaN stays a (quiet) NaN
    unsigned int u = __float_as_uint(v);
    if ((u & 0x7fffffffu) > 0x7f800000u) { *p = (unsigned short)((u >> 16) | 0x40u); return; }
    u += 0x7fffu + ((u >> 16) & 1u);
    *p = (unsigned short)(u >> 16);
}

extern "C" __global__ void __launch_bounds__(BLOCK)
gemv_rows(const elem_t* __restrict__ x, const elem_t* __restrict__ w, const elem_t* __restrict__ bias,
          elem_t* __restrict__ y, const int n_cols, const int k_len, const int has_bias)
{
    const int lane = threadIdx.x & 31;
    const int n = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (n >= n_cols) return;  // n is the same for the whole warp: it leaves together

    float acc[ROWS];
#pragma unroll
    for (int m = 0; m < ROWS; ++m) acc[m] = 0.0f;

    const int n_vec = k_len / VEC;
    const vec_t* w_row = reinterpret_cast<const vec_t*>(w + (size_t)n * k_len);
#pragma unroll 4
    for (int v = lane; v < n_vec; v += 32) {
        const vec_t wv = w_row[v];  // consecutive lanes read consecutive vectors: coalesced
        const elem_t* we = reinterpret_cast<const elem_t*>(&wv);
#pragma unroll
        for (int m = 0; m < ROWS; ++m) {
            const vec_t xv = __ldg(reinterpret_cast<const vec_t*>(x + (size_t)m * k_len) + v);
            const elem_t* xe = reinterpret_cast<const elem_t*>(&xv);
#pragma unroll
            for (int j = 0; j < VEC; ++j) acc[m] = fmaf(to_f32(we[j]), to_f32(xe[j]), acc[m]);
        }
    }

#pragma unroll
    for (int m = 0; m < ROWS; ++m) {
        float s = acc[m];
#pragma unroll
        for (int offset = 16; offset > 0; offset >>= 1) s += __shfl_down_sync(0xffffffffu, s, offset);
        acc[m] = s;
    }
    if (lane == 0) {
        const float b = has_bias ? to_f32(bias[n]) : 0.0f;
#pragma unroll
        for (int m = 0; m < ROWS; ++m) store(y + (size_t)m * n_cols + n, acc[m] + b);
    }
}
"""


def gemv_source(dtype: str, rows: int, vector_width: int, block_size: int) -> str:
    """The kernel's CUDA C for one dtype, row count, vector width and block size."""
    elem = {"bfloat16": 2, "float32": 4}[dtype]
    vec_bytes = vector_width * elem
    vec_type = VECTOR_BYTES[vec_bytes][0 if dtype == "bfloat16" else 1]
    elem_type = "unsigned short" if dtype == "bfloat16" else "float"
    return (_GEMV_SOURCE.replace("@ROWS@", str(rows)).replace("@VEC@", str(vector_width))
            .replace("@BLOCK@", str(block_size))
            .replace("@VEC_T@", vec_type).replace("@ELEM_T@", elem_type))


def gemv_launch_problem(rows: int, k_len: int, dtype: str, block_size: int, vector_width: int) -> str | None:
    """Why this GEMV configuration cannot launch, or None; pure arithmetic, before compiling."""
    if dtype not in GEMV_DTYPES:
        return f"dtype {dtype}: the kernel is written for {', '.join(GEMV_DTYPES)}"
    if block_size % 32 or not 32 <= block_size <= 1024:
        return f"block_size={block_size}: whole warps, 32 to 1024 threads"
    elem = 2 if dtype == "bfloat16" else 4
    if vector_width * elem not in VECTOR_BYTES:
        return (f"vector_width={vector_width}: {vector_width} x {elem} B is not a 4, 8 or 16 byte load "
                f"(for {dtype}: {', '.join(str(b // elem) for b in VECTOR_BYTES if b >= elem)})")
    if k_len % vector_width:
        return f"K={k_len} is not a multiple of vector_width={vector_width}"
    if rows > GEMV_MAX_ROWS:
        return f"{rows} rows: the kernel keeps one accumulator per row, at most {GEMV_MAX_ROWS}"
    return None


def gemv_grid(n_cols: int, block_size: int) -> int:
    """Blocks: one warp per output column."""
    warps = block_size // 32
    return -(-n_cols // warps)


@functools.lru_cache(maxsize=32)
def _gemv_kernel(dtype: str, rows: int, vector_width: int, block_size: int) -> Any:
    import cupy

    return cupy.RawKernel(gemv_source(dtype, rows, vector_width, block_size), "gemv_rows")


@EXPERIMENT.variant(needs=("cuda", "cupy"))
def gemv(w: Workload, block_size: int = 256, vector_width: int = 8) -> Prepared:
    """The call's rows times W^T with the CuPy GEMV kernel (W streamed once, vector loads)."""
    x, weight, bias = _inputs(w)
    rows, k_len = x.shape
    n_cols = weight.shape[0]
    dtype = dtype_name(x.dtype)
    problem = gemv_launch_problem(rows, k_len, dtype, block_size, vector_width)
    if problem is not None:
        raise VariantSkipped(f"cannot launch: {problem}")
    _require_weight_streaming(w)
    missing = [] if str(w.device).startswith("cuda") else [f"needs CUDA: a CuPy CUDA kernel (device is {w.device})"]
    try:
        cupy = importlib.import_module("cupy")
    except ImportError as exc:
        missing.append(f"needs cupy ({exc}): {install_hint('cupy')}")
    if missing:
        raise VariantSkipped("; ".join(missing))
    vec_bytes = vector_width * element_size(x.dtype)
    for name, t in (("x", x), ("weight", weight)):
        if not t.is_contiguous() or t.data_ptr() % vec_bytes:
            raise VariantSkipped(f"cannot launch: {name} is not contiguous and {vec_bytes}-byte aligned")
    import numpy as np

    kernel = _gemv_kernel(dtype, rows, vector_width, block_size)
    grid = gemv_grid(n_cols, block_size)
    has_bias = np.int32(bias is not None)
    device_index = x.device.index if x.device.index is not None else torch.cuda.current_device()

    def run() -> torch.Tensor:
        y = torch.empty((rows, n_cols), device=x.device, dtype=x.dtype)
        # Pointers go by value (8 bytes each, as the kernel's pointer parameters): CuPy has no bf16
        # dtype, and no per-call array conversion is timed. Launched on torch's current stream.
        args = (np.uint64(x.data_ptr()), np.uint64(weight.data_ptr()),
                np.uint64((bias if bias is not None else y).data_ptr()), np.uint64(y.data_ptr()),
                np.int32(n_cols), np.int32(k_len), has_bias)
        stream = torch.cuda.current_stream(x.device).cuda_stream
        with cupy.cuda.Device(device_index), cupy.cuda.ExternalStream(stream):
            kernel((grid,), (block_size,), args)
        return y

    run()  # compile (NVRTC, cached by CuPy) outside the timed calls
    torch.cuda.synchronize(x.device)
    facts = {"kernel": "cupy gemv_rows", "block_size": block_size, "vector_width": vector_width,
             "vector_bytes": vec_bytes, "grid": grid, "rows": rows}
    return Prepared(run, facts=facts)


# ---------------------------------------------------------------------------------------------
# Evidence: time per call next to the weight-bandwidth bound


@EXPERIMENT.annotate
def add_weight_stream(card: Any, w: Workload) -> None:
    """card.extra["weight_stream"]: per-call time next to the time the weight bytes need at peak bandwidth.

    The weight is read once per invocation, so per original call it is N x K x element size / calls.
    """
    variant = card.extra.get("variant") or {}
    calls = int(variant.get("calls") or 1)
    per_call_us = variant.get("per_call_us")
    weight = w.inputs["weight"]
    weight_bytes = weight.numel() * weight.element_size()
    per_call_bytes = weight_bytes / calls
    peaks = card_peaks(card.extra.get("peaks"), "float32", w.device)
    bandwidth, source = (peaks.bandwidth, peaks.bandwidth_source) if peaks else (None, None)
    bound_us = per_call_bytes / bandwidth * 1e6 if bandwidth else None
    dram = dram_bytes(card)
    evidence: dict[str, Any] = {
        "per_call_us": per_call_us,
        "bandwidth_bound_us_per_call": bound_us,
        "time_over_bound": per_call_us / bound_us if per_call_us and bound_us else None,
        "weight_bytes_per_call": per_call_bytes,
        "calls_per_invocation": calls,
        "dram_bytes_per_call_profiled": dram / calls if dram is not None else None,
        "dram_bytes_source": card.extra.get("metrics_source"),
        "achieved_weight_gbps": per_call_bytes / per_call_us / 1e3 if per_call_us else None,
        "peak_gbps": bandwidth / 1e9 if bandwidth else None,
        "peak_source": source,
    }
    llc = peaks.llc_bytes if peaks else None
    if llc and weight_bytes <= llc:
        evidence["note"] = (f"the {weight_bytes / 1e6:.1f} MB weight fits in the {llc / 1e6:.0f} MB last-level "
                            "cache: repeated calls need not reach DRAM, so the bound is no floor here")
    card.extra["weight_stream"] = evidence
