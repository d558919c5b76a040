"""The one interface every profiler backend implements.

A backend runs a callable and returns the kernels it launched as report-format `Kernel`s whose
`metrics` use the report's fields and units (harness.cards.fields). Each kernel says in
`extra["metrics_source"]` where its numbers came from, and a backend that estimates a field lists it
in `extra["estimated_fields"]`; a metric nobody can know stays None.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from harness.boundary.requests import Measure
from harness.cards.model import Kernel
from harness.errors import HarnessError


@dataclass(frozen=True)
class WorkloadFacts:
    """What the roofline needs to know about the measured call, from the workload."""

    flops: float | None
    min_bytes: float | None
    dtype: str  # "float32", "bfloat16", "float16", ... (torch dtype name without "torch.")
    op_kind: str  # linear, conv3d, attention, cast, vae_decode
    # A chunk of many ops (harness.cards.ids.CHUNK_OP_KINDS): keep each op's shapes apart in the
    # profile, so each op can be attributed to the report card of its shape.
    per_shape: bool = False
    # Run before each profiled call, outside the profiled range (an in-place replay's target restored:
    # harness.workloads.base.Workload.before_call); None: nothing.
    before_call: Callable[[], None] | None = None


@dataclass
class Profile:
    kernels: list[Kernel]
    backend: str  # "cpu", "torch_cuda", "ncu"
    metrics_source: str  # one of harness.cards.fields.SOURCE_*
    peaks: dict[str, Any] | None = None  # the peaks an estimate used, with where they came from
    settings: dict[str, Any] = field(default_factory=dict)  # e.g. ncu clock/cache control
    notes: list[str] = field(default_factory=list)


class ProfilerUnavailable(HarnessError):
    """The backend cannot run here; the message says what is missing and how to get it."""


class Profiler(Protocol):
    name: str

    def profile(self, fn: Callable[[], Any], facts: WorkloadFacts, request: Measure | None = None) -> Profile:
        """Run `fn` (already warmed up) under the profiler and return its kernels. `request` is the trial's
        (harness.boundary.requests: it carries the card's spec), for a backend that profiles the trial rebuilt
        in a process of its own (ncu); a backend that profiles `fn` here does not read it."""
        ...
