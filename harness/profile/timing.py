"""Wall-clock timing of a callable on the CPU, warm-up until stable, and the noise rule of two timings.

`TimingResult` is backend-neutral: the CUDA-event timer (harness.profile.cuda_timing) fills the same
fields, adding `device_name`, `clock_mhz` and its clock cross-check (`clock`, `event_us`, `synced_us`).
All durations are microseconds.

Warm-up (`warm_up`): a fixed count of warm-up calls is too few for some calls and wasteful for
others; a cold first call was measured at 1.7x and even 160x its steady time (a cold M=3 K=256
linear: 7994 us against 49 us). So the calls before the first sample continue until the timing is
stable: the median of the last `window` call times is within `rel_tol` of the median of the
`window` calls before them. Medians of windows, not single calls, so that one slow call (a page
fault, a context switch) neither fakes stability nor restarts the wait.

Statistics (see `TimingResult.from_samples`):
- median of the samples;
- quartiles Q1, Q3 by linear interpolation between order statistics (Python's
  `statistics.quantiles(..., method="inclusive")`, the same as numpy's default percentile);
- `iqr_us` = Q3 - Q1, and `spread` = iqr_us / median_us, the *relative* interquartile range
  (0.0 for a single sample or a zero median).
"""

from __future__ import annotations

import gc
import math
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence


@dataclass
class TimingResult:
    median_us: float
    min_us: float
    max_us: float
    iqr_us: float  # Q3 - Q1 of the samples
    spread: float  # relative IQR: iqr_us / median_us
    n: int  # number of measured samples (warm-ups excluded)
    samples_us: list[float]
    warmup: int  # calls made before the first measured sample
    method: str  # how each sample was taken, e.g. "cpu_perf_counter", "cuda_event"
    device_name: str | None = None
    clock_mhz: float | None = None
    notes: list[str] = field(default_factory=list)
    warmup_stable: bool | None = None  # whether warm-up reached a stable timing; None: a fixed count
    # GPU timings (harness.profile.cuda_timing): the clock whose reading the samples are, "cuda_event"
    # or "synchronized_wall" (the events missed work the device-synchronised wall clock saw), and both
    # clocks' time per call.
    clock: str | None = None
    event_us: float | None = None
    synced_us: float | None = None

    @classmethod
    def from_samples(
        cls,
        samples_us: list[float],
        *,
        warmup: int,
        method: str,
        device_name: str | None = None,
        clock_mhz: float | None = None,
        notes: list[str] | None = None,
        warmup_stable: bool | None = None,
        clock: str | None = None,
        event_us: float | None = None,
        synced_us: float | None = None,
    ) -> TimingResult:
        """Summarize per-call durations (microseconds); at least one finite, non-negative sample."""
        samples = [float(s) for s in samples_us]
        if not samples:
            raise ValueError("a timing needs at least one sample")
        if any(not math.isfinite(s) or s < 0 for s in samples):
            raise ValueError("timing samples must be finite and non-negative")
        median = statistics.median(samples)
        if len(samples) >= 2:
            q1, _, q3 = statistics.quantiles(samples, n=4, method="inclusive")
            iqr = max(0.0, q3 - q1)
        else:
            iqr = 0.0
        spread = iqr / median if median > 0 else 0.0
        return cls(
            median_us=median,
            min_us=min(samples),
            max_us=max(samples),
            iqr_us=iqr,
            spread=spread,
            n=len(samples),
            samples_us=samples,
            warmup=warmup,
            method=method,
            device_name=device_name,
            clock_mhz=clock_mhz,
            notes=list(notes or []),
            warmup_stable=warmup_stable,
            clock=clock,
            event_us=event_us,
            synced_us=synced_us,
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, obj: dict[str, Any]) -> TimingResult:
        """Tolerant of dicts written before a field existed (it takes its default) and of extra keys."""
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in obj.items() if k in known})


@dataclass(frozen=True)
class WarmUp:
    calls: int  # warm-up calls made
    seconds: float  # clock time they took
    stable: bool  # False: stopped at max_calls or max_s before the timing settled
    samples_us: tuple[float, ...]  # each warm-up call's duration

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "samples_us": list(self.samples_us)}


def is_stable(samples_us: Sequence[float], window: int = 3, rel_tol: float = 0.1) -> bool:
    """Whether the median of the last `window` samples is within `rel_tol` of the `window` before."""
    if len(samples_us) < 2 * window:
        return False
    last = statistics.median(samples_us[-window:])
    previous = statistics.median(samples_us[-2 * window:-window])
    return abs(last - previous) <= rel_tol * previous


def warm_up(
    fn: Callable[[], Any],
    *,
    clock: Callable[[], int] = time.perf_counter_ns,
    window: int = 3,
    rel_tol: float = 0.1,
    min_calls: int = 2,
    max_calls: int = 200,
    max_s: float = 2.0,
    sync: Callable[[], Any] | None = None,
    prepare: Callable[[], Any] | None = None,
) -> WarmUp:
    """Call `fn()` until its timing is stable (see the module docstring), at least `min_calls` times.

    Stops unstable at `max_calls` calls or once `max_s` seconds have passed. Each call is timed by
    `clock()` (integer nanoseconds). `sync`, when given, runs before the clock starts and after each
    call, inside the timed interval, so that asynchronous work (CUDA kernels) is counted and nothing
    queued earlier is; `prepare` runs before each call, outside it (e.g. an L2 flush).
    """
    if window < 1 or min_calls < 0 or max_calls < 1:
        raise ValueError("need window >= 1, min_calls >= 0 and max_calls >= 1")
    if rel_tol < 0 or max_s < 0:
        raise ValueError("rel_tol and max_s must be non-negative")
    samples: list[float] = []
    stable = False
    start = clock()
    while len(samples) < max_calls:
        if prepare is not None:
            prepare()
        if sync is not None:
            sync()
        t0 = clock()
        fn()
        if sync is not None:
            sync()
        t1 = clock()
        samples.append((t1 - t0) / 1000.0)
        if len(samples) >= min_calls and is_stable(samples, window, rel_tol):
            stable = True
            break
        if t1 - start >= max_s * 1e9:
            break
    return WarmUp(calls=len(samples), seconds=(clock() - start) / 1e9, stable=stable, samples_us=tuple(samples))


def time_cpu(
    fn: Callable[[], Any],
    *,
    warmup: int | None = None,
    min_repeats: int = 5,
    max_repeats: int = 1000,
    budget_s: float = 1.0,
    clock: Callable[[], int] = time.perf_counter_ns,
    disable_gc: bool = True,
    method: str = "cpu_perf_counter",
    prepare: Callable[[], Any] | None = None,
) -> TimingResult:
    """Time `fn()` by the wall clock: warm-up calls (unrecorded), then timed calls.

    `warmup`: None warms up until the timing is stable (`warm_up` with its defaults; the result's
    `warmup_stable` says whether it got there); an int makes exactly that many warm-up calls.
    Timed calls continue until `budget_s` seconds of measuring have passed (warm-ups not counted),
    but never fewer than `min_repeats` nor more than `max_repeats`. Each sample is the
    `clock()` difference (integer nanoseconds) around one call. The garbage collector is paused
    while timing unless `disable_gc` is False (as `timeit` does). `prepare`, when given, runs before
    every call (warm-up ones too), outside each sample's clock (an in-place op's input restored).
    """
    if min_repeats < 1:
        raise ValueError("min_repeats must be at least 1")
    if max_repeats < min_repeats:
        raise ValueError("max_repeats must be >= min_repeats")
    if (warmup is not None and warmup < 0) or budget_s < 0:
        raise ValueError("warmup and budget_s must be non-negative")
    stable: bool | None = None
    if warmup is None:
        warm = warm_up(fn, clock=clock, prepare=prepare)
        warmup, stable = warm.calls, warm.stable
    else:
        for _ in range(warmup):
            if prepare is not None:
                prepare()
            fn()
    gc_was_enabled = gc.isenabled()
    if disable_gc:
        gc.disable()
    samples_ns: list[int] = []
    budget_ns = budget_s * 1e9
    try:
        start = clock()
        while len(samples_ns) < max_repeats:
            if prepare is not None:
                prepare()
            t0 = clock()
            fn()
            t1 = clock()
            samples_ns.append(t1 - t0)
            if len(samples_ns) >= min_repeats and t1 - start >= budget_ns:
                break
    finally:
        if disable_gc and gc_was_enabled:
            gc.enable()
    return TimingResult.from_samples(
        [ns / 1000.0 for ns in samples_ns], warmup=warmup, method=method, warmup_stable=stable
    )
