"""Unit conversion, the metric table and its sets, and the ncu command lines of a trial."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from harness.cards.fields import METRIC_FIELDS, METRIC_UNITS
from harness.hardware.ncu_metrics import CACHE_BYTES_METRICS
from harness.profile.ncu.command import export_command, profile_command
from harness.profile.ncu.metrics import (
    FIELD_SOURCES,
    STALL_METRIC,
    STALL_REQUEST,
    metrics_for,
)
from harness.profile.ncu.units import ACCEPTED, NcuUnitError, to_report_unit

# Stall metric names as a real ncu report (sm_86, --set full) spells them.
REAL_STALL_NAMES = [
    "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_no_instruction_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio",
]


# ---------------------------------------------------------------------------------------------
# Units


@pytest.mark.parametrize(
    "value, unit, target, expected",
    [
        (21058944.0, "ns", "us", 21058.944),
        (2720.0, "nsecond", "us", 2.72),
        (406.24, "usecond", "us", 406.24),
        (21.06, "msecond", "us", 21060.0),
        (1.5, "s", "us", 1.5e6),
        (7552.0, "byte", "MB", 0.007552),
        (315.0, "Mbyte", "MB", 315.0),
        (2.25, "Gbyte", "MB", 2250.0),
        (44.48, "Kbyte", "MB", 0.04448),
        (205696.0, "byte/block", "KB", 205.696),
        (1.0, "KiB", "KB", 1.024),
        (1.5, "Kbyte/block", "B", 1500.0),
        (12.0, "Mcycle", "cycles", 12e6),
        (61.84, "%", "%", 61.84),
        (8.0, "block", "blocks/SM", 8.0),
        (168.0, "register/thread", "registers/thread", 168.0),
        (1024.0, "", "blocks", 1024.0),
    ],
)
def test_conversion_into_report_units(value: float, unit: str, target: str, expected: float) -> None:
    assert to_report_unit(value, unit, target) == pytest.approx(expected, rel=1e-12)


def test_every_report_unit_has_a_conversion() -> None:
    assert set(METRIC_UNITS.values()) <= set(ACCEPTED)


@pytest.mark.parametrize(
    "unit, target", [("fortnight", "us"), ("%", "us"), ("byte", "us"), ("Kblock", "blocks/SM")]
)
def test_unknown_or_mismatched_unit_is_an_error(unit: str, target: str) -> None:
    with pytest.raises(NcuUnitError, match=re.escape(repr(unit))) as caught:
        to_report_unit(1.0, unit, target, what="kernel 3 dur")
    assert "kernel 3 dur" in str(caught.value) and "--print-units base" in str(caught.value)


def test_unknown_report_unit_is_an_error() -> None:
    with pytest.raises(NcuUnitError, match="furlongs"):
        to_report_unit(1.0, "ns", "furlongs")


# ---------------------------------------------------------------------------------------------
# Metric table and sets


def test_table_covers_every_report_field_with_the_documented_metric() -> None:
    assert tuple(FIELD_SOURCES) == METRIC_FIELDS
    assert FIELD_SOURCES["dur_us"].metric == "gpu__time_duration.sum"
    assert FIELD_SOURCES["dram_pct"].metric == "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"
    assert FIELD_SOURCES["dram_pct"].fallbacks == ("dram__throughput.avg.pct_of_peak_sustained_elapsed",)
    assert FIELD_SOURCES["cycles_elapsed"].metric == "gpc__cycles_elapsed.max"
    assert FIELD_SOURCES["dram_write_mb"].metric == "dram__bytes_write.sum"


def test_metric_sets() -> None:
    report = metrics_for("report")
    assert report == [source.metric for source in FIELD_SOURCES.values()]
    assert len(report) == len(set(report)) == 20
    full = metrics_for("report+stalls+bytes")
    assert full == [*report, STALL_REQUEST, "l1tex__t_bytes.sum", "lts__t_bytes.sum"]
    assert metrics_for("report+report") == report
    with pytest.raises(ValueError, match="unknown ncu metric set 'report\\+warps'"):
        metrics_for("report+warps")


def test_stall_request_pattern_and_reader_agree_on_real_names() -> None:
    requested = re.compile(STALL_REQUEST.removeprefix("regex:"))
    for name in REAL_STALL_NAMES:
        assert requested.match(name)
        assert STALL_METRIC.match(name)
    reason = STALL_METRIC.match(REAL_STALL_NAMES[1])
    assert reason is not None and reason.group("reason") == "no_instruction"
    assert not STALL_METRIC.match("smsp__pcsamp_warps_issue_stalled_long_scoreboard")
    assert set(CACHE_BYTES_METRICS) == {"l1tex_mb", "lts_mb"}


# ---------------------------------------------------------------------------------------------
# Command lines


def test_profile_command_flags(tmp_path: Path) -> None:
    child = [sys.executable, "-m", "harness.trial.ncu_child", str(tmp_path / "trial.json")]
    command = profile_command(
        child,
        nvtx_range="trial 7",
        report_path=tmp_path / "out" / "trial7.ncu-rep",
        clock_control="none",
        cache_control="all",
        metric_set="report+stalls",
        ncu="/opt/ncu/ncu",
    )
    assert command.argv == [
        "/opt/ncu/ncu",
        "--nvtx",
        "--nvtx-include",
        "trial 7/",
        "--target-processes",
        "all",
        "--replay-mode",
        "kernel",
        "--clock-control",
        "none",
        "--cache-control",
        "all",
        "--metrics",
        ",".join(metrics_for("report+stalls")),
        "-o",
        str(tmp_path / "out" / "trial7"),
        "-f",
        *child,
    ]
    assert command.report_path == tmp_path / "out" / "trial7.ncu-rep"
    assert command.settings["clock_control"] == "none" and command.settings["cache_control"] == "all"
    assert command.settings["replay_mode"] == "kernel" and command.settings["nvtx_include"] == "trial 7/"
    assert command.settings["metrics"] == metrics_for("report+stalls")


def test_profile_command_other_settings_and_report_name(tmp_path: Path) -> None:
    command = profile_command(
        ["./bench"], nvtx_range="r", report_path=tmp_path / "x", clock_control="base", cache_control="none"
    )
    assert command.argv[command.argv.index("--clock-control") + 1] == "base"
    assert command.argv[command.argv.index("--cache-control") + 1] == "none"
    assert command.argv[command.argv.index("-o") + 1] == str(tmp_path / "x")
    assert command.report_path == tmp_path / "x.ncu-rep"
    assert command.argv[-1] == "./bench" and command.argv[0] == "ncu"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"nvtx_range": "r/"}, "trailing"),
        ({"nvtx_range": ""}, "range name"),
        ({"clock_control": "auto"}, "clock_control"),
        ({"cache_control": "some"}, "cache_control"),
        ({"metric_set": "everything"}, "metric set"),
    ],
)
def test_profile_command_rejects_bad_arguments(kwargs: dict[str, str], message: str, tmp_path: Path) -> None:
    arguments = {"nvtx_range": "r", "clock_control": "none", "cache_control": "all", **kwargs}
    with pytest.raises(ValueError, match=message):
        profile_command(["./bench"], report_path=tmp_path / "x", **arguments)  # type: ignore[arg-type]


def test_export_command() -> None:
    assert export_command(Path("/r/a b.ncu-rep"), ncu="ncu") == [
        "ncu",
        "--import",
        "/r/a b.ncu-rep",
        "--csv",
        "--page",
        "raw",
        "--print-units",
        "base",
        "--print-kernel-base",
        "demangled",
    ]
