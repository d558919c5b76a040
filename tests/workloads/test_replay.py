"""replay: a captured call (harness.workloads.call_codec's form) run again on seeded or captured tensors, its
float64 reference, its arithmetic, and every call it must refuse with one line."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import save_file

from harness.cards.model import Card
from harness.workloads import WorkloadError, build_for_card, build_workload, file_sha256, plan_workload

GROUP_NORM = {
    "callable": "torch.nn.functional.group_norm",
    "args": [{"tensor": "arg0"}, 4],
    "kwargs": {"weight": {"tensor": "weight"}, "bias": {"tensor": "bias"}, "eps": 1e-6},
    "tensors": {"arg0": {"shape": [2, 16, 5, 6], "dtype": "float32", "layout": "channels_last"},
                "weight": {"shape": [16], "dtype": "float32", "layout": "contiguous"},
                "bias": {"shape": [16], "dtype": "float32", "layout": "contiguous"}},
    "activations": ["arg0"],
}
ADD = {
    "callable": "torch.Tensor.__add__",
    "args": [{"tensor": "a"}, {"tensor": "b"}],
    "tensors": {"a": {"shape": [3, 5, 8], "dtype": "float32", "layout": "contiguous"},
                "b": {"shape": [8], "dtype": "float32", "layout": "contiguous"}},
}


def _rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.double() - ref).abs().max() / ref.abs().max()).item()


def _group_norm(inputs: dict[str, torch.Tensor], dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return F.group_norm(inputs["arg0"].to(dtype), 4, inputs["weight"].to(dtype), inputs["bias"].to(dtype), 1e-6)


def test_group_norm_from_synthetic_tensors():
    w = build_workload("replay", GROUP_NORM, scale=0.25)
    assert w.activations == ("arg0",) and w.scale == 1.0 and w.shape["tensors"]["arg0"]["shape"] == [2, 16, 5, 6]
    assert w.inputs["arg0"].is_contiguous(memory_format=torch.channels_last)  # its recorded layout
    out = w.run()
    assert torch.equal(out, _group_norm(w.inputs)) and tuple(out.shape) == w.output_shape == (2, 16, 5, 6)
    reference = w.reference()
    assert reference.dtype == torch.float64
    torch.testing.assert_close(reference, _group_norm(w.inputs, torch.float64), rtol=1e-12, atol=1e-12)
    assert _rel(out, reference) < 1e-5  # float32 rounding
    assert w.flops == 0.0 and w.min_bytes == (2 * 16 * 5 * 6 * 2 + 16 * 2) * 4  # inputs + output (meta run)
    assert any("replayed at scale 1" in n for n in w.notes) and any("FLOPs unknown" in n for n in w.notes)
    again = w.redraw(1)  # the activation drawn anew, weight and bias the same tensors
    assert not torch.equal(again.inputs["arg0"], w.inputs["arg0"]) and again.inputs["weight"] is w.inputs["weight"]
    assert _rel(again.run(), again.reference()) < 1e-5
    with pytest.raises(WorkloadError, match="batching calls does not apply"):
        w.calls(2)


def test_tensor_add_with_broadcast():
    w = build_workload("replay", ADD)
    assert w.activations == ("a", "b")  # default: every tensor varies per call
    assert torch.equal(w.run(), w.inputs["a"] + w.inputs["b"])
    assert torch.equal(w.reference(), w.inputs["a"].double() + w.inputs["b"].double())


def _captured(tmp_path, tensors: dict[str, torch.Tensor]) -> str:
    """A captured file as harness.workloads.inputs reads it: named by its sha256, tensors by the card's names."""
    scratch = tmp_path / "scratch.safetensors"
    save_file(tensors, str(scratch))
    digest = file_sha256(scratch)
    scratch.rename(tmp_path / f"{digest}.safetensors")
    return digest


def test_group_norm_and_add_from_captured_tensors(tmp_path):
    g = torch.Generator().manual_seed(3)
    norm = {"arg0": torch.randn(2, 16, 5, 6, generator=g) * 3 + 1, "weight": torch.rand(16, generator=g),
            "bias": torch.randn(16, generator=g)}
    digest = _captured(tmp_path, norm)
    w = build_workload("replay", GROUP_NORM, inputs_dir=str(tmp_path), input_sha256=digest)
    assert w.input_source.startswith("captured:") and w.input_hash["tensors"] == ["arg0", "weight", "bias"]
    assert all(torch.equal(w.inputs[name], tensor) for name, tensor in norm.items())
    assert w.inputs["arg0"].is_contiguous(memory_format=torch.channels_last)  # the recorded layout, as captured
    torch.testing.assert_close(w.run(), _group_norm(norm))  # the same op on NCHW: another summation order
    assert _rel(w.run(), w.reference()) < 1e-5
    assert abs(w.redraw(1).inputs["arg0"].mean().item() - 1) < 0.5  # other draws at the captured spread

    adds = tmp_path / "add"
    adds.mkdir()
    pair = {"a": torch.randn(3, 5, 8, generator=g), "b": torch.randn(8, generator=g)}
    w = build_workload("replay", ADD, inputs_dir=str(adds), input_sha256=_captured(adds, pair))
    assert torch.equal(w.run(), pair["a"] + pair["b"])


def test_reference_widens_floating_dtype_arguments_but_not_a_casts():
    softmax = {"callable": "torch.nn.functional.softmax", "args": [{"tensor": "x"}, -1],
               "kwargs": {"dtype": {"dtype": "float32"}},
               "tensors": {"x": {"shape": [4, 33], "dtype": "float32", "layout": "contiguous"}}}
    w = build_workload("replay", softmax)
    torch.testing.assert_close(w.reference(), torch.softmax(w.inputs["x"].double(), -1), rtol=0, atol=1e-15)
    assert 0 < _rel(w.run(), w.reference()) < 1e-6  # the float32 run's own rounding shows: nothing undid the float64
    cast = {"callable": "torch.Tensor.to", "args": [{"tensor": "x"}, {"dtype": "bfloat16"}],
            "tensors": {"x": {"shape": [4, 33], "dtype": "float32", "layout": "contiguous"}}}
    w = build_workload("replay", cast)
    assert w.run().dtype == torch.bfloat16 and w.reference().dtype == torch.float64
    assert torch.equal(w.reference(), w.run().double())  # the cast is the op: its dtype argument stays


def test_an_op_without_a_float64_kernel_is_its_own_reference(tmp_path):
    # fake_quantize_per_channel_affine takes a float32 scale only; its zero points are integers (captured).
    call = {"callable": "torch.fake_quantize_per_channel_affine",
            "args": [{"tensor": "x"}, {"tensor": "scale"}, {"tensor": "zero_point"}, 0, 0, 255],
            "tensors": {"x": {"shape": [4, 8], "dtype": "float32"}, "scale": {"shape": [4], "dtype": "float32"},
                        "zero_point": {"shape": [4], "dtype": "int32"}}}
    with pytest.raises(WorkloadError, match="tensor 'zero_point' is int32 .*inputs.dir=") as info:
        build_workload("replay", call)
    assert "\n" not in str(info.value)
    digest = _captured(tmp_path, {"x": torch.randn(4, 8), "scale": torch.full((4,), 0.05),
                                  "zero_point": torch.tensor([0, 3, 100, 255], dtype=torch.int32)})
    w = build_workload("replay", call, inputs_dir=str(tmp_path), input_sha256=digest)
    assert w.activations == ("x", "scale")  # the integer zero points are held constant across draws
    assert any("no float64 kernel" in n for n in w.notes) and any("held constant" in n for n in w.notes)
    assert torch.equal(w.reference(), w.run().double())


def test_tuple_output_and_an_output_the_meta_device_cannot_size():
    sort = {"callable": "torch.sort", "args": [{"tensor": "x"}], "kwargs": {"dim": 1},
            "tensors": {"x": {"shape": [3, 10], "dtype": "float32"}}}
    w = build_workload("replay", sort)
    assert torch.equal(w.run(), torch.sort(w.inputs["x"], dim=1).values)
    assert any("only output 0 of 2" in n for n in w.notes)
    nonzero = {"callable": "torch.nonzero", "args": [{"tensor": "x"}],
               "tensors": {"x": {"shape": [3, 10], "dtype": "float32"}}}
    w = build_workload("replay", nonzero)
    assert w.min_bytes == 3 * 10 * 4 and any("inputs only" in n for n in w.notes)
    assert tuple(w.run().shape) == w.output_shape == (30, 2)  # known from the build's own call


@pytest.mark.parametrize("call, message", [
    ({"callable": "os.system", "args": ["true"]}, "'os.system' is not an operator of the torch package"),
    ({"callable": "torch.save", "args": []}, "'torch.save' is not an operator of the torch package"),
    ({**ADD, "callable": "torch.Tensor.add_", "writes": "c"}, "writes names 'c', not a tensor the call uses"),
    ({**ADD, "callable": "torch.Tensor.add_", "args": [3.0, {"tensor": "a"}]}, "names no tensor to write into"),
    ({**ADD, "callable": "torch.Tensor.view", "args": [{"tensor": "a"}, [120]]}, "aliases its input a"),
    ({**ADD, "args": [{"tensor": "a"}, {"tensor": "c"}]}, "tensor\\(s\\) c that `tensors` does not describe"),
    ({**ADD, "activations": ["z"]}, "activations must list"),
    ({**ADD, "tensors": {**ADD["tensors"], "b": {"shape": [8], "dtype": "float32", "layout": "channels_last"}}},
     "needs 4-D"),
    ({"callable": "torch.embedding", "args": [{"tensor": "table"}, {"tensor": "ids"}],
      "tensors": {"table": {"shape": [10, 4], "dtype": "float32"}, "ids": {"shape": [5], "dtype": "int64"}}},
     "tensor 'ids' is int64 \\(indices or a mask\\).*give the captured inputs \\(inputs.dir=\\)"),
])
def test_refused_calls_are_one_line_errors(call, message):
    with pytest.raises(WorkloadError, match=message) as info:
        build_workload("replay", call)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("call, expected", [
    ({**ADD, "callable": "torch.Tensor.add_"}, lambda a, b: a + b),
    ({**ADD, "callable": "torch.Tensor.__iadd__"}, lambda a, b: a + b),
    ({**ADD, "callable": "torch.add", "kwargs": {"out": {"tensor": "a"}}}, lambda a, b: a + b),
    ({**ADD, "callable": "torch.nn.functional.relu", "args": [{"tensor": "a"}], "kwargs": {"inplace": True}},
     lambda a, b: torch.relu(a)),
    ({**ADD, "callable": "torch.nn.functional.relu", "args": [{"tensor": "a"}, True]}, lambda a, b: torch.relu(a)),
])
def test_an_in_place_call_writes_into_its_own_copy_restored_before_each_call(call, expected):
    """Every in-place form (trailing underscore, in-place operator, out=, inplace=True) replays into a copy of the
    tensor it writes (`a`): its output is what the call makes of the inputs, the inputs stay as built, and the
    copy restored before a call (Workload.before_call) makes a repeated `+=` write the same values again."""
    w = build_workload("replay", call)
    built = {name: t.clone() for name, t in w.inputs.items()}
    a, b = built["a"], built.get("b", torch.zeros(8))  # relu takes `a` alone
    assert w.before_call is not None
    first = w.run().clone()
    torch.testing.assert_close(first, expected(a, b))
    assert all(torch.equal(w.inputs[name], t) for name, t in built.items())  # the write went into the copy
    torch.testing.assert_close(w.reference(), expected(a.double(), b.double()))
    w.before_call()
    assert torch.equal(w.run(), first)


def test_a_replay_card_says_so_and_builds():
    card = Card(group="vae:aten.group_norm.default:x", resolution="480x832", stage="vae",
                op="aten.group_norm.default", shape_parameters=GROUP_NORM, kernels=[], extra={"op_kind": "replay"})
    assert card.op_kind == "replay" and "group_norm-2x16x5x6" in card.id
    plan = plan_workload("replay", GROUP_NORM, dtype="bfloat16")
    assert plan.dtype == torch.float32 and any("dtype bfloat16 not applied" in n for n in plan.notes)
    w = build_for_card(card, scale=0.5)
    assert w.scale == 1.0 and tuple(w.run().shape) == (2, 16, 5, 6)


def test_a_strided_slice_is_replayed_on_its_recorded_strides():
    """The Wan VAE's `.contiguous()` of one frame of its causal cache: a copy in the model, so not a no-op in the
    replay (on a contiguous replay it returns its input, which the replay refuses as an alias)."""
    from harness.workloads.call_codec import describe_tensor

    cache = torch.randn(1, 16, 2, 8, 8)[:, :, :1]
    spec = describe_tensor(cache)
    assert spec["layout"] == "strided" and spec["strides"] == list(cache.stride()) == [2048, 128, 64, 8, 1]
    w = build_workload("replay", {"callable": "torch.Tensor.contiguous", "args": [{"tensor": "arg0"}],
                                  "tensors": {"arg0": spec}})
    assert w.inputs["arg0"].stride() == cache.stride() and not w.inputs["arg0"].is_contiguous()
    out = w.run()
    assert out.is_contiguous() and out.data_ptr() != w.inputs["arg0"].data_ptr()
    assert not any("replayed contiguous" in n for n in w.notes)
