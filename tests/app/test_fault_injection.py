"""Fault injection: a variant that raises, segfaults, runs out of memory, hangs or is killed is a failed
trial with its reason; the study goes on in a new worker where needed, and the outputs stay valid.

The app runs as a subprocess on tests/app/fault_experiment.py (PYTHONPATH makes it importable by the
worker child too). A fixture seeds the CPU peak cache with made-up peaks, so no run spends seconds
measuring them (the numbers do not matter here).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest

from harness.boundary.replies import one_line
from harness.cards.measured import TrialLabel
from harness.cards.model import load_report
from harness.run.worker import CardSession, TrialWorker, exit_reason
from harness.search import make_storage
from harness.trial.handlers import is_out_of_memory

REPO = Path(__file__).resolve().parents[2]
STATUS_OF_FAULT = {"raise": "failed", "oom": "oom", "cuda_oom": "oom", "segfault": "crashed", "exit": "crashed",
                   "hang": "deadline", "wait_kill": "crashed"}
CARD = "vae-480-conv3d-16to16k111t3-9507c7"
STUDY = f"fault_injection:{CARD}"
TINY = ["experiment=vae_channels_last", "experiment.module=tests.app.fault_experiment",
        "experiment.name=fault_injection", f"cards=[{CARD}]",
        "workload.cpu_scale=0.05", "timing.budget_s=0.05", "timing.min_repeats=3", "timing.confirm_rounds=2",
        "timing.drift_budget_s=0.02", "~experiment.space"]


@pytest.fixture(scope="module")
def peak_cache(tmp_path_factory) -> Path:
    from harness.profile.cpu_peaks import CpuPeaks, _write_cache, cache_path, machine_key

    folder = tmp_path_factory.mktemp("peaks")
    old = os.environ.get("HARNESS_CACHE_DIR")
    os.environ["HARNESS_CACHE_DIR"] = str(folder)
    try:
        key = machine_key()
        _write_cache(cache_path(key), CpuPeaks(flops_per_s={"float32": 1e11}, mem_bw_bytes_per_s=1e10,
                                               sources={"float32": "test", "mem_bw": "test"}, **key))
    finally:
        if old is None:
            del os.environ["HARNESS_CACHE_DIR"]
        else:
            os.environ["HARNESS_CACHE_DIR"] = old
    return folder


def _env(peak_cache: Path, **extra: str) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path, "HARNESS_CACHE_DIR": str(peak_cache), **extra}


def _argv(run_dir: Path, space: str, *overrides: str) -> list[str]:
    return [sys.executable, "-m", "harness", f"hydra.run.dir={run_dir}", *TINY, f"+experiment.space={space}",
            *overrides]


def _run(run_dir: Path, peak_cache: Path, space: str, *overrides: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(_argv(run_dir, space, *overrides), capture_output=True, text=True, timeout=600,
                          cwd=REPO, env=_env(peak_cache, **env))


def _check(run_dir: Path, proc: subprocess.CompletedProcess, complete: int, failed: dict[str, str]) -> dict:
    """The study has `complete` COMPLETE trials and one FAIL per fault kind, whose reason starts as given;
    the trial cards on disk are the completed trials'; summary.md and diff.json are valid. run.json."""
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    study = optuna.load_study(study_name=STUDY, storage=make_storage(f"{run_dir}/optuna.log"))
    states = [t.state for t in study.trials]
    assert states.count(optuna.trial.TrialState.COMPLETE) == complete, states
    fails = {t.params["fault.kind"]: t for t in study.trials if t.state == optuna.trial.TrialState.FAIL}
    assert set(fails) == set(failed), {k: t.user_attrs for k, t in fails.items()}
    summary = (run_dir / "summary.md").read_text()
    for kind, prefix in failed.items():
        trial = fails[kind]
        reason = trial.user_attrs["reason"]
        # One status per kind of failure (harness.boundary.outcomes.TrialStatus), each a FAIL trial listed as failed.
        assert trial.user_attrs["status"] == STATUS_OF_FAULT[kind]
        assert reason.startswith(prefix), (kind, reason)
        assert "\n" not in reason
        assert f"failed: {reason[:150]}" in summary, (reason, summary)
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    on_disk = {p.name for p in (run_dir / "trials" / CARD).glob("trial_*.json")}
    assert on_disk == {Path(t.user_attrs["card"]).name for t in done}
    for trial in done:
        card = load_report(trial.user_attrs["card"]).cards[0]
        assert card.extra["harness"]["trial"] == trial.number and card.extra["correctness"]["feasible"]
        assert card.extra["timing"]["median_us"] > 0
    diff = json.loads((run_dir / "diff.json").read_text())
    assert [c["card"] for c in diff["cards"]] == ([CARD] if complete else [])
    assert load_report(run_dir / "best.json").cards[0].id == CARD
    assert (run_dir / "trials" / CARD / "reference.pt").exists()
    run = json.loads((run_dir / "run.json").read_text())
    assert run["phases"]["worker_startup_s"] > 0
    return run


@pytest.mark.slow
def test_exception_and_out_of_memory_fail_the_trial_and_the_worker_stays_up(tmp_path, peak_cache):
    proc = _run(tmp_path, peak_cache, "{fault: {kind: [raise, oom, cuda_oom]}, ok: {}}",
                "search.worker_memory_limit_gb=4")  # the 8 GiB allocation of `oom` is over this limit
    run = _check(tmp_path, proc, complete=1, failed={
        "raise": "ValueError: injected failure",
        "oom": "out of memory: RuntimeError: ",  # the CPU allocator's "can't allocate memory"
        "cuda_oom": "out of memory: OutOfMemoryError: CUDA out of memory",
    })
    assert "can't allocate memory" in (tmp_path / "summary.md").read_text()
    assert run["phases"]["worker_starts"] == 1  # none of these took the worker down


@pytest.mark.slow
def test_segfault_and_exit_fail_the_trial_and_a_new_worker_goes_on(tmp_path, peak_cache):
    proc = _run(tmp_path, peak_cache, "{fault: {kind: [segfault, exit]}, ok: {}}")
    run = _check(tmp_path, proc, complete=1, failed={
        "segfault": "worker died: SIGSEGV (segmentation fault)",
        "exit": "worker exited with status 3",
    })
    # Each death is followed by a request (a trial or the confirm rounds) that a new worker served.
    assert run["phases"]["worker_starts"] == 3
    assert "Fatal Python error: Segmentation fault" in (tmp_path / "worker.log").read_text()


@pytest.mark.slow
def test_hung_trial_is_killed_at_its_deadline(tmp_path, peak_cache):
    started = time.monotonic()
    proc = _run(tmp_path, peak_cache, "{fault: {kind: [hang]}, ok: {}}", "search.trial_deadline_s=15")
    run = _check(tmp_path, proc, complete=1, failed={"hang": "deadline: no result after 15 s"})
    assert run["phases"]["worker_starts"] == 2
    assert time.monotonic() - started < 300  # not the hour the variant sleeps


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _wait_for_file(path: Path, proc: subprocess.Popen, timeout: float = 180) -> int:
    until = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < until, "the variant never started"
        time.sleep(0.1)
    return int(path.read_text())


@pytest.mark.slow
def test_kill_9_of_the_worker_mid_trial_is_a_failed_trial(tmp_path, peak_cache):
    run_dir, pid_file = tmp_path / "run", tmp_path / "victim.pid"
    proc = subprocess.Popen(_argv(run_dir, "{fault: {kind: [wait_kill]}, ok: {}}"), cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=_env(peak_cache, HARNESS_FAULT_PID_FILE=str(pid_file)))
    try:
        pid = _wait_for_file(pid_file, proc)
        assert pid == int((run_dir / "worker.pid").read_text())  # the variant runs in the worker
        os.kill(pid, signal.SIGINT)  # Ctrl-C is the parent's: the worker ignores it
        time.sleep(0.5)
        assert _alive(pid)
        os.kill(pid, signal.SIGKILL)
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    result = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    run = _check(run_dir, result, complete=1, failed={
        "wait_kill": "worker died: SIGKILL (killed (the kernel's OOM killer, or kill -9))"})
    assert run["phases"]["worker_starts"] == 2


@pytest.mark.slow
def test_the_worker_dies_with_the_app(tmp_path, peak_cache):
    run_dir, pid_file = tmp_path / "run", tmp_path / "victim.pid"
    proc = subprocess.Popen(_argv(run_dir, "{fault: {kind: [wait_kill]}}"), cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=_env(peak_cache, HARNESS_FAULT_PID_FILE=str(pid_file)))
    try:
        pid = _wait_for_file(pid_file, proc)
    finally:
        proc.kill()
        proc.wait()
    until = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < until:
        time.sleep(0.1)
    assert not _alive(pid), "the worker outlived the app"


@pytest.mark.slow
def test_ctrl_c_stops_the_app_and_its_worker_without_a_traceback(tmp_path, peak_cache):
    run_dir, pid_file = tmp_path / "run", tmp_path / "victim.pid"
    proc = subprocess.Popen(_argv(run_dir, "{fault: {kind: [wait_kill]}}"), cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                            env=_env(peak_cache, HARNESS_FAULT_PID_FILE=str(pid_file)))
    try:
        pid = _wait_for_file(pid_file, proc)
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole foreground group
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr[-3000:]
    assert "interrupted" in stderr and "Traceback" not in stderr, stderr[-3000:]
    until = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < until:
        time.sleep(0.1)
    assert not _alive(pid)


def _worker_of(pid: int) -> int | None:
    """The pid of `pid`'s worker child (python -m harness.trial), if it has one yet."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                cmdline = (entry / "cmdline").read_bytes()
            except (OSError, IndexError, ValueError):
                continue
            if ppid == pid and b"harness.trial" in cmdline:
                return int(entry.name)
    return None


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc for the worker child")
def test_ctrl_c_while_the_app_still_imports_is_one_line(tmp_path, peak_cache):
    """The worker child starts first (harness.run.worker.spawn_ahead); a Ctrl-C from then on, while the app
    imports Hydra and Optuna, is the stop line and exit 130, not an import's traceback, and the child goes too.
    Wherever the signal lands (an import's weakref callback swallowed the exit the old handler raised there, and
    the run exited 0), it is only recorded (harness.signals), and start-up stops at its next check."""
    proc = subprocess.Popen(_argv(tmp_path / "run", "{ok: {}}"), cwd=REPO, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True, env=_env(peak_cache))
    try:
        until, child = time.monotonic() + 60, None
        while child is None and proc.poll() is None and time.monotonic() < until:
            child = _worker_of(proc.pid)
            time.sleep(0.005)
        assert child is not None, "no worker child started"
        os.killpg(proc.pid, signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr[-3000:]
    assert stderr.strip().splitlines() == ["interrupted (SIGINT) before the run started: nothing was measured"]
    until = time.monotonic() + 10
    while _alive(child) and time.monotonic() < until:
        time.sleep(0.1)
    assert not _alive(child)


@pytest.mark.slow
@pytest.mark.parametrize("kind, reason", [("raise", "ValueError: injected failure"),
                                          ("segfault", "worker died: SIGSEGV (segmentation fault)")])
def test_a_failing_baseline_is_one_line(tmp_path, peak_cache, kind, reason):
    proc = _run(tmp_path, peak_cache, "{ok: {}}", HARNESS_FAULT_BASELINE=kind)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    error = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert error == [f"error: card {CARD}: the baseline base failed: {reason}"
                     + ("; its last output is in worker.log" if kind == "segfault" else "")]


@pytest.mark.slow
def test_a_new_worker_checks_against_the_saved_reference(tmp_path, peak_cache, monkeypatch):
    """After a crash the next trial is checked against reference.pt, not a recomputed baseline."""
    from harness.boundary.outcomes import TrialStatus
    from harness.boundary.spec import CardSpec, CorrectnessRule, TimingSettings
    from harness.cards.lint import lint_report
    from harness.cards.model import load_report as load

    monkeypatch.setenv("HARNESS_CACHE_DIR", str(peak_cache))
    monkeypatch.syspath_prepend(str(REPO))
    card = lint_report(load()).normalized.card(CARD)
    spec = CardSpec(card=card.to_dict(), experiment_module="tests.app.fault_experiment", device="cpu", scale=0.05,
                    correctness=CorrectnessRule(4, 4),
                    timing=TimingSettings(warmup=1, min_repeats=3, budget_s=0.02), profiler={"name": "cpu"},
                    reference_path=str(tmp_path / "reference.pt"))
    worker = TrialWorker(log_path=tmp_path / "worker.log")
    session = CardSession(worker, spec, deadline_s=120)
    label = TrialLabel(experiment="fault_injection", variant="fault", role="trial")
    try:
        base = session.measure(baseline=True, variant="base", params={}, label=label,
                               card_path=tmp_path / "baseline.json")
        assert base.ok, base.reason
        first_pid = worker.pid
        crash = session.measure(variant="fault", params={"kind": "segfault"}, label=label,
                                card_path=tmp_path / "t1.json")
        assert crash.status is TrialStatus.CRASHED and crash.restarted and worker.pid is None
        assert not (tmp_path / "t1.json").exists()
        again = session.measure(variant="ok", params={}, label=label, card_path=tmp_path / "t2.json")
        assert again.ok, again.reason
        assert worker.pid != first_pid and len(worker.startups) == 2
        # The same op as the baseline: its error against the saved float64 reference is the baseline's.
        assert again.judgement.feasible
        assert again.judgement.max_rel == base.judgement.max_rel
        assert again.judgement.baseline_error == base.judgement.max_rel
        # Without the saved reference a new worker has nothing to check against.
        worker.kill()
        (tmp_path / "reference.pt").unlink()
        lost = session.measure(variant="ok", params={}, label=label, card_path=tmp_path / "t3.json")
        assert lost.status is TrialStatus.FAILED and "no correctness reference" in lost.reason
        assert worker.pid is not None  # an exception does not cost the worker
        # The same worker serves a later run of the process (experiment=auto): it logs to that run's folder.
        worker.use_run_dir(tmp_path / "next")
        assert (tmp_path / "next" / "worker.pid").read_text().strip() == str(worker.pid)
        assert session.measure(baseline=True, variant="base", params={}, label=label,
                               card_path=tmp_path / "next" / "baseline.json").ok
        raised = session.measure(variant="fault", params={"kind": "raise"}, label=label,
                                 card_path=tmp_path / "t4.json")
        assert raised.status is TrialStatus.FAILED and raised.reason == "ValueError: injected failure"
        assert "injected failure" in (tmp_path / "next" / "worker.log").read_text()
        assert len(worker.startups) == 3
    finally:
        worker.close()


def test_reasons_are_one_line():
    import torch

    assert one_line(ValueError("first\nsecond")) == "ValueError: first"
    assert one_line(KeyError()) == "KeyError"
    assert len(one_line(RuntimeError("x" * 1000))) == 300
    assert exit_reason(-signal.SIGSEGV).startswith("worker died: SIGSEGV (segmentation fault)")
    assert exit_reason(-signal.SIGKILL).startswith("worker died: SIGKILL (killed (the kernel's OOM killer")
    assert exit_reason(3).startswith("worker exited with status 3")
    assert is_out_of_memory(MemoryError()) and is_out_of_memory(torch.OutOfMemoryError("CUDA out of memory"))
    assert is_out_of_memory(RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 8"))
    assert not is_out_of_memory(RuntimeError("shape mismatch"))


def test_timing_cpu_threads_reaches_the_worker(tmp_path):
    """timing.cpu_threads pins the measuring worker's torch threads (a shared CPU's stalls)."""
    worker = TrialWorker(log_path=tmp_path / "worker.log", cpu_threads=1)
    try:
        worker.start()
        assert worker.torch_threads == 1
    finally:
        worker.kill()
