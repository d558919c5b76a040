"""Whole runs of the planted pairs under busy loops: the verdicts and the noise verdict a user would read.

    python scripts/aa_under_load.py [--busy 2] [--runs 3] [--variant identical] [--bursty]

A benchmark, not a test: CI does not run it. Starts `--busy` pure-Python busy loops (steady, or with `--bursty`
each looping for 0.2-2 s and sleeping as long, so the load lands on some rounds and not others), then runs the
project's planted experiment (tests/app/user_experiment: `identical` is the baseline's very code, `once` half its
work, `thrice` 1.5x) `--runs` times at tests/app/test_user_experiment.py's settings, and prints per run its time
verdict, speedup and interval, the rounds run and dropped, and run.json's noise verdict. The issue's check: under
two busy loops the `identical` pair never reads FASTER or SLOWER and every run says "noisy"; with `--busy 0` on a
quiet machine, "quiet".
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
USER = REPO / "tests" / "app" / "user_experiment"
SETTINGS = ["workload.cpu_scale=0.05", "timing.budget_s=0.2", "timing.drift_budget_s=0.02", "timing.confirm_rounds=8",
            "timing.cpu_threads=1"]
STEADY = "while True: pass"
BURSTY = ("import random, time\nwhile True:\n    end = time.time() + random.uniform(0.2, 2)\n"
          "    while time.time() < end: pass\n    time.sleep(random.uniform(0.2, 2))")


def one_run(variant: str, run_dir: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(USER), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run(
        [sys.executable, "-m", "harness", f"hydra.searchpath=[file://{USER / 'my_conf'}]", "experiment=planted",
         f"hydra.run.dir={run_dir}", *SETTINGS, "~experiment.space", f"+experiment.space={{{variant}: {{}}}}"],
        capture_output=True, text=True, env=env, cwd=REPO)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"}
    row = json.loads((run_dir / "diff.json").read_text())["cards"][0]
    tried = json.loads((run_dir / "tried.json").read_text())["cards"][0]["confirmation"]
    noise = json.loads((run_dir / "run.json").read_text())["noise"]
    ci = row["speedup_ci"]
    return {"verdict": row["timing_verdict"], "speedup": f"{row['speedup']:.3f}x",
            "ci": f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "none",
            "rounds": tried.get("rounds_run"), "dropped": len(tried.get("disturbed_rounds") or []),
            "noise": noise["verdict"], "why": "; ".join(noise.get("reasons") or [])[:160]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--busy", type=int, default=2, help="busy loops beside the runs")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--variant", default="identical", choices=("identical", "once", "thrice"))
    parser.add_argument("--bursty", action="store_true", help="loops that come and go instead of steady ones")
    args = parser.parse_args()
    loops = [subprocess.Popen([sys.executable, "-c", BURSTY if args.bursty else STEADY]) for _ in range(args.busy)]
    print(f"{args.busy} {'bursty' if args.bursty else 'steady'} busy loop(s); variant {args.variant}; "
          f"{args.runs} run(s) at {' '.join(SETTINGS)}")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for number in range(args.runs):
                result = one_run(args.variant, Path(tmp) / f"run{number}")
                print(f"run {number + 1}: " + ", ".join(f"{k} {v}" for k, v in result.items()), flush=True)
    finally:
        for loop in loops:
            loop.kill()


if __name__ == "__main__":
    main()
