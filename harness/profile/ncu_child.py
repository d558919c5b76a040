"""The process ncu profiles: rebuild one trial from its spec and run it inside the NVTX range.

Usage: python -m harness.profile.ncu_child TRIAL_SPEC.json
"""

from __future__ import annotations

import json
import signal
import sys

import torch

from harness.experiment import load_experiment
from harness.jobs import BASELINE
from harness.profile.timing import warm_up
from harness.trial_spec import (
    TrialSpec,
    build_trial_workload,
    prepare_baseline,
)


def run_trial(spec: TrialSpec, nvtx_range: str) -> None:
    """The trial's callable: warmed up outside the NVTX range, then one call inside it (what ncu profiles)."""
    card = spec.load_card()  # as the run has it: no report is re-read or re-linted here
    experiment = load_experiment(spec.experiment_module)
    workload, carried = build_trial_workload(spec, card, experiment)
    if spec.role == BASELINE:
        fn = prepare_baseline(spec, workload, experiment)[0].fn
    else:
        assert spec.variant is not None  # every role but the baseline's names its variant
        fn = experiment.prepare(spec.variant, carried, spec.params).fn
    if spec.warmup is None:  # under ncu, outside the NVTX range: nothing of it is profiled
        warm_up(fn, sync=torch.cuda.synchronize)
    else:
        for _ in range(spec.warmup):
            fn()
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push(nvtx_range)
    fn()
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()


def _die_with_ncu() -> None:
    """SIGKILL this process when its parent (ncu) dies: the group kill of the runner reaches it
    too, this covers a profiled program that ncu started outside the group."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m harness.profile.ncu_child TRIAL_SPEC.json", file=sys.stderr)
        return 2
    _die_with_ncu()
    with open(argv[0], encoding="utf-8") as handle:
        written = json.load(handle)
    run_trial(TrialSpec.from_json(written["spec"]), written["nvtx_range"])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
