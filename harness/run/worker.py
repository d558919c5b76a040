"""Trial isolation: a persistent worker process measures the variants, so a bad one cannot end the run.

A sweep runs variants nobody has run before; some segfault, raise, run out of memory or hang. The
parent (the Hydra app, which owns Optuna, the storage and the outputs) never calls a variant itself:
one worker child (`python -m harness.trial`, harness/trial/__main__.py) does, and answers each request
(harness.boundary: Describe, Measure, Retime, Confirm) with its typed reply, one JSON line each way on a
private pipe. The parent waits for the answer under a deadline (`search.trial_deadline_s`):

- an exception in the variant: the answer says `ExceptionType: message`; the child stays up;
- out of memory (torch.OutOfMemoryError, MemoryError, a CPU allocator's "can't allocate memory"):
  `out of memory: ...`, the child frees the CUDA cache and stays up;
- the child dies (a segfault, the OOM killer, kill -9, os._exit): the parent names the signal or exit
  status and starts a new child for the next request;
- no answer by the deadline: the parent kills the child's process group (SIGKILL) and starts a new one.

The child is started once per process (importing torch costs seconds; one child serves every run of
the process, e.g. experiment=auto's sub-runs, logging to each run's folder) and again only after it
died, was killed, or hit a CUDA error that leaves its context unusable. It is also where the run learns
what it needs of the torch side before measuring (a Describe: the device, the experiment's variants, the
profiler, the report's chunk cards), so the parent never imports torch. The deadline covers every
request: the baseline, each trial, the drift re-time after it and the confirm rounds. It
rebuilds a card's workload from the card's spec, which every card request carries (the ncu child gets the
same), and keeps it, with the experiment's
prepared baseline and the correctness reference, until a request for another card comes, so the
trials of one card pay the set-up once. Every output is judged against the workload's float64
reference (harness.trial.correctness), computed once per card when the baseline is measured and saved, with
the baseline's own error e_b and dtype, as trials/<card>/reference.pt; a new child loads it instead of
recomputing it, so the trials after a restart are held to the same standard. The child writes every
card it measures itself (atomically), so what was measured is on disk before the parent hears of it.

The child ignores SIGINT and runs in its own session: Ctrl-C reaches the parent only, which kills
the child. It dies with the parent (PR_SET_PDEATHSIG on Linux, else a watchdog thread). Its stdout
and stderr go to `worker.log` in the run directory (faulthandler writes a crashed child's Python
stack there). `search.worker_memory_limit_gb` caps the child's address space (RLIMIT_AS, Linux, CPU
device only, from its first CPU card request on) so a runaway CPU variant fails with an allocation error instead of
taking the machine.

This module is the run's side of it: the child's life cycle, its requests, and what a request that got no
reply comes to (WorkerError when no child can start, else a CRASHED or DEADLINE reply).
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import select
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from harness.boundary.framing import (
    ENV_CPU_THREADS,
    ENV_LOG,
    ENV_MEMORY_LIMIT,
    ENV_PARENT,
    read_reply,
    request_line,
    send,
)
from harness.boundary.outcomes import TrialStatus
from harness.boundary.replies import Confirmed, Measured, Retimed
from harness.boundary.requests import Confirm, ConfirmPlan, Measure, R, Request, Retime
from harness.boundary.spec import CardSpec, TimingSettings
from harness.cards.measured import TrialLabel
from harness.errors import HarnessError
from harness.signals import check, drain, wakeup_fd

if TYPE_CHECKING:  # annotations only: the worker child imports this package, and needs no Hydra
    from harness.config.schema import HarnessConfig

log = logging.getLogger("harness")

STARTUP_TIMEOUT_S = 300.0  # a child that has not said "ready" by then is broken (an import that hangs)

_SIGNAL_MEANING = {
    "SIGSEGV": "segmentation fault",
    "SIGBUS": "bus error",
    "SIGABRT": "aborted",
    "SIGFPE": "floating-point exception",
    "SIGILL": "illegal instruction",
    "SIGKILL": "killed (the kernel's OOM killer, or kill -9)",
    "SIGTERM": "terminated",
}


class WorkerError(HarnessError):
    """The worker process cannot be started; one line saying why."""


class TrialFailed(Exception):
    """Raised by an objective so that Optuna records the trial as FAIL; the message is the reason."""


def exit_reason(returncode: int | None) -> str:
    """Why the child went away, from its exit status."""
    if returncode is None:
        return "worker process went away"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        meaning = _SIGNAL_MEANING.get(name)
        return f"worker died: {name}" + (f" ({meaning})" if meaning else "") + "; its last output is in worker.log"
    return f"worker exited with status {returncode} mid-request; its last output is in worker.log"


class TrialWorker:
    """Owns one worker child; starts it on the first request and again after it died or was killed."""

    def __init__(self, *, log_path: Path | None = None, pid_path: Path | None = None,
                 memory_limit_gb: float | None = None, cpu_threads: int | None = None,
                 startup_timeout_s: float = STARTUP_TIMEOUT_S):
        self.log_path = log_path
        self.pid_path = pid_path
        self.memory_limit_gb = memory_limit_gb
        self.cpu_threads = cpu_threads
        self.startup_timeout_s = startup_timeout_s
        self.startups: list[float] = []  # wall seconds from spawn to "ready", per start
        self.torch_threads: int | None = None  # what the running child's torch uses
        self._proc: subprocess.Popen | None = None
        self._send: int | None = None
        self._recv: int | None = None
        self._buffer = b""
        self._ready = False  # the spawned child has said it can take requests
        self._spawned_at = 0.0

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def use_run_dir(self, run_dir: Path) -> None:
        """Log to run_dir/worker.log and name the pid in run_dir/worker.pid from now on."""
        run_dir.mkdir(parents=True, exist_ok=True)
        self.log_path, self.pid_path = run_dir / "worker.log", run_dir / "worker.pid"
        if self.pid is not None:
            self.pid_path.write_text(f"{self.pid}\n", encoding="ascii")

    # -- life cycle --------------------------------------------------------------------------

    def start(self) -> float:
        """Start a child and wait until it can take requests; the seconds that took."""
        self.spawn()
        return self._await_ready()

    def spawn(self) -> None:
        """Start a child without waiting for it: the run's own set-up goes on while it imports torch, and
        the first request waits for it to be ready. A child already running is kept."""
        if self._proc is not None and self._proc.poll() is None:
            return
        self.kill()
        self._spawned_at = time.perf_counter()
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        env = dict(os.environ)
        # The child imports what the parent imports: the parent's module search path, in its order.
        paths = [p or os.getcwd() for p in sys.path]
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(p for p in paths if os.path.isdir(p)))
        env[ENV_PARENT] = str(os.getpid())
        env[ENV_LOG] = str(self.log_path) if self.log_path is not None else ""
        env.pop(ENV_MEMORY_LIMIT, None)
        if self.memory_limit_gb:
            env[ENV_MEMORY_LIMIT] = str(float(self.memory_limit_gb))
        env.pop(ENV_CPU_THREADS, None)
        if self.cpu_threads:
            env[ENV_CPU_THREADS] = str(int(self.cpu_threads))
        log_file = open(self.log_path, "ab") if self.log_path is not None else None  # noqa: SIM115
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "harness.trial", str(to_child_r), str(from_child_w)],
                pass_fds=(to_child_r, from_child_w), stdin=subprocess.DEVNULL,
                stdout=log_file if log_file else None, stderr=subprocess.STDOUT if log_file else None,
                start_new_session=True, env=env, close_fds=True,
            )
        finally:
            os.close(to_child_r)
            os.close(from_child_w)
            if log_file is not None:
                log_file.close()
        self._send, self._recv, self._buffer = to_child_w, from_child_r, b""
        self._ready = False

    def _await_ready(self) -> float:
        """Wait for the spawned child's hello; the seconds from its spawn. WorkerError when it never says it."""
        assert self._proc is not None
        line = self._read_line(time.monotonic() + self.startup_timeout_s)
        hello = json.loads(line) if line is not None else {}
        if not hello.get("ready"):
            why = (f"no answer after {self.startup_timeout_s:g} s" if self._proc.poll() is None
                   else exit_reason(self._proc.returncode))
            self.kill()
            raise WorkerError(f"the worker process could not start ({why}){self.log_tail()}")
        seconds = time.perf_counter() - self._spawned_at
        self._ready = True
        self.startups.append(seconds)
        self.torch_threads = hello.get("torch_threads")
        if self.pid_path is not None:
            self.pid_path.write_text(f"{self._proc.pid}\n", encoding="ascii")
        log.info("worker process %d ready in %.1f s", self._proc.pid, seconds)
        return seconds

    def kill(self) -> None:
        """SIGKILL the child and everything it started (its own process group); forget it and its pid file."""
        proc, self._proc = self._proc, None
        if self.pid_path is not None:
            self.pid_path.unlink(missing_ok=True)
        for fd in (self._send, self._recv):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._send = self._recv = None
        if proc is None:
            return
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                proc.kill()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL does not take 10 s
            pass

    def close(self) -> None:
        """Ask the child to exit (it sees the pipe close); kill it if it does not go within 5 s, or at once
        while it has not said it is ready (it has served nothing: it would only finish importing torch)."""
        proc = self._proc
        if proc is None:
            return
        if not self._ready:
            self.kill()
            return
        if self._send is not None:
            try:
                os.close(self._send)
            except OSError:
                pass
            self._send = None
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        self.kill()

    # -- requests ----------------------------------------------------------------------------

    def request(self, request: Request[R], deadline_s: float | None) -> R:
        """Send one request and wait for its reply; a crash or a missed deadline is a reply too.

        Raises WorkerError only when no child can be started. A stop signal (harness.signals) is acted on here,
        before the request is sent and while its reply is awaited: `Stopped` kills the child.
        """
        check()
        if self._proc is None or self._proc.poll() is not None:
            if self._proc is not None:
                self.kill()
            self.start()
        elif not self._ready:
            self._await_ready()
        assert self._proc is not None and self._send is not None
        until = None if deadline_s is None else time.monotonic() + float(deadline_s)
        try:
            try:
                send(self._send, request_line(request, str(self.log_path) if self.log_path is not None else None))
            except OSError:  # the child is gone (a broken pipe): its exit status says why
                line = None
            else:
                line = self._read_line(until)
        except BaseException:  # Ctrl-C (or anything else) mid-request: the child is in an unknown state
            self.kill()
            raise
        if line is not None:
            reply = read_reply(line, request.reply)
            if reply.restart:
                self.kill()
                reply = replace(reply, reason=reply.reason + "; worker restarted (the CUDA context is unusable "
                                "after this error)")
            return cast(R, reply)
        proc = self._proc
        if proc.poll() is None and until is not None and time.monotonic() >= until:
            assert deadline_s is not None  # until was set from it
            self.kill()
            return cast(R, request.reply(TrialStatus.DEADLINE, reason=f"deadline: no result after "
                                         f"{float(deadline_s):g} s (search.trial_deadline_s); the worker was killed"))
        try:
            proc.wait(timeout=10)  # the pipe closed: the child is exiting
        except subprocess.TimeoutExpired:
            pass
        reason = exit_reason(proc.poll())
        self.kill()
        return cast(R, request.reply(TrialStatus.CRASHED, reason=reason))

    def _read_line(self, until: float | None) -> bytes | None:
        """The next line from the child; None at end of file, child exit or `until` (monotonic).

        A stop signal wakes the wait (harness.signals' wakeup descriptor) and raises `Stopped` here."""
        assert self._recv is not None and self._proc is not None
        while b"\n" not in self._buffer:
            check()
            wait = 1.0 if until is None else max(0.0, min(1.0, until - time.monotonic()))
            woken = wakeup_fd()
            ready, _, _ = select.select([self._recv] if woken is None else [self._recv, woken], [], [], wait)
            if woken is not None and woken in ready:
                drain()
                continue
            if ready:
                chunk = os.read(self._recv, 1 << 16)
                if not chunk:
                    return None
                self._buffer += chunk
            elif self._proc.poll() is not None:
                return None
            elif until is not None and time.monotonic() >= until:
                return None
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def log_tail(self) -> str:
        """': ' and the last line the child wrote to worker.log, or nothing: what a one-line error ends with."""
        if self.log_path is None or not self.log_path.exists():
            return ""
        lines = [s for s in self.log_path.read_text(encoding="utf-8", errors="replace").splitlines() if s.strip()]
        return f": {lines[-1].strip()[:300]}" if lines else ""


_WORKER: TrialWorker | None = None


def worker_for(cfg: HarnessConfig, device: str | None = None) -> TrialWorker:
    """This process's worker, with the run's limits: `timing.cpu_threads` for a CPU device, and
    `search.worker_memory_limit_gb` (Linux), which the child applies from its first CPU card request on.

    `device`: the run's, once described (before: the configured one, so `device=auto` takes the CPU's
    threads until the worker has resolved it). One worker serves every run of the process (experiment=auto
    runs one per experiment), so its start-up is paid once; other limits start a new one. A run points it
    at its folder (`TrialWorker.use_run_dir`) once the folder is claimed.
    """
    global _WORKER
    limits = _limits(cfg.search.worker_memory_limit_gb, cfg.timing.cpu_threads, device or cfg.device)
    if _WORKER is not None and (_WORKER.memory_limit_gb, _WORKER.cpu_threads) != limits:
        close_worker()
    if _WORKER is None:
        _WORKER = TrialWorker(memory_limit_gb=limits[0], cpu_threads=limits[1])
    return _WORKER


def _limits(memory_limit_gb: float | None, cpu_threads: int | None, device: str) -> tuple[float | None, int | None]:
    """The worker's (memory limit, thread count) for these settings on `device`: RLIMIT_AS is Linux's, and a
    CUDA worker keeps torch's threads."""
    return (memory_limit_gb if sys.platform.startswith("linux") else None,
            None if device.startswith("cuda") else cpu_threads)


def spawn_ahead(args: list[str]) -> None:
    """Start this process's worker child before the config is composed, so that torch's import in the child
    runs beside Hydra's and Optuna's here (0.4 s of a CPU run's wait for it).

    Its limits are the command line's (`timing.cpu_threads=`, `search.worker_memory_limit_gb=`, `device=`),
    else the config's defaults (none); preflight's worker_for keeps the child when the composed config asks
    for the same, else replaces it. Nothing starts for Hydra's options (--help, --cfg, --multirun) or a
    limit it cannot read (preflight says what is wrong with it).
    """
    global _WORKER
    given: dict[str, str] = {}
    for arg in args:
        if arg.startswith("-"):
            return
        key, sep, value = arg.lstrip("+~").partition("=")
        if sep:
            given[key] = value
    try:
        memory = None if (value := given.get("search.worker_memory_limit_gb", "null")) == "null" else float(value)
        threads = None if (value := given.get("timing.cpu_threads", "null")) == "null" else int(value)
    except ValueError:
        return
    if _WORKER is None:
        limits = _limits(memory, threads, given.get("device", "auto"))
        _WORKER = TrialWorker(memory_limit_gb=limits[0], cpu_threads=limits[1])
        _WORKER.spawn()


def warn_unused_memory_limit(cfg: HarnessConfig, device: str) -> None:
    """Say so when search.worker_memory_limit_gb cannot hold on this run's device or system."""
    if cfg.search.worker_memory_limit_gb is not None and (not device.startswith("cpu")
                                                          or not sys.platform.startswith("linux")):
        log.warning("search.worker_memory_limit_gb is ignored here: it needs Linux (RLIMIT_AS) and the CPU "
                    "device (CUDA reserves more address space than any such limit)")


@atexit.register
def close_worker() -> None:
    """End this process's worker (at exit, or when a run needs a differently limited one)."""
    global _WORKER
    worker, _WORKER = _WORKER, None
    if worker is not None:
        worker.close()


class CardSession:
    """The requests of one card, each carrying the card's spec (so a new child can rebuild the card)."""

    def __init__(self, worker: TrialWorker, spec: CardSpec, deadline_s: float | None):
        self.worker = worker
        self.spec = spec
        self.deadline_s = deadline_s

    def measure(self, *, variant: str, params: dict[str, Any], label: TrialLabel, card_path: Path,
                baseline: bool = False, extra: dict[str, Any] | None = None) -> Measured:
        return self.worker.request(Measure(spec=self.spec, variant=variant, params=params, baseline=baseline,
                                           label=label, card_path=str(card_path), extra=extra or {}),
                                   self.deadline_s)

    def retime(self, timing: TimingSettings) -> Retimed:
        return self.worker.request(Retime(spec=self.spec, timing=timing), self.deadline_s)

    def confirm(self, plan: ConfirmPlan) -> Confirmed:
        return self.worker.request(Confirm(spec=self.spec, plan=plan), self.deadline_s)


class _QuietTrialFailures(logging.Filter):
    """Optuna logs a failed trial's exception with its traceback. A TrialFailed is a recorded outcome
    (the objective logged its one-line reason) and a KeyboardInterrupt is the app's to report."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], (TrialFailed, KeyboardInterrupt)):
            return False
        return not record.getMessage().endswith("failed with value None.")


def quiet_trial_failures() -> None:
    optimize_logger = logging.getLogger("optuna.study._optimize")
    if not any(isinstance(f, _QuietTrialFailures) for f in optimize_logger.filters):
        optimize_logger.addFilter(_QuietTrialFailures())
