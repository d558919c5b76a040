"""The prediction model on planted devices and cards whose answers are known by arithmetic (harness.predict)."""

from __future__ import annotations

import math
from typing import Any

import pytest

import harness.predict  # noqa: F401 - registers the predictors
from harness.cards.dtype import NATIVE, TF32, CardDtype
from harness.cards.model import Card, parse_report
from harness.predict.context import Context
from harness.predict.device import DeviceModel, Rate, cpu_device
from harness.predict.prediction import PREDICTORS, Estimate, Unpredictable, row
from harness.predict.terms import card_terms
from harness.predict.work import work_of

# A planted GPU: round peaks, the same at both ends of their ranges.
TF32_PEAK, BF16_PEAK, FP32_PEAK, BANDWIDTH = 50e12, 100e12, 10e12, 1e12
PLANTED = DeviceModel("planted GPU", "gpu", {
    "tf32_tflops": Rate(TF32_PEAK, TF32_PEAK, TF32_PEAK, "planted"),
    "bf16_tflops": Rate(BF16_PEAK, BF16_PEAK, BF16_PEAK, "planted"),
    "fp32_tflops": Rate(FP32_PEAK, FP32_PEAK, FP32_PEAK, "planted")},
    Rate(BANDWIDTH, BANDWIDTH, BANDWIDTH, "planted"))
FP32_TF32 = CardDtype("float32", "report", TF32, "planted")
BF16 = CardDtype("bfloat16", "report", NATIVE, "planted")
REPRODUCED = 1.05  # a variant's time within +/-5%, as the report's kernel times reproduce

CONV_SHAPE = {"input": [1, 96, 3, 40, 40], "weight": [3, 96, 3, 3, 3], "output": [1, 3, 1, 38, 38],
              "stride": [1, 1, 1], "padding": [0, 0, 0], "dilation": [1, 1, 1], "groups": 1}
INPUT_MB = 96 * 3 * 40 * 40 * 4 / 1e6
WEIGHT_MB = 3 * 96 * 27 * 4 / 1e6


def kernel(name: str, dur: float, **metrics: float) -> dict[str, Any]:
    return {"kernel": name, "metrics": {"dur_us": dur, **metrics}}


def conv_card(kernels: list[dict[str, Any]], summed: float, shape: dict[str, Any] = CONV_SHAPE) -> Card:
    return parse_report({"cards": [{
        "group": "planted", "resolution": "480x832", "stage": "vae", "op": "aten.conv3d.default",
        "shape_parameters": shape, "summed_kernel_us": summed, "kernels": kernels,
        "dominant_kernel": kernels[0]["kernel"], "primary": "compute_bound"}]}).cards[0]


# The report's conv: the input's and the weight's conversion into NDHWC (told apart by their DRAM reads), the
# implicit GEMM, the output's conversion back: 30 + 2 + 60 + 8 = 100 us.
CONVERSIONS = [kernel("void cudnn::nchwToNhwcKernel<float>(a)", 2.0, dram_read_mb=WEIGHT_MB, dram_pct=100.0),
               kernel("void cudnn::nchwToNhwcKernel<float>(b)", 30.0, dram_read_mb=INPUT_MB, dram_pct=100.0),
               kernel("sm90_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwc", 60.0, sm_pct=80.0),
               kernel("void cudnn::nhwcToNchwKernel<float>(c)", 8.0, dram_pct=100.0)]


def context(card: Card, dtype: CardDtype = FP32_TF32, device: DeviceModel = PLANTED, here: bool = True,
            shape: dict[str, Any] | None = None) -> Context:
    return Context(card, device, dtype, work_of(card.op_kind, shape or card.shape_parameters), here)


def predicted(ctx: Context, experiment: str, variant: str, **params: Any) -> Estimate | Unpredictable:
    return PREDICTORS[experiment](ctx, variant, params)


def quadrature(point: float, *moves: float) -> float:
    """The documented rule: moves (log ratios) of one side combined in quadrature."""
    return point * math.exp(math.copysign(math.sqrt(sum(m * m for m in moves)), sum(moves)))


@pytest.mark.parametrize(("variant", "removed"), [("channels_last_3d", 2 + 30 + 8), ("channels_last_input", 30 + 8),
                                                  ("channels_last_weight", 2 + 8)])
def test_a_layout_change_removes_its_conversions_from_the_reports_times(variant, removed):
    found = predicted(context(conv_card(CONVERSIONS, 100.0)), "vae_channels_last", variant)
    assert isinstance(found, Estimate)
    assert found.baseline_us == pytest.approx(100.0) and found.variant_us == pytest.approx(100.0 - removed)
    point = 100.0 / (100.0 - removed)
    # The interval: down to the library converting the input side anyway (only the output's 8 us removed) and
    # the variant's time 5% longer, in quadrature; up to it 5% shorter.
    prediction = row("c", "vae_channels_last", variant, {}, "planted", found, None)
    library = 100.0 / 92.0
    assert prediction.interval == pytest.approx([quadrature(point, math.log(library / point), -math.log(REPRODUCED)),
                                                 point / (2 - REPRODUCED)])
    assert ("(input) 30 us" in found.basis) == (variant != "channels_last_weight")


def test_a_conversion_the_truncated_list_lost_is_estimated_at_the_cards_own_rate():
    """summed_kernel_us 100 over listed kernels of 32 us: the lost output conversion moves the output's bytes at the
    input conversion's rate (the output is 3*38*38 / (96*3*40*40) of the input: 30 us x that), the rest compute."""
    card = conv_card(CONVERSIONS[:2], 100.0)
    back = 30.0 * (3 * 38 * 38) / (96 * 3 * 40 * 40)
    found = predicted(context(card), "vae_channels_last", "channels_last_3d")
    assert isinstance(found, Estimate)
    assert found.variant_us == pytest.approx(100.0 - 32.0 - back)
    truncated = [o for o in found.outcomes if "truncated" in o.uncertainty]
    assert len(truncated) == 1 and truncated[0].variant_us == pytest.approx(100.0 - 32.0)


def test_tf32_to_bf16_halves_each_term_at_the_same_efficiency_and_latency_keeps_its_share():
    found = predicted(context(conv_card(CONVERSIONS, 100.0)), "vae_bf16", "low_precision", dtype="bfloat16",
                      memory_format="as_given")
    assert isinstance(found, Estimate)
    assert found.speedup == pytest.approx(2.0)  # bf16's peak twice TF32's and half the bytes: every roofline halves
    # The GEMM was busy 80% of its time (sm_pct): only that share halves; the conversions were busy throughout.
    partial = [o for o in found.outcomes if "busy share" in o.uncertainty]
    assert partial[0].variant_us == pytest.approx(40 * 0.5 + 60 * (0.8 * 0.5 + 0.2))


def test_bf16_with_channels_last_removes_the_halved_conversions():
    found = predicted(context(conv_card(CONVERSIONS, 100.0)), "vae_bf16", "low_precision", dtype="bfloat16",
                      memory_format="channels_last_3d")
    assert isinstance(found, Estimate) and found.variant_us == pytest.approx(30.0)  # the GEMM's 60 us, halved


LINEAR = {"M": 3, "N": 4096, "K": 4096}


def linear_card(shape: dict[str, Any], us: float, **metrics: float) -> Card:
    return parse_report({"cards": [{
        "group": "planted", "resolution": "480x832", "stage": "dit", "op": "aten.linear.default",
        "shape_parameters": shape, "summed_kernel_us": us, "kernels": [kernel("nvjet_bf16_gemm", us, **metrics)],
        "dominant_kernel": "nvjet_bf16_gemm", "primary": "dram_bandwidth_bound"}]}).cards[0]


@pytest.mark.parametrize("k", [2, 5, 20])
def test_batching_k_calls_reads_the_weight_once(k):
    """M=3, 4096x4096 bf16: the roofline is its bytes over 1 TB/s (2*3*4096*4096 FLOP take 1 us at 100 TFLOP/s);
    k calls' rows add only x and y. The card's 40 us grow by the ratio of the two rooflines, over k calls."""
    weight, bias, rows = 4096 * 4096 * 2, 4096 * 2, (3 * 4096 + 3 * 4096) * 2
    one, many = (weight + bias + rows) / BANDWIDTH, (weight + bias + k * rows) / BANDWIDTH
    found = predicted(context(linear_card(LINEAR, 40.0, dram_pct=90.0), BF16), "dit_small_m_batching", "batched", k=k)
    assert isinstance(found, Estimate)
    assert found.speedup == pytest.approx(k * one / many)


def test_batching_a_call_whose_weight_is_a_small_share_has_no_number():
    found = predicted(context(linear_card({"M": 4096, "N": 64, "K": 4096}, 20.0), BF16), "dit_small_m_batching",
                      "batched", k=4)
    assert isinstance(found, Unpredictable) and "skipped by the experiment" in found.reason
    gemv = predicted(context(linear_card(LINEAR, 40.0), BF16), "dit_small_m_batching", "gemv", block_size=128)
    assert isinstance(gemv, Unpredictable)
    unpredictable = row("c", "dit_small_m_batching", "gemv", {}, "planted", gemv, None)
    assert unpredictable.speedup is None and unpredictable.interval is None and unpredictable.basis == gemv.reason


def test_on_another_device_each_term_is_its_roofline_at_the_shape_it_runs():
    """A planted CPU (fp32 1 TFLOP/s, 10 GB/s copy): the conv's FLOPs over the peak, each conversion its tensor
    read and written over the bandwidth, the elementwise-free card's sum."""
    cpu = cpu_device({"flops_per_s": {"float32": 1e12}, "mem_bw_bytes_per_s": 1e10, "cpu_model": "planted"})
    card = conv_card(CONVERSIONS, 100.0)
    ctx = context(card, CardDtype("float32", "report", NATIVE, "planted"), cpu, here=False)
    found = predicted(ctx, "vae_channels_last", "channels_last_3d")
    assert isinstance(found, Estimate)
    work = work_of("conv3d", CONV_SHAPE)
    assert work is not None
    compute = max(work.flops / 1e12, work.nbytes(4) / 1e10) * 1e6
    moved = sum(2 * work.nbytes(4, [name]) / 1e10 * 1e6 for name in ("input", "weight", "output"))
    assert found.baseline_us == pytest.approx(compute + moved) and found.variant_us == pytest.approx(compute)


def test_a_prediction_is_saving_and_interval_of_its_estimate():
    found = Estimate(100.0, 80.0, "planted")
    prediction = row("c", "e", "v", {"k": 2}, "planted", found, time_in_model_us=1000.0)
    assert prediction.speedup == pytest.approx(1.25) and prediction.interval == pytest.approx([1.25, 1.25])
    assert prediction.saving_us == pytest.approx(20.0)
    assert prediction.saving_in_model_us == pytest.approx(1000.0 * (1 - 1 / 1.25))


def test_fp32_compute_of_a_bf16_gemm_runs_at_the_fp32_peak():
    """dit_gemm_tiles' dtype_layout: a compute-bound bf16 GEMM (4096^3: 137 GFLOP over 100 TFLOP/s) in IEEE fp32
    (10 TFLOP/s): 10x the time at the same efficiency."""
    card = linear_card({"M": 4096, "N": 4096, "K": 4096}, 1500.0, sm_pct=90.0)
    found = predicted(context(card, CardDtype("bfloat16", "report", NATIVE, "planted")), "dit_gemm_tiles",
                      "dtype_layout", compute_dtype="float32", weight_layout="nk")
    assert isinstance(found, Estimate) and found.speedup == pytest.approx(FP32_PEAK / BF16_PEAK)
    assert "bfloat16 (native) -> float32" in found.basis


def test_on_another_device_the_interval_is_the_prediction_made_again_at_its_peaks_extremes():
    """A planted CPU whose float32 tries spread from 0.5 to 1 TFLOP/s (1 TB/s copy): at the worst try the conv's
    compute takes twice as long, so the conversions it removes are a smaller share of the card; the interval
    reaches down to that (and to the compute at half its peak, the same here)."""
    from harness.predict.uncertainty import predict_one

    cpu = cpu_device({"flops_per_s": {"float32": 1e12}, "mem_bw_bytes_per_s": 1e12, "cpu_model": "planted",
                      "tries": {"float32": [0.5e12, 1e12]}})
    ctx = context(conv_card(CONVERSIONS, 100.0), CardDtype("float32", "report", NATIVE, "planted"), cpu, here=False)
    found = predict_one(PREDICTORS["vae_channels_last"], ctx, "channels_last_3d", {})
    assert isinstance(found, Estimate)
    work = work_of("conv3d", CONV_SHAPE)
    assert work is not None
    compute = max(work.flops / 0.5e12, work.nbytes(4) / 1e12) * 1e6
    moved = sum(2 * work.nbytes(4, [name]) / 1e12 * 1e6 for name in ("input", "weight", "output"))
    slowest = (compute + moved) / compute
    prediction = row("c", "vae_channels_last", "channels_last_3d", {}, "planted", found, None)
    assert prediction.interval is not None and prediction.interval[0] <= slowest < found.speedup
    assert any("peaks" in line for line in prediction.interval_from)


def test_a_new_maths_kernel_may_sit_as_far_from_the_peaks_ratio_as_the_products_at_other_sizes_did():
    """A planted CPU whose bfloat16 peak is 2x its float32 one, while at the product sizes measured bfloat16 ran
    1.5x and 2.5x float32: a compute-bound conv (its conversions negligible against a 1 PB/s copy) in bf16 is
    predicted 2x, its interval reaching 1.5x and 2.5x, which no other uncertainty moves further here."""
    from harness.predict.uncertainty import predict_one

    cpu = cpu_device({"flops_per_s": {"float32": 1e12, "bfloat16": 2e12}, "mem_bw_bytes_per_s": 1e18,
                      "cpu_model": "planted",
                      "by_size": {"float32": {"256": 1e11, "512": 4e11}, "bfloat16": {"256": 1.5e11, "512": 1e12}}})
    assert sorted(cpu.efficiency_factors("fp32_tflops", "bf16_tflops")) == pytest.approx([0.75, 1.25])
    ctx = context(conv_card(CONVERSIONS, 100.0), CardDtype("float32", "report", NATIVE, "planted"), cpu, here=False)
    params = {"dtype": "bfloat16", "memory_format": "as_given"}
    found = predict_one(PREDICTORS["vae_bf16"], ctx, "low_precision", params)
    assert isinstance(found, Estimate) and found.speedup == pytest.approx(2.0, rel=1e-6)
    prediction = row("c", "vae_bf16", "low_precision", {}, "planted", found, None)
    assert prediction.interval is not None
    # the compute at half its roofline on both sides moves nothing here; the size outcome is the widest move
    assert prediction.interval[0] == pytest.approx(1.5, rel=1e-6)
    assert prediction.interval[1] == pytest.approx(2.5, rel=1e-6)
    assert any("1.5x to 2.5x, against the peaks' 2x" in line for line in prediction.interval_from)


def test_a_layouts_kernel_may_run_as_much_faster_or_slower_as_the_devices_reference_convolutions_did():
    """A planted CPU whose reference convolutions ran 0.8x to 1.25x their NCDHW time in channels_last_3d: the
    compute-bound conv's conversions (a 1 PB/s copy) cost nothing, so the point is 1x and the interval the
    compute divided by the slowest and the fastest of those speedups."""
    from harness.predict.uncertainty import predict_one

    cpu = cpu_device({"flops_per_s": {"float32": 1e12}, "mem_bw_bytes_per_s": 1e18, "cpu_model": "planted",
                      "conv_layouts": {"channels_last_3d": [1.0, 0.8, 1.25], "channels_last_input": [1.1]}})
    ctx = context(conv_card(CONVERSIONS, 100.0), CardDtype("float32", "report", NATIVE, "planted"), cpu, here=False)
    found = predict_one(PREDICTORS["vae_channels_last"], ctx, "channels_last_3d", {})
    assert isinstance(found, Estimate) and found.speedup == pytest.approx(1.0, rel=1e-6)
    prediction = row("c", "vae_channels_last", "channels_last_3d", {}, "planted", found, None)
    assert prediction.interval == pytest.approx([0.8, 1.25], rel=1e-6)
    assert any("ran 0.8x to 1.25x their NCDHW time" in line for line in prediction.interval_from)
    weight = predict_one(PREDICTORS["vae_channels_last"], ctx, "channels_last_weight", {})  # not measured: no range
    assert isinstance(weight, Estimate) and not any("reference convolutions" in o.uncertainty for o in weight.outcomes)


def test_batching_on_a_device_with_measured_few_row_products_runs_each_product_at_its_measured_share():
    """A planted CPU (bf16 1 TFLOP/s, 100 GB/s) whose reference products by a 1000x1000 bf16 weight took twice
    their roofline at 3 rows and 1.25x at 60: a 1000x1000 M=3 call's 20.12 us roofline (2.012 MB) is 40.24 us,
    20 calls' batch of 60 rows (2*60*1e6 FLOP: 120 us at the peak) 150 us: 20 x 40.24 / 150 = 5.365x. A weight
    nearer another reference (a 100x100 one, in the cache) reads that one; the other is the interval's."""
    from harness.predict.uncertainty import predict_one

    roofline_3 = (1e6 + 2 * 3 * 1000) * 2 / 1e11
    places = {"dram": {"n": 1000, "seconds": {"3": 2 * roofline_3, "60": 1.25 * 2 * 60 * 1e6 / 1e12}}}
    peaks = {"flops_per_s": {"bfloat16": 1e12}, "mem_bw_bytes_per_s": 1e11, "cpu_model": "planted",
             "few_rows": {"bfloat16": places}}
    card = linear_card({"M": 3, "N": 1000, "K": 1000, "bias": False}, 40.0)
    ctx = context(card, CardDtype("bfloat16", "report", NATIVE, "planted"), cpu_device(peaks), here=False)
    found = predict_one(PREDICTORS["dit_small_m_batching"], ctx, "batched", {"k": 20})
    assert isinstance(found, Estimate) and found.speedup == pytest.approx(20 * 2 * roofline_3 / 150e-6, rel=1e-6)
    assert "ran at 50% and 80% of their rooflines" in found.basis

    # A slowest repeat of the 3-row product 1.25x its best: the interval reaches 1.25x the point, from that alone.
    slow = {"dram": {**places["dram"], "slowest": {"3": 2.5 * roofline_3, "60": 1.25 * 2 * 60 * 1e6 / 1e12}}}
    ctx_slow = context(card, CardDtype("bfloat16", "report", NATIVE, "planted"),
                       cpu_device({**peaks, "few_rows": {"bfloat16": slow}}), here=False)
    repeated = predict_one(PREDICTORS["dit_small_m_batching"], ctx_slow, "batched", {"k": 20})
    assert isinstance(repeated, Estimate)
    interval = row("c", "dit_small_m_batching", "batched", {"k": 20}, "planted", repeated, None).interval
    assert interval == pytest.approx([found.speedup, 1.25 * found.speedup], rel=1e-6)

    cached = {**places, "cache": {"n": 100, "seconds": {"3": 1.0, "60": 1.0}}}  # absurdly slow: only an outcome
    ctx = context(card, CardDtype("bfloat16", "report", NATIVE, "planted"),
                  cpu_device({**peaks, "few_rows": {"bfloat16": cached}}), here=False)
    again = predict_one(PREDICTORS["dit_small_m_batching"], ctx, "batched", {"k": 20})
    assert isinstance(again, Estimate) and again.speedup == pytest.approx(found.speedup, rel=1e-9)
    assert any("the weight in cache" in o.uncertainty for o in again.outcomes)


def test_a_convolutions_compute_runs_at_the_share_its_nearest_reference_convolution_reached():
    """A planted CPU (fp32 1 TFLOP/s, 10 GB/s) whose narrow reference convolution (64 -> 4) took 5x its roofline
    and whose wide one (256 -> 256) ran at its roofline: the 96 -> 3 card's compute is 5x its roofline, so the
    conversions a layout removes are a smaller share of it than the roofline alone says."""
    def roofline_s(cin: int, cout: int, out: tuple[int, int, int]) -> float:
        t, h, w = out
        work = work_of("conv3d", {"input": [1, cin, t + 2, h + 2, w + 2], "weight": [cout, cin, 3, 3, 3],
                                  "output": [1, cout, t, h, w]})
        assert work is not None
        return max(work.flops / 1e12, work.nbytes(4) / 1e10)

    refs = [{"cin": 64, "cout": 4, "output": [4, 128, 64], "seconds": 5 * roofline_s(64, 4, (4, 128, 64))},
            {"cin": 256, "cout": 256, "output": [4, 16, 16], "seconds": roofline_s(256, 256, (4, 16, 16))}]
    cpu = cpu_device({"flops_per_s": {"float32": 1e12}, "mem_bw_bytes_per_s": 1e10, "cpu_model": "planted",
                      "conv_references": refs})
    ctx = context(conv_card(CONVERSIONS, 100.0), CardDtype("float32", "report", NATIVE, "planted"), cpu, here=False)
    found = predicted(ctx, "vae_channels_last", "channels_last_3d")
    assert isinstance(found, Estimate)
    work = work_of("conv3d", CONV_SHAPE)
    assert work is not None
    compute = 5 * max(work.flops / 1e12, work.nbytes(4) / 1e10) * 1e6
    moved = sum(2 * work.nbytes(4, [name]) / 1e10 * 1e6 for name in ("input", "weight", "output"))
    assert found.variant_us == pytest.approx(compute) and found.baseline_us == pytest.approx(compute + moved)
    terms = card_terms(ctx)
    assert terms is not None
    assert any("20% of its roofline the device's reference convolution 64 -> 4" in (t.derived or "")
               for t in terms.terms)


def test_on_the_reports_gpu_its_measured_reference_convolutions_widen_a_layouts_interval():
    """The report's GPU with reference kernels measured on it (harness.profile.library_kernels, cached by the
    worker): where its channels-last references ran no faster than NCDHW (cuDNN converting them itself), the
    interval reaches down to the compute's time unchanged; the point is still the conversions removed."""
    from harness.predict.device import with_reference_kernels

    gpu = with_reference_kernels(PLANTED, {"conv_layouts": {"channels_last_3d": [0.9, 1.0]}})
    found = predicted(context(conv_card(CONVERSIONS, 100.0), device=gpu), "vae_channels_last", "channels_last_3d")
    assert isinstance(found, Estimate) and found.speedup == pytest.approx(100.0 / 60.0)
    kernel = [o for o in found.outcomes if "reference convolutions" in o.uncertainty]
    assert sorted(o.variant_us for o in kernel) == pytest.approx([60.0, 60.0 / 0.9])
