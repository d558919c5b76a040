"""Rounds: best.json's applied variants rebuild round 2's baseline and the inputs its variants start from."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import experiments.vae_bf16 as vae_bf16
import experiments.vae_channels_last as vae_channels_last
from harness.api.experiment import ExperimentError, Prepared, load_experiment
from harness.report.recipe import render_recipe
from harness.trial.rounds import AppliedVariant, RoundError, applied_entry, applied_of, carry, round_baseline
from harness.workloads.registry import build_workload

LAST = torch.channels_last_3d
CONV = {"input": [1, 8, 3, 6, 6], "weight": [8, 8, 3, 3, 3]}


@pytest.fixture()
def conv():
    return build_workload("conv3d", CONV, device="cpu", dtype="float32", scale=1.0, seed=0)


def _adopted(experiment, variant: str, workload, params=None) -> AppliedVariant:
    """The applied entry a run records for `variant` (what round 1 writes into best.json)."""
    prepared = experiment.EXPERIMENT.prepare(variant, workload, dict(params or {}))
    facts = {"carries": prepared.carries, "recipe": prepared.recipe}
    return applied_entry(experiment=experiment.EXPERIMENT.name, module=experiment.__name__, variant=variant,
                         params=params or {}, facts=facts, workload_dtype="float32",
                         confirmation={"speedup": 1.3, "ci": [1.2, 1.4]}, run="/runs/one")


def test_channels_last_carries_its_layout_and_the_reference_stays_the_models(conv):
    entry = _adopted(vae_channels_last, "channels_last_3d", conv)
    assert entry.carries == {"input": {"memory_format": "channels_last_3d"},
                                "weight": {"memory_format": "channels_last_3d"}}
    carried = carry(conv, [entry])
    assert carried.inputs["input"].is_contiguous(memory_format=LAST)
    assert carried.inputs["weight"].is_contiguous(memory_format=LAST)
    assert carried.layout == "channels_last_3d" and not conv.inputs["input"].is_contiguous(memory_format=LAST)
    assert torch.equal(carried.reference(), conv.reference())  # judged against the model's own op


def test_round_two_baseline_is_round_ones_adopted_variant(conv):
    entry = _adopted(vae_channels_last, "channels_last_3d", conv)
    baseline, prepared_on = round_baseline(conv, [entry], load_experiment)
    assert prepared_on.inputs["input"] is conv.inputs["input"]  # no earlier carry: the inputs as built
    adopted = vae_channels_last.EXPERIMENT.prepare("channels_last_3d", conv, {})
    assert torch.equal(baseline.fn(), adopted.fn())
    assert baseline.carries == adopted.carries and baseline.recipe == adopted.recipe


def test_bf16_composes_on_channels_last_inputs(conv, monkeypatch):
    seen = []
    monkeypatch.setattr(vae_bf16, "_cpu_has_bf16_math", lambda: True)  # prepared here, never run
    monkeypatch.setattr(vae_bf16, "F", SimpleNamespace(conv3d=lambda x, weight, *rest: seen.append((x, weight))))
    carried = carry(conv, [_adopted(vae_channels_last, "channels_last_3d", conv)])
    prepared = vae_bf16.EXPERIMENT.prepare("low_precision", carried, {"dtype": "bfloat16"})
    prepared.fn()
    x, weight = seen[0]
    assert x.dtype == torch.bfloat16
    assert x.is_contiguous(memory_format=LAST) and weight.is_contiguous(memory_format=LAST)
    # On round 1's plain inputs the same variant stays NCDHW: it takes the layout it is given.
    vae_bf16.EXPERIMENT.prepare("low_precision", conv, {"dtype": "bfloat16"}).fn()
    assert not seen[1][0].is_contiguous(memory_format=LAST)
    assert prepared.carries["input"] == {"dtype": "bfloat16"} and "vae.decoder.to(torch.bfloat16)" in prepared.recipe


def test_a_dtype_carry_keeps_an_earlier_layout(conv):
    layout = _adopted(vae_channels_last, "channels_last_3d", conv)
    dtype = dataclasses.replace(layout, variant="low_precision", carries={"input": {"dtype": "bfloat16"}})
    carried = carry(conv, [layout, dtype])
    assert carried.inputs["input"].dtype == torch.bfloat16 and carried.inputs["input"].is_contiguous(memory_format=LAST)
    assert carried.inputs["weight"].dtype == torch.float32


def test_an_entry_reads_back_as_best_json_keeps_it():
    """The 12 keys a kept card's entry has had since rounds began (experiment, module, variant, params, carries,
    recipe, workload_dtype, math, precision, speedup, ci, run): read typed, written back the same."""
    written = {"experiment": "vae_bf16", "module": "experiments.vae_bf16", "variant": "low_precision",
               "params": {"dtype": "bfloat16"}, "carries": {"input": {"dtype": "bfloat16"}},
               "recipe": "vae.decoder.to(torch.bfloat16)", "workload_dtype": "float32", "math": "tf32",
               "precision": "bfloat16", "speedup": 1.8, "ci": [1.75, 1.85], "run": "/runs/one"}
    [entry] = applied_of({"applied": [written]})
    assert entry.as_dict() == written
    assert entry.label == "vae_bf16: low_precision(dtype=bfloat16)" and entry.carries["input"]["dtype"] == "bfloat16"
    sparse = applied_of({"applied": [{"experiment": "e", "module": "m", "variant": "v", "speedup": None}]})[0]
    assert (sparse.params, sparse.carries, sparse.speedup, sparse.label) == ({}, {}, None, "e: v")


def test_malformed_applied_lists_and_carries_are_one_line_errors(conv):
    with pytest.raises(RoundError, match="extra.applied must be a list"):
        applied_of({"applied": [{"variant": "x"}]})  # no module: cannot be rebuilt
    with pytest.raises(RoundError, match="extra.applied must be a list"):
        applied_of({"applied": {"variant": "x"}})
    with pytest.raises(RoundError, match="unknown keys layout in the entry of v"):
        applied_of({"applied": [{"experiment": "e", "module": "m", "variant": "v", "layout": "nhwc"}]})
    assert applied_of({}) == []
    with pytest.raises(ExperimentError, match="unknown key"):
        Prepared(lambda: None, carries={"input": {"layout": "channels_last_3d"}})
    with pytest.raises(ExperimentError, match="dtype"):
        Prepared(lambda: None, carries={"input": {"dtype": "bf17"}})
    gone = dataclasses.replace(_adopted(vae_channels_last, "channels_last_3d", conv), module="no_such_module_here")
    with pytest.raises(RoundError, match="cannot be rebuilt"):
        round_baseline(conv, [gone], load_experiment)


def test_recipe_lists_each_adopted_variant_with_its_lines(seed_report, conv, tmp_path: Path):
    card = copy.deepcopy(seed_report.card("vae-480-conv3d-96to3k333t6-04a8d9"))
    adopted = dataclasses.replace(_adopted(vae_channels_last, "channels_last_3d", conv), run=str(tmp_path.resolve()))
    card.extra["applied"] = [adopted.as_dict()]
    card.extra["environment"] = {"device_name": "cpu-a"}
    untouched = seed_report.card("vae-480-conv3d-384to384k333t4-51b31e")
    text = render_recipe([card, untouched], tmp_path)
    assert "**vae_channels_last: channels_last_3d**: 1.30x (95% interval 1.20x to 1.40x), adopted in this run" in text
    assert "> vae.decoder.to(memory_format=torch.channels_last_3d)" in text
    assert "input channels_last_3d; weight channels_last_3d" in text
    assert f"`{untouched.id}`" in text.split("## Nothing adopted")[1]
