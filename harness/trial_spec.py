"""A trial rebuilt from its spec: the card's workload and the callable to run, as the worker and the
ncu child (harness.profile.ncu_child) both need them, so the two processes build the same thing.

The spec is the JSON the run sends (harness.card_search.run_card): experiment module, device, scale, seed,
inputs, attention and cast settings, and `applied`, the variants earlier rounds adopted on the card
(harness.rounds), which decide the baseline and the inputs the variants start from.
"""

from __future__ import annotations

from typing import Any, Mapping

from harness.cards.model import Card
from harness.experiment import Experiment, Prepared, load_experiment
from harness.rounds import carry, round_baseline
from harness.workloads.attention import AttentionConfig
from harness.workloads.base import Workload
from harness.workloads.cast import CastConfig
from harness.workloads.registry import build_workload


def build_trial_workload(spec: Mapping[str, Any], card: Card, experiment: Experiment) -> tuple[Workload, Workload]:
    """(the card's workload as built, the same with the applied variants' carries): the baseline of a
    later round is prepared on the first, every variant on the second."""
    applied = list(spec.get("applied") or [])
    dtype = applied[0].get("workload_dtype") if applied else None  # the dtype round 1 built it in
    workload = build_workload(
        card.op_kind, card.shape_parameters, device=spec["device"], dtype=dtype or experiment.workload_dtype,
        scale=spec["scale"], seed=spec["seed"], inputs_dir=spec.get("inputs_dir"), input_sha256=card.input_sha256,
        attention=AttentionConfig(**dict(spec.get("attention") or {})),
        cast=CastConfig(**dict(spec.get("cast") or {})), resolution=card.resolution,
    )
    return workload, carry(workload, applied)


def prepare_baseline(spec: Mapping[str, Any], workload: Workload, experiment: Experiment) -> Prepared:
    """The experiment's baseline; on a card with applied variants, the last of them (round 2 reproduces round 1)."""
    applied = list(spec.get("applied") or [])
    if applied:
        return round_baseline(workload, applied, load_experiment)
    return experiment.prepare(str(experiment.baseline_name), workload, {})
