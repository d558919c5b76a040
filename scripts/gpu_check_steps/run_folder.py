"""What a step has finished, read back from its harness run folders (as the worker writes them, also when the
run was killed) or its pytest log: the cards finished or with only their baseline measured, their trials and
confirmed verdicts, ncu's cost per trial, the run's own account of its time."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .texts import read_json

if TYPE_CHECKING:
    from .check import Check
    from .plan import Step


# A pytest -v line of a finished test: what a killed pytest step still reports.
PYTEST_LINE = re.compile(r"^(\S+::\S+)\s+(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b", re.MULTILINE)


def read_cards(path: Path) -> list[dict[str, Any]]:
    data = read_json(path)
    return list(data.get("cards") or []) if isinstance(data, dict) else []


def kernel_names(card: dict[str, Any]) -> list[str]:
    return [str(k.get("kernel") or k.get("name") or "") for k in card.get("kernels") or []]


def short_id(card_id: str) -> str:
    """The card id's hash (`...-842ecd` -> 842ecd); a sub-run's prefix (`auto/sub/...`) is kept."""
    head, _, card = card_id.rpartition("/")
    short = card.rsplit("-", 1)[-1] if re.search(r"-[0-9a-f]{6}$", card) else card
    return f"{head}/{short}" if head else short


def _per_call_us(card: dict[str, Any]) -> float | None:
    """The harness's time per original call (a batched variant's median over its calls)."""
    variant = card.get("variant") or {}
    if variant.get("per_call_us") is not None:
        return float(variant["per_call_us"])
    median = (card.get("timing") or {}).get("median_us")
    return float(median) / int(variant.get("calls") or 1) if median is not None else None


def _finished_ids(run_dir: Path) -> set[str]:
    """The cards a harness run has finished, as its run.json counts them: the run-level best.json is
    rewritten after each card (harness.run.execute), run.json lists them at the end or on a stop."""
    run = read_json(run_dir / "run.json") or {}
    listed = [*(run.get("cards") or []), *((run.get("stopped") or {}).get("cards_finished") or [])]
    return {str(c.get("id")) for c in read_cards(run_dir / "best.json")} | {str(c) for c in listed}


def scan_run(run_dir: Path) -> dict[str, Any]:
    """Every card of a harness run folder whose baseline was measured, from the files the worker writes
    as it goes (trials/<card>/baseline.json, trial_*.json, tried.json after the confirm rounds), each
    `finished` or not as run.json counts it (a card with its baseline measured may still be searching);
    `done` when the run wrote its diff.json. A sub-run's cards (experiment=auto) are `sub/card`."""
    cards: dict[str, dict[str, Any]] = {}
    for trials in [*run_dir.glob("trials"), *sorted(run_dir.glob("*/trials"))]:
        prefix = "" if trials.parent == run_dir else f"{trials.parent.name}/"
        finished = _finished_ids(trials.parent)
        for folder in sorted(p for p in trials.iterdir() if p.is_dir()):
            base = next(iter(read_cards(folder / "baseline.json")), None)
            if base is None:  # its baseline is not measured yet
                continue
            report = base.get("report_card") or {}
            entry: dict[str, Any] = {
                "finished": folder.name in finished,
                "here_us": _per_call_us(base), "report_us": report.get("summed_kernel_us"),
                "class": base.get("primary"), "report_class": report.get("primary"),
                "source": base.get("metrics_source"), "kernels": len(base.get("kernels") or []),
                "trials": {path.stem[len("trial_"):]: _per_call_us(card) for path in sorted(folder.glob("trial_*.json"))
                           for card in read_cards(path)[:1]},
            }
            ncu = _ncu_costs(folder)
            if ncu:
                entry["ncu"] = ncu
            tried = next(iter(read_cards(folder / "tried.json")), None)
            if tried is not None:
                confirmation = tried.get("confirmation") or {}
                entry["verdict"] = {"variant": (tried.get("harness") or {}).get("variant"),
                                    "verdict": confirmation.get("verdict"), "speedup": confirmation.get("speedup")}
            cards[prefix + folder.name] = entry
    return {"done": (run_dir / "diff.json").exists(), "cards": cards}


def _ncu_costs(folder: Path) -> dict[str, Any]:
    """Each ncu trial's cost in a card's trials folder (its card's profiler_settings.ncu_cost): cold or
    started ahead, wall seconds, passes per kernel, the child's phases."""
    found: dict[str, Any] = {}
    for path in [folder / "baseline.json", *sorted(folder.glob("trial_*.json"))]:
        for card in read_cards(path)[:1]:
            cost = (card.get("profiler_settings") or {}).get("ncu_cost")
            if isinstance(cost, dict):
                found[path.stem] = {key: cost.get(key) for key in ("session", "wall_s", "passes", "after_child_s",
                                                                    "ready_at_handoff", "phases_s")}
    return found


def class_text(here: str | None, source: str | None, report: str | None) -> str:
    """A class with where it came from beside the report's (read by ncu): an estimate's is another claim."""
    return f"{here or 'no class'} ({source or 'source unrecorded'}; the report's {report or 'none'}, by ncu)"


def finished_text(runs: dict[str, dict[str, Any]]) -> str:
    """One line over scan_run's findings: the cards finished, then those with only their baseline measured
    (the first H200 run said "2 card(s) finished" of two runs whose run.json finished none), each with its
    time, class and the report's."""
    finished: list[str] = []
    baseline_only: list[str] = []
    for run in runs.values():
        for card, entry in run["cards"].items():
            text = short_id(card)
            here, report = entry["here_us"], entry["report_us"]
            if here is not None:
                text += f" {here:.1f} us" + (f" ({here / report:.2f}x report)" if report else "")
            text += ", " + class_text(entry["class"], entry["source"], entry["report_class"])
            if entry["trials"]:
                text += f", {len(entry['trials'])} trial(s)"
            verdict = entry.get("verdict")
            if verdict:
                speedup = f"{verdict['speedup']:.2f}x " if verdict.get("speedup") else ""
                text += f", {verdict['variant']} {speedup}{verdict['verdict']}"
            (finished if entry.get("finished") else baseline_only).append(text)
    if not finished and not baseline_only:
        return "no card finished"
    line = f"{len(finished)} card(s) finished" + (": " + "; ".join(finished) if finished else "")
    if baseline_only:
        line += f"; {len(baseline_only)} with only the baseline measured: " + "; ".join(baseline_only)
    return line


def pytest_progress(text: str) -> dict[str, Any]:
    """The tests a pytest -v run has finished, counted by outcome, the failed ones named."""
    counts: dict[str, int] = {}
    failed = []
    for node, status in PYTEST_LINE.findall(text):
        counts[status.lower()] = counts.get(status.lower(), 0) + 1
        if status in ("FAILED", "ERROR"):
            failed.append(node)
    return {"counts": counts, "failed": failed[:10]} if counts else {}


def salvage(check: Check, step: Step) -> tuple[str, dict[str, Any]]:
    """What the running (or just stopped) step has finished: its harness runs' cards, else the tests
    its pytest finished; ("", {}) when it keeps neither."""
    if check.step_dirs:
        runs = {d.name: scan_run(d) for d in check.step_dirs if d.is_dir()}
        return finished_text(runs), {"runs": runs}
    log = check.work / "logs" / f"{step.name}.log"
    tests = pytest_progress(log.read_text(errors="replace")) if log.exists() else {}
    if tests:
        counts = ", ".join(f"{n} {status}" for status, n in tests["counts"].items())
        return f"tests finished: {counts}" + (f" ({', '.join(tests['failed'][:3])})" if tests["failed"] else ""), {
            "tests": tests}
    return "", {}


def _phases(run_json: Path) -> dict[str, Any]:
    phases = (read_json(run_json) or {}).get("phases") or {}
    return {k: round(v, 1) if isinstance(v, float) else v for k, v in phases.items()}


def run_phases(run_dir: Path) -> dict[str, Any]:
    """A finished harness run's own account of its time (run.json): what the budgets' costs are checked
    against (worker start, profiling, set-up and measurement seconds); experiment=auto's per sub-run."""
    return _phases(run_dir / "run.json") or {sub.name: found for sub in sorted(run_dir.glob("*/"))
                                             if (found := _phases(sub / "run.json"))}


def refusals(run_dir: Path) -> str:
    """Why a run's trials were skipped, infeasible or failed (diff.json's `refused`), in one line."""
    refused = (read_json(run_dir / "diff.json") or {}).get("refused") or {}
    return "; ".join(f"{variant}: {kind}: {str(why)[:120]}" for lists in refused.values()
                     for kind, entries in lists.items() for variant, why in entries.items())
