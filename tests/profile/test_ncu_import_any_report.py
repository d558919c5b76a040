"""Any ncu report a user brings (issue 45): a kernel ncu failed on, repeated launches, the GPU and ncu version,
ncu's rule results, warp stalls, a narrow metric set and NVTX ranges, each imported into cards every command
reads. Planted raw pages say what each case must give; the real reports are this repository's fixtures."""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import math
import statistics
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from harness.cards.diff import diff_reports
from harness.cards.fields import NCU_FAILED, UNRESOLVED
from harness.cards.lint import lint_report
from harness.cards.model import load_report, parse_report
from harness.cards.reproduce import Reproduction, reproduce
from harness.cards.rules import TOO_FEW_METRICS, classify_report
from harness.profile.ncu import importer, report_file
from harness.profile.ncu.importer import cards_from_ncu, import_ncu
from harness.report import cli

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ncu"
needs_ncu_report = pytest.mark.skipif(importlib.util.find_spec("ncu_report") is None,
                                      reason="reading a .ncu-rep needs the ncu_report module (pip install ncu-report)")
NVTX = "thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg"
DURATION, SM, DRAM, L2 = ("gpu__time_duration.sum", "sm__throughput.avg.pct_of_peak_sustained_elapsed",
                          "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
                          "lts__throughput.avg.pct_of_peak_sustained_elapsed")
GRID, BLOCK, WAVES, WARPS = ("launch__grid_size", "launch__block_size", "launch__waves_per_multiprocessor",
                             "sm__warps_active.avg.pct_of_peak_sustained_active")
STALL = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"
UNITS = {DURATION: "usecond", SM: "%", DRAM: "%", L2: "%", GRID: "", BLOCK: "", WAVES: "", WARPS: "%",
         "device__attribute_display_name": ""}


def raw_page(path: Path, rows: list[dict[str, str]]) -> Path:
    """A raw page in ncu's layout (an NVTX column, a units row) with the metrics the rows name, in UNITS' order
    then any stall ratios; a row's "name" is its kernel, "range" its NVTX range."""
    metrics = [m for m in UNITS if any(m in r for r in rows)]
    metrics += sorted({m for r in rows for m in r if m.startswith("smsp__")})
    header = ["ID", "Process ID", "Process Name", NVTX, "Kernel Name", *metrics]
    lines = [header, ["", "", "", "", "", *(UNITS.get(m, "") for m in metrics)]]
    for i, row in enumerate(rows):
        cell = f'7  "<default domain>:{row["range"]}:none:none:none:none:none:none"' if row.get("range") else "7  "
        lines.append([str(i), "7", "app", cell, row["name"], *(row.get(m, "") for m in metrics)])
    buffer = io.StringIO()
    csv.writer(buffer, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows(lines)
    path.write_text("==PROF== Connected to process 7\n" + buffer.getvalue())
    return path


def launch(name: str, us: float, grid: str = "1024", **more: str) -> dict[str, str]:
    """One measured launch: a memory-bound kernel on a planted GPU (DRAM 75%: dram_bandwidth_bound)."""
    return {"name": name, DURATION: f"{us:.3f}", SM: "20", DRAM: "75", L2: "30", GRID: grid, BLOCK: "256",
            WAVES: "4", WARPS: "60", "device__attribute_display_name": "NVIDIA A10G", **more}


def strict_json(text: str) -> Any:
    """What JSON.parse accepts: no NaN or Infinity."""
    def refuse(constant: str) -> None:
        raise ValueError(f"{constant} is not JSON")
    return json.loads(text, parse_constant=refuse)


def run_cli(*args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


# ---------------------------------------------------------------------------------------------
# 1. A kernel ncu failed on


def test_a_failed_kernel_is_imported_with_its_reason_and_no_number(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    # ncu's raw page prints the NaN it recorded for a launch it could not profile; its launch__ cells are empty.
    failed = {"name": "vectorized_blocktiling", DURATION: "nan", SM: "nan", DRAM: "nan", L2: "nan",
              "device__attribute_display_name": "NVIDIA A10G"}
    path = raw_page(tmp_path / "failed.csv", [launch("basic", 100.0), failed])
    out = tmp_path / "imported.json"
    assert run_cli("import-ncu", str(path), "--out", str(out), capsys=capsys)[0] == 0
    report = strict_json(out.read_text())  # the old import wrote "dur_us": NaN
    card = next(c for c in report["cards"] if c["op"] == "vectorized_blocktiling")
    (kernel,) = card["kernels"]
    assert kernel["metrics"]["dur_us"] is None and kernel["metrics"]["sm_pct"] is None
    assert "summed_kernel_us" not in card and card.get("primary") is None and kernel.get("classification") is None
    for metric in (DURATION, SM, DRAM, L2):
        assert metric in kernel[NCU_FAILED]
    assert kernel["rule"].startswith(f"{TOO_FEW_METRICS}: ncu failed on this kernel")
    assert card["primary_rule"] == kernel["rule"]
    for command in (["show", str(out)], ["classify", str(out), "--out", str(tmp_path / "c.json")],
                    ["show", str(out), parse_report(report).cards[1].id]):
        assert run_cli(*command, capsys=capsys)[0] == 0
    assert run_cli("lint", str(out), capsys=capsys)[0] in (0, 1)  # info or warnings: read, not refused
    code, shown, _ = run_cli("show", str(out), parse_report(report).cards[1].id, capsys=capsys)
    assert "no numbers: ncu recorded no value (NaN)" in shown and "(no class: not enough to classify)" in shown


class _Metric:
    def __init__(self, value: Any, unit: str = "") -> None:
        self._value, self._unit = value, unit

    def value(self) -> Any:
        return self._value

    def unit(self) -> str:
        return self._unit


def _fake_module(actions: list[dict[str, Any]]) -> SimpleNamespace:
    """The ncu_report module's surface the reader uses, with enum values of its own (no integer is assumed)."""
    def make(spec: dict[str, Any]) -> SimpleNamespace:
        metrics = {name: _Metric(*value) for name, value in spec["metrics"].items()}
        return SimpleNamespace(NameBase_DEMANGLED=0, name=lambda base=0: spec["name"], nvtx_state=lambda: None,
                               metric_names=lambda: list(metrics), metric_by_name=metrics.get,
                               rule_results_as_dicts=lambda: spec["rules"])
    made = [make(a) for a in actions]
    profiled = SimpleNamespace(num_actions=lambda: len(made), action_by_idx=made.__getitem__)
    context = SimpleNamespace(num_ranges=lambda: 1, range_by_idx=lambda i: profiled)
    return SimpleNamespace(load_report=lambda path: context, MsgType_NONE=40, MsgType_OK=41,
                           MsgType_OPTIMIZATION=42, MsgType_WARNING=43, MsgType_ERR=44,
                           SpeedupType_UNKNOWN=50, SpeedupType_LOCAL=51, SpeedupType_GLOBAL=52)


def test_a_reports_nan_metrics_and_failed_rules_through_the_module(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    nan = float("nan")
    failed_rules = [
        {"rule_identifier": "LaunchConfiguration", "name": "Launch Configuration", "section_identifier": "LaunchStats",
         "rule_message": {"title": "", "type": 44, "message": "Rule Launch Configuration returned an error: "
                                                              "Metric launch__block_size not found"}},
        {"rule_identifier": "LaunchConfiguration", "name": "Launch Configuration", "section_identifier": "LaunchStats",
         "rule_message": {"title": "", "type": 44, "message": "<built-in function> returned a result\n/x.py:45"}},
    ]
    gpu = ("NVIDIA A10G",)
    fake = _fake_module([
        {"name": "one_d_vec", "rules": failed_rules,
         "metrics": {DURATION: (nan, "ns"), SM: (nan, "%"), "device__attribute_display_name": gpu}},
        {"name": "basic", "rules": [],
         "metrics": {DURATION: (10783168.0, "ns"), SM: (91.0, "%"), "device__attribute_display_name": gpu}},
    ])
    target = tmp_path / "profile.ncu-rep"
    target.write_bytes(b"NVR\x00")
    records = report_file._read_with_module(fake, target)  # type: ignore[arg-type]
    assert [r.unread() for r in records] == [[DURATION, SM], []]
    monkeypatch.setattr(importer, "read_records", lambda path: records)
    report = classify_report(import_ncu(target))
    failed = report.cards[0].kernels[0]
    assert failed.extra[NCU_FAILED] == (f"ncu recorded no value (NaN) for 2 of the metrics read here ({DURATION}, "
                                        f"{SM}); its rules say: Metric launch__block_size not found")
    assert [r["message_type"] for r in failed.extra["ncu_rules"]] == ["error", "error"]
    assert report.cards[1].kernels[0].metric("dur_us") == pytest.approx(10783.168)
    assert report.cards[1].primary == "compute_bound"


# ---------------------------------------------------------------------------------------------
# 2. Launches counted


CG = (225.888, 231.904, 228.288)  # three launches of one kernel and configuration


def test_launches_of_one_configuration_are_one_entry_per_launch_metrics(tmp_path: Path) -> None:
    path = raw_page(tmp_path / "launches.csv",
                    [*(launch("readOffset", us) for us in CG), launch("readOffset", 50.0, grid="64"),
                     launch("other", 7.0)])
    report = classify_report(import_ncu(path, group_by="kernel"))
    offset, other = report.cards
    same, small = offset.kernels
    assert same.extra["launches"] == 3 and "launches" not in small.extra  # another grid: another entry
    assert same.extra["ncu_ids"] == [0, 1, 2] and small.extra["ncu_id"] == 3
    assert same.metric("dur_us") == pytest.approx(statistics.mean(CG))
    stats = same.extra["launch_stats"]
    assert (stats["dur_us_min"], stats["dur_us_max"]) == (min(CG), max(CG))
    assert stats["dur_us_cv"] == pytest.approx(statistics.pstdev(CG) / statistics.mean(CG))
    # One invocation of a kernel's card is one launch: four launches, their mean time.
    assert offset.extra["invocations"] == 4
    assert offset.summed_kernel_us == pytest.approx((sum(CG) + 50.0) / 4)
    assert other.summed_kernel_us == pytest.approx(7.0) and "launches" not in other.kernels[0].extra
    assert offset.dominant_kernel == "readOffset" and offset.primary == "dram_bandwidth_bound"
    codes = {f.code for f in lint_report(report).findings}
    assert "sum_mismatch" not in codes and "dominant_mismatch" not in codes


def test_a_trial_range_keeps_one_entry_per_launch(tmp_path: Path) -> None:
    # The ncu backend reads a trial's range as profiled: what it sums must not change meaning.
    path = raw_page(tmp_path / "trial.csv", [launch("gemm", us, range="harness_trial") for us in CG])
    (card,) = cards_from_ncu(path)
    assert [k.metric("dur_us") for k in card.kernels] == pytest.approx(list(CG))
    assert card.summed_kernel_us == pytest.approx(sum(CG))
    (imported,) = import_ncu(path).cards  # a range is one invocation: its launches add up
    assert imported.kernels[0].extra["launches"] == 3 and imported.summed_kernel_us == pytest.approx(sum(CG))
    assert "NVTX range 'harness_trial'" in imported.extra["invocation"]


def test_diff_of_one_launch_against_three_compares_per_launch(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    before = raw_page(tmp_path / "ca.csv", [launch("readOffset", 206.08)])
    after = raw_page(tmp_path / "cg.csv", [launch("readOffset", us) for us in CG])
    paths = []
    for side in (before, after):
        out = side.with_suffix(".json")
        assert run_cli("import-ncu", str(side), "--out", str(out), capsys=capsys)[0] == 0
        paths.append(str(out))
    code, text, _ = run_cli("diff", *paths, "--json", capsys=capsys)
    (row,) = json.loads(text)["cards"]
    assert code == 0 and row["launches"] == {"before": 1, "after": 3}
    assert row["speedup"] == pytest.approx(206.08 / statistics.mean(CG))  # 0.90x; the old sum read 0.30x
    assert any(n.startswith("launches: 1 before, 3 after") for n in row["notes"])


# ---------------------------------------------------------------------------------------------
# 3. The GPU and the ncu that made the report


@needs_ncu_report
def test_a_binary_report_names_its_gpu_and_ncu() -> None:
    report = import_ncu(FIXTURES / "report_rtx3080_montecarlo.ncu-rep")
    # Both as the file states them: ncu's display name, and its session record's "Nsight Compute Target".
    assert report.extra["device"] == "GeForce RTX 3080"
    assert report.extra["ncu_version"] == "2020.2.1.0 (build 29181059)"
    h200 = import_ncu(FIXTURES / "h200_attention_fmha_cutlass.ncu-rep")
    assert (h200.extra["device"], h200.extra["ncu_version"]) == ("NVIDIA H200", "2025.3.1.0 (build 36398880)")
    csv_import = import_ncu(FIXTURES / "details_page_with_program_output_sm100.log")
    assert "device" not in csv_import.extra and "ncu_version" not in csv_import.extra
    assert len(csv_import.extra["ncu_import"]["notes"]) == 2  # each says why it is not known


def test_two_imports_from_one_gpu_are_comparable(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = []
    for name, us, gpu in (("a", 100.0, "NVIDIA A10G"), ("b", 104.0, "NVIDIA A10G"), ("c", 100.0, "NVIDIA L4")):
        page = raw_page(tmp_path / f"{name}.csv", [launch("sgemm", us, device__attribute_display_name=gpu)])
        out = tmp_path / f"{name}.json"
        assert run_cli("import-ncu", str(page), "--out", str(out), capsys=capsys)[0] == 0
        paths.append(out)
    a, b, c = (load_report(p) for p in paths)
    (same,) = reproduce(b, a)
    assert same.verdict is Reproduction.REPRODUCED and same.device_here == "NVIDIA A10G"  # 1.04x, within 15%
    (other,) = reproduce(c, a)
    assert other.verdict is Reproduction.NOT_COMPARABLE
    assert other.reason == "measured on NVIDIA L4, the report on NVIDIA A10G"
    code, text, _ = run_cli("reproduce", str(paths[1]), "--report", str(paths[0]), "--json", capsys=capsys)
    assert code == 0 and json.loads(text)["cards"][0]["verdict"] == "REPRODUCED"
    rows = {}
    for other_side in (paths[1], paths[2]):
        code, text, _ = run_cli("diff", str(paths[0]), str(other_side), "--json", capsys=capsys)
        rows[other_side.stem] = json.loads(text)["cards"][0]
    assert rows["b"]["fair"] is True
    assert rows["c"]["fair"] is False and "NVIDIA A10G vs NVIDIA L4" in rows["c"]["fairness_note"]


# ---------------------------------------------------------------------------------------------
# 4. ncu's rule results


def test_rule_results_from_the_details_page() -> None:
    (card,) = import_ncu(FIXTURES / "details_page_with_program_output_sm100.log").cards
    rules = card.kernels[0].extra["ncu_rules"]
    assert all(set(r) == {"id", "name", "section", "title", "message_type", "speedup", "speedup_type"} for r in rules)
    # The page's own rows: TheoreticalOccupancy "OPT" "local" "81.25", WorkloadImbalance "global" "5.818".
    occupancy = next(r for r in rules if r["id"] == "TheoreticalOccupancy")
    assert (occupancy["section"], occupancy["message_type"], occupancy["speedup"], occupancy["speedup_type"]) == (
        "Occupancy", "optimization", 81.25, "local")
    imbalance = [r["speedup"] for r in rules if r["id"] == "WorkloadImbalance"]
    assert imbalance[0] == 5.818 and all(r["speedup_type"] == "global" for r in rules if r["id"] == "WorkloadImbalance")
    assert next(r for r in rules if r["id"] == "SOLBottleneck")["speedup"] is None


def test_rule_results_through_the_module_enums_and_a_text_payload(tmp_path: Path) -> None:
    rules = [
        {"rule_identifier": "TheoreticalOccupancy", "name": "Theoretical Occupancy", "section_identifier": "Occupancy",
         "rule_message": {"title": "Occupancy Limiters", "type": 42, "message": "..."},
         "speedup_estimation": {"type": 51, "speedup": "50.0"}},  # a version that hands the payload over as text
        {"rule_identifier": "LaunchConfiguration", "name": "Launch Configuration", "section_identifier": "LaunchStats",
         "rule_message": {"title": "Small Grid", "type": 43, "message": "..."},
         "speedup_estimation": {"type": 52, "speedup": 96.875}},
        {"rule_identifier": "SOLFPRoofline", "name": "Roofline Analysis", "section_identifier": "SpeedOfLight",
         "rule_message": "The ratio of peak float to double performance is 64:1."},  # the message as text alone
    ]
    fake = _fake_module([{"name": "k", "rules": rules, "metrics": {DURATION: (1000.0, "ns")}}])
    target = tmp_path / "r.ncu-rep"
    target.write_bytes(b"NVR\x00")
    (record,) = report_file._read_with_module(fake, target)  # type: ignore[arg-type]
    assert record.rules == [
        {"id": "TheoreticalOccupancy", "name": "Theoretical Occupancy", "section": "Occupancy",
         "title": "Occupancy Limiters", "message_type": "optimization", "speedup": 50.0, "speedup_type": "local"},
        {"id": "LaunchConfiguration", "name": "Launch Configuration", "section": "LaunchStats", "title": "Small Grid",
         "message_type": "warning", "speedup": 96.875, "speedup_type": "global"},
        {"id": "SOLFPRoofline", "name": "Roofline Analysis", "section": "SpeedOfLight", "title": None,
         "message_type": None, "speedup": None, "speedup_type": None},
    ]


def test_show_lists_a_kernels_rules(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sm100.json"
    assert run_cli("import-ncu", str(FIXTURES / "details_page_with_program_output_sm100.log"), "--out", str(out),
                   capsys=capsys)[0] == 0
    card = load_report(out).cards[0]
    code, text, _ = run_cli("show", str(out), card.id, capsys=capsys)
    assert code == 0 and "ncu rules (" in text
    lines = text.splitlines()
    first = next(i for i, line in enumerate(lines) if "ncu rules (" in line)
    # Estimates first, largest first: TheoreticalOccupancy's 81.25% local leads.
    assert "Occupancy/TheoreticalOccupancy" in lines[first + 1] and "81.2% (local)" in lines[first + 1]


# ---------------------------------------------------------------------------------------------
# 5. Evidence the report has is used


def test_stall_ratios_name_the_dominant_stall(tmp_path: Path) -> None:
    # No unit near a peak and a full machine: unresolved, but its warp-stall ratios say what the warps wait on.
    quiet = {**launch("reduce", 80.0), SM: "30", DRAM: "35", L2: "25", WAVES: "8", WARPS: "50",
             STALL.format("barrier"): "20.5", STALL.format("long_scoreboard"): "9.5",
             STALL.format("selected"): "40", STALL.format("not_selected"): "30"}
    (card,) = classify_report(import_ncu(raw_page(tmp_path / "stalls.csv", [quiet]))).cards
    kernel = card.kernels[0]
    assert card.primary == UNRESOLVED
    # selected and not_selected are no stalls: barrier takes 20.5 / (20.5 + 9.5) of the stall cycles.
    assert kernel.evidence["dominant_stall"]["reason"] == "barrier"
    assert kernel.evidence["dominant_stall"]["share"] == pytest.approx(20.5 / 30.0, abs=1e-3)
    assert "not collected" not in card.primary_rule and "dominant warp stall: barrier (68%" in card.primary_rule
    assert card.counter_experiment.startswith("Act on the dominant warp stall, barrier")


@needs_ncu_report
def test_the_real_reports_stalls_are_named() -> None:
    import ncu_report
    path = FIXTURES / "report_rtx3080_montecarlo.ncu-rep"
    report = classify_report(import_ncu(path))
    action = ncu_report.load_report(str(path)).range_by_idx(0).action_by_idx(0)
    stalls = {n: action.metric_by_name(n).value() for n in action.metric_names()
              if n.startswith("smsp__average_warps_issue_stalled_") and n.endswith("_per_issue_active.ratio")
              and "_selected_" not in n and "not_selected" not in n}
    largest = max(stalls, key=lambda n: stalls[n])
    reason = largest.removeprefix("smsp__average_warps_issue_stalled_").removesuffix("_per_issue_active.ratio")
    card = report.cards[0]
    assert card.kernels[0].evidence["dominant_stall"]["reason"] == reason
    assert card.primary == UNRESOLVED and f"dominant warp stall: {reason}" in card.primary_rule


def test_without_throughput_metrics_a_card_is_not_enough_to_classify(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    narrow = {"name": "readSegment", DURATION: "12.5", GRID: "32768", BLOCK: "512", WAVES: "85.3"}
    page = raw_page(tmp_path / "narrow.csv", [narrow])
    (card,) = classify_report(import_ncu(page)).cards
    assert card.primary is None and card.primary_rule.startswith(TOO_FEW_METRICS)
    for name in ("sm_pct", "tensor_pct", "dram_pct", "l2_pct"):
        assert name in card.primary_rule
    assert card.counter_experiment.startswith("Re-profile with the metrics the rules read")
    report = classify_report(import_ncu(page))
    assert "primary_missing" not in {f.code for f in lint_report(report).findings}
    out = tmp_path / "narrow.json"
    assert run_cli("import-ncu", str(page), "--out", str(out), capsys=capsys)[0] == 0
    _, text, _ = run_cli("show", str(out), capsys=capsys)
    assert "(no class: not enough to classify)" in text


# ---------------------------------------------------------------------------------------------
# 6. NVTX ranges on a real report


@pytest.mark.parametrize("name", [pytest.param("h200_attention_fmha_cutlass.ncu-rep", marks=needs_ncu_report),
                                  "h200_attention_fmha_cutlass_raw_page.csv"])
def test_the_harness_trial_range_of_a_real_h200_report(name: str) -> None:
    # Made under the harness's `--nvtx --nvtx-include harness_trial/`: its one kernel ran inside that range.
    (card,) = import_ncu(FIXTURES / name).cards
    assert card.op == "harness_trial" and card.group == "ncu:harness_trial"
    assert [k.name[:20] for k in card.kernels] == ["fmha_cutlassF_f32_al"]
    (by_kernel,) = import_ncu(FIXTURES / name, group_by="kernel").cards
    assert by_kernel.op.startswith("fmha_cutlassF_f32_aligned_64x128_rf_sm80")


# ---------------------------------------------------------------------------------------------
# Every command reads every import


ALL_FIXTURES = [pytest.param(p.name, marks=needs_ncu_report) if p.suffix == ".ncu-rep" else p.name
                for p in sorted(FIXTURES.iterdir()) if p.suffix in (".ncu-rep", ".csv", ".txt", ".log")]


@pytest.mark.parametrize("name", ALL_FIXTURES)
def test_every_import_is_read_back_by_every_command(name: str, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "imported.json"
    assert run_cli("import-ncu", str(FIXTURES / name), "--out", str(out), capsys=capsys)[0] == 0
    report = strict_json(out.read_text())
    assert not any(isinstance(v, float) and not math.isfinite(v) for v in _numbers(report))
    card = parse_report(report).cards[0].id
    assert run_cli("show", str(out), capsys=capsys)[0] == 0
    assert run_cli("show", str(out), card, capsys=capsys)[0] == 0
    assert run_cli("lint", str(out), capsys=capsys)[0] in (0, 1, 3)  # its findings' worst severity; 2: unreadable
    assert run_cli("classify", str(out), "--out", str(tmp_path / "c.json"), capsys=capsys)[0] == 0
    assert run_cli("diff", str(out), str(out), "--json", capsys=capsys)[0] == 0
    assert run_cli("reproduce", str(out), "--report", str(out), "--report-device", "GPU", capsys=capsys)[0] == 0
    assert diff_reports(load_report(out), load_report(out)).cards


def _numbers(value: Any) -> list[float]:
    if isinstance(value, dict):
        return [n for v in value.values() for n in _numbers(v)]
    if isinstance(value, list):
        return [n for v in value for n in _numbers(v)]
    return [value] if isinstance(value, float) else []
