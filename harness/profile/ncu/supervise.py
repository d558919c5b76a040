"""Run a command so that it, and everything it starts, dies with the process that asked for it.

    python harness/profile/ncu/supervise.py PROGRAM [ARGS...]

Run by path (standard library only, nothing of the package is imported: it starts in milliseconds).
`runner.run_command` starts it as the leader of a new process group. It asks the kernel for SIGTERM
when its parent dies (Linux PR_SET_PDEATHSIG; elsewhere a thread watches the parent id), starts
PROGRAM in the same group and waits. On SIGTERM, SIGINT or SIGHUP (its parent died; or the
deadline's group kill) it SIGKILLs the whole group: ncu, the program ncu profiles, and whatever that
started, none of which asked for a death signal of its own. Without it, a harness killed by a
`timeout` would leave ncu (in its own session) and the profiled program running on the GPU.

The exit status is PROGRAM's (128 + N when a signal N ended it); 127 when PROGRAM cannot be started.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

PR_SET_PDEATHSIG = 1
_child: subprocess.Popen[bytes] | None = None


def kill_group(*_: object) -> None:
    """SIGKILL every process of this process group, this one included; when this process does not
    lead its group (started by hand), only PROGRAM and this process, never the caller's group."""
    try:
        if os.getpgrp() == os.getpid():
            os.killpg(os.getpgrp(), signal.SIGKILL)
        elif _child is not None:
            _child.kill()
    finally:
        os._exit(137)


def parent_death_signal(sig: int) -> bool:
    """Ask for `sig` when the parent dies (Linux); False where that cannot be had."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(0.5)
    kill_group()


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: supervise.py PROGRAM [ARGS...]", file=sys.stderr)
        return 2
    parent = os.getppid()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, kill_group)
    armed = parent_death_signal(signal.SIGTERM)
    if os.getppid() != parent:  # the parent went before the request took effect
        kill_group()
    if not armed:
        threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    global _child
    try:
        _child = subprocess.Popen(argv)  # same stdin/stdout/stderr, same process group
    except OSError as exc:
        print(f"supervise: cannot start {argv[0]!r}: {exc}", file=sys.stderr)
        return 127
    code = _child.wait()
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
