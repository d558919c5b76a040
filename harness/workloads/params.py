"""A card's shape parameters and a build's settings (dtype, layout, device, scale) read and checked: every value
a workload is built from passes here, and every one that cannot be used is a `WorkloadError` with one line."""

from __future__ import annotations

import json
import math
from typing import Any, overload

import torch

from harness.errors import HarnessError

# Memory formats a builder may be asked for (`layout=`), and the tensor rank each needs. "channels_last" is
# the 4-D format (NHWC) only where a caller says its tensors are 4-D (parse_layout's `dims`); elsewhere it
# stays what it always meant here, the alias of channels_last_3d (NDHWC), so existing configs keep working.
LAYOUTS = ("contiguous", "channels_last", "channels_last_3d")
MEMORY_FORMATS: dict[str, torch.memory_format] = {"contiguous": torch.contiguous_format,
                                                  "channels_last": torch.channels_last,
                                                  "channels_last_3d": torch.channels_last_3d}
LAYOUT_DIMS = {"channels_last": 4, "channels_last_3d": 5}

_DTYPE_ALIASES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "float": torch.float32,
    "tf32": torch.float32,  # TF32 is a math mode of float32 tensors, not a storage dtype
    "float16": torch.float16,
    "fp16": torch.float16,
    "half": torch.float16,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float64": torch.float64,
    "fp64": torch.float64,
    "double": torch.float64,
    "uint8": torch.uint8,
    "int8": torch.int8,
    "int32": torch.int32,
    "int64": torch.int64,
}


class WorkloadError(HarnessError):
    """A card that cannot be turned into a workload; the message is one line saying why."""


def dtype_name(dtype: torch.dtype) -> str:
    """`torch.bfloat16` -> "bfloat16"."""
    return str(dtype).replace("torch.", "")


def parse_dtype(value: str | torch.dtype, what: str = "dtype") -> torch.dtype:
    if isinstance(value, torch.dtype):
        return value
    if isinstance(value, str):
        key = value.strip().lower().replace("torch.", "")
        if key in _DTYPE_ALIASES:
            return _DTYPE_ALIASES[key]
    known = ", ".join(sorted({dtype_name(d) for d in _DTYPE_ALIASES.values()}))
    raise WorkloadError(f"unknown {what} {value!r}; known: {known}")


def element_size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


@overload
def parse_layout(value: str, dims: int = 5) -> str: ...


@overload
def parse_layout(value: None, dims: int = 5) -> None: ...


def parse_layout(value: str | None, dims: int = 5) -> str | None:
    """A layout name checked; "channels_last" is torch.channels_last for 4-D tensors (`dims=4`), else the
    alias of channels_last_3d."""
    if value is None:
        return None
    if value == "channels_last" and dims != 4:
        value = "channels_last_3d"
    if value not in LAYOUTS:
        raise WorkloadError(f"unknown layout {value!r}; known: {', '.join(LAYOUTS)} (or None)")
    return value


def parse_device(value: str | torch.device) -> str:
    try:
        device = torch.device(value)
    except (RuntimeError, TypeError):
        raise WorkloadError(f"not a torch device: {value!r}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise WorkloadError(f"device {str(device)!r} is not available here (torch.cuda.is_available() is False)")
    return str(device)


def parse_scale(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise WorkloadError(f"scale must be a number in (0, 1], got {value!r}")
    scale = float(value)
    if not (math.isfinite(scale) and 0.0 < scale <= 1.0):
        raise WorkloadError(f"scale must be in (0, 1], got {value!r}")
    return scale


def scale_dim(n: int, scale: float, floor: int) -> int:
    """Shrink a dimension by `scale`, leaving dimensions at or below `floor` alone and never going below it.

    Small dimensions are what makes a shape distinctive (M=3 rows, N=64 outputs, a 26-wide slice), so
    only the large ones shrink.
    """
    if scale >= 1.0 or n <= floor:
        return n
    return max(floor, int(round(n * scale)))


def decode_parameters(op_kind: str, shape_parameters: Any) -> dict[str, Any]:
    """Shape parameters as a dict; a JSON-encoded string (as the attention cards store them) is decoded."""
    if isinstance(shape_parameters, str):
        try:
            shape_parameters = json.loads(shape_parameters)
        except json.JSONDecodeError as exc:
            raise WorkloadError(f"{op_kind}: shape_parameters is a string but not JSON ({exc.msg})") from None
    if shape_parameters is None:
        shape_parameters = {}
    if not isinstance(shape_parameters, dict):
        raise WorkloadError(
            f"{op_kind}: shape_parameters must be an object, got {type(shape_parameters).__name__}"
        )
    return shape_parameters


def require(op_kind: str, params: dict[str, Any], key: str) -> Any:
    if key not in params or params[key] is None:
        have = ", ".join(sorted(params)) or "nothing"
        raise WorkloadError(f"{op_kind}: shape_parameters lacks {key!r} (has: {have})")
    return params[key]


def positive_int(op_kind: str, key: str, value: Any, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
        raise WorkloadError(f"{op_kind}: {key} must be an integer, got {value!r}")
    if int(value) < minimum:
        raise WorkloadError(f"{op_kind}: {key} must be >= {minimum}, got {value!r}")
    return int(value)


def int_list(op_kind: str, key: str, value: Any, length: int, minimum: int = 0) -> list[int]:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = [value] * length
    if not isinstance(value, (list, tuple)) or len(value) != length:
        raise WorkloadError(f"{op_kind}: {key} must be a list of {length} integers, got {value!r}")
    return [positive_int(op_kind, f"{key}[{i}]", v, minimum) for i, v in enumerate(value)]


def numel(shape: tuple[int, ...] | list[int]) -> int:
    return math.prod(int(s) for s in shape)
