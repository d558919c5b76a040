"""Stop signals (SIGINT, SIGTERM; submitit's preemption signal in its jobs): recorded where they land, acted on
where the process chooses.

A handler that raises does so inside whatever frame the signal interrupted. Where that frame is a weakref
callback or a finalizer (importlib's module-lock callback, run after every import), Python prints "Exception
ignored" and goes on: the stop is lost, and a run that was asked to stop went on and exited 0. So the handler
here only records the signal (`pending`) and wakes a `select` through `signal.set_wakeup_fd` (`wakeup_fd`);
the process stops at its own checkpoints (`check`, which raises `Stopped`, a KeyboardInterrupt, so every
layer cleans up as for Ctrl-C), from where a stop is known to be safe. A second signal ends the process at
once. `finish` hands the signals back to the system's default before the process exits, so a signal after
the last checkpoint ends the process by that signal: from `install` on, a stop signal is never lost, and a
stopped process never exits 0.

A command line that has no checkpoints of its own (`python -m harness.report`, `python -m harness.capture`)
installs with `raise_at_once=True`: the handler also raises KeyboardInterrupt as Python's own does, for a
prompt stop, and the record decides the exit status even where that exception was swallowed (`exit_status`).
Pure Python, no harness import: every process imports it first.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any, Callable, NoReturn

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)  # exit status 128 + the signal: 130, 143

_pending: list[int] = []  # the stop signal received, once
_raised: list[str] = []  # the name of the signal whose stop `check` raised
_installed: dict[int, bool] = {}  # signal number -> whether its handler raises at once
_wakeup: list[int] = []  # the pipe (read end, write end) signal.set_wakeup_fd writes to


class Stopped(KeyboardInterrupt):
    """The stop a signal asked for, raised by `check` on the main path."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def name(signum: int) -> str:
    return signal.Signals(signum).name


def _record(signum: int, frame: Any) -> None:
    if _pending:  # asked again while stopping: at once
        os._exit(128 + signum)
    _pending.append(signum)
    if _installed.get(signum):
        raise KeyboardInterrupt


def install(signums: tuple[int, ...] = STOP_SIGNALS, *, raise_at_once: bool = False) -> None:
    """Record `signums` from now on (again: harmless); from the main thread, as Python's signal module requires."""
    for signum in signums:
        signal.signal(signum, _record)
        _installed[signum] = raise_at_once
    if raise_at_once and sys.unraisablehook is not _quiet_stop:
        _hooks.append(sys.unraisablehook)
        sys.unraisablehook = _quiet_stop
    if not _wakeup:
        read_end, write_end = os.pipe()  # not inherited by children (PEP 446)
        os.set_blocking(read_end, False)
        os.set_blocking(write_end, False)
        _wakeup.extend((read_end, write_end))
    signal.set_wakeup_fd(_wakeup[1], warn_on_full_buffer=False)


_hooks: list[Any] = []  # the unraisable hook `_quiet_stop` hands everything else to


def _quiet_stop(unraisable: Any) -> None:
    """A stop's KeyboardInterrupt that landed where Python can only ignore it (a weakref callback, a finalizer):
    not an error to print, the record already holds the stop and decides the exit status (`exit_status`)."""
    if _pending and isinstance(unraisable.exc_value, KeyboardInterrupt):
        return
    _hooks[-1](unraisable)


def pending() -> int | None:
    """The stop signal received, if one was."""
    return _pending[0] if _pending else None


def check() -> None:
    """Raise `Stopped` where a stop signal was received: the checkpoints' one call."""
    if _pending:
        if not _raised:
            _raised.append(name(_pending[0]))
        raise Stopped(_pending[0])


def stopping() -> str | None:
    """The signal's name once `check` raised its stop: the trial then in flight was interrupted, not failed."""
    return _raised[0] if _raised else None


def wakeup_fd() -> int | None:
    """A descriptor that turns readable when a signal arrives (for `select`); `drain` it before waiting again."""
    return _wakeup[0] if _wakeup and _installed else None


def drain() -> None:
    if _wakeup:
        try:
            while os.read(_wakeup[0], 512):
                pass
        except BlockingIOError:
            pass


def exit_if_pending(message: Callable[[int], str]) -> None:
    """On the main path where a `Stopped` would have no one to catch it (start-up): one line, exit 128 + signal."""
    if _pending:
        print(message(_pending[0]), file=sys.stderr)
        sys.exit(128 + _pending[0])


def finish() -> int | None:
    """The system's default for every installed signal from now on; the stop signal received before, if any.

    The last call before a process exits: after it a signal ends the process by that signal (never exit 0),
    before it every signal was recorded."""
    for signum in _installed:
        signal.signal(signum, signal.SIG_DFL)
    _installed.clear()
    signal.set_wakeup_fd(-1)
    return pending()


def exit_status(main: Callable[[], int]) -> NoReturn:
    """Run a command line's `main` and exit with its status, or 128 + the signal where a stop signal was
    received (a KeyboardInterrupt swallowed on the way included); a stop prints one line, no traceback."""
    status: int | str | None = None
    interrupted = False
    try:
        status = main()
    except SystemExit as exc:  # argparse's usage errors and --help
        status = exc.code
    except KeyboardInterrupt:
        interrupted = True
    signum = finish()
    if signum is None and interrupted:  # a KeyboardInterrupt raised without a signal
        signum = signal.SIGINT
    if signum is not None:
        print(f"interrupted ({name(signum)})", file=sys.stderr)
        sys.exit(128 + signum)
    sys.exit(status)


def reset() -> None:
    """Forget the signal received (tests)."""
    _pending.clear()
    _raised.clear()
