"""`--apply RUN/best.json`: what a run adopted on the captured cards, applied to the whole model, and the whole
forward timed before and after in paired rounds.

What can be applied model-wide is what an adopted variant carries (harness.trial.rounds: a memory format or a
dtype of its inputs): `model.to(memory_format=...)` and the inputs in that format, `model.to(dtype)` and
the floating inputs in that dtype. A kernel, tile, algorithm or batching choice changes one op's
implementation, not the model: it is listed as not applicable. The forward of the model as captured (A)
and as changed (B) are then timed in ABBA rounds with the loop and the verdict rule of every confirm
(harness.trial.paired_rounds, harness.cards.disturbance: FASTER / SLOWER / SAME / INCONCLUSIVE by the device's SAME
band, each round read by its lower quartile, rounds interference touched on one side dropped and run again),
beside the speedup the op cards predict (each adopted card's confirmed speedup weighted by its share of
the forward; the rest unchanged), so a win that the model loses (a layout undone by a cat or a norm) shows.
"""

from __future__ import annotations

import copy
import math
import statistics
from dataclasses import dataclass, field
from typing import Any

import torch

from harness.capture.factory import CaptureError, LoadedModel
from harness.cards.disturbance import MORE_ROUNDS_CAP, robust_verdict, round_record
from harness.cards.model import Report
from harness.config.schema import SameBandConfig
from harness.hardware.cpu_load import load_between, snapshot
from harness.profile.timing import time_cpu
from harness.trial.paired_rounds import PairedRounds, SideTiming, competition, run_rounds
from harness.trial.rounds import RoundError, applied_of
from harness.workloads.params import parse_dtype

_FORMATS = {"channels_last_3d": (torch.channels_last_3d, 5), "channels_last": (torch.channels_last, 4)}


@dataclass
class ModelChange:
    """What of a best.json the whole model takes."""

    memory_formats: set[str] = field(default_factory=set)
    dtypes: set[str] = field(default_factory=set)
    applied: list[str] = field(default_factory=list)  # "card: experiment variant" of what is applied
    not_applicable: list[str] = field(default_factory=list)  # the same, with why
    predicted_terms: list[tuple[float, float]] = field(default_factory=list)  # (share of forward, speedup)

    def predicted_speedup(self) -> float | None:
        """Amdahl over the adopted cards: 1 / (1 - sum(share) + sum(share / speedup))."""
        terms = [(share, speedup) for share, speedup in self.predicted_terms if share > 0 and speedup > 0]
        if not terms:
            return None
        return 1.0 / (1.0 - sum(s for s, _ in terms) + sum(s / x for s, x in terms))


def model_change(best: Report) -> ModelChange:
    change = ModelChange()
    for card in best.cards:
        try:
            applied = applied_of(card.extra)
        except RoundError as exc:
            raise CaptureError(f"--apply: card {card.id}: {exc}") from None
        share = float(((card.extra.get("capture") or {}).get("share_of_forward")) or 0.0)
        for entry in applied:
            label = f"{card.id}: {entry.experiment} {entry.variant}"
            kinds = {kind: value for change_of in entry.carries.values() for kind, value in change_of.items()}
            if not kinds:
                change.not_applicable.append(f"{label} (a kernel or implementation choice of one op, not a "
                                             "property of the model's tensors)")
                continue
            if "memory_format" in kinds:
                change.memory_formats.add(str(kinds["memory_format"]))
            if "dtype" in kinds:
                change.dtypes.add(str(kinds["dtype"]))
            change.applied.append(label)
            if entry.speedup:
                change.predicted_terms.append((share, float(entry.speedup)))
    if len(change.dtypes) > 1:
        raise CaptureError(f"--apply: the adopted variants carry different dtypes "
                           f"({', '.join(sorted(change.dtypes))}); apply one of them at a time")
    return change


def changed_model(loaded: LoadedModel, change: ModelChange) -> LoadedModel:
    """A copy of the model and inputs with the change done; the loaded model is left as it is."""
    model = copy.deepcopy(loaded.model)
    inputs = list(loaded.inputs)
    if change.dtypes:
        dtype = parse_dtype(next(iter(change.dtypes)))
        model = model.to(dtype=dtype)
        inputs = [t.to(dtype) if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in inputs]
    for name in sorted(change.memory_formats):
        if name not in _FORMATS:
            continue  # contiguous: the model's own layout
        fmt, dims = _FORMATS[name]
        for tensor in (*model.parameters(), *model.buffers()):  # what Module.to(memory_format=) does
            if tensor.dim() == dims:
                tensor.data = tensor.data.contiguous(memory_format=fmt)
        inputs = [t.contiguous(memory_format=fmt) if isinstance(t, torch.Tensor) and t.dim() == dims else t
                  for t in inputs]
    return LoadedModel(model, tuple(inputs), loaded.spec)


def _first_tensor(out: Any) -> torch.Tensor | None:
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, (list, tuple)):
        return next((t for t in (_first_tensor(o) for o in out) if t is not None), None)
    return None


def output_change(before: LoadedModel, after: LoadedModel) -> float | None:
    """max |B - A| / max |A| of the forward's first output (the change the applied variants make to it)."""
    with torch.no_grad():
        a, b = _first_tensor(before.model(*before.inputs)), _first_tensor(after.model(*after.inputs))
    if a is None or b is None or a.shape != b.shape:
        return None
    a64, b64 = a.double(), b.double()
    scale = float(a64.abs().max()) or 1.0
    return float((b64 - a64).abs().max()) / scale


def timed_rounds(before: LoadedModel, after: LoadedModel, rounds: int, budget_s: float, cuda: bool,
                 band: float) -> PairedRounds:
    """ABBA rounds of the two forwards, more while undecided, each with the competition measured (the confirm
    rounds' loop, harness.trial.paired_rounds): "base" the model as captured, "best" as changed."""
    def timed(side: LoadedModel) -> Any:
        def call() -> Any:
            with torch.no_grad():
                return side.model(*side.inputs)

        if cuda:
            from harness.profile.cuda_timing import time_cuda

            return lambda: time_cuda(call, warmup=1, min_repeats=3, budget_s=budget_s).samples_us
        return lambda: time_cpu(call, warmup=1, min_repeats=3, budget_s=budget_s).samples_us

    sides = {"base": timed(before), "best": timed(after)}
    cores = None if cuda else torch.get_num_threads()

    def time_side(key: str) -> SideTiming:
        started = snapshot()
        samples = sides[key]()
        return competition(samples, load_between(started, snapshot()), cores)

    return run_rounds(time_side, {"base": 1, "best": 1}, rounds, MORE_ROUNDS_CAP * rounds, band)


def _why_nothing(best: Report, change: ModelChange) -> str:
    """Why nothing of best.json changes the model: no card adopted a variant, or every adopted one is one op's."""
    if change.not_applicable:
        return (f"each of the {len(change.not_applicable)} adopted variant(s) is one op's kernel or implementation "
                "choice, not a property of the model's tensors (listed below)")
    return (f"none of the {len(best.cards)} card(s) of the best.json adopted a variant: each kept its baseline, "
            "no variant being confirmed FASTER")


def apply_best(loaded: LoadedModel, best: Report, rounds: int, budget_s: float, cuda: bool) -> dict[str, Any]:
    """The model-level result of applying best.json's adopted carries (see the module docstring)."""
    change = model_change(best)
    result: dict[str, Any] = {"applied": change.applied, "not_applicable": change.not_applicable,
                              "memory_formats": sorted(change.memory_formats), "dtypes": sorted(change.dtypes),
                              "predicted_speedup": change.predicted_speedup()}
    if not change.applied:
        result.update(verdict="NOTHING APPLIED", why_nothing=_why_nothing(best, change))
        return result
    after = changed_model(loaded, change)
    result["max_rel_output_change"] = output_change(loaded, after)
    if rounds < 2:
        raise CaptureError(f"--rounds {rounds}: a verdict needs at least 2 paired rounds")
    bands = SameBandConfig()
    band = bands.cuda if cuda else bands.cpu
    paired = timed_rounds(loaded, after, rounds, budget_s, cuda, band)
    verdict = robust_verdict(paired.rounds["base"], paired.rounds["best"], band)
    before, after_rounds = round_record(paired.rounds["base"]), round_record(paired.rounds["best"])
    result.update(verdict.as_dict(), band=band, before_rounds=before, after_rounds=after_rounds,
                  forward_before_us=statistics.median(before["low_us"]),
                  forward_after_us=statistics.median(after_rounds["low_us"]))
    if (result["predicted_speedup"] is not None and math.isfinite(result["predicted_speedup"])
            and verdict.paired is not None):
        result["predicted_vs_measured"] = result["predicted_speedup"] / verdict.paired.speedup
    return result
