"""Another conv3d kernel, tile or batching in the baseline's own dtype for the VAE's conv3d cards.

The report's VAE convs run fp32 NCDHW through cuDNN's TF32 implicit GEMM (sm90_xmma_fprop_implicit_gemm
..._tf32f32...), about 2.9x their TF32 roofline in sum. Their cards ask for the same dtype with a better
tile or kernel (compute_bound), a batch or tile change that fills the last wave (partial_wave_tail), a
blocking change that cuts L2 traffic (l2_bandwidth_bound). vae_channels_last changes only the layout
and vae_bf16 only the dtype; here the dtype and math mode stay the baseline's and the kernel changes:

- `cudnn_algorithm(benchmark, memory_format)`: cuDNN's own algorithm search (cudnn.benchmark) against
  its heuristics, on NCDHW or channels_last_3d; benchmark and TF32 are set for each call (TF32 as the
  baseline runs it, harness.trial.torch_state.PINNED) and restored after it (CUDA only);
- `triton_implicit_gemm(BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, num_stages, num_warps)`: our Triton
  implicit-GEMM conv (kernel.py) whose tile is searched; a tile that cannot launch, or whose BLOCK_N is
  wider than the output channels need (the GEMM view's N), is pruned before compiling; it executes whole
  tiles, so its executed FLOPs are the GEMM view padded to the tile (CUDA only; tested under Triton's
  interpreter on a CPU);
- `frame_batching(k)`: k consecutive streaming calls as one call on k x T_new + the cached frames (the
  harness's k calls, `w.calls(k)`: harness.workloads.frames): a k-times larger M per weight read, time
  per original call = time / k (every device);
- `native_cpu`, `im2col_gemm(layout)`: the CPU's paths: torch's native vol2col conv with oneDNN
  disabled for the call (oneDNN is the baseline's CPU path), and an explicit im2col + one GEMM
  (im2col.py) (CPU only);
- `compiled(mode)`: torch.compile of the same Conv3d (Inductor; max-autotune benchmarks its own conv
  templates against the library call), as a reference for what a search can reach.

Every variant keeps float32 tensors and the baseline's math mode (TF32 on cuDNN, IEEE fp32 on a CPU), so
it is held to the same-precision bound; the Triton kernel computes in TF32 whenever torch lets convs use it
and declares it (precision "tf32"), since cuDNN may still run the baseline in true fp32 (on the H200 a K=24
conv: Triton's TF32 erred 5.8e-4 against cuDNN's 1.7e-7, refused by the same-precision bound).

A captured model's conv2d cards take the variants that are not about a conv3d: cudnn_algorithm (its
`channels_last_3d` is then the 4-D channels_last), native_cpu, im2col_gemm (the conv2d as a conv3d of one
frame with kT = 1, `gemm_shape`) and compiled. The Triton kernel is a conv3d's, and frame batching batches a
conv3d's streaming windows: on a conv2d card both are skipped, saying so.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from typing import Any, Literal

import torch
import torch.nn.functional as F

from experiments.vae_conv_kernels.im2col import Im2colLayout, im2col_conv3d
from experiments.vae_conv_kernels.kernel import ConvGemm, conv_input_precision, triton_conv3d
from harness.api.compiled import CompileMode, compile_call, frozen_module
from harness.api.experiment import Experiment, Prepared, VariantSkipped
from harness.api.numerics import cudnn_conv_tf32
from harness.api.peaks import card_peaks, sm_count
from harness.api.tiles import HOPPER, TileConfig, executed_flops, padded, tile_count, waves, widest_useful_block
from harness.api.triton_support import check_launchable, first_launch
from harness.cards.card_check import executed_over_nominal
from harness.cards.fields import COMPUTE_BOUND, L2_BANDWIDTH_BOUND, PARTIAL_WAVE_TAIL, UNRESOLVED
from harness.cards.measures import sum_metric
from harness.workloads.base import Workload
from harness.workloads.frames import calls_on_dim0
from harness.workloads.params import WorkloadError, element_size

EXPERIMENT = Experiment(
    name="vae_conv_kernels",
    op_kinds=("conv3d", "conv2d"),
    hypothesis="another conv3d kernel or tile in the same dtype and math mode (cuDNN's benchmarked algorithm, "
    "a searched Triton implicit-GEMM tile, Inductor; on a CPU the native or im2col path) raises effective "
    "TFLOP/s at the same nominal FLOPs; k streaming calls batched into one (a k-times larger M) fill the "
    "last wave and read the weight once per k calls",
    check="effective_flops",
    classes=(COMPUTE_BOUND, PARTIAL_WAVE_TAIL, L2_BANDWIDTH_BOUND, UNRESOLVED),
    metric_set="report+bytes",  # lts bytes for the l2_bandwidth_bound cards' own check (ncu only)
)

ConvFormat = Literal["contiguous", "channels_last_3d"]
FORMATS = {"contiguous": torch.contiguous_format, "channels_last_3d": torch.channels_last_3d}


def cpu_only(device: str) -> str | None:
    """The CPU's conv paths: on CUDA the mkldnn switch does nothing (cuDNN runs the conv) and im2col's
    columns (K times the input) would take tens of GB at full scale."""
    return f"a CPU conv path; device is {device}" if device.startswith("cuda") else None


def _conv(w: Workload) -> Callable[..., torch.Tensor]:
    """The card's conv: F.conv2d for a conv2d card, F.conv3d for a conv3d one."""
    return F.conv2d if w.op_kind == "conv2d" else F.conv3d


def _memory_format(w: Workload, name: str) -> torch.memory_format:
    """A memory_format parameter in the card's rank: a conv2d's channels_last_3d is the 4-D channels_last."""
    fmt = FORMATS[name]
    return torch.channels_last if fmt == torch.channels_last_3d and w.op_kind == "conv2d" else fmt


def gemm_shape(w: Workload) -> dict[str, Any]:
    """The conv's shape in a conv3d's form (ConvGemm, im2col): a conv2d is a conv3d of one frame with kT = 1."""
    s = w.shape
    if w.op_kind != "conv2d":
        return s
    return {"input": [*s["input"][:2], 1, *s["input"][2:]], "weight": [*s["weight"][:2], 1, *s["weight"][2:]],
            "output": [*s["output"][:2], 1, *s["output"][2:]], "stride": [1, *s["stride"]],
            "padding": [0, *s["padding"]], "dilation": [1, *s["dilation"]], "groups": s["groups"]}


def _conv3d_only(w: Workload, why: str) -> None:
    """Skip a conv3d-only variant on a conv2d card, saying why (it can run on other cards of the same run, so
    it is not a `needs` of the device)."""
    if w.op_kind == "conv2d":
        raise VariantSkipped(f"conv3d only: {why}")


def _inputs(w: Workload) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    return w.inputs["input"], w.inputs["weight"], w.inputs.get("bias")


def _conv_args(w: Workload) -> tuple[Any, Any, Any, int]:
    s = w.shape
    return s["stride"], s["padding"], s["dilation"], s["groups"]


def _is_cuda(w: Workload) -> bool:
    return str(w.device).startswith("cuda")


def _sync(w: Workload) -> None:
    if _is_cuda(w):
        torch.cuda.synchronize()


def math_mode(device: str, cudnn_tf32: bool) -> str:
    """What float32 conv math runs as: TF32 on a GPU when cuDNN may use it (the baseline's mode), else fp32."""
    return "tf32" if device.startswith("cuda") and cudnn_tf32 else "fp32"


# The aten op that names the CPU convolution path one F.conv3d (F.conv2d) call took (torch picks oneDNN only
# above a size threshold: a scaled-down shape may take the native path even with oneDNN enabled).
CPU_CONV_OPS = {"aten::mkldnn_convolution": "onednn", "aten::slow_conv3d_forward": "native",
                "aten::slow_conv_dilated3d": "native (dilated)", "aten::_slow_conv2d_forward": "native",
                "aten::slow_conv_dilated2d": "native (dilated)"}


def cpu_conv_path(fn: Callable[[], Any]) -> str:
    """The CPU convolution path of one call of `fn`, read from torch.profiler's op names ("unknown" if none)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    names = {event.name for event in prof.events()}
    return next((path for op, path in CPU_CONV_OPS.items() if op in names), "unknown")


def _path_facts(w: Workload, fn: Callable[[], Any]) -> dict[str, Any]:
    """The math mode, and on a CPU the conv path fn takes (on CUDA the profile's kernel names say it)."""
    if _is_cuda(w):
        return {"math_mode": math_mode(w.device, cudnn_conv_tf32())}
    return {"math_mode": "fp32", "cpu_path": cpu_conv_path(fn)}


@contextmanager
def set_for_call(*settings: tuple[Any, str, Any]) -> Iterator[None]:
    """(owner, attribute, value) settings such as (torch.backends.cudnn, "benchmark", True) for one call,
    restored after it, so no trial leaks its choice into the next; a value already set is left alone."""
    before = [(owner, name, getattr(owner, name)) for owner, name, _ in settings]
    for owner, name, value in settings:
        if getattr(owner, name) != value:
            setattr(owner, name, value)
    try:
        yield
    finally:
        for owner, name, value in reversed(before):
            if getattr(owner, name) != value:
                setattr(owner, name, value)


# ---------------------------------------------------------------------------------------------
# Baseline


@EXPERIMENT.baseline
def fp32_ncdhw(w: Workload) -> Prepared:
    """The report's baseline: F.conv3d (F.conv2d) on the fp32 inputs as given (NCDHW, NCHW; TF32 on cuDNN by
    torch's default)."""
    x, weight, bias = _inputs(w)
    args, conv = _conv_args(w), _conv(w)

    def run() -> torch.Tensor:
        return conv(x, weight, bias, *args)

    return Prepared(run, facts=_path_facts(w, run))


# ---------------------------------------------------------------------------------------------
# cuDNN: benchmarked algorithm vs heuristics


@EXPERIMENT.variant(needs="cuda")
def cudnn_algorithm(w: Workload, benchmark: bool = True, memory_format: ConvFormat = "contiguous") -> Prepared:
    """F.conv3d with cuDNN's algorithm benchmarked (cudnn.benchmark) or picked by its heuristics, on NCDHW or
    channels_last_3d input and weight; benchmark set per call and restored (TF32: the card's pinned math mode,
    as the baseline's)."""
    if not benchmark and memory_format == "contiguous":
        raise VariantSkipped("benchmark=false, memory_format=contiguous is the baseline itself")
    if not _is_cuda(w):
        raise VariantSkipped(f"needs CUDA: cudnn.benchmark picks a cuDNN algorithm (device is {w.device})")
    fmt = _memory_format(w, memory_format)
    x, weight = (w.inputs[name].contiguous(memory_format=fmt) for name in ("input", "weight"))
    bias = w.inputs.get("bias")
    args, conv = _conv_args(w), _conv(w)
    tf32 = cudnn_conv_tf32()  # the card's pinned math mode (harness.trial.torch_state), the timed calls' too
    settings = ((torch.backends.cudnn, "benchmark", benchmark),)

    def run() -> torch.Tensor:
        with set_for_call(*settings):
            return conv(x, weight, bias, *args)

    t0 = time.perf_counter()
    run()  # benchmark mode times cuDNN's algorithms on this first call: here, not in the timed ones
    _sync(w)
    facts = {"cudnn_benchmark": benchmark, "memory_format": memory_format, "math_mode": math_mode(w.device, tf32),
             "first_call_s": round(time.perf_counter() - t0, 3)}
    layout, planar = memory_format == "channels_last_3d", w.op_kind == "conv2d"
    owner, kept = ("model", "channels_last") if planar else ("vae.decoder", "channels_last_3d")
    recipe = "\n".join(filter(None, [
        "torch.backends.cudnn.benchmark = True  # once at start-up; every conv shape is timed on its first call"
        if benchmark else None,
        f"{owner}.to(memory_format=torch.{kept}); x = x.contiguous(memory_format=torch.{kept})" if layout else None]))
    # harness.trial.rounds carries channels_last_3d, not the 4-D channels_last of a conv2d: the recipe says it instead
    carried = layout and not planar
    carries = {name: {"memory_format": "channels_last_3d"} for name in ("input", "weight")} if carried else {}
    return Prepared(run, facts=facts, carries=carries, recipe=recipe)


# ---------------------------------------------------------------------------------------------
# Triton implicit GEMM with a searched tile


@EXPERIMENT.variant(needs=("cuda", "triton"))
def triton_implicit_gemm(
    w: Workload,
    BLOCK_M: int = 128,
    BLOCK_N: int = 128,
    BLOCK_K: int = 32,
    GROUP_M: int = 8,
    num_stages: int = 3,
    num_warps: int = 8,
) -> Prepared:
    """Our Triton implicit-GEMM conv3d with one tile configuration (pruned before compiling if it cannot launch,
    or if its BLOCK_N is wider than the output channels need). It computes in TF32 where torch lets convs use
    it, and says so (Prepared.precision): cuDNN may run the baseline in true fp32 even then (a small K)."""
    _conv3d_only(w, "our Triton implicit GEMM is a conv3d kernel (a conv2d's kernels: cudnn_algorithm, compiled)")
    gemm = ConvGemm.from_shape(w.shape)
    widest = widest_useful_block(gemm.n)
    if BLOCK_N > widest:  # the GEMM view's N is the output channels: a wider tile is padding, not reuse
        raise VariantSkipped(f"BLOCK_N={BLOCK_N} is wider than N={gemm.n} output channels need (BLOCK_N={widest} "
                             f"covers them): {padded(gemm.n, BLOCK_N) / gemm.n:.1f}x the N work, the rest padding")
    config = TileConfig(BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, num_stages, num_warps)
    x, weight, bias = _inputs(w)
    elem = element_size(x.dtype)
    check_launchable(config, elem, w.device)
    tf32 = conv_input_precision() == "tf32"
    facts = {
        "kernel": "triton _conv3d_kernel (implicit GEMM)",
        "tile": asdict(config),
        "gemm": gemm.as_dict(),
        "tiles": tile_count(gemm.m, gemm.n, BLOCK_M, BLOCK_N),
        "smem_bytes_estimate": config.smem_bytes(elem),
        "math_mode": "tf32" if tf32 else "fp32",
        **first_launch(lambda: triton_conv3d(x, weight, bias, gemm, config), w.device),
    }
    return Prepared(lambda: triton_conv3d(x, weight, bias, gemm, config)[0],
                    executed_flops=executed_flops(gemm.m, gemm.n, gemm.k, BLOCK_M, BLOCK_N, BLOCK_K),
                    precision="tf32" if tf32 else None, facts=facts)


# ---------------------------------------------------------------------------------------------
# Frame batching: k streaming calls in one


@EXPERIMENT.variant
def frame_batching(w: Workload, k: int = 4) -> Prepared:
    """One F.conv3d on k consecutive calls' frames (k x T_new new frames after the cached ones);
    time per call = time / k."""
    _conv3d_only(w, "it batches a conv3d's streaming frame windows; a conv2d call carries no frames over")
    if isinstance(k, bool) or not isinstance(k, int) or k < 2:
        raise VariantSkipped(f"k={k!r}: batching needs at least 2 calls (k=1 is the baseline itself)")
    _, weight, bias = _inputs(w)
    args = _conv_args(w)
    try:
        batch = w.calls(k)  # the harness's k streaming windows of one frame sequence, the first the workload's
    except WorkloadError as exc:
        raise VariantSkipped(str(exc)) from None
    frames, windows = batch.stacked["input"], batch.windows
    assert windows is not None  # a conv3d batch says where each call's frames lie
    facts = {"k": k, "new_frames_per_call": windows.t_new, "cached_frames": windows.overlap,
             "frames_per_call": windows.t_in, "frames_batched": windows.total,
             "weight_reads_per_call": 1.0 / k}
    recipe = (f"decode {k} streaming calls at once: feed the decoder's causal convs {windows.total} frames "
              f"({k} x {windows.t_new} new after the {windows.overlap} cached) per call; the output lags by "
              f"{k - 1} calls")

    def run() -> torch.Tensor:
        return calls_on_dim0(F.conv3d(frames, weight, bias, *args), windows)

    return Prepared(run, calls=k, facts={**facts, **_path_facts(w, run)}, recipe=recipe)


# ---------------------------------------------------------------------------------------------
# The CPU's paths: oneDNN (the baseline) vs native, and explicit im2col


@EXPERIMENT.variant(needs=cpu_only)
def native_cpu(w: Workload) -> Prepared:
    """F.conv3d with oneDNN disabled for the call (torch.backends.mkldnn.enabled = False, restored after it):
    torch's native slow_conv3d (vol2col + GEMM) instead of oneDNN's convolution."""
    x, weight, bias = _inputs(w)
    args, conv = _conv_args(w), _conv(w)
    baseline_path = cpu_conv_path(lambda: conv(x, weight, bias, *args))
    if baseline_path != "onednn":
        raise VariantSkipped(f"the baseline already takes the {baseline_path} path at this shape (torch picks "
                             "oneDNN only above a size threshold): nothing to compare")

    def run() -> torch.Tensor:
        with set_for_call((torch.backends.mkldnn, "enabled", False)):
            return conv(x, weight, bias, *args)

    return Prepared(run, facts={**_path_facts(w, run), "baseline_cpu_path": baseline_path})


@EXPERIMENT.variant(needs=cpu_only)
def im2col_gemm(w: Workload, layout: Im2colLayout = "ncdhw") -> Prepared:
    """The conv as an explicit im2col (unfold over T, H, W) and one GEMM, columns [K, To*Ho*Wo] (NCDHW output)
    or rows [M, K] (channels_last_3d output); a conv2d as a conv3d of one frame (NCHW or channels_last output)."""
    x, weight, bias = _inputs(w)
    gemm = ConvGemm.from_shape(gemm_shape(w))
    facts = {"cpu_path": f"im2col + one GEMM ({layout})", "gemm": gemm.as_dict(), "math_mode": "fp32",
             "columns_bytes": gemm.m * gemm.k * element_size(x.dtype)}
    if w.op_kind != "conv2d":
        return Prepared(im2col_conv3d(x, weight, bias, gemm, layout), facts=facts)
    frame = im2col_conv3d(x.unsqueeze(2), weight.unsqueeze(2), bias, gemm, layout)
    return Prepared(lambda: frame().squeeze(2), facts=facts)


# ---------------------------------------------------------------------------------------------
# torch.compile reference


@EXPERIMENT.variant
def compiled(w: Workload, mode: CompileMode = "default") -> Prepared:
    """torch.compile of nn.Conv3d (nn.Conv2d) with the workload's weight and bias as frozen parameters."""
    x, weight, bias = _inputs(w)
    stride, padding, dilation, groups = _conv_args(w)
    cin, cout, k = weight.shape[1] * groups, weight.shape[0], weight.shape
    options: dict[str, Any] = {"bias": bias is not None, "device": weight.device, "dtype": weight.dtype}
    layer = (torch.nn.Conv2d(cin, cout, (k[2], k[3]), stride, padding, dilation, groups, **options)
             if w.op_kind == "conv2d" else
             torch.nn.Conv3d(cin, cout, (k[2], k[3], k[4]), stride, padding, dilation, groups, **options))
    module = frozen_module(layer, weight=weight, bias=bias)
    run, compile_s = compile_call(module, (x,), mode, w.device)
    facts = {"compile_mode": mode, "compile_s": round(compile_s, 2),
             "math_mode": math_mode(w.device, cudnn_conv_tf32())}
    return Prepared(run, facts=facts)


# ---------------------------------------------------------------------------------------------
# Evidence on every measured card


@EXPERIMENT.annotate
def add_conv_evidence(card: Any, w: Workload) -> None:
    """card.extra["conv"]: the GEMM view, executed vs nominal FLOPs (padding %), achieved TFLOP/s against the
    peak of the math mode the conv ran in, the Triton launch's tiles and waves, lts bytes when measured."""
    variant = card.extra.get("variant") or {}
    calls = int(variant.get("calls") or 1)
    state = card.extra.get("torch_state") or {}
    mode = variant.get("math_mode") or math_mode(w.device, cudnn_conv_tf32(state))
    conv: dict[str, Any] = {"math_mode": mode, "nominal_flops_per_call": w.flops}
    try:
        gemm = ConvGemm.from_shape(gemm_shape(w))
    except VariantSkipped:  # groups > 1: no single GEMM view
        gemm = None
    if gemm is not None:  # per invocation: a batched call's M is its calls' M together
        conv["gemm_per_invocation"] = {"M": gemm.m * calls, "N": gemm.n, "K": gemm.k}
    ratio, ratio_source = executed_over_nominal(card)
    conv.update(executed_over_nominal=ratio, executed_source=ratio_source,
                padding_pct=(ratio - 1.0) * 100.0 if ratio is not None else None)
    achieved = variant.get("achieved_tflops")
    conv["achieved_tflops"] = achieved
    if achieved and ratio is not None:
        conv["executed_tflops"] = achieved * ratio
    # The peak of the math mode the conv ran in: TF32 by cuDNN's switch, recorded on the card.
    peaks = card_peaks(card.extra.get("peaks"), "float32", w.device, tf32=mode == "tf32")
    peak, source = (peaks.compute, peaks.compute_source) if peaks else (None, None)
    pct = achieved * 1e12 / peak * 100.0 if achieved and peak else None
    conv.update(peak_tflops=peak / 1e12 if peak else None, peak_source=source, pct_of_peak=pct)
    if pct is not None and pct > 100.0:
        conv["peak_note"] = ("over 100%: the recorded peak is below what this call reached (a peak measured on a "
                             "busy machine, or on a slower path for this math mode)")
    tile = variant.get("tile")
    if isinstance(tile, dict) and gemm is not None:
        device_sms = sm_count(w.device, card.extra.get("peaks")) if _is_cuda(w) else None
        sms = device_sms or HOPPER.sm_count
        tiles = tile_count(gemm.m, gemm.n, tile["BLOCK_M"], tile["BLOCK_N"])
        conv["tiles"] = tiles
        conv["waves_one_tile_per_sm"], conv["last_wave_fill_pct"] = waves(tiles, sms)
        conv["sm_count"] = sms
        conv["sm_count_source"] = "this device" if device_sms else f"the report's H200 ({HOPPER.sm_count} SMs)"
    lts = sum_metric(card, "lts_mb")  # per original call; ncu's lts__t_bytes.sum (metric set "bytes")
    conv["lts_mb_per_call"] = lts
    if lts is None:
        conv["lts_note"] = "not collected: ncu's lts__t_bytes.sum (profiler=ncu) measures it"
    card.extra["conv"] = conv
