"""conv2d: the plan's arithmetic against formulas written here, the op against F.conv2d and its float64
reference, the channels_last layout (and the layout rule per op kind), k calls on the batch dim, a card."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from harness.cards.model import Card
from harness.workloads import WorkloadError, build_for_card, build_workload, plan_workload

# Every knob off its default: groups, a stride, padding and dilation that differ per axis.
SHAPE = {"input": [2, 6, 17, 15], "weight": [8, 3, 3, 2], "groups": 2, "stride": [2, 1], "padding": [1, 0],
         "dilation": [1, 2]}


def _out(size: int, kernel: int, stride: int, padding: int, dilation: int) -> int:
    return (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


def test_plan_matches_the_hand_formula():
    plan = plan_workload("conv2d", SHAPE)
    ho, wo = _out(17, 3, 2, 1, 1), _out(15, 2, 1, 0, 2)
    assert (ho, wo) == (9, 13)
    assert plan.output_shape == (2, 8, ho, wo)
    k = (6 // 2) * 3 * 2  # Cin/groups * kH * kW
    assert plan.reduction_length == k
    assert plan.flops == 2 * 8 * k * 2 * ho * wo
    elements = 2 * 6 * 17 * 15 + 8 * 3 * 3 * 2 + 8 + 2 * 8 * ho * wo  # input, weight, bias, output
    assert plan.min_bytes == elements * 4
    assert plan.original_shape["bias"] is True and any("bias assumed" in n for n in plan.notes)


def test_scaling_shrinks_the_output_and_derives_the_input():
    shape = {"input": [1, 4, 66, 40], "weight": [4, 4, 3, 3], "padding": 1, "stride": 2}
    plan = plan_workload("conv2d", shape, scale=0.5)
    # Ho = 33 -> 16 (round(16.5) = 16), Wo = 20 -> 10; each input extent is the smallest giving that output.
    assert plan.output_shape == (1, 4, 16, 10)
    assert plan.shape["input"] == [1, 4, (16 - 1) * 2 + 3 - 2, (10 - 1) * 2 + 3 - 2]
    assert plan.flops == 2 * 4 * 36 * 16 * 10
    small = plan_workload("conv2d", {"input": [1, 4, 10, 10], "weight": [4, 4, 3, 3]}, scale=0.1)
    assert small.output_shape == (1, 4, 8, 8)  # at the floor of 8: kept


@pytest.mark.parametrize("shape, message", [
    ({**SHAPE, "output": [2, 8, 9, 12]}, "differs from the card's output"),
    ({**SHAPE, "groups": 3}, "takes 9"),
    ({"input": [1, 4, 2, 2], "weight": [4, 4, 3, 3]}, "smaller than the kernel"),
    ({"input": [1, 4, 8, 8, 8], "weight": [4, 4, 3, 3]}, "list of 4 integers"),
])
def test_bad_shapes_are_one_line_errors(shape, message):
    with pytest.raises(WorkloadError, match=message) as info:
        plan_workload("conv2d", shape)
    assert "\n" not in str(info.value)


def test_run_is_f_conv2d_and_the_reference_its_float64():
    w = build_workload("conv2d", SHAPE)
    x, weight, bias = w.inputs["input"], w.inputs["weight"], w.inputs["bias"]
    args = (SHAPE["stride"], SHAPE["padding"], SHAPE["dilation"], SHAPE["groups"])
    out = w.run()
    assert torch.equal(out, F.conv2d(x, weight, bias, *args)) and tuple(out.shape) == w.output_shape
    reference = w.reference()
    assert reference.dtype == torch.float64
    assert torch.equal(reference, F.conv2d(x.double(), weight.double(), bias.double(), *args))
    assert ((out.double() - reference).abs().max() / reference.abs().max()).item() < 1e-5  # float32 rounding
    # Synthetic spreads: the sum of K terms has std 1 and so has the bias, so dropping it is an error of order 1.
    assert 0.5 < weight.std().item() * 18 ** 0.5 < 1.5
    no_bias = F.conv2d(x, weight, None, *args).double()
    assert ((no_bias - reference).abs().max() / reference.abs().max()).item() > 0.1


def test_channels_last_layout():
    w = build_workload("conv2d", SHAPE, layout="channels_last")
    assert w.layout == "channels_last"
    for name in ("input", "weight"):
        assert w.inputs[name].is_contiguous(memory_format=torch.channels_last) and not w.inputs[name].is_contiguous()
    plain = build_workload("conv2d", SHAPE)
    torch.testing.assert_close(w.run(), plain.run())
    torch.testing.assert_close(w.reference(), plain.reference(), rtol=1e-12, atol=1e-12)  # another sum order
    assert w.redraw(1).inputs["input"].is_contiguous(memory_format=torch.channels_last)


def test_the_layout_rule_is_per_op_kind():
    with pytest.raises(WorkloadError, match="'channels_last_3d' applies to conv3d and cast only"):
        build_workload("conv2d", SHAPE, layout="channels_last_3d")
    # For every other kind "channels_last" is still the alias of channels_last_3d it always was.
    with pytest.raises(WorkloadError, match="'channels_last_3d' applies to conv3d and cast only"):
        build_workload("linear", {"M": 4, "N": 4, "K": 4}, layout="channels_last")
    conv3d = build_workload("conv3d", {"input": [1, 4, 3, 8, 8], "weight": [4, 4, 1, 3, 3]}, layout="channels_last")
    assert conv3d.layout == "channels_last_3d"
    assert conv3d.inputs["input"].is_contiguous(memory_format=torch.channels_last_3d)


def test_k_calls_stack_independent_draws_on_the_batch_dim():
    w = build_workload("conv2d", SHAPE)
    batch = w.calls(3)
    assert batch.inputs[0] is w.inputs and batch.stacked["input"].shape[0] == 3 * SHAPE["input"][0]
    assert not torch.equal(batch.inputs[1]["input"], w.inputs["input"])
    assert all(call["weight"] is w.inputs["weight"] for call in batch.inputs)  # constants shared
    args = (SHAPE["stride"], SHAPE["padding"], SHAPE["dilation"], SHAPE["groups"])
    # The conv of the stacked batch is the calls' convs one after the other, so `whole` stands for them.
    stacked = F.conv2d(batch.stacked["input"], w.inputs["weight"], w.inputs["bias"], *args)
    each = torch.cat([F.conv2d(call["input"], w.inputs["weight"], w.inputs["bias"], *args) for call in batch.inputs])
    torch.testing.assert_close(stacked, each)
    torch.testing.assert_close(batch.reference(), torch.cat([ref(torch.float64) for ref in batch.references]),
                               rtol=1e-12, atol=1e-12)


def test_a_conv2d_card_builds():
    card = Card(group="vae:aten.conv2d.default:x", resolution="480x832", stage="vae", op="aten.conv2d.default",
                shape_parameters={**SHAPE, "bias": False}, kernels=[])
    assert card.op_kind == "conv2d" and "conv2d-6to8k32" in card.id
    w = build_for_card(card, scale=0.5)
    assert "bias" not in w.inputs and w.op_kind == "conv2d" and w.scale == 0.5
    assert tuple(w.run().shape) == w.output_shape


@pytest.mark.parametrize(("op", "x", "w", "stride", "padding", "dilation", "groups"), [
    (F.conv2d, [2, 6, 17, 15], [8, 3, 3, 2], [2, 1], [1, 0], [1, 2], 2),  # every knob off its default
    (F.conv2d, [1, 4, 9, 11], [4, 4, 3, 3], [1, 1], [1, 1], [1, 1], 1),
    (F.conv3d, [1, 5, 4, 13, 7], [6, 5, 3, 3, 3], [1, 1, 1], [0, 1, 1], [1, 1, 1], 1),  # the VAE's causal conv3d
    (F.conv3d, [2, 4, 5, 16, 9], [4, 2, 2, 3, 2], [1, 3, 2], [1, 2, 0], [2, 2, 1], 2),
])
def test_a_reference_computed_in_slabs_of_rows_is_the_whole_ops(op, x, w, stride, padding, dilation, groups):
    from harness.workloads.conv import reference_in_slabs

    gen = torch.Generator().manual_seed(3)
    x = torch.randn(x, generator=gen, dtype=torch.float64)
    weight, bias = torch.randn(w, generator=gen, dtype=torch.float64), torch.randn(w[0], generator=gen,
                                                                                  dtype=torch.float64)
    whole = op(x, weight, bias, stride, padding, dilation, groups)
    row = weight[0].numel() * whole[0, 0].select(-2, 0).numel() * 8  # one output row's column buffer, in bytes
    for rows in (1, 2, 5):  # a slab of 1, 2 and 5 output rows; one slab holding them all
        sliced = reference_in_slabs(op, x, weight, bias, stride, padding, dilation, groups, slab_bytes=rows * row)
        assert sliced.shape == whole.shape
        torch.testing.assert_close(sliced, whole, rtol=1e-12, atol=1e-12)
    assert torch.equal(reference_in_slabs(op, x, weight, None, stride, padding, dilation, groups, 1 << 40),
                       op(x, weight, None, stride, padding, dilation, groups))
