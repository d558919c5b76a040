"""Workloads: a card's op at its (optionally scaled) shape, with inputs, a baseline callable and roofline facts.

    from harness.workloads import build_for_card
    w = build_for_card(card, scale=0.25)          # or build_workload("linear", {"M": .., "N": .., "K": ..})
    out = w.run()                                  # the baseline op
    ref = w.reference()                            # float64 recomputation for correctness checks
    w.flops, w.min_bytes, w.describe()

`plan_workload` / `plan_for_card` give the same arithmetic (shape, FLOPs, bytes) without tensors.
One module per op kind: linear, conv3d, attention, cast, vae_decode (a chunk card's whole decode);
inputs.py finds, verifies and slices captured inputs or makes seeded synthetic ones.
"""

from harness.workloads.attention import (
    AttentionConfig,
    allocation_mask,
    masked_allocation_attention,
    queries_for_resolution,
    valid_prefix_attention,
)
from harness.workloads.base import LAYOUTS, Plan, Workload, WorkloadError, dtype_name, parse_dtype
from harness.workloads.cast import CastConfig
from harness.workloads.inputs import Captured, file_sha256, find_captured, load_captured, tensor_sha256
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
    "Captured",
    "CastConfig",
    "Plan",
    "Workload",
    "WorkloadError",
    "allocation_mask",
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
    "tensor_sha256",
    "valid_prefix_attention",
]
