"""An r3d-like model's in-place calls (`ReLU(inplace=True)`, `out += identity`) captured as cards and replayed:
each replay's input is what the forward's target held before the write, its output what the forward wrote, and
the write lands in the replay's own copy."""

from __future__ import annotations

import torch

from harness.capture.pipeline import CaptureOptions, capture
from harness.cards.model import load_report
from harness.workloads.registry import build_for_card
from tests.capture.models import r3d_like


def test_in_place_calls_are_cards_whose_replay_writes_what_the_forward_wrote(tmp_path):
    out = tmp_path / "r3d"
    capture(CaptureOptions(spec="tests.capture.models:r3d_like", out=out, top=20, profile=False, repeats=1))
    report = load_report(out / "report.json")
    in_place = {(c.stage, c.op): c for c in report.cards if c.op.split(".")[1].endswith("_")}
    assert set(in_place) == {("stem", "aten.relu_.default"), ("layer1", "aten.relu_.default"),
                             ("layer1", "aten.add_.Tensor")}
    assert not report.extra["capture"]["not_replayable"]  # nothing of the forward left out as "in place"

    model, (clip,) = r3d_like()
    model.eval()
    with torch.no_grad():  # the forward's values before and after each write, step by step
        stem_in = model.stem[1](model.stem[0](clip))
        stem_out = torch.relu(stem_in)
        block = model.layer1
        first_in = block.bn1(block.conv1(stem_out))
        sum_in = block.bn2(block.conv2(torch.relu(first_in)))
    expected = {("stem", "aten.relu_.default"): (stem_in, stem_out),
                ("layer1", "aten.relu_.default"): (first_in, torch.relu(first_in)),  # the group's first call
                ("layer1", "aten.add_.Tensor"): (sum_in, sum_in + stem_out)}
    for key, (before, after) in expected.items():
        card = in_place[key]
        w = build_for_card(card, device="cpu", dtype="float32", scale=1.0, seed=0, inputs_dir=str(out / "inputs"))
        written = card.shape_parameters["writes"]
        pristine = {name: t.clone() for name, t in w.inputs.items()}
        torch.testing.assert_close(w.inputs[written], before)  # the input is the target before the write
        assert w.before_call is not None
        w.before_call()
        torch.testing.assert_close(w.run(), after)  # the output is what the forward wrote
        assert all(torch.equal(w.inputs[n], t) for n, t in pristine.items())  # into the replay's own copy
        w.before_call()
        torch.testing.assert_close(w.run(), after)  # restored: a `+=` writes the same again
