"""GPU timing of a callable for the search objective: CUDA events around each call, cold L2.

Each sample: zero a buffer twice the size of L2 (so the call does not find its inputs left in L2
by the previous one — the baseline report was profiled with ncu's `--cache-control all`), record
a start event, call, record an end event; the sample is the events' elapsed time. Samples are
queued in batches and read after one synchronize per batch, so the host never waits between
calls and the flush kernel covers the launch latency of the next call.

For launch-bound calls (many small kernels), `cuda_graph=True` captures the call once into a
torch.cuda.CUDAGraph (after warm-ups on a side stream, as the CUDA Graphs notes require) and
times its replay instead, which removes the per-kernel CPU launch cost from the measurement.

Before sampling, the call is warmed up until its timing is stable (harness.profile.timing.warm_up:
the median of the last 3 calls within 10% of the 3 before), since a cold call (clocks ramping up,
lazy module loading, cuBLAS heuristics) can be many times its steady time. Each warm-up call is timed
by synchronize-then-clock with the L2 flush before it, outside the timed interval; `warmup=<int>`
makes a fixed number of calls instead.

Sampling stops once `budget_s` of wall time has been spent measuring (warm-ups excluded) and at
least `min_repeats` samples exist, or at `max_repeats`. The SM clock is read through NVML
(torch.cuda.clock_rate: pynvml's nvmlDeviceGetClockInfo for NVML_CLOCK_SM) when pynvml is
importable, before and after sampling: `clock_mhz` is the reading after, and a note says when the
two differ by more than CLOCK_MOVED (the samples then straddle a clock change). Without pynvml it
is None and a note says why.
"""

from __future__ import annotations

import gc
import importlib.util
import time
from typing import Any, Callable

from harness.profile.gpu_peaks import lookup
from harness.profile.timing import TimingResult, warm_up
from harness.profile.torch_cuda import ensure_cuda

MiB = 1024 * 1024
FALLBACK_FLUSH_BYTES = 256 * MiB  # when neither the device nor the peak table knows L2
CAPTURE_WARMUP = 3  # side-stream calls before a graph capture when warming up until stable
CLOCK_MOVED = 0.05  # relative change of the SM clock across the samples worth a note


def flush_bytes(device: int | None = None) -> tuple[int, str]:
    """Size of the L2-flush buffer (2x L2) and where the L2 size came from."""
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device() if device is None else device)
    l2 = getattr(props, "L2_cache_size", 0) or 0
    if l2 > 0:
        return 2 * l2, f"2x the {l2 / MiB:.0f} MiB L2 reported by the device"
    table = lookup(props.name, total_memory_b=props.total_memory).l2_bytes
    if table:
        return 2 * table, f"2x the {table / MiB:.0f} MiB L2 of the peak table"
    return FALLBACK_FLUSH_BYTES, f"{FALLBACK_FLUSH_BYTES // MiB} MiB (L2 size unknown)"


def capture_graph(fn: Callable[[], Any], warmup: int = 3) -> Callable[[], None]:
    """Capture `fn` into a CUDA graph and return a function that replays it."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-ups on a side stream before capture, per torch docs
        for _ in range(max(1, warmup)):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            fn()
    except RuntimeError as exc:
        raise RuntimeError(f"fn cannot be captured in a CUDA graph ({exc}); time it with cuda_graph=False") from exc
    torch.cuda.synchronize()
    return graph.replay


def sm_clock_mhz(device: int | None = None) -> tuple[float | None, str | None]:
    """Current SM clock in MHz from NVML, or None and the reason."""
    if importlib.util.find_spec("pynvml") is None:
        return None, "SM clock not read: pynvml is not installed (pip install nvidia-ml-py)"
    import torch

    try:
        return float(torch.cuda.clock_rate(device)), None
    except Exception as exc:  # NVML errors have many types (no permission, not supported, ...)
        return None, f"SM clock not read: NVML failed ({type(exc).__name__}: {exc})"


def time_cuda(
    fn: Callable[[], Any],
    *,
    warmup: int | None = None,
    min_repeats: int = 10,
    max_repeats: int = 1000,
    budget_s: float = 1.0,
    flush_l2: bool = True,
    cuda_graph: bool = False,
    device: int | None = None,
) -> TimingResult:
    """Time `fn()` on the GPU with CUDA events; durations in microseconds.

    `warmup`: None warms up until the timing is stable (the result's `warmup_stable` says whether it
    got there); an int makes exactly that many warm-up calls.
    """
    if min_repeats < 1 or max_repeats < min_repeats:
        raise ValueError("need 1 <= min_repeats <= max_repeats")
    if (warmup is not None and warmup < 0) or budget_s < 0:
        raise ValueError("warmup and budget_s must be non-negative")
    ensure_cuda()
    import torch

    dev = torch.device("cuda", torch.cuda.current_device() if device is None else device)
    notes: list[str] = []
    with torch.cuda.device(dev):
        call: Callable[[], Any] = (
            capture_graph(fn, CAPTURE_WARMUP if warmup is None else warmup) if cuda_graph else fn
        )
        buffer = None
        if flush_l2:
            size, how = flush_bytes(dev.index)
            buffer = torch.empty(size, dtype=torch.int8, device=dev)
            notes.append(f"L2 flushed before each sample by zeroing {size / MiB:.0f} MiB ({how})")
        stable: bool | None = None
        if warmup is None:
            warm = warm_up(call, sync=lambda: torch.cuda.synchronize(dev), prepare=lambda: _flush(buffer))
            warmup, stable = warm.calls, warm.stable
            if not stable:
                notes.append(f"warm-up stopped before the timing was stable "
                             f"({warm.calls} calls, {warm.seconds:.2f} s)")
        else:
            for _ in range(warmup):
                _flush(buffer)
                call()
        torch.cuda.synchronize(dev)

        clock_before, _ = sm_clock_mhz(dev.index)
        samples = _sample(call, buffer, min_repeats, max_repeats, budget_s, dev)

        clock, why = sm_clock_mhz(dev.index)
        if why:
            notes.append(why)
        elif clock is not None and clock_before and abs(clock - clock_before) > CLOCK_MOVED * clock_before:
            notes.append(f"SM clock moved from {clock_before:.0f} to {clock:.0f} MHz while sampling")
        method = "+".join(["cuda_graph"] * cuda_graph + ["cuda_event"] + ["l2_flush"] * flush_l2)
        return TimingResult.from_samples(
            samples,
            warmup=warmup,
            method=method,
            device_name=torch.cuda.get_device_name(dev),
            clock_mhz=clock,
            notes=notes,
            warmup_stable=stable,
        )


def _flush(buffer: Any) -> None:
    if buffer is not None:
        buffer.zero_()  # a memset kernel writing 2x L2 evicts whatever the last call left there


def _sample(
    call: Callable[[], Any],
    buffer: Any,
    min_repeats: int,
    max_repeats: int,
    budget_s: float,
    dev: Any,
) -> list[float]:
    import torch

    samples: list[float] = []
    batch = min_repeats
    gc_was_enabled = gc.isenabled()
    gc.disable()  # a collection mid-batch would stall the launches
    try:
        start = time.perf_counter()
        while len(samples) < max_repeats:
            events = []
            for _ in range(min(batch, max_repeats - len(samples))):
                _flush(buffer)
                begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                begin.record()
                call()
                end.record()
                events.append((begin, end))
            torch.cuda.synchronize(dev)
            samples.extend(begin.elapsed_time(end) * 1000.0 for begin, end in events)  # ms -> us
            spent = time.perf_counter() - start
            if len(samples) >= min_repeats and spent >= budget_s:
                break
            per_sample = spent / len(samples)
            batch = max(1, int((budget_s - spent) / per_sample) + 1) if per_sample > 0 else batch
    finally:
        if gc_was_enabled:
            gc.enable()
    return samples
