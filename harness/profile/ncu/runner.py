"""Run a command under a deadline, in its own process group, and check ncu's output for failures.

ncu has no timeout flag, and it starts the profiled program (which may start its own children):
killing ncu alone would leave them running on the GPU. The command therefore runs in a new session
whose leader is a small supervisor (supervise.py), and the group dies on every way out:
- the deadline: the whole group gets SIGTERM, then SIGKILL after a grace period;
- a normal end or an exception here (Ctrl-C): SIGKILL to whatever of the group is left;
- this process killed outright (a `timeout` around the harness, the worker's parent gone): the
  supervisor gets SIGTERM from the kernel (PR_SET_PDEATHSIG) and SIGKILLs the group;
- this interpreter exiting with a command still running (a thread's, or one started ahead and never
  finished: `start_command`, then `Started.finish` or `Started.kill`): an atexit hook kills it.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from harness.profile.ncu.failures import deadline_exceeded, detect, ncu_missing


@dataclass(frozen=True)
class RunResult:
    argv: tuple[str, ...]
    returncode: int  # negative: killed by that signal
    stdout: str
    stderr: str
    timed_out: bool
    seconds: float


SUPERVISOR = Path(__file__).with_name("supervise.py")

# Process groups of commands still running, killed if this interpreter exits first.
_LIVE: set[int] = set()
_LIVE_LOCK = threading.Lock()


@atexit.register
def _kill_live_groups() -> None:
    with _LIVE_LOCK:
        groups = list(_LIVE)
    for pgid in groups:
        _signal_group(pgid, signal.SIGKILL)


def _check_executable(program: str, cwd: str | os.PathLike[str] | None) -> None:
    """FileNotFoundError unless `program` names an executable (the supervisor would only say 127)."""
    if os.sep in program:
        path = Path(cwd or ".") / program if not os.path.isabs(program) else Path(program)
        if path.is_file() and os.access(path, os.X_OK):
            return
    elif shutil.which(program):
        return
    raise FileNotFoundError(2, "No such file or directory", program)


class Started:
    """A command `start_command` started and nobody has waited for yet: `finish` waits for it under a
    deadline, `kill` ends it with its whole group. Until then the atexit hook holds its group."""

    def __init__(self, argv: list[str], proc: subprocess.Popen[str], started: float) -> None:
        self.argv = argv
        self.proc = proc
        self.started = started  # time.monotonic() just before it started

    def running(self) -> bool:
        return self.proc.poll() is None

    def finish(self, deadline_s: float, *, grace_s: float = 5.0) -> RunResult:
        """Wait until the command ends or `deadline_s` passes (then its group dies); nothing of its group
        outlives the call. `seconds` counts from its start."""
        proc = self.proc
        timed_out = False
        try:
            try:
                stdout, stderr = proc.communicate(timeout=deadline_s)
            except subprocess.TimeoutExpired:
                timed_out = True
                stdout, stderr = _stop_group(proc, grace_s)
        except BaseException:
            # Interrupted (Ctrl-C reaches only our own group): do not leave the profiled program behind.
            _signal_group(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
        finally:
            # Whatever the leader left behind (a profiled program still running after ncu exited).
            _signal_group(proc.pid, signal.SIGKILL)
            with _LIVE_LOCK:
                _LIVE.discard(proc.pid)
        return RunResult(argv=tuple(self.argv), returncode=proc.returncode, stdout=stdout, stderr=stderr,
                         timed_out=timed_out, seconds=time.monotonic() - self.started)

    def kill(self) -> RunResult:
        """SIGKILL the whole group now; what it printed until then."""
        _signal_group(self.proc.pid, signal.SIGKILL)
        return self.finish(5.0, grace_s=1.0)


def start_command(
    argv: Sequence[str],
    *,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    supervised: bool = True,
) -> Started:
    """Start `argv` in a new process group (under the supervisor: see the module) without waiting for it.

    Call from the thread that will outlive the command: the supervisor's death signal fires when the
    thread that started it ends (PR_SET_PDEATHSIG follows the thread, not the process).
    FileNotFoundError propagates when the executable does not exist.
    """
    argv = list(argv)
    if not argv:
        raise ValueError("empty command")
    _check_executable(argv[0], cwd)
    started = time.monotonic()
    launch = [sys.executable, str(SUPERVISOR), *argv] if supervised else argv
    proc = subprocess.Popen(
        launch,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        start_new_session=True,
        cwd=cwd,
        env=dict(env) if env is not None else None,
    )
    with _LIVE_LOCK:
        _LIVE.add(proc.pid)
    return Started(argv, proc, started)


def run_command(
    argv: Sequence[str],
    deadline_s: float,
    *,
    grace_s: float = 5.0,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    supervised: bool = True,
) -> RunResult:
    """Run `argv` to completion or until `deadline_s`; on the deadline its whole process group dies,
    and nothing of the group outlives the call, nor this process (`supervised`: see the module).

    FileNotFoundError propagates when the executable does not exist.
    """
    return start_command(argv, cwd=cwd, env=env, supervised=supervised).finish(deadline_s, grace_s=grace_s)


def run_ncu(
    argv: Sequence[str],
    deadline_s: float,
    *,
    grace_s: float = 5.0,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
) -> RunResult:
    """`run_command` for an ncu command line; raises NcuFailure when ncu's run is not usable."""
    try:
        result = run_command(argv, deadline_s, grace_s=grace_s, cwd=cwd, env=env)
    except FileNotFoundError:
        raise ncu_missing(f"no executable {argv[0]!r}") from None
    return checked(result, deadline_s)


def checked(result: RunResult, deadline_s: float) -> RunResult:
    """`result` of an ncu run that can be used; else the NcuFailure its output or status names."""
    if result.timed_out:
        raise deadline_exceeded(deadline_s)
    failure = detect(result.stdout + "\n" + result.stderr, result.returncode)
    if failure is not None:
        raise failure
    return result


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):  # every member already exited
        os.killpg(pgid, sig)


def _stop_group(proc: subprocess.Popen[str], grace_s: float) -> tuple[str, str]:
    # The leader's pid is the group id (start_new_session), and stays so after the leader exits.
    _signal_group(proc.pid, signal.SIGTERM)
    try:
        stdout, stderr = proc.communicate(timeout=grace_s)
    except subprocess.TimeoutExpired:
        stdout, stderr = None, None
    # Unconditionally: a member that ignored SIGTERM may have closed its pipes and still be alive.
    _signal_group(proc.pid, signal.SIGKILL)
    if stdout is None or stderr is None:
        try:
            stdout, stderr = proc.communicate(timeout=grace_s)
        except subprocess.TimeoutExpired:
            # Only a process that left the group (its own session) can still hold the pipes.
            stdout, stderr = "", "output lost: a process outside the killed group kept the pipes open"
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()
            proc.wait()
    return stdout, stderr
