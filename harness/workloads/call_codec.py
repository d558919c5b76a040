"""One captured call of a torch function as JSON: the function by its dotted name, its arguments with each
tensor replaced by a named reference, and the tensors' shapes, dtypes and layouts.

The capture (harness.capture) encodes the calls it records; the replay workload (harness.workloads.replay)
decodes them and calls the function again on the captured tensors (or seeded ones of the same shape). The
encoded form, under a card's `shape_parameters`:

    {"callable": "torch.nn.functional.group_norm",
     "args": [{"tensor": "arg0"}, 32],
     "kwargs": {"eps": 1e-06},
     "tensors": {"arg0": {"shape": [1, 96, 3, 8, 6], "dtype": "float32", "layout": "contiguous"}}}

Values: None, bools, ints, finite floats and strings as they are; a non-finite float as {"float": "inf"};
a list as a list and a tuple as {"tuple": [...]}; a torch.dtype as {"dtype": "bfloat16"}; a memory format
as {"memory_format": "channels_last"}; a device as {"device": "cuda"} (the replay puts it on its own
device); a slice as {"slice": [start, stop, step]}; Ellipsis as {"ellipsis": true}; a dict of such values
as {"dict": {...}}. Anything else cannot be encoded (`NotEncodable`): such a call is not replayable.

Only functions of torch's own namespaces are replayed: a dotted name must start with `torch.` and resolve
by attribute lookup from the torch package, so a report cannot name an arbitrary Python callable.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import torch

from harness.workloads.params import WorkloadError, dtype_name, parse_dtype

_MEMORY_FORMATS = {
    "contiguous": torch.contiguous_format,
    "channels_last": torch.channels_last,
    "channels_last_3d": torch.channels_last_3d,
    "preserve": torch.preserve_format,
}


class NotEncodable(ValueError):
    """An argument the codec has no JSON form for (a module, a generator, a callable, ...)."""


def layout_of(tensor: torch.Tensor) -> str:
    """contiguous, channels_last (4-D), channels_last_3d (5-D), or strided (any other strides)."""
    if tensor.is_contiguous():
        return "contiguous"
    if tensor.dim() == 4 and tensor.is_contiguous(memory_format=torch.channels_last):
        return "channels_last"
    if tensor.dim() == 5 and tensor.is_contiguous(memory_format=torch.channels_last_3d):
        return "channels_last_3d"
    return "strided"


def describe_tensor(tensor: torch.Tensor) -> dict[str, Any]:
    """Shape, dtype, layout; a strided tensor's strides too, so that its replay runs on the same strides (a
    `.contiguous()` of a slice is a copy in the model, and would be no work on a contiguous replay)."""
    layout = layout_of(tensor)
    strides = {"strides": list(tensor.stride())} if layout == "strided" else {}
    return {"shape": list(tensor.shape), "dtype": dtype_name(tensor.dtype), "layout": layout, **strides}


def qualified_name(fn: Callable[..., Any]) -> str:
    """The dotted name a function is found by from `torch`: `torch.nn.functional.linear`, `torch.Tensor.add`,
    `torch.cat`. Raises NotEncodable for a function outside torch's namespaces."""
    owner = getattr(fn, "__objclass__", None)  # a method descriptor of torch._C.TensorBase
    name = getattr(fn, "__name__", None)
    if name is None:  # a property getter: Tensor.T.__get__ and the like
        raise NotEncodable(f"{fn!r} has no name")
    if owner is not None and issubclass(owner, torch._C.TensorBase):
        return f"torch.Tensor.{name}"
    module = getattr(fn, "__module__", None) or ""
    for dotted in (f"{module}.{name}", f"torch.{name}", f"torch.nn.functional.{name}", f"torch.Tensor.{name}"):
        if dotted.startswith("torch.") and _lookup(dotted, quiet=True) is fn:
            return dotted
    raise NotEncodable(f"{module}.{name} is not reachable from the torch package")


def resolve(dotted: str) -> Callable[..., Any]:
    """The function a `callable` entry names, found from the torch package only."""
    found = _lookup(dotted, quiet=False)
    assert found is not None  # quiet=False raises instead
    return found


# Where a replayed function may be defined: torch's operators and functional API, never its file, hub or
# compile machinery (a report names the function, and a report can come from anywhere).
_SAFE_MODULES = frozenset({
    "torch", "torch.functional", "torch.nn.functional", "torch._tensor", "torch._C", "torch._C._nn",
    "torch._C._fft", "torch._C._linalg", "torch._C._special", "torch._C._VariableFunctions",
})
_UNSAFE_NAMES = frozenset({"from_file", "save", "load", "compile"})
_NOT_OPERATORS = frozenset({"__class__", "__init__", "__new__", "__reduce__", "__reduce_ex__", "__setstate__",
                            "__getattribute__", "__setattr__", "__delattr__", "__init_subclass__", "__deepcopy__"})


def _lookup(dotted: str, quiet: bool) -> Callable[..., Any] | None:
    parts = dotted.split(".")
    dunder = [i for i, part in enumerate(parts) if part.startswith("__")]
    # An operator method of Tensor (`torch.Tensor.__add__`) is the one dunder a call may name.
    allowed = parts[0] == "torch" and len(parts) >= 2 and all(parts) and parts[-1] not in _UNSAFE_NAMES and (
        not dunder or dunder == [len(parts) - 1] and parts[:-1] == ["torch", "Tensor"]
        and parts[-1] not in _NOT_OPERATORS)
    obj: Any = torch if allowed else None
    for part in parts[1:] if allowed else ():
        obj = getattr(obj, part, None)
        if obj is None:
            break
    defined_in = getattr(obj, "__module__", None)
    is_method = getattr(obj, "__objclass__", None) is not None  # Tensor's C methods carry no module
    if obj is not None and callable(obj) and (is_method or defined_in in _SAFE_MODULES):
        return obj
    if quiet:
        return None
    if not allowed or obj is not None:
        raise WorkloadError(f"replay: callable {dotted!r} is not an operator of the torch package")
    raise WorkloadError(f"replay: torch has no function {dotted!r} (another torch version?)")


def encode(value: Any, tensors: dict[str, torch.Tensor], name_of: Callable[[torch.Tensor], str]) -> Any:
    """`value` in JSON form; each tensor is added to `tensors` under `name_of(tensor)` and referenced by name."""
    if isinstance(value, torch.Tensor):
        name = name_of(value)
        tensors[name] = value
        return {"tensor": name}
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"float": repr(value)}
    if isinstance(value, torch.dtype):
        return {"dtype": dtype_name(value)}
    if isinstance(value, torch.memory_format):
        for key, fmt in _MEMORY_FORMATS.items():
            if value == fmt:
                return {"memory_format": key}
        raise NotEncodable(f"memory format {value}")
    if isinstance(value, torch.device):
        return {"device": value.type}
    if isinstance(value, torch.Size):
        return {"tuple": [int(v) for v in value]}
    if isinstance(value, slice):
        return {"slice": [encode(v, tensors, name_of) for v in (value.start, value.stop, value.step)]}
    if value is Ellipsis:
        return {"ellipsis": True}
    if isinstance(value, list):
        return [encode(v, tensors, name_of) for v in value]
    if isinstance(value, tuple):
        return {"tuple": [encode(v, tensors, name_of) for v in value]}
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {"dict": {k: encode(v, tensors, name_of) for k, v in value.items()}}
    raise NotEncodable(f"an argument of type {type(value).__name__}")


def decode(value: Any, tensors: dict[str, torch.Tensor], device: str) -> Any:
    """The Python value of an encoded one, tensors taken from `tensors` by name, devices set to `device`."""
    if isinstance(value, list):
        return [decode(v, tensors, device) for v in value]
    if not isinstance(value, dict):
        return value
    if len(value) != 1:
        raise WorkloadError(f"replay: an encoded value has one key, got {sorted(value)}")
    (key, inner), = value.items()
    if key == "tensor":
        if inner not in tensors:
            raise WorkloadError(f"replay: argument tensor {inner!r} is not among the inputs")
        return tensors[inner]
    if key == "tuple":
        return tuple(decode(v, tensors, device) for v in inner)
    if key == "dict":
        return {k: decode(v, tensors, device) for k, v in inner.items()}
    if key == "dtype":
        found = getattr(torch, str(inner), None)  # any dtype torch names (bool, int16, complex64 ...)
        return found if isinstance(found, torch.dtype) else parse_dtype(inner)
    if key == "memory_format":
        if inner not in _MEMORY_FORMATS:
            raise WorkloadError(f"replay: unknown memory format {inner!r}")
        return _MEMORY_FORMATS[inner]
    if key == "device":
        return torch.device(device)
    if key == "float":
        return float(inner)
    if key == "slice":
        return slice(*(decode(v, tensors, device) for v in inner))
    if key == "ellipsis":
        return Ellipsis
    raise WorkloadError(f"replay: unknown encoded value {key!r}")


def tensor_names(value: Any) -> list[str]:
    """The tensor references in an encoded value, in order of first appearance."""
    found: list[str] = []

    def walk(v: Any) -> None:
        if isinstance(v, list):
            for item in v:
                walk(item)
        elif isinstance(v, dict):
            if set(v) == {"tensor"}:
                if v["tensor"] not in found:
                    found.append(v["tensor"])
            else:
                for item in v.values():
                    walk(item)

    walk(value)
    return found
