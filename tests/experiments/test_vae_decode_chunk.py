"""Chunk cards (harness.trial.chunks) and the vae_decode_chunk experiment: derivation from the report, attribution
of the profiled ops, op_breakdown, the prediction from op cards, variants and a run end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import yaml

from harness.api.experiment import VariantSkipped, load_experiment
from harness.boundary.spec import CorrectnessRule
from harness.cards.applied import AppliedVariant
from harness.cards.lint import lint_report
from harness.cards.model import Card, Kernel, load_report
from harness.cards.rules import RuleSet, classify_report
from harness.profile.base import WorkloadFacts
from harness.profile.cpu import CpuProfiler
from harness.run.selection import select_cards
from harness.trial.chunks import OTHER, add_chunk_cards, attribute, op_breakdown, predicted_speedup
from harness.trial.correctness import judge_baseline

CONF = Path(__file__).resolve().parents[2] / "conf" / "experiment"
CHUNK = load_experiment("experiments.vae_decode_chunk")
# From the report (docs/domain.md): at full resolution the steady state convolves 2 cached + 4 new frames
# (T = 6); the first frame of a stream has no temporal upsampling yet (T = 3 everywhere).
STEADY_480 = {"vae-480-conv3d-96to96k333t6-13c157", "vae-480-conv3d-192to192k333t6-20cd1a",
              "vae-480-conv3d-96to3k333t6-04a8d9", "vae-480-conv3d-16to384k333t3-2b101e"}
FIRST_FRAME_480 = {"vae-480-conv3d-96to96k333t3-e62d2d", "vae-480-conv3d-192to384k111t1-df3c47"}


@pytest.fixture(scope="module")
def report():
    return add_chunk_cards(classify_report(lint_report(load_report()).normalized, RuleSet.from_config(None)))


def _chunk(report, height: str) -> Card:
    return next(c for c in report.cards if c.op_kind == "vae_decode" and c.resolution.startswith(height))


def test_one_chunk_card_per_resolution_lists_the_report_cards_it_runs(report):
    chunks = [c for c in report.cards if c.op_kind == "vae_decode"]
    assert sorted(c.resolution for c in chunks) == ["480x832", "704x1280"]
    chunk = _chunk(report, "480")
    contains = chunk.extra["contains"]
    assert len(contains) >= 3 and STEADY_480 <= set(contains)
    assert not FIRST_FRAME_480 & set(contains)
    assert FIRST_FRAME_480 <= set(chunk.extra["chunk"]["first_frame_only"])
    for card_id in contains:
        card = report.card(card_id)
        assert (card.stage, card.op_kind, card.resolution) == ("vae", "conv3d", "480x832")
    # The rank's latent slice: the report's conv_in input is [1, 16, 3, 62, 28], its causal pad 1 a side.
    assert chunk.shape_parameters["latent"] == [1, 16, 3, 60, 26]
    # The mid block and up block 0 run ten 384->384 3x3x3 convs per latent frame; a chunk is 3 frames.
    assert chunk.extra["chunk"]["ops"]["vae-480-conv3d-384to384k333t3-26704a"]["calls_per_chunk"] == 30
    assert chunk.summed_kernel_us is None  # the report's vae stage total must not count the VAE twice


def test_the_chunk_card_is_selected_by_its_id_without_the_hash(report):
    chosen = select_cards(report, ["vae-480-chunk-decode"], CHUNK, None, "cpu")
    assert [c.id for c in chosen] == [_chunk(report, "480").id]
    by_default = select_cards(report, None, CHUNK, yaml.safe_load((CONF / "vae_decode_chunk.yaml").read_text())
                              ["experiment"]["default_cards"], "cpu")
    assert [c.resolution for c in by_default] == ["480x832"]


def _measured(report, kernels: list[tuple[str, list[list[int]], float]]) -> Card:
    """A measured 480 chunk card of a 2x1 latent with these (name, shapes of the top-level op, dur_us) kernels."""
    chunk = _chunk(report, "480")
    card = Card(group=chunk.group, resolution=chunk.resolution, stage="vae", op="vae_decode",
                shape_parameters=chunk.shape_parameters, kernels=[], extra={
                    "id": chunk.id, "contains": chunk.extra["contains"], "chunk": chunk.extra["chunk"],
                    "workload": {"shape": {"latent": [1, 16, 1, 2, 1]}}})
    for name, shapes, dur in kernels:
        top = "aten::conv3d" if shapes else name
        card.kernels.append(Kernel(name=name, metrics={"dur_us": dur}, extra={"within": top, "within_shapes": shapes}))
    return card


# At a latent H of 2: the 96->96 convs run at 2 x 8 = 16 rows (18 padded), with 2 cached + 4 new frames.
CONV_96 = [[1, 96, 6, 18, 10], [96, 96, 3, 3, 3], [96]]
CONV_384_L0 = [[1, 384, 3, 4, 3], [384, 384, 3, 3, 3], [384]]


def test_profiled_ops_are_attributed_and_the_breakdown_adds_up(report):
    before = _measured(report, [("aten::slow_conv3d_forward(...)", CONV_96, 300.0),
                                ("aten::copy_(...) in aten::conv3d(...)", CONV_96, 20.0),
                                ("aten::slow_conv3d_forward(...)", CONV_384_L0, 100.0),
                                ("aten::silu(...)", [], 7.0)])
    after = _measured(report, [("aten::slow_conv3d_forward(...)", CONV_96, 200.0),
                               ("aten::slow_conv3d_forward(...)", CONV_384_L0, 150.0),
                               ("aten::cat(...)", [], 30.0)])
    times = attribute(before)
    assert times["vae-480-conv3d-96to96k333t6-13c157"] == 320.0  # the conv's own copy counts toward its card
    assert times["vae-480-conv3d-384to384k333t3-26704a"] == 100.0
    assert before.kernels[1].extra["report_card"] == "vae-480-conv3d-96to96k333t6-13c157"
    breakdown = op_breakdown(before, after)
    assert [e["card"] for e in breakdown][-1] == OTHER
    assert len(breakdown) == len(before.extra["contains"]) + 1
    assert sum(e["before_us"] for e in breakdown) == pytest.approx(427.0)  # every kernel, once
    assert sum(e["after_us"] for e in breakdown) == pytest.approx(380.0)
    other = breakdown[-1]
    assert (other["before_us"], other["after_us"]) == (7.0, 30.0)


def test_the_prediction_weights_each_op_card_by_its_time_in_the_chunk():
    breakdown = [{"card": "a", "before_us": 60.0}, {"card": "b", "before_us": 30.0}, {"card": OTHER, "before_us": 10.0}]
    # a twice as fast, b unmeasured (unchanged): 100 / (30 + 30 + 10).
    predicted, covered = predicted_speedup(breakdown, {"a": 2.0})
    assert predicted == pytest.approx(100 / 70) and covered == pytest.approx(0.6)


def test_a_per_shape_profile_keeps_each_shape_and_its_top_level_op():
    a, b = torch.randn(1, 4, 3, 6, 6), torch.randn(1, 4, 3, 10, 10)
    weight = torch.randn(4, 4, 3, 3, 3).contiguous(memory_format=torch.channels_last_3d)

    def chunk() -> torch.Tensor:
        return F.conv3d(a, weight).sum() + F.conv3d(b, weight).sum()

    kernels = CpuProfiler(calls=1).profile(chunk, WorkloadFacts(None, None, "float32", "vae_decode",
                                                                per_shape=True)).kernels
    within = {tuple(k.extra["within_shapes"][0]) for k in kernels if k.extra["within"] == "aten::conv3d"}
    assert within == {(1, 4, 3, 6, 6), (1, 4, 3, 10, 10)}  # two shapes of one op, kept apart
    assert any(" in aten::conv3d(" in k.name for k in kernels)  # the conv's own work, under its name


@pytest.fixture(scope="module")
def tiny():
    pytest.importorskip("diffusers", reason="the chunk extra (pip install -e '.[chunk]') is not installed")
    from harness.workloads import build_workload

    return build_workload("vae_decode", {"latent": [1, 16, 1, 1, 1]})


def test_channels_last_decodes_the_same_frames_and_says_where_the_layout_held(tiny):
    section = yaml.safe_load((CONF / "vae_decode_chunk.yaml").read_text())["experiment"]["correctness"]
    rule = CorrectnessRule.from_config(section)
    reference = tiny.reference()
    standard, _ = judge_baseline(CHUNK.prepare("ncdhw_fp32", tiny, {}).fn(), reference, rule, tiny.reduction_length)
    prepared = CHUNK.prepare("channels_last_3d", tiny, {})
    assert standard.judge(prepared.fn(), reference).feasible
    # One conv3d per causal conv and the post_quant_conv: 34 layers of decoder_layers are conv3d.
    assert prepared.facts["conv3d_inputs_channels_last"].endswith("of 34")
    assert "channels_last_3d" in prepared.recipe


def test_low_precision_is_skipped_with_the_reason_on_a_cpu_without_bf16_math(tiny, monkeypatch):
    monkeypatch.setattr("experiments.vae_decode_chunk._cpu_has_bf16_math", lambda: False)
    for variant in ("low_precision", "channels_last_low_precision"):
        with pytest.raises(VariantSkipped, match="no bf16 math"):
            CHUNK.prepare(variant, tiny, {"dtype": "bfloat16"})
        with pytest.raises(VariantSkipped, match="fp16"):
            CHUNK.prepare(variant, tiny, {"dtype": "float16"})


def _adopted(variant: str, carries: dict) -> dict:
    """An entry of a kept card's extra["applied"], as best.json has it."""
    return {"experiment": "vae_channels_last", "module": "experiments.vae_channels_last", "variant": variant,
            "params": {}, "carries": carries}


def test_composed_applies_what_the_op_card_runs_adopted(tiny, report, monkeypatch, tmp_path):
    """compose_from's best.json: a conv card that adopted channels_last_3d makes the decoder channels_last_3d
    end to end; a dtype adopted too lowers it; nothing adopted, or nothing carried, is a skip with the reason."""
    import dataclasses

    from harness.cards.applied import RoundError, adopted_in_chunk
    from harness.cards.model import Report, save_report

    conv = "vae-480-conv3d-96to96k333t6-13c157"
    kept = report.card(conv)
    kept.extra = {**kept.extra,
                  "applied": [_adopted("channels_last_3d", {"input": {"memory_format": "channels_last_3d"}})]}
    save_report(Report(cards=[kept]), tmp_path / "best.json")
    chunk = _chunk(report, "480")
    adopted = adopted_in_chunk(chunk, str(tmp_path / "best.json"))
    assert list(adopted) == [conv] and adopted[conv][0].variant == "channels_last_3d"
    assert adopted_in_chunk(report.card(conv), str(tmp_path / "best.json")) == {}  # an op card composes nothing
    with pytest.raises(RoundError, match=r"^experiment.compose_from: .*absent.json"):
        adopted_in_chunk(chunk, [str(tmp_path / "best.json"), str(tmp_path / "absent.json")])

    prepared = CHUNK.prepare("composed", dataclasses.replace(tiny, adopted=adopted), {})
    assert prepared.facts["conv3d_inputs_channels_last"].endswith("of 34") and prepared.precision is None
    assert prepared.facts["composed"] == [f"{conv}: vae_channels_last: channels_last_3d"]

    with pytest.raises(VariantSkipped, match="compose_from"):
        CHUNK.prepare("composed", tiny, {})
    plain = {conv: [AppliedVariant.from_dict(_adopted("ncdhw_tuned", {}))]}
    with pytest.raises(VariantSkipped, match="carry no layout or dtype"):
        CHUNK.prepare("composed", dataclasses.replace(tiny, adopted=plain), {})
    monkeypatch.setattr("experiments.vae_decode_chunk._cpu_has_bf16_math", lambda: True)
    lowered = {conv: [AppliedVariant.from_dict(
        _adopted("low_precision", {"input": {"dtype": "bfloat16"}, "weight": {"dtype": "bfloat16"}}))]}
    assert CHUNK.prepare("composed", dataclasses.replace(tiny, adopted=lowered), {}).precision == "bfloat16"


@pytest.mark.slow
def test_vae_decode_chunk_end_to_end(tmp_path):
    pytest.importorskip("diffusers", reason="the chunk extra (pip install -e '.[chunk]') is not installed")
    op_results = tmp_path / "op_diff.json"  # an earlier op-card run's diff.json: the 96->96 conv 2x faster
    op_results.write_text(json.dumps({"cards": [{"card": "vae-480-conv3d-96to96k333t6-13c157", "speedup": 2.0}]}))
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "experiment=vae_decode_chunk", f"hydra.run.dir={run_dir}",
         "workload.cpu_scale=0.02", "timing.budget_s=0.05", "timing.drift_budget_s=0.02", "timing.confirm_rounds=2",
         "cards=[vae-480-chunk-decode]", f"experiment.predict_from={op_results}"],
        capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    row = json.loads((run_dir / "diff.json").read_text())["cards"][0]
    assert row["card"].startswith("vae-480-chunk-decode-")
    breakdown = row["op_breakdown"]
    assert len(breakdown) >= 4 and breakdown[-1]["card"] == OTHER
    for side in ("before", "after"):
        assert sum(e[f"{side}_us"] for e in breakdown) == pytest.approx(row["kernel_sum_us"][side], rel=1e-9)
    baseline = load_report(run_dir / "baseline.json").cards[0]
    assert baseline.extra["correctness"]["max_rel"] < 1e-4
    assert any(k.extra.get("report_card") == "vae-480-conv3d-96to96k333t6-13c157" for k in baseline.kernels)
    summary = (run_dir / "summary.md").read_text()
    assert "op breakdown" in summary and "predicted from the op cards" in summary
