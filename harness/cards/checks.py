"""The experiments' checks: does the counter-experiment's own claim hold on a before/after pair?

Each check has a name an experiment can cite (`Experiment.check`), the statement it tests, the metrics
the diff shows for it, and a judge answering "yes" / "no" / "not measurable" with its numbers. Most are
the report cards' own checks (harness.cards.card_check) under the experiment's name; occupancy and
transposes_removed are the experiments' own. Without a named check the before card's class picks one
(CHECK_FOR_CLASS), so every diff row answers the question its bottleneck class raises.

An experiment with a claim of its own registers its check beside its variants (`@register_check`, as
TritonBench registers a metric beside a benchmark), in a module that imports nothing but harness.cards:
the measured cards record the check's name and that module (`check_module`), so a diff of two stored
runs (`python -m harness.report diff`) finds the judge by importing it, without torch or the experiment.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

from harness.cards.card_check import JUDGES, time_fell
from harness.cards.diff_rows import CardDiff
from harness.cards.fields import (
    COMPUTE_BOUND,
    DRAM_BANDWIDTH_BOUND,
    L2_BANDWIDTH_BOUND,
    LATENCY_OR_OCCUPANCY_LIMITED,
    PARTIAL_WAVE_TAIL,
    UNRESOLVED,
)
from harness.cards.layout_conversions import layout_conversions
from harness.cards.measures import NO, NOT_MEASURABLE, YES, dominant_metric
from harness.cards.model import Card
from harness.errors import HarnessError

Judge = Callable[[CardDiff, Card, Card], tuple[str, str]]


@dataclass(frozen=True)
class Check:
    name: str
    statement: str
    metrics: tuple[str, ...]  # the metrics the diff row shows before and after for it
    judge: Judge

    @property
    def module(self) -> str | None:
        """The module that registered it, None for the checks defined here: what a stored card records."""
        module = getattr(self.judge, "__module__", None)
        return None if module in (None, __name__) else module


class CheckError(HarnessError):
    """A check that is unknown or registered twice; the message says what to do."""


def _card_judge(name: str) -> Judge:
    """An experiment check that is one of the report cards' own checks: the same judge (harness.cards.card_check)."""
    judge = JUDGES[name]
    return lambda diff, before, after: judge(before, after, diff.timing_verdict)


def _check_occupancy(diff: CardDiff, before: Card, after: Card) -> tuple[str, str]:
    ob, oa = dominant_metric(before, "warps_active_pct"), dominant_metric(after, "warps_active_pct")
    fell = time_fell(diff.timing_verdict)
    if ob is None or oa is None or fell is None:
        return NOT_MEASURABLE, f"warps active {ob} -> {oa}; time verdict {diff.timing_verdict}"
    holds = oa > ob and fell
    return (YES if holds else NO), f"warps active {ob:.1f}% -> {oa:.1f}%, time {diff.timing_verdict}"


def _check_transposes_removed(diff: CardDiff, before: Card, after: Card) -> tuple[str, str]:
    # Every conversion counts, whatever cuDNN calls it: channels_last_3d on an H200 swapped the transposes
    # for two convertTensor kernels, which is no conversion removed.
    was, left = layout_conversions(before), layout_conversions(after)
    fell = time_fell(diff.timing_verdict)
    if fell is None:
        return NOT_MEASURABLE, f"time verdict {diff.timing_verdict}: not a confirmed change"
    if not was.kernels:
        return NOT_MEASURABLE, (
            f"the baseline shows no separate layout-conversion kernel on this backend, so none can be "
            f"removed; time {diff.timing_verdict}"
        )
    holds = not left.kernels and fell
    return (YES if holds else NO), (
        f"layout conversions before: {was.text()}; after: {left.text()}; time {diff.timing_verdict}"
    )


CHECKS: dict[str, Check] = {  # by name; register_check adds to it
    "bytes_and_time_fall": Check(
        "bytes_and_time_fall", "DRAM bytes and time fall together", ("dram_read_mb", "dram_write_mb", "dur_us"),
        _card_judge("bytes_and_time_fall")),
    "effective_flops": Check(
        "effective_flops", "time falls with executed FLOPs not above the nominal ones (no padding or masked work "
        "bought the speed)", ("sm_pct", "tensor_pct", "dur_us"), _card_judge("effective_vs_executed")),
    "lts_bytes": Check("lts_bytes", "lts bytes fall with time", ("l2_pct", "lts_mb", "dur_us"),
                       _card_judge("lts_bytes")),
    "waves_and_duration": Check(
        "waves_and_duration", "the tail wave's waste and the duration fall together",
        ("waves", "sm_cycles_active", "cycles_elapsed", "dur_us"), _card_judge("waves_and_duration")),
    "occupancy": Check("occupancy", "achieved occupancy rises and duration falls",
                       ("warps_active_pct", "waves", "dur_us"), _check_occupancy),
    "stall_breakdown": Check("stall_breakdown", "a dominant warp stall is named", ("warps_active_pct",),
                             _card_judge("stall_breakdown")),
    "transposes_removed": Check(
        "transposes_removed", "layout-conversion kernels are gone and time falls",
        ("dram_read_mb", "dram_write_mb", "dur_us"), _check_transposes_removed),
}

CHECK_FOR_CLASS: dict[str, str] = {
    DRAM_BANDWIDTH_BOUND: "bytes_and_time_fall",
    COMPUTE_BOUND: "effective_flops",
    L2_BANDWIDTH_BOUND: "lts_bytes",
    PARTIAL_WAVE_TAIL: "waves_and_duration",
    LATENCY_OR_OCCUPANCY_LIMITED: "occupancy",
    UNRESOLVED: "stall_breakdown",
}


def register_check(name: str, statement: str, metrics: tuple[str, ...] = ("dur_us",)) -> Callable[[Judge], Judge]:
    """Register `judge(diff, before, after) -> (yes | no | not measurable, numbers)` as check `name`.

    Put it in a module that imports nothing heavier than harness.cards (no torch): stored runs are
    judged by importing that module. The experiment then names it (`Experiment(check=name)`).
    """
    def register(judge: Judge) -> Judge:
        known = CHECKS.get(name)
        if known is not None and known.judge is not judge and known.module != getattr(judge, "__module__", None):
            raise CheckError(f"check {name!r} is registered twice ({known.module or __name__} and "
                             f"{judge.__module__}); give one of them another name")
        CHECKS[name] = Check(name, statement, tuple(metrics), judge)
        return judge

    return register


def check_named(name: str, module: str | None = None) -> Check:
    """The check `name`; `module` (recorded on measured cards) is imported first when it is not yet known."""
    if name not in CHECKS and module:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise CheckError(f"check {name!r} is registered by {module}, which cannot be imported here "
                             f"({exc}); put it on PYTHONPATH") from None
    if name not in CHECKS:
        raise CheckError(f"unknown check {name!r}; choose one of {', '.join(sorted(CHECKS))} or register "
                         "your own with harness.cards.checks.register_check")
    return CHECKS[name]
