"""Every card of the shipped report builds, runs and has the right arithmetic."""

from __future__ import annotations

import json

import pytest
import torch

from harness.workloads import OP_KINDS, build_for_card, plan_for_card

SMALL = 0.02


def _ids(report):
    return [c.id for c in report.cards]


def test_every_card_has_a_known_op_kind(report):
    assert len(report.cards) == 69
    kinds = {c.op_kind for c in report.cards}
    assert kinds == set(OP_KINDS) - {"conv2d", "replay"}  # those two come from a captured model's report


def test_every_card_builds_and_runs_at_a_small_scale(report):
    for card in report.cards:
        w = build_for_card(card, report, scale=SMALL)
        out = w.run()
        assert tuple(out.shape) == w.output_shape, card.id
        assert w.scale == SMALL
        assert w.input_source == "synthetic(seed=0)"
        assert w.flops >= 0 and w.min_bytes > 0
        json.dumps(w.describe())  # JSON-able
        if w.op_kind != "cast":
            assert torch.isfinite(out).all(), card.id


def test_flops_match_nominal_mac_flops_which_are_2mnk(report):
    checked = 0
    for card in report.cards:
        if card.nominal_mac_flops is None:
            continue
        plan = plan_for_card(card, report)
        assert plan.flops == pytest.approx(card.nominal_mac_flops, rel=1e-12), card.id
        if card.op_kind == "linear":
            p = card.shape_parameters
            assert card.nominal_mac_flops == 2 * p["M"] * p["N"] * p["K"]
        checked += 1
    # every linear and conv3d card has nominal_mac_flops; attention and cast cards have none
    assert checked == sum(c.op_kind in ("linear", "conv3d") for c in report.cards)


def test_attention_flops_agree_with_fa3_time_near_peak(report):
    # FA3 at 4680 queries x 28080 keys x 10 heads ran ~919 us, "near its compute peak" (~790 TFLOP/s).
    card = next(c for c in report.cards if c.op == "flash_attn_v3" and c.shape_parameters["valid_keys"] == 28080)
    plan = plan_for_card(card, report)
    assert plan.original_shape["queries"] == 4680
    dur = card.kernel(card.dominant_kernel).metric("dur_us")
    tflops = plan.flops / (dur * 1e-6) / 1e12
    assert 600 < tflops < 800


def test_conv3d_output_matches_card_at_full_scale(report):
    for card in report.cards:
        if card.op_kind != "conv3d":
            continue
        plan = plan_for_card(card, report)
        assert list(plan.output_shape) == card.shape_parameters["output"], card.id
        assert plan.shape == plan.original_shape


def test_scaling_shrinks_large_dims_and_keeps_the_rest(report):
    conv = next(
        c for c in report.cards if c.op_kind == "conv3d" and c.shape_parameters["input"] == [1, 96, 6, 482, 210]
        and c.shape_parameters["weight"][0] == 96
    )
    w = build_for_card(conv, report, scale=0.25)
    assert w.original_shape["input"] == [1, 96, 6, 482, 210]
    assert w.shape["input"] == [1, 96, 6, 122, 54]  # output 120x52, plus the 3x3 kernel's halo
    assert w.shape["output"] == [1, 96, 4, 120, 52]
    assert w.shape["weight"] == [96, 96, 3, 3, 3]
    assert tuple(w.inputs["input"].shape) == (1, 96, 6, 122, 54)
    assert any("scaled by 0.25" in n for n in w.notes)

    small_m = next(c for c in report.cards if c.op_kind == "linear" and c.shape_parameters["M"] == 3
                   and c.shape_parameters["N"] == 30720)
    w = build_for_card(small_m, report, scale=0.1)
    assert w.shape == {"M": 3, "N": 3072, "K": 5120, "bias": True}
    assert tuple(w.inputs["weight"].shape) == (3072, 5120)

    attn = next(c for c in report.cards if c.op_kind == "attention" and c.shape_parameters["valid_keys"] == 28080)
    p = plan_for_card(attn, report, scale=0.1)
    assert (p.shape["queries"], p.shape["valid_keys"], p.shape["allocated_keys"]) == (468, 2808, 2964)
    assert p.shape["heads"] == 10 and p.shape["head_dim"] == 128


def test_cast_shape_is_full_frames_consistent_with_kernel_waves(report):
    # unrolled_elementwise_kernel: 512 elements per block, 16 blocks/SM x 132 SMs per wave.
    casts = [c for c in report.cards if c.op_kind == "cast"]
    assert len(casts) == 4
    frames = {}
    for card in casts:
        plan = plan_for_card(card, report)
        count = 1
        for d in plan.output_shape:
            count *= d
        waves = card.kernels[0].evidence["waves"]
        assert count / 512 / (16 * 132) == pytest.approx(waves, rel=0.01), card.id
        frames.setdefault(card.resolution, set()).add(plan.original_shape["shape"][2])
    assert frames == {"480x832": {9, 12}, "704x1280": {9, 12}}


def test_cast_without_report_assumes_frames_and_says_so(report):
    card = next(c for c in report.cards if c.op_kind == "cast")
    plan = plan_for_card(card)  # no report: no pair to compare with
    assert plan.original_shape["shape"][2] == 12
    assert any("assumed 12" in n for n in plan.notes)
