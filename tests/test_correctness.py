"""harness.correctness: planted bugs are infeasible and honest variants feasible, at the report's K and channels.

Shapes come from the shipped report's cards (the K=13824 and K=5120 linears, the 96->3 and 384->384
convs, the 4680-of-29640 valid-prefix attention) with few rows, a small frame and few queries, so a
CPU runs them in seconds. Every planted case is judged twice: by the same-precision rule, and by the
bf16 lowered rule (the planted output then computed as a bf16 variant would, declared
precision="bfloat16"). bf16 arithmetic is simulated by rounding to bf16 and computing in float32, so
nothing depends on this CPU's bf16 support. Expected outcomes are the planted ones, not the code's.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import yaml

from experiments import dit_gemm_tiles, dit_small_m_batching, vae_bf16
from harness.config_schema import CorrectnessConfig
from harness.correctness import (
    CorrectnessError,
    Rule,
    Standard,
    check_output,
    judge_baseline,
    unit_roundoff,
)
from harness.experiment import ExperimentError, Prepared
from harness.workloads import build_workload, valid_prefix_attention

CONF = Path(__file__).resolve().parents[1] / "conf" / "experiment"
RULE = Rule(same_factor=4, lowered_factor=4)  # what every shipped config states (test_configs_state_the_factors)
BF16 = "bfloat16"


def _bf16(t: torch.Tensor) -> torch.Tensor:
    """A tensor rounded to bf16, held in float32: bf16 inputs of an fp32-accumulating kernel."""
    return t.to(torch.bfloat16).to(torch.float32)


def _card_workload(seed_report, card_id: str, dtype: str = "float32", scale: float = 0.02, **shape):
    """The card's op at its real K / channels; a small scale (floors keep 64 rows, an 8x8 frame)."""
    params = {**seed_report.card(card_id).shape_parameters, **shape}
    return build_workload(seed_report.card(card_id).op_kind, params, device="cpu", dtype=dtype, scale=scale, seed=0)


class Judge:
    """One workload's reference and the standard its baseline sets, as the worker holds them."""

    def __init__(self, w):
        self.w = w
        self.ref = w.reference(torch.float64)
        self.standard, self.baseline = judge_baseline(w.run(), self.ref, RULE, w.reduction_length)

    def same(self, out: torch.Tensor, **kw):
        return self.standard.judge(out, self.ref, **kw)

    def lowered(self, out: torch.Tensor, **kw):
        return self.standard.judge(out, self.ref, precision=BF16, **kw)


def _assert_infeasible(judge: Judge, fp32_out: torch.Tensor, bf16_out: torch.Tensor) -> None:
    same, lowered = judge.same(fp32_out), judge.lowered(bf16_out)
    assert not same.feasible and same.precision == "same", same
    assert not lowered.feasible and lowered.precision == BF16, lowered
    assert lowered.bound < 0.02  # bf16 is held to a few of its roundings, not to "anything under 2%"


# ---------------------------------------------------------------------------------------------
# Linear: K=13824 (the card of the original bug) and K=5120


@pytest.fixture(scope="module",
                params=["dit-480-linear-m1170n5120k13824-ffde6a", "dit-480-linear-m1170n5120k5120-b9770e"])
def linear(request, seed_report):
    w = _card_workload(seed_report, request.param)
    assert w.shape["K"] == seed_report.card(request.param).shape_parameters["K"] == w.reduction_length
    return Judge(w)


def test_dropped_bias_is_infeasible(linear):
    """The original bug: max_rel 5.9e-3 passed a 1e-2 tolerance while the bias was 1/sqrt(K) small."""
    x, weight = linear.w.inputs["x"], linear.w.inputs["weight"]
    fp32 = F.linear(x, weight)
    bf16 = F.linear(_bf16(x), _bf16(weight)).to(torch.bfloat16)
    _assert_infeasible(linear, fp32, bf16)
    assert linear.same(fp32).max_rel > 0.1  # the bias is now of the product's order


def test_honest_linear_variants_are_feasible(linear):
    x, weight, bias = (linear.w.inputs[k] for k in ("x", "weight", "bias"))
    assert linear.baseline.feasible and linear.baseline.max_rel == linear.standard.baseline_error
    assert linear.same(linear.w.run()).feasible  # the exact baseline
    assert linear.same(torch.addmm(bias, x, weight.t().contiguous())).feasible  # another GEMM path, fp32
    honest = F.linear(_bf16(x), _bf16(weight), _bf16(bias)).to(torch.bfloat16)
    judged = linear.lowered(honest)
    assert judged.feasible, judged
    assert not linear.same(honest).feasible  # undeclared, bf16 rounding is far over fp32's bound


def test_transposed_square_weight_is_infeasible(seed_report):
    judge = Judge(_card_workload(seed_report, "dit-480-linear-m1170n5120k5120-b9770e", scale=1.0, M=4))
    x, weight, bias = (judge.w.inputs[k] for k in ("x", "weight", "bias"))
    assert weight.shape == (5120, 5120)
    fp32 = F.linear(x, weight.t(), bias)  # W used as [K, N]: the shapes fit, the values do not
    bf16 = F.linear(_bf16(x), _bf16(weight).t(), _bf16(bias)).to(torch.bfloat16)
    _assert_infeasible(judge, fp32, bf16)


# ---------------------------------------------------------------------------------------------
# conv3d: 96->3 and 384->384


@pytest.fixture(scope="module", params=["vae-480-conv3d-96to3k333t6-04a8d9", "vae-480-conv3d-384to384k333t4-51b31e"])
def conv(request, seed_report):
    w = _card_workload(seed_report, request.param)
    weight = seed_report.card(request.param).shape_parameters["weight"]
    assert w.reduction_length == weight[1] * weight[2] * weight[3] * weight[4]
    assert max(w.shape["output"][3:]) <= 10  # a small frame; channels and kernel as the card has them
    return Judge(w)


def _conv(w, x, weight, bias):
    s = w.shape
    return F.conv3d(x, weight, bias, s["stride"], s["padding"], s["dilation"], s["groups"])


def test_conv_dropped_bias_is_infeasible(conv):
    x, weight = conv.w.inputs["input"], conv.w.inputs["weight"]
    _assert_infeasible(conv, _conv(conv.w, x, weight, None),
                       _conv(conv.w, _bf16(x), _bf16(weight), None).to(torch.bfloat16))


def test_conv_transposed_square_weight_is_infeasible(seed_report):
    conv = Judge(_card_workload(seed_report, "vae-480-conv3d-384to384k333t4-51b31e"))
    x, weight, bias = (conv.w.inputs[k] for k in ("input", "weight", "bias"))
    swapped = weight.transpose(0, 1).contiguous()  # Cout and Cin swapped
    _assert_infeasible(conv, _conv(conv.w, x, swapped, bias),
                       _conv(conv.w, _bf16(x), _bf16(swapped), _bf16(bias)).to(torch.bfloat16))


def test_honest_conv_variants_are_feasible(conv):
    x, weight, bias = (conv.w.inputs[k] for k in ("input", "weight", "bias"))
    last = torch.channels_last_3d
    assert conv.same(conv.w.run()).feasible
    assert conv.same(_conv(conv.w, x.contiguous(memory_format=last), weight.contiguous(memory_format=last),
                           bias)).feasible
    honest = _conv(conv.w, _bf16(x), _bf16(weight), _bf16(bias)).to(torch.bfloat16)
    assert conv.lowered(honest).feasible
    fp16 = _conv(conv.w, x.half().float(), weight.half().float(), bias.half().float()).half()
    assert conv.standard.judge(fp16, conv.ref, precision="float16").feasible


# ---------------------------------------------------------------------------------------------
# Attention over the valid prefix of a KV cache (4680 of 29640 slots filled), bf16 as the model runs it


@pytest.fixture(scope="module")
def attention(seed_report):
    w = _card_workload(seed_report, "attention-480-fa3-self-4680of29640-b97006", dtype=BF16, scale=1.0,
                       queries=16, heads=1)
    assert w.shape["head_dim"] == 128 and w.reduction_length == w.shape["valid_keys"] == 4680
    return Judge(w)


def _keys(judge: Judge, valid: int, k=None, v=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention over `valid` keys: bf16 as the baseline, and from bf16 inputs in float32 (a bf16 variant)."""
    q, k, v = judge.w.inputs["q"], judge.w.inputs["k"] if k is None else k, judge.w.inputs["v"] if v is None else v
    same = valid_prefix_attention(q, k, v, valid)
    lowered = valid_prefix_attention(q.float(), k.float(), v.float(), valid).to(torch.bfloat16)
    return same, lowered


@pytest.mark.parametrize("off", [-64, 64], ids=["a block short", "a block past the valid keys"])
def test_valid_key_count_off_by_a_block_is_infeasible(attention, off):
    _assert_infeasible(attention, *_keys(attention, 4680 + off))


def test_a_stale_slot_past_the_valid_keys_is_infeasible(attention):
    """One slot past the prefix, where a reused cache holds large stale values, takes part."""
    k, v = attention.w.inputs["k"].clone(), attention.w.inputs["v"].clone()
    k[:, :, 4680] = attention.w.inputs["q"].float().mean(dim=2).to(k.dtype) * 4
    v[:, :, 4680] = 50.0
    _assert_infeasible(attention, *_keys(attention, 4681, k, v))


def test_honest_attention_variants_are_feasible(attention):
    from harness.workloads import masked_allocation_attention

    q, k, v = (attention.w.inputs[n] for n in "qkv")
    assert attention.same(attention.w.run()).feasible
    assert attention.same(masked_allocation_attention(q, k, v, 4680)).feasible
    assert attention.lowered(_keys(attention, 4680)[1]).feasible


# ---------------------------------------------------------------------------------------------
# A batched variant's own expected output (dit_small_m_batching.batched)


@pytest.fixture(scope="module")
def batched(seed_report):
    judge = Judge(_card_workload(seed_report, "dit-480-linear-m3n5120k5120-d55d81", dtype=BF16, scale=0.05))
    assert judge.w.shape["M"] == 3 and judge.w.shape["K"] == 5120
    return judge, dit_small_m_batching.batched(judge.w, k=4)


def _judge_both(judge: Judge, prepared: Prepared, out: torch.Tensor, expected: torch.Tensor | None = None):
    kw = {"expected": prepared.expected if expected is None else expected, "calls": prepared.calls}
    return judge.same(out, **kw), judge.lowered(out, **kw)


def test_honest_batched_rows_are_feasible(batched):
    judge, prepared = batched
    for result in _judge_both(judge, prepared, prepared.fn()):
        assert result.feasible, result


def test_one_wrong_block_of_batched_rows_is_infeasible(batched):
    judge, prepared = batched
    out = prepared.fn().clone()
    rows = slice(6, 9)  # the third call's rows, computed without the bias
    out[rows] = F.linear(dit_small_m_batching.stacked_rows(judge.w, 4)[rows], judge.w.inputs["weight"])
    for result in _judge_both(judge, prepared, out):
        assert not result.feasible, result


def test_a_wrong_expected_output_is_infeasible(batched):
    """An expected output that agrees with a wrong variant is itself checked against the reference."""
    judge, prepared = batched
    x, weight = judge.w.inputs["x"], judge.w.inputs["weight"]
    wrong = prepared.expected.clone()
    wrong[:3] = F.linear(x, weight)  # the workload's own call without its bias, and the output agrees
    out = prepared.fn().clone()
    out[:3] = wrong[:3]
    for result in _judge_both(judge, prepared, out, expected=wrong):
        assert not result.feasible and "Prepared.expected is wrong" in result.note, result
    rotated = torch.cat([prepared.expected[3:], prepared.expected[:3]])  # the own call not first
    for result in _judge_both(judge, prepared, rotated, expected=rotated):
        assert not result.feasible and "Prepared.expected is wrong" in result.note, result


def test_a_missing_call_or_a_misshapen_expected_is_infeasible(batched):
    judge, prepared = batched
    out = prepared.fn()
    for result in _judge_both(judge, prepared, out[:9]):
        assert not result.feasible and "Prepared.expected" in result.note, result
    for result in _judge_both(judge, prepared, out[:9], expected=prepared.expected[:9]):
        assert not result.feasible and "not 4 call(s)" in result.note, result


# ---------------------------------------------------------------------------------------------
# The rule itself


def test_the_floor_admits_a_reordered_result_against_an_exact_baseline():
    ref = torch.linspace(-3, 3, 64, dtype=torch.float64)
    standard = Standard(RULE, baseline_error=0.0, dtype=torch.float32, reduction_length=8)
    reordered = (ref * (1 + 2.0**-23)).float()  # one float32 ulp off: what another summation order gives
    assert standard.bound().value == 4 * 2.0**-24
    assert check_output(reordered, ref, standard.bound()).feasible
    assert not standard.judge((ref * (1 + 1e-5)).float(), ref).feasible


def test_an_integer_output_must_be_exact():
    ref = torch.arange(0, 255, dtype=torch.float64)
    standard = Standard(RULE, baseline_error=0.0, dtype=torch.uint8, reduction_length=1)
    assert standard.bound().value == 0.0 and unit_roundoff(torch.uint8) == 0.0
    assert standard.judge(ref.to(torch.uint8), ref).feasible
    assert not standard.judge((ref + 1).clamp(max=254).to(torch.uint8), ref).feasible


def test_the_lowered_bound_follows_the_dtype_and_the_reduction_length():
    standard = Standard(RULE, baseline_error=4e-7, dtype=torch.float32, reduction_length=13824)
    bf16 = standard.bound(BF16)
    assert bf16.value == pytest.approx(4 * (2.0**-8 + math.sqrt(13824) * 2.0**-24))
    assert standard.bound("float16").value == pytest.approx(4 * (2.0**-11 + math.sqrt(13824) * 2.0**-24))
    assert standard.bound().value == pytest.approx(4 * 4e-7)
    assert "sqrt(K=13824)" in bf16.derivation and bf16.precision == BF16
    # Lowering is never held tighter than the baseline's own precision (a TF32 baseline, say).
    loose = Standard(RULE, baseline_error=5e-3, dtype=torch.float32, reduction_length=13824)
    assert loose.bound(BF16).value == loose.bound().value == pytest.approx(2e-2)


def test_summing_in_bf16_over_k_13824_is_rejected(seed_report):
    """The bound assumes an fp32 accumulator; a dot product accumulated in bf16 itself is far off."""
    judge = Judge(_card_workload(seed_report, "dit-480-linear-m1170n5120k13824-ffde6a", scale=1.0, M=4, N=4))
    x, weight, bias = (_bf16(judge.w.inputs[k]) for k in ("x", "weight", "bias"))
    products = (x[:, None, :] * weight[None, :, :]).unbind(dim=2)  # K terms of [4, 4], exact in float32
    acc = torch.zeros(4, 4, dtype=torch.bfloat16)
    for term in products:  # every addition rounded to bf16
        acc = (acc.float() + term).to(torch.bfloat16)
    result = judge.lowered((acc.float() + bias).to(torch.bfloat16))
    assert not result.feasible and result.max_rel > 0.05, result  # about 2^-8 * sqrt(K/6) = 0.19


def test_baseline_error_beyond_its_dtype_is_noted():
    ref = torch.linspace(-1, 1, 64, dtype=torch.float64)
    _, result = judge_baseline(_bf16(ref.float()), ref, RULE, reduction_length=64)  # "fp32" with bf16 error
    assert result.feasible and "more than float32 rounding explains" in result.note
    _, nan = judge_baseline(torch.full((64,), float("nan")), ref, RULE, reduction_length=64)
    assert not nan.feasible and "NaN" in nan.note


def test_rule_and_precision_are_validated():
    with pytest.raises(CorrectnessError, match="same_factor=0"):
        Rule(0, 4)
    with pytest.raises(CorrectnessError, match="lowered_factor=-1"):
        Rule(4, -1)
    with pytest.raises(ExperimentError, match="floating-point"):
        Prepared(lambda: torch.zeros(1), precision="uint8")
    with pytest.raises(ExperimentError, match="unknown precision"):
        Prepared(lambda: torch.zeros(1), precision="bf12")
    assert Prepared(lambda: torch.zeros(1), precision="tf32").precision == "tf32"
    assert unit_roundoff("tf32") == 2.0**-11 and unit_roundoff(BF16) == 2.0**-8


# ---------------------------------------------------------------------------------------------
# Configs, experiments and workloads


def test_configs_state_the_factors():
    default = {"correctness": asdict(CorrectnessConfig())}  # the shared default, harness.config_schema
    assert Rule.from_config(default["correctness"]) == RULE
    for path in sorted(CONF.glob("*.yaml")):  # an experiment states its own factors or keeps the default
        section = yaml.safe_load(path.read_text(encoding="utf-8"))["experiment"] or {}  # auto: no experiment
        assert "tolerance" not in section, path.name
        assert Rule.from_config(section.get("correctness", default["correctness"])) == RULE, path.name


def test_lowered_variants_declare_their_precision(monkeypatch):
    conv = build_workload("conv3d", {"input": [1, 4, 3, 6, 6], "weight": [4, 4, 3, 3, 3]}, device="cpu",
                          dtype="float32", scale=1.0, seed=0)
    monkeypatch.setattr(vae_bf16, "_cpu_has_bf16_math", lambda: True)  # the Prepared is made, not run
    assert vae_bf16.low_precision(conv, dtype=BF16).precision == BF16
    linear32 = build_workload("linear", {"M": 3, "N": 8, "K": 16}, device="cpu", dtype="float32", scale=1.0, seed=0)
    linear16 = build_workload("linear", {"M": 3, "N": 8, "K": 16}, device="cpu", dtype=BF16, scale=1.0, seed=0)
    assert dit_gemm_tiles.dtype_layout(linear32, compute_dtype=BF16, weight_layout="nk").precision == BF16
    assert dit_gemm_tiles.dtype_layout(linear16, compute_dtype="float32", weight_layout="kn").precision is None


def test_reduction_length_of_every_op_kind():
    cases = [
        ("linear", {"M": 3, "N": 8, "K": 13824}, 13824),
        ("conv3d", {"input": [1, 96, 3, 6, 6], "weight": [48, 48, 3, 3, 3], "groups": 2}, 48 * 27),
        ("attention", {"role": "self", "valid_keys": 40, "allocated_keys": 96, "queries": 8, "heads": 1,
                       "head_dim": 16}, 40),
        ("cast", {"shape": [1, 3, 2, 8, 8]}, 1),
    ]
    for op_kind, params, k in cases:
        w = build_workload(op_kind, params, device="cpu", dtype="float32", scale=1.0, seed=0)
        assert w.reduction_length == k and w.describe()["reduction_length"] == k, op_kind


def test_synthetic_bias_is_of_the_products_order_and_seeded():
    make = lambda: build_workload("linear", {"M": 64, "N": 512, "K": 13824}, device="cpu", dtype="float32",
                                  scale=1.0, seed=0)
    a, b = make(), make()
    assert torch.equal(a.inputs["bias"], b.inputs["bias"]) and torch.equal(a.inputs["weight"], b.inputs["weight"])
    product = F.linear(a.inputs["x"], a.inputs["weight"])
    assert 0.8 < float(a.inputs["bias"].std()) < 1.2 and 0.8 < float(product.std()) < 1.2
    conv = build_workload("conv3d", {"input": [1, 8, 3, 6, 6], "weight": [64, 8, 3, 3, 3]}, device="cpu",
                          dtype="float32", scale=1.0, seed=0)
    assert 0.6 < float(conv.inputs["bias"].std()) < 1.4
