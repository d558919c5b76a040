"""The chip's metric list cached per (GPU, driver, ncu): a second harness start reads it back and runs no
query; an answer that is not trusted is never kept, and another driver or ncu asks again.

A stand-in ncu logs every call (so "no second query" is counted, not timed) and prints a list in the form
of `--query-metrics --query-metrics-mode all`; the GPU and driver come from a planted /proc/driver/nvidia
(in-process) or a stand-in nvidia-smi (in a separate process, where no patch reaches)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import harness.profile.ncu_backend as backend
from harness.profile.ncu import metric_cache, probe
from harness.profile.ncu.metrics import SENTINEL_METRIC

NAMES = {SENTINEL_METRIC, "sm__throughput.avg.pct_of_peak_sustained_elapsed", "dram__bytes_read.sum"}
LISTING = "".join(f"{name:<60} a description of it\n" for name in sorted(NAMES))
VERSION = "Version 2025.3.1.0 (build 36398880) (public-release)"
DRIVER_LINE = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  {driver}  Tue Mar  5 22:23:56 UTC 2024\n"


def stand_in(folder: Path, listing: str = LISTING, exit_code: int = 0) -> str:
    """An ncu that appends its arguments to folder/calls, prints VERSION or `listing`."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "ncu"
    path.write_text(f'#!/bin/sh\necho "$@" >> "{folder / "calls"}"\n'
                    f'if [ "$1" = "--version" ]; then echo "{VERSION}"; exit 0; fi\n'
                    f"cat <<'EOF'\n{listing}EOF\nexit {exit_code}\n")
    path.chmod(0o755)
    return str(path)


def queries(folder: Path) -> int:
    calls = folder / "calls"
    return sum(line.startswith("--query-metrics") for line in calls.read_text().splitlines()) if calls.exists() else 0


def plant_gpu(root: Path, driver: str = "550.54.15") -> None:
    gpu = root / "gpus" / "0000:18:00.0"
    gpu.mkdir(parents=True, exist_ok=True)
    (gpu / "information").write_text("Model: \t\t NVIDIA H200\nIRQ:   \t\t 42\nBus Type: \t PCIe\n")
    (root / "version").write_text(DRIVER_LINE.format(driver=driver))


def new_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a new harness process has: nothing queried, no version asked."""
    monkeypatch.setattr(backend, "_QUERIED", {})
    monkeypatch.setattr(probe, "_VERSIONS", {})


@pytest.fixture
def machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A planted H200 in /proc, an empty cache dir of this test's own, nothing queried yet."""
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(metric_cache, "PROC_NVIDIA", tmp_path / "proc")
    plant_gpu(tmp_path / "proc")
    new_start(monkeypatch)
    return tmp_path


def test_a_second_harness_start_reads_the_list_from_the_cache(tmp_path: Path) -> None:
    # Two real processes: the second has no memo of the first, only the disk.
    bin_dir = tmp_path / "bin"
    ncu = stand_in(bin_dir)
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\necho 'NVIDIA H200, 550.54.15'\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "HARNESS_CACHE_DIR": str(tmp_path / "cache")}
    start = ("import json, sys\nfrom harness.profile.ncu_backend import chip_metrics\n"
             "names, source, note = chip_metrics('auto', sys.argv[1])\n"
             "print(json.dumps([sorted(names), source, note]))\n")
    said = []
    for _ in range(2):
        proc = subprocess.run([sys.executable, "-c", start, ncu], capture_output=True, text=True, env=env,
                              timeout=300, check=False)
        assert proc.returncode == 0, proc.stderr
        said.append(json.loads(proc.stdout.splitlines()[-1]))
    (first, first_source, first_note), (second, second_source, second_note) = said
    assert set(first) == NAMES == set(second) and first_note is None and second_note is None
    assert first_source == "ncu --query-metrics" and second_source.startswith("ncu --query-metrics (cached: ")
    assert queries(bin_dir) == 1  # the second start ran no query
    cached = Path(second_source.split("(cached: ", 1)[1].rstrip(")"))
    assert cached.parent == tmp_path / "cache" and cached.is_file()


def test_the_same_machine_asks_once_and_another_driver_or_ncu_asks_again(
    machine: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ncu = stand_in(machine / "bin")
    assert backend.chip_metrics("auto", ncu) == (NAMES, "ncu --query-metrics", None)
    new_start(monkeypatch)
    names, source, _ = backend.chip_metrics("auto", ncu)
    assert names == NAMES and "cached" in source and queries(machine / "bin") == 1
    plant_gpu(machine / "proc", driver="560.28.03")  # a driver update may change the list
    new_start(monkeypatch)
    assert backend.chip_metrics("auto", ncu)[1] == "ncu --query-metrics" and queries(machine / "bin") == 2
    other = stand_in(machine / "other_bin")  # another ncu installation, even of the same version
    new_start(monkeypatch)
    assert backend.chip_metrics("auto", other)[1] == "ncu --query-metrics" and queries(machine / "other_bin") == 1


@pytest.mark.parametrize("listing, exit_code", [
    (LISTING + "==ERROR== An error occurred while querying metrics.\n", 1),  # the whole list, then a failure
    ("sm__throughput.avg.pct_of_peak_sustained_elapsed  SM throughput\n", 0),  # exit 0, cut short
])
def test_an_answer_not_trusted_is_not_cached(machine: Path, monkeypatch: pytest.MonkeyPatch, listing: str,
                                             exit_code: int) -> None:
    ncu = stand_in(machine / "bin", listing, exit_code)
    for _ in range(2):
        new_start(monkeypatch)
        assert backend.chip_metrics("auto", ncu)[1] == "ncu --query-metrics"
    assert queries(machine / "bin") == 2 and not list((machine / "cache").glob("ncu_metrics-*"))


def test_a_cache_file_for_another_key_is_not_read(machine: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ncu = stand_in(machine / "bin")
    backend.chip_metrics("auto", ncu)
    (written,) = (machine / "cache").glob("ncu_metrics-*")
    head, _, body = written.read_text().partition("\n")
    written.write_text(json.dumps({**json.loads(head), "driver": "1.0"}) + "\n" + body)
    new_start(monkeypatch)
    assert backend.chip_metrics("auto", ncu)[1] == "ncu --query-metrics" and queries(machine / "bin") == 2


def test_without_a_gpu_identity_nothing_is_cached(machine: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metric_cache, "PROC_NVIDIA", machine / "no_proc")
    ncu = stand_in(machine / "bin")
    smi = machine / "bin" / "nvidia-smi"  # as on a machine without the driver; ahead of any real one
    smi.write_text("#!/bin/sh\necho \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA "
                   "driver.\"\nexit 9\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{machine / 'bin'}{os.pathsep}{os.environ['PATH']}")
    assert backend.chip_metrics("auto", ncu) == (NAMES, "ncu --query-metrics", None)
    assert not (machine / "cache").exists()
