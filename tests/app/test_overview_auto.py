"""The end-to-end view, per-call times of batched variants, and auto's choice of experiments."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from harness.api.experiment import ExperimentError, Prepared
from harness.cards.diff import diff_cards
from harness.cards.lint import lint_report
from harness.cards.measures import card_time_us
from harness.cards.model import load_report
from harness.cards.rules import classify_report
from harness.config.schema import ExperimentConfig, typed
from harness.report.overview import CardResult, render_end_to_end
from harness.run.auto import candidate_experiments, plan_auto
from harness.run.worker import TrialWorker

CONF = Path(__file__).resolve().parents[2] / "conf"


@pytest.fixture(scope="module")
def report(seed_report):
    return classify_report(lint_report(seed_report).normalized)


def _timed(card, median_us, calls=1, device="cpu-a"):
    out = copy.deepcopy(card)
    out.extra["timing"] = {"median_us": median_us, "spread": 0.01}
    out.extra["variant"] = {"calls": calls}
    out.extra["environment"] = {"device_name": device, "device_kind": "cpu", "hostname": "h"}
    return out


def _described(composed: dict[str, dict]) -> dict:
    """The experiments of composed experiment files, as a worker describes them to auto."""
    worker = TrialWorker()
    try:
        return candidate_experiments({name: ExperimentConfig(**c["experiment"]) for name, c in composed.items()},
                                     worker, None)
    finally:
        worker.close()


def test_batched_time_is_per_original_call(report):
    card = report.card("dit-480-linear-m3n5120k5120-d55d81")
    before, after = _timed(card, 100.0), _timed(card, 200.0, calls=4)
    assert card_time_us(after) == pytest.approx(50.0)
    d = diff_cards(before, after)
    # Two medians timed apart are not a verdict: only paired confirm rounds decide.
    assert d.speedup == pytest.approx(2.0) and d.timing_verdict == "UNCONFIRMED"


def test_prepared_rejects_zero_calls():
    with pytest.raises(ExperimentError):
        Prepared(lambda: None, calls=0)


def _confirmed(verdict, speedup):
    return {"verdict": verdict, "speedup": speedup, "ci": [speedup * 0.95, speedup * 1.05], "rule": "planted"}


def test_end_to_end_counts_only_fair_faster_wins(report):
    fast = report.card("dit-480-linear-m3n5120k5120-d55d81")
    slow = report.card("dit-480-linear-m1170n5120k5120-b9770e")
    other_machine = report.card("vae-480-conv3d-16to16k111t3-9507c7")
    unconfirmed = report.card("dit-480-linear-m3n30720k5120-c91997")
    on_h200 = "NVIDIA H200"
    measured = {card.id: _timed(card, 100, device=on_h200) for card in (fast, slow, other_machine, unconfirmed)}
    for card in measured.values():
        card.extra["workload"] = {"scale": 1}
    results = [
        CardResult(fast, "dit_small_m_batching", "batched(k=4)",
                   diff_cards(measured[fast.id], _timed(fast, 50, device=on_h200),
                              confirmation=_confirmed("FASTER", 2.0), adopted=True), measured[fast.id]),
        CardResult(slow, "dit_gemm_tiles", "x",
                   diff_cards(measured[slow.id], _timed(slow, 130, device=on_h200),
                              confirmation=_confirmed("SLOWER", 100 / 130), adopted=False), measured[slow.id]),
        CardResult(other_machine, "vae_bf16", "y",
                   diff_cards(measured[other_machine.id], _timed(other_machine, 10, device="cpu-b"),
                              confirmation=_confirmed("FASTER", 10.0), adopted=True), measured[other_machine.id]),
        CardResult(unconfirmed, "dit_small_m_batching", "z",
                   diff_cards(measured[unconfirmed.id], _timed(unconfirmed, 20, device=on_h200)),
                   measured[unconfirmed.id]),
    ]
    text = render_end_to_end(report, results, measured_on="H200", report_device="H200")
    rows = {line.split("|")[1].strip(" `"): line for line in text.splitlines() if line.startswith("| `")}
    cells = {card: line.rstrip(" |").split("|")[-1].strip() for card, line in rows.items()}
    assert float(cells[fast.id]) == pytest.approx(card_time_us(fast, False) / 2, abs=0.1)
    assert cells[slow.id] in ("0.0", "0")  # confirmed SLOWER on the report's GPU: nothing saved, and that is known
    # 10x, but the variant measured on another machine than its baseline: not fair; unknown, never 0
    assert cells[other_machine.id].startswith("n/a (not a fair comparison: measured on different machines")
    assert cells[unconfirmed.id] == "n/a (time verdict UNCONFIRMED: undecided)"  # 5x medians without paired rounds
    dit_480 = next(line for line in text.splitlines() if line.startswith("| 480x832 | dit |"))
    in_stage = [c for c in (fast, slow, other_machine, unconfirmed) if (c.resolution, c.stage) == ("480x832", "dit")]
    unknown = sum(c in (other_machine, unconfirmed) for c in in_stage)
    known = f"{card_time_us(fast, False) / 2:.1f}"  # the known part, a lower bound where other cards are n/a
    assert (f"| at least {known} ({unknown} of {len(in_stage)} cards n/a) |" if unknown else f"| {known} |") in dit_480


def test_a_win_measured_off_the_report_gpu_is_not_projected(report):
    fast = report.card("dit-480-linear-m3n5120k5120-d55d81")
    measured = _timed(fast, 100)
    measured.extra["workload"] = {"scale": 1}
    result = CardResult(fast, "dit_small_m_batching", "batched(k=4)",
                        diff_cards(measured, _timed(fast, 50), confirmation=_confirmed("FASTER", 2.0), adopted=True),
                        measured)
    assert result.win == pytest.approx(2.0)
    text = render_end_to_end(report, [result], measured_on="cpu", report_device="H200")
    row = next(line for line in text.splitlines() if line.startswith(f"| `{fast.id}"))
    assert "not projected" in row


def test_auto_matches_experiments_to_classes(report):
    configs = {p.stem: p for p in (CONF / "experiment").glob("*.yaml")}
    import yaml  # hydra's dependency

    composed = {name: yaml.safe_load(path.read_text()) for name, path in configs.items()
                if name not in ("auto", "reprofile")}
    experiments = _described(composed)
    assert "reprofile" not in experiments and "auto" not in experiments
    cards = [report.card(c) for c in ("dit-480-linear-m4680n5120k144-500175", "vae-480-conv3d-16to16k111t3-9507c7",
                                      "attention-480-fa2-self-4680of29640-42c686")]
    plan = plan_auto(cards, experiments)
    assert cards[0] in plan.by_experiment["stall_breakdown"]  # unresolved linear
    assert cards[1] in plan.by_experiment["vae_channels_last"]  # partial_wave_tail conv3d
    assert all(cards[1] not in chosen for name, chosen in plan.by_experiment.items()
               if not experiments[name].applies_to("conv3d"))
    # The FA2 card has no timed kernel, so no class: it goes where unresolved attention cards go.
    assert cards[2].primary is None and cards[2].id not in plan.unmatched
    assert cards[2] in plan.by_experiment["stall_breakdown"] and cards[2] in plan.by_experiment["attention_backends"]


@pytest.mark.slow
def test_auto_runs_each_cards_experiments_and_one_summary(tmp_path):
    from tests.app.test_run import _run

    cards = ["dit-480-linear-m3n5120k5120-d55d81", "output-480-cast-f18982"]
    proc = _run(tmp_path, "experiment=auto", f"cards=[{','.join(cards)}]", "timing.confirm_rounds=2")
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = (tmp_path / "summary.md").read_text()
    # d55d81 is DRAM-bound: batching; the cast card is unresolved after normalization: cast and stalls.
    for name in ("dit_small_m_batching", "output_cast", "stall_breakdown"):
        assert (tmp_path / name / "summary.md").exists(), name
        assert f"({name}/summary.md)" in summary
    assert not (tmp_path / "vae_channels_last").exists()
    index = (tmp_path / "report.html").read_text()
    assert 'href="dit_small_m_batching/report.html"' in index and (tmp_path / "output_cast" / "report.html").exists()
    rows = [line for line in summary.splitlines() if line.startswith("| `")]
    assert {card for card in cards if any(card in row for row in rows)} == set(cards)
    assert "| 480x832 | dit |" in summary and "| 480x832 | output |" in summary
    # The variant tried (best.json adopts it only when confirmed FASTER in paired rounds).
    batched = load_report(tmp_path / "dit_small_m_batching" / "tried.json").cards[0]
    assert batched.extra["variant"]["calls"] >= 2 and "weight_stream" in batched.extra
    # The hook's evidence is restated from the confirm rounds: one time per card, wherever it is shown.
    calls = batched.extra["variant"]["calls"]
    assert batched.extra["search_timing"]["median_us"] != batched.extra["timing"]["median_us"]
    per_call = batched.extra["timing"]["median_us"] / calls
    assert batched.extra["weight_stream"]["per_call_us"] == pytest.approx(per_call)
    assert batched.extra["variant"]["per_call_us"] == pytest.approx(per_call)


@pytest.mark.slow
def test_a_cast_best_json_is_lint_clean_and_carries_its_shape_to_the_next_round(tmp_path):
    from tests.app.test_run import _run

    first = tmp_path / "first"
    proc = _run(first, "experiment=output_cast", "cards=[output-480-cast-f18982]", "search.n_trials=2")
    assert proc.returncode == 0, proc.stderr[-2000:]
    best = load_report(first / "best.json")
    assert best.cards[0].shape_parameters["shape"] == [1, 3, 9, 480, 832]  # the report had lost it
    lint = lint_report(best)
    assert lint.findings == [], lint.findings
    second = tmp_path / "second"
    proc = _run(second, f"report={first / 'best.json'}", "experiment=output_cast",
                "cards=[output-480-cast-f18982]", "search.n_trials=1")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert load_report(second / "baseline.json").cards[0].extra["workload"]["original_shape"]["shape"][2] == 9


def test_the_plan_covers_every_card_of_the_shipped_report_and_of_another(report):
    from harness.run.auto import plan_entries

    configs = {p.stem: p for p in (CONF / "experiment").glob("*.yaml") if p.stem not in ("auto", "reprofile")}
    import yaml

    loaded = {name: yaml.safe_load(path.read_text()) for name, path in configs.items()}
    experiments = _described(loaded)
    scopes = {name: config["experiment"].get("default_cards") for name, config in loaded.items()}
    selected = report.cards[:2]
    entries = plan_entries(report, experiments, selected, scopes, unavailable={})
    assert sorted(e["card"] for e in entries) == sorted(c.id for c in report.cards)  # one entry per card, 69
    # The costliest in the model first: for the shipped report (no call counts), its kernel sum per invocation.
    costs = [e["time_in_model"]["us"] if e["time_in_model"] else 0.0 for e in entries]
    assert costs == sorted(costs, reverse=True) and costs[0] == max(c.summed_kernel_us or 0 for c in report.cards)
    uncovered = [e["card"] for e in entries if not e["experiments"]]
    assert uncovered == []
    assert sorted(e["card"] for e in entries if e["selected"]) == sorted(c.id for c in selected)
    by_id = {e["card"]: e for e in entries}
    k144 = by_id["dit-480-linear-m4680n5120k144-500175"]
    assert k144["proposal"] == report.card(k144["card"]).counter_experiment
    fa2 = by_id["attention-480-fa2-self-4680of29640-42c686"]
    assert fa2["class"] is None and "stall_breakdown" in fa2["experiments"]
    # dit_output_fusion's default_cards scope it to the N=64 output projections: the other DRAM-bound
    # linears (the M=3 time embedding) go to batching, not to a fusion that would skip every variant.
    fused = {e["card"] for e in entries if "dit_output_fusion" in e["experiments"]}
    assert fused == {c.id for c in report.cards if c.op_kind == "linear" and c.shape_parameters.get("N") == 64}
    assert len(fused) == 2


@pytest.mark.slow
def test_plan_only_writes_the_plan_and_measures_nothing(tmp_path):
    import json

    from tests.app.test_run import _run

    proc = _run(tmp_path, "experiment=auto", "auto.plan_only=true")
    assert proc.returncode == 0, proc.stderr[-2000:]
    plan = json.loads((tmp_path / "plan.json").read_text())
    op_entries = [e for e in plan["cards"] if not e.get("chunk")]
    assert len(op_entries) == 69 and len(plan["report_sha256"]) == 64
    assert all(e["experiments"] for e in plan["cards"])
    assert "69 of 69 cards have at least one experiment" in (tmp_path / "plan.md").read_text()
    # The chunk cards come last, one per stage and resolution, each with the op cards it contains and
    # its own experiment; a rule over op cards (auto's default) selects none of them.
    chunks = plan["cards"][69:]
    assert chunks and all(e.get("chunk") for e in chunks)
    vae = [e for e in chunks if "-chunk-decode-" in e["card"]]
    assert {e["card"].split("-")[1] for e in vae} == {"480", "704"}
    assert all(e["experiments"] == ["vae_decode_chunk"] and len(e["contains"]) >= 3 for e in vae)
    assert not any(e["selected"] for e in chunks)
    assert not any((tmp_path / name).exists() for name in ("optuna.log", "optuna.db"))
    assert not any(p.is_dir() for p in tmp_path.iterdir() if p.name != ".hydra")


def test_auto_runs_a_chunk_card_after_the_op_cards_that_predict_it(tmp_path, monkeypatch):
    """In one auto run the chunk experiment runs last and is predicted from the op experiments' diff.json."""
    from types import SimpleNamespace

    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf, open_dict

    import harness.run.auto as auto

    def composed(*overrides: str) -> dict:
        with initialize_config_dir(version_base=None, config_dir=str(CONF), job_name="test"):
            cfg = compose(config_name="config", overrides=list(overrides), return_hydra_config=True)
            with open_dict(cfg):
                del cfg["hydra"]
            return OmegaConf.to_container(cfg, resolve=True)

    ran: list[tuple[str, object]] = []

    def execute(cfg, run_dir):
        ran.append((cfg.experiment.name, cfg.experiment.predict_from))
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "diff.json").write_text('{"cards": []}')
        ctx = SimpleNamespace(experiment=SimpleNamespace(name=cfg.experiment.name), diff=None,
                              environment={"device_name": "cpu"}, device="cpu")
        return ctx, []

    monkeypatch.setattr(auto, "execute", execute)
    monkeypatch.setattr(auto, "card_results", lambda experiment, outcomes, diffs, other_kernels: [])
    options = [p.stem for p in (CONF / "experiment").glob("*.yaml")]
    cfg = typed(composed("experiment=auto", "cards=[vae-480-chunk-decode,vae-480-conv3d-96to96k333t6]"))
    auto.run_auto(cfg, tmp_path, lambda name: typed(composed(f"experiment={name}")), options)
    names = [name for name, _ in ran]
    assert names[-1] == "vae_decode_chunk" and {"vae_channels_last", "vae_conv_kernels"} <= set(names)
    predicted_from = ran[-1][1]
    assert sorted(predicted_from) == sorted(str(tmp_path / n / "diff.json") for n in names[:-1])
