"""Every measured card's time against the device's physical floor (harness.trial.physics), from run folders.

    python scripts/floor_ratios.py RUN_DIR [RUN_DIR ...]

Prints one line per card (its over_floor: median time / floor; the floor refuses below 1 / slack) and,
per run, the lowest ratio of an honest (feasible) card and the share of wall time the checks took, so
`timing.physics_slack` can be checked against the default runs' honest variants.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from harness.cards.model import ReportError, load_report


def main(run_dirs: list[str]) -> int:
    if not run_dirs:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    for run_dir in map(Path, run_dirs):
        ratios: list[float] = []
        for path in sorted(run_dir.glob("**/trials/*/*.json")):
            if path.name in ("best.json", "tried.json"):
                continue
            try:
                card = load_report(path).cards[0]
            except ReportError:
                continue
            physics = card.extra.get("physics") or {}
            correctness = card.extra.get("correctness") or {}
            ratio = physics.get("over_floor")
            if ratio is not None and correctness.get("feasible"):
                ratios.append(float(ratio))
            print(f"{path.relative_to(run_dir)}  over_floor={ratio if ratio is None else f'{ratio:.3g}'}  "
                  f"feasible={correctness.get('feasible')}  {(correctness.get('note') or '')[:100]}")
        phases = {}
        for run_json in run_dir.glob("**/run.json"):
            for key, value in json.loads(run_json.read_text()).get("phases", {}).items():
                if isinstance(value, (int, float)):
                    phases[key] = phases.get(key, 0.0) + value
        share = phases.get("checks_s", 0.0) / phases["wall_s"] if phases.get("wall_s") else None
        lowest = f"{min(ratios):.3g}" if ratios else "n/a"
        print(f"== {run_dir}: lowest honest over_floor {lowest} over {len(ratios)} cards; checks "
              f"{phases.get('checks_s', 0.0):.1f} s of {phases.get('wall_s', 0.0):.1f} s wall"
              + (f" ({share:.1%})" if share is not None else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
