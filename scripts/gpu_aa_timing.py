"""An A/A timing pair: the same op on both sides of the paired-rounds verdict, with the SM clock.

    python scripts/gpu_aa_timing.py [--card ID] [--rounds 8] [--budget-s 0.1] [--scale S] [--out FILE.json]

The verdict the harness gives a variant (harness.cards.noise.paired_verdict: ABBA rounds, Student's t
interval of the log ratios, SAME band of the device class) must say SAME when nothing changed: a
FASTER or SLOWER here is a false verdict, and the interval's half-width is the smallest change this
machine resolves. Each side is one workload built from the card (bf16 linear by default), timed as
the worker times a trial: CUDA events with the L2 flushed before each call on a GPU
(harness.profile.cuda_timing.time_cuda), the wall clock on a CPU (time_cpu). On a GPU the SM clock is
read through NVML before and after every round (the timing's own reading, and its note when it moved),
since a verdict over a clock change compares two machines.

Prints one JSON object (also written to --out): verdict, speedup and interval, per-round medians,
spreads, SM clocks (MHz) and the device.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from harness.cards.lint import normalize
from harness.cards.model import load_report
from harness.cards.noise import paired_verdict
from harness.profile.timing import time_cpu
from harness.workloads.registry import build_workload

DEFAULT_CARD = "dit-480-linear-m1170n5120k5120-b9770e"  # a 1170x5120x5120 bf16 linear: ~100 us on an H200
BANDS = {"cuda": 0.02, "cpu": 0.05}  # conf/config.yaml timing.same_band


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--card", default=DEFAULT_CARD)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--budget-s", type=float, default=0.1, help="measuring time per side and round")
    parser.add_argument("--scale", type=float, default=None, help="workload scale (default 1 on CUDA, 0.1 on a CPU)")
    parser.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    kind = "cuda" if device == "cuda" else "cpu"
    scale = args.scale if args.scale is not None else (1.0 if kind == "cuda" else 0.1)
    card = normalize(load_report()).card(args.card)
    started = time.monotonic()
    sides = {
        name: build_workload(card.op_kind, card.shape_parameters, device=device, dtype="bfloat16" if kind == "cuda"
                             else "float32", scale=scale, seed=0, resolution=card.resolution)
        for name in ("A", "A'")
    }
    clocks: list[dict[str, float | None]] = []
    if kind == "cuda":
        from harness.profile.cuda_timing import sm_clock_mhz, time_cuda

        def timed(fn):
            before, _ = sm_clock_mhz()
            result = time_cuda(fn, budget_s=args.budget_s, min_repeats=10)
            clocks.append({"before": before, "after": result.clock_mhz})
            return result
    else:
        torch.set_num_threads(1)

        def timed(fn):
            return time_cpu(fn, budget_s=args.budget_s, min_repeats=5)

    medians: dict[str, list[float]] = {"A": [], "A'": []}
    spreads: dict[str, list[float]] = {"A": [], "A'": []}
    notes: list[str] = []
    for number in range(args.rounds):
        for name in ("A", "A'") if number % 2 == 0 else ("A'", "A"):
            result = timed(sides[name].run)
            medians[name].append(result.median_us)
            spreads[name].append(result.spread)
            notes += [note for note in result.notes if note not in notes]
    verdict = paired_verdict(medians["A"], medians["A'"], BANDS[kind])
    readings = [value for pair in clocks for value in pair.values() if value]
    out = {
        "card": args.card,
        "device": torch.cuda.get_device_name() if kind == "cuda" else "cpu",
        "device_kind": kind,
        "scale": scale,
        "rounds": args.rounds,
        "budget_s": args.budget_s,
        "verdict": verdict.verdict,
        "false_verdict": verdict.verdict in ("FASTER", "SLOWER"),
        "speedup": verdict.speedup,
        "ci": list(verdict.ci),
        "band": verdict.band,
        "describe": verdict.describe(),
        "median_us": {name: values for name, values in medians.items()},
        "spread": {name: values for name, values in spreads.items()},
        "sm_clock_mhz": {"per_round": clocks, "min": min(readings) if readings else None,
                         "max": max(readings) if readings else None},
        "notes": notes,
        "seconds": round(time.monotonic() - started, 2),
    }
    text = json.dumps(out, indent=1)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
