"""What one recorded call of a torch function is, as a card would say it: its op name, workload family,
shape parameters and the tensors its workload takes, by the names that workload reads them under.

The op kinds the harness models map to their own workloads, with the shipped report's op names and shape
parameters: `aten.linear.default` (M, N, K), `aten.conv3d.default` / `aten.conv2d.default` (input, weight,
output, stride, padding, dilation, groups), `aten.scaled_dot_product_attention.default` (as self-attention
over every key: valid = allocated = the key length), `aten.to.dtype` (a cast on the same device). A call
of those that the workload cannot express (a masked or causal SDPA, a conv with asymmetric 'same'
padding, an unbatched input) and every other op is a `replay` card: the call itself, encoded by
harness.workloads.call_codec. An in-place call (`relu_`, `ReLU(inplace=True)`, `out += x`, `out=`) is a replay
card of the in-place op (`aten.relu_.default`, `aten.add_.Tensor`) on what its target held before the call (the
recorder's copy; `writes` names it), so that its replay writes into a copy of those values. A view (its output
shares its input's storage: no work of its own), an allocation (`empty_like`: its output is uninitialised), or a
call whose arguments have no JSON form is recorded (its time counts) but not replayable.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch.utils._pytree import tree_flatten

from harness.cards.ids import REPLAY
from harness.workloads.call_codec import NotEncodable, describe_tensor, encode, qualified_name
from harness.workloads.params import dtype_name

CAST = "aten.to.dtype"
_CASTS = {torch.Tensor.float: torch.float32, torch.Tensor.half: torch.float16,
          torch.Tensor.bfloat16: torch.bfloat16, torch.Tensor.double: torch.float64}
# Operator dunders by the aten op they run: a card names `aten.mul.Tensor`, not `__mul__`.
_DUNDER_OPS = {"__add__": "add", "__radd__": "add", "__sub__": "sub", "__rsub__": "rsub", "__mul__": "mul",
               "__rmul__": "mul", "__truediv__": "div", "__rtruediv__": "div", "__matmul__": "matmul",
               "__neg__": "neg", "__pow__": "pow", "__rpow__": "pow", "__getitem__": "index", "__mod__": "remainder",
               "__floordiv__": "floor_divide", "__and__": "bitwise_and", "__or__": "bitwise_or",
               # In place (`out += x`): the aten op that writes into its first argument.
               "__iadd__": "add_", "__isub__": "sub_", "__imul__": "mul_", "__itruediv__": "div_",
               "__ipow__": "pow_", "__iand__": "bitwise_and_", "__ior__": "bitwise_or_"}


@dataclass
class CallShape:
    """One call as a card's op: calls alike in all of it (but the tensors' values) form one group."""

    op: str  # the card's op name
    op_kind: str  # linear, conv2d, conv3d, attention, cast, replay
    shape_parameters: dict[str, Any]
    tensors: dict[str, torch.Tensor]  # by the name the workload reads each under
    activations: tuple[str, ...]  # the tensors that vary per call (the rest: parameters and buffers)
    replayable: str | None = None  # why the call cannot be replayed; None: it can
    layouts: dict[str, str] = field(default_factory=dict)

    def key(self) -> str:
        return json.dumps([self.op, self.op_kind, self.shape_parameters, self.layouts], sort_keys=True, default=str)


def _ints(value: Any, n: int) -> list[int]:
    return [int(v) for v in value] if isinstance(value, (list, tuple)) else [int(value)] * n


def _argument(args: tuple[Any, ...], kwargs: dict[str, Any], index: int, name: str, default: Any = None) -> Any:
    return args[index] if len(args) > index else kwargs.get(name, default)


def _linear(args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> CallShape | None:
    x, weight = _argument(args, kwargs, 0, "input"), _argument(args, kwargs, 1, "weight")
    bias = _argument(args, kwargs, 2, "bias")
    if not (isinstance(x, torch.Tensor) and isinstance(weight, torch.Tensor)) or weight.dim() != 2 or x.dim() < 1:
        return None
    n, k = weight.shape
    params = {"M": x.numel() // max(k, 1), "N": int(n), "K": int(k), "bias": bias is not None,
              "input_dtype": dtype_name(x.dtype)}
    tensors = {"x": x, "weight": weight, **({"bias": bias} if isinstance(bias, torch.Tensor) else {})}
    return CallShape("aten.linear.default", "linear", params, tensors, ("x",))


def _conv(dims: int) -> Callable[[tuple[Any, ...], dict[str, Any], Any], CallShape | None]:
    def describe(args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> CallShape | None:
        x, weight = _argument(args, kwargs, 0, "input"), _argument(args, kwargs, 1, "weight")
        bias = _argument(args, kwargs, 2, "bias")
        if not (isinstance(x, torch.Tensor) and isinstance(weight, torch.Tensor) and isinstance(out, torch.Tensor)):
            return None
        if x.dim() != dims + 2:  # an unbatched input: the workload takes [N, C, ...]
            return None
        stride = _ints(_argument(args, kwargs, 3, "stride", 1), dims)
        dilation = _ints(_argument(args, kwargs, 5, "dilation", 1), dims)
        padding_arg = _argument(args, kwargs, 4, "padding", 0)
        if padding_arg == "valid":
            padding = [0] * dims
        elif padding_arg == "same":
            total = [d * (k - 1) for d, k in zip(dilation, weight.shape[2:])]
            if any(t % 2 for t in total):
                return None  # asymmetric: torch pads one side more, which no stride/padding pair says
            padding = [t // 2 for t in total]
        else:
            padding = _ints(padding_arg, dims)
        params = {"input": list(x.shape), "weight": list(weight.shape), "output": list(out.shape),
                  "stride": stride, "padding": padding, "dilation": dilation,
                  "groups": int(_argument(args, kwargs, 6, "groups", 1)), "bias": bias is not None,
                  "input_dtype": dtype_name(x.dtype)}
        tensors = {"input": x, "weight": weight, **({"bias": bias} if isinstance(bias, torch.Tensor) else {})}
        return CallShape(f"aten.conv{dims}d.default", f"conv{dims}d", params, tensors, ("input",))

    return describe


def _attention(args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> CallShape | None:
    q, k, v = (_argument(args, kwargs, i, name) for i, name in enumerate(("query", "key", "value")))
    if not all(isinstance(t, torch.Tensor) and t.dim() == 4 for t in (q, k, v)):
        return None
    plain = (_argument(args, kwargs, 3, "attn_mask") is None and not _argument(args, kwargs, 4, "dropout_p", 0.0)
             and not _argument(args, kwargs, 5, "is_causal", False) and not kwargs.get("enable_gqa", False))
    scale = kwargs.get("scale", args[6] if len(args) > 6 else None)
    if not plain or (scale is not None and not math.isclose(scale, 1 / math.sqrt(q.shape[-1]))):
        return None  # a mask, causal, dropout or another scale: the attention workload has none of them
    if k.shape != v.shape or q.shape[:2] != k.shape[:2] or q.shape[-1] != k.shape[-1]:
        return None
    batch, heads, queries, head_dim = (int(d) for d in q.shape)
    keys = int(k.shape[2])
    # A capture sees shapes, not where the keys came from: queries over as many keys is self-attention, over
    # another number of keys cross-attention (a text context; a self-attention over a KV cache reads as cross).
    role = "self" if keys == queries else "cross"
    params = {"role": role, "batch": batch, "heads": heads, "head_dim": head_dim, "queries": queries,
              "valid_keys": keys, "allocated_keys": keys, "input_dtype": dtype_name(q.dtype)}
    return CallShape("aten.scaled_dot_product_attention.default", "attention", params, {"q": q, "k": k, "v": v},
                     ("q", "k", "v"))


def _cast(func: Callable[..., Any], args: tuple[Any, ...], out: Any) -> CallShape | None:
    source = args[0] if args else None
    if not (isinstance(source, torch.Tensor) and isinstance(out, torch.Tensor)) or out is source:
        return None  # a no-op `.to` returns its input
    if out.dtype == source.dtype or out.device != source.device:
        return None  # a move between devices, or a copy: not the cast workload
    params = {"shape": list(source.shape), "src_dtype": dtype_name(source.dtype), "dtype": dtype_name(out.dtype),
              "input_dtype": dtype_name(source.dtype)}
    return CallShape(CAST, "cast", params, {"frames": source}, ("frames",))


_KNOWN: dict[Any, Callable[[tuple[Any, ...], dict[str, Any], Any], CallShape | None]] = {
    F.linear: _linear,
    torch.conv2d: _conv(2),
    torch.conv3d: _conv(3),
    F.scaled_dot_product_attention: _attention,
}


def aten_name(func: Callable[..., Any]) -> str:
    """The aten op a function runs, as the report names ops (`aten.group_norm.default`), where one has its
    name; else the function's own dotted name."""
    name = getattr(func, "__name__", "op")
    for candidate in (_DUNDER_OPS.get(name), name, name.lstrip("_")):
        packet = getattr(torch.ops.aten, candidate, None) if candidate else None
        if packet is not None and hasattr(packet, "overloads"):
            overloads = packet.overloads()
            # The Tensor overload where there is one: `aten.mul.default` is the scalar-by-scalar one.
            overload = next((o for o in ("Tensor", "default") if o in overloads), overloads[0] if overloads else "")
            return f"aten.{candidate}.{overload}" if overload else f"aten.{candidate}"
    try:
        return qualified_name(func)
    except NotEncodable:
        return name


def in_place(func: Callable[..., Any], kwargs: dict[str, Any]) -> bool:
    name = getattr(func, "__name__", "")
    # torch's dispatch passes a function's defaults along (`out=None`): only a given `out` writes elsewhere.
    return (name.endswith("_") and not name.endswith("__")) or bool(kwargs.get("inplace")) or \
        kwargs.get("out") is not None


def describe_call(func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], out: Any,
                  constants: set[int], written: torch.Tensor | None = None) -> CallShape:
    """The call as a card's op; `constants` are the ids of the model's parameters and buffers; `written`, for an
    in-place call, a copy of what its target held before the call (the replay writes into a copy of that)."""
    known = _KNOWN.get(func) if written is None else None
    shape = known(args, kwargs, out) if known is not None else (
        _cast(func, args, out) if written is None and (func is torch.Tensor.to or func in _CASTS) else None)
    if shape is None:
        shape = _replay(func, args, kwargs, out, constants, written)
    shape.layouts = {name: describe_tensor(t)["layout"] for name, t in shape.tensors.items()}
    return shape


def aliases_an_input(out: Any, tensors: dict[str, torch.Tensor]) -> bool:
    """Whether an output shares storage with an input: a view (reshape, transpose, a slice), no work of its own."""
    storages = {t.untyped_storage().data_ptr() for t in tensors.values() if t.numel()}
    outputs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor) and t.numel()]
    return any(t.untyped_storage().data_ptr() in storages for t in outputs)


# Ops whose output holds whatever the allocator returned: two calls differ, and no reference can agree.
_UNINITIALISED = frozenset({"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"})


def written_tensor(func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor | None:
    """The tensor an in-place call writes into (its `out=`, else its first argument); None for any other call."""
    if not in_place(func, kwargs):
        return None
    target = kwargs.get("out") if kwargs.get("out") is not None else (args[0] if args else None)
    return target if isinstance(target, torch.Tensor) else None


def _in_place_op(op: str) -> str:
    """`aten.relu.default` called with inplace=True runs `aten.relu_.default`, where aten has that op."""
    parts = op.split(".")
    if len(parts) < 2 or parts[0] != "aten" or parts[1].endswith("_"):
        return op
    packet = getattr(torch.ops.aten, f"{parts[1]}_", None)
    return f"aten.{parts[1]}_.{parts[2]}" if packet is not None and len(parts) > 2 else op


def _call_dtype(tensors: dict[str, torch.Tensor], args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> Any:
    """The dtype the call computes in: its first floating tensor's; for a call with none (`torch.arange`,
    `torch.zeros`), the dtype it names for itself (`dtype=`), else its output's."""
    floating = next((t.dtype for t in tensors.values() if t.is_floating_point()), None)
    named = kwargs.get("dtype") if isinstance(kwargs.get("dtype"), torch.dtype) else None
    result = out if isinstance(out, torch.Tensor) else None
    return floating or named or (result.dtype if result is not None and result.is_floating_point() else None)


def _replay(func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], out: Any,
            constants: set[int], written: torch.Tensor | None = None) -> CallShape:
    """A replay card's call. `written`: what an in-place call's target held before it wrote (the recorder's copy),
    recorded in its place, so that the replay writes into a copy of the same values (`writes` names it)."""
    op = aten_name(func)
    tensors: dict[str, torch.Tensor] = {}
    names: dict[int, str] = {}

    def name_of(tensor: torch.Tensor) -> str:
        return names.setdefault(id(tensor), f"arg{len(names)}")

    target = written_tensor(func, args, kwargs)
    if target is not None and written is not None:
        args = tuple(written if a is target else a for a in args)
        kwargs = {k: written if v is target else v for k, v in kwargs.items()}
        op = _in_place_op(op)
    try:
        params: dict[str, Any] = {"callable": qualified_name(func), "args": encode(list(args), tensors, name_of),
                                  "kwargs": encode(dict(kwargs), tensors, name_of)["dict"]}
    except NotEncodable as exc:
        return CallShape(op, REPLAY, {"callable": op}, {}, (), replayable=f"not replayable: {exc}")
    why = None
    if target is not None:
        if written is None or id(written) not in names:
            why = "it writes into a tensor the recorder did not copy before the call (in place)"
        else:
            params["writes"] = names[id(written)]
    elif aliases_an_input(out, tensors):
        why = "its output is a view of its input (no work of its own)"
    if why is None and op.startswith("aten.") and op.split(".")[1] in _UNINITIALISED:
        why = "its output is uninitialised memory (an allocation: no values to check, no work to time)"
    params["tensors"] = {name: describe_tensor(t) for name, t in tensors.items()}
    activations = tuple(name for name, t in tensors.items() if id(t) not in constants)
    params["activations"] = list(activations)
    dtype = _call_dtype(tensors, args, kwargs, out)
    if dtype is not None:
        params["input_dtype"] = dtype_name(dtype)
    return CallShape(op, REPLAY, params, tensors, activations, replayable=why)
