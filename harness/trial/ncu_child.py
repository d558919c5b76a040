"""The process ncu profiles: rebuild one trial from its Measure request and run it inside the NVTX range.

    python -m harness.trial.ncu_child JOB.json [--wait] [--owner PID] [--wait-limit S]
                                                 [--launched EPOCH] [--phases OUT.json]

JOB.json is `{"measure": <the trial's Measure (harness.boundary.requests), as the worker got it>, "nvtx_range":
NAME}`. Without --wait it must exist at the start
(a cold trial). With --wait (a session started ahead of its trial, harness.profile.ncu.session) this
process imports torch and the harness, then waits for JOB.json to appear without touching CUDA: until the
job arrives it holds no context on the GPU, and ncu, which starts profiling at the first CUDA call, has
nothing to do. It gives up (exit 3, EXIT_NO_JOB) when its owner (the worker, --owner) or its parent (ncu)
dies, or after --wait-limit seconds.

Each phase's wall time goes to --phases (JSON, written once the imports are done, and again when the
process ends, also on a failure: `failed_in` names the phase): python
and ncu starting (from --launched, the parent's clock just before it started the command), the torch and
harness imports, the wait, the job's decode, the experiment's import, the CUDA context, the workload's
build, the variant's prepare, the warm-up (outside the NVTX range) and the profiled call (inside it: under
ncu, the replay passes). `marks` holds the wall-clock moments the parent compares with its own.

Nothing correctness-related runs here: no reference, no check, no timing; only what the profiled call
needs (the workload, the variant, a few calls to warm it up: WARMUP_CALLS).
A device other than CUDA runs the same phases without CUDA calls (scripts/ncu_trial_cost.py measures
the CPU side that way).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

STARTED = time.time()  # the first moment of this module: python (and ncu) have started by now

EXIT_NO_JOB = 3  # --wait ended without a job: the owner or ncu died, or the wait limit passed
WAIT_LIMIT_S = 3600.0  # a session nobody hands a job to goes away by itself after this
POLL_S = 0.02  # how often a waiting child looks for its job (one stat call)
# Calls before the profiled one when the job asks for a warm-up until stable (the worker's default). ncu
# needs the first-call work out of its range (cuDNN's and cuBLAS's choices, lazy module loading, a Triton
# autotune or torch.compile's compile, the allocator grown), not a stable time: kernel replay flushes the
# caches before every pass anyway, and under ncu every launch is intercepted, so a timing judged stable
# could take warm_up's whole 2 s. Three calls also take CUDA-graph trees (reduce-overhead) through their
# warm-up, record and first replay.
WARMUP_CALLS = 3


class PhaseClock:
    """Wall time per phase, in order, and wall-clock marks the parent can compare with its own clock."""

    def __init__(self, launched: float | None) -> None:
        self.phases: dict[str, float] = {}
        self.marks: dict[str, float] = {"main": STARTED}
        if launched is not None:
            self.marks["launched"] = launched
            self.phases["start"] = round(STARTED - launched, 4)
        self.current: str | None = None

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        self.current = name
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.phases[name] = round(time.perf_counter() - t0, 4)
        self.current = None

    def mark(self, name: str) -> None:
        self.marks[name] = time.time()

    def record(self, **extra: Any) -> dict[str, Any]:
        return {"pid": os.getpid(), "phases": dict(self.phases), "marks": dict(self.marks), **extra}


def owner_alive(pid: int | None) -> bool:
    """Whether process `pid` still runs (None: no owner to watch). A zombie counts as dead: its parent
    has not reaped it yet, but it will never hand a job."""
    if pid is None:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, another user's: pid reuse, but not ours to judge
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            return handle.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except (OSError, IndexError):  # no /proc (not Linux): kill(0) said it exists
        return True


def wait_for_job(path: Path, owner: int | None, limit_s: float, poll_s: float = POLL_S) -> str | None:
    """None once `path` exists; else why no job will come: the owner or this process's parent died,
    or `limit_s` passed."""
    parent = os.getppid()
    deadline = time.monotonic() + limit_s
    while not path.exists():
        if not owner_alive(owner):
            return f"owner {owner} died"
        if os.getppid() != parent:
            return f"parent {parent} died"
        if time.monotonic() > deadline:
            return f"no job within {limit_s:g} s"
        time.sleep(poll_s)
    return None


def _sync_for(device: str) -> Any:
    """What waits for the device's queued work: CUDA's synchronize, nothing on a CPU."""
    import torch

    return torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)


def run_trial(written: dict[str, Any], clock: PhaseClock) -> None:
    """The trial's callable, rebuilt from its Measure: warmed up outside the NVTX range, then one call inside
    it (what ncu profiles)."""
    import torch

    from harness.api.experiment import load_experiment
    from harness.boundary.framing import typed
    from harness.boundary.requests import Measure
    from harness.trial import torch_state
    from harness.trial.build import build_trial_workload, prepare_baseline

    with clock.phase("job_decode"):
        request: Measure = typed(Measure, written["measure"], "ncu job")
        spec = request.spec
        nvtx_range = str(written["nvtx_range"])
        card = spec.load_card()  # as the run has it: no report is re-read or re-linted here
    with clock.phase("experiment_import"):
        experiment = load_experiment(spec.experiment_module)
    cuda = spec.device.startswith("cuda")
    sync = _sync_for(spec.device)
    if cuda:  # the context on its own: under ncu its creation carries ncu's set-up too
        with clock.phase("cuda_context"):
            torch.empty(1, device=spec.device)
            sync()
    with clock.phase("workload_build"):
        workload, carried = build_trial_workload(spec, card, experiment)
    # The settings the worker measures under (the card's math mode over the pinned defaults): without them a
    # float32 card's kernels here could run another math mode than the worker's timing did.
    with torch_state.pinned():
        with clock.phase("variant_prepare"):
            if request.baseline:
                fn = prepare_baseline(spec, workload, experiment)[0].fn
            else:
                fn = experiment.prepare(request.variant, carried, request.params).fn
        before_call = workload.before_call or (lambda: None)  # an in-place replay's target restored, unprofiled
        with clock.phase("warm_up"):  # under ncu, outside the NVTX range: nothing of it is profiled
            warmup = spec.timing.warmup
            for _ in range(WARMUP_CALLS if warmup is None else warmup):
                before_call()
                fn()
            before_call()
            sync()
        with clock.phase("profiled_call"):
            if cuda:
                torch.cuda.nvtx.range_push(nvtx_range)
            fn()
            sync()
            if cuda:
                torch.cuda.nvtx.range_pop()


def _die_with_ncu() -> None:
    """SIGKILL this process when its parent (ncu) dies: the group kill of the runner reaches it
    too, this covers a profiled program that ncu started outside the group."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass


def _arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m harness.trial.ncu_child")
    parser.add_argument("job", type=Path, help="the trial's job (JSON); with --wait, where it will appear")
    parser.add_argument("--wait", action="store_true", help="import first, then wait for JOB to appear")
    parser.add_argument("--owner", type=int, default=None, help="give up waiting when this process dies")
    parser.add_argument("--wait-limit", type=float, default=WAIT_LIMIT_S, help="give up waiting after S s")
    parser.add_argument("--launched", type=float, default=None, help="the parent's time.time() at the start")
    parser.add_argument("--phases", type=Path, default=None, help="write each phase's wall time here (JSON)")
    return parser.parse_args(argv)


def _write(path: Path | None, record: dict[str, Any]) -> None:
    if path is None:
        return
    partial = path.with_name(path.name + ".part")
    partial.write_text(json.dumps(record, indent=1), encoding="utf-8")
    os.replace(partial, path)  # the parent never reads half a record


def _serve(args: argparse.Namespace, clock: PhaseClock) -> dict[str, Any]:
    """Imports, the wait, the trial: what the phase record says beyond the phases."""
    if args.wait and not owner_alive(args.owner):  # before seconds of imports for nobody
        return {"no_job": f"owner {args.owner} died"}
    with clock.phase("torch_import"):
        import torch
    with clock.phase("harness_import"):
        import harness.api.experiment  # noqa: F401  (what run_trial imports, timed apart from the job's own work)
        import harness.boundary.framing  # noqa: F401
        import harness.trial.build  # noqa: F401
        import harness.trial.torch_state  # noqa: F401
    # Frozen out of the collector: the exit's collection, which ncu waits for before it writes the report,
    # no longer walks torch's objects (0.47 -> 0.16 s on a 2-core CPU).
    gc.freeze()
    clock.mark("ready")
    # Nothing imported so far may touch the GPU: a waiting session must hold nothing there.
    extra: dict[str, Any] = {"cuda_initialized_before_job": bool(torch.cuda.is_initialized())}
    _write(args.phases, clock.record(prestarted=bool(args.wait), **extra))  # ready: the record so far
    if args.wait:
        with clock.phase("wait"):
            why = wait_for_job(args.job, args.owner, args.wait_limit)
        if why is not None:
            return {**extra, "no_job": why}
    clock.mark("job_seen")
    with open(args.job, encoding="utf-8") as handle:
        written = json.load(handle)
    run_trial(written, clock)
    return extra


def main(argv: list[str]) -> int:
    args = _arguments(argv)
    _die_with_ncu()
    clock = PhaseClock(args.launched)
    extra: dict[str, Any] = {"prestarted": bool(args.wait)}
    try:
        extra.update(_serve(args, clock))
    except BaseException:
        extra["failed_in"] = clock.current
        raise
    finally:
        clock.mark("done")
        _write(args.phases, clock.record(**extra))
    return EXIT_NO_JOB if "no_job" in extra else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
