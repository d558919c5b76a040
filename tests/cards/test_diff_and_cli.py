import copy
import html
import json
import subprocess
import sys

import pytest

from harness.cards.diff import diff_cards
from harness.cards.kernel_families import kernel_family
from harness.cards.lint import normalize
from harness.cards.model import Kernel, Report, save_report
from harness.cards.noise import paired_verdict, timing_verdict
from harness.cards.rules import classify_card
from harness.report.cli import main


def test_kernel_families_survive_tile_and_dtype_changes():
    assert (kernel_family("void cudnn::nchwToNhwcKernel(cudnn::nchw2nhwc_params_t, const T1 *, T2 *)")
            == "nchwToNhwcKernel")
    a = kernel_family("sm90_xmma_fprop_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x128x32")
    b = kernel_family("sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize256x64x64")
    assert a == b == "xmma_fprop_implicit_gemm"
    assert kernel_family("nvjet_sm90_tst_256x144_64x4_2x1_v_bz_coopA_bias_TNT") == "nvjet"
    assert kernel_family("aten::copy_") == "aten::copy_"


def test_noise_rule():
    assert timing_verdict(100, 96) == "SAME"  # within 5%
    assert timing_verdict(100, 90) == "FASTER"
    assert timing_verdict(100, 90, 0.06, 0.06) == "SAME"  # spreads widen the band
    assert timing_verdict(100, 120) == "SLOWER"


def _channels_last_after(card):
    """The VAE card as a channels_last run would look: transposes gone, bytes and time down."""
    after = copy.deepcopy(card)
    after.kernels = [k for k in after.kernels if "To" not in k.name]
    for k in after.kernels:
        k.metrics["dram_read_mb"] *= 0.5
    after.summed_kernel_us = sum(k.metric("dur_us") for k in after.kernels)
    return after


def test_diff_shows_transposes_gone_and_checks_hypothesis(seed_report):
    before = classify_card(normalize(seed_report).card("vae-704-conv3d-96to96k333t6-b28294"))
    after = classify_card(_channels_last_after(before))
    d = diff_cards(before, after, check="transposes_removed")
    assert set(d.kernels_removed) == {"nchwToNhwcKernel", "nhwcToNchwKernel"}
    assert d.kernels_added == []
    assert d.speedup > 1.1 and d.timing_verdict == "FASTER"
    assert d.verdict == "yes"
    bytes_check = diff_cards(before, after, check="bytes_and_time_fall")
    assert bytes_check.verdict == "yes" and "fell" in bytes_check.verdict_detail
    slower = copy.deepcopy(before)
    for k in slower.kernels:
        k.metrics["dur_us"] *= 2
    slower.summed_kernel_us *= 2
    assert diff_cards(before, slower, check="bytes_and_time_fall").verdict == "no"


def test_diff_refuses_to_call_different_machines_fair(seed_report):
    before = copy.deepcopy(seed_report.cards[1])
    after = copy.deepcopy(before)
    before.extra["environment"] = {"device_name": "NVIDIA H200", "hostname": "a"}
    after.extra["environment"] = {"device_name": "NVIDIA H100 80GB HBM3", "hostname": "a"}
    d = diff_cards(before, after)
    assert d.fair is False and "different machines" in d.fairness_note


def test_cli_lint_json(capsys):
    assert main(["lint", "--json"]) == 3  # the shipped report has lost data: error findings
    findings = json.loads(capsys.readouterr().out)
    assert {"card", "kernel", "code", "detail", "severity"} <= set(findings[0])
    codes = {f["code"] for f in findings}
    assert {"damaged_entry", "unit_scaled", "dominant_missing", "sum_mismatch", "null_metrics"} <= codes


def test_cli_classify_writes_a_valid_report(tmp_path, capsys):
    out = tmp_path / "classified.json"
    assert main(["classify", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert len(report["cards"]) == 69
    assert sum(report["summary"].values()) == 69
    assert main(["lint", str(out), "--json"]) == 3  # normalizing cannot bring back truncated kernel lists
    findings = json.loads(capsys.readouterr().out.split("\n", 1)[1])
    assert not [f for f in findings if f["code"] == "unit_scaled"]  # normalized units stay normalized


def test_cli_rules_override(tmp_path, capsys):
    rules = tmp_path / "rules.yaml"
    rules.write_text("thresholds:\n  compute_pct: 99\n")
    out = tmp_path / "c.json"
    assert main(["classify", "--rules", str(rules), "--out", str(out)]) == 0
    assert json.loads(out.read_text())["summary"].get("compute_bound", 0) < 29


def test_cli_diff_json_fields(tmp_path, seed_report, capsys):
    before_path = tmp_path / "before.json"
    save_report(seed_report, before_path)
    raw = seed_report.to_dict()
    raw["cards"][1]["kernels"][0]["metrics"]["dur_us"] /= 2
    raw["cards"][1]["summed_kernel_us"] /= 2
    after_path = tmp_path / "after.json"
    after_path.write_text(json.dumps(raw))
    md = tmp_path / "diff.md"
    assert main(["diff", str(before_path), str(after_path), "--json", "--out", str(md)]) == 0
    result = json.loads(capsys.readouterr().out)
    card = next(c for c in result["cards"] if c["card"] == seed_report.cards[1].id)
    for key in ("before_us", "after_us", "speedup", "class_before", "class_after", "kernels_added",
                "kernels_removed", "verdict"):
        assert key in card
    assert card["speedup"] == pytest.approx(2.0)
    assert "| card |" in md.read_text()


def test_cli_show_and_bad_input(tmp_path, capsys):
    assert main(["show"]) == 0
    assert "69 cards" in capsys.readouterr().out
    assert main(["show", "output-480-cast-f18982"]) == 0
    assert "damaged_entry" in capsys.readouterr().out
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    assert main(["lint", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not JSON" in err
    assert main(["show", "nope-card"]) == 2


def test_module_entry_point_exits_2_without_traceback(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "harness.report", "lint", str(tmp_path / "x.json")],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and "no such file" in proc.stderr


def test_the_old_command_says_where_the_report_commands_went(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "harness.cards", "show", "my report.json"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == "error: the report commands moved: python -m harness.report show 'my report.json'\n"


def test_cli_import_ncu_makes_classified_cards(tmp_path, capsys):
    from pathlib import Path

    sample = Path(__file__).resolve().parents[1] / "fixtures" / "ncu" / "details_page_thousands_separators_sm75.csv"
    out = tmp_path / "imported.json"
    assert main(["import-ncu", str(sample), "--out", str(out), "--group-by", "kernel"]) == 0
    report = json.loads(out.read_text())
    assert report["cards"] and sum(report["summary"].values()) == len(report["cards"])
    kernel = report["cards"][0]["kernels"][0]
    assert kernel["metrics"]["dur_us"] == pytest.approx(21058.944)
    assert kernel["classification"] is not None and kernel["metrics_source"] == "ncu"
    assert main(["import-ncu", str(tmp_path / "missing.csv")]) == 2


# -- diff of two runs' files: each side named, the after side's hypothesis, never a confirmed verdict -----

VAE = "vae-704-conv3d-96to96k333t6-b28294"


def _run_best(seed_report, run_dir, *, experiment, variant, params, check, hypothesis, median_us):
    """A best.json card of one run: an adopted variant with its label and the FASTER verdict of its own rounds."""
    card = copy.deepcopy(normalize(seed_report).card(VAE))
    card.extra.update({
        "harness": {"experiment": experiment, "variant": variant, "params": params, "role": "trial",
                    "run": str(run_dir.resolve()), "hypothesis": hypothesis, "check": check},
        "timing": {"median_us": median_us, "spread": 0.01},
        "environment": {"device_name": "Planted CPU", "device_kind": "cpu", "hostname": "h"},
    })
    verdict = paired_verdict([100.0, 101.0, 100.5, 100.2], [50.0, 50.4, 50.1, 50.3], band=0.05)
    card.extra["confirmation"] = {**verdict.as_dict(), "rule": verdict.describe()}
    run_dir.mkdir(parents=True)
    save_report(Report(cards=[card]), run_dir / "best.json")
    return run_dir / "best.json"


def test_cli_diff_of_two_runs_names_each_side_and_never_confirms(tmp_path, seed_report, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # relative paths, as a user types them
    _run_best(seed_report, tmp_path / "outputs" / "x", experiment="vae_channels_last", variant="channels_last_3d",
              params={}, check="transposes_removed", hypothesis="channels_last removes the transposes",
              median_us=2000.0)
    _run_best(seed_report, tmp_path / "outputs" / "y", experiment="vae_bf16", variant="low_precision",
              params={"dtype": "bfloat16"}, check="effective_flops", hypothesis="bf16 doubles the tensor rate",
              median_us=1000.0)
    md, page = tmp_path / "diff.md", tmp_path / "diff.html"
    assert main(["diff", "outputs/x/best.json", "outputs/y/best.json", "--json", "--out", str(md),
                 "--html", str(page)]) == 0
    result = json.loads(capsys.readouterr().out)
    title = ("outputs/x (vae_channels_last: channels_last_3d) vs "
             "outputs/y (vae_bf16: low_precision(dtype=bfloat16))")
    assert result["title"] == title
    row = result["cards"][0]
    assert (row["variant_before"]["experiment"], row["variant_before"]["label"]) == ("vae_channels_last",
                                                                                     "channels_last_3d")
    assert (row["variant_after"]["experiment"], row["variant_after"]["label"]) == ("vae_bf16",
                                                                                   "low_precision(dtype=bfloat16)")
    # The after side's experiment is the one tested: its hypothesis and check, not the before side's.
    assert row["hypothesis"] == "bf16 doubles the tensor rate" and row["check"] == "effective_flops"
    # Each side has a FASTER verdict of its own run; the two were never timed together.
    assert row["timing_verdict"] == "UNCONFIRMED" and row["speedup_ci"] is None
    assert row["speedup"] == pytest.approx(2000.0 / 1000.0)
    assert "different runs" in row["verdict_rule"]
    assert "Two runs' cards compared" in result["comparison"]
    markdown = md.read_text()
    assert markdown.startswith(f"# {title}\n") and "best.json vs best.json" not in markdown
    assert "Two runs' cards compared, not one run's before and after" in markdown
    assert "- Before: `channels_last_3d` (vae_channels_last)" in markdown
    assert "- After: `low_precision(dtype=bfloat16)` (vae_bf16)" in markdown
    text = page.read_text()
    assert f"<title>{html.escape(title)}</title>" in text
    assert html.escape("Two runs' cards compared, not one run's before and after") in text


def test_cli_diff_of_one_runs_baseline_and_best_keeps_its_confirmed_verdict(tmp_path, seed_report, capsys):
    best = _run_best(seed_report, tmp_path / "run", experiment="vae_channels_last", variant="channels_last_3d",
                     params={}, check="transposes_removed", hypothesis="h", median_us=1000.0)
    baseline = copy.deepcopy(Report(cards=[normalize(seed_report).card(VAE)]))
    baseline.cards[0].extra.update({
        "harness": {"experiment": "vae_channels_last", "variant": "ncdhw", "params": {}, "role": "baseline",
                    "run": str((tmp_path / "run").resolve())},
        "timing": {"median_us": 2000.0, "spread": 0.01},
    })
    save_report(baseline, tmp_path / "run" / "baseline.json")
    assert main(["diff", str(tmp_path / "run" / "baseline.json"), str(best), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["cards"][0]["timing_verdict"] == "FASTER"
    assert result["comparison"].startswith("Cards of one run")
    assert result["title"] == (f"{tmp_path / 'run' / 'baseline.json'} (vae_channels_last: ncdhw) vs "
                               f"{tmp_path / 'run'} (vae_channels_last: channels_last_3d)")


# -- show: a measured card's time is its timing median per original call --------------------------------


def test_show_gives_a_measured_cards_timing_median_as_its_time_and_labels_the_kernel_sum(tmp_path, capsys,
                                                                                          seed_report):
    """A batched variant: 14452 us timed per invocation of 20 calls, 14451.64 us of kernels per invocation."""
    card = copy.deepcopy(normalize(seed_report).card(VAE))
    card.kernels = [Kernel("sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc", {"dur_us": 14451.64})]
    card.summed_kernel_us = 14451.64
    card.extra.update({"harness": {"experiment": "planted", "variant": "batched", "params": {"k": 20},
                                   "role": "trial", "run": "r"},
                       "timing": {"median_us": 14452.0}, "variant": {"calls": 20}})
    path = tmp_path / "best.json"
    save_report(Report(cards=[card]), path)
    assert main(["show", str(path), card.id]) == 0
    out = capsys.readouterr().out
    assert "time       722.600 us (timing median per original call; median_us 14452.000 / 20 calls)" in out
    assert ("kernels    14451.640 us (kernel-duration sum per invocation; 722.582 us per original call over 20 "
            "calls; stored summed_kernel_us 14451.640)") in out
    assert main(["show", str(path)]) == 0
    table = capsys.readouterr().out
    header, _, row = table.splitlines()[:3]
    assert header.split()[2:4] == ["time_us", "kernels_us"]
    assert row.split()[2:4] == ["722.6", "14451.6"]
    assert "time_us: timing median per original call; kernels_us: kernel-duration sum per invocation." in table
