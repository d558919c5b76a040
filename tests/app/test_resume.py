"""Resuming and stopping, each test a trap a user fell into (harness.run.provenance, harness.run.stopping).

1. docs/experiments.md's resume recipe on another experiment's folder ran the default experiment into it, with exit 0,
   overwriting its outputs; a resume of a folder that did not exist started a fresh run.
2. A stopped run looked finished (no mark in summary.md or report.html, no run.json), its trial in flight
   stayed in the study as a FAIL without a reason, and after resume the first card's drift checks were gone.

The app runs as a subprocess at tiny settings (tests/app/test_run.py); stops land during a trial of the
`pause` variant of tests/app/fault_experiment.py, which sleeps 2-3 s on its first call.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest

from harness.cards.model import load_report
from harness.run.provenance import (
    IDENTITY_FILE,
    ResumeError,
    check_run_dir,
    claim_run_dir,
    first_difference,
    run_identity,
)
from harness.run.stopping import mark_stopped
from harness.search import budget_trials, make_storage
from tests.app.test_fault_injection import peak_cache  # noqa: F401  (a fixture: made-up CPU peaks)

REPO = Path(__file__).resolve().parents[2]
CARD = "vae-480-conv3d-96to3k333t3-842ecd"
SMALL = "vae-480-conv3d-16to16k111t3-9507c7"
TINY = ["workload.cpu_scale=0.08", "timing.budget_s=0.05", "timing.drift_budget_s=0.02", "timing.confirm_rounds=1"]
# Every trial stays in flight for 2-3 s (the variant sleeps on its first call): a signal lands during one.
PAUSE = ["experiment=vae_channels_last", "experiment.module=tests.app.fault_experiment",
         "experiment.name=fault_injection", "~experiment.space",
         "+experiment.space={pause: {seconds: [2.0, 2.5, 3.0]}}"]
SPACE_SIZE = 3


def _env(peaks: Path) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path, "HARNESS_CACHE_DIR": str(peaks)}


def _argv(run_dir: Path, *overrides: str) -> list[str]:
    return [sys.executable, "-m", "harness", f"hydra.run.dir={run_dir}", *TINY, *overrides]


def _run(peaks: Path, run_dir: Path, *overrides: str) -> subprocess.CompletedProcess:
    return subprocess.run(_argv(run_dir, *overrides), capture_output=True, text=True, timeout=600, cwd=REPO,
                          env=_env(peaks))


def _errors(proc: subprocess.CompletedProcess) -> list[str]:
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return [line for line in proc.stderr.splitlines() if line.startswith("error:")]


def _snapshot(folder: Path) -> dict[str, tuple[int, str]]:
    """Every file under `folder` with its mtime and content hash: what 'nothing overwritten' means."""
    return {str(p.relative_to(folder)): (p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def bf16_run(tmp_path_factory, peak_cache) -> Path:  # noqa: F811
    """A finished vae_bf16 run: the folder the user resumed with the default experiment."""
    run_dir = tmp_path_factory.mktemp("bf16") / "run"
    proc = _run(peak_cache, run_dir, "experiment=vae_bf16", f"cards=[{CARD}]")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return run_dir


def _copy(run_dir: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)  # copy2: mtimes kept
    return copy


@pytest.mark.slow
@pytest.mark.parametrize("overrides, made_by", [
    ([], "vae_channels_last"),  # docs/experiments.md's recipe as the user ran it: the default experiment
    (["experiment=auto", f"cards=[{CARD}]"], "auto"),
])
def test_resume_into_another_experiments_folder_is_refused_and_overwrites_nothing(
        bf16_run, tmp_path, peak_cache, overrides, made_by):  # noqa: F811
    run_dir = _copy(bf16_run, tmp_path)
    before = _snapshot(run_dir)
    proc = _run(peak_cache, run_dir, *overrides, "search.resume=true")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert _errors(proc) == [f"error: {run_dir} was made by experiment vae_bf16, not {made_by}; "
                             "resume with experiment=vae_bf16 or choose another hydra.run.dir"]
    assert _snapshot(run_dir) == before  # summary.md, best.json, report.html, .hydra/ and trials/ untouched


@pytest.mark.slow
@pytest.mark.parametrize("overrides, named", [
    (["~experiment.space", "+experiment.space={low_precision: {dtype: [float16], memory_format: [contiguous]}}"],
     "experiment.space.low_precision.dtype="),
    (["workload.cpu_scale=0.1"], "workload.cpu_scale=0.08, not 0.1"),
])
def test_resume_with_a_changed_space_or_workload_is_refused(
        bf16_run, tmp_path, peak_cache, overrides, named):  # noqa: F811
    run_dir = _copy(bf16_run, tmp_path)
    before = _snapshot(run_dir)
    proc = _run(peak_cache, run_dir, "experiment=vae_bf16", f"cards=[{CARD}]", *overrides, "search.resume=true")
    assert proc.returncode == 2, proc.stderr[-3000:]
    [error] = _errors(proc)
    assert error.startswith(f"error: {run_dir} was made with {named}"), error
    assert _snapshot(run_dir) == before


@pytest.mark.slow
def test_resume_of_the_same_run_is_allowed(bf16_run, tmp_path, peak_cache):  # noqa: F811
    run_dir = _copy(bf16_run, tmp_path)
    identity = (run_dir / IDENTITY_FILE).read_text()
    proc = _run(peak_cache, run_dir, "experiment=vae_bf16", f"cards=[{CARD}]", "search.resume=true")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (run_dir / IDENTITY_FILE).read_text() == identity  # the folder keeps the identity it was made with


def test_resume_into_a_missing_or_empty_folder_is_refused(tmp_path, peak_cache):  # noqa: F811
    missing = tmp_path / "missing"
    proc = _run(peak_cache, missing, "search.resume=true")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert _errors(proc) == [f"error: search.resume=true: {missing} does not exist, so there is nothing to resume; "
                             "pass the hydra.run.dir of the run to resume, or drop search.resume=true to start a "
                             "new run"]
    assert not missing.exists()  # refused before Hydra made the folder
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = _run(peak_cache, empty, "search.resume=true")
    assert proc.returncode == 2 and len(_errors(proc)) == 1
    assert "holds no run to resume" in _errors(proc)[0] and not any(empty.iterdir())


@pytest.mark.slow
def test_a_process_joining_a_shared_journal_study_may_start_a_new_folder(tmp_path, peak_cache):  # noqa: F811
    journal, run_dir = tmp_path / "shared.log", tmp_path / "gpu1"
    proc = _run(peak_cache, run_dir, f"cards=[{SMALL}]", "~experiment.space",
                "+experiment.space={channels_last_input: {}}", f"search.storage={journal}", "search.resume=true")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((run_dir / IDENTITY_FILE).read_text())["experiment"] == "vae_channels_last"
    study = optuna.load_study(study_name=f"vae_channels_last:{SMALL}", storage=make_storage(str(journal)))
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.COMPLETE]


# -- stopping ---------------------------------------------------------------------------------------


def _states(run_dir: Path) -> dict[str, list[str]]:
    """Each study's trial states, read from the run's journal as the app writes it (a journal's reads take no
    lock); nothing while the journal does not exist (opening it would create it in the run's folder)."""
    journal = run_dir / "optuna.log"
    if not journal.is_file():
        return {}
    storage = make_storage(str(journal))
    found: dict[str, list[str]] = {}
    for study in storage.get_all_studies():
        trials = sorted(storage.get_all_trials(study._study_id, deepcopy=False), key=lambda t: t.number)
        found[study.study_name.split(":", 1)[1]] = [t.state.name for t in trials]
    return found


def _stop_when(proc: subprocess.Popen, run_dir: Path, signum: int, ready) -> tuple[str, str]:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None and not ready(_states(run_dir)):
        time.sleep(0.1)
    assert proc.poll() is None, proc.communicate()[1][-3000:]
    assert ready(_states(run_dir)), _states(run_dir)
    proc.send_signal(signum)
    return proc.communicate(timeout=120)


def _resume_line(stderr: str, run_dir: Path, name: str) -> str:
    last = stderr.strip().splitlines()[-1]
    prefix = f"interrupted ({name}): what finished is in {run_dir}; resume with: "
    assert last.startswith(prefix), last
    return last[len(prefix):]


def _resume(command: str, peaks: Path) -> subprocess.CompletedProcess:
    """The printed resume line, run as printed (its `python` being this interpreter)."""
    args = shlex.split(command)
    assert args[:3] == ["python", "-m", "harness"] and args[3].startswith("experiment="), args
    assert args[-2:][0] == "search.resume=true" and args[-1].startswith("hydra.run.dir="), args
    return subprocess.run([sys.executable, *args[1:]], capture_output=True, text=True, timeout=600, cwd=REPO,
                          env=_env(peaks))


def _check_studies(run_dir: Path, cards: list[str]) -> None:
    """Exactly the space's size in counted trials, each configuration once, and no FAIL without a reason."""
    for card in cards:
        study = optuna.load_study(study_name=f"fault_injection:{card}", storage=make_storage(f"{run_dir}/optuna.log"))
        counted = budget_trials(study.trials)
        assert [t.state for t in counted] == [optuna.trial.TrialState.COMPLETE] * SPACE_SIZE, card
        assert len({json.dumps(t.params, sort_keys=True) for t in counted}) == SPACE_SIZE
        for trial in study.trials:
            if trial.state == optuna.trial.TrialState.FAIL:
                assert trial.user_attrs.get("status") == "interrupted", trial.user_attrs
                assert trial.user_attrs["reason"].startswith("interrupted ("), trial.user_attrs


@pytest.mark.slow
def test_sigterm_during_the_only_card_marks_the_run_stopped_and_resume_completes_it(tmp_path, peak_cache):  # noqa: F811
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(_argv(run_dir, *PAUSE, f"cards=[{SMALL}]"), cwd=REPO, env=_env(peak_cache),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, stderr = _stop_when(proc, run_dir, signal.SIGTERM, lambda s: "RUNNING" in s.get(SMALL, []))
    assert proc.returncode == 143 and "Traceback" not in stderr, stderr[-3000:]
    command = _resume_line(stderr, run_dir, "SIGTERM")
    run = json.loads((run_dir / "run.json").read_text())
    assert run["stopped"] == {"signal": "SIGTERM", "cards_done": 0, "cards_total": 1, "cards_finished": [],
                              "cards_not_finished": [SMALL], "resume": command}
    summary = (run_dir / "summary.md").read_text()
    assert summary.startswith("> **Stopped after 0 of 1 card** (SIGTERM)"), summary[:300]
    assert command in summary
    study = optuna.load_study(study_name=f"fault_injection:{SMALL}", storage=make_storage(f"{run_dir}/optuna.log"))
    [stopped] = [t for t in study.trials if t.state == optuna.trial.TrialState.FAIL]
    assert stopped.user_attrs["reason"].startswith("interrupted (SIGTERM): not a failure")

    resumed = _resume(command, peak_cache)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    _check_studies(run_dir, [SMALL])
    assert not (run_dir / "summary.md").read_text().startswith("> **Stopped")
    assert "stopped" not in json.loads((run_dir / "run.json").read_text())
    assert "failed:" not in (run_dir / "summary.md").read_text()  # the interrupted trial is no failure


@pytest.mark.slow
def test_sigint_after_one_of_two_cards_marks_summary_and_page_and_resume_keeps_the_drift_checks(
        tmp_path, peak_cache):  # noqa: F811
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(_argv(run_dir, *PAUSE, f"cards=[{SMALL},{CARD}]"), cwd=REPO, env=_env(peak_cache),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, stderr = _stop_when(proc, run_dir, signal.SIGINT, lambda s: "RUNNING" in s.get(CARD, []))
    assert proc.returncode == 130 and "Traceback" not in stderr, stderr[-3000:]
    command = _resume_line(stderr, run_dir, "SIGINT")
    run = json.loads((run_dir / "run.json").read_text())
    assert run["stopped"]["cards_done"] == 1 and run["stopped"]["cards_total"] == 2, run
    assert run["cards"] == [SMALL] and run["phases"]["measurement_s"] > 0
    summary = (run_dir / "summary.md").read_text()
    assert summary.startswith("> **Stopped after 1 of 2 cards** (SIGINT); not finished, so missing below: "
                              f"`{CARD}`; resume with: `{command}`"), summary[:500]
    page = (run_dir / "report.html").read_text()
    assert page.count("Stopped after 1 of 2 cards") == 1
    assert page.index("Stopped after 1 of 2 cards") < page.index("<h1>")  # at the top of the body
    drift = load_report(run_dir / "trials" / SMALL / "baseline.json").cards[0].extra["baseline_drift"]
    assert len(drift) == SPACE_SIZE - 1  # one re-timing of the baseline between two completed trials

    resumed = _resume(command, peak_cache)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    _check_studies(run_dir, [SMALL, CARD])
    summary = (run_dir / "summary.md").read_text()
    assert "Stopped" not in summary and "Stopped" not in (run_dir / "report.html").read_text()
    baseline = {c.id: c for c in load_report(run_dir / "baseline.json").cards}
    assert baseline[SMALL].extra["baseline_drift"] == drift  # the first run's drift checks, kept
    assert f"`{SMALL}` baseline re-timed {SPACE_SIZE - 1}x" in summary


# -- in process: the identity rules and the banner ----------------------------------------------------


def _cfg(**changes) -> dict:
    cfg = {"experiment": {"name": "vae_channels_last", "module": "experiments.vae_channels_last",
                          "space": {"a": {}}, "correctness": {"same_factor": 4}},
           "report": None, "cards": None, "search": {"resume": False, "storage": None},
           "workload": {"scale": None, "cpu_scale": 0.08, "seed": 0, "attention": {}, "cast": {}},
           "timing": {"budget_s": 0.05}, "inputs": {"dir": None}}
    for dotted, value in changes.items():
        *path, key = dotted.split("__")
        node = cfg
        for part in path:
            node = node[part]
        node[key] = value
    return cfg


def test_the_first_difference_is_named_by_its_config_key():
    made = run_identity(_cfg(), device="cpu", profiler="cpu", cards=[CARD])
    assert first_difference(made, run_identity(_cfg(), device="cpu", profiler="cpu", cards=[CARD])) is None
    assert first_difference(made, run_identity(_cfg(), device="cpu", profiler="cpu", cards=[SMALL]))[0] == "cards"
    assert first_difference(made, run_identity(_cfg(timing__budget_s=0.1)))[:3] == ("timing.budget_s", 0.05, 0.1)
    added = first_difference(made, run_identity(_cfg(experiment__space={"a": {}, "b": {}})))
    assert added[0] == "experiment.space.b" and added[2] == {}
    # Unknown before the run resolves them (the check before Hydra starts): not compared.
    assert first_difference(made, run_identity(_cfg())) is None
    assert first_difference(made, run_identity(_cfg(), device="cuda"))[:3] == ("device", "cpu", "cuda")
    # What every card is built in: a resume in another dtype would mix two ops' trials in one study.
    as_bf16 = run_identity(_cfg(workload__dtype="bfloat16"))
    assert first_difference(made, as_bf16)[0] == "workload.dtype"
    assert first_difference(as_bf16, run_identity(_cfg(workload__dtype="float32")))[1:3] == ("bfloat16", "float32")
    assert first_difference(as_bf16, run_identity(_cfg()))[0] == "workload.dtype"


def test_an_auto_sub_run_may_start_fresh_on_resume_but_not_elsewhere(tmp_path):
    auto = tmp_path / "auto"
    auto.mkdir()
    claim_run_dir(auto, _cfg(experiment__name="auto", experiment__module=None), cards=[CARD])
    resume = _cfg(search__resume=True)
    assert check_run_dir(auto / "vae_channels_last", resume) is None  # a sub-run the stopped auto run never reached
    with pytest.raises(ResumeError, match="holds no run to resume"):
        elsewhere = tmp_path / "plain" / "vae_channels_last"
        elsewhere.mkdir(parents=True)
        check_run_dir(elsewhere, resume)
    with pytest.raises(ResumeError, match="was made by experiment auto, not vae_channels_last"):
        check_run_dir(auto, resume)


def test_a_folder_made_before_identities_is_judged_by_its_studies(tmp_path):
    optuna.create_study(study_name=f"vae_bf16:{CARD}", storage=f"sqlite:///{tmp_path}/optuna.db")
    with pytest.raises(ResumeError, match=r"made by experiment vae_bf16 \(its studies in optuna.db\), not "
                                          "vae_channels_last; resume with experiment=vae_bf16"):
        check_run_dir(tmp_path, _cfg(search__resume=True))
    assert check_run_dir(tmp_path, _cfg(search__resume=True, experiment__name="vae_bf16")) is None


def test_a_fresh_run_into_another_runs_folder_is_refused(tmp_path):
    claim_run_dir(tmp_path, _cfg(experiment__name="vae_bf16"))
    with pytest.raises(ResumeError, match="choose another hydra.run.dir"):
        claim_run_dir(tmp_path, _cfg())


def test_the_stopped_banner_is_prepended_once_and_tops_the_page(tmp_path):
    (tmp_path / "summary.md").write_text("# vae_bf16\n\n| card |\n")
    (tmp_path / "report.html").write_text('<html><head></head><body class="x"><h1>run</h1></body></html>\n')
    for _ in range(2):  # stopped again after a resume: one banner, the newest
        mark_stopped(tmp_path, 1, 2, "SIGTERM", "python -m harness experiment=vae_bf16 search.resume=true "
                     "hydra.run.dir='a b'", pending=["c2"])
    summary = (tmp_path / "summary.md").read_text()
    assert summary.count("Stopped") == 1
    assert summary == ("> **Stopped after 1 of 2 cards** (SIGTERM); not finished, so missing below: `c2`; resume with: "
                       "`python -m harness experiment=vae_bf16 search.resume=true hydra.run.dir='a b'`\n\n"
                       "# vae_bf16\n\n| card |\n")
    page = (tmp_path / "report.html").read_text()
    assert page.count("Stopped after 1 of 2 cards") == 1
    assert page.index('<body class="x">') < page.index("Stopped") < page.index("<h1>")
    assert "hydra.run.dir='a b'</code>" in page  # the command shown verbatim
    empty = tmp_path / "empty"
    empty.mkdir()
    mark_stopped(empty, 0, None, "SIGINT", "cmd")
    assert (empty / "summary.md").read_text().startswith("> **Stopped before any card finished** (SIGINT)")
    assert not (empty / "report.html").exists()
