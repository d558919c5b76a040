"""harness.trial.correctness: planted bugs are infeasible and honest variants feasible, at the report's K and channels.

Shapes come from the shipped report's cards (the K=13824 and K=5120 linears, the 96->3 and 384->384
convs, the 4680-of-29640 valid-prefix attention) with few rows, a small frame and few queries, so a
CPU runs them in seconds. Every planted case is judged twice: by the same-precision rule, and by the
bf16 lowered rule (the planted output then computed as a bf16 variant would, declared
precision="bfloat16"). bf16 arithmetic is simulated by rounding to bf16 and computing in float32, so
nothing depends on this CPU's bf16 support. Expected outcomes are the planted ones, not the code's.

A declared precision is also judged as the worker judges it (`_judged`): its call observed for evidence
and its output held to the reference emulating that precision (harness.trial.precision); there the variants
run real bf16 ops (the K=13824 linear at 8 x 64 outputs, the convs, attention over 4680 keys).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from dataclasses import asdict
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import yaml

from experiments import dit_gemm_tiles, dit_small_m_batching, vae_bf16
from harness.api.experiment import ExperimentError, Prepared
from harness.api.numerics import CorrectnessError, unit_roundoff
from harness.boundary.spec import CorrectnessRule
from harness.cards.applied import AppliedVariant
from harness.config.schema import CorrectnessConfig
from harness.config.validate import ConfigError, compose_checked
from harness.trial.correctness import Standard, check_output, coarsest, judge_baseline, output_grid
from harness.trial.precision import emulated_reference, observed_precisions, round_to_tf32
from harness.trial.rounds import carry
from harness.workloads import batch_for, build_workload, valid_prefix_attention

CONF = Path(__file__).resolve().parents[1] / "conf" / "experiment"
# what every shipped config states (test_configs_state_the_factors)
RULE = CorrectnessRule(same_factor=4, lowered_factor=4, emulated_factor=2)
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
# A batched variant (dit_small_m_batching.batched) on the harness's k calls, each against its own reference


@pytest.fixture(scope="module")
def batched(seed_report):
    judge = Judge(_card_workload(seed_report, "dit-480-linear-m3n5120k5120-d55d81", dtype=BF16, scale=0.05))
    assert judge.w.shape["M"] == 3 and judge.w.shape["K"] == 5120
    prepared = dit_small_m_batching.batched(judge.w, k=4)
    return judge, prepared, batch_for(judge.w, prepared.calls)


def _judge_both(judge: Judge, out: torch.Tensor, reference: torch.Tensor):
    return judge.standard.judge(out, reference), judge.standard.judge(out, reference, precision=BF16)


def test_the_batch_reference_is_every_calls_own_op_in_float64(batched):
    judge, _, batch = batched
    weight, bias = (judge.w.inputs[name].double() for name in ("weight", "bias"))
    # x W^T + b summed term by term in float64, each call's block from that call's own rows
    want = torch.cat([torch.einsum("mk,nk->mn", call["x"].double(), weight) + bias for call in batch.inputs])
    torch.testing.assert_close(batch.reference(), want, rtol=1e-12, atol=1e-12)
    assert torch.equal(batch.reference()[:3], judge.ref)  # call 0 is the workload's own


def test_honest_batched_rows_are_feasible(batched):
    judge, prepared, batch = batched
    for result in _judge_both(judge, prepared.fn(), batch.reference()):
        assert result.feasible, result


def test_one_call_repeated_k_times_is_infeasible(batched):
    """The fake 4x: the workload's own call computed once and repeated for the other 3 calls."""
    judge, _, batch = batched
    repeated = judge.w.run().repeat(4, 1)
    for result in _judge_both(judge, repeated, batch.reference()):
        assert not result.feasible and result.max_rel > 0.1, result  # the other calls' rows are unrelated


def test_one_wrong_block_of_batched_rows_is_infeasible(batched):
    judge, prepared, batch = batched
    out = prepared.fn().clone()
    rows = slice(6, 9)  # the third call's rows, computed without the bias
    out[rows] = F.linear(batch.stacked["x"][rows], judge.w.inputs["weight"])
    for result in _judge_both(judge, out, batch.reference()):
        assert not result.feasible, result


def test_a_missing_call_is_infeasible(batched):
    judge, prepared, batch = batched
    for result in _judge_both(judge, prepared.fn()[:9], batch.reference()):
        assert not result.feasible and "output shape (9, " in result.note, result


def test_a_result_kept_from_the_first_prepare_fails_on_the_second_draw(batched):
    """Right on draw 0 only: a variant that keeps the output it computed the first time it was prepared.
    Prepared again on draw 1, as the harness does, it returns draw 0's output."""
    judge, _, _ = batched
    kept: list[torch.Tensor] = []

    def remembering(w):
        if not kept:
            kept.append(w.run())
        return lambda: kept[0]

    assert judge.same(remembering(judge.w)()).feasible
    second = judge.w.redraw(1)
    result = judge.standard.judge(remembering(second)(), second.reference())
    assert not result.feasible and result.max_rel > 0.1, result


def test_prepared_takes_no_expected_output():
    with pytest.raises(ExperimentError) as raised:
        Prepared(lambda: torch.zeros(4), calls=4, expected=torch.zeros(4))
    assert str(raised.value) == ("Prepared.expected is no longer taken: build the k calls with w.calls(k); the "
                                 "harness computes each call's float64 reference")


# ---------------------------------------------------------------------------------------------
# The rule itself


def test_the_floor_admits_a_reordered_result_against_an_exact_baseline():
    ref = torch.linspace(-3, 3, 64, dtype=torch.float64)
    standard = Standard(RULE, baseline_error=0.0, dtype=torch.float32, reduction_length=8)
    reordered = (ref * (1 + 2.0**-23)).float()  # one float32 ulp off: what another summation order gives
    # Another order of 8-term float32 sums: sqrt(8) x 2^-24 of the result, above the unit roundoff.
    assert standard.bound().value == 4 * math.sqrt(8) * 2.0**-24
    assert check_output(reordered, ref, standard.bound()).feasible
    assert not standard.judge((ref * (1 + 1e-5)).float(), ref).feasible


def test_a_reordered_sum_of_many_terms_is_honest_whatever_the_baselines_order_cost():
    """A conv3d of K=2592 (96 channels x 27): the NCDHW baseline erred 3.8e-7 on one AVX-512 CPU, oneDNN's
    channels_last_3d kernel 1.6e-6 (over 4 x e_b), within what another order of 2592 float32 terms errs;
    a dropped term of the sum (about 1/sqrt(K) of the output) stays far outside."""
    standard = Standard(RULE, baseline_error=3.8e-7, dtype=torch.float32, reduction_length=2592)
    assert math.isclose(standard.bound().value, 4 * math.sqrt(2592) * 2.0**-24)
    ref = torch.linspace(-3, 3, 64, dtype=torch.float64)
    assert standard.judge((ref * (1 + 1.6e-6)).float(), ref).feasible
    assert not standard.judge((ref * (1 + 1 / math.sqrt(2592))).float(), ref).feasible
    bf16 = Standard(RULE, baseline_error=1e-3, dtype=torch.bfloat16, reduction_length=2592)
    assert bf16.bound().value == 4 * 2.0**-8  # a bf16 output's floor is its own rounding; it accumulates in fp32


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
    # e_b 4e-7 is under what another order of 13824 float32 terms errs (sqrt(K) x 2^-24 = 7.0e-6): that is the floor.
    assert standard.bound().value == pytest.approx(4 * math.sqrt(13824) * 2.0**-24)
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
        CorrectnessRule(0, 4)
    with pytest.raises(CorrectnessError, match="lowered_factor=-1"):
        CorrectnessRule(4, -1)
    with pytest.raises(CorrectnessError, match="emulated_factor=0"):
        CorrectnessRule(4, 4, 0)
    with pytest.raises(ExperimentError, match="floating-point"):
        Prepared(lambda: torch.zeros(1), precision="uint8")
    with pytest.raises(ExperimentError, match="unknown precision"):
        Prepared(lambda: torch.zeros(1), precision="bf12")
    assert Prepared(lambda: torch.zeros(1), precision="tf32").precision == "tf32"
    assert unit_roundoff("tf32") == 2.0**-11 and unit_roundoff(BF16) == 2.0**-8


# ---------------------------------------------------------------------------------------------
# Configs, experiments and workloads


def test_configs_state_the_factors():
    default = {"correctness": asdict(CorrectnessConfig())}  # the shared default, harness.config.schema
    assert CorrectnessRule.from_config(default["correctness"]) == RULE
    for path in sorted(CONF.glob("*.yaml")):  # an experiment states its own factors or keeps the default
        section = yaml.safe_load(path.read_text(encoding="utf-8"))["experiment"] or {}  # auto: no experiment
        assert "tolerance" not in section, path.name
        assert CorrectnessRule.from_config(section.get("correctness", default["correctness"])) == RULE, path.name


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
    def make():
        return build_workload("linear", {"M": 64, "N": 512, "K": 13824}, device="cpu", dtype="float32", scale=1.0,
                              seed=0)

    a, b = make(), make()
    assert torch.equal(a.inputs["bias"], b.inputs["bias"]) and torch.equal(a.inputs["weight"], b.inputs["weight"])
    product = F.linear(a.inputs["x"], a.inputs["weight"])
    assert 0.8 < float(a.inputs["bias"].std()) < 1.2 and 0.8 < float(product.std()) < 1.2
    conv = build_workload("conv3d", {"input": [1, 8, 3, 6, 6], "weight": [64, 8, 3, 3, 3]}, device="cpu",
                          dtype="float32", scale=1.0, seed=0)
    assert 0.6 < float(conv.inputs["bias"].std()) < 1.4


# ---------------------------------------------------------------------------------------------
# A declared precision: evidence from its call, and the reference emulating it (harness.trial.precision)

LINEAR_K13824 = "dit-480-linear-m1170n5120k13824-ffde6a"
ACC_K13824 = math.sqrt(13824) * 2.0**-24  # the accumulation term sqrt(K) u(float32) at the K


@pytest.fixture(scope="module")
def k13824(seed_report):
    """The issue's K=13824 linear card, at 8 x 64 outputs."""
    judge = Judge(_card_workload(seed_report, LINEAR_K13824, scale=1.0, M=8, N=64))
    assert judge.w.shape["K"] == judge.w.reduction_length == 13824
    return judge


def _judged(judge: Judge, fn, precision: str | None = BF16, standard: Standard | None = None):
    """A variant's call judged as the worker judges it: its output, the evidence of one observed call, and
    the reference emulating the precision it is held to."""
    standard = standard or judge.standard
    out = fn()
    held = standard.precision_for(precision)
    emulated = None if held is None else emulated_reference(judge.w, held, out.dtype)
    return standard.judge(out, judge.ref, precision=precision, emulated=emulated, evidence=observed_precisions(fn))


def _linear_parts(judge: Judge) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return tuple(judge.w.inputs[k] for k in ("x", "weight", "bias"))


def _honest_bf16_linear(judge: Judge):
    lowered = [t.to(torch.bfloat16) for t in _linear_parts(judge)]
    return lambda: F.linear(*lowered)  # a bf16 GEMM: fp32 accumulation, bf16 output


def _dropped(judge: Judge) -> torch.Tensor:
    """The linear in float32 without its last 2 of K reduction terms."""
    x, weight, bias = _linear_parts(judge)
    return F.linear(x[:, :-2], weight[:, :-2], bias)


def test_honest_bf16_linear_is_feasible_against_its_emulation(k13824):
    bf16 = _honest_bf16_linear(k13824)
    for fn in (bf16, lambda: bf16().float()):  # bf16 out, and the same returned as float32
        result = _judged(k13824, fn)
        assert result.feasible and result.precision == BF16, result
        assert ("against the bfloat16-emulated reference (inputs rounded to bfloat16, summed exactly, output "
                "rounded to bfloat16)") in result.note, result


def test_dropping_terms_and_declaring_bf16_is_infeasible(k13824):
    x, weight, _ = _linear_parts(k13824)
    # What the 2 dropped terms weigh, computed apart: over bf16's lowered bound's one step, under the bound.
    planted = float(F.linear(x[:, -2:].double(), weight[:, -2:].double()).abs().max() / k13824.ref.abs().max())
    assert 2 * 2.0**-8 < planted < k13824.standard.bound(BF16).value  # the hole of the float64 check alone

    undeclared = _judged(k13824, lambda: _dropped(k13824))  # all float32: no evidence
    assert not undeclared.feasible and undeclared.precision == "same", undeclared
    assert undeclared.note == ("declares bfloat16 but neither its output dtype nor any op of its call computes in "
                               "bfloat16: judged at the baseline's precision (its call computes in float32)")

    def decoy() -> torch.Tensor:
        x.to(torch.bfloat16)  # a cast thrown away: evidence, but no bf16 math
        return _dropped(k13824)

    # The decoy's emulated model (2 x ACC) is under the same-precision floor (4 x ACC): that floor holds it.
    for fn, bound in ((decoy, 4 * ACC_K13824), (lambda: _dropped(k13824).to(torch.bfloat16),
                                                2 * (2.0**-8 + ACC_K13824))):
        result = _judged(k13824, fn)
        assert not result.feasible and result.precision == BF16, result
        assert result.bound == pytest.approx(bound) and result.max_rel > bound, result  # the emulated check
        assert result.note.startswith("against the bfloat16-emulated reference"), result


def test_an_honest_fp32_variant_declaring_bf16_without_evidence_is_judged_as_fp32(k13824):
    x, weight, bias = _linear_parts(k13824)
    result = _judged(k13824, lambda: F.linear(x, weight, bias))
    assert result.feasible and result.precision == "same", result
    assert result.bound == k13824.standard.bound().value and "judged at the baseline's precision" in result.note


def test_honest_bf16_conv_is_feasible_against_its_emulation(conv):
    lowered = [conv.w.inputs[k].to(torch.bfloat16) for k in ("input", "weight", "bias")]
    result = _judged(conv, lambda: _conv(conv.w, *lowered))
    assert result.feasible and result.precision == BF16, result


@pytest.fixture(scope="module")
def attention32(seed_report):
    """The FA3 self-attention card built in float32, for a variant that lowers it to bf16."""
    return Judge(_card_workload(seed_report, "attention-480-fa3-self-4680of29640-b97006", scale=1.0, queries=16,
                                heads=1))


def test_honest_bf16_attention_is_feasible_against_its_emulation(attention, attention32):
    for judge in (attention32, attention):  # float32 inputs rounded to bf16; the model's own bf16 inputs
        q, k, v = (judge.w.inputs[n].to(torch.bfloat16) for n in "qkv")
        result = _judged(judge, lambda q=q, k=k, v=v: valid_prefix_attention(q, k, v, 4680))
        assert result.feasible and result.precision == BF16, result
    q, k, v = (attention32.w.inputs[n].to(torch.bfloat16) for n in "qkv")
    past = _judged(attention32, lambda: valid_prefix_attention(q, k, v, 4680 + 64))
    assert not past.feasible, past


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int32)


def test_the_emulation_rounds_the_inputs_and_restores_them_bit_for_bit():
    w = build_workload("linear", {"M": 4, "N": 8, "K": 64}, device="cpu", dtype="float32", scale=1.0, seed=0)
    x, weight, bias = (w.inputs[k] for k in ("x", "weight", "bias"))
    want = F.linear(*(t.to(torch.bfloat16).double() for t in (x, weight, bias)))  # rounded apart, in float64
    assert torch.equal(emulated_reference(w, BF16, torch.float32), want)
    assert torch.equal(emulated_reference(w, BF16, torch.bfloat16), want.to(torch.bfloat16).double())

    # Values rounding would change, a signed zero, a subnormal, Inf, and a NaN with a payload.
    x[0, :5] = torch.tensor([1 + 2.0**-8 + 2.0**-20, -0.0, 1e-40, float("inf"), -3.3])
    _bits(x)[0, 5] = 0x7FC01234
    before = {name: t.clone() for name, t in w.inputs.items()}
    for precision in (BF16, "float16", "tf32"):
        emulated_reference(w, precision, torch.float32)
        for name, t in w.inputs.items():
            assert torch.equal(_bits(t), _bits(before[name])), (precision, name)

    seen: list[torch.Tensor] = []

    def failing(dtype: torch.dtype) -> torch.Tensor:
        seen.append(x.clone())
        raise RuntimeError("reference failed")

    with pytest.raises(RuntimeError, match="reference failed"):
        emulated_reference(dataclasses.replace(w, _reference=failing), BF16, torch.float32)
    assert seen[0][0, 0] == 1 + 2.0**-7  # rounded while the reference ran (just above halfway: up)...
    assert all(torch.equal(_bits(t), _bits(before[name])) for name, t in w.inputs.items())  # ...restored after


def test_a_reference_that_does_not_read_the_given_inputs_is_refused(k13824):
    """A workload with carried inputs (round 2) holds copies; its reference reads the inputs as built."""
    carried = carry(k13824.w, [AppliedVariant(experiment="e", module="m", variant="v", carries={"x": {"dtype": BF16}})])
    with pytest.raises(CorrectnessError, match=r"does not read the input\(s\) x it was given"):
        emulated_reference(carried, BF16, torch.bfloat16)


def test_a_chunk_is_checked_against_float64_alone(k13824):
    assert emulated_reference(dataclasses.replace(k13824.w, op_kind="vae_decode"), BF16, torch.bfloat16) is None
    result = k13824.standard.judge(_honest_bf16_linear(k13824)(), k13824.ref, precision=BF16, emulated=None)
    assert result.feasible and result.bound == k13824.standard.bound(BF16).value, result
    assert "no bfloat16-emulated reference for this op: checked against the float64 one alone" in result.note


@pytest.mark.parametrize("bits, rounded", [
    (0x3F800000, 0x3F800000),  # 1.0: already TF32
    (0x3F801000, 0x3F800000),  # 1 + 2^-11, halfway: to the even neighbour 1.0
    (0x3F803000, 0x3F804000),  # 1 + 3 x 2^-11, halfway: to the even neighbour 1 + 2^-9
    (0x3F801001, 0x3F802000),  # just above halfway: up to 1 + 2^-10
    (0xBF801001, 0xBF802000),  # the same negative: its magnitude rounds
    (0x40490FDB, 0x40490000),  # float32 pi -> 3.140625
    (0x00003000, 0x00004000),  # a subnormal halfway, its kept bits odd: up
    (0x7F7FFFFF, 0x7F800000),  # float32's largest is past TF32's largest by more than half a step: Inf
    (0x7F800000, 0x7F800000),  # Inf
    (0x7F801000, 0x7F801000),  # a NaN whose payload lies in the dropped bits (rounding them would give Inf)
])
def test_tf32_rounding_of_known_bit_patterns(bits, rounded):
    def signed(b):
        return b - (1 << 32) if b >= 1 << 31 else b

    value = torch.tensor([signed(bits)], dtype=torch.int32).view(torch.float32)
    assert int(_bits(round_to_tf32(value))[0]) == signed(rounded)


@contextlib.contextmanager
def _tf32_switches(matmul: bool, cudnn: bool):
    """torch's TF32 switches set for a block, then put back (they are module properties, not attributes
    monkeypatch could restore)."""
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, cudnn
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def test_the_observed_call_shows_what_its_ops_compute_in():
    x, weight = torch.randn(4, 16), torch.randn(8, 16)
    bf16 = observed_precisions(lambda: F.linear(x.to(torch.bfloat16), weight.to(torch.bfloat16)).float())
    assert bf16.precisions == {"float32", BF16} and bf16.shows("bf16")
    fp32 = observed_precisions(lambda: F.linear(x, weight))
    assert fp32.precisions == {"float32"} and not fp32.shows(BF16)
    # A factory op computes on nothing: a bf16 tensor made from no data is no bf16 math.
    assert not observed_precisions(lambda: (torch.zeros(3, dtype=torch.bfloat16), F.linear(x, weight))).shows(BF16)
    with _tf32_switches(matmul=True, cudnn=True):  # no TF32 off CUDA, whatever torch's switches say
        assert not observed_precisions(lambda: F.linear(x, weight)).shows("tf32")

    def failing() -> torch.Tensor:
        raise RuntimeError("no kernel for this\nsecond line")

    failed = observed_precisions(failing)
    assert failed.precisions == frozenset() and failed.error == "RuntimeError: no kernel for this"


@pytest.mark.gpu
def test_tf32_is_shown_by_a_cuda_matmul_while_torch_allows_it():
    a = torch.randn(64, 64, device="cuda")
    with _tf32_switches(matmul=True, cudnn=False):
        assert observed_precisions(lambda: a @ a).shows("tf32")
    with _tf32_switches(matmul=False, cudnn=False):
        assert not observed_precisions(lambda: a @ a).shows("tf32")


def test_a_tf32_declaration_off_cuda_is_judged_at_the_same_precision(k13824):
    x, weight, bias = _linear_parts(k13824)
    result = _judged(k13824, lambda: F.linear(x, weight, bias), precision="tf32")
    assert result.feasible and result.precision == "same" and "declares tf32 but neither" in result.note, result


def test_the_emulated_bound_and_the_output_grid():
    standard = Standard(RULE, baseline_error=4e-7, dtype=torch.float32, reduction_length=13824)
    assert standard.emulated_bound(BF16, torch.bfloat16).value == pytest.approx(2 * (2.0**-8 + ACC_K13824))
    # Its model, 2 x ACC, is under the same-precision bound 4 x max(e_b 4e-7, sqrt(K) u_acc = ACC): the floor.
    assert standard.emulated_bound(BF16, None).value == pytest.approx(4 * ACC_K13824)
    assert standard.emulated_bound("tf32", None).value == pytest.approx(2 * (2.0**-11 + ACC_K13824))
    loose = Standard(RULE, baseline_error=5e-3, dtype=torch.float32, reduction_length=13824)
    assert loose.emulated_bound(BF16, torch.bfloat16).value == pytest.approx(2e-2)  # the same bound: the floor
    y = torch.randn(256)
    bf16 = y.to(torch.bfloat16)
    assert output_grid(bf16, BF16) == output_grid(bf16.float(), BF16) == torch.bfloat16  # .float() of a bf16 result
    assert output_grid(y.half(), BF16) == torch.float16  # its own dtype's grid
    assert output_grid(y.half().float(), BF16) is None  # fp16's grid is finer than bf16's
    assert output_grid(y, BF16) is None and output_grid(y, "tf32") is None


def test_the_coarsest_precision_is_judged_at():
    assert coarsest(["float16", "bf16", None]) == BF16 and coarsest([None]) is None
    standard = Standard(RULE, 0.0, torch.float32, 8, adopted_precision=BF16)
    assert standard.precision_for("float16") == standard.precision_for(None) == BF16


def test_bounds_are_anchored_to_the_original_op_over_rounds(k13824):
    """Round 1 adopts a bf16 variant; rounds 2 and 3 measure the original op again and judge every variant
    at bf16, so their bound is round 1's, not 4 x the adopted variant's error (0.0137 -> 0.0548 -> ...)."""
    honest = _honest_bf16_linear(k13824)
    round1 = judge_baseline(k13824.w.run(), k13824.ref, RULE, 13824)[0]
    adopted = _judged(k13824, honest, standard=round1)
    assert adopted.feasible and adopted.bound == pytest.approx(4 * (2.0**-8 + ACC_K13824))
    # The standard the adopted variant's own error used to set: the max_rel 0.0137 as e_b.
    compounded = judge_baseline((k13824.ref * (1 + 0.0137)).float(), k13824.ref, RULE, 13824)[0]
    assert compounded.bound().value == pytest.approx(4 * 0.0137, rel=1e-4)
    def worse():
        return (k13824.ref * (1 + 0.03)).to(torch.bfloat16)  # bf16 out, 3% off

    assert compounded.judge(worse(), k13824.ref).feasible
    for _ in ("round 2", "round 3"):
        standard = judge_baseline(k13824.w.run(), k13824.ref, RULE, 13824, adopted_precision="bf16")[0]
        assert standard.baseline_error == round1.baseline_error and standard.adopted_precision == BF16
        baseline = _judged(k13824, honest, precision=None, standard=standard)  # the adopted variant, undeclared
        assert baseline.feasible and baseline.precision == BF16 and baseline.bound == adopted.bound, baseline
        assert not _judged(k13824, worse, precision=None, standard=standard).feasible
        fp32 = _judged(k13824, k13824.w.run, precision=None, standard=standard)  # back to float32: no evidence
        assert fp32.feasible and fp32.precision == "same", fp32
        assert "is held to bfloat16, adopted on this card in an earlier round, but neither" in fp32.note


def test_the_emulated_factor_is_checked_with_the_config():
    with pytest.raises(ConfigError, match=r"experiment\.correctness\.emulated_factor=0: must be a number > 0"):
        compose_checked(["experiment.correctness.emulated_factor=0"])
    config, _ = compose_checked(["experiment=vae_bf16"])
    assert CorrectnessRule.from_config(config["experiment"]["correctness"]) == RULE


def test_the_unit_of_max_rel_follows_its_reference_when_it_is_written_or_replaced():
    """max|ref| is kept per reference tensor: judged again after the reference is written in place, or against a
    new tensor (which may take a freed one's id), max_rel is max|out - ref| / max|ref| of the tensor given."""
    ref = torch.tensor([1.0, -4.0, 2.0], dtype=torch.float64)
    out = torch.tensor([1.0, -4.0, 2.5], dtype=torch.float32)
    assert check_output(out, ref, 1.0).max_rel == 0.5 / 4.0
    assert check_output(out, ref, 1.0).max_rel == 0.5 / 4.0  # the kept unit
    ref.mul_(0.5)  # [0.5, -2, 1]: |out - ref| peaks at 2.0
    assert check_output(out, ref, 1.0).max_rel == 2.0 / 2.0
    ids: set[int] = set()
    for value in range(5, 50):  # each tensor dies before the next is made: a freed one's id is taken again
        ref = torch.full((3,), float(value), dtype=torch.float64)
        reused = id(ref) in ids
        ids.add(id(ref))
        assert check_output(out, ref, 1.0).max_rel == (value + 4.0) / value  # |-4 - value| over value
        del ref
        if reused:
            break
    assert reused, "no id was reused: the case this test plants did not happen"
