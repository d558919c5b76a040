"""bf16 conv3d in place of fp32/TF32 for the VAE decoder.

The report's VAE runs fp32, so cuDNN uses TF32 implicit GEMM. bf16 halves the bytes and doubles the
tensor-core peak; on cuDNN 9.8 to 9.14 some bf16 conv3d shapes fall off cuDNN onto a slow path
(vol2col / slow_conv_dilated3d kernels), which the re-profile's kernel names would show.

A captured model's conv2d cards get the same variant: its memory_format `channels_last_3d` is then the 4-D
torch.channels_last, and that is what it carries.
"""

from __future__ import annotations

from typing import Callable, Literal

import torch
import torch.nn.functional as F

from harness.api.experiment import Experiment, Prepared, VariantSkipped
from harness.cards.fields import COMPUTE_BOUND, L2_BANDWIDTH_BOUND, PARTIAL_WAVE_TAIL, UNRESOLVED
from harness.workloads.base import Workload

EXPERIMENT = Experiment(
    name="vae_bf16",
    op_kinds=("conv3d", "conv2d"),
    hypothesis="bf16 inputs and weights instead of fp32/TF32 halve the bytes and raise the math peak, "
    "so effective throughput rises at the same nominal FLOPs",
    check="effective_flops",
    classes=(COMPUTE_BOUND, L2_BANDWIDTH_BOUND, PARTIAL_WAVE_TAIL, UNRESOLVED),
)

LowPrecision = Literal["bfloat16", "float16"]
_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}
# "as_given": the layout the inputs come in (contiguous, or channels_last_3d adopted in an earlier round); a
# conv2d's channels_last_3d is its 4-D channels_last.
LowPrecisionFormat = Literal["contiguous", "channels_last_3d", "as_given"]
_FORMATS = {"contiguous": torch.contiguous_format, "channels_last_3d": torch.channels_last_3d,
            "as_given": torch.preserve_format}
_PLANAR = {torch.channels_last_3d: torch.channels_last}


def _cpu_has_bf16_math() -> bool:
    """Whether oneDNN can run bf16 convolutions natively here (AVX512-BF16 or AMX); else it emulates."""
    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")  # torch.cpu's own capability probes
    return any(getattr(torch.cpu, name, lambda: False)() for name in probes)


def _conv(w: Workload, dtype: torch.dtype, memory_format: torch.memory_format) -> Callable[[], torch.Tensor]:
    if dtype == torch.float16 and w.device == "cpu":
        raise VariantSkipped(f"fp16 {w.op_kind} has no fast CPU kernel; it runs on CUDA only")
    if dtype == torch.bfloat16 and w.device == "cpu" and not _cpu_has_bf16_math():
        # Measured on an AVX2 CPU: a bf16 conv3d 96->96 k3 took 35x its fp32 time; timing that says
        # nothing about bf16 on a GPU and would take minutes per trial.
        raise VariantSkipped(f"this CPU has no bf16 math (no AVX512-BF16 or AMX): bf16 {w.op_kind} is emulated "
                             "at a fraction of fp32 speed; run it on CUDA or a CPU with AMX")
    planar = w.op_kind == "conv2d"
    memory_format = _PLANAR.get(memory_format, memory_format) if planar else memory_format
    x, weight = (_in_format(w.inputs[name], dtype, memory_format) for name in ("input", "weight"))
    bias = w.inputs.get("bias")
    bias = bias.to(dtype) if bias is not None else None
    s = w.shape
    stride, padding, dilation, groups = s["stride"], s["padding"], s["dilation"], s["groups"]
    conv = F.conv2d if planar else F.conv3d
    return lambda: conv(x, weight, bias, stride, padding, dilation, groups)


def _in_format(tensor: torch.Tensor, dtype: torch.dtype, memory_format: torch.memory_format) -> torch.Tensor:
    converted = tensor.to(dtype)  # keeps the layout it came in
    return converted if memory_format == torch.preserve_format else converted.contiguous(memory_format=memory_format)


@EXPERIMENT.baseline
def fp32(w: Workload) -> Callable[[], torch.Tensor]:
    """The report's baseline: fp32 NCDHW or NCHW (TF32 on cuDNN by torch's default)."""
    return _conv(w, torch.float32, torch.contiguous_format)


def low_precision_math(device: str) -> str | None:
    """low_precision's needs: on a CPU both of its dtypes are skipped unless the CPU has bf16 math (fp16
    never runs there), so the search leaves it out there instead of spending trials on skips."""
    if device.startswith("cuda") or _cpu_has_bf16_math():
        return None
    return ("this CPU has no bf16 math (no AVX512-BF16 or AMX) and fp16 conv3d has no fast CPU kernel; "
            "run it on CUDA or a CPU with AMX")


@EXPERIMENT.variant(needs=low_precision_math)
def low_precision(w: Workload, dtype: LowPrecision = "bfloat16", memory_format: LowPrecisionFormat = "as_given"
                  ) -> Prepared:
    """bf16 or fp16 inputs, weight and bias, in a memory format: held to that dtype's rounding."""
    layout = {} if memory_format == "as_given" else {"memory_format": memory_format}
    planar = w.op_kind == "conv2d"
    carried = {"memory_format": "channels_last"} if planar and memory_format == "channels_last_3d" else layout
    carries = {name: {"dtype": dtype, **(carried if name != "bias" else {})} for name in ("input", "weight", "bias")}
    owner, whose = ("model", "the model's") if planar else ("vae.decoder", "the decoder's")
    recipe = (f"{owner}.to(torch.{dtype})  # weights and biases\n"
              f"x = x.to(torch.{dtype})  # {whose} input; its output is {dtype} too")
    if layout:
        fmt = "channels_last" if planar and memory_format == "channels_last_3d" else memory_format
        recipe += f"\nkeep input and weights {fmt}: .contiguous(memory_format=torch.{fmt})"
    return Prepared(_conv(w, _DTYPES[dtype], _FORMATS[memory_format]), precision=dtype, carries=carries,
                    recipe=recipe)
