"""CPU backend: measured and cached CPU peaks, and CpuProfiler on real conv3d / linear / cast ops."""

from __future__ import annotations

import json
import time
import warnings
from types import SimpleNamespace

import pytest
import torch

from harness.cards.fields import METRIC_FIELDS, SOURCE_CPU_ESTIMATE
from harness.profile import cpu_peak_tries, cpu_peaks
from harness.profile.base import Profile, WorkloadFacts
from harness.profile.cpu import IGNORED_OPS, CpuProfiler
from harness.profile.cpu_peaks import CpuPeaks, get_cpu_peaks, measure_cpu_peaks

UNKNOWABLE_ON_CPU = [
    "tensor_pct",
    "l2_pct",
    "warps_active_pct",
    "max_warps_pct",
    "waves",
    "grid",
    "block",
    "regs",
    "smem_dyn_kb",
    "smem_static_b",
    "l2_hit_pct",
    "sm_cycles_active",
    "cycles_elapsed",
    "occ_limit_regs",
    "occ_limit_smem",
]


@pytest.fixture(scope="module")
def peaks() -> CpuPeaks:
    """Real peaks of this machine, measured quickly (not through the user's cache)."""
    return measure_cpu_peaks(budget_s=0.6)


def fake_peaks(flops: float = 1e11) -> CpuPeaks:
    return CpuPeaks(
        flops_per_s={"float32": flops},
        mem_bw_bytes_per_s=2e10,
        sources={"float32": "fake", "mem_bw": "fake"},
        **cpu_peaks.machine_key(),
    )


@pytest.fixture
def counting_measure(monkeypatch, tmp_path):
    """Point the cache at a temp dir and replace the measurement by a counter."""
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    cpu_peaks.reset_memo()
    calls = []

    def measure(**_kwargs):
        calls.append(1)
        return fake_peaks(1e11 * len(calls))

    monkeypatch.setattr(cpu_peaks, "measure_cpu_peaks", measure)
    yield calls
    cpu_peaks.reset_memo()


# --- peaks ------------------------------------------------------------------------------------


def test_measured_peaks_are_plausible_and_say_where_they_came_from(peaks):
    assert peaks.flops_per_s["float32"] > 1e8  # more than 0.1 GFLOP/s
    assert peaks.flops_per_s["float32"] < 1e14  # less than 100 TFLOP/s on a CPU
    assert 1e8 < peaks.mem_bw_bytes_per_s < 1e13
    for name in peaks.flops_per_s:
        assert peaks.sources[name].startswith("measured ") and "torch.mm" in peaks.sources[name]
    assert "copy_" in peaks.sources["mem_bw"]
    assert peaks.torch_threads == torch.get_num_threads()
    assert set(peaks.flops_per_s) | set(peaks.unsupported) == {"float32", "bfloat16", "float16"}
    assert max(peaks.by_size["float32"].values()) == peaks.flops_per_s["float32"]  # the peak is a size's best
    # the reference kernels beside them (harness.profile.library_kernels): each layout at every reference shape
    assert {len(v) for v in peaks.conv_layouts.values()} == {len(peaks.conv_references)} == {4}
    assert all(s > 0 for v in peaks.conv_layouts.values() for s in v)
    assert "dram" in peaks.few_rows["float32"]
    again = CpuPeaks.from_dict(json.loads(json.dumps(peaks.as_dict())))
    assert again == peaks


def test_peaks_are_cached_and_reused(counting_measure):
    first = get_cpu_peaks()
    path = cpu_peaks.cache_path()
    assert counting_measure == [1]
    assert path.is_file()
    stored = json.loads(path.read_text())
    assert stored["key"] == cpu_peaks.machine_key()
    assert stored["peaks"]["flops_per_s"]["float32"] == first.flops_per_s["float32"]

    cpu_peaks.reset_memo()  # a new process: only the file is left
    second = get_cpu_peaks()
    assert counting_measure == [1]  # not measured again
    assert second == first

    path.unlink()  # within a process the memo answers without the file
    assert get_cpu_peaks() == first
    assert counting_measure == [1]


def test_refresh_measures_again_and_overwrites(counting_measure):
    get_cpu_peaks()
    refreshed = get_cpu_peaks(refresh=True)
    assert counting_measure == [1, 1]
    assert refreshed.flops_per_s["float32"] == 2e11
    cpu_peaks.reset_memo()
    assert get_cpu_peaks().flops_per_s["float32"] == 2e11  # the file holds the new numbers


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        "",
        json.dumps([1, 2, 3]),
        json.dumps({"schema": cpu_peaks.SCHEMA, "key": {}, "peaks": {"flops_per_s": {"float32": -1}}}),
        "\x00\xff garbage",
        json.dumps({"schema": 1, "key": {}, "peaks": {}}),
    ],
    ids=["truncated", "empty", "wrong-type", "negative-peak", "binary", "old-schema"],
)
def test_corrupt_cache_is_remeasured_with_a_warning(counting_measure, content):
    path = cpu_peaks.cache_path()
    path.parent.mkdir(parents=True)
    path.write_text(content)
    with pytest.warns(RuntimeWarning, match="unusable"):
        got = get_cpu_peaks()
    assert counting_measure == [1]
    assert got.flops_per_s["float32"] == 1e11
    assert CpuPeaks.from_dict(json.loads(path.read_text())["peaks"]) == got  # repaired


def test_cache_for_another_machine_key_is_not_trusted(counting_measure):
    other = fake_peaks(5e12)
    other.torch_threads = other.torch_threads + 7
    path = cpu_peaks.cache_path()
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"schema": cpu_peaks.SCHEMA, "key": other.key(), "peaks": other.as_dict()}))
    with pytest.warns(RuntimeWarning):
        got = get_cpu_peaks()
    assert got.flops_per_s["float32"] == 1e11
    assert counting_measure == [1]


def test_busy_measurement_is_measured_again_and_not_cached_while_still_busy(monkeypatch, tmp_path):
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path))
    cpu_peaks.reset_memo()
    measured = []

    def busy(**_kwargs):
        measured.append(1)
        peaks = fake_peaks(1e11 * len(measured))
        peaks.cpu_share = 0.5
        return peaks

    monkeypatch.setattr(cpu_peaks, "measure_cpu_peaks", busy)
    with pytest.warns(RuntimeWarning, match="busy"):
        got = get_cpu_peaks()
    assert len(measured) == 2 and got.busy
    assert got.flops_per_s["float32"] == 2e11  # the best of the two tries
    assert not cpu_peaks.cache_path().exists()
    assert get_cpu_peaks() is got  # kept for this process without a third measurement
    cpu_peaks.reset_memo()


def test_a_busy_measurement_is_cached_once_measuring_again_finds_the_cores_free(monkeypatch, tmp_path):
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path))
    cpu_peaks.reset_memo()
    shares = iter([0.4, 0.95])

    def measure(**_kwargs):
        peaks = fake_peaks(2e11)
        peaks.cpu_share = next(shares)
        return peaks

    monkeypatch.setattr(cpu_peaks, "measure_cpu_peaks", measure)
    got = get_cpu_peaks()
    assert not got.busy and cpu_peaks.cache_path().exists()
    cpu_peaks.reset_memo()


@pytest.mark.parametrize(("shares", "busy"), [({"float32": 1.0, "bfloat16": 0.5, "float16": 0.5}, False),
                                              ({"float32": 0.5, "bfloat16": 0.5, "float16": 0.5}, True),
                                              ({"float32": 0.5, "bfloat16": 1.0, "float16": 1.0}, True)])
def test_busy_is_judged_by_the_float32_products(monkeypatch, shares, busy):
    """A CPU without bf16 math runs a bf16 mm on one of its threads: half its threads' time on an idle machine,
    which is no sign of another process; a float32 product (every thread, on every CPU) at half is, even where
    another measurement caught the cores free (the old rule, the best share of any, cached such peaks)."""
    import torch

    threads = max(1, torch.get_num_threads())
    clock = {"wall": 0.0, "cpu": 0.0}

    def spend(share: float) -> None:  # one second of wall time, `share` of the threads busy
        clock["wall"] += 1.0
        clock["cpu"] += share * threads

    def matmul(name: str, budget_s: float) -> tuple[float, str, list[float], dict[int, float]]:
        spend(shares[name])
        return 1e11, "fake", [1e11], {256: 1e11}

    def bandwidth(budget_s: float, llc: int | None) -> tuple[float, str, list[float]]:
        spend(0.9)
        return 1e10, "fake", [1e10]

    fake_time = SimpleNamespace(process_time=lambda: clock["cpu"], perf_counter=lambda: clock["wall"])
    monkeypatch.setattr(cpu_peaks, "time", fake_time)
    monkeypatch.setattr(cpu_peaks, "measure_matmul", matmul)
    monkeypatch.setattr(cpu_peaks, "measure_bandwidth", bandwidth)
    assert cpu_peaks.measure_cpu_peaks().busy is busy


def test_matmul_sizes_grow_while_the_next_product_fits_the_budget():
    """n <= 1024 stopped short of the peak (a conv3d ran at 116% of it): sizes double up to the largest whose
    product fits a quarter of the budget. A planted machine: a product of size n takes n**3 / 1e9 s."""
    seen = []

    def seconds_at(n: int) -> float:
        seen.append(n)
        return n**3 / 1e9

    kept = cpu_peak_tries.grown_sizes(seconds_at, budget_s=40.0)
    assert [n for n, _ in kept] == [256, 512, 1024, 2048]  # 4096: 8 x 8.6 s, over 40 / 4
    assert seen == [256, 512, 1024, 2048]
    assert [n for n, _ in cpu_peak_tries.grown_sizes(seconds_at, budget_s=1e6)] == list(cpu_peak_tries.MATMUL_SIZES)
    assert [n for n, _ in cpu_peak_tries.grown_sizes(lambda n: 1.0, budget_s=4.0)] == [256]  # a slow, emulated dtype


def test_the_peak_is_the_fastest_way_to_multiply_and_a_way_that_fails_is_left_out(monkeypatch):
    """MKL's float32 torch.mm on an AMD EPYC ran at half of oneDNN's product (and of its conv3d): a peak is the
    best of every way. A planted machine: one way takes 8 ms a product, another 1 ms, a third cannot multiply."""
    def sleeper(seconds: float):
        return lambda: time.sleep(seconds), 2.0 * 256**3

    def failing():
        raise RuntimeError("not implemented for 'Half'")

    ways = {"slow": sleeper(0.008), "fast": sleeper(0.001), "broken": (failing, 1.0)}
    monkeypatch.setattr(cpu_peak_tries, "MATMUL_SIZES", (256,))
    monkeypatch.setattr(cpu_peak_tries, "_products", lambda dtype, n: dict(ways))
    peak, source, tries, by_size = cpu_peak_tries.measure_matmul("float32", budget_s=0.05)
    assert "peak by fast at n=256" in source and "broken" not in source
    assert 2 * 256**3 / 0.004 < peak <= 2 * 256**3 / 0.001  # the fast way's (a sleep overshoots), not the slow
    assert max(tries) == peak == by_size[256]  # each consecutive run's best, the peak among them
    monkeypatch.setattr(cpu_peak_tries, "_products", lambda dtype, n: {"broken": (failing, 1.0)})
    with pytest.raises(RuntimeError, match="Half"):
        cpu_peak_tries.measure_matmul("float16", budget_s=0.05)


def test_tries_keep_each_consecutive_runs_best():
    assert cpu_peak_tries.tries([1.0, 3.0, 2.0, 5.0, 4.0, 6.0], count=3) == [3.0, 5.0, 6.0]


def test_unwritable_cache_warns_but_returns_peaks(counting_measure, monkeypatch, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(blocker))
    with pytest.warns(RuntimeWarning, match="could not write"):
        got = get_cpu_peaks()
    assert got.flops_per_s["float32"] == 1e11


# --- CpuProfiler ------------------------------------------------------------------------------


def _conv_facts(x: torch.Tensor, w: torch.Tensor) -> WorkloadFacts:
    n, _, t, h, ww = x.shape
    cout, cin, kt, kh, kw = w.shape
    out_elems = n * cout * (t - kt + 1) * (h - kh + 1) * (ww - kw + 1)
    return WorkloadFacts(flops=2.0 * out_elems * cin * kt * kh * kw, min_bytes=None, dtype="float32", op_kind="conv3d")


def _profile(fn, facts, peaks, calls=2) -> Profile:
    fn()  # the protocol profiles an already warmed-up callable
    return CpuProfiler(calls=calls, peaks=peaks).profile(fn, facts)


def test_a_long_call_is_profiled_fewer_times_and_each_time_is_per_call(peaks):
    """Up to `calls` calls, stopping once the profiled calls took min_profiled_s: a call of 150 ms or more is
    profiled once (however loaded the machine), a fast one three times; dur_us stays per call either way."""
    import time

    x = torch.randn(64, 64)
    facts = WorkloadFacts(flops=2.0 * 64**3, min_bytes=None, dtype="float32", op_kind="linear")

    def slow():
        time.sleep(0.15)
        return torch.mm(x, x)

    slow_profile = CpuProfiler(calls=3, min_profiled_s=0.1, peaks=peaks).profile(slow, facts)
    fast_profile = CpuProfiler(calls=3, min_profiled_s=0.1, peaks=peaks).profile(lambda: torch.mm(x, x), facts)
    assert slow_profile.settings["calls"] == 1 and fast_profile.settings["calls"] == 3
    mm = next(k for k in fast_profile.kernels if k.name == "aten::mm")
    assert mm.extra["calls"] == 1 and mm.extra["measured_calls"] == 3


def _event(name: str, self_us: float, children: tuple = ()) -> SimpleNamespace:
    """A planted profiler event with its children (their inclusive times add to its own)."""
    e = SimpleNamespace(name=name, self_cpu_time_total=self_us, cpu_children=list(children), cpu_parent=None,
                        cpu_time_total=self_us + sum(c.cpu_time_total for c in children),
                        input_shapes=[], input_dtypes=[], flops=0, cpu_memory_usage=0,
                        is_user_annotation=False, is_python_function=False)
    for child in children:
        child.cpu_parent = e
    return e


def _kept_and_dropped(ops: list, op_kind: str) -> tuple[list, dict]:
    """Rule 3's selection on one measured call made of the planted `ops`."""
    events, stack = [], [_event("harness::measured_call#0", 0.0, tuple(ops))]
    while stack:
        node = stack.pop()
        events.append(node)
        stack.extend(node.cpu_children)
    facts = WorkloadFacts(flops=None, min_bytes=None, dtype="float32", op_kind=op_kind)
    profiler = CpuProfiler(calls=1)
    return profiler._select(profiler._collect(events, facts), False, 1)


def test_an_op_whose_children_are_only_allocations_is_its_own_work():
    """Rule 3 on planted events: aten::linear hands its time to addmm and is a wrapper; a tiny SDPA's flash op
    spends more in empty_like/transpose/empty than in itself, and is still the op that does the work."""
    flash = _event("aten::_scaled_dot_product_flash_attention_for_cpu", 25.0,
                   (_event("aten::empty_like", 10.0), _event("aten::transpose", 10.0), _event("aten::empty", 10.0)))
    linear = _event("aten::linear", 2.0, (_event("aten::addmm", 38.0),))
    kept, dropped = _kept_and_dropped([flash, linear], "attention")
    assert {k.op for k in kept} == {"aten::_scaled_dot_product_flash_attention_for_cpu", "aten::addmm"}
    assert "aten::linear" in dropped


def test_an_op_whose_own_time_is_work_is_kept_beside_a_slow_child():
    """Rule 3 on planted events: an addmm's GEMM (900 us of its own) beside a bias copy that a page fault
    stretched to 1000 us is still the op doing the work (it was dropped as a wrapper, its card left with the
    copy alone); aten::linear around it, 20 us of its own, is the wrapper."""
    addmm = _event("aten::addmm", 900.0, (_event("aten::expand", 3.0), _event("aten::copy_", 1000.0)))
    kept, dropped = _kept_and_dropped([_event("aten::linear", 20.0, (addmm,))], "linear")
    assert [k.op for k in kept] == ["aten::addmm", "aten::copy_"]
    assert "aten::linear" in dropped


def test_conv3d_layouts_show_different_ops(peaks):
    torch.manual_seed(0)
    x = torch.randn(1, 16, 4, 34, 34)
    w = torch.randn(32, 16, 3, 3, 3)
    facts = _conv_facts(x, w)
    xc = x.contiguous(memory_format=torch.channels_last_3d)
    wc = w.contiguous(memory_format=torch.channels_last_3d)

    plain = _profile(lambda: torch.nn.functional.conv3d(x, w), facts, peaks)
    last = _profile(lambda: torch.nn.functional.conv3d(xc, wc), facts, peaks)
    plain_names = [k.name for k in plain.kernels]
    last_names = [k.name for k in last.kernels]

    # both do their compute in a convolution op, which carries the workload's FLOPs
    for profile in (plain, last):
        conv = [k for k in profile.kernels if "conv" in k.name]
        assert conv, [k.name for k in profile.kernels]
        main = profile.settings["main_compute_op"]
        assert "conv" in main
        kernel = next(k for k in profile.kernels if k.name == main)
        assert kernel.extra["flops_source"].startswith("WorkloadFacts")
        assert kernel.extra["flops"] == facts.flops
        assert kernel.metrics["sm_pct"] > 0
    # the channels_last_3d run converts the layout: copy ops appear that the contiguous run has not
    assert set(plain_names) != set(last_names)
    assert "aten::copy_" in last_names and "aten::copy_" not in plain_names
    copy = last.kernels[last_names.index("aten::copy_")]
    assert any("aten::contiguous" in chain for chain in copy.extra["callers"])
    assert set(copy.extra["copy_roles"]) == {"layout_conversion"}
    assert copy.metrics["sm_pct"] is None  # a copy has no known FLOP count
    assert copy.metrics["dram_pct"] > 0
    # wrappers and allocation ops are filtered out of the kernel list but accounted for
    assert not (set(plain_names) & IGNORED_OPS)
    assert "aten::conv3d" not in plain_names and "aten::conv3d" in plain.settings["dropped_ops_us"]


def test_linear_matmul_kernel_flops_bytes_and_sm_pct(peaks):
    torch.manual_seed(0)
    m, k, n = 256, 512, 512
    a, w, b = torch.randn(m, k), torch.randn(n, k), torch.randn(n)
    facts = WorkloadFacts(flops=2.0 * m * n * k, min_bytes=None, dtype="float32", op_kind="linear")
    profile = _profile(lambda: torch.nn.functional.linear(a, w, b), facts, peaks)
    names = [kern.name for kern in profile.kernels]
    matmul = [kern for kern in profile.kernels if kern.name in ("aten::addmm", "aten::mm")]
    assert matmul, names
    mm = matmul[0]
    assert profile.settings["main_compute_op"] == mm.name
    assert mm.extra["flops_source"] == "torch.profiler with_flops"
    assert mm.extra["flops"] == 2 * m * n * k
    assert mm.extra["calls"] == 1.0
    # percent of this CPU's measured fp32 matmul peak; on a shared machine the peak may have been
    # measured in a worse moment than this run, so only the formula and the sign are fixed
    assert mm.metrics["sm_pct"] > 0
    assert mm.metrics["sm_pct"] == pytest.approx(
        mm.extra["flops"] / (mm.metrics["dur_us"] * 1e-6) / peaks.flops_per_s["float32"] * 100
    )
    assert mm.metrics["sm_pct"] < 1e5  # a unit slip (us vs s) would show as 1e6 x too much
    assert mm.metrics["dur_us"] > 0
    # roofline bytes: the inputs (and bias) read, the output written, in MB of 1e6 bytes
    if mm.name == "aten::addmm":
        assert mm.metrics["dram_read_mb"] == pytest.approx((m * k + k * n + n) * 4 / 1e6)
    assert mm.metrics["dram_write_mb"] == pytest.approx(m * n * 4 / 1e6)
    expected_pct = (mm.extra["bytes_read"] + mm.extra["bytes_written"]) / (
        mm.metrics["dur_us"] * 1e-6
    ) / peaks.mem_bw_bytes_per_s * 100
    assert mm.metrics["dram_pct"] == pytest.approx(expected_pct)
    assert "aten::linear" not in names and "aten::t" not in names


def test_per_call_normalization_counts_invocations(peaks):
    a, w = torch.randn(64, 128), torch.randn(128, 128)
    facts = WorkloadFacts(flops=None, min_bytes=None, dtype="float32", op_kind="linear")

    def twice():
        torch.mm(a, w)
        torch.mm(a, w)

    one = _profile(lambda: torch.mm(a, w), facts, peaks, calls=3)
    two = _profile(twice, facts, peaks, calls=3)
    mm_one = next(k for k in one.kernels if k.name == "aten::mm")
    mm_two = next(k for k in two.kernels if k.name == "aten::mm")
    assert mm_one.extra["calls"] == 1.0 and mm_two.extra["calls"] == 2.0
    assert mm_one.extra["measured_calls"] == 3
    assert mm_one.extra["flops"] == 2 * 64 * 128 * 128
    assert mm_two.extra["flops"] == 2 * mm_one.extra["flops"]


def test_cast_has_bytes_but_no_flops(peaks):
    x = torch.randn(3, 9, 120, 208)
    facts = WorkloadFacts(flops=None, min_bytes=x.numel() * 6, dtype="float32", op_kind="cast")
    profile = _profile(lambda: x.to(torch.bfloat16), facts, peaks)
    copy = next(k for k in profile.kernels if k.name == "aten::copy_")
    assert copy.metrics["sm_pct"] is None
    assert copy.extra["flops"] is None
    assert copy.metrics["dram_read_mb"] == pytest.approx(x.numel() * 4 / 1e6)  # fp32 source
    assert copy.metrics["dram_write_mb"] == pytest.approx(x.numel() * 2 / 1e6)  # bf16 destination
    assert "sm_pct" not in copy.extra["estimated_fields"]
    assert set(copy.extra["copy_roles"]) == {"cast"}


def test_dtypes_come_from_the_raw_events_where_function_events_lack_them():
    """torch 2.11's FunctionEvents have no input_dtypes (2.13's do): they are taken from the Kineto event
    of the same correlation id, only where that id is unique and the shapes agree."""
    from types import SimpleNamespace

    from harness.profile.cpu_events import attach_input_dtypes

    def raw(cid, shapes, dtypes):
        return SimpleNamespace(correlation_id=lambda: cid, shapes=lambda: shapes, dtypes=lambda: dtypes)

    cast = SimpleNamespace(id=5, input_shapes=[[3, 4], [3, 4], []])
    other_shapes = SimpleNamespace(id=6, input_shapes=[[2, 2]])
    ambiguous = SimpleNamespace(id=0, input_shapes=[])
    kineto = [raw(5, [[3, 4], [3, 4], []], ["c10::BFloat16", "float", "Scalar"]), raw(6, [[4, 4]], ["float"]),
              raw(0, [], []), raw(0, [], [])]
    attach_input_dtypes(SimpleNamespace(events=lambda: kineto), [cast, other_shapes, ambiguous])
    assert cast.input_dtypes == ["c10::BFloat16", "float", "Scalar"]
    assert not hasattr(other_shapes, "input_dtypes") and not hasattr(ambiguous, "input_dtypes")
    attach_input_dtypes(None, [SimpleNamespace(id=1, input_shapes=[])])  # no raw events: no error


def test_profile_is_labelled_estimated_and_unknowable_fields_stay_none(peaks):
    a, w = torch.randn(128, 256), torch.randn(256, 256)
    facts = WorkloadFacts(flops=2.0 * 128 * 256 * 256, min_bytes=None, dtype="float32", op_kind="linear")
    profile = _profile(lambda: torch.nn.functional.linear(a, w), facts, peaks)
    assert profile.backend == "cpu"
    assert profile.metrics_source == SOURCE_CPU_ESTIMATE
    assert profile.peaks["flops_per_s"]["float32"] == peaks.flops_per_s["float32"]
    assert profile.peaks["sources"]["mem_bw"].startswith("measured")
    assert any("ESTIMATE" in note for note in profile.notes)
    assert profile.kernels
    for kernel in profile.kernels:
        assert set(kernel.metrics) == set(METRIC_FIELDS)
        assert kernel.extra["metrics_source"] == SOURCE_CPU_ESTIMATE
        estimated = kernel.extra["estimated_fields"]
        assert "dur_us" not in estimated  # measured by the profiler
        assert {"dram_pct", "dram_read_mb", "dram_write_mb"} <= set(estimated)
        for name in estimated:
            assert kernel.metrics[name] is not None
        for name in UNKNOWABLE_ON_CPU:
            assert kernel.metrics[name] is None, name
        assert kernel.classification is None
        assert kernel.metric("tensor_pct") is None
        json.dumps(kernel.to_dict())  # report-format and serializable


def test_missing_dtype_peak_leaves_sm_pct_none():
    a, w = torch.randn(64, 128).bfloat16(), torch.randn(128, 128).bfloat16()
    facts = WorkloadFacts(flops=None, min_bytes=None, dtype="bfloat16", op_kind="linear")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the fake peaks must not trigger a measurement
        profile = _profile(lambda: torch.mm(a, w), facts, fake_peaks())
    mm = next(k for k in profile.kernels if k.name == "aten::mm")
    assert mm.extra["flops"] == 2 * 64 * 128 * 128
    assert mm.metrics["sm_pct"] is None
    assert "bfloat16" in mm.extra["sm_pct_note"]
