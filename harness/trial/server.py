"""The worker child's kept card: one card's workload, prepared baseline and float64 reference, built once from
the card's spec and served to every request of that card, and how a variant is prepared, judged and checked on
it. The answer to each card request is harness.trial.handlers'."""

from __future__ import annotations

import gc
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.boundary.replies import Judgement
from harness.boundary.requests import Measure
from harness.boundary.spec import CardSpec
from harness.trial import torch_state
from harness.workloads.input_guard import InputGuard

if TYPE_CHECKING:
    import torch

    from harness.api.experiment import Experiment, Prepared
    from harness.cards.model import Card
    from harness.profile.base import Profiler
    from harness.trial.correctness import Correctness, Standard
    from harness.trial.measure import TrialChecks
    from harness.trial.precision import Observed
    from harness.trial.reference_cache import ReferenceCache
    from harness.workloads.base import CallBatch, Workload


def annotate(experiment: Experiment, card: Card, workload: Workload) -> None:
    """The experiment's own evidence on a measured card; an infeasible card (never timed) gets none."""
    if experiment.annotate_fn is not None and card.extra.get("timing") is not None:
        experiment.annotate_fn(card, workload)


@dataclass
class CardState:
    key: str
    # The card's spec as the latest request gave it: what builds the card is the same for every request it
    # serves (CardSpec.workload_key); what judges, times and profiles is read from here.
    spec: CardSpec
    card: Card
    experiment: Experiment
    workload: Workload  # what the variants are prepared on: as built, with the applied variants' carries
    as_built: Workload  # the card's workload before any carry: its run() is the original op
    baseline: Prepared  # the experiment's prepared baseline (on a round-2 card, the last variant adopted)
    baseline_on: Workload  # the workload the baseline was prepared on (a round-2 baseline's batch is its)
    guard: InputGuard  # over the inputs every variant is prepared on
    reference: torch.Tensor | None = None  # the workload's float64 reference, once computed or loaded
    # The float64 references of the card's workloads, draws and batches a variant was judged on, by
    # (id of the workload, calls).
    references: dict[tuple[int, int], torch.Tensor] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # what could not be checked on this card, and why
    baseline_per_call_us: float | None = None  # its measured time: what the device can do, whatever the peaks say
    # Emulated references by (draw, calls, precision, output dtype); evidence by prepared variant.
    emulated: dict[tuple[int, int, str, str], torch.Tensor | None] = field(default_factory=dict)
    evidence: dict[int, Observed] = field(default_factory=dict)
    standard: Standard | None = None  # the rule and the baseline's error e_b, once known

    def held_to(self) -> Standard:
        """The standard every output on the card is held to: set when its baseline is measured, or read back."""
        if self.standard is None:
            raise RuntimeError("no correctness standard: the card's baseline was not measured")
        return self.standard


def _json_key(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, default=str)


class Server:
    """Keeps one card's workload, prepared baseline and reference between the requests of that card."""

    def __init__(self) -> None:
        self.state: CardState | None = None
        self._caches: dict[str | None, ReferenceCache] = {}  # by folder
        self._profilers: dict[str, Profiler | None] = {}

    def card(self, spec: CardSpec) -> tuple[CardState, float]:
        """The spec's card, built (workload, prepared baseline) unless it is the one kept; the seconds building took."""
        from harness.api.experiment import load_experiment
        from harness.trial.build import build_trial_workload, prepare_baseline

        key = spec.workload_key()
        if self.state is not None and self.state.key == key:
            self.state.spec = spec
            return self.state, 0.0
        self.forget()
        t0 = time.perf_counter()
        card = spec.load_card()
        experiment = load_experiment(spec.experiment_module)
        workload, carried = build_trial_workload(spec, card, experiment)
        left: list[str] = []
        with torch_state.isolated(left):
            baseline, baseline_on = prepare_baseline(spec, workload, experiment)
        if left:
            raise RuntimeError(f"the baseline {leaves_state(left)}")
        # After the baseline's prepare: a layout or dtype it converts when it is prepared is not a mutation.
        built = {f"{k} (as built)": v for k, v in workload.inputs.items()
                 if not any(v is c for c in carried.inputs.values())}
        self.state = CardState(key, spec, card, experiment, workload=carried, as_built=workload, baseline=baseline,
                               baseline_on=baseline_on, guard=InputGuard({**built, **carried.inputs}))
        return self.state, time.perf_counter() - t0

    def forget(self) -> None:
        """Drop the kept card (its tensors), e.g. before building another."""
        self.state = None
        free_memory()

    def reference(self, state: CardState, baseline: bool) -> torch.Tensor:
        """The card's float64 reference: computed (or read from the references folder) when the `baseline` is
        measured; for a trial in a new child, read back with the baseline's standard.

        A trial needs the baseline's error too, so a new child loads it from reference_path (written when the
        baseline was measured), and the reference from there or, where that file does not hold it, from the
        references folder (computed again only if the folder lost it).
        """
        from harness.trial.correctness import anchored_standard
        from harness.trial.reference_cache import load_reference_file
        from harness.workloads.params import parse_dtype

        if baseline:
            if state.reference is None:  # the carried workload's reference is the one as built (rounds.carry)
                state.reference = self.reference_cache(state.spec).reference(state.as_built, state.as_built)
        elif state.standard is None:
            path = state.spec.reference_path
            saved = load_reference_file(Path(path), state.workload.device) if path else None
            if saved is None:
                why = "unreadable or damaged" if path and os.path.exists(path) else "the baseline was not measured"
                raise RuntimeError(f"no correctness reference at {path}: {why}")
            state.reference = (saved["reference"] if "reference" in saved
                               else self.reference_cache(state.spec).reference(state.as_built, state.as_built))
            state.standard = anchored_standard(state.spec.correctness, float(saved["baseline_error"]),
                                               parse_dtype(saved["baseline_dtype"]), state.workload.reduction_length,
                                               saved.get("adopted_precision"))
            state.baseline_per_call_us = saved.get("baseline_per_call_us")
        reference = state.reference
        if reference is None:
            raise RuntimeError("no correctness reference: the card's baseline was not measured")
        for workload in (state.workload, state.as_built, state.baseline_on):  # a carry keeps the model's reference
            state.references[(id(workload), 1)] = reference
        return reference

    def reference_cache(self, spec: CardSpec) -> ReferenceCache:
        """The references kept on disk for the spec's run (harness.trial.reference_cache), one per folder."""
        from harness.trial.reference_cache import ReferenceCache

        folder = spec.reference_cache
        if folder not in self._caches:
            self._caches[folder] = ReferenceCache(folder)
        return self._caches[folder]

    def references_s(self) -> float:
        """The seconds this child has spent computing float64 references (read back ones cost none)."""
        return sum(cache.computing_s for cache in self._caches.values())

    def profiler(self, cfg: dict[str, Any]) -> Profiler | None:
        """The run's profiler, resolved by the run (harness.profile.registry); None: time only."""
        from harness.profile import registry

        key = _json_key(cfg)
        if key not in self._profilers:
            name = cfg.get("name")
            self._profilers[key] = None if name in (None, "none") else registry.make(str(name), cfg)
        return self._profilers[key]

    def prepare(self, state: CardState, variant: str, params: dict[str, Any],
                workload: Workload | None = None) -> Prepared:
        """A variant prepared on the card's workload (or one of its draws); a batch it claims must be one
        the harness built, checked before anything of it runs."""
        from harness.workloads.draws import batch_for

        workload = state.workload if workload is None else workload
        prepared = state.experiment.prepare(variant, workload, params)
        if prepared.calls > 1:
            batch_for(workload, prepared.calls)
        return prepared

    def judge(self, state: CardState, prepared: Prepared, output: torch.Tensor,
              workload: Workload | None = None) -> Correctness:
        """A trial's output against the float64 reference of the calls it was prepared on (the card's
        workload or a draw of it; one call, or the harness-built batch), by the standard the baseline set."""
        from harness.trial.precision import observed_precisions
        from harness.workloads.draws import batch_for

        workload = state.workload if workload is None else workload
        source = batch_for(workload, prepared.calls) if prepared.calls > 1 else workload  # what its output covers
        key = (id(workload), prepared.calls)  # the state holds every workload it judges on: ids stay unique
        if key not in state.references:
            state.references[key] = self.reference_cache(state.spec).reference(source, state.as_built)
        standard = state.held_to()
        held = standard.precision_for(prepared.precision)
        if held is None:
            return standard.judge(output, state.references[key], precision=prepared.precision)
        if id(prepared) not in state.evidence:  # what its call computes in: evidence it cannot write itself
            state.evidence[id(prepared)] = observed_precisions(prepared.fn)
        return standard.judge(output, state.references[key], precision=prepared.precision,
                                    emulated=self.emulated(state, key, source, held, output.dtype),
                                    evidence=state.evidence[id(prepared)])

    def emulated(self, state: CardState, key: tuple[int, int], source: Workload | CallBatch, precision: str,
                 output_dtype: torch.dtype) -> torch.Tensor | None:
        """The reference of `source` (a workload or its batch, judged under `key`) emulating `precision`, once
        per card; None where the op has none (a chunk) or a carried round-2 workload's inputs are not what its
        reference reads."""
        from harness.errors import CorrectnessError
        from harness.trial.precision import emulated_reference

        emulated_key = (*key, precision, str(output_dtype))
        if emulated_key not in state.emulated:
            try:
                state.emulated[emulated_key] = emulated_reference(source, precision, output_dtype)
            except CorrectnessError as exc:
                state.notes.append(f"no {precision}-emulated reference: {exc}")
                state.emulated[emulated_key] = None
        return state.emulated[emulated_key]

    def second_draw(self, state: CardState, request: Measure) -> str | None:
        """Why the variant is wrong on a second draw of the card's activations (prepared anew on it, its
        output against that draw's own float64 reference), or None; mistakes the first draw's values hide
        (an input cached from the first call, a result that holds only for these numbers) show there."""
        from harness.workloads.params import WorkloadError

        try:
            drawn = state.workload.redraw(1)
        except WorkloadError as exc:  # a workload hook that replaced the op without its draws
            state.notes.append(f"no second draw: {exc}")
            return None
        prepared = self.prepare(state, request.variant, dict(request.params), drawn)
        output = prepared.fn()
        synchronize(drawn.device)
        judged = self.judge(state, prepared, output, drawn)
        if judged.feasible:
            return None
        return ("on a second draw of its activations its output is wrong: "
                f"{Judgement.from_dict(judged.as_dict()).why_infeasible()}")

    def checks(self, state: CardState, request: Measure, prepared: Prepared) -> TrialChecks:
        """The inputs guard, the second draw and the device's physical floor for this prepared variant
        (harness.trial.measure)."""
        from harness.trial.measure import TrialChecks
        from harness.trial.physics import device_peaks, floor_for

        slack, trial = state.spec.physics_slack, not request.baseline
        floor = None
        if slack:
            w = state.workload
            floor = floor_for(w.flops, w.min_bytes, prepared.calls, device_peaks(w.device),
                              state.baseline_per_call_us if trial else None)
        # Prepared already: in an isolated process state (harness.trial.handlers), a batch from the harness's calls.
        held = ("harness_batch", "process_state") if prepared.calls > 1 else ("process_state",)
        return TrialChecks(guard=state.guard, floor=floor, slack=slack, enforce_floor=trial,
                           second_draw=(lambda: self.second_draw(state, request)) if trial else None, held=held)


def leaves_state(left: list[str]) -> str:
    """The reason a variant that left process state changed is refused (the lines of torch_state's note)."""
    return (f"leaves process state changed: {'; '.join(left)} (restored; a variant may change a setting inside "
            "its own call if it restores it there)")


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def free_memory() -> None:
    gc.collect()
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
