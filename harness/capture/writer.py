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
    """The report's `group` form, `stage:op:{shape parameters}`; a replayed call by its tensors' shapes."""
    params = group.shape.shape_parameters
    if group.shape.op_kind == REPLAY:
        shapes = {name: desc["shape"] for name, desc in (params.get("tensors") or {}).items()}
        return f"{group.stage}:{group.shape.op}:{shapes}"
    shown = {k: v for k, v in params.items() if k != "input_dtype"}
    return f"{group.stage}:{group.shape.op}:{shown}"


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
