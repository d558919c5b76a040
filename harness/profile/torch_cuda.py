"""CUDA backend without Nsight Compute: torch.profiler's kernel trace plus a roofline estimate.

Measured, from the Kineto trace of one call of `fn` (CUPTI activity records):
- dur_us, grid, block (products of the launch dimensions), regs;
- smem_dyn_kb / smem_static_b only when the kernel uses no shared memory (both 0): Kineto writes
  static + dynamic as one sum, so a kernel with shared memory leaves both None and its total is
  kept in `extra["launch"]["shared_memory_b"]`;
- waves, occ_limit_regs, occ_limit_smem: derived from the launch configuration and the device's
  limits by the occupancy calculator rules (harness.hardware.occupancy). occ_limit_smem assumes the
  largest shared memory carveout; Nsight Compute reports it under the carveout the driver picked,
  which can be smaller (a larger number here) but is only picked where it does not bind, so waves
  agree.

Estimated (listed in `extra["estimated_fields"]`), for the dominant kernel only — the longest
launch, which is given all of the workload's FLOPs and minimum bytes, when the workload is one op:
- sm_pct = FLOPs / duration / compute peak x 100, and tensor_pct the same number when the math runs
  on tensor cores (bf16, fp16, or fp32 with TF32 allowed for the op); the compute peak is bf16,
  fp16, tf32 or fp32 by WorkloadFacts.dtype and torch's TF32 switches for the op kind;
- dram_pct = minimum bytes / duration / DRAM bandwidth x 100, a lower bound on the traffic.
The other kernels (layout transposes, workspace fills, epilogues) get no estimate: spreading the
workload over them by duration would give every kernel the same percentages and erase the
difference the classifier looks for. A cast (no FLOPs) gets no compute estimate. A chunk
(`WorkloadFacts.per_shape`: a whole decoder call or DiT block) gets no estimate at all: its FLOPs and
bytes are the whole chunk's, hundreds of ops, and given to its longest kernel they read as one conv
at 11,252% of peak (H200, vae_decode_chunk); its time is broken down per contained card instead
(harness.cards.chunk_breakdown). Peaks come from harness.hardware.gpu_peaks (measured > practical >
datasheet), recorded in `Profile.peaks`.

Everything else (l2_pct, warps, cycles, DRAM bytes, hit rates) needs hardware counters: None.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from harness.boundary.requests import Measure
from harness.cards.fields import SOURCE_TORCH_CUDA_TRACE
from harness.cards.model import Kernel, empty_metrics
from harness.hardware.gpu_peaks import TENSOR_CORE_KEYS, DevicePeaks, Peak
from harness.hardware.occupancy import SmLimits
from harness.profile.base import Profile, ProfilerUnavailable, WorkloadFacts
from harness.profile.gpu_peaks import for_current_device
from harness.profile.torch_trace import Trace, TraceKernel, launch_stats, load_trace

FLOPS_ATTRIBUTION = "dominant_kernel"
CHUNK_ATTRIBUTION = "none (a chunk: its FLOPs are the whole chunk's, not one kernel's)"


@dataclass(frozen=True)
class Tf32Switches:
    """Whether fp32 math may run as TF32 on tensor cores, per torch library."""

    conv: bool  # torch.backends.cudnn.allow_tf32 (default True)
    matmul: bool  # torch.backends.cuda.matmul.allow_tf32 (default False)

    @classmethod
    def current(cls) -> Tf32Switches:
        import torch

        return cls(conv=bool(torch.backends.cudnn.allow_tf32), matmul=bool(torch.backends.cuda.matmul.allow_tf32))


def compute_peak_key(dtype: str, op_kind: str, tf32: Tf32Switches) -> str | None:
    """Which throughput peak bounds the op's math (a gpu_peaks key), or None if unknown."""
    if dtype == "bfloat16":
        return "bf16_tflops"
    if dtype == "float16":
        return "fp16_tflops"
    if dtype == "float32":
        uses_tf32 = {"conv3d": tf32.conv, "conv2d": tf32.conv, "linear": tf32.matmul,
                     "attention": tf32.matmul}.get(op_kind, False)
        return "tf32_tflops" if uses_tf32 else "fp32_tflops"
    return None


def roofline_pcts(
    flops: float | None,
    min_bytes: float | None,
    dur_us: float,
    compute: Peak | None,
    dram: Peak | None,
    tensor_cores: bool,
) -> dict[str, float]:
    """Estimated utilisation percentages of one kernel; fields that cannot be estimated are absent.

    Not clamped: a value above 100 means the peak is too low or the bytes came from L2, which the
    caller reports rather than hides.
    """
    out: dict[str, float] = {}
    if dur_us <= 0:
        return out
    seconds = dur_us * 1e-6
    if flops and compute is not None:
        pct = flops / seconds / (compute.value * 1e12) * 100.0
        out["sm_pct"] = pct
        if tensor_cores:
            out["tensor_pct"] = pct
    if min_bytes and dram is not None:
        out["dram_pct"] = min_bytes / seconds / (dram.value * 1e12) * 100.0
    return out


def build_profile(
    trace: Trace,
    facts: WorkloadFacts,
    peaks: DevicePeaks,
    tf32: Tf32Switches,
    settings: Mapping[str, Any] | None = None,
) -> Profile:
    """Report-format kernels from a parsed trace (no GPU needed: tests run it on real traces)."""
    key = compute_peak_key(facts.dtype, facts.op_kind, tf32)
    compute = peaks.peak(key) if key else None
    dram = peaks.peak("dram_tbps")
    dominant = max(trace.kernels, key=lambda k: k.dur_us, default=None)
    estimated = None if facts.per_shape else dominant  # a chunk's FLOPs belong to no single kernel
    notes: list[str] = []

    kernels = []
    for k in trace.kernels:
        device = trace.device_of(k)
        limits = device.limits if device and device.limits else peaks.limits
        estimate = (
            roofline_pcts(facts.flops, facts.min_bytes, k.dur_us, compute, dram, key in TENSOR_CORE_KEYS)
            if k is estimated
            else {}
        )
        kernel = _kernel(k, limits, estimate)
        if facts.per_shape:  # a chunk: which op of the model each kernel belongs to (harness.trial.chunks.attribute)
            callers = trace.callers(k)
            if callers:
                kernel.extra.update(within=callers[0].name, within_shapes=callers[0].input_dims,
                                    launched_by=callers[-1].name)
        kernels.append(kernel)
        if any(v > 100.0 for v in estimate.values()):
            shown = ", ".join(f"{name}={value:.0f}" for name, value in estimate.items())
            notes.append(
                f"{k.name[:80]}: an estimate exceeds 100% ({shown}): the peak is below what this GPU"
                " reaches, or the bytes were served from L2"
            )

    gpu = peaks.device_name or peaks.key
    if dominant is None:
        notes.append("no CUDA kernels recorded: fn launched none, or CUPTI is unavailable to torch.profiler")
    elif estimated is None:
        notes.append("a chunk: no kernel is given the chunk's FLOPs or bytes, so no sm/tensor/dram estimate; "
                     "its time is broken down per contained card")
    elif key is None or compute is None:
        notes.append(f"no compute peak for dtype {facts.dtype!r} on {gpu}: sm_pct/tensor_pct not estimated")
    if estimated is not None and dram is None:
        notes.append(f"no DRAM peak for {gpu}: dram_pct not estimated")
    notes.append(
        "torch_cuda backend: dur_us and launch fields are measured from the CUDA trace; waves and "
        "occupancy limits are derived from them; sm_pct/tensor_pct/dram_pct of the dominant kernel "
        "are roofline ESTIMATES; counter fields are None."
    )

    used = {"compute": compute.to_dict() if compute else None, "dram": dram.to_dict() if dram else None}
    return Profile(
        kernels=kernels,
        backend="torch_cuda",
        metrics_source=SOURCE_TORCH_CUDA_TRACE,
        peaks={**peaks.to_dict(), "compute_peak": key, "used": used},
        settings={
            "flops_attribution": CHUNK_ATTRIBUTION if facts.per_shape else FLOPS_ATTRIBUTION,
            "dominant_kernel": dominant.name if dominant else None,
            "tf32_conv": tf32.conv,
            "tf32_matmul": tf32.matmul,
            "smem_carveout": "largest (occupancy API default)",
            **(settings or {}),
        },
        notes=notes,
    )


def _kernel(k: TraceKernel, limits: SmLimits | None, estimate: dict[str, float]) -> Kernel:
    metrics = empty_metrics()
    metrics["dur_us"] = k.dur_us
    if k.grid is not None:
        metrics["grid"] = float(k.grid)
    if k.block is not None:
        metrics["block"] = float(k.block)
    if k.registers_per_thread is not None:
        metrics["regs"] = float(k.registers_per_thread)
    if k.shared_memory_b == 0:
        metrics["smem_dyn_kb"] = 0.0
        metrics["smem_static_b"] = 0.0

    launch: dict[str, Any] = {
        "grid_dim": list(k.grid_dim) if k.grid_dim else None,
        "block_dim": list(k.block_dim) if k.block_dim else None,
        "shared_memory_b": k.shared_memory_b,
        "device": k.device,
        "stream": k.stream,
    }
    stats = launch_stats(k, limits) if limits is not None else None
    if stats is not None:
        metrics["waves"] = stats.waves
        occ = stats.occupancy
        metrics["occ_limit_regs"] = float(occ.limit_regs) if occ.limit_regs is not None else None
        metrics["occ_limit_smem"] = float(occ.limit_smem) if occ.limit_smem is not None else None
        launch["occupancy"] = occ.to_dict()
    if k.est_achieved_occupancy_pct is not None:
        launch["kineto_est_achieved_occupancy_pct"] = k.est_achieved_occupancy_pct

    metrics.update(estimate)
    return Kernel(
        name=k.name,
        metrics=metrics,
        extra={
            "metrics_source": SOURCE_TORCH_CUDA_TRACE,
            "estimated_fields": sorted(estimate),
            "launch": launch,
        },
    )


class TorchCudaProfiler:
    """Profile one call of `fn` with torch.profiler's CUDA activity (CUPTI), no Nsight Compute."""

    name = "torch_cuda"

    def __init__(
        self,
        *,
        device: int | None = None,
        measured_peaks: Mapping[str, float] | str | os.PathLike[str] | None = None,
        trace_dir: str | os.PathLike[str] | None = None,
    ):
        self.device = device
        self.measured_peaks = measured_peaks
        self.trace_dir = Path(trace_dir) if trace_dir is not None else None

    def profile(self, fn: Callable[[], Any], facts: WorkloadFacts, request: Measure | None = None) -> Profile:
        """Run `fn` (already warmed up) once under torch.profiler and return its kernels."""
        ensure_cuda()
        if facts.before_call is not None:  # before the trace starts: its work is not the call's
            facts.before_call()
        trace_path, trace = self._record(fn, record_shapes=facts.per_shape)
        peaks = for_current_device(self.device, self.measured_peaks)
        settings = {"trace_path": str(trace_path) if trace_path else None}
        return build_profile(trace, facts, peaks, Tf32Switches.current(), settings)

    def _record(self, fn: Callable[[], Any], record_shapes: bool = False) -> tuple[Path | None, Trace]:
        import torch
        from torch.profiler import ProfilerActivity, profile

        torch.cuda.synchronize(self.device)  # earlier work must not land inside the trace
        # Shapes for a chunk: its kernels are attributed to op cards by their top-level op's input shapes.
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=record_shapes) as prof:
            fn()
            torch.cuda.synchronize(self.device)
        if self.trace_dir is not None:
            self.trace_dir.mkdir(parents=True, exist_ok=True)
            fd, name = tempfile.mkstemp(prefix="torch_cuda_", suffix=".json", dir=self.trace_dir)
            os.close(fd)
            prof.export_chrome_trace(name)
            return Path(name), load_trace(name)
        with tempfile.TemporaryDirectory(prefix="harness-trace-") as tmp:
            path = Path(tmp) / "trace.json"
            prof.export_chrome_trace(str(path))
            return None, load_trace(path)


def ensure_cuda() -> None:
    """Raise ProfilerUnavailable (one line, with the reason) unless torch can use a CUDA device."""
    try:
        import torch
    except ImportError as exc:
        raise ProfilerUnavailable(f"torch is not importable ({exc}); install torch with CUDA") from None
    if not torch.cuda.is_available():
        build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
        raise ProfilerUnavailable(
            f"CUDA is not available: torch {torch.__version__} is {build} and sees no GPU; "
            "use the cpu backend or run on a CUDA machine"
        )
