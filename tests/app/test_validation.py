"""Config validation before anything is measured: one `error:` line, exit 2, no trial written.

Most cases call harness.validate / harness.search directly on a config composed the way Hydra
composes it (no torch import, no subprocess); a few go through `python -m harness` to check what
the user sees: one line on stderr, exit status 2, and no trials/ folder.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf, open_dict

from harness.search import SearchError, make_storage
from harness.validate import CONF_DIR, ConfigError, check_creatable, check_output_dir, problems, validate_config

CARD = "vae-480-conv3d-16to16k111t3-9507c7"


def composed(*overrides: str) -> dict:
    """The config `python -m harness <overrides>` would run with (the hydra node dropped)."""
    with initialize_config_dir(version_base=None, config_dir=str(CONF_DIR), job_name="test"):
        cfg = compose(config_name="config", overrides=list(overrides), return_hydra_config=True)
        with open_dict(cfg):
            del cfg["hydra"]
        return OmegaConf.to_container(cfg, resolve=True)


@pytest.mark.parametrize("experiment", sorted(p.stem for p in (CONF_DIR / "experiment").glob("*.yaml")))
def test_every_shipped_experiment_config_is_valid(experiment):
    assert problems(composed(f"experiment={experiment}")) == []


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["search.n_trials=0"], "search.n_trials=0: must be an integer >= 1"),
        (["search.n_trials=abc"], "search.n_trials='abc': must be an integer >= 1"),
        (["search.n_trials=2.5"], "search.n_trials=2.5: must be an integer"),
        (["search.n_trials=true"], "search.n_trials=True: must be an integer"),
        (["search.sampler=grid"], "search.sampler='grid': must be one of auto, bruteforce, tpe, random"),
        (["search.timeout=0"], "search.timeout=0: must be a number > 0 or null"),
        (["search.seed=-1"], "search.seed=-1: must be an integer >= 0 or null"),
        (["search.resume=maybe"], "search.resume='maybe': must be true or false"),
        (["search.heartbeat_interval_s=0"], "search.heartbeat_interval_s=0"),
        (["search.heartbeat_interval_s=60", "search.grace_period_s=30"], "search.grace_period_s=30: must be at least"),
        (["search.max_retry=-1"], "search.max_retry=-1"),
        (["experiment.correctness.same_factor=-1"], "experiment.correctness.same_factor=-1: must be a number > 0"),
        (["experiment.correctness.lowered_factor=tight"], "experiment.correctness.lowered_factor='tight'"),
        (["workload.scale=0"], "workload.scale=0: must be a number in (0, 1] or null"),
        (["workload.scale=2"], "workload.scale=2: must be a number in (0, 1]"),
        (["workload.cpu_scale=1.5"], "workload.cpu_scale=1.5: must be a number in (0, 1]"),
        (["workload.seed=-3"], "workload.seed=-3"),
        (["timing.warmup=-1"], "timing.warmup=-1: must be an integer >= 0"),
        (["timing.min_repeats=0"], "timing.min_repeats=0: must be an integer >= 1"),
        (["timing.budget_s=0"], "timing.budget_s=0: must be a number > 0"),
        (["timing.budget_s=fast"], "timing.budget_s='fast': must be a number > 0"),
        (["timing.same_band.cpu=1"], "timing.same_band.cpu=1: must be a number in (0, 1)"),
        (["timing.same_band.cuda=-0.1"], "timing.same_band.cuda=-0.1: must be a number in (0, 1)"),
        (["timing.confirm_rounds=-1"], "timing.confirm_rounds=-1"),
        (["+search.n_trails=4"], "unknown key search.n_trails"),
        (["+timing.budget=1"], "unknown key timing.budget "),
        (["+workload.scael=0.5"], "unknown key workload.scael"),
        (["+experiment.tolerence=1"], "unknown key experiment.tolerence"),
        (["+workload.attention.head=4"], "unknown key workload.attention.head"),
        (["+n_trials=4"], "unknown key n_trials"),
    ],
)
def test_bad_values_and_unknown_keys_are_named(overrides, message):
    with pytest.raises(ConfigError) as info:
        validate_config(composed(*overrides))
    text = str(info.value)
    assert message in text
    assert "\n" not in text


def test_all_problems_on_one_line():
    with pytest.raises(ConfigError) as info:
        validate_config(composed("timing.budget_s=0", "workload.cpu_scale=2", "search.n_trials=abc"))
    text = str(info.value)
    assert "\n" not in text and text.count("; ") == 2
    assert "timing.budget_s=0" in text and "workload.cpu_scale=2" in text and "search.n_trials='abc'" in text


def test_output_dir_checks(tmp_path):
    check_output_dir(tmp_path / "a" / "b")  # made, probed, left empty
    assert (tmp_path / "a" / "b").is_dir() and not any((tmp_path / "a" / "b").iterdir())
    check_creatable(tmp_path / "c" / "d")  # not made
    assert not (tmp_path / "c").exists()
    blocker = tmp_path / "file"
    blocker.write_text("x")
    for check in (check_output_dir, check_creatable):
        with pytest.raises(ConfigError, match="not"):
            check(blocker / "run")
    with pytest.raises(ConfigError, match="cannot write in /proc"):
        check_creatable("/proc/harness-run")


def test_storage_urls_are_checked(tmp_path):
    with pytest.raises(SearchError, match=r"search.storage='foo://x': use sqlite:///PATH"):
        make_storage("foo://x")
    with pytest.raises(SearchError, match="journal's folder"):
        make_storage(str(tmp_path / "missing" / "study.log"))
    with pytest.raises(SearchError, match="cannot be opened"):
        make_storage(f"sqlite:///{tmp_path}/missing/optuna.db")
    # A server that is not there: one line, the password masked.
    with pytest.raises(SearchError) as info:
        make_storage("postgresql+psycopg2://user:s3cret@127.0.0.1:1/nodb")
    text = str(info.value)
    assert "cannot be opened" in text and "s3cret" not in text and "127.0.0.1:1" in text and "\n" not in text
    # The forms that work: SQLite, a journal named by its .log suffix or by journal://.
    for url in (f"sqlite:///{tmp_path}/a.db", str(tmp_path / "b.log"), f"journal://{tmp_path}/c.journal"):
        assert make_storage(url).get_all_studies() == []
    assert (tmp_path / "c.journal").exists()


# -- through `python -m harness` ---------------------------------------------------------------------

TINY = ["workload.cpu_scale=0.05", "timing.budget_s=0.05", "timing.min_repeats=3", "timing.confirm_rounds=1",
        f"cards=[{CARD}]"]


def _run(run_dir: Path, *overrides: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", f"hydra.run.dir={run_dir}", *TINY, *overrides],
                          capture_output=True, text=True, timeout=300)


def _assert_one_error_line(proc: subprocess.CompletedProcess, message: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr[-2000:]
    assert message in lines[0]
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["search.n_trials=abc", "timing.same_band.cpu=2"], "search.n_trials='abc': must be an integer >= 1; "
                                                            "timing.same_band.cpu=2"),
        # Hydra's own check, on one line, with the key most likely meant
        (["search.n_trails=4"], "unknown key search.n_trails (did you mean search.n_trials?"),
        (["search.storage=postgresql+psycopg2://u:pw@127.0.0.1:1/db"], "search.storage='postgresql+psycopg2://u:***@"),
    ],
)
def test_cli_bad_input_is_one_line_and_creates_nothing(tmp_path, overrides, message):
    run_dir = tmp_path / "run"
    proc = _run(run_dir, *overrides)
    _assert_one_error_line(proc, message)
    assert not run_dir.exists()  # caught before Hydra made the run directory


def test_cli_unwritable_run_dir(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    proc = _run(blocker / "run")
    _assert_one_error_line(proc, f"hydra.run.dir={blocker / 'run'}: {blocker} is not a folder")


def test_cli_existing_study_without_resume_measures_nothing(tmp_path):
    storage = f"sqlite:///{tmp_path}/shared.db"
    optuna.create_study(study_name=f"vae_channels_last:{CARD}", storage=storage)
    run_dir = tmp_path / "run"
    proc = _run(run_dir, f"search.storage={storage}")
    _assert_one_error_line(proc, "already exists")
    assert "search.resume=true" in proc.stderr
    assert not (run_dir / "trials").exists()  # the baseline was not measured either
