"""One typed request per kind for the run, the worker and the ncu child, the card requests carrying the card's
spec, so a child rebuilds a trial on a card the report does not hold (a derived chunk card, a round-2 card)
without re-reading it; and one typed reply per kind, with one table from its status to Optuna's state and the
summary's list."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from harness.api.experiment import load_experiment
from harness.boundary.framing import read_reply, read_request, reply_line, request_line
from harness.boundary.outcomes import OUTCOMES, TrialStatus
from harness.boundary.replies import Confirmed, Judgement, Measured, SideRounds
from harness.boundary.requests import Confirm, ConfirmPlan, Measure, Retime
from harness.boundary.spec import AttentionSettings, CardSpec, TimingSettings
from harness.cards.applied import AppliedVariant
from harness.cards.disturbance import RoundTiming
from harness.cards.lint import lint_report
from harness.cards.measured import TrialLabel
from harness.cards.model import load_report
from harness.cards.rules import DEFAULT_ORDER, RuleSet
from harness.profile.ncu_backend import trial_folder
from harness.trial.build import build_trial_workload
from harness.trial.chunks import add_chunk_cards

CONV = "vae-480-conv3d-96to96k333t6-13c157"


def test_the_spec_survives_json_and_refuses_unknown_keys():
    card = load_report().card(CONV)
    applied = AppliedVariant(experiment="x", module="m", variant="v", carries={"input": {"dtype": "bfloat16"}})
    spec = CardSpec(card=card.to_dict(), experiment_module="experiments.vae_channels_last", device="cpu",
                    scale=0.1, attention=AttentionSettings(heads=10), applied=[applied],
                    rules=RuleSet.from_config({"order": list(reversed(DEFAULT_ORDER))}))
    trial = Measure(spec=spec, variant="channels_last_3d", params={"a": 1}, card_path="t.json")
    again, log_path = read_request(request_line(trial, "worker.log"))
    assert again == trial and again.spec.card_id == CONV and again.spec.load_card().id == CONV
    assert again.spec.rules.order == tuple(reversed(DEFAULT_ORDER))  # the run's rules, typed on both sides
    assert isinstance(again, Measure) and not again.baseline and log_path == "worker.log"
    line = json.loads(request_line(trial))
    line["request"]["spec"]["report"] = None
    with pytest.raises(ValueError, match="unknown keys report"):
        read_request(json.dumps(line).encode())


def test_a_trials_label_crosses_the_pipe_typed_and_the_card_keeps_only_what_it_says():
    card = load_report().card(CONV)
    spec = CardSpec(card=card.to_dict(), experiment_module="experiments.vae_channels_last", device="cpu", scale=0.1)
    label = TrialLabel(experiment="vae_channels_last", variant="channels_last_3d", params={"a": 1}, role="trial",
                       run="/runs/x", builds_on=["vae_bf16: bf16"], trial=3)
    again, _ = read_request(request_line(Measure(spec=spec, variant="channels_last_3d", label=label,
                                                 card_path="t.json")))
    assert isinstance(again, Measure) and isinstance(again.label, TrialLabel) and again.label == label
    assert label.as_dict() == {"experiment": "vae_channels_last", "variant": "channels_last_3d", "params": {"a": 1},
                               "role": "trial", "run": "/runs/x", "builds_on": ["vae_bf16: bf16"], "trial": 3}
    record = label.as_dict()
    record["params"]["a"] = 2  # the card's record is its own: writing on it leaves the label as it was
    assert label.params == {"a": 1}


def test_a_request_with_its_timing_and_confirm_plan_survives_json_and_keys_its_workload():
    card = load_report().card(CONV)
    spec = CardSpec(card=card.to_dict(), experiment_module="experiments.vae_channels_last", device="cpu", scale=0.1,
                    timing=TimingSettings(warmup=None, min_repeats=3, budget_s=0.1), reference_path="/r.pt")
    plan = ConfirmPlan("channels_last_3d", {}, 8, 24, 0.05, 0.1, "b.json", "t.json", "b.json", "tried.json")
    confirm = Confirm(spec=spec, plan=plan)
    again, _ = read_request(request_line(confirm))
    assert again == confirm and isinstance(again, Confirm) and again.plan == plan
    retime = Retime(spec=spec, timing=TimingSettings(warmup=1))
    assert read_request(request_line(retime))[0] == retime
    # One built workload serves every request of the card: only what builds it is in the key.
    assert again.spec.workload_key() == spec.workload_key()
    assert replace(spec, timing=TimingSettings(warmup=1)).workload_key() == spec.workload_key()
    assert replace(spec, scale=0.2).workload_key() != spec.workload_key()


def test_results_survive_json_and_every_status_has_one_meaning():
    judged = Judgement(1e-3, 2e-3, 1e-3, "given", 1e-6, "same", False, "stale")
    result = Measured(TrialStatus.INFEASIBLE, reason=judged.why_infeasible(), card_path="c.json", median_us=8.0,
                      per_call_us=2.0, calls=4, judgement=judged, seconds={"timing_s": 1.0})
    again = read_reply(reply_line(result), Measured)
    assert again == result and not again.ok
    rounds = Confirmed(TrialStatus.COMPLETE,
                       baseline_rounds=SideRounds([RoundTiming(1.0, 1.1, 3), RoundTiming(2.0, 2.5, 4)], 1, 1, 7),
                       tried_rounds=SideRounds([RoundTiming(0.5, 0.5, 3), RoundTiming(0.6, 0.7, 3)], 4))
    assert read_reply(reply_line(rounds), Confirmed) == rounds
    assert judged.why_infeasible() == "max_rel 0.002 > bound 0.001 (stale)"
    assert set(OUTCOMES) == set(TrialStatus)  # the table is complete
    assert {s for s, o in OUTCOMES.items() if o.optuna_state == "COMPLETE"} == {TrialStatus.COMPLETE}
    assert {s for s, o in OUTCOMES.items() if o.restarts_worker} == {TrialStatus.CRASHED, TrialStatus.DEADLINE}
    assert OUTCOMES[TrialStatus.INFEASIBLE].summary == "infeasible"
    assert OUTCOMES[TrialStatus.OOM].optuna_state == "FAIL"


def test_a_chunk_card_not_in_the_report_is_rebuilt_from_the_spec_alone(tmp_path: Path):
    report = load_report()
    chunk = next(c for c in add_chunk_cards(lint_report(report).normalized).cards if c.op_kind == "vae_decode")
    assert chunk.id not in {c.id for c in report.cards}
    adopted = {chunk.extra["contains"][0]: [AppliedVariant(experiment="e", module="m", variant="v")]}
    spec = CardSpec(card=chunk.to_dict(), experiment_module="experiments.vae_decode_chunk", device="cpu", scale=0.04,
                    adopted=adopted)
    request, _ = read_request(request_line(Retime(spec=spec, timing=TimingSettings())))
    rebuilt = request.spec
    experiment = load_experiment(rebuilt.experiment_module)
    workload, _ = build_trial_workload(rebuilt, rebuilt.load_card(), experiment)
    assert workload.op_kind == "vae_decode"
    assert list(workload.inputs["latent"].shape)[:2] == [1, 16]  # the Wan 2.1 latent: 16 channels
    assert workload.adopted == adopted  # what compose_from's runs adopted reaches the chunk's variants


def test_ncu_trial_folders_are_named_by_card_role_variant_and_params(tmp_path: Path):
    spec = CardSpec(card=load_report().card(CONV).to_dict(), experiment_module="m", device="cuda", scale=1.0)
    trial = Measure(spec=spec, variant="triton_conv", params={"BLOCK_M": 64}, card_path="t.json")
    first = trial_folder(tmp_path, trial)
    second = trial_folder(tmp_path, Measure(spec=spec, variant="ncdhw", baseline=True, card_path="b.json"))
    assert first.parent == second.parent == tmp_path / CONV
    assert re.fullmatch(r"000_trial_triton_conv_[0-9a-f]{8}", first.name)  # params by their hash
    assert second.name == "001_baseline_ncdhw"


def test_a_captured_card_is_built_in_the_dtype_it_was_captured_in():
    """harness.capture writes input_dtype: the model's own op, whatever dtype the experiment builds others in."""
    card = load_report().card("dit-480-linear-m3n5120k256-ff7b7c")
    card.shape_parameters = {**card.shape_parameters, "input_dtype": "float64"}
    reprofile = load_experiment("experiments.reprofile")  # builds in float32
    spec = CardSpec(card=card.to_dict(), experiment_module="experiments.reprofile", device="cpu", scale=0.05)
    workload, _ = build_trial_workload(spec, spec.load_card(), reprofile)
    assert reprofile.workload_dtype == "float32" and str(workload.dtype) == "torch.float64"
    adopted = [AppliedVariant(experiment="e", module="m", variant="v", workload_dtype="bfloat16")]
    later, _ = build_trial_workload(replace(spec, applied=adopted), spec.load_card(), reprofile)
    assert str(later.dtype) == "torch.bfloat16"  # round 2 starts from round 1's inputs
