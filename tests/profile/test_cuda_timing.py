"""CUDA-event timing and the torch CUDA profiler: clean refusal without CUDA, real runs with it."""

from __future__ import annotations

import ctypes

import pytest
import torch

from harness.cards.fields import SOURCE_TORCH_CUDA_TRACE
from harness.profile.base import ProfilerUnavailable, WorkloadFacts
from harness.profile.cuda_timing import (
    CLOCK_GAP_US,
    CUDA_LIMIT_PERSISTING_L2_CACHE_SIZE,
    EVENT_CLOCK,
    WALL_CLOCK,
    Batch,
    PersistingL2,
    flush_bytes,
    judge_clocks,
    time_cuda,
)
from harness.profile.torch_cuda import TorchCudaProfiler
from harness.profile.torch_trace import launch_stats, load_trace

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
without_cuda = pytest.mark.skipif(CUDA, reason="checks the refusal on a machine without CUDA")

FACTS = WorkloadFacts(flops=None, min_bytes=None, dtype="float32", op_kind="linear")


@without_cuda
def test_time_cuda_refuses_without_cuda():
    with pytest.raises(ProfilerUnavailable) as info:
        time_cuda(lambda: None)
    message = str(info.value)
    assert "CUDA is not available" in message and "\n" not in message


@without_cuda
def test_profiler_refuses_without_cuda():
    with pytest.raises(ProfilerUnavailable) as info:
        TorchCudaProfiler().profile(lambda: None, FACTS)
    assert "\n" not in str(info.value)


def test_bad_arguments_fail_before_touching_the_gpu():
    with pytest.raises(ValueError):
        time_cuda(lambda: None, min_repeats=0)
    with pytest.raises(ValueError):
        time_cuda(lambda: None, min_repeats=10, max_repeats=5)
    with pytest.raises(ValueError):
        time_cuda(lambda: None, budget_s=-1)


# ---------------------------------------------------------------------------------------------
# The clock cross-check, on planted numbers

OVERHEAD_US = 35.0  # the harness's own wall time per sample (a 2x-L2 flush on an H200, two events, the loop)


def _batches(event_us: float, synced_us: float, sizes: tuple[int, ...] = (10, 400)) -> list[Batch]:
    """Batches whose events read `event_us` per call and whose synchronised wall reads `synced_us` more
    than the harness's overhead per call."""
    return [Batch((event_us,) * n, n * (OVERHEAD_US + synced_us)) for n in sizes]


def test_a_side_stream_variant_is_timed_by_the_synchronised_clock():
    check = judge_clocks(_batches(event_us=5.0, synced_us=900.0), OVERHEAD_US)
    assert check.flagged and check.clock == WALL_CLOCK
    assert check.event_us == pytest.approx(5.0) and check.synced_us == pytest.approx(900.0)
    assert check.samples_us == pytest.approx([900.0] * 410)  # one per call: the median weighs batches by calls
    assert "5.0 us per call" in check.note and "900.0 us" in check.note and "side stream" in check.note


def test_an_honest_launch_bound_kernel_is_left_to_its_events():
    # Its events already hold its launch cost; the clocks differ by the overhead's error only.
    check = judge_clocks(_batches(event_us=8.0, synced_us=10.0), OVERHEAD_US)
    assert not check.flagged and check.clock == EVENT_CLOCK and check.note is None
    assert check.samples_us == [8.0] * 410 and check.synced_us == pytest.approx(10.0)


def test_a_tiny_kernel_with_a_large_ratio_but_a_small_gap_is_not_flagged():
    check = judge_clocks(_batches(event_us=3.0, synced_us=3.0 + CLOCK_GAP_US / 2), OVERHEAD_US)
    assert not check.flagged  # 2.7x, but 5 us is within the overhead's error


def test_a_slow_call_with_a_large_gap_but_a_small_ratio_is_not_flagged():
    assert not judge_clocks(_batches(event_us=2000.0, synced_us=2400.0), OVERHEAD_US).flagged


def test_one_disturbed_batch_is_not_a_variant_hiding_work():
    honest, disturbed = _batches(event_us=5.0, synced_us=6.0, sizes=(400, 10))
    slowed = Batch(disturbed.events_us, disturbed.wall_us + 3000.0)  # a 3 ms stall spread over 10 calls
    assert not judge_clocks([honest, slowed], OVERHEAD_US).flagged


def test_a_call_honest_only_in_the_first_small_batch_is_still_caught():
    honest_first = _batches(event_us=900.0, synced_us=900.0, sizes=(10,))
    hiding_after = _batches(event_us=5.0, synced_us=900.0, sizes=(400,))
    check = judge_clocks(honest_first + hiding_after, OVERHEAD_US)
    assert check.flagged and "400 of the 410 calls" in check.note


def test_the_thresholds_are_settings():
    batches = _batches(event_us=100.0, synced_us=130.0)
    assert not judge_clocks(batches, OVERHEAD_US).flagged
    assert judge_clocks(batches, OVERHEAD_US, ratio=1.2, min_gap_us=20.0).flagged


def test_judge_clocks_needs_samples():
    with pytest.raises(ValueError):
        judge_clocks([], OVERHEAD_US)
    with pytest.raises(ValueError):
        judge_clocks([Batch((), 10.0)], OVERHEAD_US)


class FakeCudart:
    """cudaDeviceGetLimit / cudaDeviceSetLimit / cudaCtxResetPersistingL2Cache with planted results."""

    def __init__(self, set_aside: int = 0, status: int = 0):
        self.set_aside, self.status, self.resets = set_aside, status, 0

    def cudaDeviceGetLimit(self, pointer, limit):  # noqa: N802 - the runtime's names
        assert limit == CUDA_LIMIT_PERSISTING_L2_CACHE_SIZE
        ctypes.cast(pointer, ctypes.POINTER(ctypes.c_size_t)).contents.value = self.set_aside
        return self.status

    def cudaDeviceSetLimit(self, limit, value):  # noqa: N802
        self.set_aside = value.value
        return 0

    def cudaCtxResetPersistingL2Cache(self):  # noqa: N802
        self.resets += 1
        return self.status


def test_a_persisting_l2_set_aside_is_set_back_to_zero_with_a_note():
    lib = FakeCudart(set_aside=8 * 1024 * 1024)
    note = PersistingL2(lib).zero_set_aside("by the timed call")
    assert lib.set_aside == 0 and "8.0 MiB" in note and "by the timed call" in note
    assert PersistingL2(lib).zero_set_aside("by the timed call") is None  # none left: nothing to say


def test_persisting_l2_errors_are_notes_not_failures():
    lib = FakeCudart(status=1)
    l2 = PersistingL2(lib)
    assert "cudaError 1" in l2.zero_set_aside("before the timing") and "cudaError 1" in l2.reset_lines()
    assert PersistingL2(FakeCudart()).reset_lines() is None


# ---------------------------------------------------------------------------------------------
# On a GPU


def _matmul(n: int = 4096):
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    return lambda: a @ b


@pytest.mark.gpu
@needs_cuda
def test_time_cuda_on_a_gemm():
    result = time_cuda(_matmul(), budget_s=0.2, min_repeats=10)
    assert result.n >= 10
    assert 0 < result.min_us <= result.median_us <= result.max_us
    assert result.method == "cuda_event+l2_flush"
    assert result.device_name == torch.cuda.get_device_name()
    assert any("L2 flushed" in note for note in result.notes)
    assert result.clock_mhz is None or 500 < result.clock_mhz < 3000
    if result.clock_mhz is None:
        assert any("SM clock not read" in note for note in result.notes)


@pytest.mark.gpu
@needs_cuda
def test_flush_buffer_is_twice_l2():
    size, how = flush_bytes()
    assert size == 2 * torch.cuda.get_device_properties(0).L2_cache_size
    assert "reported by the device" in how


@pytest.mark.gpu
@needs_cuda
def test_cuda_graph_removes_launch_cost():
    x = torch.zeros(256, device="cuda")

    def many_small_kernels():
        for _ in range(200):
            x.add_(1.0)

    eager = time_cuda(many_small_kernels, budget_s=0.2, flush_l2=False)
    graph = time_cuda(many_small_kernels, budget_s=0.2, flush_l2=False, cuda_graph=True)
    assert graph.method == "cuda_graph+cuda_event"
    assert graph.median_us < eager.median_us


@pytest.mark.gpu
@needs_cuda
def test_torch_cuda_profiler_on_a_gemm(tmp_path):
    n = 4096
    fn = _matmul(n)
    fn()
    torch.cuda.synchronize()
    facts = WorkloadFacts(flops=2.0 * n**3, min_bytes=3.0 * n * n * 2, dtype="bfloat16", op_kind="linear")
    profile = TorchCudaProfiler(trace_dir=tmp_path).profile(fn, facts)
    assert profile.metrics_source == SOURCE_TORCH_CUDA_TRACE
    assert profile.kernels
    dominant = max(profile.kernels, key=lambda k: k.metrics["dur_us"])
    m = dominant.metrics
    assert m["dur_us"] > 0 and m["grid"] >= 1 and m["block"] >= 32 and m["regs"] >= 1
    assert m["waves"] > 0
    assert 1.0 < m["sm_pct"] < 150.0 and m["tensor_pct"] == m["sm_pct"]
    assert set(dominant.extra["estimated_fields"]) == {"sm_pct", "tensor_pct", "dram_pct"}
    props = torch.cuda.get_device_properties(0)
    assert profile.peaks["limits"]["sm_count"] == props.multi_processor_count
    assert profile.settings["trace_path"] and (tmp_path / profile.settings["trace_path"]).exists()


@pytest.mark.gpu
@needs_cuda
def test_live_trace_occupancy_matches_cudas_calculator(tmp_path):
    """On this GPU, Kineto's occupancy (from cuda_occupancy.h) must equal ours for every kernel."""
    from torch.profiler import ProfilerActivity, profile

    a = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
    conv = torch.nn.Conv3d(16, 32, 3, device="cuda")
    video = torch.randn(1, 16, 6, 64, 64, device="cuda")
    work = lambda: (a @ a, torch.softmax(a, -1), a.float().sum(), conv(video))  # noqa: E731
    work()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        work()
        torch.cuda.synchronize()
    path = tmp_path / "live.json"
    prof.export_chrome_trace(str(path))
    trace = load_trace(path)
    assert trace.kernels
    checked = 0
    for k in trace.kernels:
        device = trace.device_of(k)
        stats = launch_stats(k, device.limits)
        assert stats.waves * stats.occupancy.blocks_per_sm == pytest.approx(k.trace_blocks_per_sm, rel=1e-3)
        if k.trace_occupancy and "activeBlocksPerMultiprocessor" in k.trace_occupancy:
            if k.shared_memory_b <= 48 * 1024:
                assert stats.occupancy.blocks_per_sm == k.trace_occupancy["activeBlocksPerMultiprocessor"], k.name
                assert stats.occupancy.limit_regs == k.trace_occupancy["blockLimitRegs"], k.name
                checked += 1
        elif k.est_achieved_occupancy_pct is not None and k.shared_memory_b <= 48 * 1024:
            resident = min(stats.occupancy.blocks_per_sm, k.trace_blocks_per_sm) * k.block
            assert round(100 * resident / device.limits.max_threads_per_sm) == pytest.approx(
                k.est_achieved_occupancy_pct, abs=1
            ), k.name
            checked += 1
    assert checked >= 1


def _side_stream_variant(a: torch.Tensor, b: torch.Tensor):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())

    def call():
        with torch.cuda.stream(side):  # launched there, and nobody waits for it
            a @ b

    return call


@pytest.mark.gpu
@needs_cuda
def test_a_side_stream_variant_is_caught_and_an_honest_matmul_is_not():
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    honest = time_cuda(lambda: a @ b, budget_s=0.2)
    side = time_cuda(_side_stream_variant(a, b), budget_s=0.2)
    torch.cuda.synchronize()
    assert honest.clock == EVENT_CLOCK and honest.synced_us == pytest.approx(honest.event_us, rel=0.3)
    assert side.clock == WALL_CLOCK and side.event_us < 0.2 * side.synced_us
    # The work it hid, on the clock that saw it (a little less: it overlaps the current stream's flushes).
    assert side.median_us == pytest.approx(honest.median_us, rel=0.5)
    assert any("synchronised wall clock" in note for note in side.notes)


@pytest.mark.gpu
@needs_cuda
def test_launch_bound_honest_calls_are_left_to_their_events():
    x = torch.zeros(256, device="cuda")

    def many_small_kernels():
        for _ in range(50):
            x.add_(1.0)

    for flush_l2 in (True, False):
        assert time_cuda(lambda: x.add_(1.0), budget_s=0.1, flush_l2=flush_l2).clock == EVENT_CLOCK
        assert time_cuda(many_small_kernels, budget_s=0.1, flush_l2=flush_l2).clock == EVENT_CLOCK
    assert time_cuda(many_small_kernels, budget_s=0.1, cuda_graph=True).clock == EVENT_CLOCK
