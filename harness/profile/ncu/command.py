"""The ncu command lines of one trial: profile into a report, and export a report as CSV.

Argument lists only, never shell strings: range names and paths may hold spaces or quotes. The
settings that change what a number means (clocks, cache flushing, replay) are explicit arguments and
come back in `NcuCommand.settings`, to be recorded with the measurement.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Sequence

from harness.profile.ncu.metrics import metrics_for

ClockControl = Literal["none", "base"]  # none: leave the clocks alone; base: lock them to base
CacheControl = Literal["all", "none"]  # all: flush caches before every replay pass

REPORT_SUFFIX = ".ncu-rep"


@dataclass(frozen=True)
class NcuCommand:
    argv: list[str]
    report_path: Path  # where ncu writes the report
    settings: dict[str, object] = field(default_factory=dict)


# Where the Nsight Compute installer puts each version (/opt/nvidia/nsight-compute/2025.3.1/ncu), a
# folder that is often not on PATH. A module constant so tests can point it at a folder of their own.
NCU_INSTALL_ROOT = Path("/opt/nvidia/nsight-compute")


def _version_key(name: str) -> tuple[int, ...] | None:
    """(2025, 3, 1) for a version folder "2025.3.1"; None for a folder not named by a version."""
    parts = name.split(".")
    return tuple(int(p) for p in parts) if all(p.isdigit() for p in parts) else None


def installed_ncus(root: Path | None = None) -> list[str]:
    """The ncu executables of the versions installed under `root` (NCU_INSTALL_ROOT), newest first."""
    base = NCU_INSTALL_ROOT if root is None else root
    try:
        folders = [p for p in base.iterdir() if p.is_dir()]
    except OSError:  # no such folder, or not readable: nothing installed there
        return []
    versioned = [(key, p) for p in folders if (key := _version_key(p.name)) is not None]
    found = []
    for _, folder in sorted(versioned, key=lambda pair: pair[0], reverse=True):
        executable = shutil.which("ncu", path=str(folder))
        if executable:
            found.append(executable)
    return found


def find_ncu() -> str | None:
    """The ncu executable: on PATH, else in $NCU_HOME (or its bin/), else the newest version under
    NCU_INSTALL_ROOT."""
    on_path = shutil.which("ncu")
    if on_path:
        return on_path
    home = os.environ.get("NCU_HOME")
    if home:
        in_home = shutil.which("ncu", path=os.pathsep.join((home, os.path.join(home, "bin"))))
        if in_home:
            return in_home
    installed = installed_ncus()
    return installed[0] if installed else None


def searched_for_ncu() -> str:
    """Where find_ncu looked, for the message that it found nothing."""
    return f"ncu not on PATH, not in NCU_HOME, nor under {NCU_INSTALL_ROOT}/*/"


def profile_command(
    child_argv: Sequence[str],
    *,
    nvtx_range: str,
    report_path: str | os.PathLike[str],
    clock_control: ClockControl,
    cache_control: CacheControl,
    metric_set: str = "report",
    ncu: str = "ncu",
    metrics: Sequence[str] | None = None,
) -> NcuCommand:
    """ncu profiling the kernels `child_argv` launches inside the push/pop NVTX range `nvtx_range`.

    `metrics`: the list to request (metric_set's, checked against the chip: metrics.resolve_metrics);
    None requests metric_set's list as it is."""
    if not nvtx_range or nvtx_range.endswith("/"):
        raise ValueError(
            f"NVTX range name {nvtx_range!r}: give the bare push/pop range name (no trailing '/')"
        )
    if clock_control not in ("none", "base"):
        raise ValueError(f"clock_control must be 'none' or 'base', got {clock_control!r}")
    if cache_control not in ("all", "none"):
        raise ValueError(f"cache_control must be 'all' or 'none', got {cache_control!r}")
    if not child_argv:
        raise ValueError("the child command is empty")
    metrics = metrics_for(metric_set) if metrics is None else list(metrics)
    if not metrics:
        raise ValueError(f"no metric left to request for metric set {metric_set!r}")
    target = Path(report_path)
    # ncu appends the suffix to -o itself; pass the stem so the file name is predictable.
    stem = (
        target.with_name(target.name[: -len(REPORT_SUFFIX)])
        if target.name.endswith(REPORT_SUFFIX)
        else target
    )
    settings: dict[str, object] = {
        "nvtx_include": f"{nvtx_range}/",
        "target_processes": "all",
        "replay_mode": "kernel",
        "clock_control": clock_control,
        "cache_control": cache_control,
        "metric_set": metric_set,
        "metrics": metrics,
    }
    argv = [
        ncu,
        "--nvtx",
        "--nvtx-include",
        f"{nvtx_range}/",
        "--target-processes",
        "all",
        "--replay-mode",
        "kernel",
        "--clock-control",
        clock_control,
        "--cache-control",
        cache_control,
        "--metrics",
        ",".join(metrics),
        "-o",
        str(stem),
        "-f",
        *child_argv,
    ]
    return NcuCommand(argv=argv, report_path=stem.with_name(stem.name + REPORT_SUFFIX), settings=settings)


def export_command(report_path: str | os.PathLike[str], *, ncu: str = "ncu") -> list[str]:
    """ncu printing a report's raw page as CSV, values in base units, kernels by demangled name
    (the name the ncu_report module gives, so both ways of reading a report agree)."""
    return [
        ncu,
        "--import",
        str(report_path),
        "--csv",
        "--page",
        "raw",
        "--print-units",
        "base",
        "--print-kernel-base",
        "demangled",
    ]
