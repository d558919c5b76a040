"""`profiler=ncu`: each trial re-run in its own process under Nsight Compute, with the report's metrics.

The child (harness.profile.ncu_child) rebuilds the card's workload and the variant from a trial spec,
warms up outside the NVTX range, then runs the measured call inside the push/pop range that ncu is
told to include, so set-up, allocation and warm-up kernels are not profiled. The report is read back
through ncu_report (or ncu's raw-page CSV export) and converted to the report's units.

Before the first trial the metric list is checked against the chip (`profiler.available_metrics`:
`auto` asks `ncu --query-metrics`, a path reads a saved answer, null checks nothing): a metric the
chip lacks would fail every trial, so it is swapped for an alternative or dropped, with a note on
every profile. With `profiler.keep_dir` each trial keeps its spec and report in a folder of its own,
`<keep_dir>/<card id>/<NNN>_<role>_<variant>/`, numbered in the order they ran; without it the trial's
temporary folder is removed once the report is read. Every profile records which ncu ran (its path
and `ncu --version` line).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, cast

from harness.cards.fields import SOURCE_NCU
from harness.profile.base import Profile, ProfilerUnavailable, WorkloadFacts
from harness.profile.gpu_peaks import for_current_device
from harness.profile.ncu.command import CacheControl, ClockControl, find_ncu, profile_command, searched_for_ncu
from harness.profile.ncu.failures import NcuFailure
from harness.profile.ncu.importer import cards_from_ncu, kernel_notes
from harness.profile.ncu.metrics import (
    MetricPlan,
    metrics_for,
    parse_query_metrics,
    resolve_metrics,
)
from harness.profile.ncu.probe import ncu_version
from harness.profile.ncu.runner import run_command, run_ncu

if TYPE_CHECKING:  # the profilers do not import the experiments' side at run time
    from harness.trial_spec import TrialSpec

NVTX_RANGE = "harness_trial"
QUERY_DEADLINE_S = 60.0
# ncu executable -> (metric names, where they came from, a note) from `ncu --query-metrics`, once per process.
_QUERIED: dict[str, tuple[set[str] | None, str, str | None]] = {}


def query_command(ncu: str) -> list[str]:
    """ncu listing every metric (full names) of the GPUs of this machine."""
    return [ncu, "--query-metrics", "--query-metrics-mode", "all"]


def chip_metrics(setting: Any, ncu: str) -> tuple[set[str] | None, str, str | None]:
    """(the chip's metric names or None, where they came from, a note when they could not be had)
    for `profiler.available_metrics`: null/false (not checked), "auto" (ask ncu), or a file path (a
    saved `ncu --query-metrics --query-metrics-mode all`, or one name a line)."""
    if setting in (None, False, "", "none", "null"):
        return None, "not checked", None
    if str(setting) == "auto":
        if ncu not in _QUERIED:
            source = "ncu --query-metrics"
            try:
                result = run_command(query_command(ncu), QUERY_DEADLINE_S)
            except OSError as exc:
                _QUERIED[ncu] = (None, source, f"metric list not checked: {source} could not run ({exc})")
            else:
                # Only an answer from an ncu that exited 0 is used: a list printed before a failure or a
                # kill may be cut short, and checking against it would drop metrics the chip has.
                if result.returncode != 0 or result.timed_out:
                    last = next((ln for ln in reversed((result.stdout + result.stderr).splitlines()) if ln.strip()),
                                "no output")
                    how = (f"killed on its {QUERY_DEADLINE_S:g} s deadline" if result.timed_out
                           else f"exit {result.returncode}")
                    _QUERIED[ncu] = (None, source, f"metric list not checked: {source} failed ({how}: {last.strip()})")
                else:
                    _QUERIED[ncu] = (parse_query_metrics(result.stdout), source, None)
        return _QUERIED[ncu]
    path = Path(str(setting))
    try:
        return parse_query_metrics(path.read_text(encoding="utf-8", errors="replace")), str(path), None
    except OSError as exc:
        raise ProfilerUnavailable(
            f"profiler.available_metrics={setting}: cannot read it ({exc.strerror or exc}); give the saved "
            "output of `ncu --query-metrics --query-metrics-mode all`, `auto`, or null"
        ) from None


def trial_folder(keep_dir: Path, spec: TrialSpec) -> Path:
    """A new folder for one trial's spec and report: `<keep_dir>/<card>/<NNN>_<role>_<variant>[_<params>]`."""
    def clean(text: str) -> str:
        return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "x"

    card_dir = keep_dir / clean(spec.card_id)
    card_dir.mkdir(parents=True, exist_ok=True)
    name = f"{clean(spec.role)}_{clean(spec.variant or 'baseline')}"
    params = spec.params
    if params:
        name += "_" + hashlib.sha256(json.dumps(params, sort_keys=True, default=str).encode()).hexdigest()[:8]
    number = len([p for p in card_dir.iterdir() if p.is_dir()])
    while True:
        folder = card_dir / f"{number:03d}_{name}"
        try:
            folder.mkdir()
            return folder
        except FileExistsError:  # another process took that number
            number += 1


def ncu_usable(cfg: Mapping[str, Any]) -> tuple[bool, str]:
    """Whether ncu can be tried here, and the executable (or why not): `executable` as configured, or
    found (command.find_ncu). Whether it can profile is the probe's question (probe.probe_ncu)."""
    executable = cfg.get("executable") or "ncu"
    found = find_ncu() if executable == "ncu" else executable
    if not found:
        return False, searched_for_ncu()
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
        # The config's words as they are: profile_command refuses any other than its Literal's.
        self.clock_control = cast(ClockControl, str(cfg.get("clock_control", "none")))
        self.cache_control = cast(CacheControl, str(cfg.get("cache_control", "all")))
        self.deadline_s = float(cfg.get("deadline_s", 300))
        self.keep_dir = cfg.get("keep_dir")
        self.available_metrics = cfg.get("available_metrics")
        self._plan: MetricPlan | None = None
        self._plan_source = "not checked"

    def metric_plan(self) -> MetricPlan:
        """The metric set's list as this chip takes it (checked once)."""
        if self._plan is None:
            names, source, note = chip_metrics(self.available_metrics, self.executable)
            plan = resolve_metrics(metrics_for(self.metric_set), names, source)
            if note:
                plan.notes.append(note)
            self._plan, self._plan_source = plan, source
        return self._plan

    def profile(self, fn: Callable[[], Any], facts: WorkloadFacts, spec: TrialSpec | None = None) -> Profile:
        if spec is None:
            raise ProfilerUnavailable("profiler=ncu profiles a trial in a child process and needs its trial spec")
        plan = self.metric_plan()
        if self.keep_dir:
            workdir = trial_folder(Path(self.keep_dir), spec)
        else:
            workdir = Path(tempfile.mkdtemp(prefix="harness-ncu-"))
        try:
            return self._profile_in(workdir, spec, plan)
        finally:
            if not self.keep_dir:  # a report per trial would fill /tmp over a search
                shutil.rmtree(workdir, ignore_errors=True)

    def _profile_in(self, workdir: Path, spec: TrialSpec, plan: MetricPlan) -> Profile:
        spec_path = workdir / "trial_spec.json"
        spec_path.write_text(json.dumps({"spec": spec.to_json(), "nvtx_range": NVTX_RANGE}), encoding="utf-8")
        command = profile_command(
            [sys.executable, "-m", "harness.profile.ncu_child", str(spec_path)],
            nvtx_range=NVTX_RANGE, report_path=workdir / "trial.ncu-rep", clock_control=self.clock_control,
            cache_control=self.cache_control, metric_set=self.metric_set, ncu=self.executable,
            metrics=plan.metrics,
        )
        result = run_ncu(command.argv, self.deadline_s)
        cards = cards_from_ncu(command.report_path, group_by="range")
        kernels = [k for card in cards for k in card.kernels]
        if not kernels:
            where = workdir if self.keep_dir else "set profiler.keep_dir=DIR to keep the trial's report"
            raise NcuFailure("no_kernels", f"ncu profiled no kernel in range {NVTX_RANGE!r}; see {where}")
        for kernel in kernels:
            kernel.extra["metrics_source"] = SOURCE_NCU
        settings = {k: v for k, v in command.settings.items() if k != "metrics"}
        settings.update(ncu_executable=self.executable, ncu_version=ncu_version(self.executable),
                        report=str(command.report_path) if self.keep_dir else None,
                        seconds=round(result.seconds, 2))
        settings["metrics_checked_against"] = self._plan_source
        if plan.substituted:
            settings["metrics_substituted"] = dict(plan.substituted)
        if plan.dropped:
            settings["metrics_dropped"] = list(plan.dropped)
        # ncu measures; the device's peaks are recorded beside the counters for rooflines and hooks.
        peaks = {**for_current_device().to_dict(), "used": "recorded for reference; the metrics are ncu's"}
        return Profile(kernels=kernels, backend="ncu", metrics_source=SOURCE_NCU, peaks=peaks, settings=settings,
                       notes=[*plan.notes, *kernel_notes(kernels)])
