"""dit_output_fusion: the output head (norm_out + modulation + proj_out) as the measured workload, its float64
reference, each variant's correctness, the fold's algebra, planted bugs, the Triton kernel under the
interpreter, the workload hook in build_trial_workload, the bytes formulas and the N=64 selection."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import experiments.dit_output_fusion as fusion
from experiments.dit_output_fusion import chain
from harness.api.experiment import Experiment, ExperimentError, VariantSkipped
from harness.boundary.spec import CardSpec, CorrectnessRule
from harness.cards.lint import lint_report
from harness.cards.rules import classify_report
from harness.run.selection import SelectionError, apply_rule
from harness.trial.build import build_trial_workload
from harness.trial.correctness import judge_baseline
from harness.workloads import build_workload
from tests.triton_helpers import compile_for_hopper, interpreter_results

ROOT = Path(__file__).resolve().parents[2]
RULE = CorrectnessRule(same_factor=4, lowered_factor=4)  # conf/experiment/dit_output_fusion.yaml
PROJ_OUT_480 = "dit-480-linear-m4680n64k5120-c4ee1b"
PROJ_OUT_704 = "dit-704-linear-m10560n64k5120-e3422b"
OTHER_LINEAR = "dit-480-linear-m3n5120k5120-d55d81"


def _head(m: int = 48, k: int = 256, dtype: str = "bfloat16"):
    card_op = build_workload("linear", {"M": m, "N": 64, "K": k}, device="cpu", dtype=dtype, scale=1.0, seed=0)
    return fusion.EXPERIMENT.measured_workload(card_op)


@pytest.fixture(scope="module")
def head():
    return _head()


@pytest.fixture(scope="module")
def standard(head):
    reference = head.reference()
    std, baseline = judge_baseline(fusion.EXPERIMENT.prepare("eager_chain", head, {}).fn(), reference, RULE,
                                   head.reduction_length)
    assert baseline.feasible
    return std, reference


def _by_row(table: torch.Tensor, rows: int) -> torch.Tensor:
    """Row r gets frame r // (rows / frames): written out with an index, not repeat_interleave."""
    frame = torch.arange(rows) // (rows // table.shape[0])
    return table[frame]


# ---------------------------------------------------------------------------------------------
# The measured workload and its reference


def test_the_reference_is_the_chain_by_torchs_float64_layer_norm(head):
    hidden, shift, scale, weight, bias = (head.inputs[n] for n in ("hidden", "shift", "scale", "weight", "bias"))
    rows, k = hidden.shape
    assert shift.shape == scale.shape == (3, k) and shift.dtype == torch.float32  # per latent frame, fp32
    normed = F.layer_norm(hidden.double(), (k,), eps=1e-6)
    expected = F.linear(normed * (1 + _by_row(scale.double(), rows)) + _by_row(shift.double(), rows),
                        weight.double(), bias.double())
    assert torch.allclose(head.reference(), expected, rtol=0, atol=1e-10)
    # and not the card's op alone: the producer changes the output by the order of the output
    alone = F.linear(hidden.double(), weight.double(), bias.double())
    assert (alone - expected).abs().max() > 0.3 * expected.abs().max()


def test_flops_and_minimum_bytes_by_hand():
    w = _head(m=6, k=8)
    # activation read once 6*8*2 = 96, W 64*8*2 = 1024, b 64*2 = 128, shift+scale 2*3*8*4 = 192, y 6*64*2 = 768
    assert w.min_bytes == 2208
    assert w.flops == 2 * 6 * 64 * 8 + 7 * 6 * 8  # GEMM + norm (5) and modulation (2) per element
    assert any("extended with its producer" in note for note in w.notes)


def test_unfused_and_fused_bytes_of_the_report_card_by_hand():
    """M=4680, K=5120: the activation is 23,961,600 elements; diffusers' passes move 38 B each, fused 2."""
    fixed = 64 * 5120 * 2 + 64 * 2 + 2 * 3 * 5120 * 4 + 4680 * 64 * 2  # W, b, shift/scale, y = 1,377,408
    assert fixed == 1_377_408
    assert chain.min_bytes(4680, 5120, 64, 3, chain.EAGER_PASSES) == 910_540_800 + 1_377_408
    assert chain.min_bytes(4680, 5120, 64, 3, chain.FUSED_PASSES) == 47_923_200 + 1_377_408  # the report's 48 MB


# ---------------------------------------------------------------------------------------------
# Variants on the CPU


@pytest.mark.parametrize("variant,params", [("eager_chain", {}), ("folded", {"fold_when": "once"}),
                                            ("folded", {"fold_when": "per_call"}), ("compiled", {"mode": "default"})])
def test_each_cpu_variant_is_correct(head, standard, variant, params):
    std, reference = standard
    try:
        prepared = fusion.EXPERIMENT.prepare(variant, head, params)
    except VariantSkipped as exc:  # torch.compile without a working C++ compiler
        pytest.skip(str(exc))
    out = prepared.fn()
    assert out.dtype == torch.bfloat16 and out.shape == (48, 64)
    verdict = std.judge(out, reference, precision=prepared.precision)
    assert verdict.feasible, verdict.note
    assert prepared.facts["min_bytes"] > 0 and prepared.facts["activation_passes"]


def test_the_fold_is_exact_algebra_in_float64(head):
    hidden, shift, scale, weight, bias = (head.inputs[n].double()
                                          for n in ("hidden", "shift", "scale", "weight", "bias"))
    folded_weight, folded_bias = fusion.fold(weight, bias, shift, scale)
    assert folded_weight.dtype == torch.float64 and folded_weight.shape == (3, 64, 256)
    normed = F.layer_norm(hidden, (256,), eps=1e-6)
    rows = hidden.shape[0]
    modulated = F.linear(normed * (1 + _by_row(scale, rows)) + _by_row(shift, rows), weight, bias)
    by_fold = torch.cat([F.linear(block, folded_weight[f], folded_bias[f])
                         for f, block in enumerate(normed.split(rows // 3))])
    assert torch.allclose(by_fold, modulated, rtol=0, atol=1e-12)
    assert torch.allclose(fusion.folded_head(hidden, folded_weight, folded_bias), modulated, rtol=0, atol=1e-12)


@pytest.mark.parametrize("drop", ["shift", "scale", "modulation"])
def test_a_planted_wrong_head_is_caught(head, standard, drop):
    std, reference = standard
    hidden, shift, scale, weight, bias = chain.chain_inputs(head)
    zero = torch.zeros_like(shift)
    shift_used = zero if drop in ("shift", "modulation") else shift
    scale_used = zero if drop in ("scale", "modulation") else scale
    wrong = chain.eager_chain(hidden, shift_used, scale_used, weight, bias)
    verdict = std.judge(wrong, reference)
    assert not verdict.feasible and verdict.max_rel > 0.1


def test_variants_refuse_a_card_that_is_not_the_output_projection():
    card_op = build_workload("linear", {"M": 3, "N": 256, "K": 128}, device="cpu", dtype="bfloat16", scale=1.0, seed=0)
    w = fusion.EXPERIMENT.measured_workload(card_op)
    assert w is card_op  # not extended
    assert torch.equal(fusion.EXPERIMENT.prepare("eager_chain", w, {}).fn(), card_op.run())
    for variant in ("folded", "compiled", "triton_fused"):
        with pytest.raises(VariantSkipped, match="not the DiT output projection \\(N=256, not 64\\)"):
            fusion.EXPERIMENT.prepare(variant, w, {})
    # At a CPU scale N=256 shrinks to 64: still not the output projection.
    scaled = build_workload("linear", {"M": 300, "N": 256, "K": 128}, device="cpu", dtype="bfloat16", scale=0.25)
    assert scaled.shape["N"] == 64 and fusion.EXPERIMENT.measured_workload(scaled) is scaled


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU skip")
def test_triton_variant_needs_cuda_and_prunes_tiles_that_cannot_launch(head):
    assert "triton_fused" in fusion.EXPERIMENT.unmet_needs("cpu")
    with pytest.raises(VariantSkipped, match="needs CUDA"):
        fusion.triton_fused(head)
    with pytest.raises(VariantSkipped, match="cannot launch: BLOCK_M=8"):
        fusion.triton_fused(head, BLOCK_M=8)


# ---------------------------------------------------------------------------------------------
# The hook, as the worker and the ncu child build a trial


def test_the_hook_registers_once_and_is_applied_by_build_trial_workload(seed_report):
    plain = Experiment(name="x", op_kinds=("linear",), hypothesis="h", check="bytes_and_time_fall",
                       workload_dtype="bfloat16")
    with pytest.raises(ExperimentError, match="workload registered twice"):
        fusion.EXPERIMENT.workload(chain.extend_with_producer)
    card = seed_report.card(PROJ_OUT_480)
    spec = CardSpec(card=card.to_dict(), experiment_module="experiments.dit_output_fusion", device="cpu",
                    scale=0.05)
    workload, carried = build_trial_workload(spec, card, fusion.EXPERIMENT)
    hidden, shift, scale, weight, bias = chain.chain_inputs(carried)
    assert hidden.shape == (234, 5120) and shift.shape == (3, 5120)
    normed = F.layer_norm(hidden.double(), (5120,), eps=1e-6)
    expected = F.linear(normed * (1 + _by_row(scale.double(), 234)) + _by_row(shift.double(), 234),
                        weight.double(), bias.double())
    assert torch.allclose(workload.reference(), expected, rtol=0, atol=1e-9)
    # The same card for an experiment without the hook: its own op.
    card_op, _ = build_trial_workload(spec, card, plain)
    assert set(card_op.inputs) == {"x", "weight", "bias"} and torch.equal(card_op.inputs["x"], hidden)
    assert torch.allclose(card_op.reference(), F.linear(hidden.double(), weight.double(), bias.double()))


# ---------------------------------------------------------------------------------------------
# Evidence and selection


def test_annotate_puts_formula_bytes_next_to_the_profilers(seed_report, head):
    card = copy.deepcopy(seed_report.card(PROJ_OUT_480))  # the report's kernels: ncu DRAM bytes
    profiled = sum((k.metric("dram_read_mb") or 0) + (k.metric("dram_write_mb") or 0) for k in card.kernels) * 1e6
    card.extra["variant"] = {"min_bytes": 2208.0 * 4, "per_call_us": 2.0}
    fusion.add_fusion_bytes(card, _head(m=6, k=8))
    evidence = card.extra["fusion_bytes"]
    # m=6, k=8: fixed 1024 + 128 + 192 + 768 = 2112; unfused 48 x 38 = 1824 more, fused 48 x 2 = 96
    assert evidence["unfused_min_bytes"] == 2112 + 1824 and evidence["fused_min_bytes"] == 2112 + 96
    assert evidence["variant_over_unfused"] == pytest.approx(8832 / 3936)
    assert evidence["profiled_dram_bytes"] == pytest.approx(profiled) and profiled > 0
    assert evidence["min_bytes_gbps"] == pytest.approx(8832 / 2.0 / 1e3)


def test_default_cards_are_the_two_n64_projections(seed_report):
    import yaml

    report = classify_report(lint_report(seed_report).normalized)
    rule = yaml.safe_load((ROOT / "conf/experiment/dit_output_fusion.yaml").read_text())["experiment"]["default_cards"]
    kwargs = {"op_kinds": fusion.EXPERIMENT.op_kinds, "experiment_classes": fusion.EXPERIMENT.classes}
    assert sorted(c.id for c in apply_rule(report, rule, device="cuda", **kwargs)) == [PROJ_OUT_480, PROJ_OUT_704]
    assert [c.id for c in apply_rule(report, rule, device="cpu", **kwargs)] == [PROJ_OUT_480]
    assert OTHER_LINEAR in {c.id for c in apply_rule(report, {"class": "experiment"}, device="cuda", **kwargs)}
    assert apply_rule(report, {"shape": {"N": 64, "K": 144}}, device="cuda") == []
    for bad in ({"N": [64]}, 64, {}):
        with pytest.raises(SelectionError, match="shape="):
            apply_rule(report, {"shape": bad}, device="cpu")


# ---------------------------------------------------------------------------------------------
# The Triton kernel without a GPU

_INTERPRETER_SCRIPT = r"""
import json, math, torch
from experiments.dit_output_fusion.chain import EPS, chain_reference
from experiments.dit_output_fusion.kernel import fused_head
from harness.trial.correctness import check_output

cases = [  # rows, K, frames, BLOCK_M, BLOCK_K
    (48, 200, 3, 16, 64),   # K not a multiple of BLOCK_K: a partial last slab in both passes
    (30, 128, 1, 16, 32),   # one shift/scale pair; a ragged last block of rows
    (60, 96, 3, 16, 32),    # frames of 20 rows: blocks of 16 straddle the frame boundaries
]
results = []
for dtype in (torch.float32, torch.float16):
    for rows, k, frames, block_m, block_k in cases:
        gen = torch.Generator().manual_seed(0)
        hidden = (torch.randn(rows, k, generator=gen) * 3 + 2).to(dtype)  # a mean far from 0
        weight = (torch.randn(64, k, generator=gen) / math.sqrt(k)).to(dtype)
        bias = torch.randn(64, generator=gen).to(dtype)
        shift = torch.randn(frames, k, generator=gen)
        scale = torch.randn(frames, k, generator=gen) * 0.5
        for b in (bias, None):
            y, _ = fused_head(hidden, shift, scale, weight, b, EPS, block_m, block_k, 4, 2)
            ref = chain_reference(hidden, shift, scale, weight, b, torch.float64)
            c = check_output(y, ref, 1e-5 if dtype == torch.float32 else 1e-2)
            results.append({"case": [rows, k, frames, str(dtype), b is not None], "dtype_ok": y.dtype == dtype,
                            "max_rel": c.max_rel, "feasible": c.feasible})
print("RESULTS " + json.dumps(results))
"""


@pytest.mark.triton
def test_fused_triton_kernel_in_the_interpreter():
    """Triton's interpreter runs the kernel on CPU tensors (float32/float16: the interpreter's tl.dot
    multiplies bf16 bit patterns). It must be on before triton is first imported, hence a child process."""
    results = interpreter_results(_INTERPRETER_SCRIPT, timeout=600)
    assert len(results) == 12
    bad = [r for r in results if not (r["feasible"] and r["dtype_ok"])]
    assert not bad, bad


@pytest.mark.triton
def test_fused_kernel_compiles_for_hopper_in_bf16_within_the_launch_estimate():
    """Ahead-of-time sm_90 compile (Triton's bundled ptxas, no GPU) of the space's largest tile in bf16, the
    dtype the interpreter cannot check: bf16 tensor-core MMAs, and no more shared memory than the launch
    check (harness.api.tiles) assumed, so a tile it lets through does not fail at launch for shared memory."""
    pytest.importorskip("triton")
    from experiments.dit_output_fusion import kernel
    from harness.api.tiles import HOPPER, TileConfig, launch_problem

    block_m, block_k, stages, warps = 64, 256, 3, 8
    config = TileConfig(block_m, 64, block_k, 1, stages, warps)
    assert launch_problem(config, 2) is None
    names = ["h_ptr", "shift_ptr", "scale_ptr", "w_ptr", "bias_ptr", "y_ptr", "M", "K", "rows_per_frame",
             "stride_hm", "stride_mod", "stride_wn", "stride_ym", "eps"]
    values = {"M": 4680, "K": 5120, "rows_per_frame": 1560, "stride_hm": 5120, "stride_mod": 5120,
              "stride_wn": 5120, "stride_ym": 64}
    signature = {name: ("*fp32" if name in ("shift_ptr", "scale_ptr") else "*bf16") if name.endswith("_ptr")
                 else "fp32" if name == "eps" else "i32" for name in names}
    constants = {"HAS_BIAS": True, "N": 64, "BLOCK_M": block_m, "BLOCK_K": block_k, "INPUT_PRECISION": "ieee"}
    signature.update({name: "constexpr" for name in constants})
    compiled = compile_for_hopper(kernel._norm_modulate_project_kernel, signature, values, constants, warps, stages)
    assert re.search(r"(wgmma\.mma_async|mma\.sync)\S*bf16", compiled.asm["ptx"])
    assert 0 < compiled.metadata.shared <= config.smem_bytes(2) <= HOPPER.smem_per_block_optin
