"""One forward of a model under a recorder at the level its code calls torch: every call, its group, its time,
the module that issued it, and the inputs of each group's first two calls.

A TorchFunctionMode sees the calls the model's Python code makes (`F.linear`, `torch.conv3d`, `x.to(...)`,
`F.scaled_dot_product_attention`), not what they decompose into: torch pops the mode while its handler
runs, so a call's own inner calls are not recorded, and the cards name ops as the shipped report does.
The recorded forward only groups the calls and copies inputs; then `timed` more forwards time every call
alone (the CPU clock, or CUDA events read after the forward), each credited to the recorded call at its
place in the sequence, so a group's time is its calls' median time per forward in the model, without the
recorder's own work. A model whose forward does not repeat its calls is a CaptureMismatch.

Module paths come from global forward hooks: the stage of a call is the top-level child of the model that
issued it (`decoder`), or `model` for the model's own forward.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

from harness.capture.calls import CallShape, describe_call

ROOT_STAGE = "model"
SECOND_CALL_SAVED = 1  # the group's calls whose inputs are kept: the first (0) and this one


@dataclass
class Group:
    """Calls alike in op, shapes, dtypes, layouts and scalar arguments."""

    shape: CallShape  # of the first call; its tensors are the first call's inputs, copied
    stage: str
    module: str  # the module path of the first call
    calls: int = 0
    time_s: float = 0.0
    second: dict[str, torch.Tensor] = field(default_factory=dict)  # the second call's activations, copied
    modules: set[str] = field(default_factory=set)


def _copies(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {name: t.detach().to("cpu", copy=True) for name, t in tensors.items()}


class _Clock:
    """Per-call times: the CPU clock, or CUDA events on the current stream, read once the forward is done."""

    def __init__(self, cuda: bool):
        self.cuda = cuda
        self.spans: list[tuple[Any, Any]] = []

    def mark(self) -> Any:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def seconds(self) -> list[float]:
        """Each span's duration, in the order the spans were added."""
        if self.cuda:
            torch.cuda.synchronize()
            return [started.elapsed_time(ended) / 1e3 for started, ended in self.spans]
        return [ended - started for started, ended in self.spans]


def _returns_tensor(out: Any) -> bool:
    return any(isinstance(leaf, torch.Tensor) for leaf in tree_flatten(out)[0])


class _ModulePath:
    """The module issuing each call, from global forward hooks: its dotted name in the model."""

    def __init__(self, model: torch.nn.Module):
        self.names = {id(m): name for name, m in model.named_modules()}
        self.path: list[str] = []
        self._hooks: list[Any] = []

    @property
    def current(self) -> str:
        return self.path[-1] if self.path else ""

    def __enter__(self) -> _ModulePath:
        from torch.nn.modules import module as nn_module

        def enter(module: torch.nn.Module, args: Any) -> None:
            # A module the model made on the fly has no name: its calls count as its caller's.
            self.path.append(self.names.get(id(module), self.current))

        def leave(module: torch.nn.Module, args: Any, out: Any) -> None:
            self.path.pop()

        self._hooks = [nn_module.register_module_forward_pre_hook(enter),
                       nn_module.register_module_forward_hook(leave, always_call=True)]
        return self

    def __exit__(self, *exc: Any) -> None:
        for hook in self._hooks:
            hook.remove()


class Recorder(TorchFunctionMode):
    """Groups every call that returns a tensor (CallShape.key()), copies each group's first two calls' inputs,
    and keeps the order of the calls, so that timed forwards can credit each call to its group."""

    def __init__(self, model: torch.nn.Module, stage_of: Callable[[str], str], modules: _ModulePath):
        super().__init__()
        self.constants = {id(t) for t in (*model.parameters(), *model.buffers())}
        self.stage_of = stage_of
        self.modules = modules
        self.groups: dict[str, Group] = {}
        self.sequence: list[tuple[Any, Group]] = []

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if _returns_tensor(out):
            self.sequence.append((func, self._record(func, args, kwargs, out)))
        return out

    def _record(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> Group:
        module = self.modules.current
        shape = describe_call(func, args, kwargs, out, self.constants)
        group = self.groups.get(shape.key())
        if group is None:
            stage = self.stage_of(module.split(".")[0] if module else ROOT_STAGE)
            group = self.groups[shape.key()] = Group(replace(shape, tensors={}), stage, module)
        if shape.replayable is None and group.calls == 0:
            group.shape.tensors = _copies(shape.tensors)
        elif shape.replayable is None and group.calls == SECOND_CALL_SAVED:
            group.second = _copies({name: shape.tensors[name] for name in shape.activations})
        group.calls += 1
        group.modules.add(module)
        return group


class _CallTimer(TorchFunctionMode):
    """Times every call that returns a tensor, and nothing else: the recorder's work is not in the spans."""

    def __init__(self, cuda: bool):
        super().__init__()
        self.clock = _Clock(cuda)
        self.funcs: list[Any] = []

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        started = self.clock.mark()
        out = func(*args, **(kwargs or {}))
        ended = self.clock.mark()
        if _returns_tensor(out):
            self.clock.spans.append((started, ended))
            self.funcs.append(func)
        return out


class CaptureMismatch(RuntimeError):
    """A timed forward called other functions than the recorded one: the model's control flow varies."""


def timed_forward(model: torch.nn.Module, inputs: tuple[Any, ...], cuda: bool,
                  sequence: list[tuple[Any, Group]]) -> dict[int, float]:
    """One forward with every call timed alone, credited to the recorded call at its place: seconds by group."""
    timer = _CallTimer(cuda)
    with torch.no_grad(), timer:
        model(*inputs)
    if timer.funcs != [func for func, _ in sequence]:
        raise CaptureMismatch(f"a second forward made {len(timer.funcs)} calls where the recorded one made "
                              f"{len(sequence)}, or other ones: the capture needs a forward that repeats")
    totals: dict[int, float] = {}
    for (_, group), seconds in zip(sequence, timer.clock.seconds()):
        totals[id(group)] = totals.get(id(group), 0.0) + seconds
    return totals


def plain_forward(model: torch.nn.Module, inputs: tuple[Any, ...], cuda: bool) -> float:
    """One forward as the model runs it, in seconds."""
    if cuda:
        torch.cuda.synchronize()
    started = time.perf_counter()
    with torch.no_grad():
        model(*inputs)
    if cuda:
        torch.cuda.synchronize()
    return time.perf_counter() - started


def record_forward(model: torch.nn.Module, inputs: tuple[Any, ...], cuda: bool, stage_of: Callable[[str], str],
                   repeats: int = 3) -> tuple[list[Group], float]:
    """One recorded forward of `model` on `inputs`, then `repeats` pairs of a plain forward and a forward whose
    calls are timed one by one, interleaved so that both see the same machine: the groups, each with its calls'
    median time per forward, and the plain forward's median time."""
    with torch.no_grad(), _ModulePath(model) as modules, Recorder(model, stage_of, modules) as recorder:
        model(*inputs)
    plain, passes = [], []
    for _ in range(max(repeats, 1)):
        plain.append(plain_forward(model, inputs, cuda))
        passes.append(timed_forward(model, inputs, cuda, recorder.sequence))
    groups = list(recorder.groups.values())
    for group in groups:
        group.time_s = statistics.median(p.get(id(group), 0.0) for p in passes)
    return groups, statistics.median(plain)
