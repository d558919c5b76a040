"""The dit_block chunk workload: one Wan 14B block on one Ulysses rank, checked against diffusers itself."""

from __future__ import annotations

import sys

import pytest
import torch

from harness.api.numerics import unit_roundoff
from harness.workloads import build_workload, plan_workload
from harness.workloads.dit_block import ScopedLinear, block_linears
from harness.workloads.params import WorkloadError

# The report's 480x832 DiT block on one rank (docs/domain.md): 4680 tokens per chunk over 4 Ulysses ranks,
# the steady-state KV cache of the attention card (28080 valid of 29640 slots), 512 text tokens.
AT_480 = {"tokens": 1170, "ranks": 4, "valid_keys": 28080, "allocated_keys": 29640, "text_tokens": 512,
          "grid": [3, 30, 52]}
DIM, FFN, HEADS, HEAD_DIM = 5120, 13824, 40, 128  # Wan 14B (docs/domain.md)


def test_plan_counts_the_blocks_flops_from_its_dims():
    plan = plan_workload("dit_block", AT_480, dtype="bfloat16")
    # Per token: q, k, v, the self-attention output, the cross-attention query and output (six 5120 x 5120)
    # and the FFN's two 5120 x 13824; the text's k and v (512 rows); attention over 28080 + 512 keys for the
    # chunk's 4680 queries on the rank's 10 heads.
    linears = 2 * 1170 * (6 * DIM * DIM + 2 * DIM * FFN) + 2 * 512 * 2 * DIM * DIM
    attention = 4 * 4680 * 10 * HEAD_DIM * (28080 + 512)
    assert plan.flops == linears + attention
    assert plan.output_shape == (1, 1170, DIM)
    assert plan.reduction_length == 28080  # the softmax over the valid keys is longer than the FFN's K
    scaled = plan_workload("dit_block", AT_480, scale=0.01)
    assert scaled.shape["tokens"] == 12  # round(11.7)
    assert scaled.shape["valid_keys"] == 281 and scaled.shape["allocated_keys"] == 296
    assert scaled.shape["text_tokens"] == 16  # round(5.12) is below the floor of 16
    assert scaled.original_shape == {**AT_480}


def test_bad_shapes_are_one_line_errors():
    with pytest.raises(WorkloadError, match="valid_keys"):
        plan_workload("dit_block", {**AT_480, "valid_keys": 100})  # fewer keys than the chunk's own 4680
    with pytest.raises(WorkloadError, match="ranks=3"):
        plan_workload("dit_block", {**AT_480, "ranks": 3})
    with pytest.raises(WorkloadError, match="grid"):
        plan_workload("dit_block", {k: v for k, v in AT_480.items() if k != "grid"})


def test_without_diffusers_the_build_names_the_pip_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "diffusers.models.transformers", None)  # import then raises ImportError
    with pytest.raises(WorkloadError, match=r"pip install"):
        build_workload("dit_block", AT_480, scale=0.01)


@pytest.fixture(scope="module")
def one_rank():
    """A float32 block with every head on one rank and an empty cache: then nothing is synthetic, and the
    rank's block must be diffusers' block with its own attention processor."""
    pytest.importorskip("diffusers", reason="the chunk extra (pip install -e '.[chunk]') is not installed")
    shape = {"tokens": 6, "ranks": 1, "valid_keys": 6, "allocated_keys": 6, "text_tokens": 5, "grid": [1, 2, 3]}
    rng = torch.random.get_rng_state()
    workload = build_workload("dit_block", shape, dtype="float32", seed=5)
    assert torch.equal(torch.random.get_rng_state(), rng)  # the seeded weights left the caller's RNG alone
    return workload


def test_the_block_has_diffusers_modules_in_the_wan_14b_dims(one_rank):
    block = one_rank.module.block
    assert sum(p.numel() for p in block.parameters()) == 351_394_304  # diffusers' WanTransformerBlock(5120, 13824, 40)
    assert block.attn1.heads == block.attn2.heads == HEADS
    linears = {name: m for name, m in block.named_modules() if isinstance(m, torch.nn.Linear)}
    assert all(isinstance(m, ScopedLinear) for m in linears.values())
    listed = [module for group in block_linears() for module in group.modules]
    assert sorted(listed) == sorted(linears)  # every linear of the block is in a report-card group
    for group in block_linears():
        for name in group.modules:
            n = group.n // len(group.modules) if group.fused else group.n
            assert (linears[name].out_features, linears[name].in_features) == (n, group.k)
    assert block.attn1.norm_q.normalized_shape == (DIM,)  # rms_norm_across_heads: one norm over all 40 heads


def test_one_rank_is_diffusers_block_as_is(one_rank):
    from diffusers.models.transformers.transformer_wan import (
        WanAttnProcessor,
        WanTransformerBlock,
    )

    stock = WanTransformerBlock(DIM, FFN, HEADS, "rms_norm_across_heads", True, 1e-6).eval()
    stock.load_state_dict(one_rank.module.block.state_dict())
    inputs = one_rank.inputs
    with torch.no_grad():
        expected = stock(inputs["hidden_states"], inputs["encoder_hidden_states"], inputs["temb"],
                         (one_rank.module.rope_cos, one_rank.module.rope_sin))
    for attn in (stock.attn1, stock.attn2):
        assert isinstance(attn.processor, WanAttnProcessor)
    out = one_rank.run()
    assert (out - expected).abs().max() <= 1e-5 * expected.abs().max()
    ref = one_rank.reference()
    assert ref.dtype == torch.float64
    assert (out.double() - ref).abs().max() / ref.abs().max() < 1e-4  # float32 rounding only


def test_a_redraw_draws_the_tokens_and_the_timestep_and_keeps_the_model_and_context(one_rank):
    assert one_rank.activations == ("hidden_states", "timestep_proj")
    one = one_rank.redraw(1)
    assert one.module is one_rank.module
    assert one.inputs["encoder_hidden_states"] is one_rank.inputs["encoder_hidden_states"]
    for name in one_rank.activations:
        assert not torch.equal(one.inputs[name], one_rank.inputs[name])
    # temb follows the redrawn projection: the grid's one frame holds all 6 tokens, each taking its row
    assert torch.equal(one.inputs["temb"], one.inputs["timestep_proj"][:, [0] * 6])
    with torch.no_grad():
        expected = one_rank.module(one.inputs["hidden_states"], one.inputs["encoder_hidden_states"],
                                   one.inputs["timestep_proj"].expand(-1, 6, -1, -1))
    out = one.run()
    assert torch.equal(out, expected)
    ref = one.reference()
    assert (out.double() - ref).abs().max() / ref.abs().max() < 1e-4  # float32 rounding only
    with pytest.raises(WorkloadError, match="dit_block: batching calls does not apply"):
        one_rank.calls(2)


@pytest.fixture(scope="module")
def rank0():
    pytest.importorskip("diffusers", reason="the chunk extra (pip install -e '.[chunk]') is not installed")
    return build_workload("dit_block", AT_480, dtype="bfloat16", scale=0.01, seed=1)


def test_rank0_runs_in_bf16_with_the_fp32_modules_diffusers_keeps(rank0):
    block = rank0.module.block
    assert block.attn1.to_q.weight.dtype == torch.bfloat16
    assert block.scale_shift_table.dtype == block.norm2.weight.dtype == torch.float32
    # The all-to-all's stand-ins: the other 3 ranks' 36 tokens on this rank's 10 heads; the other 30 heads
    # of this rank's 12 tokens.
    assert tuple(block.attn1.others_q.shape) == (1, 36, 10, HEAD_DIM)
    assert tuple(block.attn1.others_out.shape) == (1, 12, 30, HEAD_DIM)
    assert tuple(block.attn1.cache_k.shape) == (1, 10, 296, HEAD_DIM)
    out = rank0.run()
    assert tuple(out.shape) == (1, 12, DIM) and out.dtype == torch.bfloat16
    assert torch.equal(rank0.run(), out)  # the cache write is the same every call
    error = ((out.double() - rank0.reference()).abs().max() / rank0.reference().abs().max()).item()
    assert 0 < error < 4 * unit_roundoff(torch.bfloat16)  # a few bf16 roundings, not a wrong block
