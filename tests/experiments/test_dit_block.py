"""DiT block chunk cards (harness.trial.dit_chunks) and the dit_block experiment: derivation from the report,
attribution of the profiled ops, variants held to the float64 reference, a planted wrong block caught."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
import yaml

from harness.api.experiment import VariantSkipped, load_experiment
from harness.boundary.spec import CorrectnessRule
from harness.cards.lint import lint_report
from harness.cards.model import Card, Kernel, load_report
from harness.cards.rules import RuleSet, classify_report
from harness.profile.cpu import CpuProfiler
from harness.run.selection import select_cards
from harness.trial.chunks import OTHER, add_chunk_cards, attribute, op_breakdown
from harness.trial.correctness import judge_baseline

CONF = Path(__file__).resolve().parents[2] / "conf" / "experiment"
BLOCK = load_experiment("experiments.dit_block")
# The report's per-rank linears at 480x832 (M = 4680 tokens / 4 ranks = 1170): the fused QKV (N = 3 x 5120),
# two 5120 x 5120 projections, the FFN's up (N = 13824) and down (K = 13824); its steady-state self-attention
# (28080 valid keys) as FlashAttention 3, the card with kernel durations.
QKV_480 = "dit-480-linear-m1170n15360k5120-444033"
OUT_480 = "dit-480-linear-m1170n5120k5120-b9770e"  # first in report order: the self-attention output
CROSS_480 = "dit-480-linear-m1170n5120k5120-27fbc4"
UP_480, DOWN_480 = "dit-480-linear-m1170n13824k5120-d65359", "dit-480-linear-m1170n5120k13824-ffde6a"
SELF_480 = "attention-480-fa3-self-28080of29640-15a0e6"
OUTSIDE_480 = {"dit-480-linear-m4680n5120k5120-8f26a7", "dit-480-linear-m3n30720k5120-c91997",
               "dit-480-linear-m4680n64k5120-c4ee1b", "attention-480-fa3-self-4680of29640-b97006"}


@pytest.fixture(scope="module")
def report():
    return add_chunk_cards(classify_report(lint_report(load_report()).normalized, RuleSet.from_config(None)))


def _chunk(report, height: str) -> Card:
    return next(c for c in report.cards if c.op_kind == "dit_block" and c.resolution.startswith(height))


def test_one_block_card_per_resolution_contains_the_rank_s_dit_cards(report):
    assert sorted(c.resolution for c in report.cards if c.op_kind == "dit_block") == ["480x832", "704x1280"]
    chunk = _chunk(report, "480")
    assert chunk.extra["contains"] == [QKV_480, OUT_480, CROSS_480, UP_480, DOWN_480, SELF_480]
    assert not OUTSIDE_480 & set(chunk.extra["contains"])
    ops = chunk.extra["chunk"]["ops"]
    assert ops[QKV_480]["modules"] == ["attn1.to_q", "attn1.to_k", "attn1.to_v"]
    assert ops[QKV_480]["calls_per_chunk"] == 1
    assert ops[CROSS_480]["calls_per_chunk"] == 2  # the cross-attention's query and output projections
    assert "attention-480-fa3-self-4680of29640-b97006" in chunk.extra["chunk"]["first_chunk_only"]
    assert chunk.shape_parameters == {"tokens": 1170, "ranks": 4, "valid_keys": 28080, "allocated_keys": 29640,
                                      "text_tokens": 512, "grid": [3, 30, 52]}
    assert chunk.summed_kernel_us is None  # the report's dit stage total must not count the block twice
    # At 704x1280 the rank has 2640 tokens, and the report has a cross-attention card (512 text keys).
    at_704 = _chunk(report, "704")
    assert at_704.shape_parameters["tokens"] == 2640 and at_704.shape_parameters["valid_keys"] == 63360
    assert "attention-704-fa3-cross-512of512-55bfe1" in at_704.extra["contains"]


def test_the_default_cards_are_the_smallest_block_on_a_cpu(report):
    rule = yaml.safe_load((CONF / "dit_block.yaml").read_text())["experiment"]["default_cards"]
    chosen = select_cards(report, None, BLOCK, rule, "cpu")
    assert [c.id for c in chosen] == [_chunk(report, "480").id]


def _measured(report, kernels: list[tuple[str, str, list[list[int]], float]]) -> Card:
    """A measured 480 block card at scale 0.01 with these (op, top-level op, its shapes, dur_us) kernels."""
    chunk = _chunk(report, "480")
    shape = {"tokens": 12, "ranks": 4, "valid_keys": 281, "allocated_keys": 296, "text_tokens": 16}
    card = Card(group=chunk.group, resolution=chunk.resolution, stage="dit", op="dit_block",
                shape_parameters=chunk.shape_parameters, kernels=[],
                extra={"id": chunk.id, "contains": chunk.extra["contains"], "chunk": chunk.extra["chunk"],
                       "workload": {"shape": shape}})
    for name, within, shapes, dur in kernels:
        card.kernels.append(Kernel(name=name, metrics={"dur_us": dur},
                                   extra={"within": within, "within_shapes": shapes}))
    return card


SDPA_SELF = [[1, 10, 48, 128], [1, 10, 281, 128], [1, 10, 281, 128]]
SDPA_CROSS = [[1, 10, 48, 128], [1, 10, 16, 128], [1, 10, 16, 128]]


def test_kernels_go_to_the_card_of_their_module_or_attention_shape(report):
    before = _measured(report, [("aten::addmm", "dit_block/attn1.to_k", [], 100.0),
                                ("aten::addmm", "dit_block/attn2.to_out.0", [], 40.0),
                                ("aten::addmm", "dit_block/attn2.to_k", [], 30.0),  # text rows: no card
                                ("aten::_scaled_dot_product_flash_attention_for_cpu",
                                 "aten::scaled_dot_product_attention", SDPA_SELF, 50.0),
                                ("aten::_scaled_dot_product_flash_attention_for_cpu",
                                 "aten::scaled_dot_product_attention", SDPA_CROSS, 5.0),
                                ("aten::layer_norm", "aten::layer_norm", [[1, 12, 5120]], 7.0)])
    after = _measured(report, [("aten::addmm", "dit_block/attn1.to_k", [], 60.0),
                               ("aten::cat", "aten::cat", [], 3.0)])
    times = attribute(before)
    assert times[QKV_480] == 100.0  # to_k is part of the fused QKV card
    assert times[CROSS_480] == 40.0 and times[SELF_480] == 50.0
    assert times[OTHER] == 30.0 + 5.0 + 7.0  # the text K/V and (no card at 480) the cross-attention
    assert before.kernels[0].extra["report_card"] == QKV_480
    breakdown = op_breakdown(before, after)
    assert breakdown[-1]["card"] == OTHER and len(breakdown) == 7
    assert sum(e["before_us"] for e in breakdown) == pytest.approx(232.0)
    assert sum(e["after_us"] for e in breakdown) == pytest.approx(63.0)


@pytest.fixture(scope="module")
def rank0(report):
    pytest.importorskip("diffusers", reason="the chunk extra (pip install -e '.[chunk]') is not installed")
    from harness.workloads import build_for_card

    workload = build_for_card(_chunk(report, "480"), dtype="bfloat16", scale=0.01)
    section = yaml.safe_load((CONF / "dit_block.yaml").read_text())["experiment"]["correctness"]
    rule = CorrectnessRule.from_config(section)
    reference = workload.reference()
    standard, _ = judge_baseline(BLOCK.prepare("bf16_eager", workload, {}).fn(), reference, rule,
                                 workload.reduction_length)
    return workload, reference, standard


def test_the_profile_names_each_linear_s_module_and_adds_up(rank0, report):
    workload, _, _ = rank0
    profile = CpuProfiler(calls=1).profile(workload.run, workload.facts())
    card = _measured(report, [])
    card.kernels = profile.kernels
    times = attribute(card)
    assert {QKV_480, OUT_480, CROSS_480, UP_480, DOWN_480, SELF_480} <= {c for c, t in times.items() if t > 0}
    assert sum(times.values()) == pytest.approx(sum(k.metric("dur_us") or 0.0 for k in profile.kernels))


@pytest.mark.parametrize("variant, params", [("fp32_gemms", {"weight_layout": "nk"}),
                                             ("fp32_gemms", {"weight_layout": "kn"}),
                                             ("sdpa_backend", {"backend": "math"}),
                                             ("modulation_once", {})])
def test_variants_compute_the_same_block(rank0, variant, params):
    workload, reference, standard = rank0
    prepared = BLOCK.prepare(variant, workload, params)
    verdict = standard.judge(prepared.fn(), reference, precision=prepared.precision)
    assert verdict.feasible, verdict


def test_a_backend_the_cpu_lacks_is_skipped_and_compile_is_not_drawn_there(rank0):
    workload, _, _ = rank0
    with pytest.raises(VariantSkipped, match="efficient"):
        BLOCK.prepare("sdpa_backend", workload, {"backend": "efficient"})
    assert "29 s" in BLOCK.unmet_needs("cpu")["compiled"]
    assert "compiled" not in BLOCK.unmet_needs("cuda")


def _planted(workload, wrong: str):
    """The block with one planted mistake: the FFN's input norm skipped, or the self-attention branch dropped."""
    module = copy.deepcopy(workload.module)
    block = module.block
    if wrong == "skipped_norm":
        block.norm3 = torch.nn.Identity()
    else:
        block.attn1.to_out[0].bias.data.zero_()
        block.attn1.to_out[0].weight.data.zero_()  # the self-attention branch adds nothing
    inputs = workload.inputs
    with torch.no_grad():
        return module(inputs["hidden_states"], inputs["encoder_hidden_states"], inputs["temb"])


@pytest.mark.parametrize("wrong", ["skipped_norm", "dropped_self_attention"])
def test_a_planted_wrong_block_is_caught(rank0, wrong):
    workload, reference, standard = rank0
    assert not standard.judge(_planted(workload, wrong), reference).feasible
