"""ncu CSV parsing on real outputs (tests/fixtures/ncu, see its README): both pages, units, NVTX.

Expected numbers were read off the fixture files by hand.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.cards.fields import METRIC_FIELDS
from harness.profile.ncu.metrics import FIELD_SOURCES
from harness.profile.ncu.parse import (
    DETAILS,
    RAW,
    NcuParseError,
    counter_metrics,
    detect_format,
    parse_text,
    parse_value,
    report_metrics,
)
from harness.profile.ncu.units import NcuUnitError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ncu"
RAW_PAGE = FIXTURES / "raw_page_units_row_vectoradd.txt"
DETAILS_SM75 = FIXTURES / "details_page_thousands_separators_sm75.csv"
DETAILS_SM100 = FIXTURES / "details_page_with_program_output_sm100.log"

NUMBA_KERNEL = (
    "copy_blocked[v1,cw51cXTLSUwv1sDUaKthrqNgqqmjgOR3W3CwAkMXLaJtQYkOIgxJU0gCqOkEJoHkbttqdVhoqlspQGNFHSgJ5BnXagIA]"
    "(Array<long long, 1, C, mutable, aligned>, Array<long long, 1, C, mutable, aligned>, long long)"
)
CUTLASS_KERNEL = (
    "cutlass3x_sm100_tensorop_s64x256x32gemm_f8_f8_f32_f16_f16_64x256x128_1x1x1_0_tnn_align4_1sm_"
    "bias_f16_relu_aux_scalemax"
)
NVTX_HEADER = "thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg"
START_END_HEADER = "Id:Domain:Start/Stop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg"


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def raw_page(rows: list[list[str]], metrics: dict[str, str]) -> str:
    """A small raw page in ncu's layout: every field quoted, header, units row, one row per kernel."""
    header = ["ID", "Process ID", NVTX_HEADER, "Kernel Name", *metrics]
    table = [header, ["", "", "", "", *metrics.values()], *rows]
    buffer = io.StringIO()
    csv.writer(buffer, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows(table)
    return "==PROF== Connected to process 4242 (python)\n" + buffer.getvalue() + "==PROF== Disconnected\n"


def nvtx_cell(*ranges: str, domain: str = "<default domain>") -> str:
    return "4242  " + "  ".join(f'"{domain}:{r}:none:none:none:none:none:none"' for r in ranges)


# ---------------------------------------------------------------------------------------------
# Raw page


def test_raw_page_rows_units_and_instanced_values() -> None:
    records = parse_text(read(RAW_PAGE))
    assert [r.id for r in records] == [0, 1, 2]
    assert [r.name for r in records] == ["vecAdd", "vecAdd", "vecAdd"]
    assert all(r.source_format == RAW and r.nvtx_range is None for r in records)
    first = records[0]
    # The units row (second) gives each column's unit; thousands separators are removed.
    assert first.values["gpu__time_duration"] == (2720.0, "nsecond")
    assert first.values["launch__block_size"] == (1024.0, "")
    assert first.values["dram__bytes_per_sec"] == (2917647058.82, "byte/second")
    assert first.values["launch__registers_per_thread"] == (8.0, "register/thread")
    # Instanced values stay text; old metric names without "__" are still metrics, not launch info.
    assert str(first.values["inst_executed"][0]).startswith("32.00; 32.00; ")
    assert first.values["inst_executed"][1] == "inst"
    assert first.attributes["Process Name"] == "vectoradd_l1_enabled"
    assert first.attributes["Kernel Time"] == "2023-Oct-01 02:39:05"
    assert "Kernel Time" not in first.values


def test_raw_page_report_fields_in_report_units() -> None:
    first, _, third = parse_text(read(RAW_PAGE))
    metrics = report_metrics(first)
    assert list(metrics) == list(METRIC_FIELDS)
    assert metrics["dur_us"] == pytest.approx(2.72)  # 2,720.00 nsecond
    assert metrics["dram_read_mb"] == pytest.approx(0.007552)  # 7,552.00 byte, 1 MB = 1e6 bytes
    assert metrics["dram_write_mb"] == pytest.approx(0.000384)  # 384.00 byte
    assert metrics["cycles_elapsed"] == 5774.0  # gpc__elapsed_cycles_max
    assert (metrics["grid"], metrics["block"], metrics["regs"]) == (1.0, 1024.0, 8.0)
    assert (metrics["occ_limit_regs"], metrics["occ_limit_smem"]) == (8.0, 32.0)
    assert metrics["waves"] == 0.03 and metrics["max_warps_pct"] == 100.0
    # This Pascal-era page has no sm__throughput / lts__ metrics: those fields stay unknown.
    assert metrics["sm_pct"] is None and metrics["l2_pct"] is None and metrics["tensor_pct"] is None
    # cycles / duration is the GPC clock: 5774 / 2.72 us = 2123 MHz, ncu's gpc__frequency 2.12 GHz.
    cycles, duration = metrics["cycles_elapsed"], metrics["dur_us"]
    assert cycles is not None and duration is not None
    assert cycles / duration == pytest.approx(2122.5, abs=1)
    assert report_metrics(third)["dram_read_mb"] == pytest.approx(0.002176)


# ---------------------------------------------------------------------------------------------
# Details page


def test_details_page_names_with_commas_and_thousands_separators() -> None:
    (record,) = parse_text(read(DETAILS_SM75))
    assert record.source_format == DETAILS
    assert record.name == NUMBA_KERNEL
    assert record.values["Duration"] == (21058944.0, "ns")
    assert record.values["DRAM Frequency"] == (4963609951.19, "hz")
    assert record.values["Function Cache Configuration"] == ("CachePreferNone", "")
    # The label repeats in another section with another unit: both kept, the later one qualified.
    assert record.values["Memory Throughput"] == (61.84, "%")
    assert record.values["Memory Workload Analysis / Memory Throughput"] == (196456177859.63, "byte/s")
    assert record.attributes["Block Size"] == "(256, 1, 1)"
    assert record.attributes["CC"] == "7.5"


def test_details_page_report_fields() -> None:
    (record,) = parse_text(read(DETAILS_SM75))
    metrics = report_metrics(record)
    assert metrics["dur_us"] == pytest.approx(21058.944)  # 21,058,944 ns
    assert metrics["cycles_elapsed"] == 12319469.0
    assert metrics["sm_cycles_active"] == pytest.approx(12217197.85)
    assert metrics["grid"] == 1024.0 and metrics["block"] == 256.0  # Launch Statistics, not "(256, 1, 1)"
    assert (metrics["sm_pct"], metrics["dram_pct"], metrics["l2_pct"]) == (1.30, 61.84, 8.38)
    assert (metrics["warps_active_pct"], metrics["max_warps_pct"]) == (96.26, 100.0)
    assert (metrics["l2_hit_pct"], metrics["waves"], metrics["regs"]) == (4.58, 6.40, 32.0)
    assert (metrics["occ_limit_regs"], metrics["occ_limit_smem"]) == (8.0, 16.0)
    # The details page carries no DRAM byte counts and no tensor-pipe metric.
    assert (
        metrics["dram_read_mb"] is None and metrics["dram_write_mb"] is None and metrics["tensor_pct"] is None
    )


def test_details_page_after_program_output() -> None:
    text = read(DETAILS_SM100)
    assert text.splitlines()[1].startswith("2208    2048")  # the program's own output precedes the table
    (record,) = parse_text(text)
    assert record.name == CUTLASS_KERNEL
    metrics = report_metrics(record)
    assert metrics["dur_us"] == pytest.approx(406.24)  # 406240 ns
    assert metrics["smem_dyn_kb"] == pytest.approx(205.696)  # 205696 byte/block, 1 KB = 1000 bytes
    assert metrics["smem_static_b"] == 0.0
    assert (metrics["grid"], metrics["block"], metrics["regs"], metrics["waves"]) == (
        288.0,
        384.0,
        168.0,
        1.89,
    )
    assert metrics["l2_hit_pct"] is None  # no Memory Workload Analysis section in this run


def test_every_details_label_in_the_table_is_found_in_a_real_page() -> None:
    labels = {s.display for s in FIELD_SOURCES.values() if s.display}
    (record,) = parse_text(read(DETAILS_SM75))
    assert labels <= set(record.values)


# ---------------------------------------------------------------------------------------------
# Detection and defects


@pytest.mark.parametrize(
    "path, expected", [(RAW_PAGE, RAW), (DETAILS_SM75, DETAILS), (DETAILS_SM100, DETAILS)]
)
def test_format_detection(path: Path, expected: str) -> None:
    assert detect_format(read(path)) == expected


def test_text_without_a_table_is_rejected() -> None:
    with pytest.raises(NcuParseError, match="no ncu CSV table"):
        parse_text("==PROF== Connected to process 1\n==WARNING== No kernels were profiled.\n")


def test_raw_page_without_units_row_is_rejected() -> None:
    lines = read(RAW_PAGE).splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith('"ID",'))
    del lines[header + 1]
    with pytest.raises(NcuParseError, match="units row"):
        parse_text("\n".join(lines))


def test_unknown_unit_is_never_a_guess_it_is_null_with_a_note() -> None:
    text = read(DETAILS_SM75).replace('"Duration","ns"', '"Duration","fortnight"')
    (record,) = parse_text(text)
    notes: list[str] = []
    metrics = report_metrics(record, notes)
    assert metrics["dur_us"] is None and metrics["waves"] == 6.4  # the other fields are still read
    assert len(notes) == 1 and notes[0].startswith("dur_us left null: ") and "'fortnight'" in notes[0]
    assert "--print-units base" in notes[0] and "\n" not in notes[0]
    with pytest.raises(NcuUnitError, match="fortnight"):  # a caller without a place for notes is told
        report_metrics(record)


def test_non_numeric_value_of_a_field_is_an_error_and_na_is_unknown() -> None:
    (record,) = parse_text(read(DETAILS_SM75).replace('"Waves Per SM","","6.40"', '"Waves Per SM","","lots"'))
    with pytest.raises(NcuParseError, match="Waves Per SM"):
        report_metrics(record)
    (record,) = parse_text(read(DETAILS_SM75).replace('"Waves Per SM","","6.40"', '"Waves Per SM","","n/a"'))
    assert report_metrics(record)["waves"] is None


@given(st.integers(min_value=0, max_value=10**15), st.integers(min_value=0, max_value=99))
def test_thousands_separated_numbers_round_trip(whole: int, cents: int) -> None:
    assert parse_value(f"{whole:,}.{cents:02d}") == pytest.approx(whole + cents / 100)
    assert parse_value(f"{whole:,}") == whole


def test_values_that_are_not_one_number_stay_text() -> None:
    assert parse_value("32.00; 4.00") == "32.00; 4.00"
    assert parse_value("1,2345") == "1,2345"  # not a thousands grouping
    assert parse_value("(256, 1, 1)") == "(256, 1, 1)"


# ---------------------------------------------------------------------------------------------
# NVTX


def test_nvtx_push_pop_stack_from_the_raw_page_column() -> None:
    text = raw_page(
        [
            ["0", "4242", nvtx_cell("harness:trial", "inner"), "k0", "", "1,000"],
            ["1", "4242", nvtx_cell("step", domain="MyDomain"), "k1", "", "2,000"],
            ["2", "4242", "4242  ", "k2", "", "3,000"],
        ],
        {START_END_HEADER: "", "gpu__time_duration.sum": "nsecond"},
    )
    records = parse_text(text)
    assert START_END_HEADER in records[0].attributes and START_END_HEADER not in records[0].values
    # The range name may itself contain ":"; the payload fields are split off from the right.
    assert records[0].nvtx_range == "harness:trial/inner"
    assert records[1].nvtx_range == "MyDomain@step"
    assert records[2].nvtx_range is None
    assert [report_metrics(r)["dur_us"] for r in records] == [1.0, 2.0, 3.0]


def test_counter_metrics_read_stalls_and_cache_bytes() -> None:
    text = raw_page(
        [["0", "4242", "", "k", "2.5", "0.25", "1,500,000", "3,000,000"]],
        {
            "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio": "inst",
            "smsp__average_warps_issue_stalled_wait_per_issue_active.ratio": "",
            "l1tex__t_bytes.sum": "byte",
            "lts__t_bytes.sum": "Mbyte",
        },
    )
    (record,) = parse_text(text)
    assert counter_metrics(record) == {
        "stall_long_scoreboard": 2.5,
        "stall_wait": 0.25,
        "l1tex_mb": 1.5,
        "lts_mb": 3000000.0,
    }
    assert counter_metrics(parse_text(read(DETAILS_SM75))[0]) == {}
