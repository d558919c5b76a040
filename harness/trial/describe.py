"""The worker child's answer to a `Describe` (harness.boundary.requests): what the run's side needs of the
experiment modules, the device, the profiler backends and the workloads, none of which it imports itself."""

from __future__ import annotations

import traceback
from typing import Any

from harness.boundary.outcomes import TrialStatus
from harness.boundary.replies import Described, ExperimentFacts, one_line
from harness.boundary.requests import Describe
from harness.cards.model import Card, Report, parse_report
from harness.errors import HarnessError


def describe(request: Describe) -> Described:
    """Every part `request` asks for; what cannot be described is answered with why, in one line, and a
    describing that fails is a FAILED reply with why (the child stays up)."""
    try:
        return _described(request)
    except Exception as exc:  # noqa: BLE001 - the child answers whatever describing raised, and stays up
        traceback.print_exception(exc)
        return Described(TrialStatus.FAILED, reason=one_line(exc))


def _described(request: Describe) -> Described:
    """Each part asked for, or why it cannot be described; what fails beyond a part's own check raises."""
    from harness.trial.environment import describe_environment, resolve_device

    device, device_error = None, None
    if request.device is not None:
        try:
            device = resolve_device(request.device)
        except ValueError as exc:
            device_error = str(exc)
    experiments: dict[str, ExperimentFacts] = {}
    errors: dict[str, str] = {}
    for label, (module, name) in request.experiments.items():
        try:
            experiments[label] = experiment_facts(module, name, device)
        except HarnessError as exc:
            errors[label] = str(exc)
        except Exception as exc:  # an experiment module that raises as it is imported (a user's, mid-edit)
            errors[label] = f"experiment module {module!r} cannot be imported: {one_line(exc)}"
    config = request.config
    environment = describe_environment(device, config) if device is not None and config is not None else {}
    profiler, notes, profiler_error = _profiler(request.profiler, device)
    derived = _derived(request.report) if request.report is not None else {}
    if device is not None and request.noise_probe_s:
        from harness.trial.noise_probe import probe

        derived["noise_probe"] = probe(request.noise_probe_s, device)
    if device is not None and request.peaks:
        derived["peaks"] = device_peaks(device)
    if request.plans:
        derived["plans"] = {card: _plan(wanted) for card, wanted in request.plans.items()}
    return Described(TrialStatus.COMPLETE, experiments=experiments, experiment_errors=errors, device=device,
                     device_error=device_error, environment=environment, profiler=profiler, profiler_notes=notes,
                     profiler_error=profiler_error, **derived)


def experiment_facts(module: str, expected_name: str | None, device: str | None) -> ExperimentFacts:
    """The module's experiment as the run's side knows it; its needs judged on `device` (none unmet without one)."""
    from harness.api.experiment import load_experiment
    from harness.cards.checks import check_named

    experiment = load_experiment(module, expected_name=expected_name)
    assert experiment.baseline_name is not None  # load_experiment refuses an experiment without a baseline
    return ExperimentFacts(
        name=experiment.name, module=module, op_kinds=tuple(experiment.op_kinds), classes=tuple(experiment.classes),
        hypothesis=experiment.hypothesis, check=experiment.check, check_module=check_named(experiment.check).module,
        baseline_name=experiment.baseline_name, variants=experiment.parameters(),
        unmet=experiment.unmet_needs(device) if device is not None else {}, metric_set=experiment.metric_set,
        workload_dtype=experiment.workload_dtype, domains=experiment.domains)


def _profiler(section: dict[str, Any] | None, device: str | None) -> tuple[str | None, list[str], str | None]:
    """(the backend `section` means on `device`, the notes of a fallback, why it cannot be made)."""
    if section is None or device is None:
        return None, [], None
    from harness.profile import registry
    from harness.profile.base import ProfilerUnavailable

    try:
        name, notes = registry.resolve(section, device)
        registry.make(name, section)  # a backend that cannot run here says so now, before any card
    except (registry.UnknownProfiler, ProfilerUnavailable) as exc:
        return None, [], str(exc)
    return name, notes, None


def _derived(obj: dict[str, Any]) -> dict[str, Any]:
    """What only the workloads derive from a normalized report: its chunk cards (harness.trial.chunks), each output
    cast card's frame count from its report pair, and the op kinds of its cards this install cannot build."""
    from harness.trial.chunks import add_chunk_cards
    from harness.workloads.registry import cast_frames_from_report

    report = parse_report(obj, "the run's report")
    known = {card.id for card in report.cards}
    with_chunks = add_chunk_cards(Report(cards=list(report.cards)))
    chunk_cards: list[Card] = [card for card in with_chunks.cards if card.id not in known]
    frames = {card.id: cast_frames_from_report(card, report) for card in report.cards if card.op_kind == "cast"}
    kinds = sorted({card.op_kind for card in with_chunks.cards})
    missing = {kind: why for kind in kinds if (why := _unavailable(kind)) is not None}
    return {"chunk_cards": [card.to_dict() for card in chunk_cards],
            "cast_frames": {card_id: n for card_id, n in frames.items() if n is not None}, "unavailable": missing}


def device_peaks(device: str) -> dict[str, Any]:
    """The device's peaks as a card records them: a CPU's measured (and cached: harness.profile.cpu_peaks), with
    whether it was busy and its reference kernels; a GPU's table entry with what the device itself says, and its
    reference kernels (measured once and cached: harness.profile.library_kernels)."""
    if device.startswith("cuda"):
        from harness.profile.gpu_peaks import for_current_device
        from harness.profile.library_kernels import gpu_reference_kernels

        return {**for_current_device().to_dict(), **gpu_reference_kernels(device)}
    from harness.profile.cpu_peaks import get_cpu_peaks

    peaks = get_cpu_peaks()
    return {**peaks.as_dict(), "busy": peaks.busy}


def _plan(wanted: dict[str, Any]) -> dict[str, Any]:
    """The shape a card's op runs at the run's scale (harness.workloads.registry.plan_workload), or why not."""
    from harness.workloads.registry import plan_workload

    try:
        plan = plan_workload(str(wanted["op_kind"]), wanted.get("shape_parameters"), dtype=wanted.get("dtype") or
                             "float32", scale=wanted.get("scale") or 1.0, resolution=wanted.get("resolution"))
    except (HarnessError, ValueError, TypeError, KeyError) as exc:
        return {"error": one_line(exc)}
    return {"shape": plan.shape, "scale": plan.scale}


def _unavailable(op_kind: str) -> str | None:
    """Why this install cannot build `op_kind`'s workload (an optional package it requires is missing: the chunk
    cards' diffusers models), in one line with what to install; else None."""
    from harness.api.optional import missing
    from harness.workloads.registry import required_packages

    why = next(filter(None, map(missing, required_packages(op_kind))), None)
    return f"the {op_kind} workload {why}" if why else None
