"""The numerics a variant runs and is judged in: the precisions it may declare (`Prepared.precision`: a floating
dtype, or TF32), each one's unit roundoff, the unit of the correctness bound (harness.trial.correctness), and
whether float32 convolutions may run as TF32 now (`cudnn_conv_tf32`: a variant is prepared and run under the card's
pinned math mode, harness.trial.torch_state, so this is the baseline's).

The precisions are defined here, below the trial that judges them: an experiment's `Prepared` checks its
declaration with them as it is made, and the worker's judge and evidence (harness.trial.correctness,
harness.trial.precision) read the same names.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch

from harness.errors import CorrectnessError
from harness.workloads.params import WorkloadError, dtype_name, parse_dtype

__all__ = ["TF32", "CorrectnessError", "cudnn_conv_tf32", "precision_name", "storage_dtype", "unit_roundoff"]

TF32 = "tf32"  # a math mode of float32 tensors, not a storage dtype: torch has no dtype for it
_TF32_NAMES = (TF32, "tfloat32")
_TF32_UNIT_ROUNDOFF = 2.0**-11  # TF32 keeps 10 fraction bits


def unit_roundoff(dtype: torch.dtype | str) -> float:
    """u = half the machine epsilon (round to nearest): 2^-24 float32, 2^-8 bfloat16; 0 for integers."""
    if isinstance(dtype, str) and dtype.strip().lower() in _TF32_NAMES:
        return _TF32_UNIT_ROUNDOFF
    try:
        parsed = parse_dtype(dtype, "precision")
    except WorkloadError as exc:
        raise CorrectnessError(str(exc)) from None
    if parsed.is_floating_point:
        return float(torch.finfo(parsed).eps) / 2.0
    return 0.0


def precision_name(precision: str) -> str:
    """A precision's one spelling: "bf16" -> "bfloat16", "tfloat32" -> "tf32"; a floating dtype or TF32."""
    if precision.strip().lower() in _TF32_NAMES:
        return TF32
    try:
        parsed = parse_dtype(precision, "precision")
    except WorkloadError as exc:
        raise CorrectnessError(str(exc)) from None
    if not parsed.is_floating_point:
        raise CorrectnessError(f"precision {precision!r}: name a floating-point dtype")
    return dtype_name(parsed)


def storage_dtype(precision: str) -> torch.dtype | None:
    """The dtype a tensor of `precision` is stored in; None for TF32, which only float32 math uses."""
    name = precision_name(precision)
    return None if name == TF32 else parse_dtype(name)


def cudnn_conv_tf32(recorded: Mapping[str, Any] | None = None) -> bool:
    """Whether cuDNN may run float32 convolutions as TF32: now, or as a card's `recorded` torch state says
    (harness.trial.torch_settings' keys). Torch >= 2.9 keeps it in the fp32 precision tree, whose conv node is
    read first: the legacy `torch.backends.cudnn.allow_tf32` raises there once the conv and RNN nodes differ (a
    card pinned to IEEE convolutions leaves RNNs at TF32)."""
    if recorded is not None:
        node, legacy = recorded.get("fp32_precision.cuda.conv"), recorded.get("cudnn.allow_tf32", True) is True
    else:
        getter = getattr(torch._C, "_get_fp32_precision_getter", None)
        node = str(getter("cuda", "conv")) if getter is not None else None
        legacy = None
    if node in ("tf32", "ieee"):
        return node == "tf32"
    return bool(torch.backends.cudnn.allow_tf32) if legacy is None else legacy
