"""`profiler=ncu`: each trial re-run in its own process under Nsight Compute, with the report's metrics.

The child (harness.trial.ncu_child) rebuilds the card's workload and the variant from the trial's Measure,
warms up outside the NVTX range, then runs the measured call inside the push/pop range that ncu is
told to include, so set-up, allocation and warm-up kernels are not profiled. The report is read back
through ncu_report (or ncu's raw-page CSV export) and converted to the report's units.

ncu writes the report only when the child exits, so every trial is one ncu session. What a session does
before its job (ncu starting, python, the torch and harness imports) is done ahead: the next trial's
session is started as soon as a trial's ncu runs (at its handoff, or a cold trial's start), its child
importing while this trial profiles and then waiting for the job without touching CUDA
(harness.profile.ncu.session); the next `profile` hands it the job. The first trial's companion session is
started on trust and killed when that trial's child comes back without its phase record (ncu or the child
does not work here); no session is started again until a trial proves the chain. `profiler.prestart=false`
starts every trial cold; a session that ended before its trial (its child gave up waiting) is replaced by a
cold run. `close()`, also
at exit, kills the waiting one. Each profile records what its trial cost (`ncu_cost`: cold or started
ahead, its wall time from the handoff, the child's phases, ncu's passes per kernel; docs/ncu-cost.md).

Before the first trial the metric list is checked against the chip (`profiler.available_metrics`:
`auto` asks `ncu --query-metrics` once per GPU, driver and ncu, and reads that answer back from the cache in
later starts (harness.profile.ncu.metric_cache); a path reads a saved answer, null checks nothing): a metric the
chip lacks would fail every trial, so it is swapped for an alternative or dropped, with a note on
every profile. With `profiler.keep_dir` each trial keeps its job, phase record and report in a folder of
its own, `<keep_dir>/<card id>/<NNN>_<role>_<variant>/` (role: baseline or trial), numbered in the order they
ran (a session waits in `<keep_dir>/.pending/` until its trial is known); without it the trial's temporary
folder is removed once the report is read. Every profile records which ncu ran (its path and `ncu --version`
line).
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, cast

from harness.boundary.framing import plain
from harness.boundary.requests import Measure
from harness.cards.fields import SOURCE_NCU
from harness.profile.base import Profile, ProfilerUnavailable, WorkloadFacts
from harness.profile.gpu_peaks import for_current_device
from harness.profile.ncu import metric_cache
from harness.profile.ncu.command import (
    CacheControl,
    ClockControl,
    NcuCommand,
    find_ncu,
    profile_command,
    searched_for_ncu,
)
from harness.profile.ncu.failures import NcuFailure
from harness.profile.ncu.importer import cards_from_ncu, kernel_notes
from harness.profile.ncu.metrics import (
    SENTINEL_METRIC,
    MetricPlan,
    metrics_for,
    parse_query_metrics,
    resolve_metrics,
)
from harness.profile.ncu.probe import ncu_version
from harness.profile.ncu.runner import run_command, run_ncu
from harness.profile.ncu.session import (
    REPORT_NAME,
    PendingSession,
    child_argv,
    read_phases,
    start_session,
    trial_cost,
    write_job,
)

NVTX_RANGE = "harness_trial"
PENDING_DIR = ".pending"  # under profiler.keep_dir: sessions started ahead, before their trial is known
QUERY_DEADLINE_S = 60.0
# ncu executable -> (metric names, where they came from, a note) from `ncu --query-metrics`, once per process.
_QUERIED: dict[str, tuple[set[str] | None, str, str | None]] = {}


def query_command(ncu: str) -> list[str]:
    """ncu listing every metric (full names) of the GPUs of this machine."""
    return [ncu, "--query-metrics", "--query-metrics-mode", "all"]


def chip_metrics(setting: Any, ncu: str) -> tuple[set[str] | None, str, str | None]:
    """(the chip's metric names or None, where they came from, a note when they could not be had)
    for `profiler.available_metrics`: null/false (not checked), "auto" (ask ncu, or read its answer back from
    the cache: harness.profile.ncu.metric_cache), or a file path (a
    saved `ncu --query-metrics --query-metrics-mode all`, or one name a line)."""
    if setting in (None, False, "", "none", "null"):
        return None, "not checked", None
    if str(setting) == "auto":
        if ncu not in _QUERIED:
            source = "ncu --query-metrics"
            key = metric_cache.cache_key(ncu, ncu_version(ncu))
            cached = metric_cache.load(key) if key else None
            if key and cached and SENTINEL_METRIC in cached:
                _QUERIED[ncu] = (cached, f"{source} (cached: {metric_cache.cache_file(key)})", None)
                return _QUERIED[ncu]
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
                    names = parse_query_metrics(result.stdout)
                    if key and SENTINEL_METRIC in names:  # what resolve_metrics trusts is what is kept
                        metric_cache.store(key, names)
                    _QUERIED[ncu] = (names, source, None)
        return _QUERIED[ncu]
    path = Path(str(setting))
    try:
        return parse_query_metrics(path.read_text(encoding="utf-8", errors="replace")), str(path), None
    except OSError as exc:
        raise ProfilerUnavailable(
            f"profiler.available_metrics={setting}: cannot read it ({exc.strerror or exc}); give the saved "
            "output of `ncu --query-metrics --query-metrics-mode all`, `auto`, or null"
        ) from None


def trial_folder(keep_dir: Path, request: Measure) -> Path:
    """A new folder for one trial's job and report: `<keep_dir>/<card>/<NNN>_<role>_<variant>[_<params>]`."""
    def clean(text: str) -> str:
        return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "x"

    card_dir = keep_dir / clean(request.spec.card_id)
    card_dir.mkdir(parents=True, exist_ok=True)
    name = f"{'baseline' if request.baseline else 'trial'}_{clean(request.variant)}"
    params = request.params
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


@dataclass
class _Run:
    """One trial's ncu run: its command line, and what it cost (session.trial_cost)."""

    command: NcuCommand
    cost: dict[str, Any]


class NcuProfiler:
    name = "ncu"

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
        # Start the next trial's session ahead (harness.profile.ncu.session); `prestart: false` never does.
        self.prestart = bool(cfg.get("prestart", True))
        self._plan: MetricPlan | None = None
        self._plan_source = "not checked"
        self._pending: PendingSession | None = None
        # Whether a trial's child wrote its phase record (ncu, the child and its imports work here): None
        # before the first trial, whose session for the next trial is started beside it on trust; False once a
        # trial failed without any having proven it (no session is started until one does).
        self._proven: bool | None = None
        self._atexit = False  # close() registered to run at exit

    @property
    def pending(self) -> PendingSession | None:
        """The session started for the next trial, if any."""
        return self._pending

    def close(self) -> None:
        """Kill the session waiting for a next trial, and remove its folder (also at exit)."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.discard()
        if self.keep_dir:  # the kept folders are the trials' alone
            with contextlib.suppress(OSError):  # not there, or another process's session still waits in it
                (Path(self.keep_dir) / PENDING_DIR).rmdir()

    def metric_plan(self) -> MetricPlan:
        """The metric set's list as this chip takes it (checked once)."""
        if self._plan is None:
            names, source, note = chip_metrics(self.available_metrics, self.executable)
            plan = resolve_metrics(metrics_for(self.metric_set), names, source)
            if note:
                plan.notes.append(note)
            self._plan, self._plan_source = plan, source
        return self._plan

    def profile(self, fn: Callable[[], Any], facts: WorkloadFacts, request: Measure | None = None) -> Profile:
        if request is None:
            raise ProfilerUnavailable("profiler=ncu profiles a trial in a child process and needs its Measure request")
        plan = self.metric_plan()
        session, dropped = self._take_pending()
        if session is not None:
            workdir = session.folder
        elif self.keep_dir:
            workdir = trial_folder(Path(self.keep_dir), request)
        else:
            workdir = Path(tempfile.mkdtemp(prefix="harness-ncu-"))
        try:
            workdir, run = self._run(workdir, request, session)
            if dropped:
                run.cost["dropped_session"] = dropped
            return self._read(workdir, run, plan)
        finally:
            if not self.keep_dir:  # a report per trial would fill /tmp over a search
                shutil.rmtree(workdir, ignore_errors=True)

    def _take_pending(self) -> tuple[PendingSession | None, str | None]:
        """The session started for this trial, when it still waits; else None, and how a dropped one ended
        (its child gave up waiting, or could not start): the trial then runs cold."""
        pending, self._pending = self._pending, None
        if pending is None or pending.alive():
            return pending, None
        return None, pending.discard()

    def _command(self, child: list[str], report: Path) -> NcuCommand:
        return profile_command(
            child, nvtx_range=NVTX_RANGE, report_path=report, clock_control=self.clock_control,
            cache_control=self.cache_control, metric_set=self.metric_set, ncu=self.executable,
            metrics=self.metric_plan().metrics,
        )

    def _run(self, workdir: Path, request: Measure, session: PendingSession | None) -> tuple[Path, _Run]:
        """ncu's run of the trial, in `session` or cold; the folder it ended in (a kept pre-started one is
        moved to the trial's own) and what the run was. The next trial's session starts as soon as this
        trial's ncu runs, so it imports while this trial profiles."""
        job = {"measure": plain(request), "nvtx_range": NVTX_RANGE}
        try:
            if session is None:
                write_job(workdir, job)
                launched = handed = time.time()
                command = self._command(child_argv(workdir, wait=False, launched=launched), workdir / REPORT_NAME)
                self._prestart()  # a process start's milliseconds before this trial's ncu, which is waited for
                result = run_ncu(command.argv, self.deadline_s)
            else:
                launched, command = session.launched, session.command
                handed = session.hand(job)
                self._prestart()
                result = session.finish(self.deadline_s)
            ended = time.time()
        finally:
            if session is not None and self.keep_dir:
                kept = trial_folder(Path(self.keep_dir), request)
                os.replace(workdir, kept)  # onto the empty folder that claimed the trial's number
                workdir = kept
            self._judge_chain(workdir)
        # A stand-in result without ncu's output (a test's) has no pass counts to give.
        output = f"{getattr(result, 'stdout', '')}\n{getattr(result, 'stderr', '')}"
        cost = trial_cost(read_phases(workdir), prestarted=session is not None, launched=launched, handed=handed,
                          ended=ended, output=output)
        return workdir, _Run(command, cost)

    def _judge_chain(self, finished: Path) -> None:
        """After a trial: a child that wrote its phase record proves ncu and the child work here (a session is
        started now if none waits). Until one has, a trial without it stops the sessions: the one started
        beside it is killed, and later trials start cold until one proves the chain."""
        if read_phases(finished) is not None:
            self._proven = True
            self._prestart()
        elif not self._proven:
            self._proven = False
            self.close()

    def _prestart(self) -> None:
        """Start the next trial's session, unless one waits already, prestart is off, or the chain failed
        before it was ever proven (`_proven` is None before the first trial: the first session is started
        beside it, on trust, and killed if it fails)."""
        if not self.prestart or self._proven is False or self._pending is not None:
            return
        if self.keep_dir:  # beside the trial folders it will be moved among: the same file system
            pending_dir = Path(self.keep_dir) / PENDING_DIR
            pending_dir.mkdir(parents=True, exist_ok=True)
            folder = Path(tempfile.mkdtemp(prefix="session-", dir=pending_dir))
        else:
            folder = Path(tempfile.mkdtemp(prefix="harness-ncu-"))
        try:
            self._pending = start_session(self._command, folder)
        except (NcuFailure, OSError):  # ncu vanished, or no process can start: the next trial says so, cold
            shutil.rmtree(folder, ignore_errors=True)
            return
        if not self._atexit:
            atexit.register(self.close)
            self._atexit = True

    def _read(self, workdir: Path, run: _Run, plan: MetricPlan) -> Profile:
        command, cost = run.command, run.cost
        report = workdir / REPORT_NAME
        t0 = time.perf_counter()
        cards = cards_from_ncu(report, group_by="range")
        cost["report_read_s"] = round(time.perf_counter() - t0, 3)
        kernels = [k for card in cards for k in card.kernels]
        if not kernels:
            where = workdir if self.keep_dir else "set profiler.keep_dir=DIR to keep the trial's report"
            raise NcuFailure("no_kernels", f"ncu profiled no kernel in range {NVTX_RANGE!r}; see {where}")
        for kernel in kernels:
            kernel.extra["metrics_source"] = SOURCE_NCU
        settings = {k: v for k, v in command.settings.items() if k != "metrics"}
        settings.update(ncu_executable=self.executable, ncu_version=ncu_version(self.executable),
                        report=str(report) if self.keep_dir else None, seconds=cost["wall_s"], ncu_cost=cost)
        settings["metrics_checked_against"] = self._plan_source
        if plan.substituted:
            settings["metrics_substituted"] = dict(plan.substituted)
        if plan.dropped:
            settings["metrics_dropped"] = list(plan.dropped)
        # ncu measures; the device's peaks are recorded beside the counters for rooflines and hooks.
        peaks = {**for_current_device().to_dict(), "used": "recorded for reference; the metrics are ncu's"}
        return Profile(kernels=kernels, backend="ncu", metrics_source=SOURCE_NCU, peaks=peaks, settings=settings,
                       notes=[*plan.notes, *kernel_notes(kernels)])
