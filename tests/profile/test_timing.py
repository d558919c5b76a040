"""timing.py: sample statistics, warm-up until stable, the time budget, and the noise rule of compare()."""

from __future__ import annotations

import dataclasses

import pytest

from harness.profile.timing import TimingResult, time_cpu, warm_up


class FakeClock:
    """A nanosecond clock that only moves when the timed function runs."""

    def __init__(self, durations_ns: list[int]):
        self.now = 0
        self.durations = list(durations_ns)
        self.calls = 0

    def __call__(self) -> int:
        return self.now

    def fn(self) -> None:
        self.now += self.durations[self.calls % len(self.durations)]
        self.calls += 1


def result(median: float, spread: float = 0.0) -> TimingResult:
    base = TimingResult.from_samples([median], warmup=0, method="test")
    return dataclasses.replace(base, spread=spread, iqr_us=spread * median)


# --- statistics -------------------------------------------------------------------------------


def test_from_samples_median_quartiles_and_relative_spread():
    r = TimingResult.from_samples([5.0, 1.0, 4.0, 2.0, 3.0], warmup=2, method="test")
    assert r.median_us == 3.0
    assert (r.min_us, r.max_us) == (1.0, 5.0)
    # inclusive (numpy-linear) quartiles of 1..5 are 2 and 4
    assert r.iqr_us == pytest.approx(2.0)
    assert r.spread == pytest.approx(2.0 / 3.0)
    assert r.n == 5 and r.warmup == 2 and r.method == "test"
    assert r.samples_us == [5.0, 1.0, 4.0, 2.0, 3.0]  # kept in measurement order


def test_from_samples_even_count_interpolates():
    r = TimingResult.from_samples([10.0, 20.0, 30.0, 40.0], warmup=0, method="test")
    assert r.median_us == 25.0
    # numpy.percentile([10,20,30,40], [25, 75]) == [17.5, 32.5]
    assert r.iqr_us == pytest.approx(15.0)
    assert r.spread == pytest.approx(15.0 / 25.0)


def test_single_sample_has_zero_spread_and_optional_fields_default():
    r = TimingResult.from_samples([7.0], warmup=0, method="cuda_event", device_name="H200", clock_mhz=1980.0)
    assert (r.median_us, r.iqr_us, r.spread, r.n) == (7.0, 0.0, 0.0, 1)
    assert r.device_name == "H200" and r.clock_mhz == 1980.0 and r.notes == []
    assert TimingResult.from_dict(r.to_dict()) == r


@pytest.mark.parametrize("bad", [[], [1.0, -1.0], [float("nan")], [float("inf")]])
def test_from_samples_rejects_bad_samples(bad):
    with pytest.raises(ValueError):
        TimingResult.from_samples(bad, warmup=0, method="test")


# --- time_cpu ---------------------------------------------------------------------------------


def test_time_cpu_stops_when_budget_is_spent():
    clock = FakeClock([1_000_000])  # every call takes exactly 1 ms
    r = time_cpu(clock.fn, warmup=3, min_repeats=2, max_repeats=1000, budget_s=0.010, clock=clock)
    assert r.n == 10  # 10 x 1 ms reaches the 10 ms budget
    assert clock.calls == 3 + 10  # warm-ups are made but not recorded
    assert r.samples_us == [1000.0] * 10
    assert r.median_us == 1000.0 and r.spread == 0.0
    assert r.method == "cpu_perf_counter" and r.warmup == 3


def test_time_cpu_min_repeats_beat_the_budget():
    clock = FakeClock([50_000_000])  # 50 ms per call, budget already spent after one
    r = time_cpu(clock.fn, warmup=0, min_repeats=5, budget_s=0.001, clock=clock)
    assert r.n == 5
    assert clock.calls == 5


def test_time_cpu_max_repeats_cap():
    clock = FakeClock([1_000])  # 1 us per call; a 10 s budget would allow 10 million
    r = time_cpu(clock.fn, warmup=0, min_repeats=1, max_repeats=7, budget_s=10.0, clock=clock)
    assert r.n == 7


def test_time_cpu_records_each_call_duration():
    clock = FakeClock([3_000, 1_000, 2_000])
    r = time_cpu(clock.fn, warmup=0, min_repeats=3, max_repeats=3, budget_s=0.0, clock=clock)
    assert r.samples_us == [3.0, 1.0, 2.0]
    assert r.median_us == 2.0 and r.min_us == 1.0 and r.max_us == 3.0


def test_time_cpu_real_clock_respects_budget():
    import time

    start = time.perf_counter()
    r = time_cpu(lambda: sum(range(1000)), warmup=1, min_repeats=3, budget_s=0.05)
    elapsed = time.perf_counter() - start
    assert r.n >= 3
    assert elapsed < 0.5
    assert 0 < r.min_us <= r.median_us <= r.max_us


def test_time_cpu_argument_checks():
    with pytest.raises(ValueError):
        time_cpu(lambda: None, min_repeats=0)
    with pytest.raises(ValueError):
        time_cpu(lambda: None, min_repeats=5, max_repeats=4)
    with pytest.raises(ValueError):
        time_cpu(lambda: None, warmup=-1)


# --- warm-up until stable ---------------------------------------------------------------------

SLOW_NS, FAST_NS = 8_000_000, 50_000  # a cold call 160x its steady time, as measured on a cold linear


def test_warm_up_stops_once_the_slow_calls_are_behind():
    clock = FakeClock([SLOW_NS] * 4 + [FAST_NS] * 500)
    w = warm_up(clock.fn, clock=clock)
    # windows of 3: call 9 is the first whose earlier window (calls 4-6) holds a single slow call,
    # so both window medians are the fast time
    assert w.calls == 9 and w.stable
    assert w.samples_us == (8000.0,) * 4 + (50.0,) * 5
    assert w.seconds == pytest.approx((4 * SLOW_NS + 5 * FAST_NS) / 1e9)
    assert w.to_dict()["samples_us"] == list(w.samples_us)


def test_warm_up_ignores_one_slow_call():
    """A lone slow call (a page fault, a context switch) in a window does not move its median."""
    clock = FakeClock([FAST_NS] * 4 + [SLOW_NS] + [FAST_NS] * 500)
    w = warm_up(clock.fn, clock=clock)
    assert w.calls == 6 and w.stable


@pytest.mark.parametrize("later_ns, calls", [(109_000, 6), (111_000, 8)])
def test_warm_up_tolerance_is_relative_to_the_earlier_window(later_ns, calls):
    # window medians 100 then 109 us: within 10%, stable at once; 100 then 111: not, until both
    # windows hold mostly 111 us calls (call 8)
    clock = FakeClock([100_000] * 3 + [later_ns] * 50)
    assert warm_up(clock.fn, clock=clock).calls == calls


def test_warm_up_never_stable_stops_at_max_calls():
    clock = FakeClock([1_000 * 2**k for k in range(40)])  # each call twice the last
    w = warm_up(clock.fn, clock=clock, max_calls=20, max_s=1e9)
    assert (w.calls, w.stable, clock.calls) == (20, False, 20)


def test_warm_up_never_stable_stops_at_max_s():
    clock = FakeClock([1_000_000 * (k + 1) for k in range(100)])  # 1, 2, 3, ... ms
    w = warm_up(clock.fn, clock=clock, max_s=0.010)
    assert (w.calls, w.stable) == (4, False)  # 1 + 2 + 3 + 4 ms reach the 10 ms limit
    assert w.seconds == pytest.approx(0.010)


def test_warm_up_makes_min_calls_even_when_stable_sooner():
    clock = FakeClock([FAST_NS])
    assert warm_up(clock.fn, clock=clock, min_calls=10).calls == 10


def test_warm_up_times_sync_but_not_prepare():
    """`prepare` (an L2 flush) runs before the clock starts; `sync` brackets the call inside it."""
    clock = FakeClock([FAST_NS])
    events: list[str] = []

    def prepare() -> None:
        events.append("prepare")
        clock.now += SLOW_NS  # a costly flush that must not count

    def sync() -> None:
        events.append("sync")
        clock.now += 1_000  # the wait for queued work

    def fn() -> None:
        events.append("fn")
        clock.fn()

    w = warm_up(fn, clock=clock, sync=sync, prepare=prepare, max_calls=6)
    assert events[:4] == ["prepare", "sync", "fn", "sync"]
    # sync before the call runs before t0, so each sample is the call plus the sync after it
    assert w.samples_us == ((FAST_NS + 1_000) / 1000,) * 6


def test_warm_up_argument_checks():
    for bad in ({"window": 0}, {"max_calls": 0}, {"min_calls": -1}, {"rel_tol": -0.1}, {"max_s": -1.0}):
        with pytest.raises(ValueError):
            warm_up(lambda: None, **bad)


def test_time_cpu_warms_up_until_stable_by_default():
    clock = FakeClock([SLOW_NS] * 4 + [FAST_NS] * 500)
    r = time_cpu(clock.fn, min_repeats=5, max_repeats=5, budget_s=0.0, clock=clock)
    assert r.warmup == 9 and r.warmup_stable is True
    assert r.samples_us == [50.0] * 5  # no slow call among the samples
    assert clock.calls == 9 + 5


def test_time_cpu_fixed_warmup_records_no_stability():
    clock = FakeClock([SLOW_NS] * 4 + [FAST_NS] * 500)
    r = time_cpu(clock.fn, warmup=2, min_repeats=5, max_repeats=5, budget_s=0.0, clock=clock)
    assert r.warmup == 2 and r.warmup_stable is None
    assert r.samples_us == [8000.0, 8000.0, 50.0, 50.0, 50.0]  # a fixed count leaves slow calls in


def test_from_dict_reads_a_result_written_before_warmup_stable():
    old = TimingResult.from_samples([1.0, 2.0], warmup=2, method="test").to_dict()
    del old["warmup_stable"]
    assert TimingResult.from_dict(old).warmup_stable is None
