"""What the run (harness.run.worker) and its worker child (harness.trial.handlers) agree on: the
environment the child reads, the errors, and how a failure is put in one line. The messages
themselves are harness.jobs.TrialJob and TrialResult."""

from __future__ import annotations

import signal

STARTUP_TIMEOUT_S = 300.0  # a child that has not said "ready" by then is broken (an import that hangs)
ENV_PARENT = "HARNESS_WORKER_PARENT"
ENV_MEMORY_LIMIT = "HARNESS_WORKER_MEMORY_LIMIT_GB"
ENV_CPU_THREADS = "HARNESS_WORKER_CPU_THREADS"
ENV_LOG = "HARNESS_WORKER_LOG"

_SIGNAL_MEANING = {
    "SIGSEGV": "segmentation fault",
    "SIGBUS": "bus error",
    "SIGABRT": "aborted",
    "SIGFPE": "floating-point exception",
    "SIGILL": "illegal instruction",
    "SIGKILL": "killed (the kernel's OOM killer, or kill -9)",
    "SIGTERM": "terminated",
}


class WorkerError(RuntimeError):
    """The worker process cannot be started; one line saying why."""


class TrialFailed(Exception):
    """Raised by an objective so that Optuna records the trial as FAIL; the message is the reason."""


def one_line(exc: BaseException, limit: int = 300) -> str:
    """`ExceptionType: first line of the message`, at most `limit` characters."""
    text = str(exc).strip().splitlines()
    message = f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
    return message if len(message) <= limit else message[: limit - 3] + "..."


def is_out_of_memory(exc: BaseException) -> bool:
    if isinstance(exc, MemoryError):
        return True
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        return False
    kinds = tuple(k for k in (getattr(torch, "OutOfMemoryError", None),
                              getattr(getattr(torch, "cuda", None), "OutOfMemoryError", None)) if k is not None)
    if kinds and isinstance(exc, kinds):
        return True
    return isinstance(exc, RuntimeError) and ("can't allocate memory" in str(exc) or "out of memory" in str(exc))


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
