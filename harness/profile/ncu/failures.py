"""Recognise an ncu failure from its output text; ncu's exit status alone does not tell.

ncu exits 0 after "No kernels were profiled.", and prints the permission error and the busy-counter
error in the middle of an otherwise normal run. Each failure becomes an `NcuFailure` with a short
code and a one-line message that says what to do.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable


class NcuFailure(RuntimeError):
    """ncu ran (or tried to) and produced no usable profile; `code` names the cause."""

    def __init__(self, code: str, message: str):
        super().__init__(" ".join(message.split()))  # one line, whatever ncu printed
        self.code = code


@dataclass(frozen=True)
class _Known:
    code: str
    pattern: re.Pattern[str]
    message: Callable[[re.Match[str]], str]


# Checked in this order: the first match is the cause. A permission error or busy counters also
# end in "No kernels were profiled.", and a crashed program usually does too.
_KNOWN: tuple[_Known, ...] = (
    _Known(
        "counter_permission",
        re.compile(r"ERR_NVGPUCTRPERM"),
        lambda m: (
            "ncu may not read the GPU performance counters (ERR_NVGPUCTRPERM): run it as root, or load the "
            "nvidia driver with NVreg_RestrictProfilingToAdminUsers=0; in a container add --cap-add SYS_ADMIN"
        ),
    ),
    _Known(
        "profiler_unavailable",
        re.compile(r"Failed to initialize the profiler:?\s*(\w*)"),
        lambda m: (
            f"ncu cannot profile on this machine (Failed to initialize the profiler: {m.group(1) or 'no reason'}), "
            "seen where the runtime does not expose the GPU performance counters (a gVisor sandbox): "
            "use profiler=torch_cuda (the CUDA trace), or a machine where ncu reads the counters"
        ),
    ),
    _Known(
        "counters_busy",
        re.compile(r"driver resource was unavailable"),
        lambda m: (
            "another tool holds the GPU performance counters (ncu: 'a driver resource was unavailable'): "
            "pause DCGM with `dcgmi profile --pause` (resume with `dcgmi profile --resume`) or stop "
            "dcgm-exporter / a running nsys or ncu on this node, then retry"
        ),
    ),
    _Known(
        "unknown_metric",
        re.compile(r"Failed to find metric (\S+)"),
        lambda m: (
            f"ncu does not know metric {m.group(1)} on this GPU: list the chip's metrics with "
            "`ncu --query-metrics` and fix harness/profile/ncu/metrics.py"
        ),
    ),
    _Known(
        "child_failed",
        re.compile(r"The application returned an error code \((-?\d+)\)"),
        lambda m: (
            f"the profiled program exited with code {m.group(1)} under ncu: run the child command "
            "without ncu to see its error"
        ),
    ),
    _Known(
        "no_kernels",
        re.compile(r"No kernels were profiled"),
        lambda m: (
            "ncu profiled no kernels: check that the NVTX range name matches --nvtx-include (a push/pop "
            "range is written 'NAME/'), that the code launches CUDA kernels inside that range, and that ncu "
            "follows child processes (--target-processes all)"
        ),
    ),
)

_ERROR_LINE = re.compile(r"^==ERROR==\s*(.+)$", re.MULTILINE)


def detect(text: str, returncode: int = 0) -> NcuFailure | None:
    """The failure ncu's combined output (and exit status) shows, or None for a usable run."""
    for known in _KNOWN:
        match = known.pattern.search(text)
        if match:
            return NcuFailure(known.code, known.message(match))
    error = _ERROR_LINE.search(text)
    if error:
        return NcuFailure("ncu_error", f"ncu reported an error: {error.group(1)} (see the full ncu log)")
    if returncode != 0:
        last = next((line for line in reversed(text.splitlines()) if line.strip()), "no output")
        return NcuFailure("ncu_error", f"ncu exited with status {returncode}: {last}")
    return None


def ncu_missing(detail: str) -> NcuFailure:
    return NcuFailure(
        "ncu_missing",
        f"ncu not found ({detail}): install Nsight Compute (it ships with the CUDA toolkit) and put ncu on "
        "PATH, or set NCU_HOME to the folder that holds the ncu executable",
    )


def deadline_exceeded(seconds: float) -> NcuFailure:
    return NcuFailure(
        "deadline_exceeded",
        f"ncu ran past its {seconds:g} s deadline and was killed with its process group: raise the deadline "
        "or profile fewer kernels or metrics (kernel replay runs every kernel once per counter pass)",
    )
