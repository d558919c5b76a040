"""Workloads: a card's op at its (optionally scaled) shape, with inputs, a baseline callable and roofline facts.

    from harness.workloads import build_for_card
    w = build_for_card(card, scale=0.25)          # or build_workload("linear", {"M": .., "N": .., "K": ..})
    out = w.run()                                  # the baseline op
    ref = w.reference()                            # float64 recomputation for correctness checks
    w.flops, w.min_bytes, w.describe()

    w.activations                                  # the inputs that vary per call (the rest are constants)
    w.redraw(1)                                    # the same op on another draw of them, with its reference
    batch = w.calls(4)                             # 4 calls (call 0 is w's own); batch.reference() stacked

`plan_workload` / `plan_for_card` give the same arithmetic (shape, FLOPs, bytes) without tensors.
One module per op kind: linear, conv3d, attention, cast, vae_decode (a chunk card's whole decode),
dit_block; inputs.py finds, verifies and slices captured inputs, seeded.py draws synthetic ones; the
Workload (base.py) makes other draws and k calls (frames.py: a conv3d's streaming windows); `batch_for`
(draws.py) finds the batch a variant built.
"""

from harness.workloads.attention import (
    AttentionConfig,
    allocation_mask,
    masked_allocation_attention,
    queries_for_resolution,
    valid_prefix_attention,
)
from harness.workloads.base import Bound, CallBatch, Plan, Workload
from harness.workloads.cast import CastConfig
from harness.workloads.draws import BatchError, batch_for, rebind
from harness.workloads.inputs import Captured, file_sha256, find_captured, load_captured, tensor_sha256
from harness.workloads.params import LAYOUTS, WorkloadError, dtype_name, parse_dtype
from harness.workloads.registry import (
    CPU_SCALES,
    OP_KINDS,
    build_for_card,
    build_workload,
    cast_frames_from_report,
    plan_for_card,
    plan_workload,
)

__all__ = [
    "CPU_SCALES",
    "LAYOUTS",
    "OP_KINDS",
    "AttentionConfig",
    "BatchError",
    "Bound",
    "CallBatch",
    "Captured",
    "CastConfig",
    "Plan",
    "Workload",
    "WorkloadError",
    "allocation_mask",
    "batch_for",
    "build_for_card",
    "build_workload",
    "cast_frames_from_report",
    "dtype_name",
    "file_sha256",
    "find_captured",
    "load_captured",
    "masked_allocation_attention",
    "parse_dtype",
    "plan_for_card",
    "plan_workload",
    "queries_for_resolution",
    "rebind",
    "tensor_sha256",
    "valid_prefix_attention",
]
