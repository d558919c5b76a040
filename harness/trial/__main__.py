"""The worker child's process: `python -m harness.trial REQUEST_FD REPLY_FD`, started by
harness.run.worker.TrialWorker; one job per line in, one answer per line out: a TrialJob's TrialResult
(harness.jobs), a DescribeJob's Description (harness.descriptions)."""

from __future__ import annotations

import importlib
import json
import os
import signal
import sys
import time
import traceback
from typing import Any

from harness.descriptions import DescribeJob, Description
from harness.jobs import JobKind, TrialJob, TrialResult, TrialStatus
from harness.protocol import ENV_CPU_THREADS, ENV_LOG, ENV_MEMORY_LIMIT, ENV_PARENT, one_line
from harness.trial.describe import describe
from harness.trial.handlers import answer
from harness.trial.server import Server


def _send(fd: int, obj: Any) -> None:
    view = memoryview((json.dumps(obj, default=str) + "\n").encode())
    while view:
        view = view[os.write(fd, view):]


def _die_with_parent(parent: int | None) -> None:
    """SIGKILL this process when the parent goes (Linux: PR_SET_PDEATHSIG; elsewhere a watchdog)."""
    if not parent:
        return
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            if libc.prctl(1, int(signal.SIGKILL), 0, 0, 0) == 0:  # 1 = PR_SET_PDEATHSIG
                if os.getppid() != parent:  # the parent went before the call took effect
                    os._exit(1)
                return
        except (OSError, AttributeError):
            pass
    import threading

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, name="harness-worker-watchdog", daemon=True).start()


def _limit_memory(value: str | None) -> None:
    if not value:
        return
    import resource

    limit = int(float(value) * 2**30)
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    print(f"harness worker {os.getpid()}: address space limited to {limit / 2**30:g} GiB "
          "(search.worker_memory_limit_gb)", file=sys.stderr, flush=True)


def _log_to(path: str) -> None:
    """Point this process's stdout and stderr (faulthandler's too) at `path`, appending."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


class MemoryLimit:
    """search.worker_memory_limit_gb (set by the parent in this process's environment), applied once, before
    the first CPU job: a describe job or a CUDA run never runs under it (CUDA reserves more address space
    than any such limit, and `device=auto` is resolved by a describe job)."""

    def __init__(self) -> None:
        self.applied = False

    def before(self, job: TrialJob) -> None:
        if not self.applied and job.device.startswith("cpu"):
            self.applied = True
            _limit_memory(os.environ.get(ENV_MEMORY_LIMIT))


def _answer(request: dict[str, Any], server: Server, limit: MemoryLimit) -> TrialResult | Description:
    """A describe job's Description, else the trial job's TrialResult; a request that cannot be read, or a
    description that fails, is a FAILED TrialResult with why (the parent tells the two answers apart)."""
    try:
        if request.get("kind") == JobKind.DESCRIBE.value:
            return describe(DescribeJob.from_json(request))
        job = TrialJob.from_json(request)
    except (ValueError, KeyError, TypeError) as exc:
        return TrialResult(TrialStatus.FAILED, reason=f"bad request: {exc}")
    except Exception as exc:  # noqa: BLE001 - the child answers whatever describing raised, and stays up
        traceback.print_exception(exc)
        return TrialResult(TrialStatus.FAILED, reason=one_line(exc))
    limit.before(job)
    return answer(server, job)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m harness.trial REQUEST_FD REPLY_FD (started by harness.run.worker.TrialWorker)",
              file=sys.stderr)
        return 2
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    _die_with_parent(int(os.environ.get(ENV_PARENT, "0")))
    import faulthandler

    faulthandler.enable(all_threads=True)  # a crash leaves its Python stack in worker.log
    requests, replies = os.fdopen(int(argv[0]), "rb"), int(argv[1])
    import torch  # the import the worker exists to pay once

    for module in ("harness.trial.measure", "harness.workloads.registry"):  # paid here, not by the first trial
        importlib.import_module(module)

    if os.environ.get(ENV_CPU_THREADS):
        torch.set_num_threads(int(os.environ[ENV_CPU_THREADS]))

    server, limit = Server(), MemoryLimit()
    log_path = os.environ.get(ENV_LOG) or None
    _send(replies, {"ready": True, "pid": os.getpid(), "torch_threads": torch.get_num_threads()})
    for line in requests:
        if not line.strip():
            continue
        try:
            message = json.loads(line)
            request = dict(message["job"])
        except (ValueError, KeyError, TypeError) as exc:
            result: TrialResult | Description = TrialResult(TrialStatus.FAILED, reason=f"bad request: {exc}")
        else:
            if message.get("log_path") and message["log_path"] != log_path:
                log_path = message["log_path"]
                _log_to(log_path)  # a later run of the same parent process: its own worker.log
            result = _answer(request, server, limit)
        _send(replies, result.to_json())
        sys.stdout.flush()
    return 0  # the parent closed the pipe: the run is over


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
