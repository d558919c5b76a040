"""The worker child's process: `python -m harness.trial REQUEST_FD REPLY_FD`, started by
harness.run.worker.TrialWorker. One request line in, one reply line out (harness.boundary.framing), each
request answered by the handler its type names (`serve`): a Describe by harness.trial.describe, a card
request by harness.trial.handlers on the card harness.trial.server keeps."""

from __future__ import annotations

import gc
import importlib
import os
import signal
import sys
import time
from typing import Any, BinaryIO, Callable

from harness.boundary.framing import (
    ENV_CPU_THREADS,
    ENV_LOG,
    ENV_MEMORY_LIMIT,
    ENV_PARENT,
    read_request,
    ready_line,
    reply_line,
    send,
)
from harness.boundary.outcomes import TrialStatus
from harness.boundary.replies import Reply
from harness.boundary.requests import CardRequest, Confirm, Describe, Measure, Request, Retime
from harness.trial.describe import describe
from harness.trial.handlers import confirm, measure, on_card, retime
from harness.trial.server import Server


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
    the first CPU card request: a Describe or a CUDA run never runs under it (CUDA reserves more address space
    than any such limit, and `device=auto` is resolved by a Describe)."""

    def __init__(self) -> None:
        self.applied = False

    def before(self, request: Request[Any]) -> None:
        if not self.applied and isinstance(request, CardRequest) and request.spec.device.startswith("cpu"):
            self.applied = True
            _limit_memory(os.environ.get(ENV_MEMORY_LIMIT))


def serve(requests: BinaryIO, replies: int) -> None:
    """One reply line per request line, in order, until the parent closes the pipe."""
    server, limit, log_path = Server(), MemoryLimit(), os.environ.get(ENV_LOG) or None
    handlers: dict[type[Request[Any]], Callable[[Any], Reply]] = {
        Describe: describe, Measure: on_card(server, measure), Retime: on_card(server, retime),
        Confirm: on_card(server, confirm)}
    for line in requests:
        try:
            request, named_log = read_request(line)
        except ValueError as exc:  # answered as a bare reply, which reads as the one the parent expects
            send(replies, reply_line(Reply(TrialStatus.FAILED, reason=str(exc))))
            continue
        if named_log and named_log != log_path:
            log_path = named_log
            _log_to(log_path)  # a later run of the same parent process: its own worker.log
        limit.before(request)
        send(replies, reply_line(handlers[type(request)](request)))
        sys.stdout.flush()


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

    # Torch's and the harness's modules live as long as the child: frozen out of the collector, so a full
    # collection (the one between cards, and Python's own) walks only what the requests made (0.1 s each
    # with torch's objects in it, 0.5 s of a default CPU run's child).
    gc.freeze()
    if os.environ.get(ENV_CPU_THREADS):
        torch.set_num_threads(int(os.environ[ENV_CPU_THREADS]))
    send(replies, ready_line(os.getpid(), torch.get_num_threads()))
    serve(requests, replies)
    return 0  # the parent closed the pipe: the run is over


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
