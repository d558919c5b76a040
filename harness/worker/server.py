"""The worker child's side: it keeps one card's workload, baseline and reference, and answers each
request (measure, retime, confirm) with every failure turned into an answer."""

from __future__ import annotations

import gc
import json
import os
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.worker.protocol import is_out_of_memory, one_line


def annotate(experiment: Any, card: Any, workload: Any) -> None:
    """The experiment's own evidence on a measured card; an infeasible card (never timed) gets none."""
    if experiment.annotate_fn is not None and card.extra.get("timing") is not None:
        experiment.annotate_fn(card, workload)


@dataclass
class _CardState:
    key: str
    spec: Any  # harness.trial_spec.TrialSpec
    card: Any
    experiment: Any
    workload: Any
    baseline: Any  # the experiment's Prepared baseline
    reference: Any = None  # the workload's float64 reference, once computed or loaded
    standard: Any = None  # harness.correctness.Standard: the rule and the baseline's error e_b, once known


def _json_key(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, default=str)


class Server:
    """Answers requests; keeps one card's workload, prepared baseline and reference between them."""

    def __init__(self) -> None:
        self.state: _CardState | None = None
        self._rules: dict[str, Any] = {}
        self._profilers: dict[str, Any] = {}

    def card(self, request: dict[str, Any]) -> tuple[_CardState, float]:
        """The request's card, built (workload, prepared baseline) unless it is the one kept."""
        from harness.experiment import load_experiment
        from harness.trial_spec import TrialSpec, build_trial_workload, prepare_baseline

        spec = TrialSpec.from_json(request["spec"])
        key = _json_key({"spec": request["spec"], "reference": request.get("reference_path")})
        if self.state is not None and self.state.key == key:
            return self.state, 0.0
        self.forget()
        t0 = time.perf_counter()
        card = spec.load_card()
        experiment = load_experiment(spec.experiment_module)
        workload, carried = build_trial_workload(spec, card, experiment)
        state = _CardState(key, spec, card, experiment, carried, None)
        self.state = state
        state.baseline = prepare_baseline(spec, workload, experiment)
        return state, time.perf_counter() - t0

    def forget(self) -> None:
        """Drop the kept card (its tensors), e.g. before building another."""
        self.state = None
        _free_memory()

    def reference(self, state: _CardState, request: dict[str, Any]) -> Any:
        """The card's float64 reference: computed for the baseline, else the one saved with its standard.

        A trial needs the baseline's error too, so a new child loads both from reference_path (written
        when the baseline was measured) rather than recomputing anything.
        """
        import torch

        from harness.correctness import Rule, Standard
        from harness.workloads.base import parse_dtype

        if request["role"] == "baseline":
            if state.reference is None:
                state.reference = state.workload.reference(torch.float64)
        elif state.standard is None:
            path = request.get("reference_path")
            if not path or not os.path.exists(path):
                raise RuntimeError(f"no correctness reference at {path}: the baseline was not measured")
            saved = torch.load(path, map_location=state.workload.device, weights_only=True)
            state.reference = saved["reference"]
            state.standard = Standard(Rule.from_config(request["correctness"]), float(saved["baseline_error"]),
                                      parse_dtype(saved["baseline_dtype"]), state.workload.reduction_length)
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

    def measure(self, state: _CardState, request: dict[str, Any], result: dict[str, Any]) -> None:
        """Measure the baseline or a trial, annotate its card and write it to request["card_path"]."""
        from harness.cards.model import Report, save_report
        from harness.correctness import Correctness, Rule, judge_baseline
        from harness.measure import TimingSettings, measure
        from harness.workloads.base import dtype_name

        variant, params = request["variant"], dict(request.get("params") or {})
        t0 = time.perf_counter()
        reference = self.reference(state, request)
        reference_s = time.perf_counter() - t0
        judged: dict[str, Any] = {}
        if request["role"] == "baseline":
            prepared = state.baseline
            rule = Rule.from_config(request["correctness"])

            def check(output: Any) -> Correctness:
                judged["standard"], correctness = judge_baseline(output, reference, rule,
                                                                 state.workload.reduction_length)
                return correctness
        else:
            prepared = state.experiment.prepare(variant, state.workload, params)

            def check(output: Any) -> Correctness:
                return state.standard.judge(output, reference, precision=prepared.precision,
                                            expected=prepared.expected, calls=prepared.calls)
        m = measure(source_card=state.card, workload=state.workload, prepared=prepared, check=check,
                    profiler=self.profiler(request["profiler"]),
                    settings=TimingSettings(**request["settings"]), rules=self.rules(request["rules"]),
                    label=request["label"], environment=request["environment"],
                    spec=state.spec.for_trial(variant, params, request["role"]))
        card, path = m.card, Path(request["card_path"])
        card.extra.update(request.get("extra") or {})
        try:
            annotate(state.experiment, card, state.workload)
        except Exception as exc:  # the card was measured: keep it, then fail the request
            card.extra["annotate_error"] = one_line(exc)
            save_report(Report(cards=[card]), path)
            result["card_path"] = str(path)
            raise
        save_report(Report(cards=[card]), path)
        if request["role"] == "baseline":
            if not m.correctness.feasible:  # no variant can be held to a malformed baseline
                result["card_path"] = str(path)
                raise RuntimeError(f"its output is unusable ({m.correctness.note})")
            state.standard = judged["standard"]
            _save({"reference": reference.detach(), "baseline_error": state.standard.baseline_error,
                   "baseline_dtype": dtype_name(state.standard.dtype)},
                  Path(request["reference_path"]))
        seconds = {**m.seconds, "reference_s": reference_s}
        seconds["setup_s"] = seconds.get("setup_s", 0.0) + reference_s  # the reference is set-up too
        result.update(card_path=str(path), correctness=m.correctness.as_dict(),
                      median_us=m.timing.median_us if m.timing is not None else None, calls=prepared.calls,
                      seconds=seconds)

    def retime(self, state: _CardState, request: dict[str, Any], result: dict[str, Any]) -> None:
        """Time the kept baseline again (the drift check between trials)."""
        from harness.measure import TimingSettings, time_callable

        t0 = time.perf_counter()
        timing = time_callable(state.baseline.fn, state.workload.device,
                               TimingSettings(**request["retime_settings"]))
        # Timing the baseline is measurement like a trial's: it is what the drift verdict stands on.
        result.update(median_us=timing.median_us, seconds={"timing_s": time.perf_counter() - t0})

    def reannotate(self, state: _CardState, request: dict[str, Any], result: dict[str, Any]) -> None:
        """The experiment's evidence again on cards whose timing the confirm rounds replaced, so that what
        it derives from a time (a bound's ratio, an achieved bandwidth) agrees with the card's time."""
        from harness.cards.model import parse_report

        # One report per card: baseline and variant are the same card (one id), measured twice.
        cards = [parse_report({"cards": [card]}, "reannotate request").cards[0] for card in request["cards"]]
        for card in cards:
            annotate(state.experiment, card, state.workload)
        result["cards"] = [card.to_dict() for card in cards]

    def confirm(self, state: _CardState, request: dict[str, Any], result: dict[str, Any]) -> None:
        """Baseline and best in paired rounds, interleaved A B, B A, A B, ... (ABBA), one median per side a round.

        Both sides are warmed up until their timings are stable before the first round, so a cold
        first call (a resumed run, a fresh worker) cannot decide anything. Each round times A and
        B back to back, the order alternating, so a linear drift across the rounds hits both alike
        and cancels in the paired ratios the parent's verdict is computed from.
        """
        from harness.measure import TimingSettings, time_callable, warm_up_until_stable

        best = request["best"]
        best_fn = state.experiment.prepare(best["variant"], state.workload, dict(best.get("params") or {})).fn
        rounds, budget = int(request["rounds"]), float(request["budget_s"])
        cuda_graph = bool(request.get("cuda_graph"))
        sides = {"base": state.baseline.fn, "best": best_fn}
        samples: dict[str, list[float]] = {"base": [], "best": []}
        medians: dict[str, list[float]] = {"base": [], "best": []}
        last: dict[str, Any] = {}
        t0 = time.perf_counter()
        warmups = {key: warm_up_until_stable(fn, state.workload.device) for key, fn in sides.items()}
        for number in range(rounds):
            order = ("base", "best") if number % 2 == 0 else ("best", "base")
            for key in order:
                timing = time_callable(sides[key], state.workload.device,
                                       TimingSettings(warmup=1, min_repeats=3, budget_s=budget, cuda_graph=cuda_graph))
                samples[key].extend(timing.samples_us)
                medians[key].append(timing.median_us)
                last[key] = timing
        seconds = time.perf_counter() - t0
        for key in ("base", "best"):
            pooled = type(last[key]).from_samples(
                samples[key], warmup=warmups[key]["calls"],
                method=f"{last[key].method}, {rounds} paired rounds in ABBA order with the other side",
                device_name=last[key].device_name, clock_mhz=last[key].clock_mhz)
            result[key] = {**pooled.to_dict(), "round_medians_us": medians[key], "warm_up": warmups[key]}
        result["seconds"] = {"timing_s": seconds}


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


def answer_request(server: Server, request: dict[str, Any]) -> dict[str, Any]:
    """Run one request; every failure becomes an answer (the child only dies when the process does)."""
    from harness import torch_state
    from harness.experiment import VariantSkipped
    from harness.workloads.base import WorkloadError

    result: dict[str, Any] = {}
    stage = "setup"
    try:
        state, build_s = server.card(request)
        stage = "run"
        op = request.get("op")
        handlers = {"measure": server.measure, "retime": server.retime, "confirm": server.confirm,
                    "reannotate": server.reannotate}
        if op not in handlers:
            raise ValueError(f"unknown request {op!r}")
        with torch_state.pinned():  # no request inherits what an earlier variant set
            handlers[op](state, request, result)
        result.setdefault("seconds", {})["build_s"] = build_s
        return {"ok": True, "result": result}
    except VariantSkipped as exc:
        return {"ok": False, "kind": "skipped", "reason": str(exc), "result": result}
    except BaseException as exc:  # noqa: BLE001 - a variant may raise anything, SystemExit included
        traceback.print_exc()
        sys.stderr.flush()
        if is_out_of_memory(exc):
            kind, reason = "oom", "out of memory: " + one_line(exc, 280)
        else:
            # A workload that cannot be built is a configuration problem, not a trial's failure.
            setup = stage == "setup" and isinstance(exc, (WorkloadError, TypeError))
            kind, reason = ("setup" if setup else "error"), one_line(exc)
        # After a device-side CUDA error the context is unusable: answer, then let the parent restart us.
        restart = kind != "oom" and ("CUDA error" in reason or type(exc).__name__ == "AcceleratorError")
        del exc
        if kind == "setup" or stage == "setup":
            server.forget()
        else:
            _free_memory()
        return {"ok": False, "kind": kind, "reason": reason, "result": result, "restart": restart}
