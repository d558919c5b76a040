"""`profiler=ncu`: each trial re-run in its own process under Nsight Compute, with the report's metrics.

The child (harness.profile.ncu_child) rebuilds the card's workload and the variant from a trial spec,
warms up outside the NVTX range, then runs the measured call inside the push/pop range that ncu is
told to include, so set-up, allocation and warm-up kernels are not profiled. The report is read back
through ncu_report (or ncu's raw-page CSV export) and converted to the report's units.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Mapping

from harness.cards.fields import SOURCE_NCU
from harness.profile.gpu_peaks import for_current_device
from harness.profile.base import Profile, ProfilerUnavailable, WorkloadFacts
from harness.profile.ncu.command import find_ncu, profile_command
from harness.profile.ncu.failures import NcuFailure
from harness.profile.ncu.importer import cards_from_ncu
from harness.profile.ncu.runner import run_ncu

NVTX_RANGE = "harness_trial"


def ncu_usable(cfg: Mapping[str, Any]) -> tuple[bool, str]:
    """Whether ncu can be tried here: the executable exists (permissions show on the first trial)."""
    executable = cfg.get("executable") or "ncu"
    found = find_ncu() if executable == "ncu" else executable
    if not found:
        return False, "ncu not on PATH and NCU_HOME not set"
    return True, found


class NcuProfiler:
    name = "ncu"
    needs_spec = True

    def __init__(self, cfg: Mapping[str, Any]):
        usable, found = ncu_usable(cfg)
        if not usable:
            raise ProfilerUnavailable(f"profiler=ncu: {found}; install Nsight Compute or use profiler=auto")
        self.executable = found
        self.metric_set = str(cfg.get("metric_set", "report"))
        self.clock_control = str(cfg.get("clock_control", "none"))
        self.cache_control = str(cfg.get("cache_control", "all"))
        self.deadline_s = float(cfg.get("deadline_s", 300))
        self.keep_dir = cfg.get("keep_dir")

    def profile(self, fn: Callable[[], Any], facts: WorkloadFacts, spec: Mapping[str, Any] | None = None) -> Profile:
        if spec is None:
            raise ProfilerUnavailable("profiler=ncu profiles a trial in a child process and needs its trial spec")
        workdir = Path(self.keep_dir or tempfile.mkdtemp(prefix="harness-ncu-"))
        workdir.mkdir(parents=True, exist_ok=True)
        spec_path = workdir / "trial_spec.json"
        spec_path.write_text(json.dumps({**spec, "nvtx_range": NVTX_RANGE}), encoding="utf-8")
        command = profile_command(
            [sys.executable, "-m", "harness.profile.ncu_child", str(spec_path)],
            nvtx_range=NVTX_RANGE, report_path=workdir / "trial.ncu-rep", clock_control=self.clock_control,
            cache_control=self.cache_control, metric_set=self.metric_set, ncu=self.executable,
        )
        result = run_ncu(command.argv, self.deadline_s)
        cards = cards_from_ncu(command.report_path, group_by="range")
        kernels = [k for card in cards for k in card.kernels]
        if not kernels:
            raise NcuFailure("no_kernels", f"ncu profiled no kernel in range {NVTX_RANGE!r}; see {workdir}")
        for kernel in kernels:
            kernel.extra["metrics_source"] = SOURCE_NCU
        settings = {k: v for k, v in command.settings.items() if k != "metrics"}
        settings.update(report=str(command.report_path), seconds=round(result.seconds, 2))
        # ncu measures; the device's peaks are recorded beside the counters for rooflines and hooks.
        peaks = {**for_current_device().to_dict(), "used": "recorded for reference; the metrics are ncu's"}
        return Profile(kernels=kernels, backend="ncu", metrics_source=SOURCE_NCU, peaks=peaks, settings=settings)
