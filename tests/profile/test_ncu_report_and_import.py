"""Binary .ncu-rep reading (ncu_report module, or `ncu --import`) and the import of ncu outputs as cards."""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import stat
import sys
from pathlib import Path

import pytest

from harness.cards.fields import METRIC_FIELDS, SOURCE_NCU
from harness.cards.model import parse_report
from harness.profile.ncu import report_file
from harness.profile.ncu.importer import NcuImportError, cards_from_ncu, read_records
from harness.profile.ncu.parse import REPORT, report_metrics

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ncu"
REP = FIXTURES / "report_rtx3080_montecarlo.ncu-rep"
RAW_PAGE = FIXTURES / "raw_page_units_row_vectoradd.txt"
DETAILS_SM75 = FIXTURES / "details_page_thousands_separators_sm75.csv"
DETAILS_SM100 = FIXTURES / "details_page_with_program_output_sm100.log"
NVTX_HEADER = "thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg"

needs_ncu_report = pytest.mark.skipif(
    importlib.util.find_spec("ncu_report") is None,
    reason="the ncu_report module is not installed (pip install ncu-report, or ncu's extras/python)",
)

RNG_KERNEL = "initRNG(curandStateXORWOW*, unsigned int)"
VALUE_KERNEL = "void computeValue<float>(unsigned int*, curandStateXORWOW*, unsigned int)"


def write_raw_page(path: Path, kernels: list[tuple[str, str, float]]) -> Path:
    """A raw page in ncu's layout with an NVTX column: (range or "", kernel name, duration in ns)."""
    header = [
        "ID",
        "Process ID",
        NVTX_HEADER,
        "Kernel Name",
        "gpu__time_duration.sum",
        "dram__bytes_read.sum",
    ]
    rows = [header, ["", "", "", "", "nsecond", "byte"]]
    for i, (rng, name, ns) in enumerate(kernels):
        cell = f'7  "<default domain>:{rng}:none:none:none:none:none:none"' if rng else "7  "
        rows.append([str(i), "7", cell, name, f"{ns:,.2f}", "1,000,000"])
    buffer = io.StringIO()
    csv.writer(buffer, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows(rows)
    path.write_text("program says hi\n==PROF== Connected to process 7\n" + buffer.getvalue())
    return path


# ---------------------------------------------------------------------------------------------
# Binary reports


@needs_ncu_report
def test_real_report_through_the_ncu_report_module() -> None:
    records = report_file.read_report(REP)
    assert [r.name for r in records] == [RNG_KERNEL, VALUE_KERNEL]
    assert [r.id for r in records] == [0, 1]
    assert all(r.source_format == REPORT and r.nvtx_range is None for r in records)
    assert records[0].values["gpu__time_duration.sum"] == (77686368.0, "ns")
    rng, value = (report_metrics(r) for r in records)
    assert rng["dur_us"] == pytest.approx(77686.368)  # 77,686,368 ns
    assert rng["dram_read_mb"] == pytest.approx(2249.523584)  # 2,249,523,584 bytes
    assert rng["dram_write_mb"] == pytest.approx(987.958016)
    assert rng["regs"] == 107.0 and rng["grid"] == 1220.0 and rng["block"] == 128.0
    # Its full set has the report's own elapsed-based tensor metric (0.0: no MMA in a Monte Carlo kernel).
    assert records[0].values["sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed"] == (0.0, "%")
    assert rng["occ_limit_regs"] == 4.0 and rng["tensor_pct"] == 0.0
    # GPC clock = cycles / duration: 1442 MHz on this RTX 3080, a plausible SM clock.
    cycles, duration = rng["cycles_elapsed"], rng["dur_us"]
    assert cycles is not None and duration is not None
    assert cycles / duration == pytest.approx(1442.3, abs=0.5)
    assert value["dur_us"] == pytest.approx(7597.056)
    assert value["smem_dyn_kb"] == pytest.approx(0.512)  # 512 byte/block
    assert value["l2_hit_pct"] == pytest.approx(99.207, abs=1e-3)
    assert records[0].values["device__attribute_display_name"] == ("GeForce RTX 3080", "")


@needs_ncu_report
def test_real_report_cards_carry_stall_counters() -> None:
    cards = cards_from_ncu(REP)
    assert [c.op for c in cards] == [RNG_KERNEL, VALUE_KERNEL]
    counters = cards[0].kernels[0].extra["ncu_counters"]
    assert counters["stall_wait"] == pytest.approx(13.827, abs=1e-3)
    assert counters["stall_long_scoreboard"] == pytest.approx(1.975, abs=1e-3)
    assert "l1tex_mb" not in counters  # not collected in this report


@needs_ncu_report
def test_a_file_that_is_not_a_report(tmp_path: Path) -> None:
    fake = tmp_path / "notes.ncu-rep"
    fake.write_text("not a report")
    with pytest.raises(report_file.NcuReportError, match="no profiled kernels"):
        report_file.read_report(fake)


def test_report_read_through_ncu_import_when_the_module_is_absent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A stand-in ncu that records its arguments and prints a real raw page, as `ncu --import` would.
    args_file = tmp_path / "args.json"
    fake = tmp_path / "bin" / "ncu"
    fake.parent.mkdir()
    fake.write_text(
        f"#!{sys.executable}\n"
        "import json, sys\n"
        f"json.dump(sys.argv[1:], open({str(args_file)!r}, 'w'))\n"
        f"sys.stdout.write(open({str(RAW_PAGE)!r}).read())\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(report_file, "ncu_report_module", lambda: None)
    monkeypatch.setenv("PATH", str(fake.parent))
    records = report_file.read_report(REP)
    assert [r.name for r in records] == ["vecAdd"] * 3
    assert json.loads(args_file.read_text()) == [
        "--import",
        str(REP),
        "--csv",
        "--page",
        "raw",
        "--print-units",
        "base",
        "--print-kernel-base",
        "demangled",
    ]


def test_report_without_module_or_ncu_names_both_fixes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(report_file, "ncu_report_module", lambda: None)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("NCU_HOME", raising=False)
    with pytest.raises(report_file.NcuReportError) as caught:
        report_file.read_report(REP)
    message = str(caught.value)
    assert str(REP) in message and "pip install ncu-report" in message and "PATH" in message
    with pytest.raises(NcuImportError, match="pip install ncu-report"):
        cards_from_ncu(REP)


def test_module_search_covers_ncu_install_layouts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cuda = tmp_path / "cuda"
    (cuda / "bin").mkdir(parents=True)
    ncu = cuda / "bin" / "ncu"
    ncu.write_text("#!/bin/sh\n")
    ncu.chmod(0o755)
    (cuda / "nsight-compute-2025.1.0" / "extras" / "python").mkdir(parents=True)
    monkeypatch.setenv("PATH", str(cuda / "bin"))
    monkeypatch.setenv("NCU_HOME", str(tmp_path / "home"))
    found = report_file._extras_dirs()
    assert found[0] == tmp_path / "home" / "extras" / "python"
    assert cuda / "bin" / "extras" / "python" in found  # /opt/nvidia/nsight-compute/<v>/ncu layout
    assert cuda / "extras" / "python" in found  # <dir of ncu>/../extras/python
    assert cuda / "nsight-compute-2025.1.0" / "extras" / "python" in found  # CUDA toolkit layout


# ---------------------------------------------------------------------------------------------
# Import as cards


@pytest.mark.parametrize("path", [RAW_PAGE, DETAILS_SM75, DETAILS_SM100])
def test_every_csv_format_imports(path: Path) -> None:
    cards = cards_from_ncu(path)
    assert cards
    for card in cards:
        assert card.stage == "imported" and card.group == f"ncu:{card.op}" and card.shape_parameters == {}
        assert card.primary is None and card.status is None
        for kernel in card.kernels:
            assert kernel.metrics is not None and list(kernel.metrics) == list(METRIC_FIELDS)
            assert kernel.extra["metrics_source"] == SOURCE_NCU
            assert kernel.classification is None


def test_kernels_without_ranges_group_by_name() -> None:
    (card,) = cards_from_ncu(RAW_PAGE)  # three vecAdd launches, no NVTX
    assert card.op == "vecAdd" and len(card.kernels) == 3
    assert card.summed_kernel_us == pytest.approx(3 * 2.72)
    assert card.dominant_kernel == "vecAdd"
    assert [k.extra["ncu_id"] for k in card.kernels] == [0, 1, 2]


def test_details_page_card_values() -> None:
    (card,) = cards_from_ncu(DETAILS_SM75)
    assert card.op.startswith("copy_blocked[v1,") and card.op.endswith("long long)")
    assert card.summed_kernel_us == pytest.approx(21058.944)
    assert card.kernels[0].metric("dram_pct") == 61.84


def test_cards_per_nvtx_range(tmp_path: Path) -> None:
    path = write_raw_page(
        tmp_path / "trial.csv",
        [
            ("conv", "nchwToNhwcKernel", 1000.0),
            ("conv", "sm90_xmma_fprop_implicit_gemm", 5000.0),
            ("cast", "elementwise_kernel", 300.0),
            ("", "warmup_kernel", 10.0),
            ("conv", "nhwcToNchwKernel", 900.0),
        ],
    )
    conv, cast, loose = cards_from_ncu(path)
    assert (conv.op, conv.group) == ("conv", "ncu:conv")
    assert [k.name for k in conv.kernels] == [
        "nchwToNhwcKernel",
        "sm90_xmma_fprop_implicit_gemm",
        "nhwcToNchwKernel",
    ]
    assert conv.summed_kernel_us == pytest.approx(6.9)
    assert conv.dominant_kernel == "sm90_xmma_fprop_implicit_gemm"
    assert conv.kernels[0].metric("dram_read_mb") == 1.0
    assert (cast.op, loose.op) == ("cast", "warmup_kernel")
    by_kernel = cards_from_ncu(path, group_by="kernel")
    assert [c.op for c in by_kernel] == [
        "nchwToNhwcKernel",
        "sm90_xmma_fprop_implicit_gemm",
        "elementwise_kernel",
        "warmup_kernel",
        "nhwcToNchwKernel",
    ]
    # The cards form a valid report: distinct card ids, kernels with the ncu source.
    report = parse_report({"cards": [c.to_dict() for c in (conv, cast, loose)]}, "mem")
    assert [c.op for c in report.cards] == ["conv", "cast", "warmup_kernel"]
    assert report.cards[0].kernels[1].extra["metrics_source"] == SOURCE_NCU


def test_unknown_duration_leaves_the_sum_unknown(tmp_path: Path) -> None:
    path = write_raw_page(tmp_path / "t.csv", [("r", "a", 1000.0), ("r", "b", 2000.0)])
    path.write_text(path.read_text().replace('"2,000.00"', '"n/a"'))
    (card,) = cards_from_ncu(path)
    assert card.summed_kernel_us is None
    assert card.dominant_kernel == "a"


@pytest.mark.parametrize(
    "content, message",
    [
        ("hello\nworld\n", "no ncu CSV table"),
        (
            "==PROF== Connected\n==ERROR== ERR_NVGPUCTRPERM - The user does not have permission\n",
            "ERR_NVGPUCTRPERM",
        ),
        ("==WARNING== No kernels were profiled.\n", "profiled no kernels"),
    ],
)
def test_unusable_text_is_one_line_error_naming_the_file(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "ncu.log"
    path.write_text(content)
    with pytest.raises(NcuImportError, match=message) as caught:
        cards_from_ncu(path)
    assert str(caught.value).startswith(f"{path}: ") and "\n" not in str(caught.value)
    assert isinstance(caught.value, ValueError)


def test_missing_file_and_bad_units(tmp_path: Path) -> None:
    with pytest.raises(NcuImportError, match="cannot read"):
        read_records(tmp_path / "absent.csv")
    bad = tmp_path / "bad.csv"
    bad.write_text(DETAILS_SM75.read_text().replace('"Duration","ns"', '"Duration","parsec"'))
    (card,) = cards_from_ncu(bad)  # an unknown unit costs its field, not the import
    (kernel,) = card.kernels
    assert kernel.metric("dur_us") is None and kernel.metric("grid") is not None
    assert card.summed_kernel_us is None
    assert [n for n in kernel.extra["ncu_notes"] if "'parsec'" in n and n.startswith("dur_us left null")]
    with pytest.raises(ValueError, match="group_by"):
        cards_from_ncu(RAW_PAGE, group_by="stream")  # type: ignore[arg-type]
