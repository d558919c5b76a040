"""Measure one callable of a card: correctness, timing, peak memory, profile, and its card.

The card produced is in the report format, classified by the same rules, and carries where every
number came from: `metrics_source` per kernel, and `timing`, `memory`, `correctness`, `workload`,
`environment` and the profiler's `peaks` on the card.
"""

from __future__ import annotations

import copy
import functools
import os
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import torch

from harness.api.experiment import Prepared
from harness.boundary.replies import per_call
from harness.boundary.requests import Measure
from harness.boundary.spec import TimingSettings
from harness.cards.measured import IDENTITY_EXTRAS, MeasuredRecord, TrialLabel
from harness.cards.model import Card
from harness.cards.rules import RuleSet, classify_card
from harness.profile.base import Profile, Profiler
from harness.profile.timing import TimingResult, time_cpu, warm_up
from harness.trial import torch_state
from harness.trial.checks import Output, Phase, named, output_checks
from harness.trial.correctness import Correctness
from harness.trial.physics import Floor
from harness.workloads.base import Workload
from harness.workloads.input_guard import InputGuard


def _rss_bytes() -> int:
    with open("/proc/self/statm", encoding="ascii") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_memory_bytes(fn: Callable[[], Any], device: str) -> tuple[int, str, Any]:
    """Peak memory one call adds (CUDA allocator peak on a GPU, sampled RSS growth on the CPU), how it was
    measured, and the call's output (it is the variant's second call: checked like the first)."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        result = fn()
        torch.cuda.synchronize()
        return int(torch.cuda.max_memory_allocated() - before), "torch.cuda.max_memory_allocated", result
    if not os.path.exists("/proc/self/statm"):
        return 0, "unavailable (no /proc/self/statm)", fn()
    base = _rss_bytes()
    peak = [base]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _rss_bytes())
            time.sleep(0.0005)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        result = fn()
        peak[0] = max(peak[0], _rss_bytes())
    finally:
        done.set()
        sampler.join()
    return max(peak[0] - base, 0), "RSS growth sampled every 0.5 ms", result


def variant_facts(prepared: Prepared, workload: Workload, timing: TimingResult | None) -> dict[str, Any]:
    """Per original call: time, nominal and executed FLOPs, achieved throughput; plus the variant's facts.

    A batched variant does `calls` original calls per invocation, so its time per call is what the
    before/after diff compares. Achieved TFLOP/s counts nominal FLOPs only: padding is not work.
    """
    calls = prepared.calls
    out: dict[str, Any] = {"calls": calls, "nominal_flops_per_call": workload.flops or None}
    if prepared.executed_flops is not None:
        out["executed_flops"] = prepared.executed_flops
        if workload.flops:
            out["executed_over_nominal"] = prepared.executed_flops / (workload.flops * calls)
    if timing is not None:
        per_call_us = per_call(timing.median_us, calls)
        out["per_call_us"] = per_call_us
        if workload.flops:
            out["achieved_tflops"] = workload.flops / per_call_us / 1e6
    out.update(prepared.facts)
    if prepared.carries:
        out["carries"] = prepared.carries
    if prepared.recipe:
        out["recipe"] = prepared.recipe
    return out


def warm_up_until_stable(fn: Callable[[], Any], device: str,
                         prepare: Callable[[], Any] | None = None) -> dict[str, Any]:
    """Call `fn` until its timing is stable (harness.profile.timing.warm_up); what that took, as a dict.
    `prepare` (Workload.before_call) runs before each call, outside its clock."""
    sync = torch.cuda.synchronize if device.startswith("cuda") else None
    return warm_up(fn, sync=sync, prepare=prepare).to_dict()


def time_callable(fn: Callable[[], Any], device: str, settings: TimingSettings,
                  prepare: Callable[[], Any] | None = None) -> TimingResult:
    """`fn` timed on `device`; `prepare` (Workload.before_call) before each call, outside its clock."""
    if device.startswith("cuda"):
        from harness.profile.cuda_timing import time_cuda

        return time_cuda(fn, warmup=settings.warmup, min_repeats=settings.min_repeats,
                         budget_s=settings.budget_s, cuda_graph=settings.cuda_graph, prepare=prepare)
    return time_cpu(fn, warmup=settings.warmup, min_repeats=settings.min_repeats, budget_s=settings.budget_s,
                    prepare=prepare)


@dataclass
class Measurement:
    card: Card
    timing: TimingResult | None  # None: the output was wrong, so it was not timed
    correctness: Correctness
    profile: Profile | None
    seconds: dict[str, float]  # wall time by phase: timing (measurement) and the rest


@dataclass
class TrialChecks:
    """What is checked of a variant besides its first output: a call's output is judged by `check`."""

    guard: InputGuard | None = None  # the card's inputs, compared with their pristine copies
    floor: Floor | None = None  # the device's physical floor for one invocation
    slack: float | None = None  # how far below the floor a time may be (timing.physics_slack)
    enforce_floor: bool = True  # False for the baseline: its ratio is evidence of the floor, not a verdict
    # Why the variant, prepared anew on a second draw of the activations, is wrong there (or None).
    second_draw: Callable[[], str | None] | None = None
    held: tuple[str, ...] = ()  # the checks it passed when it was prepared (harness.trial.checks)


class _RefusedMidTiming(Exception):
    """A check refused the variant at its first timed-phase call: the timing stops there."""


class _TimedCalls:
    """The callable timed. It keeps what its last call returned (under a CUDA graph: the graph's static output,
    which every replay overwrites), so the output of the last timed call is checked too; given an inspection,
    its first call (the first warm-up call: the variant's second) runs under the memory probe and its output
    is judged at once, so a CPU trial pays no extra call for either. The judging counts as checks, not as
    measurement (`checks_s`)."""

    def __init__(self, fn: Callable[[], Any], second_call: _Inspection | None = None):
        self.fn, self.value, self.second_call = fn, None, second_call
        self.memory: tuple[int, str] | None = None
        self.checks_s = 0.0

    def __call__(self) -> Any:
        inspection, self.second_call = self.second_call, None
        if inspection is None:
            self.value = self.fn()
            return self.value
        memory, method, output = peak_memory_bytes(self.fn, inspection.device)
        self.memory = memory, method
        t0 = time.perf_counter()
        inspection.judge_second_call(output)
        self.checks_s += time.perf_counter() - t0
        if inspection.problem is not None:
            raise _RefusedMidTiming
        self.value = output
        return output


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _aliased_or_changed(guard: InputGuard, output: Any) -> str | None:
    return guard.aliased(output) or guard.check_and_restore()


def _wrong_call(which: str, judged: Correctness, why: str) -> str:
    return f"its {which} call's output is wrong (max_rel {judged.max_rel:.3g} > bound {judged.bound:.3g}): {why}"


@dataclass
class _Inspection:
    """A variant's calls judged beyond the first output, by the checks of harness.trial.checks, and the time
    those checks took (`checks_s`)."""

    check: Callable[[Any], Correctness]
    checks: TrialChecks
    device: str
    declared: str | None = None  # the precision the variant declares (Prepared.precision)
    before_call: Callable[[], None] | None = None  # before each call, untimed (Workload.before_call)
    problem: str | None = None  # the first check that refused it
    refused_by: str | None = None  # that check's name
    passed: list[str] = field(default_factory=list)  # the checks it passed, in the order they ran
    checks_s: float = 0.0
    timing_s: float = 0.0  # the timed calls alone (measurement): the checks around them are not

    def __post_init__(self) -> None:
        for name in self.checks.held:
            self.held(name)

    def look(self, name: str, find: Callable[[], str | None]) -> None:
        """Run the check `name` unless an earlier one refused the variant; its time counts as the checks'."""
        named(name)
        if self.problem is None:
            t0 = time.perf_counter()
            self.problem = find()
            self.checks_s += time.perf_counter() - t0
            if self.problem is None:
                self.held(name)
            else:
                self.refused_by = name

    def judge_output(self, phase: Phase, value: Any, call: str) -> None:
        """Every check of an output alone listed for `phase` (harness.trial.checks), on this call's output."""
        for check in output_checks(phase):
            assert check.judge is not None
            self.look(check.name, functools.partial(check.judge, Output(value, call)))

    def held(self, name: str) -> None:
        """The check `name` passed (one judged elsewhere, such as the first output's)."""
        if named(name).name not in self.passed:
            self.passed.append(name)

    def record(self) -> dict[str, Any]:
        """What the card says of the checks: the ones passed, and the one that refused it."""
        return {"passed": list(self.passed), "refused_by": self.refused_by}

    def call_again(self, output: Any, which: str, why: str) -> str | None:
        judged = self.check(output)
        return None if judged.feasible else _wrong_call(which, judged, why)

    def prepare(self) -> None:
        if self.before_call is not None:
            self.before_call()

    def first_calls(self, fn: Callable[[], Any]) -> Correctness:
        """The first call judged, the inputs it may have changed, and the second draw."""
        guard = self.checks.guard
        self.prepare()
        output = fn()
        _sync(self.device)
        correctness = self.check(output)
        # A declared precision is judged with the output (its evidence, its emulated reference).
        judged_by = ("reference", "declared_precision") if self.declared is not None else ("reference",)
        if not correctness.feasible:
            self.refused_by = judged_by[-1]
            return correctness
        for name in judged_by:
            self.held(name)
        self.held("anchored_bounds")  # its bound came from the original op's error (harness.trial.correctness)
        self.judge_output(Phase.FIRST_CALL, output, "first")
        # Bound with partial, not a closure over the names deleted below (look runs each check at once).
        if guard is not None:
            self.look("pristine_inputs", functools.partial(_aliased_or_changed, guard, output))
        del output
        if self.checks.second_draw is not None:
            self.look("second_draw", self.checks.second_draw)
        return correctness

    def judge_second_call(self, output: Any) -> None:
        self.look("repeated_calls", functools.partial(
            self.call_again, output, "second", "state carried over from the first call "
            "(a buffer that accumulates, a cache that serves an older output)"))
        self.judge_output(Phase.SECOND_CALL, output, "second")

    def probe_memory(self, fn: Callable[[], Any], judge: bool) -> tuple[int, str]:
        """The memory probe as a call of its own (the variant's second; `judge`: its output checked)."""
        self.prepare()
        memory, method, output = peak_memory_bytes(fn, self.device)
        if judge:
            self.judge_second_call(output)
        return memory, method

    def timed(self, fn: Callable[[], Any], settings: TimingSettings
              ) -> tuple[TimingResult | None, dict[str, Any] | None, tuple[int, str]]:
        """The second call (memory probe and check), the timing, its last call's output judged, and the time
        against the device's physical floor. On the CPU with warm-up calls the second call is the first of
        them; on a GPU (a CUDA graph captures its warm-up) or without warm-up it is a call of its own."""
        folded = not self.device.startswith("cuda") and settings.warmup != 0
        probed = None
        if not folded:
            probed = self.probe_memory(fn, judge=True)
            if self.problem is not None:
                return None, None, probed
        timed = _TimedCalls(fn, self if folded else None)
        t0 = time.perf_counter()
        try:
            timing: TimingResult | None = time_callable(timed, self.device, settings, self.before_call)
        except _RefusedMidTiming:
            timing = None
        self.timing_s = time.perf_counter() - t0 - timed.checks_s  # its checks counted themselves (look)
        memory = timed.memory or probed
        assert memory is not None  # the folded probe is the timing's first call
        _sync(self.device)
        if timing is None:
            return None, None, memory
        if self.device.startswith("cuda"):
            self.held("timer_cross_check")  # time_cuda checks its events against a synchronised clock
        self.look("repeated_calls", lambda: self.call_again(
            timed.value, "last timed", "what it returns changes over repeated calls"))
        self.judge_output(Phase.TIMED_CALLS, timed.value, "last timed")
        timed.value = None
        floor, slack = self.checks.floor, self.checks.slack
        if floor is None or not slack:
            return timing, None, memory
        impossible, physics = floor.judge(timing.median_us, slack)
        if self.checks.enforce_floor:
            self.look("physical_floor", lambda: impossible)
        return timing, physics, memory


def measure_prepared(
    *,
    source_card: Card,
    workload: Workload,
    prepared: Prepared,
    check: Callable[[torch.Tensor], Correctness],
    profiler: Profiler | None,
    settings: TimingSettings,
    rules: RuleSet,
    label: TrialLabel | None,
    environment: dict[str, Any],
    spec: Measure | None = None,
    checks: TrialChecks | None = None,
) -> Measurement:
    """Run the prepared variant for correctness, time it, profile it, and build its classified card.

    `check` judges an output (harness.trial.correctness: against the workload's float64 reference). The first
    call is judged before anything is timed, so a wrong variant costs one call; then the second call (the
    memory probe's) and the last timed call are judged too, so state carried from call to call (a buffer
    that accumulates, an output served from a cache) is caught; `checks` adds the inputs guard, the second
    draw and the device's physical floor. Any of them failing makes the card infeasible with that reason
    in its correctness note. `spec` rebuilds the trial in another process, for profilers that need one (ncu).
    """
    inspection = _Inspection(check, checks or TrialChecks(), workload.device, declared=prepared.precision,
                             before_call=workload.before_call)
    guard = inspection.checks.guard
    fn = prepared.fn
    phases: dict[str, float] = {}
    t0 = time.perf_counter()
    correctness = inspection.first_calls(fn)
    timing, physics = None, None
    if correctness.feasible and inspection.problem is None:
        timing, physics, (memory, memory_method) = inspection.timed(fn, settings)
        phases["timing_s"] = inspection.timing_s
    else:  # refused before its second call: that call is the memory probe alone
        memory, memory_method = inspection.probe_memory(fn, judge=False)
    # The checks (the guard, the second call's, the second draw) count as checks_s only, the timing as timing_s.
    phases["setup_s"] = time.perf_counter() - t0 - inspection.checks_s - inspection.timing_s
    # Whatever ran since the last look (the memory probe's call, the timed calls), the inputs are put back
    # before anything else is measured on them.
    if guard is not None:
        mutated = guard.check_and_restore()  # always: even after an earlier check refused the variant
        if correctness.feasible:
            inspection.look("pristine_inputs", lambda: mutated)
    phases["checks_s"] = inspection.checks_s
    if inspection.problem is not None:
        correctness = replace(correctness, feasible=False, note=inspection.problem)
        timing = None  # refused: its time is no result (the floor's evidence keeps the one that decided)
    profile = None
    if correctness.feasible:
        t2 = time.perf_counter()
        if profiler is not None:
            profile = profiler.profile(fn, workload.facts(), spec)
        phases["profile_s"] = time.perf_counter() - t2
    card = _card(source_card, profile.kernels if profile else [], timing, correctness, profile, workload,
                 prepared, label, environment, memory, memory_method, rules, inspection.record())
    if physics is not None:
        card.extra["physics"] = physics
    return Measurement(card, timing, correctness, profile, phases)


def _card(
    source: Card,
    kernels: list,
    timing: TimingResult | None,
    correctness: Correctness,
    profile: Profile | None,
    workload: Workload,
    prepared: Prepared,
    label: TrialLabel | None,
    environment: dict[str, Any],
    memory: int,
    memory_method: str,
    rules: RuleSet,
    checks: dict[str, Any],
) -> Card:
    """The source card re-profiled: same identity, new kernels and measurements, same rules."""
    card = copy.deepcopy(source)
    card.extra = {k: v for k, v in card.extra.items() if k in IDENTITY_EXTRAS}
    card.extra["id"] = source.id
    card.kernels = copy.deepcopy(kernels)
    card.summed_kernel_us = sum(k.metric("dur_us") or 0.0 for k in card.kernels) if card.kernels else None
    card.nominal_mac_flops = workload.flops  # 0 for a cast: it does no arithmetic
    card.shape_parameters_encoded = False
    if not card.shape_parameters:
        # The report lost this op's shape (the casts); the re-profiled card records the shape it ran,
        # unscaled, so it is a complete input for the next round.
        card.shape_parameters = dict(workload.original_shape)
        card.group = f"{card.stage}:{card.op}:{card.shape_parameters}"
    MeasuredRecord(
        harness=label.as_dict() if label else {},
        timing=timing.to_dict() if timing else None,
        correctness=correctness.as_dict(),
        memory={"peak_bytes": memory, "method": memory_method},
        workload=workload.describe(),
        environment=environment,
        metrics_source=profile.metrics_source if profile else None,
        profiler=profile.backend if profile else None,
        peaks=profile.peaks if profile else None,
        profiler_settings=profile.settings if profile else None,
        profiler_notes=profile.notes if profile else [],
        variant=variant_facts(prepared, workload, timing),
        # The process-global settings it ran under (pinned per request, plus what the variant set).
        torch_state=torch_state.snapshot(),
        checks=checks,
    ).write(card)
    card.keys = ()
    for kernel in card.kernels:
        kernel.keys = ()
    return classify_card(card, rules)
