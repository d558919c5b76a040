"""CPU backend: torch.profiler op times, report-format kernels, roofline-estimated percentages.

What is measured and what is estimated (every kernel says so in `extra`):

- `dur_us` is MEASURED: the op's self CPU time from torch.profiler (wall time on the calling
  thread, children excluded; intra-op worker threads run inside it), summed over all of the op's
  invocations in the measured calls and divided by the number of measured calls of `fn` (3, or fewer
  once the profiled calls took 50 ms: a call that long is steady, and a profiled call is not measurement).
- `sm_pct` is ESTIMATED: achieved FLOP/s / the measured CPU peak FLOP/s of the op's dtype x 100.
  FLOPs are the profiler's own count (`with_flops`, known for mm/addmm/bmm/conv2d ...) when it
  reports one. Otherwise `WorkloadFacts.flops` is attributed to the workload's main compute op
  (see `main_compute_op`), and only when the profiler's FLOPs summed over all kept ops are below
  half of `facts.flops` (so that work is never counted twice). An op with no known FLOP count has
  `sm_pct` None, not 0.
- `dram_pct`, `dram_read_mb`, `dram_write_mb` are ESTIMATED from shapes, not counted:
  read bytes = the recorded tensor inputs (elements x element size of their recorded dtype);
  write bytes = the op's net CPU allocation during the call (torch.profiler `profile_memory`,
  which for an out-of-place op is its output), except for in-place ops (name ends in `_`), which
  write their first input (`copy_` reads only its source). Tensor-list inputs (cat, stack) have
  no recorded shapes and are assumed to be as large as the output. dram_pct = (read + write) /
  dur / measured copy bandwidth x 100. A working set that fits in the last-level cache never
  reaches DRAM, so there the number overstates DRAM traffic (flagged in `extra["bytes_note"]`)
  and may exceed 100.
- `tensor_pct`, `l2_pct`, `warps_active_pct`, `max_warps_pct`, `waves`, launch and cycle fields
  have no CPU meaning and stay None.

Which ops become kernels (the rest are reported in `Profile.settings["dropped_ops_us"]`):
1. only ops inside the measured calls (each wrapped in a `harness::measured_call#i` range); user
   annotations and Python function events are never kernels;
2. allocation, view and metadata ops (`IGNORED_OPS`, e.g. aten::empty, aten::resize_, aten::view,
   aten::as_strided, aten::t) are dropped whatever their time: they move no data;
3. dispatcher wrappers are dropped: an op whose children of work (rule 2's ops left out) take over half
   of its inclusive time (aten::conv3d, aten::linear, aten::to, aten::contiguous, aten::clone ...)
   delegates its work to them, and they are kept on their own; an op whose children are only
   allocations and views is its own work (a tiny SDPA's flash kernel, 25 us beside 30 us of them), and so
   is one whose own time is work by its size (`WORK_SELF_US` per call and a fifth of what its children
   took: an addmm's GEMM beside its bias copy, which a page fault can stretch past the GEMM's time);
4. noise: an op whose self time per call is under max(`min_self_us`, `min_self_fraction` x the
   summed self time of all ops) is dropped.
A layout conversion therefore appears as the op that copies (aten::copy_), with the ops that
called it in `extra["callers"]` (e.g. "aten::clone < aten::contiguous < aten::slow_conv3d_forward")
and `extra["copy_roles"]` counting each invocation as "layout_conversion", "cast" or "copy" (an
addmm's bias broadcast is a plain "copy"). Format changes inside oneDNN (mkldnn_convolution) are
not ops and stay invisible.
Kernels are listed in order of first appearance, like a launch order.

A chunk workload (`WorkloadFacts.per_shape`: a whole decoder call, not one op) gets one kernel per op,
tensor-input shapes and the top-level op it ran under (the op the model's code called), named
`aten::copy_(384x384x3x3x3, 384x384x3x3x3) in aten::conv3d(1x384x3x4x3, 384x384x3x3x3, 384)`, the
top-level op also in `extra["within"]` and `extra["within_shapes"]`: each op can then be attributed to
the report card of the top-level op's shape (harness.trial.chunks), the copies a conv makes inside itself
included, as in the conv's own card. Only the ops of rule 2 are dropped (no wrapper, no noise floor),
so the kernels' self times add up to all the chunk's op time but its allocations and views.

Other `extra` keys of a kernel: `calls` (invocations of the op per call of `fn`), `measured_calls`
(calls of `fn` profiled), `dtype`, `input_shapes` (of the first invocation), `flops` and
`flops_source`, `bytes_read` / `bytes_written` (per call), `bytes_note`, `estimated_fields`.
Self times include the profiler's own per-op overhead (a few microseconds); `time_cpu` gives the
clean wall time of the whole call.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from harness.boundary.requests import Measure
from harness.cards.fields import SOURCE_CPU_ESTIMATE
from harness.cards.model import Kernel, empty_metrics
from harness.profile.base import Profile, ProfilerUnavailable, WorkloadFacts
from harness.profile.cpu_events import (
    CALL_LABEL,
    OpStats,
    attach_input_dtypes,
    call_root,
    caller_chain,
    copy_role,
    shapes_text,
    tensor_inputs,
    tensor_nbytes,
    top_op,
)
from harness.profile.cpu_peaks import CpuPeaks, get_cpu_peaks

# An op's own time per call from which it is work, never a dispatcher's overhead (rule 3): a wrapper's own time
# is its dispatch, a few to a few tens of microseconds under the profiler.
WORK_SELF_US = 100.0

IGNORED_OPS = frozenset(
    {
        "aten::empty",
        "aten::empty_like",
        "aten::empty_strided",
        "aten::resize_",
        "aten::view",
        "aten::_unsafe_view",
        "aten::reshape",
        "aten::_reshape_alias",
        "aten::as_strided",
        "aten::as_strided_",
        "aten::transpose",
        "aten::t",
        "aten::permute",
        "aten::expand",
        "aten::expand_as",
        "aten::squeeze",
        "aten::unsqueeze",
        "aten::select",
        "aten::slice",
        "aten::narrow",
        "aten::alias",
        "aten::detach",
        "aten::detach_",
        "aten::lift_fresh",
        "aten::resolve_conj",
        "aten::resolve_neg",
        "aten::set_",
        "aten::unbind",
        "aten::split",
        "aten::chunk",
        "aten::split_with_sizes",
        "aten::unflatten",
        "aten::flatten",
        "aten::result_type",
        "aten::is_nonzero",
        "aten::item",
        "aten::_local_scalar_dense",
        "aten::size",
        "aten::stride",
        "aten::dim",
    }
)

# The op kinds and the CPU op names that do their main compute, in order of preference.
_MAIN_OP_PATTERNS: dict[str, tuple[str, ...]] = {
    "conv3d": ("convolution", "conv3d", "conv_depthwise3d", "conv"),
    "conv2d": ("convolution", "conv2d", "conv_depthwise2d", "conv"),
    "linear": ("addmm", "mm", "bmm", "matmul", "linear"),
    "attention": ("scaled_dot_product", "attention", "flash", "bmm", "softmax"),
    "cast": ("_to_copy", "copy_", "to"),
}

ESTIMATED_FIELDS_ALL = ("sm_pct", "dram_pct", "dram_read_mb", "dram_write_mb")


def main_compute_op(names_by_dur: list[tuple[str, float]], op_kind: str) -> str | None:
    """The kernel that stands for the workload's compute: the longest op whose name matches the
    op kind's patterns (first pattern that matches any op wins), else the longest op."""
    if not names_by_dur:
        return None
    ranked = sorted(names_by_dur, key=lambda item: -item[1])
    for pattern in _MAIN_OP_PATTERNS.get(op_kind, ()):
        for name, _ in ranked:
            if pattern in name.split("::")[-1]:
                return name
    return ranked[0][0]


class CpuProfiler:
    """Profiler protocol on the CPU: torch.profiler op times plus roofline estimates."""

    name = "cpu"

    def __init__(
        self,
        *,
        calls: int = 3,
        min_profiled_s: float = 0.05,
        peaks: CpuPeaks | None = None,
        min_self_us: float = 1.0,
        min_self_fraction: float = 0.005,
    ):
        if calls < 1:
            raise ValueError("calls must be at least 1")
        self.calls = calls  # at most; fewer once the profiled calls took min_profiled_s (a long call is
        self.min_profiled_s = min_profiled_s  # steady, and each profiled call is time outside measurement)
        self._peaks = peaks
        self.min_self_us = min_self_us
        self.min_self_fraction = min_self_fraction

    # -----------------------------------------------------------------------------------------

    def _run(self, fn: Callable[[], Any], before_call: Callable[[], None] | None = None) -> tuple[Any, int]:
        """The events of `fn`'s profiled calls, and how many calls that was; `before_call` runs before each, outside
        its labelled range (whose events alone are the call's)."""
        # The autograd profiler that torch.profiler.profile wraps: the wrapper's start asks hasattr(torch,
        # "_inductor"), which imports Inductor (1.9 s of a CPU worker's first trial) for a CUDA-graph flag.
        try:
            from torch.autograd.profiler import profile, record_function
        except ImportError as exc:  # pragma: no cover - torch is a dependency
            raise ProfilerUnavailable(f"torch.autograd.profiler is not importable ({exc}); install torch") from None
        calls, until = 0, time.perf_counter() + self.min_profiled_s
        with profile(record_shapes=True, with_flops=True, profile_memory=True) as prof:
            while calls < self.calls and (calls == 0 or time.perf_counter() < until):
                if before_call is not None:
                    before_call()
                with record_function(f"{CALL_LABEL}#{calls}"):
                    fn()
                calls += 1
        events = prof.function_events
        # torch 2.11's FunctionEvents carry no input_dtypes
        attach_input_dtypes(getattr(prof, "kineto_results", None), events)
        return events, calls

    def _collect(self, events: Any, facts: WorkloadFacts) -> dict[str, OpStats]:
        stats: dict[str, OpStats] = {}
        for event in events:
            if getattr(event, "is_user_annotation", False) or getattr(event, "is_python_function", False):
                continue
            if event.name.startswith(CALL_LABEL):
                continue
            root = call_root(event)
            if root is event or not root.name.startswith(CALL_LABEL):
                continue  # outside the measured calls (or on another thread)
            key, within = event.name, None
            if facts.per_shape:
                top = top_op(event)
                key = f"{event.name}({shapes_text(event.input_shapes)})"
                within = (top.name, [list(s) for s in (top.input_shapes or [])])
                if top is not event:
                    key += f" in {top.name}({shapes_text(top.input_shapes)})"
            entry = stats.get(key)
            if entry is None:
                entry = stats[key] = OpStats(name=key, op=event.name, order=len(stats), within=within)
            entry.invocations += 1
            entry.self_us += float(event.self_cpu_time_total)
            entry.total_us += float(event.cpu_time_total)
            entry.delegated_us += sum(float(child.cpu_time_total) for child in event.cpu_children
                                      if child.name not in IGNORED_OPS)
            entry.flops += float(event.flops or 0)
            chain = caller_chain(event)
            entry.callers[chain] += 1
            if event.name == "aten::copy_":
                entry.copy_roles[copy_role(event, chain)] += 1
            self._add_bytes(entry, event, facts)
        return stats

    @staticmethod
    def _add_bytes(entry: OpStats, event: Any, facts: WorkloadFacts) -> None:
        inputs, saw_list = tensor_inputs(event, facts.dtype)
        if entry.input_shapes is None:
            entry.input_shapes = [list(s) for s in (event.input_shapes or [])]
        if entry.dtype is None and inputs and inputs[0][1]:
            entry.dtype = inputs[0][1]
        sizes = []
        for shape, dtype_name in inputs:
            nbytes, guessed = tensor_nbytes(shape, dtype_name, facts.dtype)
            if guessed:
                entry.bytes_notes.add(f"unknown input dtype counted as {facts.dtype}")
            sizes.append(nbytes)
        short = event.name.split("::")[-1]
        in_place = short.endswith("_") and not short.startswith("_")
        if in_place:
            written = sizes[0] if sizes else 0.0
            if short == "copy_":
                read = sum(sizes[1:2])
            elif short in ("zero_", "fill_", "normal_", "uniform_", "random_"):
                read = sum(sizes[1:])
            else:
                read = sum(sizes)
        else:
            read = sum(sizes)
            written = float(max(0, getattr(event, "cpu_memory_usage", 0) or 0))
            if written == 0:
                entry.bytes_notes.add("no net allocation seen: write bytes counted as 0")
        if saw_list:
            read += written
            entry.bytes_notes.add("tensor-list inputs assumed as large as the output")
        entry.read_bytes += read
        entry.write_bytes += written

    # -----------------------------------------------------------------------------------------

    def _select(self, stats: dict[str, OpStats], per_shape: bool, n: int) -> tuple[list[OpStats], dict[str, float]]:
        total_self = sum(s.self_us for s in stats.values()) / n
        floor = 0.0 if per_shape else max(self.min_self_us, self.min_self_fraction * total_self)
        kept: list[OpStats] = []
        dropped: dict[str, float] = {}
        for entry in sorted(stats.values(), key=lambda s: s.order):
            per_call = entry.self_us / n
            if (
                entry.op in IGNORED_OPS
                or entry.op.startswith("ProfilerStep")
                or entry.op.startswith("[")
                or (not per_shape and _wrapper(entry, n))
                or per_call < floor
            ):
                dropped[entry.name] = round(per_call, 3)
                continue
            kept.append(entry)
        return kept, dropped

    def profile(self, fn: Callable[[], Any], facts: WorkloadFacts, request: Measure | None = None) -> Profile:
        """Run `fn` under torch.profiler (`calls` times, or fewer once `min_profiled_s` is spent) and return
        its work ops as kernels."""
        peaks = self._peaks or get_cpu_peaks()
        cpu0, wall0 = time.process_time(), time.perf_counter()
        events, n = self._run(fn, facts.before_call)
        wall = time.perf_counter() - wall0
        cpu_share = (time.process_time() - cpu0) / (wall * max(1, peaks.torch_threads)) if wall > 0 else None
        stats = self._collect(events, facts)
        kept, dropped = self._select(stats, facts.per_shape, n)

        profiler_flops = sum(s.flops for s in kept) / n
        # A chunk's FLOPs and bytes are spread over its many ops: no one op stands for them.
        main = None if facts.per_shape else main_compute_op([(s.name, s.self_us) for s in kept], facts.op_kind)
        attribute_facts = bool(
            facts.flops and facts.flops > 0 and profiler_flops < 0.5 * facts.flops
        )

        kernels: list[Kernel] = []
        for entry in kept:
            kernels.append(self._kernel(entry, facts, peaks, main, attribute_facts, n))

        notes = [
            "CPU backend: dur_us is torch.profiler self CPU time per call of the workload; sm_pct, "
            "dram_pct, dram_read_mb and dram_write_mb are roofline ESTIMATES against this CPU's "
            "measured peaks; GPU-only fields (tensor_pct, l2_pct, warps, waves, cycles, launch) are None.",
        ]
        if not kernels:
            notes.append("no op passed the kernel filter; see settings['dropped_ops_us']")
        if peaks.busy:
            notes.append(
                f"the CPU peaks were measured while the machine was busy (cpu_share "
                f"{peaks.cpu_share:.2f}): they are likely low, so sm_pct and dram_pct read high"
            )
        return Profile(
            kernels=kernels,
            backend="cpu",
            metrics_source=SOURCE_CPU_ESTIMATE,
            peaks=peaks.as_dict(),
            settings={
                "calls": n,
                "record_shapes": True,
                "with_flops": True,
                "profile_memory": True,
                "torch_threads": peaks.torch_threads,
                "min_self_us": self.min_self_us,
                "min_self_fraction": self.min_self_fraction,
                "main_compute_op": main,
                # process CPU time / (wall x threads) over the profiled calls: well under 1 means
                # other processes held the cores, or the ops did not use every thread
                "cpu_share": cpu_share,
                "dropped_ops_us": dropped,
            },
            notes=notes,
        )

    def _kernel(
        self,
        entry: OpStats,
        facts: WorkloadFacts,
        peaks: CpuPeaks,
        main: str | None,
        attribute_facts: bool,
        n: int,
    ) -> Kernel:
        dur_us = entry.self_us / n
        metrics = empty_metrics()
        metrics["dur_us"] = dur_us
        extra: dict[str, Any] = {
            "metrics_source": SOURCE_CPU_ESTIMATE,
            "calls": entry.invocations / n,
            "measured_calls": n,
            "dtype": entry.dtype,
            "input_shapes": entry.input_shapes,
            "callers": dict(entry.callers),
        }
        if entry.copy_roles:
            extra["copy_roles"] = dict(entry.copy_roles)
        if entry.within is not None:
            extra["within"], extra["within_shapes"] = entry.within

        flops: float | None = None
        if entry.flops > 0:
            flops = entry.flops / n
            extra["flops_source"] = "torch.profiler with_flops"
        elif attribute_facts and entry.name == main:
            flops = float(facts.flops)  # type: ignore[arg-type]
            extra["flops_source"] = "WorkloadFacts.flops (main compute op)"
        extra["flops"] = flops

        estimated: list[str] = []
        dtype = entry.dtype or facts.dtype
        peak = peaks.flops_for(dtype)
        if flops is not None and dur_us > 0:
            if peak:
                metrics["sm_pct"] = flops / (dur_us * 1e-6) / peak * 100.0
                estimated.append("sm_pct")
            else:
                extra["sm_pct_note"] = f"no measured CPU peak for dtype {dtype!r}"

        read, written = entry.read_bytes / n, entry.write_bytes / n
        if read + written == 0 and entry.name == main and facts.min_bytes:
            read, written = float(facts.min_bytes), 0.0
            entry.bytes_notes.add("shapes gave no bytes: WorkloadFacts.min_bytes used as read bytes")
        metrics["dram_read_mb"] = read / 1e6
        metrics["dram_write_mb"] = written / 1e6
        estimated += ["dram_read_mb", "dram_write_mb"]
        if dur_us > 0:
            metrics["dram_pct"] = (read + written) / (dur_us * 1e-6) / peaks.mem_bw_bytes_per_s * 100.0
            estimated.append("dram_pct")
        if peaks.llc_bytes and read + written <= peaks.llc_bytes:
            entry.bytes_notes.add(
                "bytes fit in the last-level cache: dram_pct overstates DRAM traffic"
            )
        extra["bytes_read"] = read
        extra["bytes_written"] = written
        if entry.bytes_notes:
            extra["bytes_note"] = "; ".join(sorted(entry.bytes_notes))
        extra["estimated_fields"] = [f for f in ESTIMATED_FIELDS_ALL if f in estimated]
        return Kernel(name=entry.name, metrics=metrics, extra=extra)


def _wrapper(entry: OpStats, calls: int) -> bool:
    """Rule 3: its children of work took over half of its time, and its own time is not work by its size."""
    if entry.total_us <= 0 or entry.delegated_us <= 0.5 * entry.total_us:
        return False
    return not (entry.self_us / calls >= WORK_SELF_US and entry.self_us >= 0.2 * entry.delegated_us)
