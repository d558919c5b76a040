"""How good the predictions are on this CPU: every configuration of the experiments the model predicts on a CPU, each
measured by its own run (its space cut to that one configuration, the default cards), then every run's own
predictions.json scored together (scripts/score_predictions.py).

    python scripts/cpu_calibration.py OUT [--experiments E ...] [--cards C ...] [--variants V ...]
                                          [--params NAME=VALUE ...] [--repeats N] [--fresh-peaks]

Each run predicts before it measures, on this CPU by its cached peaks and reference kernels
(harness.profile.cpu_peaks); `--fresh-peaks` measures them again before each repeat, so that the figures include
how much a measurement of the peaks itself moves them. A configuration a CPU run does not draw (fp16, a CUDA
kernel) measures nothing and is counted so. Prints each measured row and the calibration figures, and writes them to
OUT/calibration.json. A benchmark: the default, every configuration once, takes about 5 minutes on a 2-core VM;
CI runs one configuration on one card.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

from score_predictions import print_scored, score  # noqa: E402

from harness.predict.calibration import calibrate  # noqa: E402
from harness.predict.plan import shipped_experiments  # noqa: E402

EXPERIMENTS = ("vae_channels_last", "vae_bf16", "dit_small_m_batching")


def overrides(space: dict[str, Any], variant: str, params: dict[str, Any]) -> list[str]:
    """Hydra overrides that cut the experiment's space to one configuration: the other variants deleted, each
    parameter's choices cut to the one value."""
    cut = [f"~experiment.space.{other}" for other in space if other != variant]
    return cut + [f"experiment.space.{variant}.{name}=[{json.dumps(value)}]" for name, value in params.items()]


def slug(variant: str, params: dict[str, Any]) -> str:
    """The configuration's folder name (no '=', which Hydra's override grammar would read in hydra.run.dir)."""
    return "-".join([variant, *(f"{k}_{v}" for k, v in sorted(params.items()))]).replace("/", "_")


def run_all(out: Path, experiments: list[str], cards: list[str] | None, chosen: Any, repeat: int) -> list[Path]:
    """One run per configuration of each experiment (`chosen(variant, params)` only); the run folders that
    finished."""
    plans = {plan.name: plan for plan in shipped_experiments()}
    done = []
    for name in experiments:
        plan = plans[name]
        for variant, params in plan.configurations():
            if not chosen(variant, params):
                continue
            run_dir = out / str(repeat) / name / slug(variant, params)
            command = [sys.executable, "-m", "harness", f"experiment={name}", *overrides(dict(plan.space), variant,
                                                                                        params),
                       f"hydra.run.dir={run_dir}"] + ([f"cards=[{','.join(cards)}]"] if cards else [])
            proc = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
            status = "ok" if proc.returncode == 0 else f"exit {proc.returncode}: {proc.stderr.strip()[-300:]}"
            print(f"[{repeat}] {name}: {slug(variant, params)}: {status}", flush=True)
            if proc.returncode == 0:
                done.append(run_dir)
    return done


def forget_peaks() -> None:
    from harness.profile import cpu_peaks

    cpu_peaks.cache_path().unlink(missing_ok=True)
    cpu_peaks.reset_memo()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--experiments", nargs="+", default=list(EXPERIMENTS), choices=EXPERIMENTS)
    parser.add_argument("--cards", nargs="+", help="card ids (default: each experiment's default cards)")
    parser.add_argument("--variants", nargs="+", help="only these variants' configurations (default: all)")
    parser.add_argument("--params", nargs="+", default=[], metavar="NAME=VALUE",
                        help="only the configurations with these parameter values")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--fresh-peaks", action="store_true", help="measure the CPU's peaks again before each repeat")
    args = parser.parse_args(argv)
    wanted = dict(pair.split("=", 1) for pair in args.params)

    def chosen(variant: str, params: dict[str, Any]) -> bool:
        return (not args.variants or variant in args.variants) and all(
            str(params.get(name)) == value for name, value in wanted.items())

    runs = []
    for repeat in range(1, args.repeats + 1):
        if args.fresh_peaks:
            forget_peaks()
        runs += run_all(args.out, args.experiments, args.cards, chosen, repeat)
    rows = score(runs, None)
    print_scored(rows)
    figures = calibrate(rows)
    print(f"\n{len(runs)} runs. {figures.line()}")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "calibration.json").write_text(json.dumps(
        {"runs": [str(r) for r in runs], "rows": [r.to_dict() for r in rows], "calibration": figures.as_dict()},
        indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
