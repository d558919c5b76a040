"""Warp-stall breakdown for unresolved cards: the evidence the report said it lacked.

The report's unresolved cards have no unit at 60% of peak and no occupancy or tail signature, and
propose "collect stall reasons (smsp__warp_issue_stalled_*) and l1tex/lts bytes". This experiment
re-profiles the card's op with ncu's report metrics plus the warp-state breakdown and the L1/L2 byte
counters, names the dominant stall of the dominant kernel and its share of the stall cycles, and,
when one reason clearly dominates, refines the card's status with what that stall means.

The evidence speaks for the report's op only when the profiled kernel is the report's: on the H200 the
report's bf16 nvjet GEMM of 500175 ran as an fp32 FFMA GEMM and its stalls were read as the card's. So
the dominant kernel's family is compared with the report card's (harness.cards.kernel_match): another
family, or report names too damaged to tell, and the card is not refined nor left `classified`; its
status says why (`not_the_reports_kernel`, `kernel_unverified`), `refused` gives the reason, and the
check is "not measurable".

`not_selected` is not a stall: a warp not selected was eligible and lost the issue slot to another
eligible warp, so it measures issue contention (plenty of ready warps), not what the warp waits on.
It is left out of the shares and of the dominant-stall choice, like `selected` (the issue cycle
itself), and kept apart as `issue_contention`. With it counted, 500175's H200 profile read
short_scoreboard 38% "not decisive"; among the stalls it is 51%.

Only ncu collects warp stalls. Under another profiler (CPU, torch.profiler trace) the card says so
and the check is "not measurable"; nothing is guessed.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from harness.api.experiment import Experiment
from harness.cards.fields import UNRESOLVED
from harness.cards.kernel_match import SAME, UNKNOWN, match_report
from harness.cards.labels import is_report_card
from harness.cards.model import Card, Kernel
from harness.cards.rules import dominant
from harness.cards.stalls import STALL_MEANING, stall_shares
from harness.workloads.base import Workload
from harness.workloads.registry import OP_KINDS

EXPERIMENT = Experiment(
    name="stall_breakdown",
    op_kinds=OP_KINDS,  # every op card, a captured model's conv2d and replayed ops included
    hypothesis="one warp-stall reason accounts for most of the stall cycles of the dominant kernel, "
    "which names the limiter the six rules could not",
    check="stall_breakdown",
    classes=(UNRESOLVED,),
    metric_set="report+stalls+bytes",
)

# The shares and what each reason means are harness.cards.stalls' (the rules name a kernel's dominant stall
# too). A reason that takes at least this share of the stall cycles is decisive: it is the limiter.
DECISIVE_SHARE = 0.5

ISSUE_CONTENTION = "eligible warps not picked: the scheduler is busy (plenty of parallelism), not a stall"


@EXPERIMENT.baseline
def as_profiled(w: Workload) -> Callable[[], torch.Tensor]:
    """The card's op as built here (its shape and dtype); only the profile is richer. Whether its kernel is
    the report's is checked on the card (`stalls.kernel_match`)."""
    return w.run


def stall_evidence(card: Card) -> dict[str, Any]:
    """The card's `stalls` entry: dominant reason, share, all shares, bytes, and a refined reading."""
    top = dominant(card.kernels)
    if top is None:
        return {"dominant": None, "note": "the profile has no kernel"}
    match = kernel_match(card, top)
    refused = {} if match["verdict"] == SAME else {"refused": match["reason"]}
    shares = stall_shares(top)
    if not shares:
        profiler = card.extra.get("profiler") or "this profiler"
        return {"dominant": None, "kernel": top.name,
                "note": f"no warp-stall counters: only ncu collects them (profiler=ncu on a CUDA device); "
                        f"this card was profiled by {profiler}", "kernel_match": match, **refused}
    reason, share = next(iter(shares.items()))
    counters = top.extra.get("ncu_counters") or {}
    contention = counters.get("stall_not_selected")
    evidence: dict[str, Any] = {
        "dominant": reason,
        "share": round(share, 3),
        "meaning": STALL_MEANING.get(reason, "no description for this reason"),
        "shares": {name: round(value, 3) for name, value in shares.items()},
        "kernel": top.name,
        "bytes_mb": {name: counters[name] for name in ("l1tex_mb", "lts_mb") if name in counters},
        "decisive": share >= DECISIVE_SHARE,
        "rule": f"a reason is decisive at >= {DECISIVE_SHARE:.0%} of the stall cycles (selected and "
                "not_selected excluded: neither is a stall)",
    }
    if isinstance(contention, (int, float)):
        evidence["issue_contention"] = {"not_selected": float(contention), "meaning": ISSUE_CONTENTION}
    return {**evidence, "kernel_match": match, **refused}


def kernel_match(card: Card, top: Kernel) -> dict[str, Any]:
    """The profiled dominant kernel against the report card's kernels (`report_card` on a measured card)."""
    report = card.extra.get("report_card")
    if isinstance(report, dict) and "kernels" in report:
        return match_report(top.name, report).as_dict()
    if is_report_card(card):  # the report's own profile (an imported ncu report): nothing was re-run
        return {"verdict": SAME, "reason": "the report's own profile"}
    return {"verdict": UNKNOWN, "reason": "the card records no report kernels to compare the profiled one with"}


@EXPERIMENT.annotate
def add_stalls(card: Card, workload: Workload) -> None:
    evidence = stall_evidence(card)
    card.extra["stalls"] = evidence
    if evidence.get("refused"):
        # The rules' class is of the kernel that ran; the card's op as the report ran it was not measured.
        card.status = "kernel_unverified" if evidence["kernel_match"]["verdict"] == UNKNOWN \
            else "not_the_reports_kernel"
        card.extra["refused"] = f"not refined or classified: {evidence['refused']}"
        facts = card.extra.get("variant")
        if isinstance(facts, dict):
            facts["recipe"] = (f"The card's op as built here; its dominant kernel is not shown to be the "
                               f"report's ({evidence['refused']}).")
    elif evidence.get("decisive"):
        card.status = "refined_by_stalls"
        card.extra["refined"] = f"{evidence['dominant']} stalls ({evidence['share']:.0%}): {evidence['meaning']}"
