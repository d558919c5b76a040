"""A card rebuilt from its spec (harness.boundary.spec.CardSpec): its workload, and its baseline prepared.

Every card request carries the card's spec; the worker (harness.trial.server) and the ncu child
(harness.trial.ncu_child) rebuild the same card from it here, so both measure the same workload. The spec's
`applied` lists the variants earlier rounds adopted on the card (harness.trial.rounds): they decide the
baseline and the inputs the variants start from.
"""

from __future__ import annotations

from dataclasses import asdict, replace

from harness.api.experiment import Experiment, Prepared, load_experiment
from harness.boundary.spec import CardSpec
from harness.cards.dtype import card_dtype, tf32_pins
from harness.cards.model import Card
from harness.trial.rounds import carry, round_baseline
from harness.trial.torch_state import pin_for_card
from harness.workloads.attention import AttentionConfig
from harness.workloads.base import Workload
from harness.workloads.cast import CastConfig
from harness.workloads.registry import build_for_card


def build_trial_workload(spec: CardSpec, card: Card, experiment: Experiment) -> tuple[Workload, Workload]:
    """(the card's workload as built, the same with the applied variants' carries): the baseline of a
    later round is prepared on the first, every variant on the second. "As built" includes the
    experiment's `workload` hook (Experiment.measured_workload), so worker and ncu child measure the same."""
    applied = spec.applied
    # The run decides the card's dtype (harness.cards.dtype); a spec without one (a test's) is decided here alike.
    decided = spec.dtype or card_dtype(card, applied=applied, override=None, declared=[],
                                       experiment_dtype=experiment.workload_dtype, device=spec.device)
    pin_for_card(tf32_pins(decided.math, card.op_kind))
    # The run put a cast card's frame count, which only the report's pair of cast cards tells, into spec.cast.
    workload = build_for_card(
        card, device=spec.device, dtype=decided.dtype, scale=spec.scale, seed=spec.seed,
        inputs_dir=spec.inputs_dir, attention=AttentionConfig(**asdict(spec.attention)),
        cast=CastConfig(**asdict(spec.cast)),
    )
    workload = experiment.measured_workload(replace(workload, adopted=spec.adopted, built_as=decided))
    return workload, carry(workload, applied)


def prepare_baseline(spec: CardSpec, workload: Workload, experiment: Experiment) -> tuple[Prepared, Workload]:
    """The experiment's baseline; on a card with applied variants, the last of them (round 2 reproduces round
    1); and the workload it was prepared on."""
    if spec.applied:
        return round_baseline(workload, spec.applied, load_experiment)
    return experiment.prepare(str(experiment.baseline_name), workload, {}), workload
