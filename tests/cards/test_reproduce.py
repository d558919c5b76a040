"""`python -m harness.report reproduce` on the first H200 GPU check's own baselines (tests/fixtures/h200_baselines),
and its rules on planted cards. The expected verdicts are what that run showed by its kernel names and times
(issue 29): conv3d and cast ran the report's cuDNN/copy kernels within 5%, the float32 linears and attention ran
fp32 cuBLAS and the memory-efficient backend in place of bf16 nvjet and FlashAttention 3."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from harness.cards.model import Card, Kernel, load_report
from harness.cards.reproduce import Reproduction, headline, reported_device, reproduce, reproduce_card
from harness.report.cli import main

H200 = Path(__file__).parents[1] / "fixtures" / "h200_baselines"
EXPECTED = {
    "reproduction.json": {
        "dit-480-linear-m4680n5120k5120-8f26a7": "OTHER_KERNELS",
        "dit-480-linear-m3n5120k5120-d55d81": "OTHER_KERNELS",
        "vae-480-conv3d-96to3k333t3-842ecd": "REPRODUCED",
        "attention-480-fa3-self-4680of29640-b97006": "OTHER_KERNELS",
        "output-480-cast-f18982": "REPRODUCED",
    },
    "reprofile_ncu.json": {
        "dit-480-linear-m3n5120k256-ff7b7c": "OTHER_KERNELS",
        "vae-480-conv3d-16to16k111t3-9507c7": "REPRODUCED",
        "attention-704-fa3-cross-512of512-55bfe1": "OTHER_KERNELS",
        "output-480-cast-f18982": "REPRODUCED",
    },
}


@pytest.mark.parametrize("run", sorted(EXPECTED))
def test_the_h200_baselines_get_their_verdicts(run, capsys):
    assert main(["reproduce", str(H200 / run), "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["report_device"] == "H200"  # declared beside the shipped report
    got = {c["card"]: c for c in answer["cards"]}
    assert {k: v["verdict"] for k, v in got.items()} == EXPECTED[run]
    for card in got.values():
        assert set(card) >= {"verdict", "families_report", "families_here", "time_ratio", "class_report",
                             "class_here", "class_compared", "reason"}
    if run == "reproduction.json":
        linear = got["dit-480-linear-m4680n5120k5120-8f26a7"]
        assert linear["families_report"] == ["nvjet"] and linear["families_here"] == ["xmma_gemm"]
        assert linear["time_ratio"] == pytest.approx(4977.89 / 292.448, rel=1e-3)  # the run's 17.02x
        assert "float32" in linear["reason"]
        assert not any(c["class_compared"] for c in got.values())  # a CUDA trace's classes are estimates
        # FA3's damaged report name (`void device_kernel, cute::C<1>`) still reads as its family
        assert "device_kernel" in got["attention-480-fa3-self-4680of29640-b97006"]["families_report"]
    else:
        conv = got["vae-480-conv3d-16to16k111t3-9507c7"]
        assert conv["class_compared"] and conv["time_ratio"] == pytest.approx(8.576 / 8.512, rel=1e-3)


def _planted(device: str = "NVIDIA H200", kind: str = "cuda", names=("nvjet_sm90_tst_64x8",), dur: float = 10.0,
             source: str = "ncu") -> Card:
    report = load_report()
    card = copy.deepcopy(report.card("dit-480-linear-m3n5120k256-ff7b7c"))
    card.kernels = [Kernel(name=n, metrics={"dur_us": dur / len(names)}, classification=None, rule=None,
                           evidence=None, extra={"metrics_source": source}) for n in names]
    card.summed_kernel_us = dur
    card.extra["environment"] = {"device_name": device, "device_kind": kind}
    card.extra["metrics_source"] = source
    return card


def test_the_rules_on_planted_cards():
    report = load_report()
    base = report.card("dit-480-linear-m3n5120k256-ff7b7c")
    t = base.summed_kernel_us
    assert reproduce_card(_planted(dur=t * 1.14), base, "H200").verdict is Reproduction.REPRODUCED
    assert reproduce_card(_planted(dur=t * 1.16), base, "H200").verdict is Reproduction.OTHER_SPEED
    assert reproduce_card(_planted(dur=t * 0.84), base, "H200").verdict is Reproduction.OTHER_SPEED
    other = reproduce_card(_planted(names=("void gemmSN_TN_kernel<float, 128>(int)",), dur=t), base, "H200")
    assert other.verdict is Reproduction.OTHER_KERNELS and "gemmSN_TN_kernel" in other.reason
    h100 = reproduce_card(_planted(device="NVIDIA H100 80GB HBM3"), base, "H200")
    assert h100.verdict is Reproduction.NOT_COMPARABLE and "H100" in h100.reason
    cpu = reproduce_card(_planted(device="Xeon", kind="cpu", source="cpu_estimate"), base, "H200")
    assert cpu.verdict is Reproduction.NOT_COMPARABLE and "estimates" in cpu.reason
    # a family under 5% of the time (a bias add beside the GEMM) does not make another op
    small = _planted(names=("nvjet_sm90_tst_64x8",) * 24 + ("void at::elementwise_kernel<128>(int)",), dur=t * 25 / 24)
    assert reproduce_card(small, base, "H200").verdict is Reproduction.REPRODUCED


def test_headline_names_the_cards_that_ran_other_kernels():
    results = reproduce(load_report(H200 / "reprofile_ncu.json"), load_report())
    line = headline(results)
    assert line is not None and line.startswith("2 of 4 baseline card(s) ran other kernels")
    assert "no saving is projected" in line
    conv_only = [r for r in results if r.verdict is Reproduction.REPRODUCED]
    assert headline(conv_only) is None


def test_bad_input_is_one_line(tmp_path, capsys):
    assert main(["reproduce", str(tmp_path / "missing.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1


def test_a_gpu_run_page_leads_with_the_verdicts_and_projects_nothing_from_other_kernels(tmp_path):
    from harness.cards.model import save_report
    from harness.report.html import render_run_html
    from harness.report.overview import CardResult

    measured = load_report(H200 / "reprofile_ncu.json")
    save_report(measured, tmp_path / "baseline.json")
    results = reproduce(measured, load_report())
    (tmp_path / "reproduction.json").write_text(json.dumps({"report_device": "H200",
                                                            "cards": [r.as_dict() for r in results]}))
    page = render_run_html(tmp_path)
    head = page[:page.index("<h2>Reproduction") + 3000]
    assert "Reproduction of the report (H200)" in head
    assert head.count("OTHER_KERNELS") == 2 and head.count("REPRODUCED") == 2
    linear = measured.card("dit-480-linear-m3n5120k256-ff7b7c")
    report_card = load_report().card(linear.id)
    linear.extra["workload"]["scale"] = 1.0
    on_h200 = CardResult(card=report_card, experiment="reprofile", variant=None, diff=None, measured=linear)
    assert on_h200.projectable("H200") == (True, "")
    other = CardResult(card=report_card, experiment="reprofile", variant=None, diff=None, measured=linear,
                       other_kernels=True)
    assert other.projectable("H200")[0] is False and "OTHER_KERNELS" in other.projectable("H200")[1]


def test_the_fairness_note_names_what_differs_never_a_missing_machine():
    from harness.cards.diff import diff_cards

    report = load_report()
    device = reported_device(report)  # H200: the shipped report's declaration
    measured = load_report(H200 / "reprofile_ncu.json")
    linear = measured.card("dit-480-linear-m3n5120k256-ff7b7c")
    d = diff_cards(report.card(linear.id), linear, check="effective_flops", report_device=device)
    assert not d.fair and "kernels: the report ran nvjet, here gemmSN_TN_kernel" in d.fairness_note
    conv = measured.card("vae-480-conv3d-16to16k111t3-9507c7")
    d = diff_cards(report.card(conv.id), conv, check="effective_flops", report_device=device)
    assert d.fair and "H200" in d.fairness_note and "only one side records" not in d.fairness_note
    # Declared another GPU, the same re-profile is not a fair comparison, and the note names both devices.
    d = diff_cards(report.card(conv.id), conv, check="effective_flops", report_device="H100")
    assert not d.fair and "device: the report's H100 vs NVIDIA H200" in d.fairness_note


def test_the_reports_gpu_is_the_one_given_else_the_one_it_declares(tmp_path, capsys):
    """A report of another GPU (declared H100) is not reproduced by H200 baselines, in the report command and in a
    run alike; `--report-device` / `report_device=` overrides the declaration; a report naming none says so."""
    from types import SimpleNamespace

    from hydra import compose, initialize_config_dir

    from harness.__main__ import CONF_DIR
    from harness.cards.model import save_report
    from harness.config.schema import typed
    from harness.run.outputs import reproduction_of

    baselines = H200 / "reprofile_ncu.json"
    h100 = load_report()
    h100.extra["device"] = "H100"
    save_report(h100, tmp_path / "h100.json")
    assert main(["reproduce", str(baselines), "--report", str(tmp_path / "h100.json"), "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["report_device"] == "H100"
    assert {c["verdict"] for c in answer["cards"]} == {"NOT_COMPARABLE"}
    assert all("the report on H100" in c["reason"] for c in answer["cards"])
    assert main(["reproduce", str(baselines), "--report", str(tmp_path / "h100.json"), "--report-device", "H200",
                 "--json"]) == 0
    given = json.loads(capsys.readouterr().out)
    assert {c["card"]: c["verdict"] for c in given["cards"]} == EXPECTED["reprofile_ncu.json"]

    outcomes = [SimpleNamespace(baseline=card) for card in load_report(baselines).cards]
    for overrides, verdicts in (([], {"NOT_COMPARABLE"}),
                                (["report_device=H200"], set(EXPECTED["reprofile_ncu.json"].values()))):
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
            cfg = typed(compose(config_name="config", overrides=overrides))  # a run's config, as composed
        ctx = SimpleNamespace(device="cuda", report=h100, cfg=cfg)
        assert {r.verdict.value for r in reproduction_of(ctx, outcomes)} == verdicts  # type: ignore[arg-type]

    del h100.extra["device"]
    save_report(h100, tmp_path / "unnamed.json")
    assert main(["reproduce", str(baselines), "--report", str(tmp_path / "unnamed.json"), "--json"]) == 0
    unnamed = json.loads(capsys.readouterr().out)
    assert unnamed["report_device"] is None
    assert all("the report names no GPU" in c["reason"] for c in unnamed["cards"])
