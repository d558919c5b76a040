"""The recorder on planted models: what it groups, names, keeps and times (in process, no profiling)."""

import math
import time

import pytest
import torch
import torch.nn.functional as F

from harness.capture.calls import describe_call
from harness.capture.recorder import CaptureMismatch, own_seconds, record_forward


def _groups(model, *inputs, stage_of=lambda child: child):
    recorded = record_forward(model.eval(), inputs, False, stage_of, repeats=1)
    assert recorded.forward_s > 0
    return recorded.groups


def _only(groups, op):
    found = [g for g in groups if g.shape.op == op]
    assert len(found) == 1, [g.shape.op for g in groups]
    return found[0]


class TwoCalls(torch.nn.Module):
    """One linear called on two different activations of one shape, then a 3-D conv."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(12, 5)
        self.conv = torch.nn.Conv3d(3, 4, (3, 1, 1), padding="same")

    def forward(self, a, b, clip):
        return self.proj(a) + self.proj(b), self.conv(clip)


def test_one_group_per_op_and_shape_with_both_calls_captured():
    a, b, clip = torch.randn(2, 7, 12), torch.randn(2, 7, 12), torch.randn(1, 3, 4, 6, 5)
    groups = _groups(TwoCalls(), a, b, clip)
    linear = _only(groups, "aten.linear.default")
    assert linear.calls == 2 and linear.shape.op_kind == "linear"
    assert linear.shape.shape_parameters == {"M": 14, "N": 5, "K": 12, "bias": True, "input_dtype": "float32"}
    assert torch.equal(linear.shape.tensors["x"], a) and torch.equal(linear.second["x"], b)
    assert set(linear.shape.tensors) == {"x", "weight", "bias"} and set(linear.second) == {"x"}  # weights: constants
    assert linear.stage == "proj" and linear.module == "proj"
    conv = _only(groups, "aten.conv3d.default")
    params = conv.shape.shape_parameters
    # 'same' padding of a (3, 1, 1) kernel is (1, 0, 0) on each side: the output keeps the input's extent.
    assert params["padding"] == [1, 0, 0] and params["output"] == [1, 4, 4, 6, 5]
    assert params["weight"] == [4, 3, 3, 1, 1]
    assert conv.calls == 1 and conv.second == {}


def test_stages_follow_the_top_level_children_or_the_map():
    class Outer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())

        def forward(self, x):
            return self.encoder(x) * 2  # the multiply is the model's own

    groups = _groups(Outer(), torch.randn(3, 4), stage_of=lambda child: {"encoder": "enc"}.get(child, child))
    assert _only(groups, "aten.linear.default").stage == "enc"
    assert _only(groups, "aten.linear.default").module == "encoder.0"
    assert _only(groups, "aten.mul.Tensor").stage == "model"


def test_known_kinds_fall_back_to_replay_when_their_workload_cannot_say_the_call():
    q = k = v = torch.randn(1, 2, 8, 4)
    plain = describe_call(F.scaled_dot_product_attention, (q, k, v), {}, F.scaled_dot_product_attention(q, k, v),
                          set())
    assert plain.op_kind == "attention"
    assert plain.shape_parameters == {"role": "self", "batch": 1, "heads": 2, "head_dim": 4, "queries": 8,
                                      "valid_keys": 8, "allocated_keys": 8, "input_dtype": "float32"}
    causal = describe_call(F.scaled_dot_product_attention, (q, k, v), {"is_causal": True},
                           F.scaled_dot_product_attention(q, k, v, is_causal=True), set())
    assert causal.op_kind == "replay" and causal.shape_parameters["kwargs"] == {"is_causal": True}
    x, w = torch.randn(1, 2, 6, 6), torch.randn(3, 2, 2, 2)
    uneven = describe_call(torch.conv2d, (x, w), {"padding": "same"}, F.conv2d(x, w, padding="same"), set())
    assert uneven.op_kind == "replay"  # torch pads one side more: no stride/padding pair says that


def test_a_cast_is_the_cast_workload_and_a_no_op_to_is_not():
    x = torch.randn(2, 3)
    cast = describe_call(torch.Tensor.to, (x, torch.bfloat16), {}, x.to(torch.bfloat16), set())
    assert cast.op == "aten.to.dtype" and cast.shape_parameters["dtype"] == "bfloat16"
    assert cast.shape_parameters["shape"] == [2, 3] and cast.activations == ("frames",)
    same = describe_call(torch.Tensor.to, (x, torch.float32), {}, x.to(torch.float32), set())
    assert same.op_kind == "replay"


def test_an_in_place_call_is_replayable_on_what_its_target_held_before_it_wrote():
    class InPlace(torch.nn.Module):
        def forward(self, x):
            y = x * 1.0
            y.add_(1)
            torch.nn.functional.relu(y, inplace=True)
            y += x
            return y

    x = torch.randn(4)
    groups = _groups(InPlace(), x)
    relu = _only(groups, "aten.relu_.default")
    added = [g for g in groups if g.shape.op == "aten.add_.Tensor"]
    assert len(added) == 2 and all(g.shape.replayable is None for g in (relu, *added))
    first = next(g for g in added if g.shape.shape_parameters["kwargs"] == {} and len(g.shape.tensors) == 1)
    # Its input is what y held before add_ wrote: x * 1.0, not x + 1; `writes` names it.
    assert torch.equal(first.shape.tensors[first.shape.shape_parameters["writes"]], x)
    assert torch.equal(relu.shape.tensors["arg0"], x + 1)  # relu_ wrote into x + 1: its copy holds x + 1
    assert relu.shape.shape_parameters["kwargs"] == {"inplace": True}


def test_views_allocations_and_unencodable_calls_are_recorded_but_not_replayable():
    x = torch.randn(2, 3)
    # F.normalize reaches the recorder with its defaults, out=None among them: not in place.
    assert describe_call(F.normalize, (x,), {"dim": 1, "out": None}, F.normalize(x), set()).replayable is None
    # An in-place call whose target nobody copied before it wrote (only the recorder does) has lost its input.
    assert "in place" in describe_call(F.normalize, (x,), {"out": torch.empty(2, 3)}, x, set()).replayable
    view = describe_call(torch.Tensor.reshape, (x, (3, 2)), {}, x.reshape(3, 2), set())
    assert view.replayable and "view of its input" in view.replayable
    assert describe_call(torch.Tensor.reshape, (x.t(), (6,)), {}, x.t().reshape(6), set()).replayable is None  # a copy
    odd = describe_call(torch.Tensor.__getitem__, (torch.randn(3), object()), {}, torch.zeros(1), set())
    assert odd.replayable and "object" in odd.replayable
    # An allocation's output is whatever memory it got: two calls differ, so no reference could judge it.
    for func, args in ((torch.empty_like, (x,)), (torch.Tensor.new_empty, (x, (2, 3)))):
        allocated = describe_call(func, args, {}, func(*args), set())
        assert allocated.replayable and "uninitialised" in allocated.replayable, func


def test_a_forward_that_does_not_repeat_is_refused():
    class Flaky(torch.nn.Module):
        calls = 0

        def forward(self, x):
            Flaky.calls += 1
            return x * 2 if Flaky.calls == 1 else x.sin()  # the recorded forward differs from the timed ones

    with pytest.raises(CaptureMismatch, match="forward that repeats"):
        record_forward(Flaky(), (torch.randn(3),), False, lambda c: c, repeats=1)


def _sleeper(x, seconds):
    """An op the recorder sees (it dispatches to the active TorchFunctionMode) that takes a known time."""
    if torch.overrides.has_torch_function((x,)):
        return torch.overrides.handle_torch_function(_sleeper, (x,), x, seconds)
    time.sleep(seconds)
    return x + 0


class HalfAsleep(torch.nn.Module):
    """30 ms in one op, 30 ms of Python between ops, and a few ops of microseconds."""

    def forward(self, x):
        y = _sleeper(x, 0.03)
        time.sleep(0.03)
        return (y * 2).sin()


def test_shares_are_of_the_forward_and_add_up_to_at_most_one():
    recorded = record_forward(HalfAsleep(), (torch.randn(8),), False, lambda c: c, repeats=2)
    groups, forward_s = recorded.groups, recorded.forward_s
    slept = next(g for g in groups if g.shape.op.endswith("_sleeper"))
    # 30 of at least 60 ms: a sleep never returns early, and sleeping longer (a loaded machine) only lowers it.
    assert 0.3 < slept.share <= 0.55, slept.share
    assert math.isclose(slept.time_s, slept.share * forward_s) and forward_s >= 0.06
    assert sum(g.share for g in groups) <= 1.0


def test_own_seconds_counts_overlapping_spans_once():
    # Nested (the second inside the first), overlapping (the third starts before the second ends) and apart.
    spans = [(0.0, 10.0), (2.0, 5.0), (8.0, 12.0), (20.0, 21.0)]
    assert own_seconds(spans) == [10.0, 0.0, 2.0, 1.0]
    assert sum(own_seconds(spans)) <= 21.0  # never more than first start to last end
