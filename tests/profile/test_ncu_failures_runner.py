"""ncu failures recognised by their text, and the deadline-bound runner that kills a process group."""

from __future__ import annotations

import os
import sys
import textwrap
import time
from pathlib import Path

import pytest

from harness.profile.ncu.failures import NcuFailure, deadline_exceeded, detect, ncu_missing
from harness.profile.ncu.runner import run_command, run_ncu
from tests.processes import wait_dead

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ncu"

# Output as ncu prints it (texts quoted in public bug reports and logs).
PERMISSION = """\
==PROF== Connected to process 42 (probe.exe)
==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters \
on the target device 0. For instructions on enabling permissions and to get more information see \
https://developer.nvidia.com/ERR_NVGPUCTRPERM
==PROF== Disconnected from process 42
==WARNING== No kernels were profiled.
"""
COUNTERS_BUSY = """\
==ERROR== An error was reported by the driver:
==ERROR== Profiling failed because a driver resource was unavailable. Ensure that no other tool (like DCGM) \
is concurrently collecting profiling data. See \
https://docs.nvidia.com/nsight-compute/ProfilingGuide/index.html#faq for more details.
==ERROR== Failed to profile "risk_battle_kernel" in process 7508
==PROF== Trying to shutdown target application
==ERROR== An error occurred while trying to profile.
==WARNING== No kernels were profiled.
"""
CHILD_FAILED = """\
==PROF== Disconnected from process 55916
==ERROR== The application returned an error code (1).
==WARNING== No kernels were profiled.
==WARNING== Profiling kernels launched by child processes requires the --target-processes all option.
"""
NO_KERNELS = """\
==PROF== Connected to process 664418 (/work/wmma_ptx)
[WMMA C++] C[0,0]=79.000000
==PROF== Disconnected from process 664418
==WARNING== No kernels were profiled.
Available Kernels:
1. wmma_cxx_kernel
"""
UNKNOWN_METRIC = """\
==PROF== Connected to process 20101 (/usr/bin/python3.10)
==ERROR== Failed to find metric regex:^flop_count_sp\\.(sum|min|max|avg|pct|ratio|max_rate)$
"""


@pytest.mark.parametrize(
    "text, returncode, code, words",
    [
        (PERMISSION, 1, "counter_permission", ["root", "NVreg_RestrictProfilingToAdminUsers=0", "SYS_ADMIN"]),
        (COUNTERS_BUSY, 1, "counters_busy", ["dcgmi profile --pause", "nsys"]),
        (CHILD_FAILED, 1, "child_failed", ["exited with code 1", "without ncu"]),
        (NO_KERNELS, 0, "no_kernels", ["--nvtx-include", "'NAME/'", "launches CUDA kernels"]),
        (UNKNOWN_METRIC, 1, "unknown_metric", ["regex:^flop_count_sp", "--query-metrics"]),
        (
            "==PROF== Connected\n==ERROR== Failed to connect to the target\n",
            0,
            "ncu_error",
            ["Failed to connect"],
        ),
        ("some text\nSegmentation fault\n", 139, "ncu_error", ["status 139", "Segmentation fault"]),
    ],
)
def test_failures_are_recognised_by_their_text(
    text: str, returncode: int, code: str, words: list[str]
) -> None:
    failure = detect(text, returncode)
    assert failure is not None and failure.code == code
    message = str(failure)
    assert "\n" not in message
    for word in words:
        assert word in message


def test_successful_runs_are_not_failures() -> None:
    real_log = (FIXTURES / "details_page_with_program_output_sm100.log").read_text()
    assert detect(real_log, 0) is None
    assert detect("", 0) is None


def test_missing_ncu_and_deadline_messages() -> None:
    missing = ncu_missing("no executable 'ncu'")
    assert missing.code == "ncu_missing" and "PATH" in str(missing) and "NCU_HOME" in str(missing)
    late = deadline_exceeded(90)
    assert late.code == "deadline_exceeded" and "90 s" in str(late) and "\n" not in str(late)


# ---------------------------------------------------------------------------------------------
# Runner






def test_run_command_returns_output_and_status() -> None:
    script = "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"
    result = run_command([sys.executable, "-c", script], 30)
    assert (result.stdout, result.stderr, result.returncode, result.timed_out) == ("out\n", "err\n", 3, False)


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads process states from /proc")
def test_deadline_kills_the_whole_process_group(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    # The child starts a grandchild that ignores SIGTERM (it needs the SIGKILL) and both sleep.
    child = textwrap.dedent(
        f"""
        import os, subprocess, sys, time
        grandchild = subprocess.Popen([sys.executable, "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"])
        with open({str(pids)!r}, "w") as f:
            f.write(f"{{os.getpid()}} {{grandchild.pid}}")
        print("started", flush=True)
        time.sleep(120)
        """
    )
    started = time.monotonic()
    result = run_command([sys.executable, "-c", child], 2.0, grace_s=0.5)
    assert result.timed_out
    assert time.monotonic() - started < 20
    assert result.stdout == "started\n"
    child_pid, grandchild_pid = (int(p) for p in pids.read_text().split())
    assert child_pid != grandchild_pid
    assert wait_dead([child_pid, grandchild_pid]) == []
    assert result.returncode < 0  # the leader died of a signal


def test_run_ncu_turns_texts_and_deadlines_into_failures() -> None:
    with pytest.raises(NcuFailure) as caught:
        run_ncu([sys.executable, "-c", "print('==WARNING== No kernels were profiled.')"], 30)
    assert caught.value.code == "no_kernels"
    with pytest.raises(NcuFailure) as caught:
        run_ncu([sys.executable, "-c", "import time; time.sleep(30)"], 0.5, grace_s=0.5)
    assert caught.value.code == "deadline_exceeded"
    with pytest.raises(NcuFailure) as caught:
        run_ncu([str(Path(os.devnull).parent / "no-such-ncu-here")], 5)
    assert caught.value.code == "ncu_missing"
    ok = run_ncu([sys.executable, "-c", "print('==PROF== Disconnected from process 1')"], 30)
    assert ok.returncode == 0 and not ok.timed_out
