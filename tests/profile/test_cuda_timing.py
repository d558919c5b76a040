"""CUDA-event timing and the torch CUDA profiler: clean refusal without CUDA, real runs with it."""

from __future__ import annotations

import pytest
import torch

from harness.cards.fields import SOURCE_TORCH_CUDA_TRACE
from harness.profile.base import ProfilerUnavailable, WorkloadFacts
from harness.profile.cuda_timing import flush_bytes, time_cuda
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
