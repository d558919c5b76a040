"""The plan: each step's budget built from what it runs (Work) at the costs measured on the first H200 run, and
the steps planned in order of value while their budgets fit one global deadline less the pack's reserve."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .check import Check
    from .outcome import Outcome


DEFAULT_DEADLINE_S = 420.0  # one device command: 7 minutes of the 10 a command may run
PACK_RESERVE_S = 6  # the last pack (runs.tgz, summary.json), kept back: 4.8 s on the first H200 run
MIN_STEP_S = 8.0  # a planned step cut this short by earlier overruns is skipped rather than started


# What the device budgets are built from: the first H200 run (/work/shared/gpu_runs/2026-12-04/summary.json,
# each step's `seconds` and the harness's own `phases` from its run.json; H200, 16 cores).
# `python -m harness` less its trials: Hydra, Optuna, the report, the worker's start (worker_startup_s 2.6 to
# 4.3 s) and the run's files. A step's seconds less its profiling_s: 8.4 s (reprofile_ncu), 7.8 s (stalls_ncu).
HARNESS_START_S = 8.0
# One ncu trial, its report read: reprofile_ncu's profiling_s was 20.6 s for 4 baselines (one cold, three started
# ahead) and stalls_ncu's 7.3 s for one cold baseline; 4 j + c = 20.6 and j + c = 7.3 give j = 4.4 s ...
NCU_JOB_S = 4.5
# ... and c = 2.9 s more for the first of each harness start, which starts cold (ncu_cost's own trials: 7.9 s
# cold, 4.3 s started ahead).
NCU_START_S = 2.9
# One trial under the CUDA trace (its float64 reference, timing, one traced call, the checks): reproduction's
# 21.1 s for one harness start and five baselines at scale 1, (21.1 - 8.0) / 5 = 2.6 s.
TRACE_TRIAL_S = 2.7
# What a search adds to its trials: the best variant's paired confirm rounds and the card files it rewrites.
# channels_last_ncu's 25.6 s less a start and its two ncu trials left 5.7 s; conv_kernels_ncu's 24.9 s, 5.0 s.
CONFIRM_S = 5.7
# A chunk card's set-up, which no other card pays: the decoder chunk or the DiT block built and its float64
# reference (setup_s of chunk_vae_decode_chunk and chunk_dit_block: 13.2 s each).
CHUNK_SETUP_S = 13.2


@dataclass(frozen=True)
class Work:
    """What a step's device form runs, in the units its budget is counted in."""

    starts: int = 0  # `python -m harness` processes
    ncu_trials: int = 0  # trials (baselines included) under profiler=ncu
    ncu_cold: int | None = None  # of them, started cold; None: one per harness start (the rest were started ahead)
    trace_trials: int = 0  # trials (baselines included) under the CUDA trace
    confirms: int = 0  # searches whose best variant gets paired confirm rounds
    other_s: float = 0.0  # everything else, in seconds ...
    other: str = ""  # ... and what it is

    @property
    def cold_ncu_trials(self) -> int:
        return min(self.ncu_trials, self.starts) if self.ncu_cold is None else self.ncu_cold

    def seconds(self) -> float:
        return (self.starts * HARNESS_START_S + self.ncu_trials * NCU_JOB_S + self.cold_ncu_trials * NCU_START_S
                + self.trace_trials * TRACE_TRIAL_S + self.confirms * CONFIRM_S + self.other_s)

    def text(self) -> str:
        parts = [f"{count} {what}{'s' if count > 1 else ''} x {cost:g} s" for count, what, cost in (
            (self.starts, "harness start", HARNESS_START_S), (self.ncu_trials, "ncu trial", NCU_JOB_S),
            (self.cold_ncu_trials, "cold ncu start", NCU_START_S), (self.trace_trials, "traced trial", TRACE_TRIAL_S),
            (self.confirms, "confirmation", CONFIRM_S)) if count]
        if self.other_s:
            parts.append(f"{self.other_s:g} s {self.other}")
        return " + ".join(parts)


@dataclass(frozen=True)
class Step:
    name: str
    work: Work  # the device form's
    cpu_budget_s: int  # its CPU form (dry run), measured on a 2-core machine; 0: no CPU form
    needs: tuple[str, ...]  # "cuda", "ncu" (the device form), "harness" (the installed wheels)
    run: Callable[[Check, Step, float], Outcome]  # (check, step, seconds it may take)
    doc: str = ""
    unmet: Callable[[], str | None] | None = None  # why it cannot run at all (a file it runs is missing)

    @property
    def budget_s(self) -> int:
        return math.ceil(self.work.seconds())

    def budget(self, device_form: bool) -> int:
        return self.budget_s if device_form else self.cpu_budget_s


@dataclass(frozen=True)
class Planned:
    step: Step
    budget_s: int  # in the form planned for; 0: no such form
    planned: bool  # inside the deadline


def make_plan(steps: list[Step], device_form: bool, deadline_s: float) -> list[Planned]:
    """The steps in order of value, each planned while its budget still fits the deadline less the
    pack's reserve: the planned budgets and the reserve add up to at most the deadline."""
    room = deadline_s - PACK_RESERVE_S
    plan = []
    for step in steps:
        budget = step.budget(device_form)
        fits = 0 < budget <= room
        if fits:
            room -= budget
        plan.append(Planned(step, budget, fits))
    return plan


def plan_total_s(plan: list[Planned]) -> int:
    return sum(p.budget_s for p in plan if p.planned) + PACK_RESERVE_S


def plan_lines(plan: list[Planned], device_form: bool, deadline_s: float) -> list[str]:
    """--plan: a line per step (its budget and what it is made of), the pack's, then the total."""
    lines = [f"{'step':18} {'budget':>7}  {'device form: what the budget is made of' if device_form else 'CPU form'}"]
    for entry in plan:
        if entry.budget_s == 0:
            lines.append(f"{entry.step.name:18} {'-':>7}  needs CUDA: skipped in this form")
            continue
        what = entry.step.work.text() if device_form else "measured on a 2-core machine"
        if not entry.planned:
            what = f"not planned: past the deadline; runs only on time the planned steps leave ({what})"
        lines.append(f"{entry.step.name:18} {entry.budget_s:5d} s  {what}")
    lines.append(f"{'pack':18} {PACK_RESERVE_S:5d} s  runs.tgz and summary.json, kept back from the deadline")
    lines.append(f"total {plan_total_s(plan)} s of deadline {deadline_s:g} s")
    return lines
