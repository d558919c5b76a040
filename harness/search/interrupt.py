"""Interruption: stopping a search process (SIGINT/SIGTERM) without leaving a study inconsistent.

`note_interrupt` (called from the SIGINT/SIGTERM handler) makes the trial that was running when the
process stopped go back in the queue as it fails, so a resumed run measures it again.
"""

from __future__ import annotations

import inspect
import os
from pathlib import Path
from typing import Any

_interrupt: dict[str, str | None] = {"signal": None}


def note_interrupt(signal_name: str | None) -> None:
    """Record that the process is being stopped (SIGINT/SIGTERM); None clears it (tests)."""
    _interrupt["signal"] = signal_name


def interrupted() -> str | None:
    return _interrupt["signal"]


def _objective_call() -> tuple[Any, int | None]:
    """The code of Optuna's _run_trial and the line where it calls the objective."""
    from optuna.study import _optimize

    code = _optimize._run_trial.__code__
    try:
        lines, start = inspect.getsourcelines(_optimize._run_trial)
    except OSError:
        return code, None
    line = next((start + i for i, text in enumerate(lines) if "func(trial)" in text), None)
    return code, line


_RUN_TRIAL, _OBJECTIVE_LINE = _objective_call()
# The last entry is this package's folder: every module of it (the storage and the shared queue's
# bookkeeping in storage.py and study.py above all), as when the package was the one file search.py.
_UNSAFE_PATHS = (f"{os.sep}optuna{os.sep}storages{os.sep}", f"{os.sep}optuna{os.sep}study{os.sep}_tell.py",
                 f"{os.sep}sqlalchemy{os.sep}", f"{Path(__file__).resolve().parent}{os.sep}")


def safe_to_interrupt(frame: Any) -> bool:
    """Whether raising KeyboardInterrupt in `frame` (a signal handler's) leaves every study consistent.

    Not while a storage call, Optuna's tell or this package runs (a trial would stay RUNNING, a queue
    half filled), and inside Optuna's trial loop only while the objective runs: there Optuna records
    the trial as failed and re-raises, and `SharedBudgetSampler.after_trial` puts it back in the queue.
    Outside the trial loop (baseline, confirm rounds, output files) any point is safe.
    """
    node = frame
    while node is not None:
        filename = node.f_code.co_filename
        if any(part in filename for part in _UNSAFE_PATHS):
            return False
        if node.f_code is _RUN_TRIAL:
            return _OBJECTIVE_LINE is not None and node.f_lineno == _OBJECTIVE_LINE
        node = node.f_back
    return True

