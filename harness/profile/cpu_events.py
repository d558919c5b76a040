"""Reading torch.profiler's CPU events: where an op sits in the measured call (its top-level op, its
callers), what an aten::copy_ is for, and the tensors it reads with their bytes.

The CPU backend (harness.profile.cpu) turns these into report-format kernels.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

CALL_LABEL = "harness::measured_call"  # the record_function range around each measured call

# torch.profiler's `input_dtypes` strings (C++ type names) -> torch dtype names.
DTYPE_NAMES = {
    "float": "float32",
    "double": "float64",
    "c10::Half": "float16",
    "c10::BFloat16": "bfloat16",
    "c10::Float8_e4m3fn": "float8_e4m3fn",
    "c10::Float8_e5m2": "float8_e5m2",
    "c10::Float8_e4m3fnuz": "float8_e4m3fnuz",
    "c10::Float8_e5m2fnuz": "float8_e5m2fnuz",
    "c10::complex<float>": "complex64",
    "c10::complex<double>": "complex128",
    "c10::complex<c10::Half>": "complex32",
    "int": "int32",
    "long int": "int64",
    "long": "int64",
    "short int": "int16",
    "short": "int16",
    "signed char": "int8",
    "unsigned char": "uint8",
    "bool": "bool",
}

def attach_input_dtypes(kineto_results: Any, events: Any) -> None:
    """Give each event its `input_dtypes` where torch.profiler left them off its FunctionEvents.

    FunctionEvent.input_dtypes is missing in torch 2.11 (present in 2.13); its profiler keeps them on the
    raw Kineto events (`_KinetoEvent.dtypes()`, one per input; `kineto_results` is the autograd profiler's
    attribute of that name, None where it has none), whose correlation id is the FunctionEvent's id.
    Without them the byte estimates count every tensor as the workload's dtype and a cast's copy_ is not
    told from a layout conversion. An event whose raw twin is ambiguous or differs in shapes is left as it is
    (tensor_inputs then falls back to the workload's dtype).
    """
    if not events or all(hasattr(event, "input_dtypes") for event in events):
        return
    try:
        raw = list(kineto_results.events())
    except (AttributeError, RuntimeError):  # no Kineto results on this build: keep the fallback
        return
    by_id: dict[int | None, Any] = {}  # looked up with an event's id, None where it has none
    seen: Counter = Counter()
    for kineto_event in raw:
        seen[kineto_event.correlation_id()] += 1
        by_id[kineto_event.correlation_id()] = kineto_event
    for event in events:
        if hasattr(event, "input_dtypes"):
            continue
        twin = by_id.get(getattr(event, "id", None)) if seen[getattr(event, "id", None)] == 1 else None
        if twin is None or not hasattr(twin, "dtypes"):
            continue
        shapes, dtypes = [list(s) for s in twin.shapes()], list(twin.dtypes())
        if shapes == [list(s) for s in (event.input_shapes or [])] and len(dtypes) == len(shapes):
            event.input_dtypes = dtypes


def itemsize(dtype_name: str) -> int | None:
    import torch

    dtype = getattr(torch, dtype_name, None)
    if isinstance(dtype, torch.dtype):
        return dtype.itemsize
    return None


@dataclass
class OpStats:
    name: str  # the kernel's name: the op, plus its input shapes in a per-shape profile
    op: str  # the profiler's op name (aten::...)
    order: int
    invocations: int = 0
    self_us: float = 0.0
    total_us: float = 0.0
    delegated_us: float = 0.0  # its children's inclusive time, allocations and views (IGNORED_OPS) left out
    flops: float = 0.0
    read_bytes: float = 0.0
    write_bytes: float = 0.0
    bytes_notes: set[str] = field(default_factory=set)
    dtype: str | None = None
    input_shapes: list[Any] | None = None
    callers: Counter = field(default_factory=Counter)
    copy_roles: Counter = field(default_factory=Counter)
    within: tuple[str, list[Any]] | None = None  # per-shape profile: the top-level op and its input shapes


def call_root(event: Any) -> Any:
    node = event
    while node.cpu_parent is not None:
        node = node.cpu_parent
    return node


def top_op(event: Any) -> Any:
    """The outermost op above `event` inside the measured call (the op the profiled code called)."""
    node = event
    while node.cpu_parent is not None and not node.cpu_parent.name.startswith(CALL_LABEL):
        node = node.cpu_parent
    return node


def caller_chain(event: Any, depth: int = 3) -> str:
    names: list[str] = []
    node = event.cpu_parent
    while node is not None and len(names) < depth:
        if node.name.startswith(CALL_LABEL):
            break
        names.append(node.name)
        node = node.cpu_parent
    return " < ".join(names) if names else "(top level)"


def copy_role(event: Any, chain: str) -> str:
    """What an aten::copy_ is for: "cast" (dtypes differ), "layout_conversion" (same dtype, called
    from aten::contiguous or aten::_to_copy, i.e. a memory-format change), else "copy"."""
    dtypes = getattr(event, "input_dtypes", None) or []
    if len(dtypes) >= 2 and dtypes[0] in DTYPE_NAMES and dtypes[1] in DTYPE_NAMES and dtypes[0] != dtypes[1]:
        return "cast"
    if "aten::contiguous" in chain or "aten::_to_copy" in chain:
        return "layout_conversion"
    return "copy"


def tensor_inputs(event: Any, fallback_dtype: str) -> tuple[list[tuple[list[int], str | None]], bool]:
    """(shape, dtype name) of each tensor input, and whether a tensor-list input was seen."""
    shapes = event.input_shapes or []
    dtypes = getattr(event, "input_dtypes", None)
    out: list[tuple[list[int], str | None]] = []
    saw_list = False
    for i, shape in enumerate(shapes):
        raw = dtypes[i] if dtypes is not None and i < len(dtypes) else None
        if raw == "TensorList":
            saw_list = True
            continue
        if dtypes is None:
            # Older torch records no dtypes: a non-empty shape is a tensor of the workload's dtype.
            if isinstance(shape, (list, tuple)) and len(shape) > 0:
                out.append((list(shape), fallback_dtype))
            continue
        if raw in DTYPE_NAMES and isinstance(shape, (list, tuple)):
            out.append((list(shape), DTYPE_NAMES[raw]))
        elif raw and raw not in ("Scalar", "ScalarList", "GenericList", "String", "") and isinstance(
            shape, (list, tuple)
        ) and len(shape) > 0:
            out.append((list(shape), None))  # a tensor of a dtype we do not know
    return out, saw_list


def shapes_text(input_shapes: Any) -> str:
    """An op's tensor-input shapes as `1x96x6x10x10, 96x96x3x3x3, 96` (scalars and lists left out)."""
    shapes = [s for s in input_shapes or [] if isinstance(s, (list, tuple)) and s and
              all(isinstance(d, int) for d in s)]
    return ", ".join("x".join(str(d) for d in s) for s in shapes)


def tensor_nbytes(shape: list[int], dtype_name: str | None, fallback_dtype: str) -> tuple[float, bool]:
    size = itemsize(dtype_name) if dtype_name else None
    guessed = size is None
    if size is None:
        size = itemsize(fallback_dtype) or 4
    return float(math.prod(int(d) for d in shape)) * size, guessed
