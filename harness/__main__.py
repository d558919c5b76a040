"""`python -m harness experiment=NAME [overrides]`: the Hydra app that runs a counter-experiment."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from harness.cards.diff import card_time_us
from harness.cards.model import ReportError
from harness.experiment import ExperimentError
from harness.run import RunError, execute
from harness.search import SearchError
from harness.workloads.base import WorkloadError

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
EXIT_BAD_INPUT = 2
log = logging.getLogger("harness")


def _fail(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    sys.exit(EXIT_BAD_INPUT)


@hydra.main(version_base=None, config_path=str(CONF_DIR), config_name="config")
def app(cfg: DictConfig) -> float | None:
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    config = OmegaConf.to_container(cfg, resolve=True)
    try:
        ctx, outcomes = execute(config, run_dir)
    except (RunError, ReportError, ExperimentError, SearchError, WorkloadError) as exc:
        _fail(str(exc))
    except KeyboardInterrupt:
        print(f"\ninterrupted: what finished is in {run_dir} (resume with search.resume=true "
              f"hydra.run.dir={run_dir})", file=sys.stderr)
        sys.exit(130)
    phases = ctx.phases
    outside = phases["outside_measurement_s"]
    print(f"\n{ctx.experiment.name}: {len(outcomes)} card(s) on {ctx.device} in {phases['wall_s']:.1f} s; "
          f"{outside:.1f} s ({100 * outside / max(phases['wall_s'], 1e-9):.0f}%) outside measurement "
          f"(set-up {phases['setup_s']:.1f} s, profiling {phases['profiling_s']:.1f} s, rest bookkeeping)")
    print((run_dir / "summary.md").read_text(encoding="utf-8"))
    print(f"outputs: {run_dir}  (summary.md, diff.md, diff.json, baseline.json, best.json, trials/, optuna.db)")
    speedups = [card_time_us(o.baseline) / card_time_us(o.best)
                for o in outcomes if o.best is not None]
    return min(speedups) if speedups else None


def main() -> None:
    experiments = sorted(p.stem for p in (CONF_DIR / "experiment").glob("*.yaml"))
    for arg in sys.argv[1:]:
        key, _, value = arg.partition("=")
        if key.lstrip("+~") == "experiment" and value and "," not in value and value not in experiments:
            _fail(f"unknown experiment {value!r}; choose one of: {', '.join(experiments)}")
    try:
        app()
    except SystemExit as exc:
        # Hydra reports its own config errors (bad override, unknown key) and exits 1: make it 2.
        sys.exit(EXIT_BAD_INPUT if exc.code == 1 else exc.code)


if __name__ == "__main__":
    main()
