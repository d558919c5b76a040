"""What a captured card says of itself, as the call and the device have it: its math mode (TF32 exists on CUDA
only), the dtype a call names for itself, cross-attention, the stage of the module that issued it, and why an
`--apply` applied nothing."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from harness.capture.apply import apply_best
from harness.capture.calls import describe_call
from harness.capture.factory import LoadedModel
from harness.capture.recorder import record_forward
from harness.cards.dtype import CAPTURED, card_dtype
from harness.cards.model import Card, Report
from tests.capture.models import r3d_like


def _card(op: str, op_kind: str, params: dict) -> Card:
    return Card(group=f"s:{op}:{params}", resolution=None, stage="s", op=op, shape_parameters=params, kernels=[],
                extra={"op_kind": op_kind} if op_kind == "replay" else {})


def test_a_math_mode_is_named_only_where_there_is_one():
    conv = _card("aten.conv3d.default", "conv3d", {"input": [1, 3, 4, 8, 8], "weight": [8, 3, 3, 3, 3],
                                                    "output": [1, 8, 2, 6, 6], "input_dtype": "float32"})
    on_cpu = card_dtype(conv, applied=[], override=None, declared=[], experiment_dtype="float32", device="cpu")
    on_gpu = card_dtype(conv, applied=[], override=None, declared=[], experiment_dtype="float32", device="cuda")
    assert on_cpu.line(why=False) == "float32 (captured)"  # no TF32 on a CPU
    assert on_gpu.line(why=False) == "float32, tf32 math (captured)"  # cuDNN's default for a float32 conv


def test_a_call_without_tensors_is_built_in_the_dtype_it_names():
    out = torch.arange(8, dtype=torch.float32)
    shape = describe_call(torch.arange, (8,), {"dtype": torch.float32}, out, set())
    assert shape.op_kind == "replay" and shape.shape_parameters["input_dtype"] == "float32"
    card = _card(shape.op, "replay", shape.shape_parameters)
    decided = card_dtype(card, applied=[], override=None, declared=[], experiment_dtype="bfloat16", device="cpu")
    assert (decided.dtype, decided.source) == ("float32", CAPTURED)  # not the experiment's guess
    ints = describe_call(torch.arange, (8,), {}, torch.arange(8), set())
    assert "input_dtype" not in ints.shape_parameters  # an integer range names no floating dtype


def test_queries_over_another_number_of_keys_are_cross_attention():
    q, k = torch.randn(1, 2, 128, 4), torch.randn(1, 2, 8, 4)
    cross = describe_call(F.scaled_dot_product_attention, (q, k, k), {}, F.scaled_dot_product_attention(q, k, k),
                          set())
    assert cross.op_kind == "attention" and cross.shape_parameters["role"] == "cross"
    assert "sdpa-cross-8of8" in _card(cross.op, "attention", cross.shape_parameters).id
    itself = describe_call(F.scaled_dot_product_attention, (q, q, q), {}, F.scaled_dot_product_attention(q, q, q),
                           set())
    assert itself.shape_parameters["role"] == "self"


def test_each_stage_keeps_the_calls_its_modules_issued():
    model, inputs = r3d_like()
    groups = record_forward(model.eval(), inputs, False, lambda child: child, repeats=1).groups
    norms = {g.stage: g for g in groups if g.shape.op == "aten.batch_norm.default"}
    # One batch_norm shape in both stages: the stem's call and layer1's two are two groups, each its stage's.
    assert set(norms) == {"stem", "layer1"} and norms["stem"].calls == 1 and norms["layer1"].calls == 2
    assert norms["layer1"].module.startswith("layer1.")


def test_apply_says_why_it_applied_nothing():
    loaded = LoadedModel(torch.nn.Linear(2, 2), (torch.randn(1, 2),), "planted:make")
    kept = [Card(group="g", resolution=None, stage="s", op="aten.linear.default", shape_parameters={}, kernels=[])]
    result = apply_best(loaded, Report(cards=kept), rounds=2, budget_s=0.01, cuda=False)
    assert result["verdict"] == "NOTHING APPLIED" and "none of the 1 card(s)" in result["why_nothing"]
    kernel_choice = [{"experiment": "vae_conv_kernels", "module": "m", "variant": "native_cpu", "carries": {}}]
    chosen = [Card(group="g", resolution=None, stage="s", op="aten.conv3d.default", shape_parameters={}, kernels=[],
                   extra={"applied": kernel_choice})]
    result = apply_best(loaded, Report(cards=chosen), rounds=2, budget_s=0.01, cuda=False)
    assert "one op's kernel or implementation choice" in result["why_nothing"]
