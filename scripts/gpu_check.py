#!/usr/bin/env python3
"""The GPU check: the GPU path end to end in one device command of at most 7 minutes, with no network.

    scripts/gpu_check.sh [--dry-run] [--steps a,b,...] [--out DIR] [--deadline S] [--plan]

Steps, in order of value (`--plan` prints them with their budgets and what each budget is made of),
each recorded in summary.json with its status (ok, failed, timeout, skipped), seconds, one line of
result and its headline numbers:

  machine            nvidia-smi, driver, torch/CUDA/triton/cupy/ncu versions, SM clock -> versions.txt
  install            the wheels of .whl/ (scripts/device_wheels.sh) with --no-index --no-deps --target,
                     every requirement checked (versions too), every module of the project imported
  ncu_preflight      ncu on one tiny kernel (does it profile here at all?) and `ncu --query-metrics`:
                     every metric the harness asks for checked on this chip, a missing one swapped for
                     an alternative or dropped with a note (the harness gets the list)
  reproduction_ncu   experiment=reprofile under ncu at scale 1 on one card per op kind (linear, conv3d,
                     attention, cast) and the five cards that carry the report's time, each built in its own
                     dtype, then `python -m harness.report reproduce` on the baseline: a verdict per card
                     (REPRODUCED, OTHER_KERNELS, OTHER_SPEED, NOT_COMPARABLE) -> reproduction.md
  wins               vae_bf16 (bf16 x memory format) and dit_small_m_batching (batched k=20) on their card at
                     scale 1 under the CUDA trace: each one's confirmed verdict and adopted variant
  channels_last_ncu  vae_channels_last under ncu on one conv3d card, one trial: a confirmed verdict, and
                     which layout conversions (nchwToNhwc, nhwcToNchw, convertTensor, ...) the baseline and the
                     variant run, with their time and bytes
  aa_timing          an A/A pair through the paired-rounds verdict (8 rounds), CUDA events, SM clock per round
  stalls_ncu         experiment=stall_breakdown under ncu on one unresolved card: the dominant warp stall
  fixture            the smallest .ncu-rep and its raw-page CSV into $OUT, both parsed back (future fixtures)
  gpu_tests          the gpu- and ncu-marked tests of the files that hold them (less the ncu app test that
                     reproduction_ncu repeats): Triton, CuPy, SDPA, the CUDA timer and its side-stream check
  plants             tests/app/test_plants.py on CUDA (HARNESS_PLANTS_DEVICE=cuda), where it supports that
  capture            examples/capture_model.py captured, its 2 hottest groups re-profiled under ncu
  conv_kernels_ncu   vae_conv_kernels under ncu on the conv card: cuDNN's kernels and one Triton tile
  chunk_trace        vae_decode_chunk and dit_block on their 480 chunk card at scale 1 under the CUDA trace,
                     one cheap variant each (channels_last_3d; modulation_once: nothing compiled)
  auto_trace         experiment=auto under the CUDA trace on the cast card: stall_breakdown and output_cast
  pack               (always) runs.tgz and summary.json

Budgets. Each step's device budget is built from what it runs (Work: harness starts, ncu trials, traced
trials, confirm rounds, other seconds) at the costs below, measured on the first H200 run; a step is
planned while its budget still fits one global deadline (--deadline, 420 s) less the pack's reserve, in
order of value, so the planned budgets add up to at most the deadline (today every step is planned). A
step that does not fit is not planned: it runs only where the planned ones leave it its whole budget
(steps skipped, or done early). At run time a step gets its budget plus the time the earlier steps saved
(at most twice its budget), less what the later planned steps still need.

Partial results. Each step runs in its own process group, its output going to its log, and is killed
with everything it started (ncu and its target included) when its time is up. Every 10 s of a step,
and when it fails, runs out of time or the check is interrupted, summary.json gets what the step has
done: the cards the run finished (as its run.json counts them: in its best.json, rewritten after each
card) and those with only their baseline measured (time, class, the report's), their trials and
confirmed verdicts, read from the run folder's trials/<card>/ files; for pytest, every test finished.

$OUT (default ./gpu_check_out) gets at most 8 files, each under 16 MiB: gpu_check.log, summary.json,
versions.txt, runs.tgz (every run directory, step log and helper output), reproduction.md, and one small
fixture_<card>.ncu-rep with its fixture_<card>_raw_page.csv.

--dry-run (also what runs on a machine without CUDA): the steps that need CUDA or ncu are skipped
with the reason; the rest really runs: the wheels install as a set (--no-index --no-deps --target) into
a scratch environment of pyenv's Python 3.12 that stands in for the GPU machine's image (the
preinstalled packages the wheels need, from the package index, cached), the torch-free modules import
there; the experiments run on the CPU with this environment (device=cpu profiler=cpu, small scale),
with budgets measured on a 2-core machine; deadlines, partial results and packing as on the device.

Standard library only at import (the harness modules it uses, harness.profile.ncu's finder and probe,
are too): it runs before anything is installed.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import functools
import json
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # harness.profile.ncu (standard library only) before anything is installed
WHEELS = REPO / ".whl"
DEFAULT_DEADLINE_S = 420.0  # one device command: 7 minutes of the 10 a command may run
PACK_RESERVE_S = 6  # the last pack (runs.tgz, summary.json), kept back: 4.8 s on the first H200 run
MIN_STEP_S = 8.0  # a planned step cut this short by earlier overruns is skipped rather than started
SLACK_FACTOR = 2.0  # a step may run up to this many times its budget on time earlier steps saved
PROGRESS_EVERY_S = 10.0  # how often a running step's finished work is written into summary.json
SIDE_TOKEN = "-side"  # appended to the check's token for a process that runs beside a step's commands
MAX_OUT_FILES = 8
MAX_FILE_BYTES = 15 * 2**20  # under the 16 MiB a returned file may weigh
REPORTS_BYTES = 8 * 2**20  # the kept .ncu-rep files that go into runs.tgz
CACHE = Path(os.environ.get("GPU_CHECK_CACHE", Path.home() / ".cache" / "harness-gpu-check"))

# What the device budgets are built from: the first H200 run (/work/shared/gpu_runs/2026-12-04/summary.json,
# each step's `seconds` and the harness's own `phases` from its run.json; H200, 16 cores).
# `python -m harness` less its trials: Hydra, Optuna, the report, the worker's start (worker_startup_s 2.6 to
# 4.3 s) and the run's files. A step's seconds less its profiling_s: 8.4 s (reprofile_ncu), 7.8 s (stalls_ncu).
HARNESS_START_S = 8.0
# One ncu trial, its report read: reprofile_ncu's profiling_s was 20.6 s for 4 baselines (one cold, three started
# ahead) and stalls_ncu's 7.3 s for one cold baseline; 4 j + c = 20.6 and j + c = 7.3 give j = 4.4 s ...
NCU_JOB_S = 4.5
# ... and c = 2.9 s more for the first of each harness start, which starts cold (ncu_cost's own trials: 7.9 s
# cold, 4.3 s started ahead).
NCU_START_S = 2.9
# One trial under the CUDA trace (its float64 reference, timing, one traced call, the checks): reproduction's
# 21.1 s for one harness start and five baselines at scale 1, (21.1 - 8.0) / 5 = 2.6 s.
TRACE_TRIAL_S = 2.7
# What a search adds to its trials: the best variant's paired confirm rounds and the card files it rewrites.
# channels_last_ncu's 25.6 s less a start and its two ncu trials left 5.7 s; conv_kernels_ncu's 24.9 s, 5.0 s.
CONFIRM_S = 5.7
# A chunk card's set-up, which no other card pays: the decoder chunk or the DiT block built and its float64
# reference (setup_s of chunk_vae_decode_chunk and chunk_dit_block: 13.2 s each).
CHUNK_SETUP_S = 13.2

# Cards (ids of the shipped report).
PER_OP_KIND = [  # the smallest card of each op kind whose report time is known
    "dit-480-linear-m3n5120k256-ff7b7c",
    "vae-480-conv3d-16to16k111t3-9507c7",
    "attention-704-fa3-cross-512of512-55bfe1",
    "output-480-cast-f18982",
]
CONV_WITH_TRANSPOSES = "vae-480-conv3d-96to3k333t3-842ecd"  # nchwToNhwc x2 + nhwcToNchw in the report
UNRESOLVED_LINEAR = "dit-480-linear-m4680n5120k144-500175"
REPRODUCTION = [  # the cards that carry the report's time
    "dit-480-linear-m4680n5120k5120-8f26a7",  # compute-bound GEMM
    "dit-480-linear-m3n5120k5120-d55d81",  # M=3: weight streaming
    "vae-480-conv3d-96to3k333t3-842ecd",  # conv3d with layout transposes
    "attention-480-fa3-self-4680of29640-b97006",  # flash attention
    "output-480-cast-f18982",  # the output cast
]
REPRODUCTION_NCU = list(dict.fromkeys([*PER_OP_KIND, *REPRODUCTION]))  # 8 cards: the cast is in both
# The verdicts' command (another engineer's): the step is skipped, saying so, while the CLI lacks it.
CARDS_CLI = REPO / "harness" / "report" / "cli.py"
REPRODUCE_PARSER = re.compile(r"add_parser\(\s*[\"']reproduce[\"']")
# The wins a user comes for, each on its card at scale 1 under the CUDA trace: (experiment, card, what of its
# space runs, trials). vae_bf16's bf16 in both memory formats; dit_small_m_batching's largest batch (k=20: every
# distinct timestep of four chunks embedded at once), the one its whole search adopts (the CuPy GEMV's
# correctness is gpu_tests' test_gemv_on_gpu).
WINS = [
    ("vae_bf16", "vae-480-conv3d-96to96k333t6-13c157", ["experiment.space.low_precision.dtype=[bfloat16]"], 2),
    ("dit_small_m_batching", "dit-480-linear-m3n30720k5120-c91997",
     ["~experiment.space.gemv", "experiment.space.batched.k=[20]"], 1),
]
AUTO_CARDS = [  # its experiments: stall_breakdown (baseline only) and output_cast (a Triton vectorized kernel)
    "output-480-cast-f18982",
]
# A model outside the package, captured (python -m harness.capture): its CAPTURE_TOP hottest groups re-profiled.
CAPTURE_MODEL = "examples.capture_model:make"
CAPTURE_TOP = 2
# Files other engineers' steps run; each step is skipped, saying so, while its file is missing.
PLANTS_TESTS = REPO / "tests" / "app" / "test_plants.py"
PLANTS_DEVICE_VAR = "HARNESS_PLANTS_DEVICE"
# gpu_tests leaves out what a step of the check already runs (each with the step that does).
COVERED_BY_STEPS = {
    # experiment=reprofile under ncu, one card per op kind: reproduction_ncu's run, on more cards at scale 1.
    "tests/app/test_gpu_paths.py::test_ncu_backend_reprofiles_every_op_kind": "reproduction_ncu",
}
GPU_MARK = re.compile(r"\bmark\.(gpu|ncu)\b")
# A pytest -v line of a finished test: what a killed pytest step still reports.
PYTEST_LINE = re.compile(r"^(\S+::\S+)\s+(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b", re.MULTILINE)

# Import names whose distribution is spelled otherwise (for the import sweep's verdicts).
DIST_OF_MODULE = {
    "yaml": "pyyaml", "PIL": "pillow", "pynvml": "nvidia-ml-py", "cupy": "cupy-cuda13x", "sklearn": "scikit-learn",
    "cv2": "opencv-python-headless", "dateutil": "python-dateutil", "google": "protobuf", "_pytest": "pytest",
    "attr": "attrs", "typing_extensions": "typing-extensions", "ncu_report": "ncu-report",
}


# ---------------------------------------------------------------------------------------------
# Steps and their budgets


@dataclass(frozen=True)
class Work:
    """What a step's device form runs, in the units its budget is counted in."""

    starts: int = 0  # `python -m harness` processes
    ncu_trials: int = 0  # trials (baselines included) under profiler=ncu
    ncu_cold: int | None = None  # of them, started cold; None: one per harness start (the rest were started ahead)
    trace_trials: int = 0  # trials (baselines included) under the CUDA trace
    confirms: int = 0  # searches whose best variant gets paired confirm rounds
    other_s: float = 0.0  # everything else, in seconds ...
    other: str = ""  # ... and what it is

    @property
    def cold_ncu_trials(self) -> int:
        return min(self.ncu_trials, self.starts) if self.ncu_cold is None else self.ncu_cold

    def seconds(self) -> float:
        return (self.starts * HARNESS_START_S + self.ncu_trials * NCU_JOB_S + self.cold_ncu_trials * NCU_START_S
                + self.trace_trials * TRACE_TRIAL_S + self.confirms * CONFIRM_S + self.other_s)

    def text(self) -> str:
        parts = [f"{count} {what}{'s' if count > 1 else ''} x {cost:g} s" for count, what, cost in (
            (self.starts, "harness start", HARNESS_START_S), (self.ncu_trials, "ncu trial", NCU_JOB_S),
            (self.cold_ncu_trials, "cold ncu start", NCU_START_S), (self.trace_trials, "traced trial", TRACE_TRIAL_S),
            (self.confirms, "confirmation", CONFIRM_S)) if count]
        if self.other_s:
            parts.append(f"{self.other_s:g} s {self.other}")
        return " + ".join(parts)


@dataclass(frozen=True)
class Step:
    name: str
    work: Work  # the device form's
    cpu_budget_s: int  # its CPU form (dry run), measured on a 2-core machine; 0: no CPU form
    needs: tuple[str, ...]  # "cuda", "ncu" (the device form), "harness" (the installed wheels)
    run: Callable[[Check, Step, float], Outcome]  # (check, step, seconds it may take)
    doc: str = ""
    unmet: Callable[[], str | None] | None = None  # why it cannot run at all (a file it runs is missing)

    @property
    def budget_s(self) -> int:
        return math.ceil(self.work.seconds())

    def budget(self, device_form: bool) -> int:
        return self.budget_s if device_form else self.cpu_budget_s


@dataclass(frozen=True)
class Planned:
    step: Step
    budget_s: int  # in the form planned for; 0: no such form
    planned: bool  # inside the deadline


def make_plan(steps: list[Step], device_form: bool, deadline_s: float) -> list[Planned]:
    """The steps in order of value, each planned while its budget still fits the deadline less the
    pack's reserve: the planned budgets and the reserve add up to at most the deadline."""
    room = deadline_s - PACK_RESERVE_S
    plan = []
    for step in steps:
        budget = step.budget(device_form)
        fits = 0 < budget <= room
        if fits:
            room -= budget
        plan.append(Planned(step, budget, fits))
    return plan


def plan_total_s(plan: list[Planned]) -> int:
    return sum(p.budget_s for p in plan if p.planned) + PACK_RESERVE_S


def plan_lines(plan: list[Planned], device_form: bool, deadline_s: float) -> list[str]:
    """--plan: a line per step (its budget and what it is made of), the pack's, then the total."""
    lines = [f"{'step':18} {'budget':>7}  {'device form: what the budget is made of' if device_form else 'CPU form'}"]
    for entry in plan:
        if entry.budget_s == 0:
            lines.append(f"{entry.step.name:18} {'-':>7}  needs CUDA: skipped in this form")
            continue
        what = entry.step.work.text() if device_form else "measured on a 2-core machine"
        if not entry.planned:
            what = f"not planned: past the deadline; runs only on time the planned steps leave ({what})"
        lines.append(f"{entry.step.name:18} {entry.budget_s:5d} s  {what}")
    lines.append(f"{'pack':18} {PACK_RESERVE_S:5d} s  runs.tgz and summary.json, kept back from the deadline")
    lines.append(f"total {plan_total_s(plan)} s of deadline {deadline_s:g} s")
    return lines


@dataclass
class Outcome:
    status: str  # ok | failed | timeout | skipped
    result: str  # one line
    numbers: dict[str, Any] = field(default_factory=dict)


class StepFailed(Exception):
    """A step that cannot go on: its status and one line."""

    def __init__(self, result: str, status: str = "failed", numbers: dict[str, Any] | None = None):
        super().__init__(result)
        self.outcome = Outcome(status, result, numbers or {})


@dataclass
class Proc:
    returncode: int
    timed_out: bool
    seconds: float
    output: str


class Check:
    def __init__(self, args: argparse.Namespace):
        from harness.profile.ncu.command import find_ncu

        self.started = time.monotonic()
        self.deadline = self.started + args.deadline
        self.out = Path(args.out).resolve()
        self.out.mkdir(parents=True, exist_ok=True)
        self.work = Path(args.work).resolve() if args.work else Path(
            os.environ.get("GPU_CHECK_WORK") or (Path("/tmp") / f"gpu_check_work-{os.getpid()}"))
        if self.work.exists():
            shutil.rmtree(self.work)
        (self.work / "runs").mkdir(parents=True)
        (self.work / "logs").mkdir()
        self.site = self.work / "site"
        self.token = uuid.uuid4().hex
        self.requested_dry_run = args.dry_run
        self.dry_run = args.dry_run
        self.python = os.environ.get("GPU_CHECK_PYTHON") or sys.executable
        self.cuda = False
        self.ncu = find_ncu()  # the harness's own search: PATH, NCU_HOME, /opt/nvidia/nsight-compute/*/
        self.ncu_ok: bool | None = None  # None: not probed
        self.ncu_reason = ""
        self.metrics_file: Path | None = None
        self.metric_query: subprocess.Popen[bytes] | None = None  # `ncu --query-metrics`, started ahead
        self.installed = False
        self.step_timeout = 0.0  # the running step's time: its budget, more on saved time, less near the deadline
        self.current: subprocess.Popen[bytes] | None = None
        self.step_dirs: list[Path] = []  # the running step's harness run folders (what it has finished)
        self.progress: Callable[[], None] | None = None  # called every PROGRESS_EVERY_S while a step runs
        self.record: dict[str, Any] | None = None  # the running step's entry in summary.json
        self.reproduction: dict[str, str] = {}  # reproduction.md's sections, by the step that wrote each
        self.summary: dict[str, Any] = {
            "tool": "scripts/gpu_check.sh", "argv": sys.argv[1:], "started": _now(), "deadline_s": args.deadline,
            "mode": "dry-run" if args.dry_run else "device", "ncu": self.ncu, "steps": [], "out_files": [],
        }
        self._clear_out()
        self.log_file = (self.out / "gpu_check.log").open("a", encoding="utf-8", errors="replace")

    # -- bookkeeping

    def _clear_out(self) -> None:
        ours = re.compile(r"^(gpu_check\.log|summary\.json|versions\.txt|runs\.tgz|reproduction\.md|fixture_.*)$")
        for path in self.out.iterdir():
            if path.is_file() and ours.match(path.name):
                path.unlink()

    def say(self, text: str) -> None:
        line = f"[{time.monotonic() - self.started:6.1f}s] {text}"
        print(line, flush=True)
        self.log_file.write(line + "\n")
        self.log_file.flush()

    def left(self) -> float:
        return self.deadline - time.monotonic()

    @property
    def device_form(self) -> bool:
        return self.cuda and not self.dry_run

    def write_summary(self) -> None:
        self.summary["seconds"] = round(time.monotonic() - self.started, 1)
        self.summary["out_files"] = sorted(p.name for p in self.out.iterdir() if p.is_file())
        _write_json(self.out / "summary.json", self.summary)

    # -- processes

    def env(self, harness: bool = True, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        paths = [str(REPO)]
        if harness and not self.dry_run and self.site.is_dir():
            paths.insert(0, str(self.site))
        if env.get("PYTHONPATH"):
            paths.append(env["PYTHONPATH"])
        env.update(PYTHONPATH=os.pathsep.join(paths), PYTHONUNBUFFERED="1", HYDRA_FULL_ERROR="1",
                   GPU_CHECK_TOKEN=self.token)
        env.update(extra)
        return env

    def run(self, argv: list[str], timeout: float, log: Path | None = None, env: dict[str, str] | None = None,
            cwd: Path = REPO, echo: bool = False) -> Proc:
        """Run `argv` in a process group of its own, its output appended to `log`; on `timeout` it dies
        with everything it started. The output goes to the file, not a pipe, so that what a killed
        step printed is there to read, and no process left outside the group can hold the step open."""
        started = time.monotonic()
        self.log_file.write(f"$ {shlex.join(argv)}\n")
        self.log_file.flush()
        target = log or self.work / "logs" / "misc.log"
        offset = target.stat().st_size if target.exists() else 0
        with target.open("ab") as sink:
            try:
                proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT,
                                        cwd=cwd, env=env or self.env(), start_new_session=True)
            except OSError as exc:
                return Proc(127, False, 0.0, f"cannot start {argv[0]}: {exc}")
            self.current = proc
            timed_out = False
            end = started + max(1.0, timeout)
            try:
                while True:
                    try:
                        proc.wait(timeout=max(0.0, min(PROGRESS_EVERY_S, end - time.monotonic())))
                        break
                    except subprocess.TimeoutExpired:
                        if time.monotonic() >= end:
                            timed_out = True
                            self.kill(proc)
                            break
                        if self.progress is not None:
                            self.progress()
            finally:
                self.current = None
                self.sweep()
        with target.open("rb") as written:
            written.seek(offset)
            text = written.read().decode("utf-8", errors="replace")
        self.log_file.write(text if len(text) < 200_000 else text[:100_000] + "\n[...]\n" + text[-100_000:])
        if echo:
            print(text, end="", flush=True)
        self.log_file.write(f"# exit {proc.returncode}{' (timed out)' if timed_out else ''} after "
                            f"{time.monotonic() - started:.1f} s\n")
        self.log_file.flush()
        returncode = proc.returncode if proc.returncode is not None else -signal.SIGKILL
        return Proc(returncode, timed_out, time.monotonic() - started, text)

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=3)
        except subprocess.TimeoutExpired:
            pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):  # one stuck in the driver is left to the sweep
            proc.wait(timeout=10)

    def sweep(self, side_too: bool = False) -> None:
        """SIGKILL every process still carrying this check's token (one that left the step's group);
        `side_too`: also those of a step's side process (SIDE_TOKEN), which outlive the commands beside it."""
        needle = f"GPU_CHECK_TOKEN={self.token}".encode()
        for entry in Path("/proc").glob("[0-9]*"):
            pid = int(entry.name)
            if pid == os.getpid():
                continue
            try:
                found = [v for v in (entry / "environ").read_bytes().split(b"\0") if v.startswith(needle)]
                if needle in found or (side_too and found):
                    os.kill(pid, signal.SIGKILL)
            except (OSError, ValueError):
                continue

    def start_metric_query(self) -> subprocess.Popen[bytes]:
        """`ncu --query-metrics` in the background (it took 16 s on the H200, the tiny kernel 2.3 s): started
        with the check, it runs beside machine and install. It carries a side token: the sweep after each
        step's commands leaves it running."""
        if self.metric_query is None:
            assert self.ncu is not None
            env = {**self.env(harness=False), "GPU_CHECK_TOKEN": f"{self.token}{SIDE_TOKEN}"}
            with (self.work / "logs" / "ncu_query_metrics.txt").open("wb") as sink:
                self.metric_query = subprocess.Popen(
                    [self.ncu, "--query-metrics", "--query-metrics-mode", "all"], stdout=sink,
                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        return self.metric_query

    def stop_metric_query(self) -> None:
        if self.metric_query is not None and self.metric_query.poll() is None:
            self.kill(self.metric_query)
        self.sweep(side_too=True)

    # -- the harness

    def harness_run(self, step: Step, name: str, overrides: list[str], timeout: float) -> tuple[Proc, Path]:
        run_dir = self.work / "runs" / name
        self.step_dirs.append(run_dir)
        argv = [self.python, "-m", "harness", f"hydra.run.dir={run_dir}", *overrides]
        return self.run(argv, timeout, log=self.work / "logs" / f"{step.name}.log"), run_dir

    def common(self, device_form: bool) -> list[str]:
        if device_form:
            return ["device=cuda", "timing.budget_s=0.1", "timing.drift_budget_s=0.05", "timing.confirm_rounds=3"]
        return ["device=cpu", "profiler=cpu", "workload.scale=0.1", "timing.cpu_threads=1", "timing.budget_s=0.05",
                "timing.drift_budget_s=0.02", "timing.confirm_rounds=2"]

    def ncu_overrides(self, step: Step, keep: str, timeout: float) -> list[str]:
        metrics = str(self.metrics_file) if self.metrics_file else "auto"
        return ["profiler=ncu", f"profiler.keep_dir={self.work / 'ncu_reports' / keep}",
                f"profiler.available_metrics={metrics}", f"profiler.deadline_s={max(20, int(timeout * 0.8))}"]


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _write_json(path: Path, obj: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1, default=str) + "\n", encoding="utf-8")
    tmp.replace(path)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _last_line(text: str, pattern: str = "") -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and (not pattern or re.search(pattern, ln))]
    return lines[-1][:300] if lines else ""


def _error_line(text: str) -> str:
    """The line of a failed run that says why."""
    for pattern in (r"^error: ", r"Error: ", r"Error\b", r"==ERROR==", r"Traceback"):
        line = _last_line(text, pattern)
        if line:
            return line
    return _last_line(text) or "no output"


def _ok_or_fail(proc: Proc, what: str) -> None:
    if proc.timed_out:
        raise StepFailed(f"{what}: killed at its time limit ({proc.seconds:.0f} s)", "timeout")
    if proc.returncode != 0:
        raise StepFailed(f"{what}: exit {proc.returncode}: {_error_line(proc.output)}")


def _cards(path: Path) -> list[dict[str, Any]]:
    data = _read_json(path)
    return list(data.get("cards") or []) if isinstance(data, dict) else []


def _kernel_names(card: dict[str, Any]) -> list[str]:
    return [str(k.get("kernel") or k.get("name") or "") for k in card.get("kernels") or []]


def _conversions(cards: list[dict[str, Any]]) -> Any:
    """The layout-conversion kernels of these cards (every one cuDNN or cuTENSOR runs), with time and bytes."""
    from harness.cards.layout_conversions import LayoutConversions, is_layout_conversion

    kernels = [k for c in cards for k in c.get("kernels") or []
               if is_layout_conversion(_kernel_names({"kernels": [k]})[0])]

    def total(*fields: str) -> float | None:
        values = [(k.get("metrics") or {}).get(f) for k in kernels for f in fields]
        return None if any(not isinstance(v, (int, float)) for v in values) else float(sum(values))

    return LayoutConversions(_kernel_names({"kernels": kernels}), total("dur_us"),
                             total("dram_read_mb", "dram_write_mb"))


def _short(card_id: str) -> str:
    """The card id's hash (`...-842ecd` -> 842ecd); a sub-run's prefix (`auto/sub/...`) is kept."""
    head, _, card = card_id.rpartition("/")
    short = card.rsplit("-", 1)[-1] if re.search(r"-[0-9a-f]{6}$", card) else card
    return f"{head}/{short}" if head else short


def _rel(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


# ---------------------------------------------------------------------------------------------
# What a step has finished, read back from its run folders or its log (also when it was killed)


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
    run = _read_json(run_dir / "run.json") or {}
    listed = [*(run.get("cards") or []), *((run.get("stopped") or {}).get("cards_finished") or [])]
    return {str(c.get("id")) for c in _cards(run_dir / "best.json")} | {str(c) for c in listed}


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
            base = next(iter(_cards(folder / "baseline.json")), None)
            if base is None:  # its baseline is not measured yet
                continue
            report = base.get("report_card") or {}
            entry: dict[str, Any] = {
                "finished": folder.name in finished,
                "here_us": _per_call_us(base), "report_us": report.get("summed_kernel_us"),
                "class": base.get("primary"), "report_class": report.get("primary"),
                "source": base.get("metrics_source"), "kernels": len(base.get("kernels") or []),
                "trials": {path.stem[len("trial_"):]: _per_call_us(card) for path in sorted(folder.glob("trial_*.json"))
                           for card in _cards(path)[:1]},
            }
            ncu = _ncu_costs(folder)
            if ncu:
                entry["ncu"] = ncu
            tried = next(iter(_cards(folder / "tried.json")), None)
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
        for card in _cards(path)[:1]:
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
            text = _short(card)
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
    phases = (_read_json(run_json) or {}).get("phases") or {}
    return {k: round(v, 1) if isinstance(v, float) else v for k, v in phases.items()}


def run_phases(run_dir: Path) -> dict[str, Any]:
    """A finished harness run's own account of its time (run.json): what the budgets' costs are checked
    against (worker start, profiling, set-up and measurement seconds); experiment=auto's per sub-run."""
    return _phases(run_dir / "run.json") or {sub.name: found for sub in sorted(run_dir.glob("*/"))
                                             if (found := _phases(sub / "run.json"))}


# ---------------------------------------------------------------------------------------------
# machine


def step_machine(check: Check, step: Step, timeout: float) -> Outcome:
    end = time.monotonic() + timeout
    lines = [f"# gpu_check {check.summary['mode']} {_now()}", f"repo: {REPO}"]
    numbers: dict[str, Any] = {}

    def capture(title: str, argv: list[str]) -> str:
        if shutil.which(argv[0]) is None and not os.path.exists(argv[0]):
            lines.extend([f"\n## {title}", f"({argv[0]} not found)"])
            return ""
        proc = check.run(argv, min(15.0, max(2.0, end - time.monotonic())), env=check.env(harness=False))
        lines.extend([f"\n## {title}: {shlex.join(argv)}", proc.output.rstrip()])
        return proc.output if proc.returncode == 0 else ""

    capture("system", ["uname", "-a"])
    smi = capture("nvidia-smi", ["nvidia-smi"])
    fields = "name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw"
    query = capture("GPU and clocks", ["nvidia-smi", f"--query-gpu={fields}", "--format=csv"])
    if check.ncu:
        capture("ncu", [check.ncu, "--version"])
    probe = (
        "import json, platform, sys\n"
        "out = {'python': platform.python_version(), 'executable': sys.executable}\n"
        "for name in ('torch', 'triton', 'cupy', 'numpy', 'scipy', 'optuna', 'hydra', 'omegaconf', 'pynvml'):\n"
        "    try:\n"
        "        module = __import__(name)\n"
        "        out[name] = getattr(module, '__version__', 'installed')\n"
        "    except Exception as exc:\n"
        "        out[name] = None\n"
        "try:\n"
        "    import torch\n"
        "    out['cuda_available'] = torch.cuda.is_available()\n"
        "    out['torch_cuda'] = torch.version.cuda\n"
        "    out['cudnn'] = torch.backends.cudnn.version()\n"
        "    if torch.cuda.is_available():\n"
        "        p = torch.cuda.get_device_properties(0)\n"
        "        out.update(device=p.name, sm_count=p.multi_processor_count, cc=f'{p.major}.{p.minor}',\n"
        "                   memory_gib=round(p.total_memory / 2**30, 1))\n"
        "except Exception as exc:\n"
        "    out['cuda_available'] = False\n"
        "    out['torch_error'] = repr(exc)\n"
        "print('PROBE ' + json.dumps(out))\n"
    )
    # The probe decides the mode of every later step: it gets its minute even past the step's budget.
    proc = check.run([check.python, "-c", probe], max(60.0, end - time.monotonic()), env=check.env(harness=False))
    found = next((ln[6:] for ln in proc.output.splitlines() if ln.startswith("PROBE ")), None)
    info = json.loads(found) if found else {}
    lines.extend(["\n## python (the harness's interpreter)", json.dumps(info, indent=1)])
    if WHEELS.is_dir():
        lines.extend(["\n## carried wheels (.whl/)", *sorted(p.name for p in WHEELS.glob("*.whl"))])
    (check.out / "versions.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    check.cuda = bool(info.get("cuda_available")) and not check.requested_dry_run
    if not check.cuda and not check.requested_dry_run:
        check.say("no CUDA device seen by torch: running as --dry-run (the CPU forms; CUDA/ncu steps skipped)")
        check.dry_run = True
        check.summary["mode"] = "dry-run (no CUDA)"
    numbers.update({k: info.get(k) for k in ("device", "torch", "torch_cuda", "triton", "cupy", "python", "sm_count")})
    numbers["ncu"] = check.ncu
    clocks = [ln for ln in query.splitlines()[1:] if ln.strip()]
    if clocks:
        numbers["nvidia_smi"] = clocks[0]
    driver = re.search(r"Driver Version:\s*(\S+)", smi)
    numbers["driver"] = driver.group(1) if driver else None
    gpu = info.get("device") or "no GPU"
    result = (f"{gpu}, driver {numbers['driver'] or '-'}; torch {info.get('torch')} (CUDA {info.get('torch_cuda')}), "
              f"triton {info.get('triton') or '-'}, cupy {info.get('cupy') or '-'}, "
              f"ncu {'at ' + check.ncu if check.ncu else 'absent'}; "
              f"python {info.get('python')}")
    if clocks:
        result += f"; nvidia-smi: {clocks[0]}"
    return Outcome("ok", result, numbers)


# ---------------------------------------------------------------------------------------------
# install


def python312() -> str | None:
    """pyenv's Python 3.12 (or python3.12 on PATH, if it runs)."""
    if os.environ.get("GPU_CHECK_PY312"):
        return os.environ["GPU_CHECK_PY312"]
    roots = [Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"]
    candidates = sorted((p for root in roots if root.is_dir() for p in root.glob("3.12*/bin/python3.12")),
                        key=lambda p: [int(x) for x in re.findall(r"\d+", p.parent.parent.name)])
    for path in reversed(candidates):
        if os.access(path, os.X_OK):
            return str(path)
    found = shutil.which("python3.12")
    if found and subprocess.run([found, "-c", "pass"], capture_output=True, check=False).returncode == 0:
        return found
    return None


def scratch_python(check: Check, step: Step, timeout: float) -> str:
    """A cached venv of Python 3.12 with the preinstalled packages the wheels need (the GPU machine's
    image, as far as the carried wheels are concerned)."""
    base = python312()
    if base is None:
        raise StepFailed("no Python 3.12 here (pyenv's, or python3.12 on PATH) for the scratch environment")
    standins = check.run([sys.executable, str(REPO / "scripts" / "device_wheels.py"), "standins"], 30,
                         env=check.env(harness=False)).output.split()
    venv = CACHE / "py312-standin"
    stamp = venv / "standins.txt"
    wanted = " ".join(sorted(standins))
    if stamp.is_file() and stamp.read_text().strip() == wanted and (venv / "bin" / "python").exists():
        return str(venv / "bin" / "python")
    if venv.exists():
        shutil.rmtree(venv)
    venv.parent.mkdir(parents=True, exist_ok=True)
    log = check.work / "logs" / f"{step.name}.log"
    proc = check.run([base, "-m", "venv", str(venv)], timeout, log=log, env=check.env(harness=False))
    _ok_or_fail(proc, "python3.12 -m venv")
    if standins:
        proc = check.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", *standins],
                         max(10.0, timeout - proc.seconds), log=log, env=check.env(harness=False))
        _ok_or_fail(proc, f"installing the stand-ins {wanted}")
    stamp.write_text(wanted + "\n")
    return str(venv / "bin" / "python")


def step_install(check: Check, step: Step, timeout: float) -> Outcome:
    end = time.monotonic() + timeout
    log = check.work / "logs" / f"{step.name}.log"
    numbers: dict[str, Any] = {}
    wheels = sorted(WHEELS.glob("*.whl"))
    py = check.python
    if check.dry_run:
        py = scratch_python(check, step, max(10.0, end - time.monotonic()))
        numbers["scratch_python"] = py
    if not wheels:
        probe = check.run([py, "-c", "import optuna, hydra, omegaconf"], 60, log=log, env=check.env(harness=False))
        if probe.returncode == 0 and not check.dry_run:
            check.installed = True
            return Outcome("ok", "no .whl/ carried; optuna, hydra and omegaconf are importable already", numbers)
        raise StepFailed("no .whl/: run scripts/device_wheels.sh on a networked machine and carry `.whl` "
                         f"({_error_line(probe.output)})")
    # The set itself: pinned, complete, one version each (quick; no network).
    proc = check.run([py, str(REPO / "scripts" / "device_wheels.py"), "check"], 60, log=log,
                     env=check.env(harness=False))
    numbers["set"] = _last_line(proc.output, r"^\.whl/") or _last_line(proc.output)
    _ok_or_fail(proc, "scripts/device_wheels.py check")
    if check.site.exists():
        shutil.rmtree(check.site)
    argv = [py, "-m", "pip", "install", "--no-index", "--no-deps", "--no-compile", "--no-cache-dir",
            "--disable-pip-version-check", "--upgrade", "--target", str(check.site), *map(str, wheels)]
    proc = check.run(argv, max(5.0, end - time.monotonic()), log=log, env=check.env(harness=False), echo=True)
    numbers["pip_seconds"] = round(proc.seconds, 1)
    _ok_or_fail(proc, "pip install --no-index --no-deps --target")
    env = check.env(harness=False, PYTHONPATH=os.pathsep.join([str(check.site), str(REPO)]))
    verify = [py, str(REPO / "scripts" / "device_wheels.py"), "verify-installed", "--json"]
    if check.dry_run:
        verify.append("--stand-in")
    proc = check.run(verify, max(5.0, end - time.monotonic()), log=log, env=env)
    found = _json_tail(proc.output) or {"problems": [f"verify-installed gave no answer: {_error_line(proc.output)}"],
                                        "notes": []}
    numbers["requirement_problems"] = found["problems"]
    numbers["requirement_notes"] = len(found["notes"])
    for problem in found["problems"]:
        check.say(f"  requirement: {problem}")
    sweep = check.run([py, str(Path(__file__).resolve()), "--helper", "import-sweep"],
                      max(5.0, end - time.monotonic()), log=log, env=env)
    modules = _json_tail(sweep.output)
    if not isinstance(modules, dict):
        raise StepFailed(f"import sweep gave no answer: {_error_line(sweep.output)}", numbers=numbers)
    preinstalled = _preinstalled()
    ok = [m for m, r in modules.items() if r == "ok"]
    absent_there = {}  # module -> what it needs that the GPU machine has (a stand-in lacks it)
    broken = {}
    for module, result in modules.items():
        if result == "ok":
            continue
        missing = result[len("missing "):] if result.startswith("missing ") else None
        dist = _normalize(DIST_OF_MODULE.get(missing, missing)) if missing else None
        if missing and check.dry_run and dist in preinstalled:
            absent_there[module] = missing
        else:
            broken[module] = result
    numbers.update(modules_ok=len(ok), modules_total=len(modules),
                   needs_preinstalled=sorted(set(absent_there.values())), import_failures=broken)
    _write_json(check.work / "logs" / "import_sweep.json", modules)
    for module, result in sorted(broken.items()):
        check.say(f"  import {module}: {result}")
    check.installed = not found["problems"] and not broken
    size = sum(p.stat().st_size for p in wheels) / 2**20
    where = ("a scratch Python 3.12 (stand-ins for the machine's packages)" if check.dry_run
             else "the GPU machine's python3")
    result = (f"{len(wheels)} wheels ({size:.1f} MiB) installed with --no-index --no-deps --target into {where} in "
              f"{numbers['pip_seconds']} s; requirement problems: {len(found['problems'])}; modules importing: "
              f"{len(ok)}/{len(modules)}")
    if absent_there:
        result += (f" (the other {len(absent_there)} need {', '.join(sorted(set(absent_there.values())))}: "
                   "preinstalled there)")
    if broken:
        result += f"; {len(broken)} fail: " + "; ".join(f"{m}: {r}" for m, r in sorted(broken.items())[:3])
    return Outcome("ok" if check.installed else "failed", result, numbers)


def _json_tail(text: str) -> Any:
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            with contextlib.suppress(ValueError):
                return json.loads(line)
    return None


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _preinstalled() -> set[str]:
    path = REPO / "scripts" / "gpu_machine_preinstalled.txt"
    return {_normalize(ln.split("#")[0].strip()) for ln in path.read_text().splitlines() if ln.split("#")[0].strip()}


def helper_import_sweep() -> int:
    """Import every module of harness/ and experiments/; print {module: ok | missing X | error ...}."""
    import importlib

    results: dict[str, str] = {}
    names = []
    for package in ("harness", "experiments"):
        for path in sorted((REPO / package).rglob("*.py")):
            rel = path.relative_to(REPO).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "__main__":
                continue
            if parts[-1] == "__init__":
                parts = parts[:-1]
            names.append(".".join(parts))
    for name in names:
        try:
            importlib.import_module(name)
            results[name] = "ok"
        except ModuleNotFoundError as exc:
            top = (exc.name or "?").split(".")[0]
            results[name] = f"missing {top}" if top not in ("harness", "experiments") else f"error {exc}"
        except Exception as exc:  # noqa: BLE001 - a sweep: every failure is a finding
            results[name] = f"error {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
    print(json.dumps(results))
    return 0


# ---------------------------------------------------------------------------------------------
# ncu preflight and fixture


def step_ncu_preflight(check: Check, step: Step, timeout: float) -> Outcome:
    from harness.profile.ncu.failures import detect
    from harness.profile.ncu.metrics import (
        SENTINEL_METRIC,
        metrics_for,
        parse_query_metrics,
        resolve_metrics,
    )
    from harness.profile.ncu.parse import NcuParseError, parse_text
    from harness.profile.ncu.probe import probe_command

    assert check.ncu is not None  # skip_reason skips this step without one
    query_out = check.work / "logs" / "ncu_query_metrics.txt"
    env = check.env(harness=False)
    # The metric list in the background (started with the check, else now) while the tiny kernel is profiled:
    # both inside the budget. The tiny kernel is profiler=auto's own probe (a PTX kernel through the driver API:
    # no torch import).
    query = check.start_metric_query()
    try:
        tiny_run = check.run(probe_command(check.ncu, check.python), timeout,
                             log=check.work / "logs" / f"{step.name}.log", env=env)
        try:
            query.wait(timeout=max(1.0, timeout - tiny_run.seconds))
        except subprocess.TimeoutExpired:
            check.kill(query)
    finally:
        check.stop_metric_query()
    numbers: dict[str, Any] = {"profile_seconds": round(tiny_run.seconds, 1), "query_exit": query.returncode}
    failure = detect(tiny_run.output, tiny_run.returncode)
    try:
        records = parse_text(tiny_run.output) if failure is None and not tiny_run.timed_out else []
    except NcuParseError:
        records = []
    # As harness.profile.ncu.probe judges it: profiled means a number for the sentinel metric.
    profiled = any(isinstance((r.value(SENTINEL_METRIC) or (None, None))[1], float) for r in records)
    # A list from a query that failed or was killed may be cut short: only an exit 0 answer is used.
    query_ok = query.returncode == 0 and query_out.exists()
    names = parse_query_metrics(query_out.read_text(errors="replace")) if query_ok else set()
    numbers["chip_metric_names"] = len(names)
    requested = metrics_for("report+stalls+bytes")
    plan = resolve_metrics(requested, names or None, "this GPU")
    usable_list = bool(names) and not any("not used" in note for note in plan.notes)
    if usable_list:
        check.metrics_file = check.work / "ncu_metrics.txt"
        check.metrics_file.write_text("\n".join(sorted(names)) + "\n")
        numbers.update(requested=len(requested), kept=len(plan.metrics), substituted=plan.substituted,
                       dropped=plan.dropped)
        for note in plan.notes:
            check.say(f"  metric: {note}")
        listed = (f"{len(requested) - len(plan.dropped) - len(plan.substituted)}/{len(requested)} requested metrics "
                  f"known to the chip")
        if plan.substituted:
            listed += ", " + ", ".join(f"{a.split('.')[0]} -> {b.split('.')[0]}" for a, b in plan.substituted.items())
        if plan.dropped:
            listed += ", dropped " + ", ".join(plan.dropped)
    else:
        listed = f"metric list not checked (`ncu --query-metrics` exit {query.returncode}, {len(names)} names)"
    if profiled:
        check.ncu_ok = True
        return Outcome("ok", f"ncu profiled a tiny kernel in {tiny_run.seconds:.1f} s; {listed}", numbers)
    if tiny_run.timed_out:  # slow, not proven unusable: the ncu steps still try, with their own deadlines
        check.ncu_ok = None
        return Outcome("timeout", f"ncu did not finish profiling one tiny kernel in {timeout:.0f} s (the ncu steps "
                                  f"still run); {listed}", numbers)
    check.ncu_ok = False
    if failure is not None:
        check.ncu_reason = f"{failure.code}: {failure}"
    else:
        check.ncu_reason = (f"ncu exit {tiny_run.returncode}, no {SENTINEL_METRIC} recorded: "
                            f"{_error_line(tiny_run.output)}")
    numbers["reason"] = check.ncu_reason
    return Outcome("failed", f"ncu cannot profile here ({check.ncu_reason}); the ncu steps are skipped; {listed}",
                   numbers)


def step_fixture(check: Check, step: Step, timeout: float) -> Outcome:
    reports = sorted((p for keep in ("stalls", "reproduction", "channels_last")
                      for p in (check.work / "ncu_reports" / keep).rglob("*.ncu-rep") if p.stat().st_size > 0),
                     key=lambda p: (0 if "stalls" in p.parts else 1, p.stat().st_size))
    reports = [p for p in reports if p.stat().st_size <= 8 * 2**20]
    if not reports:
        raise StepFailed("no .ncu-rep was kept by the ncu steps", "skipped")
    report = reports[0]
    card = report.relative_to(check.work / "ncu_reports").parts[1]
    stem = re.sub(r"[^A-Za-z0-9._-]", "-", f"fixture_{card}")
    target = check.out / f"{stem}.ncu-rep"
    shutil.copyfile(report, target)
    csv_path = check.out / f"{stem}_raw_page.csv"
    from harness.profile.ncu.command import export_command

    proc = check.run(export_command(report, ncu=check.ncu), timeout / 2, log=check.work / "logs" / f"{step.name}.log",
                     env=check.env(harness=False))
    csv_path.write_text(proc.output, encoding="utf-8")
    _ok_or_fail(proc, "ncu --import --csv --page raw")
    parsed = check.run([check.python, str(Path(__file__).resolve()), "--helper", "parse-fixture", str(target),
                        str(csv_path)], timeout / 2, log=check.work / "logs" / f"{step.name}.log")
    found = _json_tail(parsed.output) or {}
    numbers = {"report": str(report.relative_to(check.work)), "bytes": target.stat().st_size, **found}
    if parsed.returncode != 0 or not found.get("agree"):
        return Outcome("failed", f"{target.name}: parsing it: {_error_line(parsed.output)}", numbers)
    return Outcome("ok", f"{target.name} ({target.stat().st_size / 1024:.0f} KiB) and its raw page: "
                         f"{found['kernels']} kernels, {found['fields']} report fields, {found['stalls']} stall ratios "
                         f"(units {', '.join(found['stall_units']) or '-'}); the report and the CSV parse alike",
                         numbers)


def helper_parse_fixture(report: str, csv_path: str) -> int:
    from harness.profile.ncu.importer import read_records
    from harness.profile.ncu.metrics import STALL_METRIC
    from harness.profile.ncu.parse import counter_metrics, report_metrics

    out: dict[str, Any] = {}
    parsed = {}
    for label, path in (("report", report), ("csv", csv_path)):
        records = read_records(path)
        fields = [report_metrics(r) for r in records]
        counters = [counter_metrics(r) for r in records]
        units = sorted({unit for r in records for key, (_, unit) in r.values.items() if STALL_METRIC.match(key)})
        parsed[label] = {
            "kernels": len(records),
            "fields": max((sum(v is not None for v in f.values()) for f in fields), default=0),
            "stalls": max((sum(k.startswith("stall_") for k in c) for c in counters), default=0),
            "stall_units": units,
            "dur_us": [f.get("dur_us") for f in fields],
        }
    out.update(parsed["report"])
    out["csv"] = parsed["csv"]
    durations = zip(parsed["report"]["dur_us"], parsed["csv"]["dur_us"])
    out["agree"] = parsed["report"]["kernels"] == parsed["csv"]["kernels"] and all(
        a is not None and b is not None and abs(a - b) <= 1e-6 * max(abs(a), 1.0) for a, b in durations)
    print(json.dumps(out))
    return 0




# ---------------------------------------------------------------------------------------------
# Experiments


def _reprofile_headline(run_dir: Path) -> tuple[str, dict[str, Any]]:
    """Each card's time here against the report's, and its class here against the report's."""
    diff = _read_json(run_dir / "diff.json") or {}
    sources = {c.get("id") or c.get("card"): c.get("metrics_source") for c in _cards(run_dir / "baseline.json")}
    parts, numbers = [], {}
    for row in diff.get("cards") or []:
        card, before, after = row.get("card"), row.get("before_us"), row.get("after_us")
        ratio = after / before if before and after else None
        numbers[card] = {"report_us": before, "here_us": after, "report_class": row.get("class_before"),
                         "class": row.get("class_after"), "class_source": row.get("class_source"),
                         "kernels_added": row.get("kernels_added"), "kernels_removed": row.get("kernels_removed"),
                         "source": sources.get(card)}
        text = (f"{_short(card)} {after:.1f} us" + (f" ({ratio:.2f}x report)" if ratio else "")
                if after is not None else f"{_short(card)} n/a")
        parts.append(f"{text}, {class_text(row.get('class_after'), sources.get(card), row.get('class_before'))}")
    measured = sum(1 for v in numbers.values() if v["here_us"] is not None)
    source = ", ".join(sorted({str(s) for s in sources.values()}))
    return f"{measured}/{len(numbers)} cards measured ({source}): " + "; ".join(parts), numbers


def _refusals(run_dir: Path) -> str:
    """Why a run's trials were skipped, infeasible or failed (diff.json's `refused`), in one line."""
    refused = (_read_json(run_dir / "diff.json") or {}).get("refused") or {}
    return "; ".join(f"{variant}: {kind}: {str(why)[:120]}" for lists in refused.values()
                     for kind, entries in lists.items() for variant, why in entries.items())


def _experiment(check: Check, step: Step, timeout: float, name: str, overrides: list[str],
                keep: str | None) -> tuple[Proc, Path]:
    args = [*check.common(check.device_form), *overrides]
    if check.device_form and keep:
        args += check.ncu_overrides(step, keep, timeout)
    return check.harness_run(step, name, args, timeout)


def _add_reproduction(check: Check, key: str, title: str, run_dir: Path, extra: str = "") -> None:
    """A section of reproduction.md from a run's baseline_reproduction.md and `extra` after it (the file is
    rewritten whole, so it holds every section written so far even if a later step never runs)."""
    table = run_dir / "baseline_reproduction.md"
    if not table.exists():
        raise StepFailed("the run wrote no baseline_reproduction.md")
    check.reproduction[key] = f"<!-- {title} -->\n\n{table.read_text(encoding='utf-8')}" + (
        f"\n\n{extra}" if extra else "")
    header = f"<!-- scripts/gpu_check.sh {check.summary['mode']} {_now()} -->\n\n"
    (check.out / "reproduction.md").write_text(header + "\n\n".join(check.reproduction.values()), encoding="utf-8")


def reproduce_unmet() -> str | None:
    text = CARDS_CLI.read_text(errors="replace") if CARDS_CLI.is_file() else ""
    return None if REPRODUCE_PARSER.search(text) else (
        f"`python -m harness.report reproduce` missing ({_rel(CARDS_CLI)} has no reproduce subcommand)")


def _json_document(text: str) -> Any:
    """The last JSON object in `text` that starts a line (an indented, multi-line one too)."""
    decoder = json.JSONDecoder()
    found = None
    for match in re.finditer(r"^\{", text, re.MULTILINE):
        with contextlib.suppress(ValueError):
            found, _ = decoder.raw_decode(text, match.start())
    return found


def _verdict_table(verdicts: dict[str, dict[str, Any]]) -> str:
    """reproduction.md's verdicts: one row per card, as `python -m harness.report reproduce` judged it."""
    rows = ["| card | verdict | time here / report | report's kernels | kernels here | built in | class | reason |",
            "|---|---|---|---|---|---|---|---|"]
    for card, v in verdicts.items():
        ratio = f"{v['time_ratio']:.2f}x" if isinstance(v.get("time_ratio"), (int, float)) else "-"
        klass = (f"{v.get('class_report')} -> {v.get('class_here')}" if v.get("class_compared")
                 else f"{v.get('class_report')} (not compared)")
        rows.append(f"| `{card}` | {v.get('verdict')} | {ratio} | {', '.join(v.get('families_report') or []) or '-'} | "
                    f"{', '.join(v.get('families_here') or []) or '-'} | {v.get('dtype_here') or '-'} | {klass} | "
                    f"{v.get('reason') or ''} |")
    return "### Verdicts (`python -m harness.report reproduce <run>/baseline.json`)\n\n" + "\n".join(rows) + "\n"


def step_reproduction_ncu(check: Check, step: Step, timeout: float) -> Outcome:
    """One card per op kind and the five that carry the report's time, under ncu at scale 1, each built in
    the dtype the report evidences (the harness decides it; no override here); then each card's verdict."""
    end = time.monotonic() + timeout
    overrides = ["experiment=reprofile", f"cards=[{','.join(REPRODUCTION_NCU)}]"]
    if check.device_form:
        overrides.append("workload.scale=1.0")
        how = "ncu at scale 1"
    else:
        how = "the CPU stand-in (device=cpu profiler=cpu, scale 0.1): NOT_COMPARABLE with the report by design"
    # The verdicts' command keeps a few seconds of the step (step.work.other_s).
    proc, run_dir = _experiment(check, step, max(MIN_STEP_S, timeout - step.work.other_s), "reproduction_ncu",
                                overrides, "reproduction")
    _ok_or_fail(proc, "experiment=reprofile (reproduction_ncu)")
    measured, numbers = _reprofile_headline(run_dir)
    verdict_run = check.run([check.python, "-m", "harness.report", "reproduce", str(run_dir / "baseline.json"),
                             "--json"], max(5.0, end - time.monotonic()), log=check.work / "logs" / f"{step.name}.log")
    found = _json_document(verdict_run.output)
    verdicts = {str(v.get("card")): v for v in (found or {}).get("cards") or [] if isinstance(v, dict)}
    costs = {card: entry["ncu"] for card, entry in scan_run(run_dir)["cards"].items() if entry.get("ncu")}
    numbers.update(report_device=(found or {}).get("report_device"), ncu_costs=costs,
                   verdicts={card: v.get("verdict") for card, v in verdicts.items()})
    for card, verdict in verdicts.items():
        numbers.setdefault(card, {})["reproduce"] = verdict
    _add_reproduction(check, step.name, f"{step.name}: {len(REPRODUCTION_NCU)} cards re-profiled with {how}",
                      run_dir, _verdict_table(verdicts) if verdicts else "")
    if verdict_run.returncode != 0 or not verdicts:
        raise StepFailed(f"{measured}; python -m harness.report reproduce: exit {verdict_run.returncode}: "
                         f"{_error_line(verdict_run.output)}", numbers=numbers)
    counts: dict[str, int] = {}
    for verdict in verdicts.values():
        counts[str(verdict.get("verdict"))] = counts.get(str(verdict.get("verdict")), 0) + 1
    each = "; ".join(f"{_short(card)} {v.get('verdict')}" + (
        f" {v['time_ratio']:.2f}x" if isinstance(v.get("time_ratio"), (int, float)) else "")
        for card, v in verdicts.items())
    tally = ", ".join(f"{n} {verdict}" for verdict, n in sorted(counts.items()))
    return Outcome("ok", f"{how}: {measured.split(':', 1)[0]}; reproduce: {tally}: {each}", numbers)


def step_stalls_ncu(check: Check, step: Step, timeout: float) -> Outcome:
    proc, run_dir = _experiment(check, step, timeout, "stalls_ncu",
                                ["experiment=stall_breakdown", f"cards=[{UNRESOLVED_LINEAR}]"], "stalls")
    _ok_or_fail(proc, "experiment=stall_breakdown")
    cards = _cards(run_dir / "baseline.json")
    if not cards:
        raise StepFailed("no baseline card written")
    card = cards[0]
    stalls = card.get("stalls") or {}
    numbers = {"status": card.get("status"), "stalls": stalls, "source": card.get("metrics_source")}
    if stalls.get("dominant"):
        share = stalls.get("share") or stalls.get("dominant_share")
        text = f"dominant stall {stalls['dominant']}" + (f" ({float(share):.0%} of stall cycles)" if share else "")
        return Outcome("ok", f"{text} on {stalls.get('kernel')}; card status {card.get('status')}", numbers)
    return Outcome("ok", f"no stall breakdown ({stalls.get('note') or 'none recorded'}); card status "
                         f"{card.get('status')}", numbers)


def step_channels_last_ncu(check: Check, step: Step, timeout: float) -> Outcome:
    """One confirmed verdict (channels_last_3d against the baseline, paired rounds) and the transposes."""
    overrides = ["experiment=vae_channels_last", f"cards=[{CONV_WITH_TRANSPOSES}]", "search.n_trials=1",
                 "~experiment.space.channels_last_input", "~experiment.space.channels_last_weight"]
    if check.device_form:
        overrides.append("workload.scale=1.0")  # the report's shape: does cuDNN transpose it?
    proc, run_dir = _experiment(check, step, timeout, "channels_last_ncu", overrides, "channels_last")
    _ok_or_fail(proc, "experiment=vae_channels_last")

    base = _cards(run_dir / "baseline.json")
    trial_files = sorted((run_dir / "trials").glob("*/trial_*_channels_last_3d.json"))
    variant = [c for f in trial_files for c in _cards(f)]
    diff = next(iter((_read_json(run_dir / "diff.json") or {}).get("cards") or []), {})
    # Every layout conversion, whatever cuDNN names it: on the H200 channels_last_3d ran two convertTensor
    # kernels where the baseline ran the transposes, and a count of transposes alone said "none".
    before, after = _conversions(base), _conversions(variant)
    numbers = {"baseline_conversions": before.as_dict(), "variant_conversions": after.as_dict(),
               "baseline_kernels": len([n for c in base for n in _kernel_names(c)]),
               "variant_measured": bool(variant), "speedup": diff.get("speedup"),
               "timing_verdict": diff.get("timing_verdict"), "check": diff.get("verdict"),
               "source": next((c.get("metrics_source") for c in base), None)}
    text = f"layout conversions in the baseline: {before.text()}; in channels_last_3d: " + (
        after.text() if variant else "not measured")
    if diff.get("speedup"):
        text += f"; {diff['speedup']:.2f}x {diff.get('timing_verdict')}, check {diff.get('verdict')}"
    else:
        refused = _refusals(run_dir)
        text += f"; no verdict{': ' + refused if refused else ''}"
    return Outcome("ok", text, numbers)


def step_conv_kernels_ncu(check: Check, step: Step, timeout: float) -> Outcome:
    """vae_conv_kernels under ncu on the conv card with transposes: cuDNN's kernels (the baseline) and the
    Triton implicit-GEMM conv at its default tile (one trial, the experiment's own default: a searched tile
    would need one ncu child per tile), which kernels each ran, and the card's evidence (waves, padding)."""
    if check.device_form:
        overrides = ["experiment=vae_conv_kernels", f"cards=[{CONV_WITH_TRANSPOSES}]", "search.n_trials=1",
                     "~experiment.space", "+experiment.space={triton_implicit_gemm: {}}", "workload.scale=1.0"]
    else:  # the CPU's own variants (the Triton and cuDNN ones need CUDA)
        overrides = ["experiment=vae_conv_kernels", f"cards=[{CONV_WITH_TRANSPOSES}]", "search.n_trials=2"]
    proc, run_dir = _experiment(check, step, timeout, "conv_kernels_ncu", overrides, "conv_kernels")
    _ok_or_fail(proc, "experiment=vae_conv_kernels")
    tried: dict[str, dict[str, Any]] = {"baseline": {}}
    for trial in sorted((run_dir / "trials").glob("*/*.json")):
        if trial.name != "baseline.json" and not trial.name.startswith("trial_"):
            continue
        variant = "baseline" if trial.name == "baseline.json" else re.sub(r"^trial_\d+_", "", trial.stem)
        names = [n for c in _cards(trial) for n in _kernel_names(c)]
        tried[variant] = {"kernels": sorted({n[:80] for n in names})[:4],
                          "conversions": _conversions(_cards(trial)).counts()}
    diff = next(iter((_read_json(run_dir / "diff.json") or {}).get("cards") or []), {})
    best = _cards(run_dir / "tried.json")
    numbers = {"trials": tried, "speedup": diff.get("speedup"), "timing_verdict": diff.get("timing_verdict"),
               "variant": (diff.get("variant") or {}).get("label"),
               "conv_evidence": (best[0].get("conv") if best else None)}
    text = "; ".join(f"{variant}: {', '.join(found['kernels']) or 'no kernels'}" for variant, found in tried.items())
    if diff.get("speedup"):
        text += f"; {numbers['variant']} {diff['speedup']:.2f}x {diff.get('timing_verdict')}"
    else:
        refused = _refusals(run_dir)
        text += f"; no verdict{': ' + refused if refused else ''}"
    return Outcome("ok", text, numbers)


def _gpu_test_files() -> list[str]:
    """The test files outside tests/app that mark a test gpu or ncu, read from the source: collecting only
    them, not all of tests/ (5.7 s against 14.1 s on a 2-core CPU)."""
    return [_rel(p) for p in sorted((REPO / "tests").rglob("test_*.py"))
            if "app" not in p.relative_to(REPO / "tests").parts[:1] and GPU_MARK.search(p.read_text(errors="replace"))]


def _ncu_marked_app_tests() -> list[str]:
    """The ncu-marked tests of tests/app as node ids, read from the source: tests/app's other tests run
    whole experiments on the CPU (CI's business), so the app modules are not collected whole."""
    found = []
    for path in sorted((REPO / "tests" / "app").glob("test_*.py")):
        for name in re.findall(r"@pytest\.mark\.ncu\s*\n(?:\s*@.*\n)*\s*def (test_\w+)", path.read_text()):
            found.append(f"{_rel(path)}::{name}")
    return [test for test in found if test not in COVERED_BY_STEPS]


def step_gpu_tests(check: Check, step: Step, timeout: float) -> Outcome:
    marks, note = "gpu or ncu", ""
    if check.ncu_ok is False:  # they would fail on the reason the preflight already named
        marks, note = "gpu and not ncu", f"; the ncu-marked tests left out: {check.ncu_reason}"
    # --durations: each test's cost in the log, for this step's budget.
    argv = [check.python, "-m", "pytest", "-v", "-m", marks, *_gpu_test_files(), *_ncu_marked_app_tests(),
            "-p", "no:cacheprovider", "-o", "addopts=-ra", "--durations=15"]
    env = check.env()
    if check.ncu:  # tests/conftest.py looks for ncu on PATH only; the check also finds it under /opt
        env["PATH"] = os.pathsep.join([os.path.dirname(check.ncu), env.get("PATH", "")])
    proc = check.run(argv, timeout, log=check.work / "logs" / f"{step.name}.log", env=env)
    line = _last_line(proc.output, r"passed|failed|error|skipped|no tests ran")
    counts = {key: int(n) for n, key in re.findall(r"(\d+) (passed|failed|skipped|error|errors|deselected)", line)}
    if proc.timed_out:
        raise StepFailed(f"pytest killed at {timeout:.0f} s{note}", "timeout", counts)
    status = "ok" if proc.returncode == 0 else "failed"
    failed = [ln.strip() for ln in proc.output.splitlines() if ln.startswith(("FAILED", "ERROR"))][:5]
    return Outcome(status, line + note + (("; " + "; ".join(failed)) if failed else ""), {**counts, "failed": failed})


def plants_unmet() -> str | None:
    if not PLANTS_TESTS.is_file():
        return f"{_rel(PLANTS_TESTS)} missing"
    if PLANTS_DEVICE_VAR not in PLANTS_TESTS.read_text(errors="replace"):
        return f"{_rel(PLANTS_TESTS)} does not read {PLANTS_DEVICE_VAR}: it runs on the CPU only (CI runs it there)"
    return None


def step_plants(check: Check, step: Step, timeout: float) -> Outcome:
    """The adversarial suite on CUDA: every planted mistake refused with its own reason, the honest twins
    kept. -v so that a killed run still says which plants it finished."""
    argv = [check.python, "-m", "pytest", "-v", _rel(PLANTS_TESTS), "-p", "no:cacheprovider", "-o", "addopts=-ra"]
    proc = check.run(argv, timeout, log=check.work / "logs" / f"{step.name}.log",
                     env=check.env(**{PLANTS_DEVICE_VAR: "cuda"}))
    line = _last_line(proc.output, r"passed|failed|error|skipped|no tests ran")
    numbers = pytest_progress(proc.output)
    if proc.timed_out:
        raise StepFailed(f"pytest killed at {timeout:.0f} s", "timeout", numbers)
    failed = numbers.get("failed") or []
    return Outcome("ok" if proc.returncode == 0 else "failed",
                   line + (("; " + "; ".join(failed[:3])) if failed else ""), numbers)


def step_aa_timing(check: Check, step: Step, timeout: float) -> Outcome:
    out = check.work / "runs" / "aa_timing.json"
    args = ["--rounds", "8", "--budget-s", "0.1"] if check.device_form else [
        "--device", "cpu", "--rounds", "6", "--budget-s", "0.05"]
    proc = check.run([check.python, str(REPO / "scripts" / "gpu_aa_timing.py"), *args, "--out", str(out)], timeout,
                     log=check.work / "logs" / f"{step.name}.log")
    _ok_or_fail(proc, "scripts/gpu_aa_timing.py")
    found = _read_json(out) or {}
    clock = found.get("sm_clock_mhz") or {}
    numbers = {k: found.get(k) for k in ("verdict", "false_verdict", "speedup", "ci", "band", "device", "median_us")}
    numbers["sm_clock_mhz"] = clock
    text = f"A/A on {found.get('device')}: {found.get('describe')}"
    if clock.get("min"):
        text += f"; SM clock {clock['min']:.0f}-{clock['max']:.0f} MHz over the rounds"
    elif found.get("device_kind") == "cuda":
        text += "; SM clock not read (" + "; ".join(found.get("notes") or ["no reading"]) + ")"
    return Outcome("failed" if found.get("false_verdict") else "ok", text, numbers)


def _win(run_dir: Path) -> dict[str, Any]:
    """A search's result on its card (diff.json's row): the best variant tried, its confirmed verdict and
    interval, whether it was adopted (the variant best.json holds) or the baseline kept."""
    row: dict[str, Any] = next(iter((_read_json(run_dir / "diff.json") or {}).get("cards") or []), {})
    tried = (row.get("variant") or {}).get("label")
    return {"card": row.get("card"), "tried": tried, "speedup": row.get("speedup"), "ci": row.get("speedup_ci"),
            "verdict": row.get("timing_verdict"), "rule": row.get("verdict_rule"), "before_us": row.get("before_us"),
            "after_us": row.get("after_us"), "adopted": bool(row.get("adopted")),
            "adopted_variant": tried if row.get("adopted") else None, "refused": _refusals(run_dir) or None}


def step_wins(check: Check, step: Step, timeout: float) -> Outcome:
    """The wins a user comes for, each on its card at scale 1 under the CUDA trace (the timing is CUDA
    events either way; the trace adds the kernels): a confirmed verdict and the variant adopted."""
    end = time.monotonic() + timeout
    parts: list[str] = []
    numbers: dict[str, Any] = {}
    for index, (experiment, card, space, trials) in enumerate(WINS):
        left = max(MIN_STEP_S, (end - time.monotonic()) / (len(WINS) - index))
        form = ["workload.scale=1.0", "profiler=torch_cuda"] if check.device_form else []
        proc, run_dir = _experiment(check, step, left, f"wins_{experiment}", [
            f"experiment={experiment}", f"cards=[{card}]", f"search.n_trials={trials}", *space, *form], None)
        if proc.returncode != 0:
            why = "timed out" if proc.timed_out else _error_line(proc.output)
            numbers[experiment] = {"card": card, "returncode": proc.returncode, "error": why}
            parts.append(f"{experiment}: exit {proc.returncode} ({why})")
            continue
        numbers[experiment] = win = _win(run_dir)
        if win["speedup"]:
            ci = f" [{win['ci'][0]:.2f}, {win['ci'][1]:.2f}]" if win["ci"] else ""
            found = f"{win['tried']} {win['speedup']:.2f}x{ci} {win['verdict']}, " + (
                f"adopted {win['adopted_variant']}" if win["adopted"] else "the baseline kept")
        else:
            found = "no verdict" + (f": {win['refused']}" if win["refused"] else "")
        parts.append(f"{experiment} on {_short(card)}: {found}")
    status = "ok" if all(numbers[e].get("verdict") for e, *_ in WINS) else "failed"
    return Outcome(status, "; ".join(parts), numbers)


CHUNK_EXPERIMENTS = ("vae_decode_chunk", "dit_block")  # the chunk cards' experiments (harness.trial.chunks)
# Each experiment's 480 chunk card (on a GPU its default takes every resolution's: the first H200 run measured
# both 480 baselines and was killed before either run finished a card).
CHUNK_CARDS = {"vae_decode_chunk": "vae-480-chunk-decode-c9e063", "dit_block": "dit-480-chunk-block-88c34e"}
# One cheap variant each (the first run drew channels_last_low_precision and a max-autotune compile of the DiT
# block, which its time did not hold): the VAE chunk's layout, the DiT block's modulation computed once.
DEVICE_CHUNK_FORM = {
    "vae_decode_chunk": ["~experiment.space", "+experiment.space={channels_last_3d: {}}"],
    "dit_block": ["~experiment.space", "+experiment.space={modulation_once: {}}"],
}
# The CPU form: the VAE chunk's layout variant only (one latent frame of a 2x1 slice decodes in about a second);
# a DiT block streams its 351 M weights on every call, minutes of a CPU run, so it runs on the device only.
CPU_CHUNK_FORM = {"vae_decode_chunk": ["workload.scale=0.04", "~experiment.space",
                                       "+experiment.space={channels_last_3d: {}}", "search.n_trials=1"]}


def step_chunk_trace(check: Check, step: Step, timeout: float) -> Outcome:
    """Each chunk experiment on its 480 chunk card under the CUDA trace at the report's scale, one cheap
    trial each: the chunk's verdict and its op breakdown per contained report card."""
    device_form = check.device_form
    parts, numbers = [], {}
    names = [n for n in CHUNK_EXPERIMENTS if (REPO / "conf" / "experiment" / f"{n}.yaml").exists()
             and (device_form or n in CPU_CHUNK_FORM)]
    if not names:
        raise StepFailed("no chunk experiment config in conf/experiment")
    end = time.monotonic() + timeout
    for index, name in enumerate(names):
        left = max(MIN_STEP_S, (end - time.monotonic()) / (len(names) - index))
        form = (["workload.scale=1.0", "search.n_trials=1", "profiler=torch_cuda", *DEVICE_CHUNK_FORM[name]]
                if device_form else CPU_CHUNK_FORM[name])
        args = [a for a in check.common(device_form) if not a.startswith("workload.scale=")]
        proc, run_dir = check.harness_run(step, f"chunk_{name}", [*args, f"experiment={name}",
                                                                  f"cards=[{CHUNK_CARDS[name]}]", *form], left)
        if proc.returncode != 0:
            parts.append(f"{name}: exit {proc.returncode}" + (" (timed out)" if proc.timed_out else ""))
            numbers[name] = {"returncode": proc.returncode}
            continue
        rows = (_read_json(run_dir / "diff.json") or {}).get("cards") or []
        row = rows[0] if rows else {}
        breakdown = [e.get("card") for e in row.get("op_breakdown") or [] if e.get("card") != "other"]
        numbers[name] = {"card": row.get("card"), "speedup": row.get("speedup"), "verdict": row.get("timing_verdict"),
                         "op_cards": breakdown}
        verdict = f"{row['speedup']:.2f}x {row.get('timing_verdict')}" if row.get("speedup") else "no verdict"
        parts.append(f"{name}: {verdict}, {len(breakdown)} report cards in its op breakdown")
    if not device_form:
        parts.append("dit_block: on the device only (a 351 M-parameter block per call)")
    status = "ok" if all("card" in numbers[n] for n in names) else "failed"
    return Outcome(status, "; ".join(parts), numbers)


def step_capture(check: Check, step: Step, timeout: float) -> Outcome:
    """examples/capture_model.py captured: its hot groups replayed on their captured inputs and re-profiled
    (ncu where it profiles, else the CUDA trace; the CPU profiler in the CPU form): coverage and classes."""
    out = check.work / "runs" / "capture"
    check.step_dirs.append(out / "reprofile")
    argv = [check.python, "-m", "harness.capture", CAPTURE_MODEL, "--out", str(out), "--top", str(CAPTURE_TOP)]
    if check.device_form:
        profiler = "ncu" if check.ncu and check.ncu_ok else "torch_cuda"
        argv += ["--device", "cuda", "--profiler", profiler]
        if profiler == "ncu":
            argv += [f"--override={o}" for o in check.ncu_overrides(step, "capture", timeout) if o != "profiler=ncu"]
    else:
        argv += ["--device", "cpu", "--profiler", "cpu", "--override=timing.cpu_threads=1"]
    proc = check.run(argv, timeout, log=check.work / "logs" / f"{step.name}.log")
    _ok_or_fail(proc, "harness.capture")
    report = _read_json(out / "report.json") or {}
    record = report.get("capture") or {}
    classes = {card.get("group", "?"): card.get("primary") for card in report.get("cards") or []}
    sources = sorted({str(card.get("metrics_source")) for card in report.get("cards") or []})
    numbers = {"groups": record.get("groups"), "cards": record.get("cards"), "classes": classes,
               "cards_share_of_forward": record.get("cards_share_of_forward"), "metrics_source": sources,
               "unprofiled": record.get("unprofiled"), "forward_us": record.get("forward_us")}
    share = record.get("cards_share_of_forward")
    return Outcome("ok", f"{record.get('cards')} of {record.get('groups')} groups as cards, "
                         f"{share:.0%} of the forward; metrics {', '.join(sources)}" if share is not None
                   else "no capture record", numbers)


def step_auto_trace(check: Check, step: Step, timeout: float) -> Outcome:
    overrides = ["experiment=auto", f"cards=[{','.join(AUTO_CARDS)}]", "search.n_trials=1"]
    if check.device_form:
        overrides += ["profiler=torch_cuda", "workload.scale=0.25"]
    proc, run_dir = _experiment(check, step, timeout, "auto_trace", overrides, None)
    _ok_or_fail(proc, "experiment=auto")
    parts, numbers = [], {}
    for sub in sorted(p for p in run_dir.iterdir() if p.is_dir() and (p / "run.json").exists()):
        tried: dict[str, int] = {}
        for trial in sorted(sub.glob("trials/*/trial_*.json")):
            variant = re.sub(r"^trial_\d+_", "", trial.stem)
            measured = any(c.get("timing") for c in _cards(trial))
            key = variant if measured else f"{variant} (not measured)"
            tried[key] = tried.get(key, 0) + 1
        rows = (_read_json(sub / "diff.json") or {}).get("cards") or []
        best = [f"{r.get('speedup'):.2f}x {r.get('timing_verdict')}" for r in rows if r.get("speedup")]
        numbers[sub.name] = {"trials": tried, "verdicts": best}
        parts.append(f"{sub.name}: " + (", ".join(f"{k} x{v}" for k, v in tried.items()) or "no trial")
                     + (f" -> {best[0]}" if best else ""))
    return Outcome("ok", "; ".join(parts) or "no sub-run", numbers)


# ---------------------------------------------------------------------------------------------
# Packing


def pack(check: Check) -> Outcome:
    """runs.tgz: run directories, step logs, helper outputs. The float64 references (*.pt) stay out;
    kept reports (*.ncu-rep) go in, smallest first, while they add up to at most REPORTS_BYTES; if the
    archive still weighs over MAX_FILE_BYTES, only the logs, JSON and Markdown go in."""
    files = sorted(p for p in check.work.rglob("*") if p.is_file() and p.relative_to(check.work).parts[0] != "site")
    chosen = [p for p in files if p.suffix not in (".pt", ".ncu-rep")]
    used = 0
    for report in sorted((p for p in files if p.suffix == ".ncu-rep"), key=lambda p: p.stat().st_size):
        if used + report.stat().st_size <= REPORTS_BYTES:
            chosen.append(report)
            used += report.stat().st_size
    target = check.out / "runs.tgz"
    tmp = target.with_name("runs.tgz.tmp")

    def write(paths: list[Path]) -> None:
        with tarfile.open(tmp, "w:gz") as archive:
            for path in paths:
                archive.add(path, arcname=str(Path("gpu_check") / path.relative_to(check.work)))

    write(chosen)
    if tmp.stat().st_size > MAX_FILE_BYTES:
        chosen = [p for p in chosen if p.suffix in (".log", ".json", ".md", ".txt") and p.stat().st_size < 2**20]
        write(chosen)
    tmp.replace(target)
    left_out = [str(p.relative_to(check.work)) for p in files if p not in chosen]
    return Outcome("ok", f"runs.tgz {target.stat().st_size / 2**20:.2f} MiB, {len(chosen)} files"
                         + (f"; left out {len(left_out)} (float64 references *.pt, reports over the budget)"
                            if left_out else ""),
                   {"bytes": target.stat().st_size, "files": len(chosen), "left_out": left_out[:50]})


# ---------------------------------------------------------------------------------------------
# The table of steps, in order of value


# Each device budget from the first H200 run (its step seconds in the comments); CPU budgets measured on 2 cores
# (reproduction_ncu 40.5 s, wins 41.1 s in the dry run of 2026-12-04).
STEPS = [
    Step("machine", Work(other_s=7, other="nvidia-smi, ncu --version, one python importing torch (6.8 s)"), 15, (),
         step_machine, "versions, driver, clocks -> versions.txt"),
    Step("install", Work(other_s=7, other="pip --no-deps of 11 wheels, the requirement check, the import sweep "
                                          "(6.6 s)"),
         90, (), step_install, "the carried wheels, requirements, imports"),
    # `ncu --query-metrics` took 16 s of this step's 16.8 s: started with the check, it runs beside machine and
    # install (13.4 s), so what is left of it and the tiny kernel's 2.3 s remain.
    Step("ncu_preflight", Work(other_s=6, other="ncu on one tiny kernel (2.3 s), the rest of `ncu --query-metrics`"),
         0, ("cuda", "ncu"), step_ncu_preflight, "tiny kernel under ncu, metric list"),
    Step("reproduction_ncu", Work(starts=1, ncu_trials=len(REPRODUCTION_NCU), other_s=2,
                                  other="python -m harness.report reproduce"),
         50, ("cuda", "ncu", "harness"), step_reproduction_ncu,
         "one card per op kind and the report's five under ncu, each with its reproduce verdict", reproduce_unmet),
    Step("wins", Work(starts=len(WINS), trace_trials=sum(1 + trials for *_, trials in WINS), confirms=len(WINS)),
         50, ("cuda", "harness"), step_wins, "vae_bf16 and dit_small_m_batching at scale 1: verdicts, adopted"),
    Step("channels_last_ncu", Work(starts=1, ncu_trials=2, confirms=1), 50, ("cuda", "ncu", "harness"),
         step_channels_last_ncu, "vae_channels_last under ncu, one trial: a confirmed verdict, the layout conversions"),
    Step("aa_timing", Work(other_s=10, other="one python: torch, two workloads, 8 paired rounds (9.2 s)"), 25,
         ("cuda", "harness"), step_aa_timing, "A/A pair of 8 rounds, SM clock"),
    Step("stalls_ncu", Work(starts=1, ncu_trials=1), 45, ("cuda", "ncu", "harness"), step_stalls_ncu,
         "stall_breakdown under ncu"),
    Step("fixture", Work(other_s=2, other="ncu --import of one report, both parsed back (1.3 s)"), 0,
         ("cuda", "ncu", "harness"), step_fixture, "one .ncu-rep + raw page into $OUT"),
    # 88.3 s with the ncu app test (a harness run of about 5 ncu baselines, ~34 s at the costs above) and the
    # collection of all of tests/; without both, an estimate until its --durations say.
    Step("gpu_tests", Work(other_s=50, other="pytest: the gpu unit tests (Triton and torch.compile compiles)"),
         0, ("cuda", "harness"), step_gpu_tests, "gpu- and ncu-marked tests"),
    Step("plants", Work(other_s=42, other=f"pytest {_rel(PLANTS_TESTS)}: one worker, a trial per plant (40.8 s)"),
         0, ("cuda", "harness"), step_plants, f"the planted mistakes on CUDA ({PLANTS_DEVICE_VAR}=cuda)",
         plants_unmet),
    # The capture's own process (torch, the model, its forwards) counts as one start, its re-profile run as another;
    # 42.2 s with 3 groups: 2 starts and 3 ncu trials left 9.8 s (the forwards, the replays' set-up).
    Step("capture", Work(starts=2, ncu_trials=CAPTURE_TOP, ncu_cold=1, other_s=9.8,
                         other="the example model's forwards, the replays' set-up"), 20, ("cuda", "harness"),
         step_capture, "a model captured: its hot ops replayed and re-profiled (ncu)"),
    Step("conv_kernels_ncu", Work(starts=1, ncu_trials=2, confirms=1), 55, ("cuda", "ncu", "harness"),
         step_conv_kernels_ncu, "vae_conv_kernels under ncu: cuDNN's kernels, a Triton tile"),
    Step("chunk_trace", Work(starts=len(CHUNK_EXPERIMENTS), trace_trials=2 * len(CHUNK_EXPERIMENTS),
                             confirms=len(CHUNK_EXPERIMENTS), other_s=CHUNK_SETUP_S * len(CHUNK_EXPERIMENTS),
                             other="the chunks' set-up (a VAE decoder chunk, a DiT block: 13.2 s each)"), 80,
         ("cuda", "harness"), step_chunk_trace, "the chunk experiments under the CUDA trace: op breakdown"),
    # Two sub-runs, each with its worker: stall_breakdown's baseline; output_cast's baseline and one trial.
    Step("auto_trace", Work(starts=1, trace_trials=3, confirms=1, other_s=3.5,
                            other="the second sub-run's worker start"), 60, ("cuda", "harness"), step_auto_trace,
         "experiment=auto under the CUDA trace"),
]
STEP_NAMES = [s.name for s in STEPS]


def skip_reason(check: Check, step: Step) -> str | None:
    if step.unmet is not None:
        missing = step.unmet()
        if missing:
            return missing
    device_form = check.device_form
    if not device_form and step.needs and "cuda" in step.needs and not step.cpu_budget_s:
        return "needs CUDA" + (" and ncu" if "ncu" in step.needs else "") + (
            " (--dry-run)" if check.requested_dry_run else " (no CUDA device here)")
    if device_form and "ncu" in step.needs:
        if not check.ncu:
            from harness.profile.ncu.command import searched_for_ncu

            return f"needs ncu: {searched_for_ncu()}"
        if check.ncu_ok is False:
            return f"ncu cannot profile here: {check.ncu_reason}"
    if "harness" in step.needs and device_form and not check.installed:
        return "the install step did not succeed (or did not run): the harness cannot import here"
    return None


def _progress(check: Check, step: Step, record: dict[str, Any], started: float) -> None:
    """summary.json while the step runs: what it has finished so far (it survives the check being
    killed outright)."""
    text, finished = salvage(check, step)
    record.update(status="running", seconds=round(time.monotonic() - started, 1), result=f"running: {text}",
                  numbers={"finished": finished} if finished else {})
    check.write_summary()


def run_steps(check: Check, names: list[str]) -> int:
    failures = 0
    selected = [s for s in STEPS if s.name in names]
    for index, step in enumerate(selected):
        # Planned for the form the machine step found (a machine without CUDA runs the CPU forms); summary.json's
        # plan follows (the first H200 run's was the CPU form's, made before the machine step had run).
        plan = make_plan(selected, check.device_form, check.summary["deadline_s"])
        check.summary["plan"] = [{"name": p.step.name, "budget_s": p.budget_s, "planned": p.planned} for p in plan]
        check.summary["plan_total_s"] = plan_total_s(plan)
        entry = plan[index]
        record: dict[str, Any] = {"name": step.name, "doc": step.doc, "budget_s": entry.budget_s,
                                  "planned": entry.planned, "form": "device" if check.device_form else "cpu"}
        check.summary["steps"].append(record)
        reason = skip_reason(check, step)
        # What the later planned steps that can still run need is kept for them.
        kept = sum(p.budget_s for p in plan[index + 1:] if p.planned and skip_reason(check, p.step) is None)
        available = check.left() - PACK_RESERVE_S - kept
        if reason is None and available < (min(entry.budget_s, MIN_STEP_S) if entry.planned else entry.budget_s):
            reason = (f"global deadline: {max(0.0, check.left()):.0f} s left of {check.summary['deadline_s']:g} s, "
                      f"{kept} s kept for the later planned steps" + ("" if entry.planned else
                                                                      f"; not planned, it needs {entry.budget_s} s"))
        if reason:
            record.update(status="skipped", seconds=0.0, result=reason)
            check.say(f"-- {step.name}: skipped: {reason}")
            check.write_summary()
            continue
        check.step_timeout = min(available, entry.budget_s * SLACK_FACTOR)
        record["timeout_s"] = round(check.step_timeout, 1)
        if not check.device_form and any(n in step.needs for n in ("cuda", "ncu")):
            record["note"] = "the CPU form (device=cpu profiler=cpu): " + ("needs CUDA" + (
                " and ncu" if "ncu" in step.needs else "")) + " for the device form"
        check.say(f"== {step.name} (budget {entry.budget_s} s, up to {check.step_timeout:.0f} s, {record['form']} form"
                  f"{'' if entry.planned else ', not planned: on saved time'})")
        started = time.monotonic()
        check.step_dirs, check.record = [], record
        check.progress = functools.partial(_progress, check, step, record, started)  # this step's, bound now
        try:
            outcome = step.run(check, step, check.step_timeout)
        except StepFailed as exc:
            outcome = exc.outcome
        except Exception as exc:  # noqa: BLE001 - a broken step is recorded, the others go on
            outcome = Outcome("failed", f"{type(exc).__name__}: {exc}")
        finally:
            check.progress = None
        seconds = time.monotonic() - started
        if outcome.status == "ok" and seconds > check.step_timeout + 5:
            outcome.status = "timeout"
        if outcome.status in ("failed", "timeout"):
            text, finished = salvage(check, step)
            if finished:
                outcome.result += f"; {text}"
                outcome.numbers["finished"] = finished
        if check.step_dirs:  # the harness's own account of the time, to check the budgets' costs against
            outcome.numbers["phases"] = {d.name: run_phases(d) for d in check.step_dirs}
        check.record = None
        record.update(status=outcome.status, seconds=round(seconds, 1), result=outcome.result, numbers=outcome.numbers)
        check.say(f"   {step.name}: {outcome.status} in {seconds:.1f} s: {outcome.result}")
        if outcome.status in ("failed", "timeout"):
            failures += 1
        check.write_summary()
    return failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dry-run", action="store_true", help="CPU forms only; CUDA/ncu steps skipped")
    parser.add_argument("--steps", default=",".join(STEP_NAMES), help="comma-separated subset, e.g. install,aa_timing")
    parser.add_argument("--out", default=os.environ.get("OUT") or str(REPO / "gpu_check_out"))
    parser.add_argument("--work", default=None, help="scratch folder for run directories (default: /tmp/...)")
    parser.add_argument("--deadline", type=float, default=DEFAULT_DEADLINE_S, help="seconds for all steps")
    parser.add_argument("--plan", "--list", dest="plan", action="store_true",
                        help="print the steps, their budgets and the total against the deadline")
    parser.add_argument("--helper", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.helper:
        if args.helper[0] == "import-sweep":
            return helper_import_sweep()
        if args.helper[0] == "parse-fixture":
            return helper_parse_fixture(*args.helper[1:3])
        parser.error(f"unknown helper {args.helper[0]}")
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

    def stop(signum: int, _frame: Any) -> None:
        check.say(f"signal {signum}: stopping the current step and packing what there is")
        if check.current is not None:
            check.kill(check.current)
        check.sweep(side_too=True)
        with contextlib.suppress(Exception):
            check.summary["interrupted"] = f"signal {signum}"
            if check.record is not None:  # the step that was running: what it finished
                step = next(s for s in STEPS if s.name == check.record["name"])
                text, finished = salvage(check, step)
                check.record.update(status="interrupted", result=f"interrupted by signal {signum}; {text}",
                                    numbers={"finished": finished})
            pack(check)
            check.write_summary()
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
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
    plan = make_plan(selected, check.device_form, args.deadline)
    check.summary["plan"] = [{"name": p.step.name, "budget_s": p.budget_s, "planned": p.planned} for p in plan]
    check.summary["plan_total_s"] = plan_total_s(plan)
    try:
        failures = run_steps(check, names)
    finally:
        check.stop_metric_query()  # a preflight skipped or not run leaves it to end here
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


if __name__ == "__main__":
    sys.exit(main())
