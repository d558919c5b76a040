"""What one trial under profiler=ncu costs around ncu's passes: the ncu child's phases, per card.

    python scripts/ncu_trial_cost.py [--device cpu|cuda] [--experiment NAME] [--cards ID,...] [--scale S]
                                     [--ncu [PATH]] [--metrics-list FILE] [--prestarted] [--json OUT]

For each card (default: the experiment's default cards on this device, as `python -m harness` picks them)
the ncu child (harness.trial.ncu_child) runs the card's baseline as NcuProfiler runs it: cold (a fresh
process that imports everything) and, with --prestarted, as a session started ahead (its imports done
before the job is handed). With --ncu (a path, or found as the harness finds it) the child runs under ncu
with the profiler's command line (metric set `report` checked against the chip's list: --metrics-list, a
saved `ncu --query-metrics`, else ncu is asked; clocks left alone, caches flushed, kernel replay) and
ncu's replay passes per kernel are read; without it the child runs alone: the CPU side of a trial, which
is what a machine without a GPU can measure.

The table gives each phase's seconds (docs/ncu-cost.md says what each is) and `wall`, what the trial costs
the worker that waits for it: from the start (cold) or the handoff (prestarted) to the exit. Its last lines
say what a pre-started session takes off a cold trial. --json writes every record (session.trial_cost).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from harness.api.experiment import load_experiment
from harness.boundary.framing import plain
from harness.boundary.requests import Measure
from harness.boundary.spec import CardSpec
from harness.cards.model import Card, load_report
from harness.profile.ncu.command import find_ncu, profile_command
from harness.profile.ncu.metrics import metrics_for, resolve_metrics
from harness.profile.ncu.runner import RunResult, run_command, start_command
from harness.profile.ncu.session import REPORT_NAME, child_argv, read_phases, trial_cost, write_job
from harness.profile.ncu_backend import NVTX_RANGE, chip_metrics
from harness.run.selection import select_cards

REPO = Path(__file__).resolve().parents[1]
DEADLINE_S = 600.0
READY_WAIT_S = 300.0
# The table's columns: the child's phases in the order it runs them, then what the parent sees.
COLUMNS = [("start", "start"), ("torch_import", "torch"), ("harness_import", "harness"), ("wait", "wait"),
           ("job_decode", "decode"), ("experiment_import", "exp_imp"), ("cuda_context", "cuda_ctx"),
           ("workload_build", "build"), ("variant_prepare", "prepare"), ("warm_up", "warm_up"),
           ("profiled_call", "call")]
HIDDEN = ("start", "torch_import", "harness_import")  # what a session started ahead does before its job


def _arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="cpu (the CPU side only) or cuda")
    parser.add_argument("--experiment", default="vae_channels_last", help="conf/experiment/NAME.yaml")
    parser.add_argument("--cards", default=None, help="card ids, comma-separated (default: the experiment's)")
    parser.add_argument("--scale", type=float, default=None, help="workload.scale (default: 1 on cuda, 0.25 on cpu)")
    parser.add_argument("--ncu", nargs="?", const="", default=None, help="run under ncu (a path, or found)")
    parser.add_argument("--metrics-list", default="auto", help="the chip's metric list (profiler.available_metrics)")
    parser.add_argument("--prestarted", action="store_true", help="also run each as a session started ahead")
    parser.add_argument("--json", type=Path, default=None, help="write every record here")
    return parser.parse_args(argv)


def chosen_cards(experiment: str, cards: str | None, device: str) -> tuple[str, list[Card]]:
    """(the experiment's module, its cards): the ids given, else its default cards on this device."""
    config = yaml.safe_load((REPO / "conf" / "experiment" / f"{experiment}.yaml").read_text(encoding="utf-8"))
    section = config["experiment"]
    report = load_report()
    if cards:
        return section["module"], [report.card(card_id.strip()) for card_id in cards.split(",")]
    chosen = select_cards(report, None, load_experiment(section["module"]), section.get("default_cards"), device)
    return section["module"], chosen


def ncu_maker(ncu: str | None, metrics_list: str) -> Any:
    """(child argv, report path) -> the argv to run: the profiler's ncu command line, or the child alone."""
    if ncu is None:
        return lambda child, report: child
    names, source, _ = chip_metrics(metrics_list, ncu)
    metrics = resolve_metrics(metrics_for("report"), names, source).metrics
    return lambda child, report: profile_command(
        child, nvtx_range=NVTX_RANGE, report_path=report, clock_control="none", cache_control="all", ncu=ncu,
        metrics=metrics).argv


def _output(result: RunResult) -> str:
    return result.stdout + "\n" + result.stderr


def run_cold(folder: Path, job: dict[str, Any], make: Any) -> dict[str, Any]:
    write_job(folder, job)
    launched = time.time()
    result = run_command(make(child_argv(folder, wait=False, launched=launched), folder / REPORT_NAME), DEADLINE_S)
    cost = trial_cost(read_phases(folder), prestarted=False, launched=launched, handed=launched, ended=time.time(),
                      output=_output(result))
    return {**cost, "returncode": result.returncode, "tail": _output(result).strip().splitlines()[-3:]}


def run_prestarted(folder: Path, job: dict[str, Any], make: Any) -> dict[str, Any]:
    """The child started ahead, handed its job once its imports are done: what a warm trial costs."""
    launched = time.time()
    started = start_command(make(child_argv(folder, wait=True, launched=launched, owner=os.getpid()),
                                 folder / REPORT_NAME))
    end = time.monotonic() + READY_WAIT_S
    while started.running() and time.monotonic() < end and "ready" not in ((read_phases(folder) or {}).get("marks")
                                                                             or {}):
        time.sleep(0.05)
    write_job(folder, job)
    handed = time.time()
    result = started.finish(DEADLINE_S)
    cost = trial_cost(read_phases(folder), prestarted=True, launched=launched, handed=handed, ended=time.time(),
                      output=_output(result))
    return {**cost, "returncode": result.returncode, "tail": _output(result).strip().splitlines()[-3:]}


def _cell(value: Any) -> str:
    return f"{value:.2f}" if isinstance(value, (int, float)) else "-"


def phase_table(rows: list[dict[str, Any]]) -> list[str]:
    """The phase table: a line per (card, form) record, seconds per phase, then ncu's share and `wall`."""
    head = ["card", "form", *(short for _, short in COLUMNS), "after", "wall", "passes"]
    lines = ["  ".join(f"{h:>8}" if i > 1 else f"{h:<10}" for i, h in enumerate(head))]
    for row in rows:
        phases = row.get("phases_s") or {}
        cells = [row["card"][-10:], row["session"], *(_cell(phases.get(name)) for name, _ in COLUMNS),
                 _cell(row.get("after_child_s")), _cell(row.get("wall_s")),
                 "/".join(str(n) for n in row.get("passes") or []) or "-"]
        lines.append("  ".join(f"{c:>8}" if i > 1 else f"{c:<10}" for i, c in enumerate(cells)))
    return lines


def summary_lines(rows: list[dict[str, Any]]) -> list[str]:
    """What a session started ahead takes off a trial: its start and imports, measured on the cold runs."""
    cold = [r for r in rows if r["session"] == "cold" and r.get("phases_s")]
    if not cold:
        return ["no cold run finished"]
    hidden = [sum(float(r["phases_s"].get(name, 0.0)) for name in HIDDEN) for r in cold]
    walls = [float(r["wall_s"]) for r in cold]
    lines = [f"cold trial: mean {sum(walls) / len(walls):.2f} s wall, of which start + imports "
             f"{sum(hidden) / len(hidden):.2f} s ({' + '.join(HIDDEN)}): what a session started ahead hides"]
    warm = [float(r["wall_s"]) for r in rows if r["session"] == "prestarted"]
    if warm:
        lines.append(f"pre-started trial: mean {sum(warm) / len(warm):.2f} s wall from its handoff")
    return lines


def main(argv: list[str]) -> int:
    args = _arguments(argv)
    ncu = None if args.ncu is None else (args.ncu or find_ncu())
    if args.ncu is not None and not ncu:
        print("error: --ncu: no ncu found; give its path (--ncu /path/to/ncu)", file=sys.stderr)
        return 2
    module, cards = chosen_cards(args.experiment, args.cards, args.device)
    scale = args.scale if args.scale is not None else (1.0 if args.device.startswith("cuda") else 0.25)
    experiment = load_experiment(module)
    make = ncu_maker(ncu, args.metrics_list)
    rows: list[dict[str, Any]] = []
    for card in cards:
        spec = CardSpec(card=card.to_dict(), experiment_module=module, device=args.device, scale=scale)
        # The baseline's Measure as the worker would send it (the ncu child writes no card).
        request = Measure(spec=spec, variant=str(experiment.baseline_name), baseline=True, card_path="baseline.json")
        job = {"measure": plain(request), "nvtx_range": NVTX_RANGE}
        forms = [run_cold, run_prestarted] if args.prestarted else [run_cold]
        for run in forms:
            with tempfile.TemporaryDirectory(prefix="ncu-trial-cost-") as folder:
                rows.append({"card": card.id, **run(Path(folder), job, make)})
            if rows[-1]["returncode"] != 0:
                print(f"{card.id} {rows[-1]['session']}: exit {rows[-1]['returncode']}: {rows[-1]['tail']}",
                      file=sys.stderr)
    where = f"under {ncu}" if ncu else "without ncu (the child alone)"
    print(f"# ncu trial cost: {args.experiment} baseline, device={args.device}, scale={scale:g}, {where}; seconds")
    print("\n".join([*phase_table(rows), *summary_lines(rows)]))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1), encoding="utf-8")
    return 0 if all(r["returncode"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
