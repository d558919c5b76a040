"""The timing cannot be gamed by a side stream: an honest matmul and a side-stream variant, timed alike.

    python scripts/gpu_side_stream_check.py [--n 4096] [--budget-s 0.2]

Both are timed by harness.profile.cuda_timing.time_cuda, as the worker times a trial. The variant
launches the same matmul on a side stream and returns without the current stream waiting for it,
so the current stream's CUDA events read a few microseconds; the device-synchronised wall clock
must catch it (the timing flagged, its clock "synchronized_wall") and must leave the honest matmul
to its events. Prints one JSON line with both timings' event and synchronised times per call and
whether each was flagged; exits 0 when the side-stream variant is flagged and the honest matmul is
not, 1 otherwise. Without CUDA it prints {"status": "skipped", "reason": ...} and exits 0.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from harness.profile.cuda_timing import WALL_CLOCK, time_cuda
from harness.profile.timing import TimingResult


def _side_stream_variant(a: torch.Tensor, b: torch.Tensor) -> Callable[[], None]:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())  # the inputs are ready; after this, nobody waits for side

    def call() -> None:
        with torch.cuda.stream(side):
            a @ b

    return call


def _facts(result: TimingResult) -> dict[str, Any]:
    return {"event_us": result.event_us, "synced_us": result.synced_us, "median_us": result.median_us,
            "clock": result.clock, "flagged": result.clock == WALL_CLOCK}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=4096, help="square bf16 matmul size (4096: ~0.2 ms on an H200)")
    parser.add_argument("--budget-s", type=float, default=0.2, help="measuring time per timing")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print(json.dumps({"status": "skipped", "reason": "CUDA is not available on this machine"}))
        return 0
    a = torch.randn(args.n, args.n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(args.n, args.n, device="cuda", dtype=torch.bfloat16)
    honest = time_cuda(lambda: a @ b, budget_s=args.budget_s)
    side = time_cuda(_side_stream_variant(a, b), budget_s=args.budget_s)
    torch.cuda.synchronize()
    facts = {"honest": _facts(honest), "side_stream": _facts(side)}
    ok = facts["side_stream"]["flagged"] and not facts["honest"]["flagged"]
    print(json.dumps({"status": "ok" if ok else "failed", "device": torch.cuda.get_device_name(), "n": args.n,
                      **facts, "side_stream_note": next((n for n in side.notes if "synchronised" in n), None)}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
