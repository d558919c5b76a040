"""ncu that degrades instead of failing: launch and device attributes kept whatever the chip's metric list
says, a query list used only from an ncu that exited 0, an unknown unit costing its field and not the
trial, ncu found where the installer puts it and named on the card, profiler=auto probing ncu once and
falling back to the CUDA trace with ncu's error, temporary report folders removed, and the device's own
facts over the peak table's."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest

import harness.profile.ncu_backend as backend
from harness.boundary.requests import Measure
from harness.boundary.spec import CardSpec
from harness.cards.model import load_report
from harness.profile import registry
from harness.profile.base import WorkloadFacts
from harness.profile.ncu import command, probe
from harness.profile.ncu.failures import NcuFailure, detect
from harness.profile.ncu.importer import cards_from_ncu
from harness.profile.ncu.metrics import SENTINEL_METRIC, is_attribute, metrics_for, resolve_metrics
from harness.run.noise import judge_noise
from harness.run.outputs import render_summary

VERSION_OUTPUT = """\
NVIDIA (R) Nsight Compute Command Line Profiler
Copyright (c) 2018-2025 NVIDIA Corporation
Version 2025.3.1.0 (build 36398880) (public-release)
"""
# What ncu prints without permission for the counters, and where the runtime hides them.
PERMISSION = (
    "==PROF== Connected to process 42 (python3)\n"
    "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters "
    "on the target device 0. For instructions on enabling permissions and to get more information see "
    "https://developer.nvidia.com/ERR_NVGPUCTRPERM\n"
    "==PROF== Disconnected from process 42\n==WARNING== No kernels were profiled.\n"
)
LIBRARY_NOT_LOADED = "==PROF== Connected to process 9\n==ERROR== Failed to initialize the profiler: LibraryNotLoaded\n"
NO_KERNELS = ("tiny kernel (driver API) wrote 42\n==PROF== Disconnected from process 9\n"
              "==WARNING== No kernels were profiled.\n")
PROBE_TABLE = '"ID","Kernel Name","gpu__time_duration.sum"\n"","","nsecond"\n"0","tiny","1,234"\n'


def fake_ncu(folder: Path, body: str) -> str:
    """An `ncu` shell script in `folder`; every call appends its arguments to folder/calls."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "ncu"
    path.write_text(f'#!/bin/sh\necho "$@" >> "{folder / "calls"}"\n{body}')
    path.chmod(0o755)
    return str(path)


def printing(text: str, exit_code: int = 0, to_stderr: bool = False) -> str:
    """A shell body printing `text` exactly (a here-document) and exiting with `exit_code`."""
    return f"cat {'>&2 ' if to_stderr else ''}<<'EOF'\n{text}EOF\nexit {exit_code}\n"


def _calls(folder: Path) -> int:
    """How many times the fake ncu in `folder` was run (the probe's program spans many lines of it)."""
    return sum(line.startswith("--") for line in (folder / "calls").read_text().splitlines())


@pytest.fixture
def fresh_ncu_state(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No real ncu anywhere (PATH, NCU_HOME, the install root), and nothing probed or queried yet."""
    empty = tmp_path / "empty_bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", f"{empty}{os.pathsep}/usr/bin{os.pathsep}/bin")
    monkeypatch.delenv("NCU_HOME", raising=False)
    monkeypatch.setattr(command, "NCU_INSTALL_ROOT", tmp_path / "no_install_root")
    monkeypatch.setattr(probe, "_PROBED", {})
    monkeypatch.setattr(probe, "_VERSIONS", {})
    monkeypatch.setattr(backend, "_QUERIED", {})
    return empty


# ---------------------------------------------------------------------------------------------
# 1. Launch and device attributes; the query's exit status


def test_launch_and_device_attributes_are_requested_whatever_the_chip_list_says() -> None:
    requested = [*metrics_for("report"), "device__attribute_l2_cache_size", "device__attribute_multiprocessor_count"]
    launch = [m for m in requested if m.startswith("launch__")]
    assert {"launch__waves_per_multiprocessor", "launch__grid_size", "launch__block_size",
            "launch__registers_per_thread", "launch__shared_mem_per_block_dynamic",
            "launch__occupancy_limit_registers", "launch__occupancy_limit_shared_mem"} <= set(launch)
    # A chip list as `ncu --query-metrics` prints it: counters only, no launch or device attribute.
    counters = {m for m in requested if not is_attribute(m)}
    plan = resolve_metrics(requested, counters, "GH100")
    assert plan.metrics == requested and plan.dropped == [] and plan.notes == []
    # Even from a list that has none of the counters either, the attributes are still asked for.
    plan = resolve_metrics(requested, {SENTINEL_METRIC}, "GH100")
    # ncu reports sm__maximum_warps_per_active_cycle_pct unlisted (the H200's query list lacks it): kept too.
    assert ["sm__maximum_warps_per_active_cycle_pct", *launch, "device__attribute_l2_cache_size",
            "device__attribute_multiprocessor_count"] == [m for m in plan.metrics if is_attribute(m)]
    assert not any(is_attribute(m) for m in plan.dropped) and "sm__throughput" in " ".join(plan.dropped)


FULL_LIST = "\n".join(metrics_for("report+stalls+bytes")).replace("regex:", "") + "\n"


@pytest.mark.parametrize(
    "body, words",
    [
        # The whole list printed, then a failure: the exit status says the answer is not to be trusted.
        (printing(FULL_LIST + "==ERROR== An error occurred while querying metrics.\n", 1),
         ["(exit 1: ==ERROR== An error occurred"]),
        (printing(FULL_LIST, 139), ["(exit 139: "]),
    ],
)
def test_a_query_that_did_not_exit_0_is_not_used(
    tmp_path: Path, fresh_ncu_state: Path, body: str, words: list[str]
) -> None:
    ncu = fake_ncu(tmp_path / "bin", body)
    names, source, note = backend.chip_metrics("auto", ncu)
    assert names is None and source == "ncu --query-metrics" and note is not None
    assert note.startswith("metric list not checked: ncu --query-metrics failed") and all(w in note for w in words)
    plan = resolve_metrics(metrics_for("report"), names, source)
    assert plan.metrics == metrics_for("report")  # nothing dropped on an untrusted answer


def test_a_truncated_or_timed_out_query_leaves_the_list_unchecked(
    tmp_path: Path, fresh_ncu_state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Exit 0 but cut short before the duration metric: read, then not trusted.
    ncu = fake_ncu(tmp_path / "cut", printing("sm__throughput.avg.pct_of_peak_sustained_elapsed  SM throughput\n"))
    names, source, note = backend.chip_metrics("auto", ncu)
    assert note is None and names == {"sm__throughput.avg.pct_of_peak_sustained_elapsed"}
    plan = resolve_metrics(metrics_for("report"), names, source)
    assert plan.metrics == metrics_for("report") and plan.dropped == []
    assert plan.notes == [f"metric list of ncu --query-metrics not used: it lacks {SENTINEL_METRIC} (1 names read)"]
    # Killed on its deadline after printing part of the list.
    monkeypatch.setattr(backend, "QUERY_DEADLINE_S", 1.0)
    slow = fake_ncu(tmp_path / "slow", f"echo {SENTINEL_METRIC}\nexec sleep 30\n")
    names, _, note = backend.chip_metrics("auto", slow)
    assert names is None and note is not None and "failed (killed on its 1 s deadline" in note


# ---------------------------------------------------------------------------------------------
# 2. An unknown unit: the field is null, the card says why, the trial goes on


def _spec() -> Measure:
    card = {**load_report().cards[0].to_dict(), "id": "card-a"}
    spec = CardSpec(card=card, experiment_module="m", device="cuda", scale=1.0)
    return Measure(spec=spec, variant="as_is", baseline=True, card_path="baseline.json")


RAW_WITH_ODD_UNIT = (
    '"ID","Kernel Name","gpu__time_duration.sum","launch__waves_per_multiprocessor","dram__bytes_read.sum"\n'
    '"","","nsecond","","furlong"\n'
    '"0","gemm","2,000","0.50","1,000"\n'
)


def _profiler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ncu: str, run_ncu) -> backend.NcuProfiler:
    planted = tmp_path / "planted_raw_page.csv"
    planted.write_text(RAW_WITH_ODD_UNIT)
    monkeypatch.setattr(backend, "run_ncu", run_ncu)
    # The binary report stands for the planted raw page (the importer reads both the same way).
    monkeypatch.setattr(backend, "cards_from_ncu", lambda path, group_by: cards_from_ncu(planted, group_by))
    monkeypatch.setattr(backend, "for_current_device", lambda: SimpleNamespace(to_dict=dict))
    return backend.NcuProfiler({"executable": ncu, "available_metrics": None})


def test_an_unknown_unit_leaves_the_field_null_with_a_note_and_the_card_names_the_ncu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_ncu_state: Path
) -> None:
    ncu = fake_ncu(tmp_path / "bin", printing(VERSION_OUTPUT))
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(scratch))
    folders: list[Path] = []

    def run_ncu(argv: list[str], deadline_s: float) -> SimpleNamespace:
        folders.append(Path(argv[argv.index("-o") + 1]).parent)
        assert folders[-1].is_dir() and folders[-1].parent == scratch
        return SimpleNamespace(seconds=0.2)

    profiler = _profiler(tmp_path, monkeypatch, ncu, run_ncu)
    facts = WorkloadFacts(flops=None, min_bytes=None, dtype="float32", op_kind="linear")
    profile = profiler.profile(lambda: None, facts, _spec())
    (kernel,) = profile.kernels
    assert kernel.metric("dram_read_mb") is None
    assert kernel.metric("dur_us") == 2.0 and kernel.metric("waves") == 0.5  # partial_wave_tail has its waves
    (note,) = [n for n in profile.notes if "furlong" in n]
    assert note.startswith("dram_read_mb left null: kernel 0 (gemm) dram__bytes_read.sum: ncu unit 'furlong'")
    assert profile.settings["ncu_executable"] == ncu
    assert profile.settings["ncu_version"] == "Version 2025.3.1.0 (build 36398880) (public-release)"
    # The temporary folder of the trial is gone; no report path points into it.
    assert folders and not folders[0].exists() and list(scratch.iterdir()) == []
    assert profile.settings["report"] is None


def test_a_failed_trial_removes_its_temporary_folder_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_ncu_state: Path
) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(scratch))

    def run_ncu(argv: list[str], deadline_s: float) -> SimpleNamespace:
        failure = detect(PERMISSION, 1)
        assert failure is not None
        raise failure

    profiler = _profiler(tmp_path, monkeypatch, fake_ncu(tmp_path / "bin", "exit 0\n"), run_ncu)
    facts = WorkloadFacts(flops=None, min_bytes=None, dtype="float32", op_kind="linear")
    with pytest.raises(NcuFailure, match="ERR_NVGPUCTRPERM"):
        profiler.profile(lambda: None, facts, _spec())
    assert list(scratch.iterdir()) == []


def test_ncu_version_without_a_version_line_says_why(tmp_path: Path, fresh_ncu_state: Path) -> None:
    broken = fake_ncu(tmp_path / "bin", printing("==ERROR== cannot start\n", 3))
    assert probe.ncu_version(broken) == f"unknown (`{broken} --version` exit 3: ==ERROR== cannot start)"
    assert probe.ncu_version(str(tmp_path / "absent")).startswith("unknown (no executable")


# ---------------------------------------------------------------------------------------------
# 3. Where ncu is found


def test_ncu_is_found_on_path_then_ncu_home_then_the_newest_installed_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_ncu_state: Path
) -> None:
    root = tmp_path / "nsight-compute"
    for version in ("2024.1.0", "2025.3.1", "2025.10.0", "latest"):
        fake_ncu(root / version, "exit 0\n")
    (root / "2026.1.0").mkdir()  # a version folder without an ncu in it (a partial install)
    assert command.find_ncu() is None
    assert backend.ncu_usable({}) == (
        False, f"ncu not on PATH, not in NCU_HOME, nor under {tmp_path}/no_install_root/*/")
    monkeypatch.setattr(command, "NCU_INSTALL_ROOT", root)
    # Newest by version number (2025.10 after 2025.3), folders not named by a version left out.
    assert command.installed_ncus() == [str(root / v / "ncu") for v in ("2025.10.0", "2025.3.1", "2024.1.0")]
    assert command.find_ncu() == str(root / "2025.10.0" / "ncu")
    home = tmp_path / "cuda"
    fake_ncu(home / "bin", "exit 0\n")
    monkeypatch.setenv("NCU_HOME", str(home))
    assert command.find_ncu() == str(home / "bin" / "ncu")
    on_path = fake_ncu(fresh_ncu_state, "exit 0\n")
    assert command.find_ncu() == on_path and backend.ncu_usable({}) == (True, on_path)


# ---------------------------------------------------------------------------------------------
# 4. profiler=auto probes ncu once and falls back with ncu's error


@pytest.mark.parametrize(
    "body, code, words",
    [
        (printing(PERMISSION, 1), "counter_permission", ["ERR_NVGPUCTRPERM", "NVreg_RestrictProfilingToAdminUsers=0"]),
        (printing(LIBRARY_NOT_LOADED, 1, to_stderr=True), "profiler_unavailable", ["LibraryNotLoaded"]),
        (printing(NO_KERNELS), "no_kernels", ["No kernels were profiled", "one-kernel probe program"]),
        (printing("==PROF== Disconnected from process 9\n"), "no_kernels", ["printed no kernel table"]),
        (printing(PROBE_TABLE.replace('"1,234"', '"n/a"')), "no_kernels", [f"recorded no {SENTINEL_METRIC}"]),
    ],
)
def test_auto_falls_back_to_the_cuda_trace_naming_ncus_error(
    fresh_ncu_state: Path, body: str, code: str, words: list[str]
) -> None:
    ncu = fake_ncu(fresh_ncu_state, body)
    name, notes = registry.resolve({"name": "auto"}, "cuda")
    assert name == "torch_cuda"
    (note,) = notes
    assert note.startswith(f"ncu at {ncu} cannot profile here ({code}: ")
    assert note.endswith(registry.FALLBACK) and all(w in note for w in words), note
    assert "\n" not in note
    # Once per process: a second run of the same process does not probe again.
    assert registry.resolve({"name": "auto"}, "cuda") == (name, notes)
    assert _calls(fresh_ncu_state) == 1


def test_auto_uses_ncu_when_the_probe_profiles_its_kernel(fresh_ncu_state: Path) -> None:
    fake_ncu(fresh_ncu_state, printing("tiny kernel (driver API) wrote 42\n==PROF== Disconnected\n" + PROBE_TABLE))
    assert registry.resolve({"name": "auto"}, "cuda") == ("ncu", [])
    assert _calls(fresh_ncu_state) == 1
    call = (fresh_ncu_state / "calls").read_text()
    assert call.startswith(f"--metrics {SENTINEL_METRIC} --clock-control none --target-processes all --csv "
                           "--page raw --print-units base -c 1 ")
    # Named profilers are not probed; a CPU run never looks for ncu.
    assert registry.resolve({"name": "ncu"}, "cuda") == ("ncu", [])
    assert registry.resolve({"name": "auto"}, "cpu") == ("cpu", [])


def test_auto_without_ncu_and_a_probe_past_its_deadline(
    tmp_path: Path, fresh_ncu_state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name, (note,) = registry.resolve({"name": "auto"}, "cuda")
    assert name == "torch_cuda" and note.startswith("ncu unusable (ncu not on PATH") and registry.FALLBACK in note
    hung = fake_ncu(tmp_path / "hung", "exec sleep 30\n")
    outcome = probe.probe_ncu(hung, deadline_s=1.0)
    assert not outcome.ok and outcome.failure is not None and outcome.failure.code == "deadline_exceeded"


def test_the_fallback_note_is_in_summary_md(tmp_path: Path) -> None:
    note = "ncu at /x/ncu cannot profile here (profiler_unavailable: ... LibraryNotLoaded ...); " + registry.FALLBACK
    ctx = SimpleNamespace(
        experiment=SimpleNamespace(name="exp", hypothesis="h", variants={"a": None}, check=None),
        environment={"device_name": "NVIDIA H200", "profiler_notes": [note]}, device="cuda",
        profiler="torch_cuda", not_drawn={}, report=load_report(), cfg=SimpleNamespace(report_device="H200"),
        noise=lambda outcomes: judge_noise(None, []), run_dir=tmp_path,
    )
    text = render_summary(ctx, [], [])  # type: ignore[arg-type]
    assert f"Profiler note: {note}" in text.splitlines()
    ctx.environment = {"device_name": "NVIDIA H200"}  # no fallback: no note line
    quiet = render_summary(ctx, [], [])  # type: ignore[arg-type]
    assert "Profiler note" not in quiet
