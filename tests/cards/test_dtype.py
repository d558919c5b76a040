"""A card's dtype and math mode (harness.cards.dtype): the evidence order, kernel names, the report's declaration."""

from __future__ import annotations

import copy

import pytest

from harness.cards.applied import AppliedVariant
from harness.cards.dtype import (
    APPLIED,
    CAPTURED,
    CONFIG,
    DEFAULT,
    KERNELS,
    REPORT,
    DtypeError,
    card_dtype,
    decide,
    declared_rules,
    kernel_evidence,
    parse_declaration,
    tf32_pins,
)
from harness.cards.model import load_report

# Real kernel names: the report's (tests' seed) and the H200 run's (tests/fixtures/h200_baselines).
NAMES = {
    "sm90_xmma_fprop_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x128x32": ("float32", "tf32"),
    "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize64x128x8_stage3_warpsize1x4x1_ffma_aligna4": ("float32", "ieee"),
    "void gemmSN_TN_kernel<float, 128, 16, 2, 4, 4, 4, 0>(cublasGemmSmallNParams)": ("float32", "ieee"),
    "fmha_cutlassF_f32_aligned_64x128_rf_sm80(AttentionKernel<float>)": ("float32", "ieee"),
    "sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize256x64x64": ("bfloat16", "native"),
    "ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn": ("float16", "native"),
    "sm90_xmma_gemm_e4m3e4m3_e4m3f32_f32_tn_n_tilesize128x128x128": ("float8_e4m3fn", "native"),
}


@pytest.mark.parametrize("name", sorted(NAMES))
def test_kernel_names_say_the_dtype(name):
    dtype, math, said = kernel_evidence("aten.linear.default", [name])
    assert (dtype, math) == NAMES[name] and said


def test_names_without_a_dtype_say_nothing_and_flash_attention_is_half():
    assert kernel_evidence("aten.linear.default", ["nvjet_sm90_tst_128x192_64x5_2x1_v_bz_coopB_bias_TNN"]) is None
    assert kernel_evidence("aten.to.dtype", ["void unrolled_elementwise_kernel<direct_copy>(int)"]) is None
    assert kernel_evidence("flash_attn_v3", ["void device_kernel, cute::C<1>"])[0] == "half"


def test_every_card_of_the_shipped_report_gets_the_dtype_it_evidences():
    report = load_report()
    declared = declared_rules(report.extra)
    by_op: dict[str, set[tuple[str, str]]] = {}
    for card in report.cards:
        decided = card_dtype(card, applied=[], override=None, declared=declared, experiment_dtype="float32")
        assert decided.source in (KERNELS, REPORT), card.id  # never the experiment's guess
        by_op.setdefault(card.op, set()).add((decided.dtype, decided.math))
    # docs/domain.md: DiT linears and attention in bf16, the VAE in fp32 with TF32 (cuDNN), the casts' fp32 source
    assert by_op == {"aten.linear.default": {("bfloat16", "native")},
                     "aten.conv3d.default": {("float32", "tf32")},
                     "flash_attn_v2": {("bfloat16", "native")}, "flash_attn_v3": {("bfloat16", "native")},
                     "aten.to.dtype": {("float32", "native")}}


def test_the_order_of_evidence():
    report = load_report()
    card = copy.deepcopy(report.card("vae-480-conv3d-96to3k333t3-842ecd"))
    declared = declared_rules(report.extra)

    def decided(**changes):
        args = dict(applied=[], override=None, declared=declared, experiment_dtype="bfloat16")
        return card_dtype(card, **{**args, **changes})

    assert (decided().dtype, decided().source, decided().math) == ("float32", KERNELS, "tf32")
    assert decided(override="bf16").source == CONFIG and decided(override="bf16").dtype == "bfloat16"
    assert decided(override="tf32").math == "tf32"
    round1 = [AppliedVariant(experiment="vae_bf16", module="experiments.vae_bf16", variant="low_precision",
                             workload_dtype="float16", math="native")]
    assert (decided(applied=round1, override="bf16").dtype, decided(applied=round1).source) == ("float16", APPLIED)
    card.shape_parameters = {**card.shape_parameters, "input_dtype": "float16"}
    assert (decided().dtype, decided().source) == ("float16", CAPTURED)
    card.shape_parameters.pop("input_dtype")
    card.kernels, card.dominant_kernel = [], None
    assert (decided().dtype, decided().source) == ("float32", REPORT)  # the VAE's declaration
    guess = decided(declared=[])
    assert (guess.dtype, guess.source, guess.guessed) == ("bfloat16", DEFAULT, True)
    assert "workload.dtype" in guess.evidence


def test_a_report_whose_kernels_say_fp16_is_built_in_fp16():
    report = load_report()
    card = copy.deepcopy(report.card("vae-480-conv3d-96to3k333t3-842ecd"))
    for kernel in card.kernels:
        kernel.name = kernel.name.replace("tf32f32_tf32f32_f32", "f16f16_f16f16_f32")
    card.dominant_kernel = card.kernels[0].name if card.kernels else None
    decided = card_dtype(card, applied=[], override=None, declared=[], experiment_dtype="float32")
    assert (decided.dtype, decided.source) == ("float16", KERNELS)


def test_tf32_permission_follows_the_evidence():
    assert tf32_pins("ieee", "conv3d")["cudnn.allow_tf32"] is False
    assert tf32_pins("tf32", "conv3d")["cudnn.allow_tf32"] is True
    assert tf32_pins("tf32", "linear")["cuda.matmul.allow_tf32"] is True
    assert tf32_pins("ieee", "linear")["cuda.matmul.allow_tf32"] is False
    assert tf32_pins("native", "linear") == {} and tf32_pins("tf32", "chunk") == {}


def test_a_bad_declaration_or_dtype_is_one_line():
    with pytest.raises(DtypeError, match=r"precision\[0\]: give at least a dtype"):
        parse_declaration([{"stage": "dit"}], "r.json")
    with pytest.raises(DtypeError, match="math 'fast'"):
        parse_declaration([{"dtype": "float32", "math": "fast"}], "r.json")
    with pytest.raises(DtypeError, match="workload.dtype: unknown dtype 'float13'"):
        decide(stage="dit", op="aten.linear.default", op_kind="linear", kernel_names=[], shape_parameters={},
               applied=[], override="float13", declared=[], experiment_dtype="float32")
