"""Card selection: ids, or rules that work on any report (harness.run.selection)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from harness.api.experiment import load_experiment
from harness.cards.lint import lint_report
from harness.cards.model import Report
from harness.cards.rules import classify_report
from harness.run.selection import SelectionError, apply_rule, pick_cards, select_cards
from harness.trial.chunks import add_chunk_cards

CONF = Path(__file__).resolve().parents[1] / "conf" / "experiment"


@pytest.fixture(scope="module")
def report(seed_report):
    return classify_report(lint_report(seed_report).normalized)


def _other_report(report: Report, keep) -> Report:
    """A report the project has never seen: some of the shipped cards, every id renamed."""
    cards = []
    for card in report.cards:
        if keep(card):
            renamed = copy.deepcopy(card)
            renamed.extra["id"] = "other-" + card.id
            cards.append(renamed)
    return Report(cards=cards)


def _time(card) -> float:
    return card.summed_kernel_us or 0.0


def test_costliest_takes_the_largest_summed_times_of_the_experiments_op_kind(report):
    conv = load_experiment("experiments.vae_channels_last")
    chosen = apply_rule(report, {"costliest": 3, "resolution": "smallest"}, device="cpu", op_kinds=conv.op_kinds)
    at_480 = sorted((c for c in report.cards if c.op_kind == "conv3d" and c.resolution == "480x832"),
                    key=_time, reverse=True)
    assert [c.id for c in chosen] == [c.id for c in at_480[:3]]
    assert all(c.op_kind == "conv3d" for c in chosen)


def test_smallest_on_cpu_covers_every_resolution_on_a_gpu(report):
    rule = {"op_kind": "cast", "resolution": "smallest_on_cpu"}
    on_cpu = apply_rule(report, rule, device="cpu")
    on_gpu = apply_rule(report, rule, device="cuda:0")
    assert {c.resolution for c in on_cpu} == {"480x832"}
    assert {c.resolution for c in on_gpu} == {c.resolution for c in report.cards if c.op_kind == "cast"}


def test_per_groups_and_classes(report):
    chosen = apply_rule(report, {"costliest": 1, "per": "op_kind"}, device="cuda")
    assert sorted(c.op_kind for c in chosen) == sorted({c.op_kind for c in report.cards})
    unclassified = apply_rule(report, {"class": "none"}, device="cpu")
    assert unclassified and all(c.primary is None for c in unclassified)
    stalls = load_experiment("experiments.stall_breakdown")
    both = apply_rule(report, {"class": ["experiment", "none"]}, device="cpu", experiment_classes=stalls.classes)
    assert {c.primary for c in both} == {None, *stalls.classes}


def test_cheapest_is_the_other_end(report):
    cheapest = apply_rule(report, {"op_kind": "linear", "cheapest": 1}, device="cpu")
    assert _time(cheapest[0]) == min(_time(c) for c in report.cards if c.op_kind == "linear")


def test_among_cards_the_report_gives_no_time_a_classified_one_comes_first(report):
    """The report's attention cards have no kernel time (its FA2 ones no class either): attention_backends'
    default, the cheapest card of its classes, is the FA3 card the report classified, not the first in order."""
    attention = load_experiment("experiments.attention_backends")
    section = yaml.safe_load((CONF / "attention_backends.yaml").read_text())["experiment"]
    untimed = [c for c in report.cards if c.op_kind == "attention"]
    assert untimed and all(not c.summed_kernel_us for c in untimed)  # the report's defect this rule meets
    for device in ("cpu", "cuda"):
        chosen = select_cards(report, None, attention, section["default_cards"], device)
        assert [c.op for c in chosen] == ["flash_attn_v3"] and chosen[0].primary is not None, chosen


@pytest.mark.parametrize("rule, message", [
    ({"costliest": 0}, "costliest=0"),
    ({"costliest": 2, "cheapest": 1}, "not both"),
    ({"per": "colour"}, "per='colour'"),
    ({"stages": "vae"}, "unknown key(s) ['stages']"),
])
def test_bad_rules_are_one_line(report, rule, message):
    with pytest.raises(SelectionError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        pick_cards(report, rule)


@pytest.mark.parametrize("path", sorted(CONF.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_default_selects_cards_of_a_report_never_seen(report, path):
    config = yaml.safe_load(path.read_text(encoding="utf-8"))
    # auto is a mode, not an experiment: its default rule is under auto: (harness.config.schema)
    section = config["experiment"] or config["auto"]
    assert isinstance(section["default_cards"], dict), "defaults are rules, not ids of the shipped report"
    other = _other_report(report, lambda c: c.resolution != "480x832")  # none of the shipped ids remain
    add_chunk_cards(other)  # as the run does: the chunk cards are derived from any report's vae cards
    for device in ("cpu", "cuda"):
        if section.get("module"):
            experiment = load_experiment(section["module"])
            cards = select_cards(other, None, experiment, section["default_cards"], device)
            assert cards and all(experiment.applies_to(c.op_kind) for c in cards)
        else:
            assert pick_cards(other, section["default_cards"], device=device)


def test_a_report_without_the_experiments_op_kind_says_so(report):
    only_linears = _other_report(report, lambda c: c.op_kind == "linear")
    conv = load_experiment("experiments.vae_channels_last")
    with pytest.raises(SelectionError, match="none of them conv3d"):
        select_cards(only_linears, None, conv, {"costliest": 3}, "cpu")
    with pytest.raises(SelectionError,
                       match="experiment vae_channels_last applies to conv3d, conv2d cards; not to other-dit"):
        select_cards(only_linears, [only_linears.cards[0].id], conv, None, "cpu")


@pytest.mark.slow
def test_an_experiment_runs_on_a_report_never_seen_with_no_cards_given(report, tmp_path):
    import json
    import subprocess
    import sys

    from harness.cards.model import save_report

    other = save_report(_other_report(report, lambda c: c.op_kind == "cast"), tmp_path / "other.json")
    run_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "harness", "experiment=output_cast", f"report={other}",
                           f"hydra.run.dir={run_dir}", "workload.cpu_scale=0.05", "timing.budget_s=0.05",
                           "timing.drift_budget_s=0.02", "timing.confirm_rounds=2", "search.n_trials=2"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    ran = json.loads((run_dir / "run.json").read_text())["cards"]
    expected = [c.id for c in sorted((c for c in _other_report(report, lambda c: c.op_kind == "cast").cards
                                      if c.resolution == "480x832"), key=_time, reverse=True)[:2]]
    assert ran == expected  # the rule's two costliest casts of the smallest resolution, on a CPU
