"""Several processes on one study, and stopping/resuming without losing a trial.

The first part drives harness.search directly (in process, a trivial objective): the shared queue,
stale trials of a dead process, interrupted trials, surplus trials. The second runs `python -m
harness` for real: two processes at once on one study in SQLite, a journal file and PostgreSQL
(HARNESS_TEST_POSTGRES_URL, set by .ci/run; skipped without it), and a run stopped with SIGTERM,
then resumed.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest

from harness import search, signals
from harness.search import (
    INTERRUPTED_KEY,
    SURPLUS_KEY,
    budget_trials,
    make_storage,
    open_study,
    plan_search,
    remaining_trials,
    suggest,
)
from tests.search_settings import search_config

Complete, Waiting, Running, Fail = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.WAITING,
                                    optuna.trial.TrialState.RUNNING, optuna.trial.TrialState.FAIL)
SPACE = {"a": {}, "b": {"x": [1, 2]}, "c": {"n": {"low": 1, "high": 2}}}  # 5 configurations
optuna.logging.set_verbosity(optuna.logging.WARNING)


def _objective(calls: list):
    def objective(trial: optuna.Trial) -> float:
        variant, params = suggest(trial, SPACE)
        calls.append((variant, tuple(sorted(params.items()))))
        return float(len(calls))
    return objective


def _configs(trials) -> list[str]:
    return sorted(json.dumps(t.params, sort_keys=True) for t in trials)


@pytest.fixture(params=["sqlite", "journal"])
def url(request, tmp_path) -> str:
    return f"sqlite:///{tmp_path}/optuna.db" if request.param == "sqlite" else str(tmp_path / "optuna.log")


def test_the_queue_holds_n_trials_and_an_exhaustive_search_covers_each_configuration_once(url):
    plan = plan_search(SPACE, search_config(n_trials=16, seed=0))
    assert plan.sampler_name == "bruteforce" and plan.n_trials == 5
    study = open_study("s", url, plan.sampler, resume=False)
    assert [t.state for t in study.trials] == [Waiting] * 5 and remaining_trials(study, 5) == 5
    calls: list = []
    study.optimize(_objective(calls), n_trials=50)
    assert len(calls) == 5 and len(set(calls)) == 5
    assert [t.state for t in study.trials] == [Complete] * 5
    # Resuming with a larger budget on a covered space queues nothing; a smaller one runs nothing.
    study = open_study("s", url, plan_search(SPACE, search_config(n_trials=50)).sampler, resume=True)
    assert len(study.trials) == 5 and remaining_trials(study, 5) == 0


def test_n_trials_caps_the_study_and_a_larger_n_on_resume_tops_it_up(url):
    study = open_study("s", url, plan_search(SPACE, search_config(n_trials=2, seed=1)).sampler, resume=False)
    calls: list = []
    study.optimize(_objective(calls), n_trials=50)  # stops when the queue is empty, not after 50
    assert len(calls) == 2
    study = open_study("s", url, plan_search(SPACE, search_config(n_trials=4, seed=1)).sampler, resume=True)
    study.optimize(_objective(calls), n_trials=50)
    assert len(calls) == 4 and len(set(calls)) == 4


def test_tpe_trials_are_seeded_per_trial_number(tmp_path):
    space = {"a": {"x": {"low": 0.0, "high": 1.0}}}
    draws = []
    for name in ("one", "two"):
        plan = plan_search(space, search_config(n_trials=3, sampler="tpe", seed=7))
        study = open_study(name, f"sqlite:///{tmp_path}/o.db", plan.sampler, resume=False)
        study.optimize(lambda t: suggest(t, space)[1]["x"], n_trials=10)
        draws.append([t.params["a.x"] for t in study.trials])
    assert draws[0] == draws[1]  # same seed, same trial numbers: the same draws
    assert len(set(draws[0])) == 3  # not the same draw for every trial (processes share one seed)


def test_a_trial_past_the_queue_is_surplus_and_does_not_measure(url):
    study = open_study("s", url, plan_search(SPACE, search_config(n_trials=2)).sampler, resume=False)
    storage = study._storage
    for trial in study.get_trials(states=(Waiting,)):  # another process took both queued trials
        assert storage.set_trial_state_values(trial._trial_id, state=Running)
    calls: list = []
    study.optimize(_objective(calls), n_trials=1)
    assert calls == []
    trials = study.get_trials()
    assert trials[-1].system_attrs.get(SURPLUS_KEY) and trials[-1].state == optuna.trial.TrialState.PRUNED
    assert len(budget_trials(trials)) == 2 and remaining_trials(study, 2) == 0


def _kill_mid_trial(study: optuna.Study) -> optuna.trial.FrozenTrial:
    """What a process killed by SIGKILL leaves: a queued trial RUNNING, with a heartbeat that stops."""
    storage = study._storage
    trial = study.get_trials(states=(Waiting,))[0]
    assert storage.set_trial_state_values(trial._trial_id, state=Running)
    storage.record_heartbeat(trial._trial_id)
    return trial


def test_a_trial_of_a_dead_process_is_failed_and_requeued_on_resume(url):
    cfg = search_config(n_trials=16, heartbeat_interval_s=1, grace_period_s=1, max_retry=1)
    storage = make_storage(url, cfg)
    study = open_study("s", storage, plan_search(SPACE, cfg).sampler, resume=False)
    dead = _kill_mid_trial(study)
    time.sleep(2.5)  # past the grace period
    study = open_study("s", storage, plan_search(SPACE, cfg).sampler, resume=True)
    assert study.trials[dead.number].state == Fail
    retry = [t for t in study.trials if t.system_attrs.get("failed_trial") == dead.number]
    assert len(retry) == 1 and retry[0].state == Waiting
    calls: list = []
    study.optimize(_objective(calls), n_trials=50)
    finished = [t for t in budget_trials(study.trials)]
    assert [t.state for t in finished] == [Complete] * 5 and len(set(_configs(finished))) == 5


def test_without_heartbeat_resume_fails_trials_running_past_the_grace_period(tmp_path):
    cfg = search_config(n_trials=16, heartbeat_interval_s=None, grace_period_s=1, max_retry=1)
    storage = make_storage(f"sqlite:///{tmp_path}/o.db", cfg)
    study = open_study("s", storage, plan_search(SPACE, cfg).sampler, resume=False)
    storage_trial = study.get_trials(states=(Waiting,))[0]
    assert storage.set_trial_state_values(storage_trial._trial_id, state=Running)
    study = open_study("s", storage, plan_search(SPACE, cfg).sampler, resume=True)
    assert study.trials[storage_trial.number].state == Running  # younger than the grace period: left alone
    time.sleep(1.5)
    study = open_study("s", storage, plan_search(SPACE, cfg).sampler, resume=True)
    assert study.trials[storage_trial.number].state == Fail
    assert len(budget_trials(study.trials)) == 5


def _signal_self(signum: int) -> None:
    """Send this process `signum` and wait until its handler (harness.signals') has run."""
    os.kill(os.getpid(), signum)
    until = time.monotonic() + 5
    while signals.pending() is None and time.monotonic() < until:
        time.sleep(0.001)


def test_an_interrupted_trial_goes_back_in_the_queue(url, stop_signals):
    study = open_study("s", url, plan_search(SPACE, search_config(n_trials=16)).sampler, resume=False)
    calls: list = []
    inner = _objective(calls)

    def objective(trial: optuna.Trial) -> float:
        if len(calls) == 2:
            _signal_self(signal.SIGTERM)  # while the trial measures: recorded, nothing raised
            signals.check()  # where the worker's reply is awaited (harness.run.worker): the stop is raised
        return inner(trial)

    with pytest.raises(signals.Stopped):
        study.optimize(objective, n_trials=50, catch=(Exception,))
    signals.reset()
    stopped = [t for t in study.trials if t.state == Fail]
    assert len(stopped) == 1 and stopped[0].system_attrs[INTERRUPTED_KEY] == "SIGTERM"
    study = open_study("s", url, plan_search(SPACE, search_config(n_trials=16)).sampler, resume=True)
    study.optimize(inner, n_trials=50)
    assert len(calls) == 5 and len(set(calls)) == 5  # the interrupted configuration was measured after all
    assert [t.state for t in budget_trials(study.trials)] == [Complete] * 5


def test_a_trial_whose_process_is_gone_is_requeued_at_once_on_the_same_host(url):
    cfg = search_config(n_trials=16)  # default heartbeat: 60 s interval, 180 s grace
    study = open_study("s", make_storage(url, cfg), plan_search(SPACE, cfg).sampler, resume=False)
    dead = _kill_mid_trial(study)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    study._storage.set_trial_system_attr(dead._trial_id, search.OWNER_KEY,
                                         {"host": socket.gethostname(), "pid": int(gone.stdout)})
    alive = study.get_trials(states=(Waiting,))[0]
    assert study._storage.set_trial_state_values(alive._trial_id, state=Running)
    study._storage.set_trial_system_attr(alive._trial_id, search.OWNER_KEY,
                                         {"host": socket.gethostname(), "pid": os.getpid()})
    study = open_study("s", make_storage(url, cfg), plan_search(SPACE, cfg).sampler, resume=True)
    assert study.trials[dead.number].state == Fail  # no waiting for the grace period
    assert study.trials[alive.number].state == Running  # a live process's trial is left alone
    assert [t.system_attrs.get("failed_trial") for t in study.trials if t.state == Waiting].count(dead.number) == 1


def test_the_exhaustive_queue_order_follows_search_seed(tmp_path):
    orders = []
    for i, seed in enumerate((3, 3, 4)):
        plan = plan_search(SPACE, search_config(seed=seed))
        study = open_study(f"s{i}", f"sqlite:///{tmp_path}/o.db", plan.sampler, resume=False)
        orders.append([json.dumps(t.system_attrs["fixed_params"], sort_keys=True) for t in study.trials])
    assert orders[0] == orders[1] and sorted(orders[0]) == sorted(orders[2]) and orders[0] != orders[2]


def test_environment_is_complete_and_its_config_hash_ignores_how_results_are_shared():
    from harness.trial.environment import describe_environment

    base = {"search": {"n_trials": 4, "seed": 0}, "workload": {"seed": 0}}
    env = describe_environment("cpu", base)
    for key in ("hostname", "platform", "python", "torch", "numpy", "optuna", "cuda", "cudnn", "cpu_name",
                "torch_threads", "device_kind", "device_name", "cuda_visible_devices", "config_hash"):
        assert key in env, key
    shared = {"search": {**base["search"], "storage": "x.log", "resume": True, "worker": 3}, "workload": {"seed": 0}}
    assert describe_environment("cpu", shared)["config_hash"] == env["config_hash"]
    for changed in ({"search": {"n_trials": 4, "seed": 1}, "workload": {"seed": 0}},
                    {"search": {"n_trials": 4, "seed": 0}, "workload": {"seed": 1}}):
        assert describe_environment("cpu", changed)["config_hash"] != env["config_hash"]


@pytest.mark.gpu
def test_environment_on_a_gpu_names_driver_device_and_clocks():
    from harness.trial.environment import describe_environment

    env = describe_environment("cuda", {})
    assert env["device_kind"] == "cuda" and env["device_name"] and env["cuda"] and env["compute_capability"]
    assert env["driver"], "no driver version from NVML or /proc/driver/nvidia/version"
    assert env["device_uuid"] and env["device_index"] == 0
    assert "sm_clock_mhz" in env and "max_sm_clock_mhz" in env and "mem_clock_mhz" in env


# -- `python -m harness`, for real -----------------------------------------------------------------

CARD = "vae-480-conv3d-16to16k111t3-9507c7"
STUDY = f"vae_channels_last:{CARD}"
PAUSE_STUDY = f"fault_injection:{CARD}"  # the study of tests/app/fault_experiment.py
TINY = ["experiment=vae_channels_last", f"cards=[{CARD}]", "workload.cpu_scale=0.05", "timing.budget_s=0.05",
        "timing.min_repeats=3", "timing.confirm_rounds=1", "timing.drift_budget_s=0.02"]
REPO = Path(__file__).resolve().parents[2]
# One thread each: two processes on a 2-core machine; the repository on the path for the test experiment.
ENV = {**os.environ, "OMP_NUM_THREADS": "1",
       "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}


def _start(run_dir: Path, *overrides: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "harness", f"hydra.run.dir={run_dir}", *TINY, *overrides],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)


def _postgres_url() -> str:
    url = os.environ.get("HARNESS_TEST_POSTGRES_URL")
    if not url:
        pytest.skip("HARNESS_TEST_POSTGRES_URL is not set (.ci/run sets it after starting PostgreSQL)")
    try:
        make_storage(url)
    except search.SearchError as exc:
        pytest.skip(f"PostgreSQL at HARNESS_TEST_POSTGRES_URL is unreachable: {exc}")
    return url


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sqlite", "journal", "postgresql"])
def test_two_processes_share_one_study(tmp_path, kind):
    if kind == "postgresql":
        storage = _postgres_url()
        if STUDY in optuna.study.get_all_study_names(make_storage(storage)):  # an earlier run's
            optuna.delete_study(study_name=STUDY, storage=make_storage(storage))
    else:
        storage = f"sqlite:///{tmp_path}/shared.db" if kind == "sqlite" else str(tmp_path / "shared.log")
    overrides, study_name = [f"search.storage={storage}"], STUDY
    # n_trials=2 of the three variants: the cap holds for the study, not per process.
    procs = [_start(tmp_path / f"run{i}", *overrides, "search.resume=true", "search.n_trials=2") for i in (0, 1)]
    outs = [p.communicate(timeout=600) for p in procs]
    for proc, (_stdout, stderr) in zip(procs, outs):
        assert proc.returncode == 0, stderr[-3000:]
    study = optuna.load_study(study_name=study_name, storage=make_storage(storage))
    counted = budget_trials(study.trials)
    assert [t.state for t in counted] == [Complete, Complete], [(t.number, t.state) for t in study.trials]
    assert len(set(_configs(counted))) == 2  # two different variants, each once
    for i in (0, 1):
        run = tmp_path / f"run{i}"
        for name in ("summary.md", "best.json", "diff.json", "run.json"):
            assert (run / name).exists(), (i, name)
    # Between them the two processes measured both trials.
    cards = [p for i in (0, 1) for p in (tmp_path / f"run{i}" / "trials" / CARD).glob("trial_*.json")]
    assert len(cards) == 2


@pytest.mark.slow
@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_stops_cleanly_and_resume_loses_nothing(tmp_path, signum, code):
    storage = f"sqlite:///{tmp_path}/optuna.db"
    run_dir = tmp_path / "run"
    # Trials that stay in flight for 2-3 s each (tests/app/fault_experiment.py), so the signal lands
    # during one whatever the machine's load.
    slow = ["experiment.module=tests.app.fault_experiment", "experiment.name=fault_injection", "~experiment.space",
            "+experiment.space={pause: {seconds: [2.0, 2.5, 3.0]}}",
            f"search.storage={storage}"]
    proc = _start(run_dir, *slow)
    deadline = time.monotonic() + 300
    state: list = []
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            state = [t.state for t in optuna.load_study(study_name=PAUSE_STUDY, storage=storage).trials]
        except Exception:  # not created yet
            state = []
        if Complete in state and Running in state:
            break
        time.sleep(0.2)
    assert proc.poll() is None, proc.communicate()[1][-3000:]
    assert Complete in state and Running in state, state
    proc.send_signal(signum)
    stdout, stderr = proc.communicate(timeout=120)
    name = signal.Signals(signum).name
    assert proc.returncode == code, stderr[-3000:]
    last = stderr.strip().splitlines()[-1]
    assert last.startswith(f"interrupted ({name}): ") and str(run_dir) in last, last
    assert "search.resume=true" in last and f"hydra.run.dir={run_dir}" in last and "Traceback" not in stderr
    study = optuna.load_study(study_name=PAUSE_STUDY, storage=storage)
    done_before = {t.number for t in study.trials if t.state == Complete}
    stopped = [t for t in study.trials if t.state == Fail]
    assert len(stopped) == 1 and stopped[0].system_attrs.get(INTERRUPTED_KEY) == name, \
        [(t.number, t.state, t.system_attrs) for t in study.trials]
    assert not [t for t in study.trials if t.state == Running]
    if signum == signal.SIGINT:
        return  # the same path as SIGTERM from here on

    resumed = _start(run_dir, *slow, "search.resume=true")  # the resume line's own overrides
    stdout, stderr = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, stderr[-3000:]
    study = optuna.load_study(study_name=PAUSE_STUDY, storage=storage)
    counted = budget_trials(study.trials)
    assert [t.state for t in counted] == [Complete] * 3 and len(set(_configs(counted))) == 3
    assert done_before <= {t.number for t in counted}  # no completed trial lost
    assert (run_dir / "summary.md").exists() and (run_dir / "best.json").exists()


def test_a_signal_during_optunas_bookkeeping_stops_the_search_after_it(tmp_path, stop_signals):
    """A signal that lands while Optuna files a trial (its tell, a storage write) is only recorded there: the
    trial is filed whole, no next trial starts, and the stop is raised once optimize has returned."""

    class SignalInTell(optuna.samplers.RandomSampler):
        def after_trial(self, study, trial, state, values):  # inside Optuna's tell
            _signal_self(signal.SIGTERM)
            assert signals.pending() == signal.SIGTERM  # recorded, and nothing was raised in here

    storage = f"sqlite:///{tmp_path}/o.db"
    study = optuna.create_study(storage=storage, sampler=SignalInTell())
    for _ in range(3):
        study.enqueue_trial({})
    study.optimize(lambda trial: trial.suggest_float("x", 0, 1), n_trials=3, callbacks=[search.stop_when_asked])
    with pytest.raises(signals.Stopped):
        signals.check()
    assert [t.state for t in optuna.load_study(study_name=study.study_name, storage=storage).trials] == [
        Complete, Waiting, Waiting]
