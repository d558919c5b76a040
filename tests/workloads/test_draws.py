"""Activations, other draws and the k calls the harness builds (harness.workloads.draws, frames).

Every reference is checked against the op computed here another way in float64 (a linear as a sum of
products, a conv3d as a sum over its kernel's taps, attention from its softmax formula), on the draw's
or call's own inputs.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from safetensors.torch import save_file

from harness.workloads import (
    AttentionConfig,
    BatchError,
    Bound,
    WorkloadError,
    batch_for,
    build_workload,
    rebind,
    tensor_sha256,
)

LINEAR = {"M": 6, "N": 40, "K": 96}
CAUSAL = {"input": [1, 4, 6, 7, 6], "weight": [5, 4, 3, 3, 3]}  # T=6: 4 new frames after 2 cached
ONE_NEW = {"input": [1, 4, 3, 6, 5], "weight": [5, 4, 3, 3, 3]}  # one new frame per call
POINTWISE = {"input": [2, 4, 2, 5, 5], "weight": [5, 4, 1, 1, 1]}  # kT=1: no cached frames, a batch of 2
DILATED = {"input": [1, 4, 7, 6, 5], "weight": [5, 4, 3, 3, 3], "dilation": [2, 1, 1]}  # 4 cached frames
SELF = {"role": "self", "valid_keys": 48, "allocated_keys": 64, "queries": 16}
CROSS = {"role": "cross", "valid_keys": 24, "allocated_keys": 24, "queries": 16}
SMALL_HEADS = AttentionConfig(heads=2, head_dim=8)


def _linear(**options):
    return build_workload("linear", LINEAR, seed=3, **options)


def _conv(shape, **options):
    return build_workload("conv3d", shape, seed=3, **options)


def _linear_by_sums(x, weight, bias):
    """x W^T + b, each output a sum of products in float64."""
    return (x.double()[:, None, :] * weight.double()[None, :, :]).sum(-1) + bias.double()


def _conv_by_taps(x, weight, bias, dilation=(1, 1, 1)):
    """conv3d (stride 1, no padding) in float64 as a sum over the kernel's taps of channel contractions."""
    x, weight = x.double(), weight.double()
    _, _, kt, kh, kw = weight.shape
    dt, dh, dw = dilation
    to, ho, wo = (x.shape[2 + i] - d * (k - 1) for i, (k, d) in enumerate(((kt, dt), (kh, dh), (kw, dw))))
    out = bias.double().view(1, -1, 1, 1, 1).expand(x.shape[0], -1, to, ho, wo).clone()
    for a in range(kt):
        for b in range(kh):
            for c in range(kw):
                window = x[:, :, a * dt:a * dt + to, b * dh:b * dh + ho, c * dw:c * dw + wo]
                out += torch.einsum("nitxy,oi->notxy", window, weight[:, :, a, b, c])
    return out


def _attention_by_formula(q, k, v, valid):
    q, k, v = q.double(), k[:, :, :valid].double(), v[:, :, :valid].double()
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    return torch.softmax(scores, dim=-1) @ v


# ---------------------------------------------------------------------------------------------
# Activations and constants


def test_every_op_kind_names_its_activations():
    attention = {role: build_workload("attention", shape, attention=SMALL_HEADS)
                 for role, shape in (("self", SELF), ("cross", CROSS))}
    cast = build_workload("cast", {"shape": [1, 3, 2, 8, 8]})
    named = {"linear": _linear(), "conv3d": _conv(CAUSAL), "self": attention["self"], "cross": attention["cross"],
             "cast": cast}
    want = {"linear": ("x",), "conv3d": ("input",), "self": ("q", "k", "v"), "cross": ("q",), "cast": ("frames",)}
    assert {kind: w.activations for kind, w in named.items()} == want
    for w in named.values():
        assert set(w.activations) <= set(w.inputs)
        assert w.describe()["activations"] == list(w.activations)
    assert set(named["linear"].inputs) - set(named["linear"].activations) == {"weight", "bias"}
    assert set(named["cross"].inputs) - {"q"} == {"k", "v"}  # the text context's keys: the same every call


# ---------------------------------------------------------------------------------------------
# Redraws


def test_a_redraw_keeps_the_constants_and_draws_the_activation_anew():
    w = _linear()
    one = w.redraw(1)
    assert one.draw == 1 and w.redraw(0) is w and w.redraw(1) is one  # a draw is made once
    for name in ("weight", "bias"):
        assert one.inputs[name] is w.inputs[name] and one.inputs[name].data_ptr() == w.inputs[name].data_ptr()
    x, x1 = w.inputs["x"], one.inputs["x"]
    assert (x1.shape, x1.dtype, x1.device, x1.stride()) == (x.shape, x.dtype, x.device, x.stride())
    assert not torch.equal(x1, x)
    assert abs(float(x1.std()) - 1.0) < 0.2  # the std-1 rows of the synthetic x: the same scale
    assert not torch.equal(w.redraw(2).inputs["x"], x1)
    assert torch.equal(_linear().redraw(1).inputs["x"], x1)  # seeded
    want = _linear_by_sums(x1, w.inputs["weight"], w.inputs["bias"])
    torch.testing.assert_close(one.reference(), want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(one.run().double(), want, rtol=1e-5, atol=1e-5)
    assert torch.equal(w.reference(), _linear().reference())  # draw 0 is untouched
    assert "draw 1: x drawn anew" in one.notes[-1] and one.describe()["draw"] == 1


def test_a_redraw_keeps_dtype_and_memory_format():
    w = _conv(CAUSAL, dtype="bfloat16", layout="channels_last_3d")
    one = w.redraw(1)
    x1 = one.inputs["input"]
    assert x1.dtype == torch.bfloat16 and one.inputs["weight"] is w.inputs["weight"]
    assert x1.is_contiguous(memory_format=torch.channels_last_3d) and not x1.is_contiguous()
    assert x1.stride() == w.inputs["input"].stride()
    want = _conv_by_taps(x1, w.inputs["weight"], w.inputs["bias"])
    torch.testing.assert_close(one.reference(), want, rtol=1e-12, atol=1e-12)


def test_attention_redraws_the_chunks_own_keys_and_keeps_the_caches_fixed_part():
    w = build_workload("attention", SELF, attention=SMALL_HEADS)
    one = w.redraw(1)
    assert not torch.equal(one.inputs["q"], w.inputs["q"])
    own = slice(48 - 16, 48)  # the chunk's 16 keys are the last 16 of the 48 valid ones
    for name in ("k", "v"):
        before, after = w.inputs[name], one.inputs[name]
        assert torch.equal(after[:, :, :own.start], before[:, :, :own.start])  # the cache before them
        assert torch.equal(after[:, :, own.stop:], before[:, :, own.stop:])  # the unfilled slots
        assert not torch.equal(after[:, :, own], before[:, :, own])
    want = _attention_by_formula(one.inputs["q"], one.inputs["k"], one.inputs["v"], 48)
    torch.testing.assert_close(one.reference(), want, rtol=1e-12, atol=1e-12)
    cross = build_workload("attention", CROSS, attention=SMALL_HEADS)
    drawn = cross.redraw(1)
    assert drawn.inputs["k"] is cross.inputs["k"] and drawn.inputs["v"] is cross.inputs["v"]
    assert not torch.equal(drawn.inputs["q"], cross.inputs["q"])


def test_a_cast_redraw_keeps_the_frames_range_and_stays_exact():
    w = build_workload("cast", {"shape": [1, 3, 2, 8, 8]})
    frames = w.redraw(1).inputs["frames"]
    assert 0.0 <= float(frames.min()) and float(frames.max()) < 255.0  # uniform in [0, 255), as draw 0
    assert not torch.equal(frames, w.inputs["frames"])
    assert torch.equal(w.redraw(1).run(), frames.double().trunc().to(torch.uint8))
    assert torch.equal(w.redraw(1).reference(), frames.double().trunc())


def test_a_captured_activation_is_redrawn_at_its_spread_and_says_so(tmp_path):
    g = torch.Generator().manual_seed(11)
    x = torch.randn(LINEAR["M"] * 100, LINEAR["K"], generator=g) * 2.0 + 3.0
    digest = tensor_sha256(x)
    save_file({"x": x}, str(tmp_path / f"{digest}.safetensors"))
    w = build_workload("linear", {**LINEAR, "M": x.shape[0]}, inputs_dir=tmp_path, input_sha256=digest)
    assert torch.equal(w.inputs["x"], x)
    assert any("seeded at its measured spread: a captured file holds one call" in note for note in w.notes)
    x1 = w.redraw(1).inputs["x"]
    assert abs(float(x1.mean()) - float(x.mean())) < 0.05 and abs(float(x1.std()) - float(x.std())) < 0.05
    assert w.redraw(1).input_hash is None and "draw 1: x seeded" in w.redraw(1).input_source


def test_redraws_refuse_bad_numbers_and_redraws_of_redraws():
    w = _linear()
    with pytest.raises(WorkloadError, match="draw must be a non-negative integer"):
        w.redraw(-1)
    assert w.redraw(1).redraw(1) is w.redraw(1)
    with pytest.raises(WorkloadError, match="this workload is draw 1: take draw 2 from the workload"):
        w.redraw(1).redraw(2)


# ---------------------------------------------------------------------------------------------
# k calls


def test_a_linears_calls_are_its_draws_sharing_the_weight():
    w = _linear()
    batch = w.calls(4)
    assert batch.k == 4 and w.calls(4) is batch and w.batches[4] is batch
    assert batch.inputs[0] is w.inputs  # call 0 is exactly the workload's own
    for j, call in enumerate(batch.inputs[1:], start=1):
        assert torch.equal(call["x"], w.redraw(j).inputs["x"])  # the draws 0..k-1
        assert call["weight"] is w.inputs["weight"] and call["bias"] is w.inputs["bias"]
    assert torch.equal(batch.stacked["x"], torch.cat([call["x"] for call in batch.inputs]))
    want = torch.cat([_linear_by_sums(call["x"], w.inputs["weight"], w.inputs["bias"]) for call in batch.inputs])
    torch.testing.assert_close(batch.reference(), want, rtol=1e-12, atol=1e-12)
    assert batch.reference(torch.float32).dtype == torch.float32


@pytest.mark.parametrize("shape,t_new,overlap", [(CAUSAL, 4, 2), (ONE_NEW, 1, 2), (POINTWISE, 2, 0),
                                                 (DILATED, 3, 4)])
def test_a_convs_calls_are_overlapping_windows_of_one_frame_sequence(shape, t_new, overlap):
    w = _conv(shape, layout="channels_last_3d")
    k, t_in = 3, shape["input"][2]
    batch = w.calls(k)
    frames = batch.stacked["input"]
    assert (batch.windows.t_new, batch.windows.overlap) == (t_new, overlap)
    assert frames.shape[2] == k * t_new + overlap and frames.is_contiguous(memory_format=torch.channels_last_3d)
    assert batch.inputs[0] is w.inputs and torch.equal(frames[:, :, :t_in], w.inputs["input"])
    dilation = tuple(shape.get("dilation", (1, 1, 1)))
    for j, call in enumerate(batch.inputs):
        window = call["input"]
        assert torch.equal(window, frames[:, :, j * t_new:j * t_new + t_in])
        assert window.is_contiguous(memory_format=torch.channels_last_3d)
        if j and overlap:  # a call's cached frames are the call before's last frames
            assert torch.equal(window[:, :, :overlap], batch.inputs[j - 1]["input"][:, :, t_in - overlap:])
    want = torch.cat([_conv_by_taps(call["input"], w.inputs["weight"], w.inputs["bias"], dilation)
                      for call in batch.inputs])
    torch.testing.assert_close(batch.reference(), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("params,match", [({"stride": [2, 1, 1]}, "temporal stride 2"),
                                          ({"padding": [1, 0, 0]}, "temporal padding 1")])
def test_a_conv_whose_windows_are_not_one_call_does_not_batch(params, match):
    with pytest.raises(WorkloadError, match=match):
        _conv({**CAUSAL, **params}).calls(2)


def test_calls_of_a_redraw_are_that_draws_own():
    w = _linear()
    one = w.redraw(1)
    batch = one.calls(3)
    assert batch.inputs[0] is one.inputs
    # One float64 GEMM over the stacked rows: the same sums, maybe in another order (float64 rounding only).
    torch.testing.assert_close(batch.reference()[:6], one.reference(), rtol=1e-12, atol=1e-12)
    seen = [w.redraw(d).inputs["x"] for d in range(4)] + [call["x"] for call in w.calls(3).inputs]
    for call in batch.inputs[1:]:
        assert not any(torch.equal(call["x"], x) for x in seen)  # seeded apart from every other draw
    conv = _conv(CAUSAL)
    later = conv.redraw(1).calls(2).stacked["input"][:, :, 6:]
    assert torch.equal(conv.redraw(1).calls(2).stacked["input"][:, :, :6], conv.redraw(1).inputs["input"])
    assert not torch.equal(later, conv.calls(2).stacked["input"][:, :, 6:])


def test_other_op_kinds_do_not_batch_and_bad_counts_are_refused():
    for w in (build_workload("attention", SELF, attention=SMALL_HEADS),
              build_workload("cast", {"shape": [1, 3, 2, 8, 8]})):
        with pytest.raises(WorkloadError, match=f"{w.op_kind}: batching calls does not apply"):
            w.calls(2)
    with pytest.raises(WorkloadError, match="calls must be at least 1"):
        _linear().calls(0)


def test_batch_for_finds_the_batch_the_variant_built_and_only_that():
    w = _linear()
    with pytest.raises(BatchError) as raised:
        batch_for(w, 4)
    assert str(raised.value) == ("Prepared.calls=4 but the variant built no 4 calls with w.calls(4): the harness "
                                 "builds a batch's other calls so that it can check them")
    batch = w.calls(4)
    assert batch_for(w, 4) is batch
    with pytest.raises(BatchError, match="Prepared.calls=2"):
        batch_for(w, 2)
    carried = dataclasses.replace(w)  # as harness.trial.rounds.carry makes one: its own batches
    assert carried.batches == {}
    with pytest.raises(BatchError):
        batch_for(carried, 4)


# ---------------------------------------------------------------------------------------------
# A workload hook that replaces the op


def test_a_replaced_op_is_redrawn_only_through_rebind():
    w = _linear()
    weight, bias = w.inputs["weight"], w.inputs["bias"]
    hooked = dataclasses.replace(w, _reference=lambda wide: torch.relu(w.reference(wide)))
    with pytest.raises(WorkloadError, match="rebind"):
        hooked.redraw(1)

    def bind(activations):
        rows = activations["rows"]
        return Bound(lambda: torch.relu(torch.nn.functional.linear(rows, weight, bias)),
                     lambda wide: torch.relu(torch.nn.functional.linear(rows.to(wide), weight.to(wide),
                                                                        bias.to(wide))))

    extended = rebind(w, inputs={"rows": w.inputs["x"], "weight": weight, "bias": bias}, activations=("rows",),
                      bind=bind)
    assert extended.activations == ("rows",) and torch.equal(extended.run(), torch.relu(w.run()))
    one = extended.redraw(1)
    assert one.inputs["weight"] is weight and not torch.equal(one.inputs["rows"], w.inputs["x"])
    want = torch.relu(_linear_by_sums(one.inputs["rows"], weight, bias))
    torch.testing.assert_close(one.reference(), want, rtol=1e-12, atol=1e-12)
    with pytest.raises(WorkloadError, match="batching calls does not apply"):
        extended.calls(2)
    with pytest.raises(WorkloadError, match="activations nope are not among the inputs"):
        rebind(w, inputs=dict(w.inputs), activations=("nope",), bind=bind)
