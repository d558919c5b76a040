"""Per-op behaviour: baseline vs reference, layouts, attention forms, errors."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.workloads import (
    AttentionConfig,
    CastConfig,
    WorkloadError,
    allocation_mask,
    build_for_card,
    build_workload,
    masked_allocation_attention,
    plan_workload,
    queries_for_resolution,
    valid_prefix_attention,
)


def _close(w, rtol=1e-4, atol=1e-4):
    out, ref = w.run(), w.reference()
    assert ref.dtype == torch.float64
    torch.testing.assert_close(out.double(), ref, rtol=rtol, atol=atol)


def test_reference_matches_baseline_on_one_real_card_per_kind(report):
    seen = set()
    for card in report.cards:
        if card.op_kind in seen:
            continue
        seen.add(card.op_kind)
        w = build_for_card(card, report, scale=0.02)
        _close(w, atol=0 if card.op_kind == "cast" else 1e-4)
    assert seen == {"linear", "conv3d", "attention", "cast"}


def test_reference_in_float32_and_bad_reference_dtype():
    w = build_workload("conv3d", {"input": [1, 8, 3, 12, 12], "weight": [8, 8, 3, 3, 3]})
    ref32 = w.reference(torch.float32)
    assert ref32.dtype == torch.float32
    torch.testing.assert_close(ref32.double(), w.reference(), rtol=1e-5, atol=1e-5)
    with pytest.raises(WorkloadError, match="float64 or float32"):
        w.reference(torch.bfloat16)


def test_linear_bias_default_and_override():
    w = build_workload("linear", {"M": 8, "N": 16, "K": 32})
    assert w.shape["bias"] is True and "bias" in w.inputs
    w = build_workload("linear", {"M": 8, "N": 16, "K": 32, "bias": False})
    assert "bias" not in w.inputs
    assert w.min_bytes == (8 * 32 + 16 * 32 + 8 * 16) * 4
    _close(w)


def test_conv3d_channels_last_3d_is_applied_and_kept(report):
    card = next(c for c in report.cards if c.op_kind == "conv3d" and c.shape_parameters["weight"][2:] == [3, 3, 3])
    w = build_for_card(card, report, scale=0.05, layout="channels_last_3d")
    assert w.layout == "channels_last_3d"
    for name in ("input", "weight"):
        assert w.inputs[name].is_contiguous(memory_format=torch.channels_last_3d), name
        assert not w.inputs[name].is_contiguous(), name
    out = w.run()  # the output's memory format is the backend's choice (small CPU convs return NCDHW)
    _close(w)
    plain = build_for_card(card, report, scale=0.05)
    assert plain.inputs["input"].is_contiguous()
    torch.testing.assert_close(plain.run(), out, rtol=1e-4, atol=1e-4)


def test_conv3d_output_mismatch_and_bad_shapes_are_errors():
    good = {"input": [1, 4, 3, 10, 10], "weight": [8, 4, 3, 3, 3], "output": [1, 8, 1, 8, 8]}
    build_workload("conv3d", good)
    with pytest.raises(WorkloadError, match=r"computed output \[1, 8, 1, 8, 8\] differs from the card's output"):
        build_workload("conv3d", {**good, "output": [1, 8, 1, 8, 9]})
    with pytest.raises(WorkloadError, match="input has 4 channels"):
        build_workload("conv3d", {**good, "weight": [8, 5, 3, 3, 3], "output": None})
    with pytest.raises(WorkloadError, match="smaller than the kernel"):
        build_workload("conv3d", {"input": [1, 4, 2, 10, 10], "weight": [8, 4, 3, 3, 3]})
    with pytest.raises(WorkloadError, match="list of 5 integers"):
        build_workload("conv3d", {"input": [1, 4, 10, 10], "weight": [8, 4, 3, 3, 3]})
    with pytest.raises(WorkloadError, match="lacks 'weight'"):
        build_workload("conv3d", {"input": [1, 4, 3, 10, 10]})


def test_conv3d_stride_and_padding_scale_consistently():
    params = {"input": [1, 2, 3, 101, 67], "weight": [4, 2, 3, 3, 3], "stride": [1, 2, 2], "padding": [0, 1, 1]}
    w = build_workload("conv3d", params, scale=0.3)
    assert tuple(w.run().shape) == w.output_shape
    assert w.output_shape[3] < 51 and w.output_shape[4] < 34
    _close(w)


def test_attention_forms_agree_and_mask_marks_the_prefix():
    params = {"role": "self", "valid_keys": 40, "allocated_keys": 64, "queries": 24}
    w = build_workload("attention", params, attention=AttentionConfig(heads=2, head_dim=16))
    q, k, v = w.inputs["q"], w.inputs["k"], w.inputs["v"]
    assert tuple(k.shape) == (1, 2, 64, 16)  # the whole allocation is an input
    mask = allocation_mask(64, 40)
    assert mask.shape == (1, 1, 1, 64) and mask.sum() == 40 and mask[..., :40].all()
    prefix = valid_prefix_attention(q, k, v, 40)
    torch.testing.assert_close(masked_allocation_attention(q, k, v, 40), prefix, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(w.run(), prefix)
    assert w.flops == 4 * 2 * 24 * 40 * 16
    assert w.min_bytes == (2 * 24 + 2 * 40) * 2 * 16 * 4
    _close(w)


def test_attention_queries_come_from_resolution_or_config():
    assert queries_for_resolution("480x832") == 4680
    assert queries_for_resolution("704x1280") == 10560
    p = {"role": "cross", "valid_keys": 512, "allocated_keys": 512}
    assert plan_workload("attention", p, resolution="480x832").shape["queries"] == 4680
    assert plan_workload("attention", p, attention=AttentionConfig(queries=100)).shape["queries"] == 100
    assert plan_workload("attention", '{"role": "cross", "valid_keys": 512}', resolution="480x832").flops > 0
    with pytest.raises(WorkloadError, match="cannot tell the number of queries"):
        plan_workload("attention", p)
    with pytest.raises(WorkloadError, match="exceeds allocated_keys"):
        plan_workload("attention", {"role": "self", "valid_keys": 10, "allocated_keys": 5}, resolution="480x832")
    with pytest.raises(WorkloadError, match="role must be"):
        plan_workload("attention", {"role": "both", "valid_keys": 10}, resolution="480x832")


def test_attention_scaling_keeps_the_valid_fraction():
    p = plan_workload("attention", {"role": "self", "valid_keys": 28080, "allocated_keys": 29640},
                      resolution="480x832", scale=0.25)
    s = p.shape
    assert s["queries"] == 1170 and s["allocated_keys"] == 7410
    assert s["valid_keys"] / s["allocated_keys"] == pytest.approx(28080 / 29640, abs=1e-3)


def test_cast_defaults_and_config():
    w = build_workload("cast", {}, resolution="32x48", cast=CastConfig(frames=9))
    assert w.shape["shape"] == [1, 3, 9, 32, 48]
    assert w.dtype == torch.float32 and w.run().dtype == torch.uint8
    assert 0 <= w.inputs["frames"].min() and w.inputs["frames"].max() < 255
    assert w.min_bytes == 3 * 9 * 32 * 48 * (4 + 1)
    assert w.flops == 0
    _close(w, atol=0)
    w = build_workload("cast", {"shape": [2, 5]}, dtype="bfloat16", cast=CastConfig(dst_dtype="float32"))
    assert w.run().dtype == torch.float32 and w.shape["src_dtype"] == "bfloat16"
    _close(w, atol=0)
    w = build_workload("cast", {}, resolution="32x48", layout="channels_last_3d")
    assert w.inputs["frames"].is_contiguous(memory_format=torch.channels_last_3d)
    with pytest.raises(WorkloadError, match="frame size is unknown"):
        build_workload("cast", {})


def test_bfloat16_workloads_run():
    w = build_workload("conv3d", {"input": [1, 8, 3, 12, 12], "weight": [8, 8, 3, 3, 3]}, dtype="bf16")
    assert w.dtype == torch.bfloat16 and w.run().dtype == torch.bfloat16
    assert w.describe()["dtype"] == "bfloat16"
    _close(w, rtol=5e-2, atol=5e-2)
    assert w.min_bytes == (8 * 3 * 12 * 12 + 8 * 8 * 27 + 8 + 8 * 1 * 10 * 10) * 2


@pytest.mark.parametrize("call,message", [
    (lambda: build_workload("matmul", {}), "unknown op kind 'matmul'"),
    (lambda: build_workload("linear", {"M": 4, "N": 4}), "lacks 'K'"),
    (lambda: build_workload("linear", {"M": 4, "N": 0, "K": 4}), "N must be >= 1"),
    (lambda: build_workload("linear", {"M": 4.5, "N": 4, "K": 4}), "M must be an integer"),
    (lambda: build_workload("linear", "[1, 2]"), "shape_parameters must be an object"),
    (lambda: build_workload("linear", "{nope"), "not JSON"),
    (lambda: build_workload("linear", {"M": 4, "N": 4, "K": 4}, scale=0), r"scale must be in \(0, 1\]"),
    (lambda: build_workload("linear", {"M": 4, "N": 4, "K": 4}, scale=1.5), r"scale must be in \(0, 1\]"),
    (lambda: build_workload("linear", {"M": 4, "N": 4, "K": 4}, dtype="float128"), "unknown dtype"),
    (lambda: build_workload("linear", {"M": 4, "N": 4, "K": 4}, layout="nhwc"), "unknown layout"),
    (lambda: build_workload("linear", {"M": 4, "N": 4, "K": 4}, layout="channels_last_3d"), "conv3d and cast only"),
    (lambda: build_workload("linear", {"M": 4, "N": 4, "K": 4}, seed=-1), "seed must be"),
])
def test_errors_are_one_line_workload_errors(call, message):
    with pytest.raises(WorkloadError, match=message) as info:
        call()
    assert "\n" not in str(info.value)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA message")
def test_cuda_device_without_cuda_is_a_workload_error():
    with pytest.raises(WorkloadError, match="not available"):
        build_workload("linear", {"M": 4, "N": 4, "K": 4}, device="cuda")


def test_describe_and_facts():
    w = build_workload("linear", {"M": 4680, "N": 64, "K": 5120}, scale=0.1)
    d = w.describe()
    assert d["shape"] == {"M": 468, "N": 64, "K": 5120, "bias": True}
    assert d["original_shape"]["M"] == 4680 and d["scale"] == 0.1
    assert d["flops"] == 2 * 468 * 64 * 5120
    assert d["input_source"] == "synthetic(seed=0)" and d["seed"] == 0
    facts = w.facts()
    assert (facts.flops, facts.min_bytes, facts.dtype, facts.op_kind) == (w.flops, w.min_bytes, "float32", "linear")


@settings(max_examples=25, deadline=None)
@given(
    k=st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(1, 3)),
    stride=st.tuples(st.integers(1, 2), st.integers(1, 2), st.integers(1, 2)),
    padding=st.tuples(st.integers(0, 1), st.integers(0, 1), st.integers(0, 1)),
    extra=st.tuples(st.integers(0, 3), st.integers(0, 40), st.integers(0, 40)),
    scale=st.floats(0.01, 1.0),
)
def test_conv3d_scaled_shapes_always_run(k, stride, padding, extra, scale):
    size = [k[i] + extra[i] for i in range(3)]
    params = {"input": [1, 2, *size], "weight": [3, 2, *k], "stride": list(stride), "padding": list(padding)}
    plan = plan_workload("conv3d", params, scale=scale)
    assert all(o >= 1 for o in plan.output_shape)
    assert plan.shape["input"][3] <= size[1] and plan.shape["input"][4] <= size[2]
    w = build_workload("conv3d", params, scale=scale)
    assert tuple(w.run().shape) == plan.output_shape
