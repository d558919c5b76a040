"""The process ncu profiles: rebuild one trial from its spec and run it inside the NVTX range.

Usage: python -m harness.profile.ncu_child TRIAL_SPEC.json
"""

from __future__ import annotations

import json
import sys

import torch

from harness.cards.lint import normalize
from harness.cards.model import load_report
from harness.experiment import load_experiment
from harness.profile.timing import warm_up
from harness.workloads.attention import AttentionConfig
from harness.workloads.cast import CastConfig
from harness.workloads.registry import build_workload


def run_trial(spec: dict) -> None:
    card = normalize(load_report(spec.get("report"))).card(spec["card_id"])
    experiment = load_experiment(spec["experiment_module"])
    workload = build_workload(
        card.op_kind, card.shape_parameters, device=spec["device"], dtype=experiment.workload_dtype,
        scale=spec["scale"], seed=spec["seed"], inputs_dir=spec.get("inputs_dir"), input_sha256=card.input_sha256,
        attention=AttentionConfig(**spec.get("attention", {})), cast=CastConfig(**spec.get("cast", {})),
        resolution=card.resolution,
    )
    fn = experiment.prepare(spec["variant"], workload, spec.get("params", {})).fn
    if spec.get("warmup") is None:  # under ncu, outside the NVTX range: nothing of it is profiled
        warm_up(fn, sync=torch.cuda.synchronize)
    else:
        for _ in range(int(spec["warmup"])):
            fn()
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push(spec["nvtx_range"])
    fn()
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m harness.profile.ncu_child TRIAL_SPEC.json", file=sys.stderr)
        return 2
    with open(argv[0], encoding="utf-8") as handle:
        run_trial(json.load(handle))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
