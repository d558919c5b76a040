"""One forward of a model under a recorder at the level its code calls torch: every call, its group, its time,
the module that issued it, and the inputs of each group's first two calls.

A TorchFunctionMode sees the calls the model's Python code makes (`F.linear`, `torch.conv3d`, `x.to(...)`,
`F.scaled_dot_product_attention`), not what they decompose into: torch pops the mode while its handler
runs, so a call's own inner calls are not recorded, and the cards name ops as the shipped report does.
The recorded forward only groups the calls and copies inputs; then more forwards time every call alone (the
CPU clock, or CUDA events read after the forward), each credited to the recorded call at its place in the
sequence, without the recorder's own work, interleaved with plain forwards until the time of both settles (or
the capture says it did not). A group's share of the forward is its calls' own
time (a span's part that no earlier span covered: CUDA events overlap) over those forwards' whole time, so
the shares add up to at most 1 (on the H200 the calls' raw spans summed to 159% of the plain forward). A
model whose forward does not repeat its calls is a CaptureMismatch.

Module paths come from global forward hooks: the stage of a call is the top-level child of the model that
issued it (`decoder`), or `model` for the model's own forward; calls of two stages are two groups. An in-place
call's target is copied before the call writes into it (the recorded forward only): that copy is the call's input.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

from harness.capture.calls import CallShape, describe_call, written_tensor
from harness.errors import HarnessError
from harness.profile.timing import is_stable

ROOT_STAGE = "model"
# The pairs of forwards a capture times at most while their time has not settled, and the seconds it spends.
MAX_FORWARDS = 40
SETTLE_S = 60.0
SECOND_CALL_SAVED = 1  # the group's calls whose inputs are kept: the first (0) and this one


@dataclass
class Group:
    """Calls alike in op, shapes, dtypes, layouts and scalar arguments."""

    shape: CallShape  # of the first call; its tensors are the first call's inputs, copied
    stage: str
    module: str  # the module path of the first call
    calls: int = 0
    share: float = 0.0  # of the forward: its calls' own time over the timed forwards' (record_forward)
    time_s: float = 0.0  # in the model: its share of the plain forward's time
    second: dict[str, torch.Tensor] = field(default_factory=dict)  # the second call's activations, copied
    modules: set[str] = field(default_factory=set)


def _copies(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {name: t.detach().to("cpu", copy=True) for name, t in tensors.items()}


def _laid_out_copy(tensor: torch.Tensor) -> torch.Tensor:
    """A copy on the tensor's own strides where they hold each element once (a slice, a transpose), so that the
    replay of an in-place write into a view runs on the view's layout; else a contiguous copy."""
    detached = tensor.detach()
    try:
        return torch.empty_strided(detached.size(), detached.stride(), dtype=detached.dtype,
                                   device=detached.device).copy_(detached)
    except RuntimeError:  # overlapping strides (an expand): no tensor of its own can have them
        return detached.clone(memory_format=torch.contiguous_format)


class _Clock:
    """Marks on one clock: the CPU's, or CUDA events on the current stream, read once the forward is done."""

    def __init__(self, cuda: bool):
        self.cuda = cuda
        self.spans: list[tuple[Any, Any]] = []

    def mark(self) -> Any:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def since(self, origin: Any, mark: Any) -> float:
        """Seconds from `origin` to `mark` (for CUDA events: on the stream, once synchronized)."""
        return origin.elapsed_time(mark) / 1e3 if self.cuda else mark - origin


def own_seconds(spans: list[tuple[float, float]]) -> list[float]:
    """Each span's own time, in the order given: the part of it no earlier span already covered. On the CPU
    the calls' spans follow one another; CUDA events can overlap (async launches, a call's work spilling into
    the next span), and a nested call would repeat its caller's time: counted once here, the spans add up to
    at most the time from the first start to the last end."""
    own, reached = [], float("-inf")
    for start, end in spans:
        own.append(max(0.0, end - max(start, reached)))
        reached = max(reached, end)
    return own


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
        target = written_tensor(func, args, kwargs)
        # What an in-place call's target holds before it writes: the call's input, which the write destroys.
        before = _laid_out_copy(target) if target is not None else None
        out = func(*args, **kwargs)
        if _returns_tensor(out):
            self.sequence.append((func, self._record(func, args, kwargs, out, before)))
        return out

    def _record(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any,
                before: torch.Tensor | None) -> Group:
        module = self.modules.current
        shape = describe_call(func, args, kwargs, out, self.constants, before)
        # The stage is the issuing module's: a call alike in all else but issued by another stage is its own group.
        stage = self.stage_of(module.split(".")[0] if module else ROOT_STAGE)
        key = json.dumps([stage, shape.key()])
        group = self.groups.get(key)
        if group is None:
            group = self.groups[key] = Group(replace(shape, tensors={}), stage, module)
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


class CaptureMismatch(HarnessError):
    """A timed forward called other functions than the recorded one: the model's control flow varies."""


@dataclass
class TimedPass:
    """One forward timed call by call: each group's calls' own time, and the forward's whole time."""

    seconds: dict[int, float]  # by id(group)
    total_s: float


def timed_forward(model: torch.nn.Module, inputs: tuple[Any, ...], cuda: bool,
                  sequence: list[tuple[Any, Group]]) -> TimedPass:
    """One forward with every call timed alone, credited to the recorded call at its place."""
    timer = _CallTimer(cuda)
    clock = timer.clock
    if cuda:
        torch.cuda.synchronize()
    with torch.no_grad():
        began = clock.mark()
        with timer:
            model(*inputs)
        ended = clock.mark()
    if cuda:
        torch.cuda.synchronize()
    if timer.funcs != [func for func, _ in sequence]:
        raise CaptureMismatch(f"a second forward made {len(timer.funcs)} calls where the recorded one made "
                              f"{len(sequence)}, or other ones: the capture needs a forward that repeats")
    spans = [(clock.since(began, start), clock.since(began, end)) for start, end in clock.spans]
    totals: dict[int, float] = {}
    for (_, group), seconds in zip(sequence, own_seconds(spans)):
        totals[id(group)] = totals.get(id(group), 0.0) + seconds
    return TimedPass(totals, clock.since(began, ended))


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


@dataclass
class Recorded:
    """A recorded forward: its groups, and the plain forward's time with how it was reached."""

    groups: list[Group]
    forward_s: float  # the median plain forward
    forwards: int  # pairs of a plain and a call-timed forward
    stable: bool  # whether both kinds of forward settled (harness.profile.timing.is_stable) before the cap
    spread: float  # the plain forwards' relative interquartile range


def record_forward(model: torch.nn.Module, inputs: tuple[Any, ...], cuda: bool, stage_of: Callable[[str], str],
                   repeats: int = 3, max_forwards: int = MAX_FORWARDS, max_s: float = SETTLE_S) -> Recorded:
    """One recorded forward of `model` on `inputs`, then pairs of a plain forward and a forward whose calls are
    timed one by one, interleaved so that both see the same machine, until the time of both kinds settles (the
    timing module's rule: the median of the last 3 within 10% of the 3 before), at least `repeats` pairs, at most
    `max_forwards` or `max_s` seconds (then the capture says the time did not settle).

    A group's share is its calls' own time (own_seconds: no time counted twice) over the timed forwards' whole
    time, pooled over the passes, so the shares of all groups add up to at most 1; the rest is the model's
    Python between the calls and the timer's own work. A group's time in the model is its share of the plain
    forward's median time, which the timer's work does not slow."""
    with torch.no_grad(), _ModulePath(model) as modules, Recorder(model, stage_of, modules) as recorder:
        model(*inputs)
    plain: list[float] = []
    passes: list[TimedPass] = []
    started, stable = time.perf_counter(), False
    while True:
        plain.append(plain_forward(model, inputs, cuda))
        passes.append(timed_forward(model, inputs, cuda, recorder.sequence))
        stable = is_stable(plain) and is_stable([p.total_s for p in passes])
        if len(plain) >= repeats and (stable or len(plain) >= max(repeats, max_forwards)
                                      or time.perf_counter() - started >= max_s):
            break
    forward_s = statistics.median(plain)
    timed_s = sum(p.total_s for p in passes)
    groups = list(recorder.groups.values())
    for group in groups:
        group.share = sum(p.seconds.get(id(group), 0.0) for p in passes) / timed_s if timed_s > 0 else 0.0
        group.time_s = group.share * forward_s
    quartiles = statistics.quantiles(plain, n=4, method="inclusive") if len(plain) >= 2 else [forward_s] * 3
    spread = (quartiles[2] - quartiles[0]) / forward_s if forward_s > 0 else 0.0
    return Recorded(groups, forward_s, len(plain), stable, spread)
