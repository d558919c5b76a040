"""ncu on a machine seen for the first time: the stall ratio's unit, a profiler that cannot start, metrics
the chip lacks, ncu and its target dying with the harness, one kept report per card and trial."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

import harness.profile.ncu_backend as backend
from harness.boundary.requests import Measure
from harness.boundary.spec import CardSpec
from harness.cards.model import Card, Kernel, empty_metrics, load_report
from harness.profile.base import WorkloadFacts
from harness.profile.ncu.command import profile_command
from harness.profile.ncu.failures import detect
from harness.profile.ncu.metrics import (
    FIELD_SOURCES,
    SENTINEL_METRIC,
    STALL_REQUEST,
    metrics_for,
    parse_query_metrics,
    resolve_metrics,
)
from harness.profile.ncu.parse import (
    RAW,
    NcuKernelRecord,
    counter_metrics,
    report_metrics,
)
from harness.profile.ncu.runner import run_command
from harness.profile.ncu.units import to_report_unit
from tests.processes import alive, wait_dead

REPO = Path(__file__).resolve().parents[2]
TENSOR = FIELD_SOURCES["tensor_pct"].metric
GMMA = "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_elapsed"


# ---------------------------------------------------------------------------------------------
# Units and failures


def test_stall_ratio_accepts_the_ratio_unit() -> None:
    assert to_report_unit(1.25, "ratio", "ratio") == 1.25
    record = NcuKernelRecord(
        id=0, name="k", nvtx_range=None, source_format=RAW,
        values={"smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio": (3.5, "ratio"),
                "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio": (0.5, "")},
    )
    assert counter_metrics(record) == {"stall_long_scoreboard": 3.5, "stall_barrier": 0.5}


def test_a_profiler_that_cannot_start_is_named() -> None:
    text = "==PROF== Connected to process 7\n==ERROR== Failed to initialize the profiler: LibraryNotLoaded\n"
    failure = detect(text, 1)
    assert failure is not None and failure.code == "profiler_unavailable"
    assert "LibraryNotLoaded" in str(failure) and "profiler=torch_cuda" in str(failure)


# ---------------------------------------------------------------------------------------------
# The metric list against the chip

QUERY_OUTPUT = """\
Device NVIDIA H200 (GH100)
------------------------------------------------------------- ----------------------------------
Metric Name                                                   Metric Description
------------------------------------------------------------- ----------------------------------
gpu__time_duration.sum                                        total duration in nanoseconds
sm__throughput.avg.pct_of_peak_sustained_elapsed              SM throughput
    (continued description)
sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_elapsed  gmma pipe
smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio  stalls
"""


def test_query_output_is_read_as_names() -> None:
    names = parse_query_metrics(QUERY_OUTPUT)
    assert names == {
        "gpu__time_duration.sum",
        "sm__throughput.avg.pct_of_peak_sustained_elapsed",
        GMMA,
        "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",
    }


def test_missing_metrics_fall_back_or_are_dropped_with_a_note() -> None:
    available = parse_query_metrics(QUERY_OUTPUT)
    requested = [SENTINEL_METRIC, TENSOR, "lts__t_bytes.sum", STALL_REQUEST]
    plan = resolve_metrics(requested, available, "GH100")
    assert plan.metrics == [SENTINEL_METRIC, GMMA, STALL_REQUEST]
    assert plan.substituted == {TENSOR: GMMA}
    assert plan.dropped == ["lts__t_bytes.sum"]
    assert any("GH100" in note and GMMA in note for note in plan.notes)
    # The alternative is read back into the field.
    record = NcuKernelRecord(id=0, name="k", nvtx_range=None, source_format=RAW,
                             values={GMMA: (42.0, "%"), SENTINEL_METRIC: (1000.0, "ns")})
    assert report_metrics(record)["tensor_pct"] == 42.0


def test_a_stall_regex_with_no_match_is_dropped() -> None:
    plan = resolve_metrics([SENTINEL_METRIC, STALL_REQUEST], {SENTINEL_METRIC}, "chip")
    assert plan.metrics == [SENTINEL_METRIC] and plan.dropped == [STALL_REQUEST]


def test_an_unparsed_query_changes_nothing() -> None:
    requested = metrics_for("report")
    plan = resolve_metrics(requested, {"something__else"}, "chip")
    assert plan.metrics == requested and not plan.dropped and "not used" in plan.notes[0]
    assert resolve_metrics(requested, None).metrics == requested


def test_profile_command_takes_the_resolved_list(tmp_path: Path) -> None:
    command = profile_command(["prog"], nvtx_range="r", report_path=tmp_path / "t.ncu-rep",
                              clock_control="none", cache_control="all", metrics=["a__b.sum", "c__d.sum"])
    assert command.argv[command.argv.index("--metrics") + 1] == "a__b.sum,c__d.sum"
    with pytest.raises(ValueError, match="no metric left"):
        profile_command(["prog"], nvtx_range="r", report_path=tmp_path / "t", clock_control="none",
                        cache_control="all", metrics=[])


# ---------------------------------------------------------------------------------------------
# ncu and what it starts die with the harness






def _read_pids(path: Path, count: int, seconds: float = 20.0) -> list[int]:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if path.exists():
            words = path.read_text().split()
            if len(words) >= count:
                return [int(w) for w in words[:count]]
        time.sleep(0.05)
    raise AssertionError(f"{path} never got {count} pids")


# The "ncu": starts a "profiled program" that ignores SIGTERM, writes both pids, sleeps.
_TREE = """
import os, subprocess, sys, time
target = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"])
with open(sys.argv[1], "w") as f:
    f.write(f"{os.getpid()} {target.pid}")
time.sleep(120)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc, Linux death signals")
def test_ncu_and_its_target_die_when_the_harness_is_killed(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    tree = tmp_path / "tree.py"
    tree.write_text(_TREE)
    harness = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(REPO)!r})
        from harness.profile.ncu.runner import run_command
        run_command([sys.executable, {str(tree)!r}, {str(pids)!r}], 300)
    """)
    proc = subprocess.Popen([sys.executable, "-c", harness])
    try:
        ncu_pid, target_pid = _read_pids(pids, 2)
        assert alive(ncu_pid) and alive(target_pid)
        proc.send_signal(signal.SIGKILL)  # as `timeout -s KILL` or an OOM kill would
        proc.wait()
        assert wait_dead([ncu_pid, target_pid]) == []
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_nothing_of_the_group_outlives_a_normal_end(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    script = textwrap.dedent(f"""
        import subprocess, sys
        left = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        open({str(pids)!r}, "w").write(str(left.pid))
        print("done")
    """)
    result = run_command([sys.executable, "-c", script], 60)
    assert result.returncode == 0 and result.stdout == "done\n"
    (left,) = _read_pids(pids, 1)
    assert wait_dead([left]) == []


def test_exit_status_passes_through_the_supervisor() -> None:
    result = run_command([sys.executable, "-c", "import sys; sys.exit(7)"], 60)
    assert result.returncode == 7
    unsupervised = run_command([sys.executable, "-c", "import sys; sys.exit(7)"], 60, supervised=False)
    assert unsupervised.returncode == 7


# ---------------------------------------------------------------------------------------------
# keep_dir: one report per card and trial


def _fake_cards(path: Path, group_by: str = "range") -> list[Card]:
    metrics = empty_metrics()
    metrics["dur_us"] = 1.0
    return [Card(group="g", resolution="", stage="imported", op="x", shape_parameters={},
                 kernels=[Kernel(name="k", metrics=metrics, extra={})], summed_kernel_us=1.0, dominant_kernel="k")]


def test_keep_dir_keeps_one_report_per_card_and_trial(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_ncu = tmp_path / "ncu"
    fake_ncu.write_text("#!/bin/sh\nexit 0\n")
    fake_ncu.chmod(0o755)
    query = tmp_path / "query.txt"
    query.write_text("\n".join(metrics_for("report")).replace(TENSOR, GMMA) + "\n")
    seen: list[list[str]] = []

    def fake_run(argv: list[str], deadline_s: float):  # ncu "writes" the report named after -o
        seen.append(list(argv))
        Path(argv[argv.index("-o") + 1] + ".ncu-rep").write_bytes(b"NVR\0")
        return SimpleNamespace(seconds=0.1)

    monkeypatch.setattr(backend, "run_ncu", fake_run)
    monkeypatch.setattr(backend, "cards_from_ncu", _fake_cards)
    monkeypatch.setattr(backend, "for_current_device", lambda: SimpleNamespace(to_dict=dict))
    keep = tmp_path / "keep"
    profiler = backend.NcuProfiler({"executable": str(fake_ncu), "keep_dir": str(keep),
                                    "available_metrics": str(query)})
    facts = WorkloadFacts(flops=None, min_bytes=None, dtype="float32", op_kind="linear")
    def make(card_id: str, role: str, variant: str, params: dict) -> Measure:
        card = {**load_report().cards[0].to_dict(), "id": card_id}
        spec = CardSpec(card=card, experiment_module="m", device="cuda", scale=1.0)
        return Measure(spec=spec, variant=variant, params=params, baseline=role == "baseline", card_path="c.json")

    specs = [
        make("card-a", "baseline", "as_is", {}),
        make("card-a", "trial", "tiles", {"BLOCK_M": 64}),
        make("card-a", "trial", "tiles", {"BLOCK_M": 64}),
        make("card/b", "baseline", "as_is", {}),
    ]
    profiles = [profiler.profile(lambda: None, facts, spec) for spec in specs]
    reports = sorted(p.relative_to(keep).as_posix() for p in keep.rglob("trial.ncu-rep"))
    assert len(reports) == 4, reports
    assert reports[0].startswith("card-a/000_baseline_as_is/") and reports[1].startswith("card-a/001_trial_tiles_")
    assert reports[2].startswith("card-a/002_trial_tiles_") and reports[3].startswith("card-b/000_baseline_as_is/")
    for folder in {Path(r).parent for r in reports}:
        written = json.loads((keep / folder / "trial_spec.json").read_text())
        card_id = written["measure"]["spec"]["card"]["id"]
        assert written["nvtx_range"] and card_id in ("card-a", "card/b")  # the card travels
    # The chip lacks the report's tensor metric: its alternative is requested, and the profile says so.
    requested = seen[0][seen[0].index("--metrics") + 1].split(",")
    assert GMMA in requested and TENSOR not in requested
    assert profiles[0].settings["metrics_substituted"] == {TENSOR: GMMA}
    assert profiles[0].settings["metrics_checked_against"] == str(query)
    assert any(GMMA in note for note in profiles[0].notes)


def test_available_metrics_off_and_unreadable(tmp_path: Path) -> None:
    assert backend.chip_metrics(None, "ncu") == (None, "not checked", None)
    with pytest.raises(backend.ProfilerUnavailable, match="available_metrics"):
        backend.chip_metrics(str(tmp_path / "missing.txt"), "ncu")


def test_auto_query_failure_leaves_the_list_unchecked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_ncu = tmp_path / "ncu"
    fake_ncu.write_text("#!/bin/sh\necho '==ERROR== Failed to initialize the profiler: LibraryNotLoaded'\nexit 1\n")
    fake_ncu.chmod(0o755)
    monkeypatch.setattr(backend, "_QUERIED", {})
    names, _, note = backend.chip_metrics("auto", str(fake_ncu))
    assert names is None and "LibraryNotLoaded" in (note or "")
    ok = tmp_path / "ncu_ok"
    ok.write_text("#!/bin/sh\necho 'gpu__time_duration.sum   duration'\n"
                  "echo 'sm__throughput.avg.pct_of_peak_sustained_elapsed x'\n")
    ok.chmod(0o755)
    names, _, note = backend.chip_metrics("auto", str(ok))
    assert note is None and names == {"gpu__time_duration.sum", "sm__throughput.avg.pct_of_peak_sustained_elapsed"}
    assert os.path.basename(backend.query_command("ncu")[0]) == "ncu"
