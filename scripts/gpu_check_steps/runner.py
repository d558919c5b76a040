"""The step runner: which steps can run (skip_reason), each step's time (its budget, more on the time earlier
steps saved, less what the later planned steps still need), and its record in summary.json, written while it
runs (what it has finished so far) and when it ends, fails or is killed."""

from __future__ import annotations

import functools
import time
from typing import Any

from .check import Check
from .outcome import Outcome, StepFailed
from .plan import MIN_STEP_S, PACK_RESERVE_S, Planned, Step, make_plan, plan_total_s
from .run_folder import run_phases, salvage

SLACK_FACTOR = 2.0  # a step may run up to this many times its budget on time earlier steps saved


def skip_reason(check: Check, step: Step) -> str | None:
    if step.unmet is not None:
        missing = step.unmet()
        if missing:
            return missing
    device_form = check.device_form
    if not device_form and step.needs and "cuda" in step.needs and not step.cpu_budget_s:
        return "needs CUDA" + (" and ncu" if "ncu" in step.needs else "") + (
            " (--dry-run)" if check.requested_dry_run else " (no CUDA device here)")
    if device_form and "ncu" in step.needs:
        if not check.ncu:
            from harness.profile.ncu.command import searched_for_ncu

            return f"needs ncu: {searched_for_ncu()}"
        if check.ncu_ok is False:
            return f"ncu cannot profile here: {check.ncu_reason}"
    if "harness" in step.needs and device_form and not check.installed:
        return "the install step did not succeed (or did not run): the harness cannot import here"
    return None


def _progress(check: Check, step: Step, record: dict[str, Any], started: float) -> None:
    """summary.json while the step runs: what it has finished so far (it survives the check being
    killed outright)."""
    text, finished = salvage(check, step)
    record.update(status="running", seconds=round(time.monotonic() - started, 1), result=f"running: {text}",
                  numbers={"finished": finished} if finished else {})
    check.write_summary()


def record_plan(check: Check, plan: list[Planned]) -> None:
    """summary.json's plan: each step's budget and whether it was planned, and their total."""
    check.summary["plan"] = [{"name": p.step.name, "budget_s": p.budget_s, "planned": p.planned} for p in plan]
    check.summary["plan_total_s"] = plan_total_s(plan)


def run_steps(check: Check, selected: list[Step]) -> int:
    """Each selected step in turn, within its time (skipped, saying why, where it cannot run or has no time
    left); its record in summary.json as it goes. Returns how many failed or ran out of time."""
    failures = 0
    for index, step in enumerate(selected):
        # Planned for the form the machine step found (a machine without CUDA runs the CPU forms); summary.json's
        # plan follows (the first H200 run's was the CPU form's, made before the machine step had run).
        plan = make_plan(selected, check.device_form, check.summary["deadline_s"])
        record_plan(check, plan)
        entry = plan[index]
        record: dict[str, Any] = {"name": step.name, "doc": step.doc, "budget_s": entry.budget_s,
                                  "planned": entry.planned, "form": "device" if check.device_form else "cpu"}
        check.summary["steps"].append(record)
        reason = skip_reason(check, step)
        # What the later planned steps that can still run need is kept for them.
        kept = sum(p.budget_s for p in plan[index + 1:] if p.planned and skip_reason(check, p.step) is None)
        available = check.left() - PACK_RESERVE_S - kept
        if reason is None and available < (min(entry.budget_s, MIN_STEP_S) if entry.planned else entry.budget_s):
            reason = (f"global deadline: {max(0.0, check.left()):.0f} s left of {check.summary['deadline_s']:g} s, "
                      f"{kept} s kept for the later planned steps" + ("" if entry.planned else
                                                                      f"; not planned, it needs {entry.budget_s} s"))
        if reason:
            record.update(status="skipped", seconds=0.0, result=reason)
            check.say(f"-- {step.name}: skipped: {reason}")
            check.write_summary()
            continue
        check.step_timeout = min(available, entry.budget_s * SLACK_FACTOR)
        record["timeout_s"] = round(check.step_timeout, 1)
        if not check.device_form and any(n in step.needs for n in ("cuda", "ncu")):
            record["note"] = "the CPU form (device=cpu profiler=cpu): " + ("needs CUDA" + (
                " and ncu" if "ncu" in step.needs else "")) + " for the device form"
        check.say(f"== {step.name} (budget {entry.budget_s} s, up to {check.step_timeout:.0f} s, {record['form']} form"
                  f"{'' if entry.planned else ', not planned: on saved time'})")
        started = time.monotonic()
        check.step_dirs, check.record = [], record
        check.progress = functools.partial(_progress, check, step, record, started)  # this step's, bound now
        try:
            outcome = step.run(check, step, check.step_timeout)
        except StepFailed as exc:
            outcome = exc.outcome
        except Exception as exc:  # noqa: BLE001 - a broken step is recorded, the others go on
            outcome = Outcome("failed", f"{type(exc).__name__}: {exc}")
        finally:
            check.progress = None
        seconds = time.monotonic() - started
        if outcome.status == "ok" and seconds > check.step_timeout + 5:
            outcome.status = "timeout"
        if outcome.status in ("failed", "timeout"):
            text, finished = salvage(check, step)
            if finished:
                outcome.result += f"; {text}"
                outcome.numbers["finished"] = finished
        if check.step_dirs:  # the harness's own account of the time, to check the budgets' costs against
            outcome.numbers["phases"] = {d.name: run_phases(d) for d in check.step_dirs}
        check.record = None
        record.update(status=outcome.status, seconds=round(seconds, 1), result=outcome.result, numbers=outcome.numbers)
        check.say(f"   {step.name}: {outcome.status} in {seconds:.1f} s: {outcome.result}")
        if outcome.status in ("failed", "timeout"):
            failures += 1
        check.write_summary()
    return failures
