"""Any other captured op, replayed as captured: the call the capture recorded, on its own tensors or on seeded
ones of the same shapes, dtypes and layouts.

A captured model runs many ops no workload family models (norms, activations, adds, upsampling, copies). Their
cards (`op_kind: replay`) still deserve a re-profile and a stall breakdown, so the capture records each call in
harness.workloads.call_codec's form and this module calls it again. Card shape parameters:

- `callable`: the function's dotted name (`torch.nn.functional.group_norm`, `torch.Tensor.__add__`), resolved
  only by call_codec.resolve, which refuses anything outside torch's operators: a report can come from anywhere;
- `args`, `kwargs`: the encoded arguments, each tensor a reference `{"tensor": name}`;
- `tensors`: {name: {shape, dtype, layout}}; `activations`: the names that vary from call to call (default:
  every tensor); the rest (parameters, buffers) are constants;
- optionally `reduction_length`: the terms summed into one output, where the capture knows it (default 1).

Nothing scales: a captured call has no rule that shrinks its shapes consistently (a group norm's groups, a
reshape's sizes), so it runs at scale 1 whatever `workload.scale` says, and each tensor keeps its recorded
dtype. FLOPs are unknown (0: no achieved TFLOP/s, no compute floor); the minimum bytes are the tensors' bytes
plus the output's, whose shape a run on the meta device gives without computing anything.

Synthetic tensors: floating ones of std 1. An integer or bool tensor is an index or a mask, which a seeded
draw cannot stand for: without the captured file (`inputs.dir=`) such a card is refused, and with it the
tensor is held constant across draws (another draw of indices would be out of range as often as not).

The float64 reference is the same call with every floating tensor, and every floating dtype argument (the
`dtype=torch.float32` of a softmax would undo it), in float64, except for a cast, whose dtype argument is the
op. An op without a float64 kernel here is its own reference, converted: its rounding is then not judged.
Only the first tensor of a tuple output is returned and checked. Replayed calls do not batch.

An in-place call (torch's trailing underscore, an in-place operator, `inplace=True`, `out=`) writes into one of
its tensors, `writes` (default: its `out=`, else its first argument): its replay writes into a copy of that
input, made when the call is bound and restored from it before each call (`Workload.before_call`, outside every
clock and profiled range), so that the write is the op's work and is timed, the copy is not, every call writes
into the same values (a `+=` does not accumulate), and the inputs stay intact. What it returns (the written
tensor) is checked against the same call on float64 copies.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable

import torch

from harness.cards.ids import REPLAY
from harness.workloads.base import Bound, Plan
from harness.workloads.call_codec import decode, resolve, tensor_names
from harness.workloads.input_guard import InputGuard
from harness.workloads.inputs import Source
from harness.workloads.params import (
    LAYOUT_DIMS,
    MEMORY_FORMATS,
    WorkloadError,
    dtype_name,
    element_size,
    numel,
    parse_dtype,
    positive_int,
    require,
)

KIND = REPLAY
# Ops whose dtype argument is the result they are asked for (a cast), not the precision they compute in.
_CASTS = frozenset({"to", "type", "_to_copy"})


@dataclass(frozen=True)
class Call:
    """A card's call, checked: the function, its encoded arguments and what each tensor is."""

    name: str
    fn: Callable[..., Any]
    args: list[Any]
    kwargs: dict[str, Any]
    tensors: dict[str, dict[str, Any]]  # name -> {shape, dtype, layout}, in the order the call uses them
    activations: tuple[str, ...]
    reduction_length: int
    writes: str | None = None  # the tensor an in-place call writes into (None: it computes a new one)

    def shape(self) -> dict[str, Any]:
        return {"callable": self.name, "args": self.args, "kwargs": self.kwargs, "tensors": self.tensors,
                "activations": list(self.activations), "reduction_length": self.reduction_length,
                **({"writes": self.writes} if self.writes else {})}

    def dtype(self, name: str) -> torch.dtype:
        return tensor_dtype(self.tensors[name]["dtype"], f"tensor {name!r} dtype")

    def decoded(self, tensors: dict[str, torch.Tensor], device: str, wide: torch.dtype | None = None
                ) -> tuple[list[Any], dict[str, Any]]:
        """The call's arguments on these tensors; with `wide`, its floating dtype arguments made `wide` (not a
        cast's)."""
        args, kwargs = self.args, self.kwargs
        if wide is not None and self.name.rsplit(".", 1)[-1] not in _CASTS:
            args, kwargs = _widened(args, wide), {k: _widened(v, wide) for k, v in kwargs.items()}
        return decode(args, tensors, device), {k: decode(v, tensors, device) for k, v in kwargs.items()}


def tensor_dtype(value: Any, what: str) -> torch.dtype:
    """A recorded dtype: the harness's names, or any torch dtype by its name (bool, int16, complex64)."""
    found = getattr(torch, value, None) if isinstance(value, str) else None
    return found if isinstance(found, torch.dtype) else parse_dtype(value, what=f"{KIND} {what}")


def _widened(value: Any, wide: torch.dtype) -> Any:
    """An encoded value with each floating dtype in it replaced by `wide`."""
    if isinstance(value, list):
        return [_widened(v, wide) for v in value]
    if not isinstance(value, dict) or len(value) != 1:
        return value
    (key, inner), = value.items()
    if key == "dtype":
        return {key: dtype_name(wide)} if tensor_dtype(inner, "dtype argument").is_floating_point else value
    if key == "dict":
        return {key: {k: _widened(v, wide) for k, v in inner.items()}}
    return {key: _widened(inner, wide)} if key in ("tuple", "slice") else value


def _in_place(name: str, fn: Callable[..., Any], args: list[Any], kwargs: dict[str, Any]) -> str | None:
    """Why the call writes into an argument (torch's trailing underscore, an in-place operator, out=, inplace=),
    or None."""
    last = name.rsplit(".", 1)[-1]
    if last.endswith("_") and not last.endswith("__"):
        return f"{last} is torch's in-place form (trailing underscore)"
    if last == "__setitem__" or last.startswith("__i") and hasattr(torch.Tensor, f"__{last[3:]}"):
        return f"{last} is an in-place operator"
    if kwargs.get("out") is not None:  # a captured call carries its defaults, out=None among them
        return "it writes into its out= argument"
    try:
        bound = inspect.signature(fn).bind_partial(*args, **kwargs).arguments
    except (TypeError, ValueError):  # a C function without a signature, or arguments it does not take
        bound = kwargs
    return "it is called with inplace=True" if bound.get("inplace") is True else None


def parse_call(params: dict[str, Any]) -> Call:
    name = require(KIND, params, "callable")
    if not isinstance(name, str):
        raise WorkloadError(f"{KIND}: callable must be a dotted torch name, got {name!r}")
    fn = resolve(name)
    args, kwargs = params.get("args") or [], params.get("kwargs") or {}
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise WorkloadError(f"{KIND}: args must be a list and kwargs an object (harness.workloads.call_codec)")
    writes = _written(name, fn, args, kwargs, params.get("writes"))
    specs = params.get("tensors") or {}
    if not isinstance(specs, dict):
        raise WorkloadError(f"{KIND}: tensors must be an object {{name: {{shape, dtype, layout}}}}")
    used = tensor_names([args, list(kwargs.values())])
    missing = [n for n in used if n not in specs]
    if missing:
        raise WorkloadError(f"{KIND}: the call uses tensor(s) {', '.join(missing)} that `tensors` does not describe")
    tensors = {n: _spec(n, specs[n]) for n in used}
    wanted = params.get("activations")
    activations = tuple(used) if wanted is None else tuple(wanted) if isinstance(wanted, list) else None
    if activations is None or any(a not in tensors for a in activations):
        raise WorkloadError(f"{KIND}: activations must list tensors the call uses ({', '.join(used) or 'none'}), "
                            f"got {wanted!r}")
    reduction = positive_int(KIND, "reduction_length", params.get("reduction_length", 1))
    if writes is not None and writes not in tensors:
        raise WorkloadError(f"{KIND}: writes names {writes!r}, not a tensor the call uses ({', '.join(used)})")
    return Call(name, fn, args, kwargs, tensors, activations, reduction, writes)


def _written(name: str, fn: Callable[..., Any], args: list[Any], kwargs: dict[str, Any], given: Any) -> str | None:
    """The tensor an in-place call writes into: `given` (the capture's `writes`), else its out=, else its first
    argument; None for a call that writes into none."""
    why = _in_place(name, fn, args, kwargs)
    if why is None:
        return None
    if given is not None:
        return str(given)
    target = kwargs.get("out") if kwargs.get("out") is not None else (args[0] if args else None)
    if not (isinstance(target, dict) and set(target) == {"tensor"}):
        raise WorkloadError(f"{KIND}: {name} writes into its arguments ({why}) but names no tensor to write into: "
                            "give `writes`")
    return str(target["tensor"])


def _spec(name: str, spec: Any) -> dict[str, Any]:
    if not isinstance(spec, dict) or not isinstance(spec.get("shape"), list):
        raise WorkloadError(f"{KIND}: tensor {name!r} needs {{shape: [...], dtype, layout}}, got {spec!r}")
    shape = [positive_int(KIND, f"tensor {name!r} shape", d, minimum=0) for d in spec["shape"]]
    layout = spec.get("layout") or "contiguous"
    if layout != "strided" and layout not in MEMORY_FORMATS:
        raise WorkloadError(f"{KIND}: tensor {name!r} layout {layout!r}; known: {', '.join(MEMORY_FORMATS)}, strided")
    if LAYOUT_DIMS.get(layout, len(shape)) != len(shape):
        raise WorkloadError(f"{KIND}: tensor {name!r} is {len(shape)}-D, layout {layout} needs {LAYOUT_DIMS[layout]}-D")
    dtype = tensor_dtype(spec.get("dtype", "float32"), f"tensor {name!r} dtype")
    strides = spec.get("strides")
    if layout == "strided" and strides is not None and not (
            isinstance(strides, list) and len(strides) == len(shape)
            and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in strides)):
        raise WorkloadError(f"{KIND}: tensor {name!r} strides {strides!r}: one non-negative integer per dimension")
    kept = {"strides": strides} if layout == "strided" and strides is not None else {}
    return {"shape": shape, "dtype": dtype_name(dtype), "layout": layout, **kept}


def _laid_out(tensor: torch.Tensor, spec: dict[str, Any]) -> torch.Tensor:
    """In the recorded memory format; a strided tensor on its recorded strides where they hold each element
    once (a slice, a transpose), else (an expand's zero stride, no strides recorded) contiguous."""
    strides = spec.get("strides")
    if spec["layout"] == "strided" and strides and 0 not in strides:
        laid = torch.empty_strided(tuple(spec["shape"]), tuple(strides), dtype=tensor.dtype, device=tensor.device)
        try:
            return laid.copy_(tensor)
        except RuntimeError:  # strides that overlap: no tensor of its own can have them
            pass
    return tensor.contiguous(memory_format=MEMORY_FORMATS.get(spec["layout"], torch.contiguous_format))


def _restored(spec: dict[str, Any]) -> bool:
    return spec["layout"] != "strided" or bool(spec.get("strides")) and 0 not in spec["strides"]


def first_tensor(output: Any, name: str) -> torch.Tensor:
    """The output, or the first tensor of a tuple or list of outputs."""
    if isinstance(output, torch.Tensor):
        return output
    for item in output if isinstance(output, (tuple, list)) else ():
        if isinstance(item, torch.Tensor):
            return item
    raise WorkloadError(f"{KIND}: {name} returns {type(output).__name__}, not a tensor: nothing to check")


def _meta_output(call: Call) -> tuple[torch.Tensor | None, str]:
    """The output on the meta device (shapes without compute), and how many outputs there are, or why not."""
    tensors = {n: _laid_out(torch.empty(s["shape"], dtype=call.dtype(n), device="meta"), s)
               for n, s in call.tensors.items()}
    try:
        args, kwargs = call.decoded(tensors, "meta")
        output = call.fn(*args, **kwargs)
        return first_tensor(output, call.name), str(len(output)) if isinstance(output, (tuple, list)) else "1"
    except Exception as exc:  # no meta kernel, a data-dependent shape: whatever the op raises, bytes unknown
        return None, (str(exc).splitlines() or [type(exc).__name__])[0][:120]


def plan(params: dict[str, Any], *, dtype: torch.dtype, scale: float) -> Plan:
    call = parse_call(params)
    notes = ["FLOPs unknown for a replayed op: 0 (no achieved TFLOP/s, no compute floor)"]
    if scale < 1.0:
        notes.append(f"replayed at scale 1 (scale {scale:g} not applied: a captured call has no rule to shrink it)")
    floating = [n for n in call.tensors if call.dtype(n).is_floating_point]
    own = call.dtype((floating or list(call.tensors))[0]) if call.tensors else torch.float32
    if own != dtype:
        notes.append(f"dtype {dtype_name(dtype)} not applied: each tensor keeps its recorded dtype")
    min_bytes = float(sum(numel(s["shape"]) * element_size(call.dtype(n)) for n, s in call.tensors.items()))
    output, count = _meta_output(call)
    if output is None:
        notes.append(f"min_bytes counts the inputs only: the output's size is unknown without running it ({count})")
    else:
        min_bytes += output.numel() * output.element_size()
        if count != "1":
            notes.append(f"only output 0 of {count} is returned and checked")
    return Plan(op_kind=KIND, shape=call.shape(), original_shape=call.shape(), scale=1.0, dtype=own,
                output_shape=tuple(output.shape) if output is not None else (), flops=0.0, min_bytes=min_bytes,
                reduction_length=call.reduction_length, notes=tuple(notes))


def _take(source: Source, name: str, spec: dict[str, Any], dtype: torch.dtype, primary: bool) -> torch.Tensor:
    shape = tuple(spec["shape"])
    if not (dtype.is_floating_point or dtype.is_complex) and source.find((name,), primary) is None:
        raise WorkloadError(f"{KIND}: tensor {name!r} is {dtype_name(dtype)} (indices or a mask), which a seeded "
                            "draw cannot stand for: give the captured inputs (inputs.dir=) that hold it")
    return _laid_out(source.take(name, shape, shape, dtype, primary=primary), spec)


def build(plan_: Plan, source: Source, layout: str | None) -> dict[str, Any]:
    if layout not in (None, "contiguous"):
        raise WorkloadError(f"{KIND}: layout {layout!r} does not apply: each tensor keeps its recorded layout")
    call, device = parse_call(plan_.shape), source.device
    inputs = {n: _take(source, n, s, call.dtype(n), primary=i == 0) for i, (n, s) in enumerate(call.tensors.items())}
    notes = [f"tensor {n} was a strided view: replayed contiguous" for n, s in call.tensors.items()
             if not _restored(s)]
    held = [n for n in call.activations if not inputs[n].is_floating_point()]
    if held:
        notes.append(f"{', '.join(held)} held constant across draws: another draw of indices or a mask is not one")
    activations = tuple(n for n in call.activations if n not in held)

    def bind(drawn: dict[str, torch.Tensor], wide_kernel: bool = True) -> Bound:
        tensors = {**inputs, **drawn}
        written = call.writes
        target = _copy_of(tensors[written]) if written else None  # an in-place call's own copy of its input
        args, kwargs = call.decoded({**tensors, written: target} if written and target is not None else tensors,
                                    device)

        def run() -> torch.Tensor:
            return first_tensor(call.fn(*args, **kwargs), call.name)

        def restore() -> None:
            assert written is not None and target is not None
            target.copy_(tensors[written])

        def own(values: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
            """The tensors a reference calls on: an in-place call's target copied, so that it writes no input."""
            return {n: _copy_of(t) if n == written else t for n, t in values.items()}

        def reference(wide: torch.dtype) -> torch.Tensor:
            if not wide_kernel:
                own_args, own_kwargs = call.decoded(own(tensors), device)
                return first_tensor(call.fn(*own_args, **own_kwargs), call.name).to(wide)
            widened = {n: t.to(wide) if t.is_floating_point() else t for n, t in tensors.items()}
            wide_args, wide_kwargs = call.decoded(own(widened), device, wide)
            out = first_tensor(call.fn(*wide_args, **wide_kwargs), call.name)
            return out.to(wide) if out.is_floating_point() else out

        return Bound(run, reference, before_call=restore if written else None)

    output, wide_kernel = _probe(call, inputs, bind({}))
    if not wide_kernel:
        notes.append(f"{call.name} has no float64 kernel here: its reference is the op in its own dtype converted to "
                     "float64 (its rounding is not judged)")
    return {"inputs": inputs, "activations": activations, "notes": notes, "output_shape": tuple(output.shape),
            "bind": lambda drawn: bind(drawn, wide_kernel)}


def _copy_of(tensor: torch.Tensor) -> torch.Tensor:
    """A copy on the same strides (the inputs are laid out so that each element is held once)."""
    try:
        return torch.empty_strided(tensor.size(), tensor.stride(), dtype=tensor.dtype,
                                   device=tensor.device).copy_(tensor)
    except RuntimeError:  # overlapping strides: a contiguous copy
        return tensor.clone(memory_format=torch.contiguous_format)


def _probe(call: Call, inputs: dict[str, torch.Tensor], bound: Bound) -> tuple[torch.Tensor, bool]:
    """One call on the inputs as built, refused when it writes into them or returns one of them; and whether
    the op has a float64 kernel here (its reference raises without one). An in-place call's target is restored
    after it (its first measured call writes into the input's values)."""
    guard = InputGuard(inputs)
    try:
        output = bound.run()
    except WorkloadError:
        raise
    except Exception as exc:
        first = (str(exc).splitlines() or [type(exc).__name__])[0][:160]
        raise WorkloadError(f"{KIND}: {call.name} raised on its recorded shapes ({first})") from None
    if bound.before_call is not None:
        output = output.clone()
        bound.before_call()
    problem = guard.aliased(output) or guard.check_and_restore()
    if problem:
        raise WorkloadError(f"{KIND}: {call.name}: {problem}; replay only ops that compute a new tensor")
    try:
        bound.reference(torch.float64)
    except RuntimeError:  # "... not implemented for 'Double'" (NotImplementedError is one too)
        return output, False
    return output, True
