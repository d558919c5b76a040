"""The same workloads on CUDA (skipped without a GPU)."""

from __future__ import annotations

import pytest
import torch

from harness.workloads import build_for_card

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


@pytest.mark.parametrize("dtype,tol", [("float32", 2e-2), ("bfloat16", 6e-2)])
def test_one_card_per_kind_on_cuda(report, dtype, tol):
    seen = set()
    for card in report.cards:
        if card.op_kind in seen:
            continue
        seen.add(card.op_kind)
        w = build_for_card(card, report, device="cuda", dtype=dtype, scale=0.25)
        out = w.run()
        assert out.is_cuda and tuple(out.shape) == w.output_shape
        ref = w.reference()  # float64 on the GPU: no TF32
        torch.testing.assert_close(out.double(), ref, rtol=tol, atol=0 if card.op_kind == "cast" else tol)


def test_channels_last_conv_on_cuda(report):
    card = next(c for c in report.cards if c.op_kind == "conv3d" and c.shape_parameters["weight"][2:] == [3, 3, 3])
    w = build_for_card(card, report, device="cuda", scale=0.25, layout="channels_last_3d")
    assert w.inputs["input"].is_contiguous(memory_format=torch.channels_last_3d)
    assert w.inputs["weight"].is_contiguous(memory_format=torch.channels_last_3d)
    out = w.run()
    torch.testing.assert_close(out.double(), w.reference(), rtol=2e-2, atol=2e-2)


def test_synthetic_inputs_match_between_cpu_and_cuda(report):
    card = next(c for c in report.cards if c.op_kind == "linear")
    a = build_for_card(card, report, scale=0.05)
    b = build_for_card(card, report, scale=0.05, device="cuda")
    for name in a.inputs:
        assert torch.equal(a.inputs[name], b.inputs[name].cpu())
