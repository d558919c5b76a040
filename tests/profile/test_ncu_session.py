"""The ncu session started ahead of its trial, against a stand-in ncu that runs the real child; the phase
record and the cost script's table; the GPU check's ncu budgets.

The stand-in (FAKE_NCU) does what ncu does around the program: it runs the command after its options,
waits for it, and then writes the report named by -o (a raw-page table, read back through the importer's
`ncu --import` fallback). Its one kernel is named after the job the child ran, and only when the child
ran its profiled call to the end. It writes the moments it saw beside the report, so the order of
events is checked on timestamps, never on how long anything took.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

import harness.profile.ncu_backend as backend
from harness.boundary.framing import plain
from harness.boundary.requests import Measure
from harness.boundary.spec import CardSpec, TimingSettings
from harness.cards.dtype import IEEE, TF32, CardDtype
from harness.cards.model import load_report
from harness.profile.base import WorkloadFacts
from harness.profile.ncu import command, report_file
from harness.profile.ncu.session import PHASES_NAME, read_phases, replay_passes, write_job
from harness.trial import ncu_child
from scripts.gpu_check_steps import run_folder
from scripts.gpu_check_steps.plan import HARNESS_START_S, NCU_JOB_S, NCU_START_S, Work
from tests.processes import alive, wait_dead

CARD = "vae-480-conv3d-16to16k111t3-9507c7"  # the report's smallest conv3d: a trial of it takes milliseconds
SHAPE = "[1, 16, 3, 60, 104]"  # its input, as the stand-in names the kernel after the job it ran
FACTS = WorkloadFacts(flops=None, min_bytes=None, dtype="float32", op_kind="conv3d")
READY_WAIT_S = 120.0  # how long a child may take to import torch on a slow machine: a bound, not a check
TIMES = "fake_ncu_times.json"
REPO = Path(__file__).resolve().parents[2]

FAKE_NCU = r'''#!{python}
import csv, io, json, os, subprocess, sys, time
from pathlib import Path

args = sys.argv[1:]
if args[:1] == ["--version"]:
    print("Version 2099.1.0 (stand-in)")
    sys.exit(0)
if args[:1] == ["--import"]:  # the report is already the raw page
    sys.stdout.write(Path(args[1]).read_text())
    sys.exit(0)
started = time.time()
program = args[args.index("-f") + 1:]
report = Path(args[args.index("-o") + 1] + ".ncu-rep")
code = subprocess.call(program)
child_exit = time.time()
hold = float(os.environ.get("FAKE_NCU_HOLD_S", "0"))
if hold:  # ncu's replay outlasts the next session's start (the H200's trials 4-8 s, start + imports 3-4.5 s)
    own = report.parent
    end = time.monotonic() + hold
    while time.monotonic() < end and not any(
            "ready" in json.loads(p.read_text()).get("marks", {{}})
            for p in (own.parent.parent / ".pending").glob("session-*/phases.json") if p.parent != own):
        time.sleep(0.02)
record = json.loads(Path(program[program.index("--phases") + 1]).read_text())
table = io.StringIO()
out = csv.writer(table, quoting=csv.QUOTE_ALL, lineterminator="\n")
out.writerow(["ID", "Kernel Name", "gpu__time_duration.sum", "launch__grid_size"])
out.writerow(["", "", "nsecond", ""])
if code == 0 and "profiled_call" in record["phases"]:
    measure = json.loads(Path(program[program.index("harness.trial.ncu_child") + 1]).read_text())["measure"]
    shape = json.dumps(measure["spec"]["card"]["shape_parameters"]["input"])
    role = "baseline" if measure["baseline"] else "trial"
    name = "/".join([shape, role, str(measure["variant"]), json.dumps(measure["params"])])
    out.writerow(["0", name, "1,500", "128"])
    print(f'==PROF== Profiling "{{name}}" - 0: 0%....50%....100% - 9 passes', file=sys.stderr)
else:
    print("==WARNING== No kernels were profiled.", file=sys.stderr)
report.write_text(table.getvalue())
times = {{"started": started, "child_exit": child_exit, "report_written": time.time()}}
(report.parent / "{times}").write_text(json.dumps(times))
sys.exit(code)
'''


def _job(role: str = "baseline", variant: str = "ncdhw", **params: object) -> Measure:
    card = load_report().card(CARD).to_dict()
    spec = CardSpec(card=card, experiment_module="experiments.vae_channels_last", device="cpu", scale=1.0,
                    timing=TimingSettings(warmup=1))
    return Measure(spec=spec, variant=variant, params=dict(params), baseline=role == "baseline",
                   card_path=f"{role}.json")


@pytest.fixture
def profiler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[backend.NcuProfiler]:
    """An NcuProfiler on the stand-in ncu, keeping every trial's folder; closed after the test."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "ncu"
    fake.write_text(FAKE_NCU.format(python=sys.executable, times=TIMES))
    fake.chmod(0o755)
    # The report is read back the way a machine without the ncu_report module reads it: `ncu --import`.
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.delenv("NCU_HOME", raising=False)
    monkeypatch.setattr(command, "NCU_INSTALL_ROOT", tmp_path / "none")
    monkeypatch.setattr(report_file, "ncu_report_module", lambda: None)
    monkeypatch.setattr(backend, "for_current_device", lambda: SimpleNamespace(to_dict=dict))
    made = backend.NcuProfiler({"executable": str(fake), "keep_dir": str(tmp_path / "keep"),
                                "available_metrics": None})
    yield made
    made.close()


def _ready(folder: Path) -> dict:
    """The waiting child's record once its imports are done (it writes one when ready)."""
    end = time.monotonic() + READY_WAIT_S
    while time.monotonic() < end:
        record = read_phases(folder)
        if record and "ready" in record["marks"]:
            return record
        time.sleep(0.05)
    raise AssertionError(f"no ready child in {folder} after {READY_WAIT_S:g} s")


def _kept(profile) -> Path:
    return Path(profile.settings["report"]).parent


def test_a_job_handed_to_a_waiting_child_gives_what_a_cold_start_gives(profiler: backend.NcuProfiler) -> None:
    assert profiler.pending is None  # nothing is started before a trial has shown that the chain works
    cold = profiler.profile(lambda: None, FACTS, _job())
    cold_cost = cold.settings["ncu_cost"]
    assert cold_cost["session"] == "cold" and cold_cost["passes"] == [9]
    pending = profiler.pending
    assert pending is not None and pending.alive()
    ready = _ready(pending.folder)
    assert ready["prestarted"] and not ready["cuda_initialized_before_job"]
    warm = profiler.profile(lambda: None, FACTS, _job())
    cost = warm.settings["ncu_cost"]
    assert cost["session"] == "prestarted" and cost["ready_at_handoff"] is True
    # The same job, the same kernels and numbers, whichever way the child was started.
    assert [(k.name, k.metrics) for k in warm.kernels] == [(k.name, k.metrics) for k in cold.kernels]
    assert warm.kernels[0].name.startswith(f"{SHAPE}/baseline/ncdhw/")
    # The warm trial's wall time starts at the handoff, after ncu started and the child finished its imports:
    # none of the start-up phases falls inside it. The cold one's starts before ncu does.
    times = json.loads((_kept(warm) / TIMES).read_text())
    record = read_phases(_kept(warm))
    assert record is not None
    marks = record["marks"]
    assert times["started"] < marks["ready"] <= cost["handed_at"] <= marks["job_seen"] <= marks["done"]
    assert marks["done"] <= times["child_exit"] <= times["report_written"]
    cold_times = json.loads((_kept(cold) / TIMES).read_text())
    assert cold_cost["handed_at"] <= cold_times["started"]
    assert set(cost["phases_s"]) >= {"torch_import", "harness_import", "wait", "profiled_call"}


def test_every_trial_after_the_first_finds_its_session_ready(profiler: backend.NcuProfiler,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    # The stand-in holds each trial until a session other than its own has imported (what the H200 shows:
    # a trial's ncu outlasts a session's start and imports). The next session must therefore be started while
    # a trial runs, not after its ncu exits, for it to be ready when its job is handed over.
    monkeypatch.setenv("FAKE_NCU_HOLD_S", str(READY_WAIT_S))
    jobs = [_job(), _job("trial", "channels_last_3d"), _job(), _job("trial", "channels_last_3d")]
    profiles = [profiler.profile(lambda: None, FACTS, job) for job in jobs]
    costs = [p.settings["ncu_cost"] for p in profiles]
    assert [c["session"] for c in costs] == ["cold"] + ["prestarted"] * 3
    assert [c.get("ready_at_handoff") for c in costs[1:]] == [True] * 3
    for job, profile in zip(jobs, profiles):  # each session ran the job handed to it
        role = "baseline" if job.baseline else "trial"
        assert profile.kernels[0].name.startswith(f"{SHAPE}/{role}/{job.variant}/")
    # Each next session was launched before the trial it follows had even finished its child.
    for before, after in zip(profiles, costs[1:]):
        child_exit = json.loads((_kept(before) / TIMES).read_text())["child_exit"]
        assert after["launched_at"] <= child_exit


def test_a_first_trial_that_fails_kills_the_session_started_beside_it(profiler: backend.NcuProfiler,
                                                                    tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    refusing = tmp_path / "refusing_ncu"  # an ncu that cannot profile here: it never runs the program
    refusing.write_text("#!/bin/sh\necho '==ERROR== ERR_NVGPUCTRPERM - no permission'\nexit 1\n")
    refusing.chmod(0o755)
    profiler.executable = str(refusing)
    started: list[backend.PendingSession] = []
    def start(*args: Any) -> backend.PendingSession:
        started.append(real_start(*args))
        return started[-1]

    real_start = backend.start_session
    monkeypatch.setattr(backend, "start_session", start)
    for _ in range(2):
        with pytest.raises(backend.NcuFailure):
            profiler.profile(lambda: None, FACTS, _job())
    # One session was started beside the first trial, on trust; it is gone, and none after the failure.
    assert len(started) == 1 and not started[0].alive() and not started[0].folder.exists()
    assert profiler.pending is None


def test_close_kills_the_waiting_session_and_removes_its_folder(profiler: backend.NcuProfiler) -> None:
    profiler.profile(lambda: None, FACTS, _job())
    pending = profiler.pending
    assert pending is not None
    child = _ready(pending.folder)["pid"]
    group = [pending.started.proc.pid, child]
    assert all(alive(pid) for pid in group)
    profiler.close()
    assert wait_dead(group) == [] and not pending.folder.exists() and profiler.pending is None


def test_a_session_that_ended_before_its_trial_is_replaced_by_a_cold_run(profiler: backend.NcuProfiler) -> None:
    profiler.profile(lambda: None, FACTS, _job())
    pending = profiler.pending
    assert pending is not None
    pending.started.kill()  # as a child that gave up waiting leaves it
    profile = profiler.profile(lambda: None, FACTS, _job("trial", "channels_last_3d"))
    cost = profile.settings["ncu_cost"]
    assert cost["session"] == "cold" and cost["dropped_session"].startswith("exit ")
    assert profile.kernels[0].name.startswith(f"{SHAPE}/trial/channels_last_3d/")
    assert not pending.folder.exists()


def test_the_phase_record_of_a_cold_child(tmp_path: Path) -> None:
    write_job(tmp_path, {"measure": plain(_job()), "nvtx_range": "harness_trial"})
    launched = time.time()
    proc = subprocess.run([sys.executable, "-m", "harness.trial.ncu_child", str(tmp_path / "trial_spec.json"),
                           "--launched", f"{launched:.6f}", "--phases", str(tmp_path / PHASES_NAME)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    record = read_phases(tmp_path)
    assert record is not None and record["prestarted"] is False and record["pid"] > 0
    assert list(record["phases"]) == ["start", "torch_import", "harness_import", "job_decode", "experiment_import",
                                      "workload_build", "variant_prepare", "warm_up", "profiled_call"]
    assert all(isinstance(s, float) and s >= 0 for s in record["phases"].values())
    marks = record["marks"]
    assert launched == pytest.approx(marks["launched"], abs=1e-5)
    assert marks["launched"] <= marks["main"] <= marks["ready"] <= marks["job_seen"] <= marks["done"]


def test_a_waiting_child_whose_owner_died_exits_without_importing(tmp_path: Path) -> None:
    owner = subprocess.Popen([sys.executable, "-c", "pass"])
    owner.wait()  # gone and reaped: its pid names no process
    proc = subprocess.run([sys.executable, "-m", "harness.trial.ncu_child", str(tmp_path / "never.json"),
                           "--wait", "--owner", str(owner.pid), "--phases", str(tmp_path / PHASES_NAME)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == ncu_child.EXIT_NO_JOB
    record = read_phases(tmp_path)
    assert record is not None and record["no_job"] == f"owner {owner.pid} died"
    assert "torch_import" not in record["phases"]


def test_the_wait_ends_when_the_owner_dies_while_waiting(tmp_path: Path) -> None:
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    def end_owner() -> None:
        owner.kill()
        owner.wait()

    killer = threading.Timer(0.3, end_owner)
    killer.start()
    try:
        why = ncu_child.wait_for_job(tmp_path / "never.json", owner.pid, limit_s=60.0)
    finally:
        killer.cancel()
        owner.kill()
        owner.wait()
    assert why == f"owner {owner.pid} died"
    assert ncu_child.wait_for_job(tmp_path / "never.json", None, limit_s=0.0) == "no job within 0 s"
    write_job(tmp_path, {"measure": {}})
    assert ncu_child.wait_for_job(tmp_path / "trial_spec.json", os.getpid(), limit_s=60.0) is None


def test_replay_passes_from_ncu_progress_lines() -> None:
    text = ('==PROF== Connected to process 7 (python)\n'
            '==PROF== Profiling "nchwToNhwcKernel" - 0: 0%....50%....100% - 9 passes\n'
            '==PROF== Profiling "sm90_xmma_fprop" - 1: 0%....50%....100%program output\n - 11 passes\n'
            '==PROF== Profiling "k": 0%....50%....100% - 1 pass\n==PROF== Disconnected from process 7\n')
    assert replay_passes(text) == [9, 11, 1]


def _script(name: str) -> Any:
    """scripts/<name>.py as a module (the scripts are not a package)."""
    spec = importlib.util.spec_from_file_location(f"{name}_in_ncu_session_tests", REPO / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_cost_script_prints_a_line_per_card_and_form() -> None:
    cost = _script("ncu_trial_cost")
    phases = {"start": 0.05, "torch_import": 0.8, "harness_import": 0.05, "job_decode": 0.0, "profiled_call": 0.04}
    rows = [{"card": "vae-480-conv3d-96to96k333t6-13c157", "session": "cold", "phases_s": phases, "wall_s": 1.4,
             "after_child_s": 0.3, "passes": [9, 11]},
            {"card": "vae-480-conv3d-96to96k333t6-13c157", "session": "prestarted", "wall_s": 0.5,
             "phases_s": {**phases, "wait": 0.02}, "passes": []}]
    lines = cost.phase_table(rows)
    header = lines[0].split()
    assert header[:2] == ["card", "form"] and header[-3:] == ["after", "wall", "passes"] and len(lines) == 3
    assert all(len(line.split()) == len(header) for line in lines)
    cold, warm = (line.split() for line in lines[1:])
    assert cold[:2] == ["3t6-13c157", "cold"] and cold[-3:] == ["0.30", "1.40", "9/11"]
    assert warm[header.index("wait")] == "0.02" and cold[header.index("wait")] == "-"
    said = cost.summary_lines(rows)
    assert said[0].startswith("cold trial: mean 1.40 s wall, of which start + imports 0.90 s")
    assert said[1] == "pre-started trial: mean 0.50 s wall from its handoff"


def test_the_gpu_checks_ncu_budgets_and_what_its_summary_reads(tmp_path: Path) -> None:
    # The first ncu trial of a harness start is cold, the others were started ahead.
    assert Work(starts=1, ncu_trials=4).seconds() == HARNESS_START_S + 4 * NCU_JOB_S + NCU_START_S
    assert Work(ncu_trials=2, ncu_cold=1).seconds() == 2 * NCU_JOB_S + NCU_START_S
    assert "1 cold ncu start x" in Work(starts=1, ncu_trials=2).text()
    cost = {"session": "prestarted", "wall_s": 5.5, "passes": [9], "phases_s": {"profiled_call": 1.2}}
    (tmp_path / "baseline.json").write_text(json.dumps({"cards": [{"profiler_settings": {"ncu_cost": cost}}]}))
    (tmp_path / "trial_0001.json").write_text(json.dumps({"cards": [{"profiler_settings": {"seconds": 1}}]}))
    found = run_folder._ncu_costs(tmp_path)
    assert list(found) == ["baseline"] and found["baseline"]["wall_s"] == 5.5
    assert found["baseline"]["passes"] == [9] and found["baseline"]["ready_at_handoff"] is None


@pytest.mark.parametrize("math, allowed", [(IEEE, False), (TF32, True)])
def test_the_ncu_child_runs_a_card_under_its_math_mode(math: str, allowed: bool) -> None:
    """The profiled call runs under the card's pinned math mode, as the worker's timing does: a float32 conv card
    decided 'ieee' must not profile cuDNN's TF32 kernels (torch's default) under ncu, nor a 'tf32' one the
    reverse. The process-wide switch is set to the opposite first, and is back to it afterwards."""
    from tests.profile import math_probe_experiment as probe

    card = load_report().card(CARD).to_dict()
    spec = CardSpec(card=card, experiment_module=probe.__name__, device="cpu", scale=0.2,
                    timing=TimingSettings(warmup=1),
                    dtype=CardDtype("float32", "config", math, "the test's"))
    request = Measure(spec=spec, variant="base", baseline=True, card_path="baseline.json")
    probe.SEEN.clear()
    before = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = not allowed
    try:
        ncu_child.run_trial({"measure": plain(request), "nvtx_range": "harness_trial"}, ncu_child.PhaseClock(None))
        assert torch.backends.cudnn.allow_tf32 is (not allowed)  # restored after the trial
    finally:
        torch.backends.cudnn.allow_tf32 = before
    # prepare, one warm-up call, the profiled call
    assert probe.SEEN == [("prepare", allowed), ("call", allowed), ("call", allowed)]
