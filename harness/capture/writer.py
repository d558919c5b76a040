"""A capture's groups as report cards, and each kept group's captured inputs as a safetensors file named by
its sha256 (the layout `inputs.dir=` reads: harness.workloads.inputs).

A group's file holds its first call's tensors under the names its workload reads (linear `x`, `weight`,
`bias`; conv `input`, ...; a replayed call `arg0`, `arg1`, ...) and, when the group ran twice or more,
its second call's activations as `<name>@call1`: the workload's draw 1, the second draw of every
correctness check. The card's `input_sha256` is the SHA-256 of the file's bytes.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.capture.recorder import Group
from harness.cards.ids import REPLAY
from harness.cards.model import Card
from harness.workloads.inputs import SECOND_CALL, file_sha256


@dataclass
class Kept:
    """A group kept as a card: the card (not yet profiled) and where its inputs went."""

    group: Group
    card: Card
    share: float  # of the forward's measured time


def save_inputs(group: Group, folder: Path) -> str:
    """Write the group's captured tensors to a file named by its sha256; that sha256."""
    from safetensors.torch import save_file

    tensors = {name: t.contiguous() for name, t in group.shape.tensors.items()}
    tensors.update({f"{name}{SECOND_CALL}": t.contiguous() for name, t in group.second.items()})
    folder.mkdir(parents=True, exist_ok=True)
    staging = folder / f".staging-{hashlib.sha256(group.shape.key().encode()).hexdigest()[:16]}.safetensors"
    save_file(tensors, str(staging))
    digest = file_sha256(staging)
    final = folder / f"{digest}.safetensors"
    staging.replace(final)
    return digest


def group_text(group: Group) -> str:
    """The report's `group` form, `stage:op:...`, naming every field the grouping keys on (CallShape.key), so
    that two groups never share it, nor the card id derived from it: a modelled op by all its shape parameters
    (its dtype included) and the layout of each tensor that is not contiguous; a replayed call as the call
    itself, each tensor by its name, shape, dtype and layout (`arg1:1x16x1x8x8 float32 strided(2048,128,64,8,1)`),
    scalars and keyword arguments as given, and which tensors are the model's parameters or buffers."""
    shape = group.shape
    if shape.op_kind == REPLAY:
        return f"{group.stage}:{shape.op}:{_call_text(shape.shape_parameters)}"
    odd = {name: layout for name, layout in shape.layouts.items() if layout != "contiguous"}
    shown = {**shape.shape_parameters, **({"layouts": odd} if odd else {})}
    return f"{group.stage}:{shape.op}:{shown}"


def _call_text(params: dict[str, Any]) -> str:
    """`torch.cat([arg0:1x16x1x8x8 float32, arg1:1x16x1x8x8 float32 strided], dim=2)` from a replay's encoded call."""
    tensors: dict[str, Any] = params.get("tensors") or {}

    def text(value: Any) -> str:
        if isinstance(value, list):
            return "[" + ", ".join(text(v) for v in value) + "]"
        if isinstance(value, dict) and set(value) == {"tensor"}:
            desc = tensors.get(value["tensor"], {})
            layout = "" if desc.get("layout") == "contiguous" else f" {desc.get('layout')}"
            if desc.get("strides"):  # a strided tensor groups by its strides (a slice is not a transpose)
                layout += "(" + ",".join(str(v) for v in desc["strides"]) + ")"
            dims = "x".join(str(d) for d in desc.get("shape", [])) or "scalar"
            return f"{value['tensor']}:{dims} {desc.get('dtype')}{layout}"  # the name: x * x is not x * y
        if isinstance(value, dict) and set(value) == {"tuple"}:
            return "(" + ", ".join(text(v) for v in value["tuple"]) + ")"
        if isinstance(value, dict) and set(value) == {"dict"}:
            return "{" + ", ".join(f"{k}: {text(v)}" for k, v in value["dict"].items()) + "}"
        return repr(value) if not isinstance(value, dict) else str(value)

    arguments = [text(a) for a in params.get("args") or []]
    arguments += [f"{k}={text(v)}" for k, v in (params.get("kwargs") or {}).items()]
    constants = [n for n in tensors if n not in (params.get("activations") or [])]
    held = f" model_tensors={constants}" if constants else ""  # its parameters and buffers, not activations
    return f"{params.get('callable')}({', '.join(arguments)}){held}"


def card_of(group: Group, resolution: str | None, digest: str, forward_s: float) -> Card:
    """The group's card before profiling: what the capture knows of it."""
    extra: dict[str, Any] = {
        "capture": {
            "calls": group.calls,
            "time_us": round(group.time_s * 1e6, 3),
            "share_of_forward": round(group.time_s / forward_s, 6),
            "module": group.module,
            "modules": sorted(group.modules)[:8],
            "second_call_captured": bool(group.second),
            "layouts": dict(group.shape.layouts),
        }
    }
    if group.shape.op_kind == REPLAY:
        extra["op_kind"] = REPLAY
    return Card(group=group_text(group), resolution=resolution, stage=group.stage, op=group.shape.op,
                shape_parameters=dict(group.shape.shape_parameters), kernels=[], input_sha256=digest,
                status="captured", extra=extra)
