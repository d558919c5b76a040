"""What a win must survive: every check a variant is held to, in the order it meets them, each with the phases
it runs in and how its reason reads.

One list, one home: the worker runs the checks by these names (harness.trial.measure for a trial and the
baseline, harness.trial.handlers for the confirm rounds), a measured card records the ones its variant passed
(`extra["checks"]`), and the table "What a win must survive" (docs/verdicts.md) is held to this list by a test. A
new check is a new entry here and one `look` (or `passed`) under its name where its phase runs; a check of an
output alone is the entry alone: its `judge` runs on the output of each of its phases (OUTPUT_PHASES: the first
call's, the second's, the last timed call's; another phase is refused when the check is made). A name not listed
here is a programming error, raised at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Callable


class Phase(Enum):
    """When a check runs, in the order a trial meets them."""

    PREPARE = "prepare"  # the variant built on the card's workload
    FIRST_CALL = "first call"
    SECOND_DRAW = "second draw"  # prepared anew on other activations
    SECOND_CALL = "second call"  # the memory probe's (on the CPU, the first warm-up call of the timing)
    TIMED_CALLS = "timed calls"
    AFTER_CALLS = "after its calls"
    CONFIRM = "confirm rounds"


@dataclass(frozen=True)
class Output:
    """One call's output, as an output check sees it."""

    value: Any  # what the variant returned
    call: str  # which call: "first", "second", "last timed"


# The phases whose output the worker hands to a check of an output alone (harness.trial.measure).
OUTPUT_PHASES = (Phase.FIRST_CALL, Phase.SECOND_CALL, Phase.TIMED_CALLS)


@dataclass(frozen=True)
class Check:
    name: str
    phases: tuple[Phase, ...]
    mistake: str  # what it catches: the docs table's third column
    reason: str  # how a refusal by it reads (its beginning, or the note it leaves): the docs table's last column
    # A check of an output alone: why `Output` is refused, or None; run at each of its phases by the worker.
    judge: Callable[[Output], str | None] | None = None

    def __post_init__(self) -> None:
        unseen = [phase.value for phase in self.phases if phase not in OUTPUT_PHASES]
        if self.judge is not None and unseen:
            raise ValueError(f"check {self.name}: a judge of an output runs at "
                             f"{', '.join(p.value for p in OUTPUT_PHASES)}, not at {', '.join(unseen)}")


CHECKS: tuple[Check, ...] = (
    Check("harness_batch", (Phase.PREPARE,), "a claimed batch",
          "Prepared.calls=4 but the variant built no 4 calls with w.calls(4)"),
    Check("process_state", (Phase.PREPARE, Phase.FIRST_CALL, Phase.TIMED_CALLS, Phase.CONFIRM),
          "global state left behind (threads, autocast, matmul precision, SDPA backends, ...)",
          "leaves process state changed: torch.get_num_threads() 2 -> 1"),
    Check("reference", (Phase.FIRST_CALL,), "a wrong output",
          "max_rel 0.2 > bound 1.9e-06"),
    Check("declared_precision", (Phase.FIRST_CALL,), "a declared precision it does not compute in",
          "declares bfloat16 but neither its output dtype nor any op of its call computes in bfloat16"),
    Check("anchored_bounds", (Phase.FIRST_CALL, Phase.CONFIRM), "tolerance compounding over rounds", ""),
    Check("pristine_inputs", (Phase.FIRST_CALL, Phase.AFTER_CALLS), "an input changed in place",
          "mutates its input x in place / its output aliases its input x"),
    Check("second_draw", (Phase.SECOND_DRAW,),
          "a mistake the first draw's values hide (an input cached from the first call)",
          "on a second draw of its activations its output is wrong"),
    Check("repeated_calls", (Phase.SECOND_CALL, Phase.TIMED_CALLS),
          "state carried across calls (a buffer that accumulates)",
          "its second (last timed) call's output is wrong"),
    Check("timer_cross_check", (Phase.TIMED_CALLS,), "timer games on a GPU (work on a side stream)",
          "(a note on its timing)"),
    Check("physical_floor", (Phase.TIMED_CALLS,),
          "a stale output (made when prepared, a replayed buffer or cache)",
          "faster than the device can do this work: stale, memoized or skipped"),
    Check("rebuilt_for_confirm", (Phase.CONFIRM,),
          "a build that differs from the one checked (a nondeterministic autotuner)",
          "prepared again for the confirm rounds, its output is wrong"),
)

BY_NAME: dict[str, Check] = {check.name: check for check in CHECKS}


def named(name: str) -> Check:
    """The check of that name; KeyError (a programming error) for one this list does not hold."""
    return BY_NAME[name]


def output_checks(phase: Phase) -> tuple[Check, ...]:
    """The checks of an output alone that run at `phase`, in the list's order."""
    return tuple(check for check in CHECKS if check.judge is not None and phase in check.phases)
