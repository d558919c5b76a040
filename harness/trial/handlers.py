"""The worker child's answer to each card request (harness.boundary.requests: Measure, Retime, Confirm) on the
card harness.trial.server keeps; `on_card` makes each a handler of its request alone, the card built (or found
kept) first and every failure turned into the request's reply. (A Describe is harness.trial.describe's.)"""

from __future__ import annotations

import sys
import time
import traceback
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from harness.boundary.outcomes import TrialStatus
from harness.boundary.replies import Confirmed, Judgement, Measured, Reply, Retimed, SideRounds, one_line, per_call
from harness.boundary.requests import CardRequest, Confirm, Measure, Retime
from harness.boundary.spec import TimingSettings
from harness.hardware.cpu_load import load_between, snapshot
from harness.trial import torch_state
from harness.trial.checks import named
from harness.trial.paired_rounds import PairedRounds, SideTiming, competition, run_rounds
from harness.trial.reference_cache import save_reference_file
from harness.trial.server import CardState, Server, annotate, free_memory, leaves_state, synchronize

if TYPE_CHECKING:
    from harness.api.experiment import Prepared
    from harness.profile.timing import TimingResult
    from harness.trial.measure import Measurement


def measure(server: Server, state: CardState, request: Measure) -> Measured:
    """Measure the baseline or a trial, annotate its card and write it to request.card_path."""
    from harness.cards.model import Report, save_report
    from harness.trial.correctness import Correctness, coarsest, judge_baseline
    from harness.trial.measure import measure_prepared
    from harness.workloads.params import dtype_name

    spec = state.spec
    t0 = time.perf_counter()
    reference = server.reference(state, request.baseline)
    reference_s = time.perf_counter() - t0
    state.evidence.clear()
    if request.baseline:
        prepared = state.baseline
        original = state.as_built.run()  # the card's op as the report ran it sets every round's standard
        synchronize(state.workload.device)
        adopted = coarsest(entry.precision for entry in spec.applied)
        state.standard, judged = judge_baseline(original, reference, spec.correctness,
                                                state.workload.reduction_length, adopted_precision=adopted)
        del original
        if not judged.feasible:  # no variant can be held to a malformed original op
            raise RuntimeError(f"its output is unusable ({judged.note})")
    else:
        left: list[str] = []
        with torch_state.isolated(left):
            prepared = server.prepare(state, request.variant, dict(request.params))
        if left:
            return Measured(TrialStatus.INFEASIBLE, reason=f"when prepared, it {leaves_state(left)}")

    def check(output: Any) -> Correctness:
        if request.baseline and not spec.applied:
            # The original op itself: it sets the standard, so it is feasible unless its output is malformed.
            return judge_baseline(output, reference, state.held_to().rule, state.workload.reduction_length)[1]
        # The round's baseline is judged on the workload it was prepared on (a batch it takes is that one's).
        return server.judge(state, prepared, output, state.baseline_on if request.baseline else None)
    left = []
    with torch_state.isolated(left):
        checks, profiler = server.checks(state, request, prepared), server.profiler(spec.profiler)
        m = measure_prepared(source_card=state.card, workload=state.workload, prepared=prepared, check=check,
                             profiler=profiler, settings=spec.timing, rules=spec.rules, label=request.label,
                             environment=spec.environment, spec=request, checks=checks)
    if left:  # no later measurement runs under what it left behind: it was restored; its card says so
        m.card.extra["state_changes"] = left
        m = refuse(m, f"when called, it {leaves_state(left)}")
        m.card.extra["checks"] = {**(m.card.extra.get("checks") or {}), "refused_by": "process_state"}
    card, path = m.card, Path(request.card_path)
    card.extra.update(request.extra)
    try:
        annotate(state.experiment, card, state.workload)
    except Exception as exc:  # the card was measured: keep it, then fail the request
        card.extra["annotate_error"] = one_line(exc)
        save_report(Report(cards=[card]), path)
        raise _Measured(str(path)) from exc
    save_report(Report(cards=[card]), path)
    if request.baseline:
        if not m.correctness.feasible:  # no variant can be held to a failing baseline
            raise _Measured(str(path)) from RuntimeError(f"its output is unusable ({m.correctness.note})")
        if m.timing is not None:
            state.baseline_per_call_us = per_call(m.timing.median_us, prepared.calls)
        held = state.held_to()
        standard: dict[str, Any] = {"baseline_error": held.baseline_error, "baseline_dtype": dtype_name(held.dtype),
                                    "adopted_precision": held.adopted_precision,
                                    "baseline_per_call_us": state.baseline_per_call_us}
        # The reference itself only where the references folder does not keep it: each run folder's copy was
        # as large as the op's output in float64 (190 MB for a DiT linear of the report at scale 1).
        if not server.reference_cache(spec).holds(state.as_built, state.as_built):
            standard["reference"] = reference.detach()
        save_reference_file(standard, Path(str(spec.reference_path)))
    seconds = {**m.seconds, "reference_s": reference_s}
    seconds["setup_s"] = seconds.get("setup_s", 0.0) + reference_s  # the reference is set-up too
    judgement = Judgement.from_dict(m.correctness.as_dict())
    median = m.timing.median_us if m.timing is not None else None
    return Measured(
        status=TrialStatus.COMPLETE if judgement.feasible else TrialStatus.INFEASIBLE,
        reason="" if judgement.feasible else judgement.why_infeasible(),
        card_path=str(path), median_us=median, calls=prepared.calls,
        per_call_us=per_call(median, prepared.calls) if median is not None else None,
        judgement=judgement, seconds=seconds)

def retime(server: Server, state: CardState, request: Retime) -> Retimed:
    """Time the kept baseline again (the drift check between trials)."""
    from harness.trial.measure import time_callable

    t0 = time.perf_counter()
    timing = time_callable(state.baseline.fn, state.workload.device, request.timing, state.workload.before_call)
    # Timing the baseline is measurement like a trial's: it is what the drift verdict stands on.
    return Retimed(TrialStatus.COMPLETE, per_call_us=per_call(timing.median_us, state.baseline.calls),
                   seconds={"timing_s": time.perf_counter() - t0})

def confirm(server: Server, state: CardState, request: Confirm) -> Confirmed:
    """Baseline and best in paired rounds, interleaved A B, B A, A B, ... (ABBA), each side's samples of a round
    summarised by their lower quartile and median, more rounds while the verdict is undecided
    (harness.trial.paired_rounds); both cards restated from the rounds, written where the plan says.

    The best variant is prepared again for the rounds, so it is checked again before any of them: a
    build that differs from the one the search checked (a nondeterministic autotuner) must not be
    confirmed unchecked. Both sides are warmed up until their timings are stable before the first
    round, so a cold first call (a resumed run, a fresh worker) cannot decide anything. Each round
    times A and B back to back, the order alternating, so a linear drift across the rounds hits both
    alike and cancels in the paired ratios the parent's verdict is computed from (harness.cards.disturbance).
    """
    import torch

    from harness.trial.measure import time_callable, warm_up_until_stable

    plan = request.plan
    server.reference(state, baseline=False)
    left: list[str] = []
    with torch_state.isolated(left):
        tried = server.prepare(state, plan.variant, dict(plan.params))
        output = tried.fn()
        synchronize(state.workload.device)
        judged = server.judge(state, tried, output)
        del output
    if left:
        return Confirmed(TrialStatus.INFEASIBLE, reason=f"prepared again for the confirm rounds, it "
                           f"{leaves_state(left)}")
    if not judged.feasible:
        return Confirmed(TrialStatus.INFEASIBLE, reason="prepared again for the confirm rounds, its output "
                           f"is wrong: {Judgement.from_dict(judged.as_dict()).why_infeasible()}")
    sides = {"base": state.baseline, "best": tried}
    last: dict[str, TimingResult] = {}
    t0 = time.perf_counter()
    warmups = {}
    for key, side in sides.items():
        with torch_state.isolated(left):
            warmups[key] = warm_up_until_stable(side.fn, state.workload.device, state.workload.before_call)
    settings = TimingSettings(warmup=1, min_repeats=3, budget_s=plan.budget_s,
                              cuda_graph=state.spec.timing.cuda_graph)
    cores = torch.get_num_threads() if state.workload.device == "cpu" else None  # what the rounds keep busy

    def time_side(key: str) -> SideTiming:
        before = snapshot()
        with torch_state.isolated(left):  # neither side's round runs under what the other left
            last[key] = time_callable(sides[key].fn, state.workload.device, settings, state.workload.before_call)
        return competition(last[key].samples_us, load_between(before, snapshot()), cores)

    paired = run_rounds(time_side, {key: side.calls for key, side in sides.items()}, plan.rounds,
                        plan.max_rounds, plan.band)
    seconds = time.perf_counter() - t0
    if left:
        return Confirmed(TrialStatus.INFEASIBLE, reason=f"in the confirm rounds, a side {leaves_state(left)}")
    paths = {"base": (plan.baseline_card, plan.baseline_out), "best": (plan.tried_card, plan.tried_out)}
    for key, (source, target) in paths.items():
        pooled = type(last[key]).from_samples(
            [s for samples in paired.samples[key] for s in samples], warmup=warmups[key]["calls"],
            method=f"{last[key].method}, {len(paired)} paired rounds in ABBA order with the other side",
            device_name=last[key].device_name, clock_mhz=last[key].clock_mhz)
        medians = [r.median_us * sides[key].calls for r in paired.rounds[key]]  # per invocation, as timed
        _restate(state, source, target, sides[key], pooled, medians, warmups[key],
                 CONFIRM_CHECKS if key == "best" else ("process_state",))
    return Confirmed(TrialStatus.COMPLETE, seconds={"timing_s": seconds},
                     baseline_rounds=_side(paired, "base"), tried_rounds=_side(paired, "best"))


def _side(paired: PairedRounds, key: str) -> SideRounds:
    disturbed, samples = paired.disturbed(key)
    return SideRounds(paired.rounds[key], paired.calls[key], disturbed_samples=disturbed, samples=samples)


# What the confirm rounds hold the best to: prepared again and judged before any round, each round's state kept.
CONFIRM_CHECKS = ("rebuilt_for_confirm", "anchored_bounds", "process_state")


def refuse(m: Measurement, reason: str) -> Measurement:
    """The measurement with its card infeasible for `reason` (a check beyond its output's error)."""
    correctness = replace(m.correctness, feasible=False, note=reason)
    m.card.extra["correctness"] = correctness.as_dict()
    return replace(m, correctness=correctness)


class _Measured(Exception):
    """A request failed after its card was written (the path): the answer still names the card."""


def _restate(state: CardState, source: str, target: str, prepared: Prepared, pooled: TimingResult,
             round_medians: list[float], warm: dict[str, Any], held: tuple[str, ...]) -> None:
    """A searched card with its timing replaced by the confirm rounds' and everything derived from a time
    (per-call rates, the experiment's evidence) derived again: one time per card, whatever shows it; the
    checks the rounds held added to those it passed."""
    from harness.cards.model import Report, load_report, save_report
    from harness.trial.measure import variant_facts

    card = load_report(source).cards[0]
    card.extra["search_timing"] = card.extra.get("timing")
    card.extra["timing"] = {**pooled.to_dict(), "round_medians_us": round_medians}
    card.extra["warm_up"] = warm
    card.extra["checks"] = {**(card.extra.get("checks") or {}), "confirm": [named(n).name for n in held]}
    card.extra["variant"] = {**(card.extra.get("variant") or {}), **variant_facts(prepared, state.workload, pooled)}
    try:
        annotate(state.experiment, card, state.workload)
    except Exception as exc:  # the rounds stand; only the experiment's evidence is stale
        card.extra["annotate_error"] = f"evidence not restated after the confirm rounds: {one_line(exc)}"
    save_report(Report(cards=[card]), Path(target))


C = TypeVar("C", bound=CardRequest[Any])


def on_card(server: Server, handler: Callable[[Server, CardState, C], Reply]) -> Callable[[C], Reply]:
    """`handler` as the answer to its request alone: the request's card built (or the one kept), the handler
    run on it in a pinned process state, and every failure turned into the request's reply (the child only
    dies when the process does)."""

    def answer(request: C) -> Reply:
        from harness.api.experiment import VariantSkipped
        from harness.workloads.params import WorkloadError

        stage, references_before = "setup", server.references_s()
        try:
            with torch_state.pinned():  # no request inherits what an earlier variant set
                state, build_s = server.card(request.spec)
                stage = "run"
                reply = handler(server, state, request)
            # Part of the set-up and checks phases, said apart: what a first run pays once per inputs.
            return replace(reply, seconds={**reply.seconds, "build_s": build_s,
                                           "references_s": server.references_s() - references_before})
        except VariantSkipped as exc:
            return request.reply(TrialStatus.SKIPPED, reason=str(exc))
        except BaseException as exc:  # noqa: BLE001 - a variant may raise anything, SystemExit included
            card_path = None
            if isinstance(exc, _Measured):
                card_path, exc = str(exc), exc.__cause__ or exc
            traceback.print_exception(exc)
            sys.stderr.flush()
            if is_out_of_memory(exc):
                status, reason = TrialStatus.OOM, "out of memory: " + one_line(exc, 280)
            else:
                # A workload that cannot be built is a configuration problem, not a trial's failure.
                setup = stage == "setup" and isinstance(exc, (WorkloadError, TypeError))
                status, reason = (TrialStatus.SETUP if setup else TrialStatus.FAILED), one_line(exc)
            # After a device-side CUDA error the context is unusable: answer, then let the parent restart us.
            restart = status is not TrialStatus.OOM and ("CUDA error" in reason
                                                         or type(exc).__name__ == "AcceleratorError"
                                                         or isinstance(exc, torch_state.StateNotRestored))
            del exc
            if stage == "setup":
                server.forget()
            else:
                free_memory()
            failed = request.reply(status, reason=reason, restart=restart)
            return replace(failed, card_path=card_path) if isinstance(failed, Measured) else failed

    return answer


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether `exc` is running out of memory: torch's OutOfMemoryError, MemoryError, or a CPU allocator's
    "can't allocate memory" (the child frees the CUDA cache and stays up)."""
    if isinstance(exc, MemoryError):
        return True
    import torch

    kinds = tuple(k for k in (getattr(torch, "OutOfMemoryError", None),
                              getattr(getattr(torch, "cuda", None), "OutOfMemoryError", None)) if k is not None)
    if kinds and isinstance(exc, kinds):
        return True
    return isinstance(exc, RuntimeError) and ("can't allocate memory" in str(exc) or "out of memory" in str(exc))
