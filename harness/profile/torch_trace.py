"""Read a torch.profiler (Kineto) Chrome trace: its CUDA kernels and the GPUs they ran on.

What Kineto writes for a kernel event (`"cat": "kernel"`, `ts`/`dur` in microseconds) and what
its args mean (libkineto CuptiActivity / DeviceProperties):
- "grid", "block": the three launch dimensions;
- "registers per thread";
- "shared memory": static + dynamic shared memory in bytes, summed — the trace cannot split them;
- "blocks per SM": grid size / SM count, i.e. blocks *per SM of the grid*, not resident blocks;
- "warps per SM": the same times warps per block;
- "est. achieved occupancy %": min(resident blocks, blocks per SM) x block / max threads per SM,
  rounded, from the occupancy calculator with the 48 KB default shared memory bound;
- newer Kineto also writes an "occupancy" object (activeBlocksPerMultiprocessor, blockLimitRegs,
  blockLimitSharedMem, ...), kept verbatim here.
The top-level "deviceProperties" list holds cudaGetDeviceProperties fields per device id.

Which host code launched a kernel: the kernel's "correlation" is that of the CUDA runtime (or driver) call
that launched it, and the host ranges around that call on its thread (`cpu_op` events, with their "Input
Dims" when the profile recorded shapes, and `user_annotation` ranges: record_function scopes) are its
callers, outermost first (`Trace.callers`). Matching by time on the launching thread holds for every
Kineto version; the "External id" linking a kernel to its op changed meaning between versions.

Waves are computed from the launch configuration and the device limits with
harness.hardware.occupancy, which reproduces the trace's own occupancy estimate (tests check that).
"""

from __future__ import annotations

import gzip
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.hardware.occupancy import Occupancy, SmLimits, occupancy, supported_compute_capabilities, waves


class TraceError(HarnessError):
    """A trace that cannot be read; the message is one line naming the file."""


@dataclass(frozen=True)
class TraceDevice:
    id: int
    name: str
    total_memory_b: int | None
    limits: SmLimits | None  # None when the architecture is not in the occupancy table
    properties: dict[str, Any]  # the trace's deviceProperties entry, verbatim


@dataclass(frozen=True)
class TraceKernel:
    name: str
    ts_us: float
    dur_us: float
    device: int | None
    stream: int | None
    correlation: int | None
    grid_dim: tuple[int, int, int] | None
    block_dim: tuple[int, int, int] | None
    registers_per_thread: int | None
    shared_memory_b: int | None  # static + dynamic (Kineto sums them)
    trace_blocks_per_sm: float | None  # Kineto's grid / SMs
    trace_warps_per_sm: float | None
    est_achieved_occupancy_pct: float | None
    trace_occupancy: dict[str, Any] | None  # newer Kineto's per-limit occupancy object

    @property
    def grid(self) -> int | None:
        """Blocks in the grid (the report's `grid` is this product)."""
        return math.prod(self.grid_dim) if self.grid_dim else None

    @property
    def block(self) -> int | None:
        """Threads per block (the report's `block` is this product)."""
        return math.prod(self.block_dim) if self.block_dim else None


@dataclass(frozen=True)
class HostRange:
    """A host op (`cpu_op`) or record_function scope (`user_annotation`) of the trace."""

    name: str
    tid: int | None
    ts_us: float
    dur_us: float
    input_dims: list[Any] | None  # "Input Dims": the op's argument shapes, when shapes were recorded

    def contains(self, tid: int | None, ts_us: float) -> bool:
        return tid == self.tid and self.ts_us <= ts_us <= self.ts_us + self.dur_us


@dataclass(frozen=True)
class Trace:
    kernels: list[TraceKernel]
    devices: dict[int, TraceDevice]
    source: str
    host_ranges: list[HostRange] = field(default_factory=list)
    launches: dict[int, tuple[int | None, float]] = field(default_factory=dict)  # correlation -> (tid, ts)

    def callers(self, kernel: TraceKernel) -> list[HostRange]:
        """The host ranges around the call that launched `kernel`, outermost first ([] when not traced)."""
        launch = self.launches.get(kernel.correlation) if kernel.correlation is not None else None
        if launch is None:
            return []
        around = [r for r in self.host_ranges if r.contains(*launch)]
        return sorted(around, key=lambda r: (r.ts_us, -r.dur_us))

    def device_of(self, kernel: TraceKernel) -> TraceDevice | None:
        if kernel.device is None:
            return self.devices.get(0) if len(self.devices) == 1 else None
        return self.devices.get(kernel.device)


@dataclass(frozen=True)
class LaunchStats:
    occupancy: Occupancy
    waves: float | None


def load_trace(path: str | os.PathLike[str]) -> Trace:
    """Read a trace file, plain JSON or gzip-compressed (detected by content, not name)."""
    target = Path(path)
    try:
        raw = target.read_bytes()
    except FileNotFoundError:
        raise TraceError(f"{target}: no such trace file") from None
    except OSError as exc:
        raise TraceError(f"{target}: cannot read ({exc.strerror or exc})") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise TraceError(f"{target}: damaged gzip ({exc})") from None
    try:
        obj = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TraceError(f"{target}: not a JSON trace ({exc})") from None
    return parse_trace(obj, str(target))


def parse_trace(obj: Any, source: str = "<memory>") -> Trace:
    if isinstance(obj, list):  # the Chrome format also allows a bare event array
        obj = {"traceEvents": obj}
    if not isinstance(obj, dict) or not isinstance(obj.get("traceEvents"), list):
        raise TraceError(f"{source}: not a Chrome trace (no 'traceEvents' list)")
    devices = {}
    for props in obj.get("deviceProperties") or []:
        if isinstance(props, dict) and _int(props.get("id")) is not None:
            device = _device(props)
            devices[device.id] = device
    kernels = [
        _kernel(event)
        for event in obj["traceEvents"]
        if isinstance(event, dict)
        and str(event.get("cat", "")).lower() == "kernel"
        and event.get("ph", "X") == "X"
    ]
    kernels.sort(key=lambda k: k.ts_us)
    host: list[HostRange] = []
    launches: dict[int, tuple[int | None, float]] = {}
    for event in obj["traceEvents"]:
        category = str(event.get("cat", "")).lower() if isinstance(event, dict) else ""
        event_args = event.get("args") if isinstance(event, dict) else None
        args = event_args if isinstance(event_args, dict) else {}
        if category in ("cpu_op", "user_annotation") and event.get("ph", "X") == "X":
            host.append(HostRange(str(event.get("name", "")), _int(event.get("tid")), _float(event.get("ts")) or 0.0,
                                  _float(event.get("dur")) or 0.0, args.get("Input Dims")))
        elif category in ("cuda_runtime", "cuda_driver") and (correlation := _int(args.get("correlation"))) is not None:
            launches[correlation] = (_int(event.get("tid")), _float(event.get("ts")) or 0.0)
    return Trace(kernels=kernels, devices=devices, source=source, host_ranges=host, launches=launches)


def launch_stats(kernel: TraceKernel, limits: SmLimits) -> LaunchStats | None:
    """Occupancy limits and waves of one launch; None when the trace lacks its launch config."""
    if kernel.block is None or kernel.grid is None or kernel.registers_per_thread is None:
        return None
    occ = occupancy(
        limits,
        block_threads=kernel.block,
        regs_per_thread=kernel.registers_per_thread,
        # Static and dynamic shared memory count the same in every occupancy limit.
        smem_dynamic_b=kernel.shared_memory_b or 0,
    )
    return LaunchStats(occupancy=occ, waves=waves(kernel.grid, occ.blocks_per_sm, limits.sm_count))


def _device(props: dict[str, Any]) -> TraceDevice:
    major, minor, sms = _int(props.get("computeMajor")), _int(props.get("computeMinor")), _int(props.get("numSms"))
    limits = None
    if major is not None and minor is not None and sms and (major, minor) in supported_compute_capabilities():
        limits = SmLimits.for_arch(
            major,
            minor,
            sms,
            max_threads_per_sm=_int(props.get("maxThreadsPerMultiprocessor")),
            regs_per_sm=_int(props.get("regsPerMultiprocessor")),
            max_regs_per_block=_int(props.get("regsPerBlock")),
            smem_per_sm=_int(props.get("sharedMemPerMultiprocessor")),
            smem_per_block_optin=_int(props.get("sharedMemPerBlockOptin")),
            warp_size=_int(props.get("warpSize")),
            max_threads_per_block=_int(props.get("maxThreadsPerBlock")),
        )
    return TraceDevice(
        id=int(props["id"]),
        name=str(props.get("name", "")),
        total_memory_b=_int(props.get("totalGlobalMem")),
        limits=limits,
        properties=dict(props),
    )


def _kernel(event: dict[str, Any]) -> TraceKernel:
    event_args = event.get("args")
    args = event_args if isinstance(event_args, dict) else {}
    occ = args.get("occupancy")
    return TraceKernel(
        name=str(event.get("name", "")),
        ts_us=_float(event.get("ts")) or 0.0,
        dur_us=_float(event.get("dur")) or 0.0,
        device=_int(args.get("device")),
        stream=_int(args.get("stream")),
        correlation=_int(args.get("correlation")),
        grid_dim=_dim3(args.get("grid")),
        block_dim=_dim3(args.get("block")),
        registers_per_thread=_int(args.get("registers per thread")),
        shared_memory_b=_int(args.get("shared memory")),
        trace_blocks_per_sm=_float(args.get("blocks per SM")),
        trace_warps_per_sm=_float(args.get("warps per SM")),
        est_achieved_occupancy_pct=_float(args.get("est. achieved occupancy %")),
        trace_occupancy=dict(occ) if isinstance(occ, dict) else None,
    )


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _int(value: Any) -> int | None:
    number = _float(value)
    return int(number) if number is not None and number == int(number) else None


def _dim3(value: Any) -> tuple[int, int, int] | None:
    if not isinstance(value, list) or len(value) != 3:
        return None
    dims = [_int(v) for v in value]
    if any(d is None or d < 0 for d in dims):
        return None
    return (dims[0], dims[1], dims[2])  # type: ignore[return-value]
