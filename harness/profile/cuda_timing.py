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

A timing a variant cannot game. CUDA events time the *current stream*: a variant that launches its
work on a side stream and returns without the current stream waiting reads a few microseconds. So
every batch of samples is also timed by the device-synchronised wall clock: `torch.cuda.synchronize()`
(every stream of the device) then perf_counter before the batch's first flush, and again after its last
end event; per call that is wall / n less the harness's own cost per sample (the flush, two events,
the loop), measured once per timing by the same batches around a call that does nothing.
`judge_clocks` compares the two clocks (see there for the rule and why it needs both a ratio and a
gap); a flagged timing gets a note, its samples become each batch's synchronised time per call, and
`clock` says "synchronized_wall". `event_us` and `synced_us` keep both readings on every timing.

Persisting L2. The flush cannot evict lines a call marked persisting (an access-policy window on a
stream, inside the set-aside of cudaLimitPersistingL2CacheSize), so a variant could keep its inputs
in L2 across the flush. The set-aside is the process default, 0, on both sides: a non-zero one found
before the timing or left by the call is set back to 0 with a note, and cudaCtxResetPersistingL2Cache
returns every persisting line to normal before and after the samples, so no timing inherits another's.
torch has no wrapper for either, so they are called in libcudart through ctypes (the library torch
loaded, present wherever torch has CUDA; CuPy's runtime module would be a second path to the same three
calls, and CuPy is optional); where it cannot be loaded, a note says so.
"""

from __future__ import annotations

import ctypes
import gc
import importlib.util
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from harness.hardware.gpu_peaks import lookup
from harness.profile.timing import TimingResult, warm_up
from harness.profile.torch_cuda import ensure_cuda

MiB = 1024 * 1024
FALLBACK_FLUSH_BYTES = 256 * MiB  # when neither the device nor the peak table knows L2
CAPTURE_WARMUP = 3  # side-stream calls before a graph capture when warming up until stable
CLOCK_MOVED = 0.05  # relative change of the SM clock across the samples worth a note
EVENT_CLOCK, WALL_CLOCK = "cuda_event", "synchronized_wall"
CLOCK_RATIO = 1.5  # synchronised time per call / event time per call above which events missed work...
CLOCK_GAP_US = 10.0  # ...when the difference is also at least this (both: see judge_clocks)
OVERHEAD_SAMPLES = 32  # samples per batch of the do-nothing call that measures the harness's own cost
OVERHEAD_BATCHES = 3
CUDA_LIMIT_PERSISTING_L2_CACHE_SIZE = 0x06  # cudaLimitPersistingL2CacheSize in the runtime's cudaLimit
CUDART_NAMES = ("libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0", "libcudart.so")


@dataclass(frozen=True)
class Batch:
    """One batch of samples: each call's CUDA-event time, and the device-synchronised wall clock around all."""

    events_us: tuple[float, ...]
    wall_us: float


@dataclass(frozen=True)
class ClockCheck:
    flagged: bool
    clock: str  # EVENT_CLOCK or WALL_CLOCK: whose readings `samples_us` are
    event_us: float  # CUDA-event time per call, over all batches
    synced_us: float  # synchronised wall time per call less the harness's cost per sample, over all batches
    samples_us: list[float]
    note: str | None


def judge_clocks(
    batches: Sequence[Batch],
    overhead_us: float,
    *,
    ratio: float = CLOCK_RATIO,
    min_gap_us: float = CLOCK_GAP_US,
) -> ClockCheck:
    """Whether the CUDA events missed work that the device-synchronised wall clock saw.

    Per batch, the synchronised time per call is wall_us / n - overhead_us (`overhead_us`: the same
    batches' wall time per sample around a call that does nothing: the L2 flush, two events and the
    loop). The timing is flagged when the batches in which that time is both at least `ratio` times
    the mean event time and at least `min_gap_us` above it hold at least half of the calls; the
    samples are then each batch's synchronised time per call (n times, so the median weighs batches
    by their calls).

    Why both conditions, and every batch. An honest call's events already contain its CPU launch
    cost: the begin event is queued before the call, and once the flush ahead of it has run the GPU
    waits inside the bracket for the call's launches, so a launch-bound call reads about its host
    time on both clocks (and a CUDA graph replay, with little host time, little on both). What
    separates the clocks for honest calls is error in `overhead_us` (its jitter, the flush overlapping
    host work differently): a few microseconds, which for a 3 us kernel is already a ratio of 2. So
    the ratio alone would flag tiny honest kernels and the gap guards them; the gap alone would flag
    slow calls for noise that is small beside their time, and the ratio guards those. A side stream
    nobody waits for fails both by far (its events read microseconds, its wall the whole kernel).
    Batches, not the total: one small batch slowed by the OS (a context switch spread over few calls)
    is not a variant hiding work; and most calls, not every batch, so that a call cannot pass by
    waiting honestly through the first small batch and hiding its work in the large ones after it.
    """
    if not batches or any(not b.events_us for b in batches):
        raise ValueError("judge_clocks needs batches with at least one sample each")
    per_batch = []
    for b in batches:
        event = statistics.fmean(b.events_us)
        synced = max(0.0, b.wall_us / len(b.events_us) - overhead_us)
        per_batch.append((event, synced, len(b.events_us)))
    calls = sum(n for _, _, n in per_batch)
    event_us = sum(e * n for e, _, n in per_batch) / calls
    synced_us = sum(s * n for _, s, n in per_batch) / calls
    hiding = sum(n for e, s, n in per_batch if s >= ratio * e and s - e >= min_gap_us)
    flagged = 2 * hiding >= calls
    if not flagged:
        samples = [t for b in batches for t in b.events_us]
        return ClockCheck(False, EVENT_CLOCK, event_us, synced_us, samples, None)
    samples = [s for _, s, n in per_batch for _ in range(n)]
    note = (f"timed by the device-synchronised wall clock: CUDA events read {event_us:.1f} us per call but "
            f"the synchronised wall clock {synced_us:.1f} us (less {overhead_us:.1f} us of flush and launch "
            f"overhead per sample; >= {ratio:g}x and >= {min_gap_us:g} us in batches of {hiding} of the {calls} "
            "calls): work the current stream's events miss, e.g. on a side stream it does not wait for")
    return ClockCheck(True, WALL_CLOCK, event_us, synced_us, samples, note)


class PersistingL2:
    """The persisting-L2 set-aside and lines, through libcudart (`lib`: a ctypes library or a stand-in)."""

    def __init__(self, lib: Any = None) -> None:
        self.lib, self.why = (lib, None) if lib is not None else _load_cudart()

    def _check(self, what: str, status: int) -> None:
        if status != 0:
            name = getattr(self.lib, "cudaGetErrorName", None)
            if name is not None:
                name.restype = ctypes.c_char_p
            raise RuntimeError(f"{what} returned cudaError {status}" + (f" ({name(status).decode()})" if name else ""))

    def limit(self) -> int:
        value = ctypes.c_size_t(0)
        self._check("cudaDeviceGetLimit", self.lib.cudaDeviceGetLimit(ctypes.byref(value),
                                                                      CUDA_LIMIT_PERSISTING_L2_CACHE_SIZE))
        return int(value.value)

    def zero_set_aside(self, when: str) -> str | None:
        """Set a non-zero set-aside back to 0; the note that says so (or why it could not be), else None."""
        if self.lib is None:
            return None
        try:
            found = self.limit()
            if found == 0:
                return None
            self._check("cudaDeviceSetLimit", self.lib.cudaDeviceSetLimit(CUDA_LIMIT_PERSISTING_L2_CACHE_SIZE,
                                                                          ctypes.c_size_t(0)))
        except RuntimeError as exc:
            return f"persisting L2 not checked {when}: {exc}"
        return (f"{found / MiB:.1f} MiB of L2 was set aside for persisting accesses {when} "
                "(cudaLimitPersistingL2CacheSize): set back to 0, since lines it keeps survive the L2 flush")

    def reset_lines(self) -> str | None:
        """Return every persisting line to normal (cudaCtxResetPersistingL2Cache); a note when that failed."""
        if self.lib is None:
            return None
        try:
            self._check("cudaCtxResetPersistingL2Cache", self.lib.cudaCtxResetPersistingL2Cache())
        except RuntimeError as exc:
            return f"persisting L2 lines not reset: {exc}"
        return None


def _load_cudart() -> tuple[Any, str | None]:
    import torch

    major = (torch.version.cuda or "").split(".")[0]
    # torch's own runtime first (its soname resolves to the copy already loaded); any other would act on
    # the same primary context, which is where the set-aside and the persisting lines live.
    for name in (f"libcudart.so.{major}", *CUDART_NAMES) if major else CUDART_NAMES:
        try:
            return ctypes.CDLL(name), None
        except OSError:
            continue
    return None, f"persisting L2 not checked: no CUDA runtime library loadable ({', '.join(CUDART_NAMES)})"


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
    clock_ratio: float = CLOCK_RATIO,
    clock_gap_us: float = CLOCK_GAP_US,
    prepare: Callable[[], Any] | None = None,
) -> TimingResult:
    """Time `fn()` on the GPU with CUDA events, cross-checked by the synchronised wall clock; microseconds.

    `warmup`: None warms up until the timing is stable (the result's `warmup_stable` says whether it
    got there); an int makes exactly that many warm-up calls. `clock_ratio` and `clock_gap_us`: when
    the synchronised clock decides instead of the events (judge_clocks). `prepare`, when given, runs before every
    call, beside the L2 flush: outside the events, and counted in the harness's own overhead per sample (an
    in-place op's input restored).
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
        # The events go on this stream whatever the call makes current: a call that leaves a side
        # stream current is then timed like one that launches on it without waiting (judge_clocks).
        stream = torch.cuda.current_stream(dev)
        l2 = PersistingL2()
        notes += [n for n in (l2.why, l2.zero_set_aside("before the timing"), l2.reset_lines()) if n]
        call: Callable[[], Any] = (
            capture_graph(fn, CAPTURE_WARMUP if warmup is None else warmup) if cuda_graph else fn
        )
        buffer: Any = None
        if flush_l2:
            size, how = flush_bytes(dev.index)
            buffer = torch.empty(size, dtype=torch.int8, device=dev)
            notes.append(f"L2 flushed before each sample by zeroing {size / MiB:.0f} MiB ({how})")
        def before() -> None:  # before each sample, outside its events
            _flush(buffer)
            if prepare is not None:
                prepare()

        warmup, stable = _warm_up(call, before, warmup, dev, notes)
        overhead_us = _overhead_us(before, stream, dev)
        clock_before, _ = sm_clock_mhz(dev.index)
        batches = _sample(call, before, min_repeats, max_repeats, budget_s, stream, dev)
        check = judge_clocks(batches, overhead_us, ratio=clock_ratio, min_gap_us=clock_gap_us)
        notes += [n for n in (check.note, l2.zero_set_aside("by the timed call"), l2.reset_lines()) if n]
        clock, why = sm_clock_mhz(dev.index)
        notes += [n for n in [why or _clock_moved(clock_before, clock)] if n]
        method = "+".join(["cuda_graph"] * cuda_graph + ["cuda_event"] + ["l2_flush"] * flush_l2)
        return TimingResult.from_samples(
            check.samples_us,
            warmup=warmup,
            method=method,
            device_name=torch.cuda.get_device_name(dev),
            clock_mhz=clock,
            notes=notes,
            warmup_stable=stable,
            clock=check.clock,
            event_us=check.event_us,
            synced_us=check.synced_us,
        )


def _warm_up(call: Callable[[], Any], before: Callable[[], None], warmup: int | None, dev: Any,
             notes: list[str]) -> tuple[int, bool | None]:
    """(warm-up calls made, whether they reached a stable timing: None for a fixed count); `before` ahead of each."""
    import torch

    stable: bool | None = None
    if warmup is None:
        warm = warm_up(call, sync=lambda: torch.cuda.synchronize(dev), prepare=before)
        warmup, stable = warm.calls, warm.stable
        if not stable:
            notes.append(f"warm-up stopped before the timing was stable ({warm.calls} calls, {warm.seconds:.2f} s)")
    else:
        for _ in range(warmup):
            before()
            call()
    torch.cuda.synchronize(dev)
    return warmup, stable


def _clock_moved(before_mhz: float | None, after_mhz: float | None) -> str | None:
    if after_mhz is not None and before_mhz and abs(after_mhz - before_mhz) > CLOCK_MOVED * before_mhz:
        return f"SM clock moved from {before_mhz:.0f} to {after_mhz:.0f} MHz while sampling"
    return None


def _flush(buffer: Any) -> None:
    if buffer is not None:
        buffer.zero_()  # a memset kernel writing 2x L2 evicts whatever the last call left there


def _batch(call: Callable[[], Any], before: Callable[[], None], count: int, stream: Any, dev: Any) -> Batch:
    """`count` samples, queued without waiting, then read; the synchronised wall clock around them all."""
    import torch

    events = []
    torch.cuda.synchronize(dev)  # every stream of the device: nothing queued before counts
    start = time.perf_counter()
    for _ in range(count):
        before()
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record(stream)
        call()
        end.record(stream)
        events.append((begin, end))
    torch.cuda.synchronize(dev)  # before the end stamp: work on any stream of the device counts
    wall_s = time.perf_counter() - start
    return Batch(tuple(begin.elapsed_time(end) * 1000.0 for begin, end in events), wall_s * 1e6)  # ms -> us


def _overhead_us(before: Callable[[], None], stream: Any, dev: Any) -> float:
    """The harness's own synchronised wall time per sample: the flush (and any preparation), two events, the loop.

    The median batch: the fastest would understate it, and every microsecond understated here is one
    the synchronised clock adds to an honest call."""
    batches = [_batch(lambda: None, before, OVERHEAD_SAMPLES, stream, dev) for _ in range(OVERHEAD_BATCHES)]
    return statistics.median(b.wall_us / len(b.events_us) for b in batches)


def _sample(
    call: Callable[[], Any],
    before: Callable[[], None],
    min_repeats: int,
    max_repeats: int,
    budget_s: float,
    stream: Any,
    dev: Any,
) -> list[Batch]:
    batches: list[Batch] = []
    taken = 0
    size = min_repeats
    gc_was_enabled = gc.isenabled()
    gc.disable()  # a collection mid-batch would stall the launches
    try:
        start = time.perf_counter()
        while taken < max_repeats:
            batches.append(_batch(call, before, min(size, max_repeats - taken), stream, dev))
            taken += len(batches[-1].events_us)
            spent = time.perf_counter() - start
            if taken >= min_repeats and spent >= budget_s:
                break
            per_sample = spent / taken
            size = max(1, int((budget_s - spent) / per_sample) + 1) if per_sample > 0 else size
    finally:
        if gc_was_enabled:
            gc.enable()
    return batches
