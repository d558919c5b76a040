"""A captured model's conv2d and replayed cards in the experiments: the conv experiments' variants on a conv2d
(the 4-D channels_last, im2col as a conv3d of one frame, the conv3d-only variants skipped with their reason),
auto's plan for replay cards, and one run of each kind through the app (vae_channels_last on a conv2d card,
reprofile on a replayed group norm: about 6 s and 4 s on a 2-core CPU)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

import experiments.vae_bf16 as vae_bf16
import experiments.vae_channels_last as vae_channels_last
import experiments.vae_conv_kernels as vc
from harness.api.experiment import VariantSkipped, load_experiment
from harness.boundary.spec import CorrectnessRule
from harness.cards.applied import AppliedVariant
from harness.cards.fields import COMPUTE_BOUND
from harness.cards.model import Card, load_report
from harness.run.auto import plan_auto
from harness.trial.correctness import Standard, judge_baseline
from harness.trial.rounds import carry
from harness.workloads import OP_KINDS, Workload, build_workload
from tests.workloads.test_replay import GROUP_NORM

CONF = Path(__file__).resolve().parents[2] / "conf" / "experiment"
SHAPE = {"input": [2, 8, 12, 10], "weight": [12, 8, 3, 3], "padding": [1, 0], "stride": [1, 2]}


def _conv2d(shape: dict[str, Any] = SHAPE) -> Workload:
    return build_workload("conv2d", shape, device="cpu", dtype="float32", scale=1.0, seed=0)


def _standard(w: Workload, experiment: str) -> tuple[Standard, torch.Tensor]:
    """What a run of `experiment` holds a variant on this workload to: its config's rule, the baseline's error."""
    section = yaml.safe_load((CONF / f"{experiment}.yaml").read_text())["experiment"]["correctness"]
    rule = CorrectnessRule.from_config(section)
    reference = w.reference()
    return judge_baseline(w.run(), reference, rule, w.reduction_length)[0], reference


@pytest.mark.parametrize("variant", ["channels_last_3d", "channels_last_input", "channels_last_weight"])
def test_channels_last_variants_take_the_4d_format_on_a_conv2d(variant):
    w = _conv2d()
    standard, reference = _standard(w, "vae_channels_last")
    prepared = vae_channels_last.EXPERIMENT.prepare(variant, w, {})
    out = prepared.fn()
    assert standard.judge(out, reference).feasible
    assert out.is_contiguous(memory_format=torch.channels_last)  # a channels_last input or weight makes it NHWC
    assert "torch.channels_last)" in str(prepared.recipe) and "channels_last_3d" not in str(prepared.recipe)
    assert prepared.carries and all(c == {"memory_format": "channels_last"} for c in prepared.carries.values())
    # A later round rebuilds the 4-D layout on the card's own workload (harness.trial.rounds.carry).
    carried = carry(w, [AppliedVariant(experiment="e", module="m", variant="v", carries=prepared.carries)])
    assert all(carried.inputs[name].is_contiguous(memory_format=torch.channels_last) for name in prepared.carries)
    conv3d = build_workload("conv3d", {"input": [1, 4, 3, 8, 8], "weight": [4, 4, 1, 3, 3]})
    assert all(c == {"memory_format": "channels_last_3d"}
               for c in vae_channels_last.EXPERIMENT.prepare(variant, conv3d, {}).carries.values())


def test_bf16_on_a_conv2d(monkeypatch):
    w = _conv2d()
    baseline = vae_bf16.EXPERIMENT.prepare("fp32", w, {})
    assert torch.equal(baseline.fn(), w.run())
    if not vae_bf16._cpu_has_bf16_math():
        with pytest.raises(VariantSkipped, match="bf16 conv2d is emulated"):
            vae_bf16.low_precision(w)
        monkeypatch.setattr(vae_bf16, "_cpu_has_bf16_math", lambda: True)  # emulated: slow, but these are tiny
    prepared = vae_bf16.low_precision(w, dtype="bfloat16", memory_format="channels_last_3d")
    out = prepared.fn()
    standard, reference = _standard(w, "vae_bf16")
    assert out.dtype == torch.bfloat16 and out.is_contiguous(memory_format=torch.channels_last)
    assert standard.judge(out, reference, precision="bfloat16").feasible
    assert prepared.carries["input"] == {"dtype": "bfloat16", "memory_format": "channels_last"}
    assert "model.to(torch.bfloat16)" in str(prepared.recipe) and "torch.channels_last)" in str(prepared.recipe)
    with pytest.raises(VariantSkipped, match="fp16 conv2d has no fast CPU kernel"):
        vae_bf16.low_precision(w, dtype="float16")


@pytest.mark.parametrize("layout", ["ncdhw", "ndhwc"])
def test_im2col_runs_a_conv2d_as_a_conv3d_of_one_frame(layout):
    w = _conv2d()
    standard, reference = _standard(w, "vae_conv_kernels")
    prepared = vc.im2col_gemm(w, layout=layout)
    out = prepared.fn()
    assert out.shape == reference.shape and standard.judge(out, reference).feasible
    assert out.is_contiguous(memory_format=torch.channels_last) == (layout == "ndhwc")
    assert prepared.facts["gemm"] == {"M": 2 * 12 * 4, "N": 12, "K": 8 * 9}  # Ho = 12, Wo = (10 - 3) // 2 + 1


def test_native_cpu_compiled_shapes_and_the_conv3d_only_variants_on_a_conv2d():
    w = _conv2d({"input": [1, 64, 40, 40], "weight": [64, 64, 3, 3]})  # large enough for oneDNN
    standard, reference = _standard(w, "vae_conv_kernels")
    baseline = vc.EXPERIMENT.prepare("fp32_ncdhw", w, {})
    assert torch.equal(baseline.fn(), w.run())
    if baseline.facts["cpu_path"] == "onednn":
        prepared = vc.native_cpu(w)
        assert prepared.facts["cpu_path"] == "native" and standard.judge(prepared.fn(), reference).feasible
    for variant, params, why in [("frame_batching", {"k": 2}, "conv3d only: it batches a conv3d's streaming"),
                                 ("triton_implicit_gemm", {}, "conv3d only: our Triton implicit GEMM"),
                                 ("cudnn_algorithm", {}, "needs CUDA")]:
        with pytest.raises(VariantSkipped, match=why) as info:
            vc.EXPERIMENT.prepare(variant, w, params)
        assert "\n" not in str(info.value)
    card = Card(group="g", resolution="64x64", stage="vae", op="aten.conv2d.default", shape_parameters={},
                kernels=[], extra={"variant": {"calls": 1}, "torch_state": {}})
    vc.add_conv_evidence(card, w)
    assert card.extra["conv"]["gemm_per_invocation"] == {"M": 38 * 38, "N": 64, "K": 64 * 9}


def _card(op: str, primary: str | None, **extra: Any) -> Card:
    return Card(group=f"vae:{op}:x", resolution="64x64", stage="vae", op=op, shape_parameters={}, kernels=[],
                primary=primary, extra=extra)


def test_auto_plans_conv2d_and_replay_cards_by_class():
    configs = {p.stem: yaml.safe_load(p.read_text())["experiment"] for p in CONF.glob("*.yaml")
               if p.stem not in ("auto", "reprofile")}
    experiments = {name: load_experiment(cfg["module"], cfg["name"]) for name, cfg in configs.items()}
    conv2d = _card("aten.conv2d.default", COMPUTE_BOUND)
    replay_bound = _card("aten.group_norm.default", COMPUTE_BOUND, op_kind="replay")
    replay_unresolved = _card("aten.silu.default", None, op_kind="replay")
    plan = plan_auto([conv2d, replay_bound, replay_unresolved], experiments)
    chosen = {name for name, cards in plan.by_experiment.items() if conv2d in cards}
    assert chosen == {"vae_conv_kernels", "vae_channels_last", "vae_bf16"}
    # No experiment tests a replayed op's proposal: listed as such, not dropped.
    assert plan.unmatched[replay_bound.id] == "no experiment claims replay cards of class compute_bound"
    assert [name for name, cards in plan.by_experiment.items() if replay_unresolved in cards] == ["stall_breakdown"]
    for name in ("reprofile", "stall_breakdown"):
        module = __import__(f"experiments.{name}", fromlist=["EXPERIMENT"])
        assert all(module.EXPERIMENT.applies_to(kind) for kind in OP_KINDS) and "replay" in OP_KINDS


CONV2D_CARD = {"group": "vae:aten.conv2d.default:tiny", "resolution": "64x64", "stage": "vae",
               "op": "aten.conv2d.default", "kernels": [],
               "shape_parameters": {"input": [1, 16, 32, 32], "weight": [16, 16, 3, 3], "output": [1, 16, 32, 32],
                                    "stride": [1, 1], "padding": [1, 1], "dilation": [1, 1], "groups": 1}}
REPLAY_CARD = {"group": "vae:aten.group_norm.default:tiny", "resolution": "64x64", "stage": "vae",
               "op": "aten.group_norm.default", "op_kind": "replay", "kernels": [], "shape_parameters": GROUP_NORM}
TINY = ["workload.cpu_scale=0.5", "timing.budget_s=0.05", "timing.confirm_rounds=1", "search.n_trials=2"]


@pytest.mark.slow
@pytest.mark.parametrize("experiment, index", [("vae_channels_last", 0), ("reprofile", 1)])
def test_a_captured_card_runs_through_the_app(tmp_path, experiment, index):
    report = tmp_path / "captured.json"
    report.write_text(json.dumps({"cards": [CONV2D_CARD, REPLAY_CARD]}))
    card = load_report(report).cards[index]
    assert card.op_kind == ("conv2d", "replay")[index]
    run = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "harness", f"report={report}", f"experiment={experiment}",
                           f"cards=[{card.id}]", f"hydra.run.dir={run}", *TINY],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"`{card.id}`" in (run / "summary.md").read_text()
    measured = load_report(run / "baseline.json").cards[0]
    assert measured.id == card.id and measured.extra["correctness"]["feasible"]
    assert measured.extra["workload"]["op_kind"] == card.op_kind
