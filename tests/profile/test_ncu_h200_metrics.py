"""Metrics as the report defines them, on real H200 ncu outputs (GPU check of 2026-12-04, issue 29).

tensor_pct over elapsed cycles (an active-based reading converted by the file's own cycles), no
percentage above 100, shared memory in bytes; the metric ncu reports without listing it is never dropped.
The expected numbers come from the files' raw values and the formula, never from the parser's output.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.profile.ncu.importer import cards_from_ncu, read_records
from harness.profile.ncu.metrics import (
    FIELD_SOURCES,
    SENTINEL_METRIC,
    is_attribute,
    metrics_for,
    resolve_metrics,
)
from harness.profile.ncu.parse import RAW, NcuKernelRecord, parse_text, report_metrics

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ncu"
CONV_REP = FIXTURES / "h200_conv3d_triton_implicit_gemm.ncu-rep"  # Triton implicit-GEMM conv3d trial
ATTN_REP = FIXTURES / "h200_attention_fmha_cutlass.ncu-rep"  # the reprofile step's attention card
ATTN_CSV = FIXTURES / "h200_attention_fmha_cutlass_raw_page.csv"  # the same report, `ncu --import --page raw`
PREFLIGHT_CSV = FIXTURES / "h200_preflight_tiny_raw_page.csv"  # the preflight's tiny kernel, its raw page

ACTIVE = "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"
ELAPSED = "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed"
MAX_WARPS = "sm__maximum_warps_per_active_cycle_pct"

needs_ncu_report = pytest.mark.skipif(
    __import__("importlib").util.find_spec("ncu_report") is None, reason="needs the ncu_report module (extra ncu)")


def _raw(record: NcuKernelRecord, name: str) -> float:
    value = record.values[name][0]
    assert isinstance(value, float)
    return value


def test_the_report_metric_is_elapsed_based_with_active_based_names_read_last() -> None:
    source = FIELD_SOURCES["tensor_pct"]
    assert source.metric == ELAPSED and metrics_for("report")[2] == ELAPSED
    assert all(name.endswith("_elapsed") for name in source.alternatives)
    assert all(name.endswith("_active") for name in source.active_based)
    assert source.names()[-len(source.active_based):] == source.active_based


@needs_ncu_report
@pytest.mark.parametrize("path", [CONV_REP, ATTN_REP, ATTN_CSV], ids=["conv_rep", "attention_rep", "attention_csv"])
def test_real_h200_tensor_pct_is_converted_by_the_files_own_cycles(path: Path) -> None:
    # Every H200 report so far was made asking for the active-based metric; none carries the elapsed one.
    (record,) = read_records(path)
    assert ACTIVE in record.values and ELAPSED not in record.values
    expected = _raw(record, ACTIVE) * _raw(record, "sm__cycles_active.avg") / _raw(record, "gpc__cycles_elapsed.max")
    notes: list[str] = []
    metrics = report_metrics(record, notes)
    assert metrics["tensor_pct"] == pytest.approx(expected, rel=1e-9)
    assert metrics["tensor_pct"] < _raw(record, ACTIVE)  # active cycles are fewer than elapsed ones
    assert any(note.startswith("tensor_pct: ncu gave " + ACTIVE) for note in notes)


@needs_ncu_report
def test_real_h200_numbers() -> None:
    """Pinned from the files (ncu's own values): conv 13.119% x 1867928.5/1914562 cycles = 12.800%;
    attention 42.096% x 1094647.3/1147996 = 40.140%; the CSV export of the same report agrees."""
    (conv,) = cards_from_ncu(CONV_REP)
    (attention,) = cards_from_ncu(ATTN_REP)
    (attention_csv,) = cards_from_ncu(ATTN_CSV)
    assert conv.kernels[0].metric("tensor_pct") == pytest.approx(12.800, abs=5e-4)
    assert attention.kernels[0].metric("tensor_pct") == pytest.approx(40.140, abs=5e-4)
    assert attention_csv.kernels[0].metric("tensor_pct") == pytest.approx(40.140, abs=5e-3)  # CSV rounds to 2 places


@needs_ncu_report
@pytest.mark.parametrize("path", [CONV_REP, ATTN_REP, ATTN_CSV], ids=["conv_rep", "attention_rep", "attention_csv"])
def test_import_ncu_cli_gives_the_reports_definitions(path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "harness.report", "import-ncu", str(path)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    (kernel,) = [k for card in json.loads(done.stdout)["cards"] for k in card["kernels"]]
    metrics = kernel["metrics"]
    assert all(value is None or value <= 100.0 for name, value in metrics.items() if name.endswith("_pct"))
    assert metrics["smem_static_b"] == 0.0  # launch__shared_mem_per_block_static 0 byte/block
    # launch__shared_mem_per_block_dynamic in bytes: 98304 (conv) and 86016 (attention) bytes, in KB.
    assert metrics["smem_dyn_kb"] in (pytest.approx(98.304), pytest.approx(86.016))
    assert "over elapsed cycles" in " ".join(kernel["ncu_notes"])


def _record(values: dict[str, tuple[float, str]]) -> NcuKernelRecord:
    return NcuKernelRecord(id=0, name="k", nvtx_range=None, source_format=RAW,
                           values={SENTINEL_METRIC: (1000.0, "ns"), **values})


def test_an_elapsed_reading_is_taken_as_it_is() -> None:
    notes: list[str] = []
    metrics = report_metrics(_record({ELAPSED: (2.354, "%"), ACTIVE: (4.10, "%"),
                                      "sm__cycles_active.avg": (573.0, "cycle"),
                                      "gpc__cycles_elapsed.max": (1000.0, "cycle")}), notes)
    assert metrics["tensor_pct"] == 2.354 and notes == []


def test_the_issues_cutlass_kernel_converts_to_the_reports_value() -> None:
    # Issue 29: cutlass Kernel2 read 4.10% active-based, sm_cycles_active/cycles_elapsed 0.573; report 2.354%.
    metrics = report_metrics(_record({ACTIVE: (4.10, "%"), "sm__cycles_active.avg": (573.0, "cycle"),
                                      "gpc__cycles_elapsed.max": (1000.0, "cycle")}))
    assert metrics["tensor_pct"] == pytest.approx(2.354, abs=0.005)


def test_an_active_reading_without_cycles_is_null_with_a_note() -> None:
    notes: list[str] = []
    metrics = report_metrics(_record({ACTIVE: (4.10, "%")}), notes)
    assert metrics["tensor_pct"] is None
    assert notes and "tensor_pct left null" in notes[0] and "elapsed" in notes[0]


def test_a_percentage_above_100_is_null_with_a_note() -> None:
    # 141.888%: lts__t_sector_hit_rate.pct of cuBLAS's scal_kernel in the H200 capture step's report.
    notes: list[str] = []
    metrics = report_metrics(_record({"lts__t_sector_hit_rate.pct": (141.88777729447582, "%"),
                                      "lts__throughput.avg.pct_of_peak_sustained_elapsed": (100.0, "%")}), notes)
    assert metrics["l2_hit_pct"] is None and metrics["l2_pct"] == 100.0  # 100 itself is a share
    assert notes == ["l2_hit_pct left null: ncu's lts__t_sector_hit_rate.pct read 141.9%, above 100%"]


def test_a_percentage_above_100_in_a_csv_is_null_on_the_card(tmp_path: Path) -> None:
    text = ATTN_CSV.read_text()
    (record,) = parse_text(text)
    value = record.values["lts__t_sector_hit_rate.pct"][0]
    assert value == 90.29
    planted = tmp_path / "planted.csv"
    planted.write_text(text.replace('"90.29"', '"114.14"', 1))  # the H200 convertTensor kernel's reading
    (card,) = cards_from_ncu(planted)
    assert card.kernels[0].metric("l2_hit_pct") is None
    assert any("114.1%, above 100%" in note for note in card.kernels[0].extra["ncu_notes"])


def test_max_warps_is_reported_unlisted_and_never_dropped() -> None:
    # The H200 preflight: the query list (148059 names) lacks it, and ncu profiled it anyway.
    (record,) = parse_text(PREFLIGHT_CSV.read_text())
    assert record.values[MAX_WARPS] == (50.0, "%")
    assert is_attribute(MAX_WARPS)
    chip = {name for name in metrics_for("report+stalls+bytes") if not is_attribute(name)} | {SENTINEL_METRIC}
    plan = resolve_metrics(metrics_for("report+stalls+bytes"), chip, "H200")
    assert MAX_WARPS in plan.metrics and MAX_WARPS not in plan.dropped
    assert not any(MAX_WARPS in note for note in plan.notes)
