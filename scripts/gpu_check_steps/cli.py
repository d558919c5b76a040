"""The check's command line: its arguments, the --helper subcommands, and a run of the selected steps from the
first probes to the pack (on SIGTERM or SIGINT too, with what the running step had finished)."""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
from typing import Any

from .check import Check
from .machine import helper_import_sweep
from .ncu_steps import helper_parse_fixture
from .pack import MAX_FILE_BYTES, MAX_OUT_FILES, pack
from .paths import REPO
from .plan import DEFAULT_DEADLINE_S, Step, make_plan, plan_lines
from .run_folder import salvage
from .runner import record_plan, run_steps
from .table import STEP_NAMES, STEPS


def _parser(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dry-run", action="store_true", help="CPU forms only; CUDA/ncu steps skipped")
    parser.add_argument("--steps", default=",".join(STEP_NAMES), help="comma-separated subset, e.g. install,aa_timing")
    parser.add_argument("--out", default=os.environ.get("OUT") or str(REPO / "gpu_check_out"))
    parser.add_argument("--work", default=None, help="scratch folder for run directories (default: /tmp/...)")
    parser.add_argument("--deadline", type=float, default=DEFAULT_DEADLINE_S, help="seconds for all steps")
    parser.add_argument("--plan", "--list", dest="plan", action="store_true",
                        help="print the steps, their budgets and the total against the deadline")
    parser.add_argument("--helper", nargs="+", help=argparse.SUPPRESS)
    return parser


def _helper(parser: argparse.ArgumentParser, helper: list[str]) -> int:
    """A step's work that runs in a process of its own (in the environment under test)."""
    if helper[0] == "import-sweep":
        return helper_import_sweep()
    if helper[0] == "parse-fixture":
        return helper_parse_fixture(*helper[1:3])
    parser.error(f"unknown helper {helper[0]}")


def main(description: str, argv: list[str] | None = None) -> int:
    """scripts/gpu_check.py's command line; `description` is --help's (its docstring's first paragraph)."""
    parser = _parser(description)
    args = parser.parse_args(argv)
    if args.helper:
        return _helper(parser, args.helper)
    names = [n.strip() for n in args.steps.split(",") if n.strip()]
    unknown = [n for n in names if n not in STEP_NAMES and n != "pack"]
    if unknown:
        parser.error(f"unknown step(s) {', '.join(unknown)}; steps: {', '.join(STEP_NAMES)}")
    selected = [s for s in STEPS if s.name in names]
    if args.plan:
        print("\n".join(plan_lines(make_plan(selected, not args.dry_run, args.deadline), not args.dry_run,
                                   args.deadline)))
        return 0
    check = Check(args)
    _stop_on_signals(check, selected)
    check.say(f"gpu_check {check.summary['mode']}: steps {', '.join(names)}; deadline {args.deadline:.0f} s; "
              f"out {check.out}; work {check.work}")
    if "machine" not in names:  # the other steps need to know whether there is a GPU
        check.cuda = not args.dry_run and _probe(
            check, "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)")
        check.dry_run = check.dry_run or not check.cuda
    if "install" not in names and not check.dry_run:  # installed earlier, or by hand
        check.installed = _probe(check, "import optuna, hydra, omegaconf")
    if "ncu_preflight" in names and check.ncu and not args.dry_run:
        check.start_metric_query()  # beside machine and install, for the preflight
    record_plan(check, make_plan(selected, check.device_form, args.deadline))
    try:
        failures = run_steps(check, selected)
    finally:
        check.stop_metric_query()  # a preflight skipped or not run leaves it to end here
    return _finish(check, failures)


def _stop_on_signals(check: Check, selected: list[Step]) -> None:
    """On SIGTERM or SIGINT: the running step killed with what it started, its record saying what it had
    finished, the pack, summary.json, and exit 128 + the signal."""

    def stop(signum: int, _frame: Any) -> None:
        check.say(f"signal {signum}: stopping the current step and packing what there is")
        if check.current is not None:
            check.kill(check.current)
        check.sweep(side_too=True)
        with contextlib.suppress(Exception):
            check.summary["interrupted"] = f"signal {signum}"
            if check.record is not None:  # the step that was running: what it finished
                step = next(s for s in selected if s.name == check.record["name"])
                text, finished = salvage(check, step)
                check.record.update(status="interrupted", result=f"interrupted by signal {signum}; {text}",
                                    numbers={"finished": finished})
            pack(check)
            check.write_summary()
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)


def _finish(check: Check, failures: int) -> int:
    """The pack, summary.json's last form and a table of the steps; exit 1 if a step failed or ran out of time,
    or $OUT holds more files, or larger ones, than a device command may bring back."""
    outcome = pack(check)
    check.summary["pack"] = {"status": outcome.status, "result": outcome.result, **outcome.numbers}
    check.summary["failed_steps"] = failures
    check.write_summary()
    files = sorted(p.name for p in check.out.iterdir() if p.is_file())
    too_many = len(files) > MAX_OUT_FILES
    big = [p.name for p in check.out.iterdir() if p.is_file() and p.stat().st_size > MAX_FILE_BYTES]
    check.say("")
    check.say(f"{'step':18} {'status':8} {'s':>6}  result")
    for record in check.summary["steps"]:
        check.say(f"{record['name']:18} {record['status']:8} {record['seconds']:6.1f}  {record['result'][:160]}")
    check.say(f"{len(files)} files in {check.out}: {', '.join(files)} ({check.summary['seconds']:.0f} s in all)")
    if too_many or big:
        check.say(f"problem: {'more than 8 files' if too_many else ''} "
                  f"{'over 15 MiB: ' + ', '.join(big) if big else ''}")
        failures += 1
    check.log_file.close()
    if not os.environ.get("GPU_CHECK_KEEP_WORK"):
        shutil.rmtree(check.work, ignore_errors=True)
    return 1 if failures else 0


def _probe(check: Check, code: str) -> bool:
    return check.run([check.python, "-c", code], 60, env=check.env()).returncode == 0
