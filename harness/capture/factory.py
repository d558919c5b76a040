"""`MODULE:FACTORY`: the user's model and example inputs, loaded, checked and put on the device and dtype.

FACTORY is a function of MODULE (importable: a file on PYTHONPATH or the current directory) that takes no
argument and returns `(model, example_inputs)`: an `nn.Module` and a tuple of its positional inputs (one
tensor alone is taken as a one-tuple). Every failure is a `CaptureError` of one line.
"""

from __future__ import annotations

import importlib
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from harness.errors import HarnessError
from harness.workloads.params import WorkloadError, parse_dtype


class CaptureError(HarnessError):
    """A capture that cannot go on; the message is one line saying why and what to do."""


@dataclass
class LoadedModel:
    model: torch.nn.Module
    inputs: tuple[Any, ...]
    spec: str


def _where(exc: BaseException) -> str:
    """The innermost frame of the user's code that raised, as `file:line`."""
    frames = traceback.extract_tb(exc.__traceback__)
    return f" at {Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""


def load_factory(spec: str) -> LoadedModel:
    """Import MODULE, call FACTORY, check what it returned."""
    module_name, sep, factory_name = spec.partition(":")
    if not sep or not module_name or not factory_name:
        raise CaptureError(f"{spec!r}: give MODULE:FACTORY, e.g. mymodel:make (FACTORY() returns (model, inputs))")
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))  # a user's file in the current directory, as `python -m` finds it
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # the user's module: any error of theirs is one line here
        raise CaptureError(f"cannot import {module_name!r}: {type(exc).__name__}: {exc}{_where(exc)}") from None
    factory = getattr(module, factory_name, None)
    if not callable(factory):
        raise CaptureError(f"{module_name} has no function {factory_name!r}")
    try:
        made = factory()
    except Exception as exc:
        raise CaptureError(f"{spec}() raised {type(exc).__name__}: {exc}{_where(exc)}") from None
    if not (isinstance(made, tuple) and len(made) == 2):
        raise CaptureError(f"{spec}() must return (model, example_inputs), got {type(made).__name__}")
    model, inputs = made
    if not isinstance(model, torch.nn.Module):
        raise CaptureError(f"{spec}(): the model must be a torch.nn.Module, got {type(model).__name__}")
    if isinstance(inputs, torch.Tensor):
        inputs = (inputs,)
    if not isinstance(inputs, tuple):
        raise CaptureError(f"{spec}(): example_inputs must be a tuple of positional inputs, got "
                           f"{type(inputs).__name__}")
    return LoadedModel(model, inputs, spec)


def place(loaded: LoadedModel, device: str, dtype: str | None) -> LoadedModel:
    """The model and its floating inputs on `device`, in `dtype` when one is given; the model in eval mode
    (a capture is of inference: dropout off, norms on their running statistics)."""
    try:
        target = parse_dtype(dtype) if dtype else None
    except WorkloadError as exc:
        raise CaptureError(f"--dtype: {exc}") from None
    model = loaded.model.to(device=device).eval()
    if target is not None:
        model = model.to(dtype=target)

    def move(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            value = value.to(device)
            return value.to(target) if target is not None and value.is_floating_point() else value
        if isinstance(value, (list, tuple)):
            return type(value)(move(v) for v in value)
        return value

    return LoadedModel(model, tuple(move(v) for v in loaded.inputs), loaded.spec)


def resolution_of(inputs: tuple[Any, ...]) -> str | None:
    """`HxW` of the first tensor input with spatial dimensions (its last two, for one of 4 or more dims),
    else of the last two dims of the first tensor of 2 or more; None without one."""
    tensors = [t for t in inputs if isinstance(t, torch.Tensor)]
    for least in (4, 2):
        spatial = next((t for t in tensors if t.dim() >= least), None)
        if spatial is not None:
            return f"{spatial.shape[-2]}x{spatial.shape[-1]}"
    return None
