"""One typed trial spec for the run, the worker and the ncu child: it carries the card, so a child rebuilds a
trial on a card the report does not hold (a derived chunk card, a round-2 card) without re-reading it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from harness.cards.lint import lint_report
from harness.cards.model import load_report
from harness.chunks import add_chunk_cards
from harness.experiment import load_experiment
from harness.profile.ncu_backend import trial_folder
from harness.trial_spec import TrialSpec, build_trial_workload

CONV = "vae-480-conv3d-96to96k333t6-13c157"


def test_the_spec_survives_json_and_refuses_unknown_keys():
    card = load_report().card(CONV)
    spec = TrialSpec(card=card.to_dict(), experiment_module="experiments.vae_channels_last", device="cpu",
                     scale=0.1, attention={"heads": 10}, applied=[{"experiment": "x"}])
    trial = spec.for_trial("channels_last_3d", {"a": 1}, "trial")
    again = TrialSpec.from_json(json.loads(json.dumps(trial.to_json())))
    assert again == trial and again.card_id == CONV and again.load_card().id == CONV
    assert (spec.variant, spec.role) == (None, "baseline")  # for_trial made a new spec
    with pytest.raises(ValueError, match="unknown keys report"):
        TrialSpec.from_json({**spec.to_json(), "report": None})


def test_a_chunk_card_not_in_the_report_is_rebuilt_from_the_spec_alone(tmp_path: Path):
    report = load_report()
    chunk = next(c for c in add_chunk_cards(lint_report(report).normalized).cards if c.op_kind == "vae_decode")
    assert chunk.id not in {c.id for c in report.cards}
    adopted = {chunk.extra["contains"][0]: [{"experiment": "e", "module": "m", "variant": "v", "carries": {}}]}
    spec = TrialSpec(card=chunk.to_dict(), experiment_module="experiments.vae_decode_chunk", device="cpu", scale=0.04,
                     adopted=adopted)
    rebuilt = TrialSpec.from_json(json.loads(json.dumps(spec.to_json())))
    experiment = load_experiment(rebuilt.experiment_module)
    workload, _ = build_trial_workload(rebuilt, rebuilt.load_card(), experiment)
    assert workload.op_kind == "vae_decode"
    assert list(workload.inputs["latent"].shape)[:2] == [1, 16]  # the Wan 2.1 latent: 16 channels
    assert workload.adopted == adopted  # what compose_from's runs adopted reaches the chunk's variants


def test_ncu_trial_folders_are_named_by_card_role_variant_and_params(tmp_path: Path):
    spec = TrialSpec(card=load_report().card(CONV).to_dict(), experiment_module="m", device="cuda", scale=1.0)
    first = trial_folder(tmp_path, spec.for_trial("triton_conv", {"BLOCK_M": 64}, "trial"))
    second = trial_folder(tmp_path, spec.for_trial("ncdhw", {}, "baseline"))
    assert first.parent == second.parent == tmp_path / CONV
    assert re.fullmatch(r"000_trial_triton_conv_[0-9a-f]{8}", first.name)  # params by their hash
    assert second.name == "001_baseline_ncdhw"
