"""Stop signals are recorded where they land and acted on where the process chooses (harness.signals).

The issue's failure, in process: a SIGINT that lands while Python runs a weakref callback (importlib runs one
after every import) raised there, was printed as "Exception ignored" and lost, and the run exited 0.
"""

from __future__ import annotations

import os
import select
import signal
import time
import weakref

import pytest


def _signal_self(signals, signum: int) -> None:
    os.kill(os.getpid(), signum)
    until = time.monotonic() + 5
    while signals.pending() is None and time.monotonic() < until:
        time.sleep(0.001)


def test_a_signal_is_recorded_and_raised_only_by_check(stop_signals):
    signals = stop_signals
    _signal_self(signals, signal.SIGTERM)  # nothing raised here: the handler only records
    assert signals.pending() == signal.SIGTERM and signals.stopping() is None
    with pytest.raises(signals.Stopped) as stop:
        signals.check()
    assert isinstance(stop.value, KeyboardInterrupt) and stop.value.signum == signal.SIGTERM
    assert signals.stopping() == "SIGTERM"  # the trial in flight then is interrupted, not failed


def test_a_signal_landing_in_a_weakref_callback_is_not_lost(stop_signals, capfd):
    signals = stop_signals

    class Lock:
        pass

    def callback(_ref: weakref.ref) -> None:  # as importlib's module-lock callback
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(100_000):  # bytecode after the signal: Python runs the handler in here
            pass

    lock = Lock()
    ref = weakref.ref(lock, callback)
    del lock
    assert ref() is None
    assert "Exception ignored" not in capfd.readouterr().err
    assert signals.pending() == signal.SIGINT
    with pytest.raises(signals.Stopped):
        signals.check()


def test_a_command_lines_at_once_stop_swallowed_by_a_callback_prints_nothing(stop_signals, capfd, monkeypatch):
    """`python -m harness.report` raises at once (raise_at_once): where that KeyboardInterrupt lands in a weakref
    callback Python can only ignore it; it printed "Exception ignored ... Traceback" (the stop-signal sweep saw it
    on a report command), though the record still decided the exit status."""
    import sys

    signals = stop_signals
    printed: list[BaseException] = []  # what Python hands its unraisable hook prints as "Exception ignored"
    monkeypatch.setattr(sys, "unraisablehook", lambda unraisable: printed.append(unraisable.exc_value))
    signals.install(raise_at_once=True)

    def callback(_ref: weakref.ref) -> None:
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(100_000):
            pass

    class Lock:
        pass

    lock = Lock()
    ref = weakref.ref(lock, callback)
    del lock
    assert ref() is None
    assert printed == [] and "Traceback" not in capfd.readouterr().err
    assert signals.pending() == signal.SIGINT  # the record holds the stop: exit_status makes it 130


def test_a_signal_wakes_a_select_on_the_wakeup_descriptor(stop_signals):
    signals = stop_signals
    fd = signals.wakeup_fd()
    assert fd is not None
    read_end, write_end = os.pipe()  # a worker that never answers
    try:
        started = time.monotonic()
        os.kill(os.getpid(), signal.SIGINT)
        ready, _, _ = select.select([read_end, fd], [], [], 30.0)
        assert ready == [fd] and time.monotonic() - started < 10  # woken, not timed out
        signals.drain()
        assert select.select([fd], [], [], 0)[0] == []
    finally:
        os.close(read_end)
        os.close(write_end)
    assert signals.pending() == signal.SIGINT


def test_after_finish_a_signal_has_the_systems_default(stop_signals):
    signals = stop_signals
    signals.finish()
    assert signal.getsignal(signal.SIGINT) == signal.SIG_DFL and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    assert signals.wakeup_fd() is None


@pytest.mark.parametrize("outcome", ["swallowed", "raised", "returned"])
def test_a_command_line_stopped_by_ctrl_c_never_exits_0(stop_signals, capsys, outcome):
    """`exit_status` (python -m harness.report / harness.capture): the recorded signal decides, whatever main did
    with the KeyboardInterrupt the handler raised."""
    signals = stop_signals
    signals.install((signal.SIGINT,), raise_at_once=True)

    def main() -> int:
        if outcome == "returned":
            return 0
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)  # interrupted by the handler's KeyboardInterrupt
        except KeyboardInterrupt:
            if outcome == "raised":
                raise
        return 0  # a layer that swallowed it

    with pytest.raises(SystemExit) as done:
        signals.exit_status(main)
    if outcome == "returned":
        assert done.value.code == 0 and capsys.readouterr().err == ""
    else:
        assert done.value.code == 130 and capsys.readouterr().err == "interrupted (SIGINT)\n"


def test_the_app_ends_non_zero_when_a_signal_came_after_its_last_file(stop_signals, tmp_path, capsys):
    from harness import __main__ as app

    signals = stop_signals
    _signal_self(signals, signal.SIGTERM)
    with pytest.raises(SystemExit) as done:
        app._ended(tmp_path)
    assert done.value.code == 143
    assert capsys.readouterr().err == f"interrupted (SIGTERM) after the run finished: every output is in {tmp_path}\n"
