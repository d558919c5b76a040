"""What a command comes to (Proc) and what a step comes to (Outcome, or StepFailed where it cannot go on)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .texts import error_line


@dataclass
class Outcome:
    status: str  # ok | failed | timeout | skipped
    result: str  # one line
    numbers: dict[str, Any] = field(default_factory=dict)


class StepFailed(Exception):
    """A step that cannot go on: its status and one line."""

    def __init__(self, result: str, status: str = "failed", numbers: dict[str, Any] | None = None):
        super().__init__(result)
        self.outcome = Outcome(status, result, numbers or {})


@dataclass
class Proc:
    returncode: int
    timed_out: bool
    seconds: float
    output: str


def ok_or_fail(proc: Proc, what: str) -> None:
    if proc.timed_out:
        raise StepFailed(f"{what}: killed at its time limit ({proc.seconds:.0f} s)", "timeout")
    if proc.returncode != 0:
        raise StepFailed(f"{what}: exit {proc.returncode}: {error_line(proc.output)}")
