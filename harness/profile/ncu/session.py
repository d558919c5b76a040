"""One trial's ncu session: its folder and command, started ahead of its trial, and what the trial cost.

A trial under ncu is a process of its own (harness.trial.ncu_child, started by ncu): ncu starting, the
interpreter, torch and the harness imports take seconds that do not depend on the trial. A
`PendingSession` starts that command before the trial is known, the child in --wait mode: it imports
everything, then waits for its job without a CUDA call (nothing on the GPU, nothing for ncu to profile).
`hand` writes the job (atomically: the child never reads half of it) and `finish` waits for ncu under
the trial's deadline, as a cold run would; `discard` kills a session nobody will use.

ncu writes its report only when the profiled program exits, so one session serves exactly one trial:
a session that profiled every trial of a card through per-trial NVTX ranges could not hand the search
any trial's card before the last one ended (docs/ncu-cost.md).

A trial's folder holds JOB_NAME, PHASES_NAME (the child's phase record) and REPORT_NAME. `trial_cost`
puts the child's phases, this process's clock and ncu's own pass counts together.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from harness.profile.ncu.command import NcuCommand
from harness.profile.ncu.failures import ncu_missing
from harness.profile.ncu.runner import RunResult, Started, checked, start_command

JOB_NAME = "trial_spec.json"
PHASES_NAME = "phases.json"
REPORT_NAME = "trial.ncu-rep"
CHILD_MODULE = "harness.trial.ncu_child"
# ncu's progress line per profiled kernel: `==PROF== Profiling "k" - 0: 0%....50%....100% - 9 passes`. The
# program's own output may land inside it (between "100%" and " - 9 passes"), so only the tail is matched.
_PASSES = re.compile(r" - (\d+) pass(?:es)?\b")

# (child argv, report path) -> the ncu command line profiling it (NcuProfiler's settings)
CommandMaker = Callable[[list[str], Path], NcuCommand]


def child_argv(folder: Path, *, wait: bool, launched: float, owner: int | None = None) -> list[str]:
    """The profiled program: the ncu child on the folder's job, writing its phase record there."""
    argv = [sys.executable, "-m", CHILD_MODULE, str(folder / JOB_NAME), "--phases", str(folder / PHASES_NAME),
            "--launched", f"{launched:.6f}"]
    if wait:
        argv.append("--wait")
    if owner is not None:
        argv += ["--owner", str(owner)]
    return argv


def write_job(folder: Path, payload: Mapping[str, Any]) -> None:
    """The job as the child reads it, appearing at once and whole (a waiting child polls for the name)."""
    partial = folder / (JOB_NAME + ".part")
    partial.write_text(json.dumps(payload), encoding="utf-8")
    os.replace(partial, folder / JOB_NAME)


def read_phases(folder: Path) -> dict[str, Any] | None:
    """The child's phase record (ncu_child --phases), or None when it wrote none."""
    try:
        record = json.loads((folder / PHASES_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def replay_passes(output: str) -> list[int]:
    """ncu's replay passes for each kernel it profiled, in order, from its progress lines."""
    return [int(n) for n in _PASSES.findall(output)]


@dataclass
class PendingSession:
    """ncu and its child started ahead of a trial, the child waiting for the job in `folder`."""

    folder: Path
    command: NcuCommand
    started: Started
    launched: float  # time.time() when it was started

    def alive(self) -> bool:
        return self.started.running()

    def hand(self, payload: Mapping[str, Any]) -> float:
        """Give the waiting child its job; the moment it was handed (time.time())."""
        write_job(self.folder, payload)
        return time.time()

    def finish(self, deadline_s: float) -> RunResult:
        """ncu's run from now until it exits, its group killed `deadline_s` from now (the trial's deadline
        counts from its handoff, not from the session's start); NcuFailure when unusable."""
        return checked(self.started.finish(deadline_s), deadline_s)

    def discard(self) -> str:
        """Kill it (if it still runs) and remove its folder, which holds no trial (a session handed its job is
        finished, never discarded); one line on how it ended."""
        result = self.started.kill()
        shutil.rmtree(self.folder, ignore_errors=True)
        lines = [ln.strip() for ln in (result.stdout + "\n" + result.stderr).splitlines() if ln.strip()]
        return f"exit {result.returncode}" + (f": {lines[-1][:200]}" if lines else "")


def start_session(make_command: CommandMaker, folder: Path) -> PendingSession:
    """Start ncu on a child that waits for its job in `folder` and gives up when this process dies."""
    launched = time.time()
    argv = child_argv(folder, wait=True, launched=launched, owner=os.getpid())
    command = make_command(argv, folder / REPORT_NAME)
    try:
        started = start_command(command.argv)
    except FileNotFoundError:
        raise ncu_missing(f"no executable {command.argv[0]!r}") from None
    return PendingSession(folder, command, started, launched)


def trial_cost(record: dict[str, Any] | None, *, prestarted: bool, launched: float, handed: float, ended: float,
               output: str) -> dict[str, Any]:
    """What one trial under ncu cost, in seconds: `wall_s` from its job being handed (a cold trial: its
    start) to ncu's exit; the child's phases; `after_child_s`, ncu writing the report after the child
    exited; for a pre-started session, how long it had been running before the handoff and whether its
    imports were done by then; ncu's replay passes per profiled kernel."""
    marks = (record or {}).get("marks") or {}
    cost: dict[str, Any] = {
        "session": "prestarted" if prestarted else "cold",
        "wall_s": round(ended - handed, 3),
        "phases_s": dict((record or {}).get("phases") or {}),
        "passes": replay_passes(output),
        "launched_at": round(launched, 6),
        "handed_at": round(handed, 6),
    }
    if "done" in marks:
        cost["after_child_s"] = round(ended - float(marks["done"]), 3)
    if prestarted:
        cost["ahead_s"] = round(handed - launched, 3)
        cost["ready_at_handoff"] = "ready" in marks and float(marks["ready"]) <= handed
    if record and "cuda_initialized_before_job" in record:
        cost["cuda_initialized_before_job"] = bool(record["cuda_initialized_before_job"])
    return cost
