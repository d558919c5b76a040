"""The worker child's side: it keeps one card's workload, baseline and reference, and answers each
job (measure, retime, confirm: harness.jobs) with a TrialResult, every failure included."""

from __future__ import annotations

import gc
import json
import os
import sys
import time
import traceback
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness import torch_state
from harness.input_guard import InputGuard
from harness.jobs import (
    BASELINE,
    JobKind,
    Judgement,
    SideRounds,
    TimingSettings,
    TrialJob,
    TrialResult,
    TrialStatus,
    per_call,
)
from harness.worker.protocol import is_out_of_memory, one_line


def annotate(experiment: Any, card: Any, workload: Any) -> None:
    """The experiment's own evidence on a measured card; an infeasible card (never timed) gets none."""
    if experiment.annotate_fn is not None and card.extra.get("timing") is not None:
        experiment.annotate_fn(card, workload)


@dataclass
class _CardState:
    key: str
    job: TrialJob  # the job that built it
    card: Any
    experiment: Any
    workload: Any  # what the variants are prepared on: as built, with the applied variants' carries
    baseline: Any  # the experiment's Prepared baseline
    guard: Any = None  # harness.input_guard.InputGuard over the inputs every variant is prepared on
    reference: Any = None  # the workload's float64 reference, once computed or loaded
    # The float64 references of the card's workloads, draws and batches a variant was judged on, by
    # (id of the workload, calls).
    references: dict[tuple[int, int], Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # what could not be checked on this card, and why
    as_built: Any = None  # the card's workload before any carry: its run() is the original op
    baseline_on: Any = None  # the workload the baseline was prepared on (a round-2 baseline's batch is its)
    baseline_per_call_us: float | None = None  # its measured time: what the device can do, whatever the peaks say
    # Emulated references by (draw, calls, precision, output dtype); evidence by prepared variant.
    emulated: dict[tuple[Any, ...], Any] = field(default_factory=dict)
    evidence: dict[int, Any] = field(default_factory=dict)
    standard: Any = None  # harness.correctness.Standard: the rule and the baseline's error e_b, once known


def _json_key(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, default=str)


class Server:
    """Answers jobs; keeps one card's workload, prepared baseline and reference between them."""

    def __init__(self) -> None:
        self.state: _CardState | None = None
        self._rules: dict[str, Any] = {}
        self._profilers: dict[str, Any] = {}

    def card(self, job: TrialJob) -> tuple[_CardState, float]:
        """The job's card, built (workload, prepared baseline) unless it is the one kept."""
        from harness.experiment import load_experiment
        from harness.trial_spec import build_trial_workload, prepare_baseline

        key = job.workload_key()
        if self.state is not None and self.state.key == key:
            return self.state, 0.0
        self.forget()
        t0 = time.perf_counter()
        card = job.load_card()
        experiment = load_experiment(job.experiment_module)
        workload, carried = build_trial_workload(job, card, experiment)
        state = _CardState(key, job, card, experiment, carried, None, as_built=workload)
        self.state = state
        left: list[str] = []
        with torch_state.isolated(left):
            state.baseline, state.baseline_on = prepare_baseline(job, workload, experiment)
        if left:
            raise RuntimeError(f"the baseline {leaves_state(left)}")
        # After the baseline's prepare: a layout or dtype it converts when it is prepared is not a mutation.
        built = {f"{k} (as built)": v for k, v in workload.inputs.items()
                 if not any(v is c for c in carried.inputs.values())}
        state.guard = InputGuard({**built, **carried.inputs})
        return state, time.perf_counter() - t0

    def forget(self) -> None:
        """Drop the kept card (its tensors), e.g. before building another."""
        self.state = None
        _free_memory()

    def reference(self, state: _CardState, job: TrialJob) -> Any:
        """The card's float64 reference: computed for the baseline, else the one saved with its standard.

        A trial needs the baseline's error too, so a new child loads both from reference_path (written
        when the baseline was measured) rather than recomputing anything.
        """
        import torch

        from harness.correctness import Rule, anchored_standard
        from harness.workloads.base import parse_dtype

        if job.role == BASELINE and job.kind is JobKind.MEASURE:
            if state.reference is None:
                state.reference = state.workload.reference(torch.float64)
        elif state.standard is None:
            path = job.reference_path
            if not path or not os.path.exists(path):
                raise RuntimeError(f"no correctness reference at {path}: the baseline was not measured")
            saved = torch.load(path, map_location=state.workload.device, weights_only=True)
            state.reference = saved["reference"]
            state.standard = anchored_standard(Rule.from_config(job.correctness), float(saved["baseline_error"]),
                                               parse_dtype(saved["baseline_dtype"]), state.workload.reduction_length,
                                               saved.get("adopted_precision"))
            state.baseline_per_call_us = saved.get("baseline_per_call_us")
        for workload in (state.workload, state.as_built, state.baseline_on):  # a carry keeps the model's reference
            state.references[(id(workload), 1)] = state.reference
        return state.reference

    def rules(self, cfg: Any) -> Any:
        from harness.cards.rules import RuleSet

        key = _json_key(cfg)
        if key not in self._rules:
            self._rules[key] = RuleSet.from_config(cfg)
        return self._rules[key]

    def profiler(self, cfg: dict[str, Any]) -> Any:
        """The run's profiler, resolved by the run (harness.profile.registry); None: time only."""
        from harness.profile import registry

        key = _json_key(cfg)
        if key not in self._profilers:
            name = cfg.get("name")
            self._profilers[key] = None if name in (None, "none") else registry.make(str(name), cfg)
        return self._profilers[key]

    def prepare(self, state: _CardState, variant: str, params: dict[str, Any], workload: Any = None) -> Any:
        """A variant prepared on the card's workload (or one of its draws); a batch it claims must be one
        the harness built, checked before anything of it runs."""
        from harness.workloads.draws import batch_for

        workload = state.workload if workload is None else workload
        prepared = state.experiment.prepare(variant, workload, params)
        if prepared.calls > 1:
            batch_for(workload, prepared.calls)
        return prepared

    def judge(self, state: _CardState, prepared: Any, output: Any, workload: Any = None) -> Any:
        """A trial's output against the float64 reference of the calls it was prepared on (the card's
        workload or a draw of it; one call, or the harness-built batch), by the standard the baseline set."""
        import torch

        from harness.precision import observed_precisions
        from harness.workloads.draws import batch_for

        workload = state.workload if workload is None else workload
        key = (id(workload), prepared.calls)  # the state holds every workload it judges on: ids stay unique
        if key not in state.references:
            source = batch_for(workload, prepared.calls) if prepared.calls > 1 else workload
            state.references[key] = source.reference(torch.float64)
        held = state.standard.precision_for(prepared.precision)
        if held is None:
            return state.standard.judge(output, state.references[key], precision=prepared.precision)
        if id(prepared) not in state.evidence:  # what its call computes in: evidence it cannot write itself
            state.evidence[id(prepared)] = observed_precisions(prepared.fn)
        return state.standard.judge(output, state.references[key], precision=prepared.precision,
                                    emulated=self.emulated(state, workload, prepared.calls, held, output.dtype),
                                    evidence=state.evidence[id(prepared)])

    def emulated(self, state: _CardState, workload: Any, calls: int, precision: str, output_dtype: Any) -> Any:
        """The reference of `workload` (or its batch) emulating `precision`, once per card; None where the op
        has none (a chunk) or a carried round-2 workload's inputs are not what its reference reads."""
        from harness.correctness import CorrectnessError
        from harness.precision import emulated_reference
        from harness.workloads.draws import batch_for

        key = (id(workload), calls, precision, str(output_dtype))
        if key not in state.emulated:
            source = batch_for(workload, calls) if calls > 1 else workload
            try:
                state.emulated[key] = emulated_reference(source, precision, output_dtype)
            except CorrectnessError as exc:
                state.notes.append(f"no {precision}-emulated reference: {exc}")
                state.emulated[key] = None
        return state.emulated[key]

    def second_draw(self, state: _CardState, job: TrialJob) -> str | None:
        """Why the variant is wrong on a second draw of the card's activations (prepared anew on it, its
        output against that draw's own float64 reference), or None; mistakes the first draw's values hide
        (an input cached from the first call, a result that holds only for these numbers) show there."""
        from harness.workloads.base import WorkloadError

        try:
            drawn = state.workload.redraw(1)
        except WorkloadError as exc:  # a workload hook that replaced the op without its draws
            state.notes.append(f"no second draw: {exc}")
            return None
        prepared = self.prepare(state, str(job.variant), dict(job.params), drawn)
        output = prepared.fn()
        _synchronize(drawn.device)
        judged = self.judge(state, prepared, output, drawn)
        if judged.feasible:
            return None
        return ("on a second draw of its activations its output is wrong: "
                f"{Judgement.from_dict(judged.as_dict()).why_infeasible()}")

    def checks(self, state: _CardState, job: TrialJob, prepared: Any) -> Any:
        """The inputs guard, the second draw and the device's physical floor for this prepared variant
        (harness.measure)."""
        from harness.measure import TrialChecks
        from harness.physics import device_peaks, floor_for

        floor = None
        if job.physics_slack:
            w = state.workload
            floor = floor_for(w.flops, w.min_bytes, prepared.calls, device_peaks(w.device),
                              state.baseline_per_call_us if job.role != BASELINE else None)
        trial = job.role != BASELINE
        return TrialChecks(guard=state.guard, floor=floor, slack=job.physics_slack, enforce_floor=trial,
                           second_draw=(lambda: self.second_draw(state, job)) if trial else None)

    def measure(self, state: _CardState, job: TrialJob) -> TrialResult:
        """Measure the baseline or a trial, annotate its card and write it to job.card_path."""
        from harness.cards.model import Report, save_report
        from harness.correctness import Correctness, Rule, coarsest, judge_baseline
        from harness.measure import measure
        from harness.workloads.base import dtype_name

        t0 = time.perf_counter()
        reference = self.reference(state, job)
        reference_s = time.perf_counter() - t0
        state.evidence.clear()
        if job.role == BASELINE:
            prepared = state.baseline
            original = state.as_built.run()  # the card's op as the report ran it sets every round's standard
            _synchronize(state.workload.device)
            adopted = coarsest(entry.get("precision") for entry in job.applied)
            state.standard, judged = judge_baseline(original, reference, Rule.from_config(job.correctness),
                                                    state.workload.reduction_length, adopted_precision=adopted)
            del original
            if not judged.feasible:  # no variant can be held to a malformed original op
                raise RuntimeError(f"its output is unusable ({judged.note})")
        else:
            left: list[str] = []
            with torch_state.isolated(left):
                prepared = self.prepare(state, str(job.variant), dict(job.params))
            if left:
                return TrialResult(TrialStatus.INFEASIBLE, reason=f"when prepared, it {leaves_state(left)}")

        def check(output: Any) -> Correctness:
            if job.role == BASELINE and not job.applied:
                # The original op itself: it sets the standard, so it is feasible unless its output is malformed.
                return judge_baseline(output, reference, state.standard.rule, state.workload.reduction_length)[1]
            # The round's baseline is judged on the workload it was prepared on (a batch it takes is that one's).
            return self.judge(state, prepared, output, state.baseline_on if job.role == BASELINE else None)
        left = []
        with torch_state.isolated(left):
            m = measure(source_card=state.card, workload=state.workload, prepared=prepared, check=check,
                        profiler=self.profiler(job.profiler), settings=job.timing, rules=self.rules(job.rules),
                        label=job.label, environment=job.environment, spec=job,
                        checks=self.checks(state, job, prepared))
        if left:  # no later measurement runs under what it left behind: it was restored; its card says so
            m.card.extra["state_changes"] = left
            m = refuse(m, f"when called, it {leaves_state(left)}")
        card, path = m.card, Path(str(job.card_path))
        card.extra.update(job.extra)
        try:
            annotate(state.experiment, card, state.workload)
        except Exception as exc:  # the card was measured: keep it, then fail the request
            card.extra["annotate_error"] = one_line(exc)
            save_report(Report(cards=[card]), path)
            raise _Measured(str(path)) from exc
        save_report(Report(cards=[card]), path)
        if job.role == BASELINE:
            if not m.correctness.feasible:  # no variant can be held to a failing baseline
                raise _Measured(str(path)) from RuntimeError(f"its output is unusable ({m.correctness.note})")
            if m.timing is not None:
                state.baseline_per_call_us = per_call(m.timing.median_us, prepared.calls)
            _save({"reference": reference.detach(), "baseline_error": state.standard.baseline_error,
                   "baseline_dtype": dtype_name(state.standard.dtype),
                   "adopted_precision": state.standard.adopted_precision,
                   "baseline_per_call_us": state.baseline_per_call_us},
                  Path(str(job.reference_path)))
        seconds = {**m.seconds, "reference_s": reference_s}
        seconds["setup_s"] = seconds.get("setup_s", 0.0) + reference_s  # the reference is set-up too
        judgement = Judgement.from_dict(m.correctness.as_dict())
        median = m.timing.median_us if m.timing is not None else None
        return TrialResult(
            status=TrialStatus.COMPLETE if judgement.feasible else TrialStatus.INFEASIBLE,
            reason="" if judgement.feasible else judgement.why_infeasible(),
            card_path=str(path), median_us=median, calls=prepared.calls,
            per_call_us=per_call(median, prepared.calls) if median is not None else None,
            judgement=judgement, seconds=seconds)

    def retime(self, state: _CardState, job: TrialJob) -> TrialResult:
        """Time the kept baseline again (the drift check between trials)."""
        from harness.measure import time_callable

        t0 = time.perf_counter()
        timing = time_callable(state.baseline.fn, state.workload.device, job.retime or job.timing)
        # Timing the baseline is measurement like a trial's: it is what the drift verdict stands on.
        return TrialResult(TrialStatus.COMPLETE, median_us=timing.median_us, calls=state.baseline.calls,
                           per_call_us=per_call(timing.median_us, state.baseline.calls),
                           seconds={"timing_s": time.perf_counter() - t0})

    def confirm(self, state: _CardState, job: TrialJob) -> TrialResult:
        """Baseline and best in paired rounds, interleaved A B, B A, A B, ... (ABBA), one median per side a
        round; both cards restated from the rounds, written where the plan says.

        The best variant is prepared again for the rounds, so it is checked again before any of them: a
        build that differs from the one the search checked (a nondeterministic autotuner) must not be
        confirmed unchecked. Both sides are warmed up until their timings are stable before the first
        round, so a cold first call (a resumed run, a fresh worker) cannot decide anything. Each round
        times A and B back to back, the order alternating, so a linear drift across the rounds hits both
        alike and cancels in the paired ratios the parent's verdict is computed from.
        """
        from harness.measure import time_callable, warm_up_until_stable

        plan = job.confirm
        if plan is None:
            raise ValueError("a confirm job needs its plan")
        self.reference(state, job)
        left: list[str] = []
        with torch_state.isolated(left):
            tried = self.prepare(state, plan.variant, dict(plan.params))
            output = tried.fn()
            _synchronize(state.workload.device)
            judged = self.judge(state, tried, output)
            del output
        if left:
            return TrialResult(TrialStatus.INFEASIBLE, reason=f"prepared again for the confirm rounds, it "
                               f"{leaves_state(left)}")
        if not judged.feasible:
            return TrialResult(TrialStatus.INFEASIBLE, reason="prepared again for the confirm rounds, its output "
                               f"is wrong: {Judgement.from_dict(judged.as_dict()).why_infeasible()}")
        sides = {"base": state.baseline, "best": tried}
        samples: dict[str, list[float]] = {"base": [], "best": []}
        medians: dict[str, list[float]] = {"base": [], "best": []}
        last: dict[str, Any] = {}
        t0 = time.perf_counter()
        warmups = {}
        for key, side in sides.items():
            with torch_state.isolated(left):
                warmups[key] = warm_up_until_stable(side.fn, state.workload.device)
        settings = TimingSettings(warmup=1, min_repeats=3, budget_s=plan.budget_s, cuda_graph=job.timing.cuda_graph)
        for number in range(plan.rounds):
            order = ("base", "best") if number % 2 == 0 else ("best", "base")
            for key in order:
                with torch_state.isolated(left):  # neither side's round runs under what the other left
                    timing = time_callable(sides[key].fn, state.workload.device, settings)
                samples[key].extend(timing.samples_us)
                medians[key].append(timing.median_us)
                last[key] = timing
        seconds = time.perf_counter() - t0
        if left:
            return TrialResult(TrialStatus.INFEASIBLE, reason=f"in the confirm rounds, a side {leaves_state(left)}")
        paths = {"base": (plan.baseline_card, plan.baseline_out), "best": (plan.tried_card, plan.tried_out)}
        for key, (source, target) in paths.items():
            pooled = type(last[key]).from_samples(
                samples[key], warmup=warmups[key]["calls"],
                method=f"{last[key].method}, {plan.rounds} paired rounds in ABBA order with the other side",
                device_name=last[key].device_name, clock_mhz=last[key].clock_mhz)
            _restate(state, source, target, sides[key], pooled, medians[key], warmups[key])
        return TrialResult(
            TrialStatus.COMPLETE, seconds={"timing_s": seconds},
            baseline_rounds=SideRounds([per_call(m, sides["base"].calls) for m in medians["base"]],
                                       sides["base"].calls),
            tried_rounds=SideRounds([per_call(m, tried.calls) for m in medians["best"]], tried.calls))


def leaves_state(left: list[str]) -> str:
    """The reason a variant that left process state changed is refused (the lines of torch_state's note)."""
    return (f"leaves process state changed: {'; '.join(left)} (restored; a variant may change a setting inside "
            "its own call if it restores it there)")


def refuse(m: Any, reason: str) -> Any:
    """The measurement with its card infeasible for `reason` (a check beyond its output's error)."""
    correctness = replace(m.correctness, feasible=False, note=reason)
    m.card.extra["correctness"] = correctness.as_dict()
    return replace(m, correctness=correctness)


class _Measured(Exception):
    """A request failed after its card was written (the path): the answer still names the card."""


def _restate(state: _CardState, source: str, target: str, prepared: Any, pooled: Any, round_medians: list[float],
             warm: dict[str, Any]) -> None:
    """A searched card with its timing replaced by the confirm rounds' and everything derived from a time
    (per-call rates, the experiment's evidence) derived again: one time per card, whatever shows it."""
    from harness.cards.model import Report, load_report, save_report
    from harness.measure import variant_facts

    card = load_report(source).cards[0]
    card.extra["search_timing"] = card.extra.get("timing")
    card.extra["timing"] = {**pooled.to_dict(), "round_medians_us": round_medians}
    card.extra["warm_up"] = warm
    card.extra["variant"] = {**(card.extra.get("variant") or {}), **variant_facts(prepared, state.workload, pooled)}
    try:
        annotate(state.experiment, card, state.workload)
    except Exception as exc:  # the rounds stand; only the experiment's evidence is stale
        card.extra["annotate_error"] = f"evidence not restated after the confirm rounds: {one_line(exc)}"
    save_report(Report(cards=[card]), Path(target))


def _synchronize(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def _save(obj: Any, path: Path) -> None:
    """torch.save, atomically: a reader sees the old file or the whole new one."""
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def _free_memory() -> None:
    gc.collect()
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def answer(server: Server, job: TrialJob) -> TrialResult:
    """Run one job; every failure becomes a result (the child only dies when the process does)."""
    from harness.experiment import VariantSkipped
    from harness.workloads.base import WorkloadError

    handlers = {JobKind.MEASURE: server.measure, JobKind.RETIME: server.retime, JobKind.CONFIRM: server.confirm}
    stage = "setup"
    try:
        with torch_state.pinned():  # no request inherits what an earlier variant set
            state, build_s = server.card(job)
            stage = "run"
            result = handlers[job.kind](state, job)
        return replace(result, seconds={**result.seconds, "build_s": build_s})
    except VariantSkipped as exc:
        return TrialResult(TrialStatus.SKIPPED, reason=str(exc))
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
        restart = status is not TrialStatus.OOM and ("CUDA error" in reason or type(exc).__name__ == "AcceleratorError"
                                                     or isinstance(exc, torch_state.StateNotRestored))
        del exc
        if stage == "setup":
            server.forget()
        else:
            _free_memory()
        return TrialResult(status, reason=reason, card_path=card_path, restart=restart)
