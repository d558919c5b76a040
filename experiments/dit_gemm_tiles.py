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

import math
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable

import torch
import torch.nn.functional as F

from harness.cards.fields import COMPUTE_BOUND, L2_BANDWIDTH_BOUND, PARTIAL_WAVE_TAIL
from harness.correctness import unit_roundoff
from harness.experiment import Experiment, Prepared, VariantSkipped
from harness.profile.occupancy import SmLimits
from harness.workloads.base import Workload, dtype_name, element_size, parse_dtype

try:  # Triton is optional: it ships with torch's CUDA wheels, not with the CPU ones.
    import triton
    import triton.language as tl
except ImportError as _exc:  # pragma: no cover - depends on the install
    triton = None
    tl = None
    TRITON_MISSING: str | None = f"triton not installed ({_exc}); it comes with torch's CUDA wheels"
else:
    TRITON_MISSING = None

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

BLAS_LIBRARIES = ("cublas", "cublaslt")
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
WEIGHT_LAYOUTS = ("nk", "kn")  # nk: nn.Linear's [N, K] (F.linear, NT GEMM); kn: pre-transposed [K, N] (addmm, NN)

# Hopper (the report's H200): 228 KiB of shared memory per SM, of which one block may opt into 227 KiB
# (1 KiB is reserved per block). Used when no CUDA device can be asked.
HOPPER = SmLimits.for_arch(9, 0, 132)
MAX_REGS_PER_THREAD = 255  # what ptxas can give one thread
MMA_FRAGMENT = 16 * 8  # the smallest tensor-core MMA tile (m16n8k16): each warp needs at least one


def _inputs(w: Workload) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    return w.inputs["x"], w.inputs["weight"], w.inputs.get("bias")


def _is_cuda(w: Workload) -> bool:
    return str(w.device).startswith("cuda")


def _sync(w: Workload) -> None:
    if _is_cuda(w):
        torch.cuda.synchronize()


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
def blas_library(w: Workload, library: str = "cublaslt") -> Prepared:
    """The same F.linear with cuBLAS or cuBLASLt preferred for this call only."""
    if library not in BLAS_LIBRARIES:
        raise VariantSkipped(f"library={library!r}: choose {', '.join(BLAS_LIBRARIES)}")
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


@dataclass(frozen=True)
class TileConfig:
    BLOCK_M: int
    BLOCK_N: int
    BLOCK_K: int
    GROUP_M: int
    num_stages: int
    num_warps: int

    def smem_bytes(self, elem_size: int) -> int:
        """Shared memory of the software pipeline: num_stages buffers of one A and one B tile."""
        return self.num_stages * (self.BLOCK_M * self.BLOCK_K + self.BLOCK_K * self.BLOCK_N) * elem_size

    def acc_regs_per_thread(self) -> float:
        """fp32 accumulator registers each thread holds: the BLOCK_M x BLOCK_N tile over the block's threads."""
        return self.BLOCK_M * self.BLOCK_N / (32 * self.num_warps)

    def label(self) -> str:
        return (f"{self.BLOCK_M}x{self.BLOCK_N}x{self.BLOCK_K} group {self.GROUP_M}, "
                f"{self.num_stages} stages, {self.num_warps} warps")


def _power_of_two(n: int) -> bool:
    return n >= 1 and (n & (n - 1)) == 0


def device_limits(device: str) -> tuple[SmLimits, str]:
    """The SM limits launchability is judged against: the CUDA device's own, else Hopper's."""
    if str(device).startswith("cuda") and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(torch.device(device))
        try:
            limits = SmLimits.for_arch(
                props.major, props.minor, props.multi_processor_count,
                smem_per_block_optin=getattr(props, "shared_memory_per_block_optin", None),
                smem_per_sm=getattr(props, "shared_memory_per_multiprocessor", None),
            )
        except ValueError:  # an architecture the occupancy table lacks
            return HOPPER, f"{props.name} is not in the occupancy table: Hopper's limits assumed"
        return limits, f"{props.name} limits from torch.cuda.get_device_properties"
    return HOPPER, "Hopper's limits, assumed: no CUDA device here"


def launch_problem(config: TileConfig, elem_size: int, limits: SmLimits = HOPPER) -> str | None:
    """Why this tile configuration cannot launch (or cannot be lowered), or None when it can.

    Pure arithmetic, decided before anything is compiled:
    - BLOCK_M/N/K powers of two (tl.arange) and at least 16 (tl.dot's smallest operand);
    - num_warps a power of two up to 1024 threads; num_stages and GROUP_M at least 1;
    - shared memory: num_stages x (BLOCK_M x BLOCK_K + BLOCK_K x BLOCK_N) x element size within what
      one block may opt into (227 KiB on Hopper: 228 KiB per SM less the driver's 1 KiB per block);
    - registers: the fp32 accumulator alone (BLOCK_M x BLOCK_N / threads per thread) within the 255
      registers a thread can hold, and within the SM's register file;
    - warps vs tile: each warp needs at least one 16x8 MMA fragment of the output tile.
    """
    c = config
    for name in ("BLOCK_M", "BLOCK_N", "BLOCK_K"):
        value = getattr(c, name)
        if not _power_of_two(value) or value < 16:
            return f"{name}={value}: tl.arange needs a power of two and tl.dot at least 16"
    if c.GROUP_M < 1:
        return f"GROUP_M={c.GROUP_M}: at least 1"
    if c.num_stages < 1:
        return f"num_stages={c.num_stages}: at least 1"
    if not _power_of_two(c.num_warps) or c.num_warps * 32 > limits.max_threads_per_block:
        return f"num_warps={c.num_warps}: a power of two of at most {limits.max_threads_per_block // 32}"
    smem = c.smem_bytes(elem_size)
    available = limits.smem_per_block_optin
    if smem > available:
        return (f"shared memory {smem} B = {c.num_stages} stages x ({c.BLOCK_M}x{c.BLOCK_K} + "
                f"{c.BLOCK_K}x{c.BLOCK_N}) x {elem_size} B exceeds the {available} B one block may use")
    acc = c.acc_regs_per_thread()
    if acc > MAX_REGS_PER_THREAD:
        return (f"the {c.BLOCK_M}x{c.BLOCK_N} fp32 accumulator needs {acc:.0f} registers per thread with "
                f"{c.num_warps} warps; a thread holds at most {MAX_REGS_PER_THREAD}")
    if c.BLOCK_M * c.BLOCK_N > limits.regs_per_sm:
        return (f"the {c.BLOCK_M}x{c.BLOCK_N} fp32 accumulator alone exceeds the SM's "
                f"{limits.regs_per_sm} registers")
    if c.BLOCK_M * c.BLOCK_N < c.num_warps * MMA_FRAGMENT:
        return (f"a {c.BLOCK_M}x{c.BLOCK_N} tile gives {c.num_warps} warps less than one 16x8 MMA "
                "fragment each")
    return None


def padded(n: int, block: int) -> int:
    return math.ceil(n / block) * block


def executed_flops(m: int, n: int, k: int, block_m: int, block_n: int, block_k: int) -> float:
    """FLOPs a tiled kernel executes: every tile is whole, so M, N and K are padded to the tile.

    The masked loads feed zeros past the edges, but the MMAs still run over the whole tile (K
    included: its last BLOCK_K slab is padded too, which matters for K=144).
    """
    return 2.0 * padded(m, block_m) * padded(n, block_n) * padded(k, block_k)


def tile_count(m: int, n: int, block_m: int, block_n: int) -> int:
    return math.ceil(m / block_m) * math.ceil(n / block_n)


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
        # Grouped ordering: GROUP_M row-tiles are walked together so that the W tiles they share stay
        # in L2 (Triton's matmul tutorial).
        pid = tl.program_id(axis=0)
        num_pid_m = tl.cdiv(M, BLOCK_M)
        num_pid_n = tl.cdiv(N, BLOCK_N)
        num_pid_in_group = GROUP_M * num_pid_n
        group_id = pid // num_pid_in_group
        first_pid_m = group_id * GROUP_M
        group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
        pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
        pid_n = (pid % num_pid_in_group) // group_size_m

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
    # float32 inputs follow torch's matmul setting (IEEE unless TF32 is allowed); bf16/fp16 ignore it.
    precision = "tf32" if torch.backends.cuda.matmul.allow_tf32 else "ieee"
    compiled = _linear_kernel[grid](
        x, weight, bias if bias is not None else y, y,
        m, n, k,
        x.stride(0), x.stride(1), weight.stride(0), weight.stride(1), y.stride(0), y.stride(1),
        HAS_BIAS=bias is not None,
        BLOCK_M=config.BLOCK_M, BLOCK_N=config.BLOCK_N, BLOCK_K=config.BLOCK_K, GROUP_M=config.GROUP_M,
        INPUT_PRECISION=precision,
        num_warps=config.num_warps, num_stages=config.num_stages,
    )
    return y, compiled


def _compiled_facts(compiled: Any) -> dict[str, Any]:
    """Registers, spills and shared memory the compiler assigned (absent in the interpreter)."""
    facts: dict[str, Any] = {}
    for key, attr in (("regs_per_thread", "n_regs"), ("spilled_regs", "n_spills")):
        value = getattr(compiled, attr, None)
        if isinstance(value, int):
            facts[key] = value
    shared = getattr(getattr(compiled, "metadata", None), "shared", None)
    if isinstance(shared, int):
        facts["smem_bytes_compiled"] = shared
    return facts


@EXPERIMENT.variant(needs="cuda")
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
    limits, limits_source = device_limits(w.device)
    problem = launch_problem(config, elem, limits)
    if problem is not None:
        raise VariantSkipped(f"cannot launch: {problem} ({limits_source})")
    missing = [] if _is_cuda(w) else [f"needs CUDA: a Triton GPU kernel (device is {w.device})"]
    if triton is None:
        missing.append(TRITON_MISSING or "triton not installed")
    if missing:
        raise VariantSkipped("; ".join(missing))
    m, k = x.shape
    n = weight.shape[0]
    t0 = time.perf_counter()
    try:
        _, compiled = triton_linear(x, weight, bias, config)  # compiles once, here, not in the timed calls
        _sync(w)
    except triton.OutOfResources as exc:
        raise VariantSkipped(f"cannot launch: {exc}") from None
    compile_s = time.perf_counter() - t0
    tiles = tile_count(m, n, BLOCK_M, BLOCK_N)
    facts = {
        "kernel": "triton _linear_kernel",
        "tile": asdict(config),
        "tiles": tiles,
        "smem_bytes_estimate": config.smem_bytes(elem),
        "compile_s": round(compile_s, 3),
        **_compiled_facts(compiled),
    }
    return Prepared(lambda: triton_linear(x, weight, bias, config)[0],
                    executed_flops=executed_flops(m, n, k, BLOCK_M, BLOCK_N, BLOCK_K), facts=facts)


# ---------------------------------------------------------------------------------------------
# torch.compile reference


@EXPERIMENT.variant
def compiled(w: Workload, mode: str = "default") -> Prepared:
    """torch.compile of nn.Linear with the workload's weight and bias as frozen parameters."""
    if mode not in COMPILE_MODES:
        raise VariantSkipped(f"mode={mode!r}: choose {', '.join(COMPILE_MODES)}")
    x, weight, bias = _inputs(w)
    module = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None,
                             device=weight.device, dtype=weight.dtype)
    # Parameters, not closure tensors: CUDA-graph modes then treat them as static instead of copying
    # them into the graph's buffers on every replay.
    module.weight = torch.nn.Parameter(weight, requires_grad=False)
    if bias is not None:
        module.bias = torch.nn.Parameter(bias, requires_grad=False)
    # A fresh Dynamo state per trial: repeated compiles of the same code would otherwise run into the
    # recompile limit, past which Dynamo silently falls back to eager.
    torch.compiler.reset()
    fn = torch.compile(module, mode=None if mode == "default" else mode, fullgraph=True, dynamic=False)
    t0 = time.perf_counter()
    try:
        with torch.no_grad():
            fn(x)  # compile (and autotune) here, not inside the first timed call
        _sync(w)
    except Exception as exc:  # Inductor needs a C++ compiler on the CPU, Triton on CUDA
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise VariantSkipped(f"torch.compile(mode={mode}) failed on {w.device}: {first[:300]}") from None
    compile_s = time.perf_counter() - t0

    def run() -> torch.Tensor:
        with torch.no_grad():
            return fn(x)

    return Prepared(run, facts={"compile_mode": mode, "compile_s": round(compile_s, 2)})


# ---------------------------------------------------------------------------------------------
# Compute dtype and weight layout (the CPU's counter-experiment)


@EXPERIMENT.variant
def dtype_layout(w: Workload, compute_dtype: str = "float32", weight_layout: str = "nk") -> Prepared:
    """GEMM in `compute_dtype` with weights stored in it, [N, K] (F.linear) or pre-transposed [K, N] (addmm)."""
    try:
        dtype = parse_dtype(compute_dtype, "compute_dtype")
    except ValueError as exc:
        raise VariantSkipped(str(exc)) from None
    if weight_layout not in WEIGHT_LAYOUTS:
        raise VariantSkipped(f"weight_layout={weight_layout!r}: choose {', '.join(WEIGHT_LAYOUTS)}")
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


_CUDA_PEAK_KEYS = {"bfloat16": "bf16_tflops", "float16": "fp16_tflops"}


def compute_peak(peaks: Any, dtype: str, device: str) -> tuple[float | None, str | None]:
    """The math peak (FLOP/s) for `dtype` from the card's profiler peaks, and where it came from.

    CPU peaks: `flops_per_s[dtype]`, measured on this machine. GPU peaks (torch_cuda backend):
    `peaks[key]["value"]` in TFLOP/s, key by dtype (float32 is TF32 when torch allows it). The ncu
    backend records no peaks: the device's entry in harness.profile.gpu_peaks is used then.
    """
    if isinstance(peaks, dict) and isinstance(peaks.get("flops_per_s"), dict):
        value = peaks["flops_per_s"].get(dtype)
        return (float(value), f"measured CPU {dtype} matmul peak") if value else (None, None)
    key = _CUDA_PEAK_KEYS.get(dtype)
    if dtype == "float32":
        key = "tf32_tflops" if torch.backends.cuda.matmul.allow_tf32 else "fp32_tflops"
    if key is None:
        return None, None
    table = peaks.get("peaks") if isinstance(peaks, dict) else None
    if not isinstance(table, dict) and str(device).startswith("cuda") and torch.cuda.is_available():
        from harness.profile.gpu_peaks import for_current_device

        table = for_current_device().to_dict().get("peaks")
    entry = table.get(key) if isinstance(table, dict) else None
    if isinstance(entry, dict) and isinstance(entry.get("value"), (int, float)):
        return float(entry["value"]) * 1e12, f"{key} ({entry.get('source', '?')})"
    return None, None


def _sm_count(device: str, peaks: Any) -> int | None:
    limits = peaks.get("limits") if isinstance(peaks, dict) else None
    if isinstance(limits, dict) and isinstance(limits.get("sm_count"), int):
        return limits["sm_count"]
    if str(device).startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.get_device_properties(torch.device(device)).multi_processor_count
    return None


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
    sms = _sm_count(w.device, card.extra.get("peaks"))
    if isinstance(tile, dict) and sms:
        tiles = tile_count(w.shape["M"], w.shape["N"], tile["BLOCK_M"], tile["BLOCK_N"])
        gemm["waves_one_tile_per_sm"] = tiles / sms
        gemm["last_wave_fill_pct"] = (tiles % sms or sms) / sms * 100.0
    card.extra["gemm"] = gemm
