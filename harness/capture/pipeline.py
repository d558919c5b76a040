"""A capture from start to end: load the model, time its forward, record one forward, keep the hot groups,
write their cards and inputs, re-profile them, and write the report.

The report (`report.json`) is in the shipped report's format, so every stage of the harness reads it:
`python -m harness experiment=auto report=DIR/report.json inputs.dir=DIR/inputs`. Its top-level `capture`
record says what share of the forward the cards cover and which recorded groups are not cards, and why.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from harness.capture.factory import CaptureError, LoadedModel, load_factory, place, resolution_of
from harness.capture.profiling import Profiled, merge_profile, profile_cards
from harness.capture.recorder import ROOT_STAGE, SETTLE_S, Group, Recorded, record_forward
from harness.capture.writer import Kept, card_of, save_inputs
from harness.cards.atomic import write_json_atomic
from harness.cards.model import CAPTURE_KEY, DEVICE_KEY, Report, save_report
from harness.cards.rules import RuleSet, class_counts, rules_text
from harness.profile.timing import WarmUp
from harness.profile.timing import warm_up as warm_up_until_stable
from harness.trial.environment import cpu_name

MIN_SHARE = 0.01  # without --top: the groups above 1% of the forward are kept


@dataclass
class CaptureOptions:
    spec: str  # MODULE:FACTORY
    out: Path
    device: str = "auto"
    dtype: str | None = None
    top: int | None = None  # None: every group above MIN_SHARE of the forward
    profiler: str = "auto"
    resolution: str | None = None  # HxW as the report writes it (480x832); None: from the first input
    stage: str | None = None  # one stage for every card
    stage_map: dict[str, str] = field(default_factory=dict)  # top-level child -> stage
    repeats: int = 3  # pairs of forwards timed at least (more until their time settles)
    threads: int | None = None  # torch's CPU threads for the capture and its re-profile; None: torch's default
    settle_s: float = SETTLE_S  # the most seconds of timed forwards while their time settles (a third: warm-up)
    profile: bool = True
    overrides: list[str] = field(default_factory=list)  # the re-profile run's own Hydra overrides


@dataclass
class CaptureResult:
    report: Report
    path: Path
    kept: list[Kept]


def resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise CaptureError(f"--device {device}: CUDA is not available here (torch.cuda.is_available() is False)")
    if not (device == "cpu" or device.startswith("cuda")):
        raise CaptureError(f"--device {device}: choose auto, cpu or cuda")
    return device


def warm_up(loaded: LoadedModel, cuda: bool, max_s: float) -> WarmUp:
    """Untimed forwards until their time settles (harness.profile.timing.warm_up, at most `max_s`, at least one):
    the first calls' allocations, lazy initialisation and cold caches are nobody's op time."""
    def forward() -> None:
        with torch.no_grad():
            loaded.model(*loaded.inputs)

    try:
        return warm_up_until_stable(forward, sync=torch.cuda.synchronize if cuda else None, max_s=max_s)
    except Exception as exc:  # the user's model: one line
        raise CaptureError(f"{loaded.spec}: the model's forward raised {type(exc).__name__}: {exc}") from None


def thread_overrides(options: CaptureOptions, cuda: bool) -> list[str]:
    """What times a run's replays as the capture timed the forward: its thread count on a CPU (timing.cpu_threads)."""
    return [f"timing.cpu_threads={options.threads}"] if options.threads and not cuda else []


def choose(groups: list[Group], top: int | None, forward_s: float) -> tuple[list[Group], list[Group]]:
    """(kept, the replayable rest), hottest first: the top N replayable groups, or those above MIN_SHARE of
    the forward."""
    replayable = sorted((g for g in groups if g.shape.replayable is None), key=lambda g: -g.time_s)
    if top is not None:
        return replayable[:top], replayable[top:]
    kept = [g for g in replayable if g.time_s >= MIN_SHARE * forward_s]
    return kept, replayable[len(kept):]


def stage_function(options: CaptureOptions) -> Any:
    def stage_of(child: str) -> str:
        return options.stage or options.stage_map.get(child, child or ROOT_STAGE)

    return stage_of


def scope_text(options: CaptureOptions, device: str, backend: str) -> str:
    return (f"Captured from {options.spec} on {device} (torch {torch.__version__}"
            f"{', ' + options.dtype if options.dtype else ''}): one forward under a TorchFunctionMode recorder, calls "
            f"grouped by op, shapes, dtypes, layouts and scalar arguments; each kept group replayed in isolation on "
            f"its captured inputs and profiled by {backend} (harness experiment=reprofile at scale 1); classifications "
            "are per dominant kernel; not integrated-pipeline attribution.")


def capture(options: CaptureOptions) -> CaptureResult:
    device = resolve_device(options.device)
    cuda = device.startswith("cuda")
    if options.threads and not cuda:  # as timing.cpu_threads sets the measuring worker's (harness.run.worker)
        torch.set_num_threads(options.threads)
    loaded = place(load_factory(options.spec), device, options.dtype)
    warmed = warm_up(loaded, cuda, options.settle_s / 3)
    try:
        recorded = record_forward(loaded.model, loaded.inputs, cuda, stage_function(options), options.repeats,
                                  max_s=options.settle_s)
    except Exception as exc:
        raise CaptureError(f"{options.spec}: the recorded forward raised {type(exc).__name__}: {exc}") from None
    groups, forward_s = recorded.groups, recorded.forward_s
    if not groups:
        raise CaptureError(f"{options.spec}: the model's forward called no torch operator: nothing to capture")
    resolution = options.resolution or resolution_of(loaded.inputs)
    chosen, rest = choose(groups, options.top, forward_s)
    if not chosen:
        raise CaptureError(f"{options.spec}: no replayable group reaches {MIN_SHARE:.0%} of the forward; "
                           "give --top N to keep the N hottest")
    inputs_dir = options.out / "inputs"
    kept = []
    for group in chosen:
        digest = save_inputs(group, inputs_dir)
        kept.append(Kept(group, card_of(group, resolution, digest, forward_s), group.time_s / forward_s))
    report = Report(cards=[k.card for k in kept], generated_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                    scope=scope_text(options, device, "nothing yet"), source=str(options.out / "captured.json"))
    save_report(report, options.out / "captured.json")
    profiled = None
    backend = options.profiler
    if options.profile:
        profiled = profile_cards(options.out / "captured.json", inputs_dir, [k.card.id for k in kept], options.out,
                                 device, options.profiler, [*thread_overrides(options, cuda), *options.overrides])
        backend = _backend_of(profiled, options.profiler)
        for item in kept:
            if item.card.id in profiled.cards:
                merge_profile(item.card, profiled.cards[item.card.id])
        report.cards = [k.card for k in kept if k.card.id in profiled.cards]
    report.scope = scope_text(options, device, backend)
    report.rules = rules_text(RuleSet.from_config(None))
    report.summary, report.by_stage = class_counts(report.cards)
    report.extra[CAPTURE_KEY] = capture_record(options, device, recorded, kept, rest, profiled, resolution)
    report.extra[CAPTURE_KEY]["warm_up"] = {"forwards": warmed.calls, "stable": warmed.stable}
    if cuda:  # the GPU its cards were recorded (and re-profiled) on: what a run's baselines reproduce it on
        report.extra[DEVICE_KEY] = torch.cuda.get_device_name(torch.device(device))
    write_json_atomic(options.out / "groups.json", group_table(groups, kept, forward_s))
    path = options.out / "report.json"
    save_report(report, path)
    if profiled is not None and not report.cards:
        raise CaptureError(f"no card could be re-profiled: {why_each(profiled.failed)}; the runs are in {options.out}")
    return CaptureResult(report, path, kept)


def why_each(failed: dict[str, str]) -> str:
    """Each card's reason, the cards of one reason together: `a, b: <why>; c: <why>`."""
    by_reason: dict[str, list[str]] = {}
    for card_id, why in failed.items():
        by_reason.setdefault(why, []).append(card_id)
    return "; ".join(f"{', '.join(ids)}: {why}" for why, ids in by_reason.items()) or "no reason recorded"


def group_table(groups: list[Group], kept: list[Kept], forward_s: float) -> list[dict[str, Any]]:
    """Every recorded group, hottest first: what the model ran, and which groups became which cards."""
    card_of_group = {id(k.group): k.card.id for k in kept}
    return [{"op": g.shape.op, "op_kind": g.shape.op_kind, "stage": g.stage, "module": g.module, "calls": g.calls,
             "time_us": round(g.time_s * 1e6, 3), "share_of_forward": round(g.time_s / forward_s, 6),
             "card": card_of_group.get(id(g)), "not_replayable": g.shape.replayable,
             "shape_parameters": g.shape.shape_parameters}
            for g in sorted(groups, key=lambda g: -g.time_s)]


def _backend_of(profiled: Profiled, asked: str) -> str:
    sources = {str(card.extra.get("profiler")) for card in profiled.cards.values() if card.extra.get("profiler")}
    return ", ".join(sorted(sources)) or asked


def capture_record(options: CaptureOptions, device: str, recorded: Recorded, kept: list[Kept],
                   rest: list[Group], profiled: Profiled | None, resolution: str | None) -> dict[str, Any]:
    """The report's own account of the capture: the model, its device and threads, the forward and how settled
    its time was, each stage's time in the model, coverage, and what is not a card."""
    groups, forward_s = recorded.groups, recorded.forward_s
    recorded_s = sum(g.time_s for g in groups)
    stage_us: dict[str, float] = {}
    for group in groups:
        stage_us[group.stage] = stage_us.get(group.stage, 0.0) + group.time_s * 1e6
    cards_s = sum(k.group.time_s for k in kept if profiled is None or k.card.id in profiled.cards)
    unreplayable = [g for g in groups if g.shape.replayable is not None]
    return {
        "model": options.spec, "device": device, "dtype": options.dtype, "torch": torch.__version__,
        "device_name": torch.cuda.get_device_name(torch.device(device)) if device.startswith("cuda") else cpu_name(),
        "threads": torch.get_num_threads(), "threads_set": options.threads,
        "resolution": resolution, "forward_us": round(forward_s * 1e6, 3),
        "forwards": recorded.forwards, "forward_stable": recorded.stable, "forward_spread": round(recorded.spread, 4),
        "stage_us": {stage: round(us, 3) for stage, us in stage_us.items()},
        "recorded_calls": sum(g.calls for g in groups), "groups": len(groups),
        "cards": len(kept) if profiled is None else len(profiled.cards),
        # The calls' times (timed one by one in forwards like the plain ones) over the plain forward's time.
        "ops_us": round(recorded_s * 1e6, 3),
        "ops_share_of_forward": round(recorded_s / forward_s, 4),
        "cards_share_of_forward": round(cards_s / forward_s, 4),
        "not_kept": {"groups": len(rest), "share_of_forward": round(sum(g.time_s for g in rest) / forward_s, 4)},
        "not_replayable": [{"op": g.shape.op, "module": g.module, "calls": g.calls, "why": g.shape.replayable,
                            "share_of_forward": round(g.time_s / forward_s, 4)}
                           for g in sorted(unreplayable, key=lambda g: -g.time_s)[:20]],
        "unprofiled": dict(profiled.failed) if profiled is not None else {},
        "reprofile_runs": [str(p) for p in profiled.runs] if profiled is not None else [],
    }
