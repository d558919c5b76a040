"""Config validation before anything is measured: one `error:` line, exit 2, no trial written.

Most cases compose the config the way `python -m harness` does (harness.config.validate.compose_checked: no
torch work, no subprocess), where a value the schema's type rejects fails as Hydra composes it; a few
go through `python -m harness` to check what the user sees: one line on stderr, exit status 2, and no
trials/ folder.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import optuna
import pytest

from harness.config.schema import bounded, one_of
from harness.config.validate import (
    CONF_DIR,
    ConfigError,
    check_creatable,
    check_output_dir,
    compose_checked,
    requirement,
    settings_of,
    validate_config,
    value_problem,
)
from harness.search import SearchError, make_storage

CARD = "vae-480-conv3d-16to16k111t3-9507c7"


@pytest.mark.parametrize("experiment", sorted(p.stem for p in (CONF_DIR / "experiment").glob("*.yaml")))
def test_every_shipped_experiment_config_is_valid(experiment):
    config, run_dir = compose_checked([f"experiment={experiment}"])
    validate_config(config)  # what harness.run.execute.execute checks again
    assert Path(run_dir).parent == Path("outputs") / experiment


def test_auto_is_no_experiment_and_keeps_its_own_settings():
    config, run_dir = compose_checked(["experiment=auto", "auto.plan_only=true"])
    assert config["experiment"] is None  # no module, space or correctness it would not use
    assert config["auto"] == {"plan_only": True,
                              "default_cards": {"costliest": 1, "per": "op_kind", "resolution": "smallest_on_cpu"}}
    assert Path(run_dir).parent == Path("outputs/auto")
    assert compose_checked(["experiment=vae_bf16"])[0]["auto"]["default_cards"] is None


def test_auto_profiles_with_ncus_own_settings_where_it_picks_ncu():
    """profiler=auto's section holds ncu's settings as conf/profiler/ncu.yaml states them (the chip's metric check,
    the session started ahead ...), so auto's ncu runs as profiler=ncu does, and each is set the same way."""
    import yaml

    ncu = yaml.safe_load((CONF_DIR / "profiler" / "ncu.yaml").read_text())
    auto = compose_checked([])[0]["profiler"]
    assert auto == {**ncu, "name": "auto"} and auto["available_metrics"] == "auto"
    assert compose_checked(["profiler.prestart=false"])[0]["profiler"]["prestart"] is False
    assert compose_checked(["profiler=ncu", "profiler.prestart=false"])[0]["profiler"]["prestart"] is False


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
        (["search.exhaustive_max=0"], "search.exhaustive_max=0: must be an integer >= 1"),
        (["search.worker=1.5"], "search.worker=1.5: must be an integer, a non-empty string or null"),
        (["experiment.correctness.same_factor=-1"], "experiment.correctness.same_factor=-1: must be a number > 0"),
        (["experiment.correctness.lowered_factor=tight"], "experiment.correctness.lowered_factor='tight'"),
        (["experiment.space=3"], "experiment.space=3: must be a mapping or null"),
        (["workload.scale=0"], "workload.scale=0: must be a number in (0, 1] or null"),
        (["workload.scale=2"], "workload.scale=2: must be a number in (0, 1]"),
        (["workload.cpu_scale=1.5"], "workload.cpu_scale=1.5: must be a number in (0, 1]"),
        (["workload.seed=-3"], "workload.seed=-3"),
        (["workload.cast.frames=nine"], "workload.cast.frames='nine': must be an integer or null"),
        (["timing.warmup=-1"], "timing.warmup=-1: must be an integer >= 0"),
        (["timing.min_repeats=0"], "timing.min_repeats=0: must be an integer >= 1"),
        (["timing.budget_s=0"], "timing.budget_s=0: must be a number > 0"),
        (["timing.budget_s=fast"], "timing.budget_s='fast': must be a number > 0"),
        (["timing.cpu_threads=0"], "timing.cpu_threads=0: must be an integer >= 1 or null"),
        (["timing.same_band.cpu=1"], "timing.same_band.cpu=1: must be a number in (0, 1)"),
        (["timing.same_band.cuda=-0.1"], "timing.same_band.cuda=-0.1: must be a number in (0, 1)"),
        (["timing.confirm_rounds=-1"], "timing.confirm_rounds=-1"),
        (["auto.plan_only=maybe"], "auto.plan_only='maybe': must be true or false"),
        (["+search.n_trails=4"], "unknown key search.n_trails (did you mean search.n_trials?"),
        (["search.n_trails=4"], "unknown key search.n_trails (did you mean search.n_trials?"),
        (["+timing.budget=1"], "unknown key timing.budget (did you mean timing.budget_s?"),
        (["+workload.scael=0.5"], "unknown key workload.scael (did you mean workload.scale?"),
        (["+experiment.tolerence=1"], "unknown key experiment.tolerence"),
        (["experiment.predict_frm=x"], "unknown key experiment.predict_frm (did you mean experiment.predict_from?"),
        (["+workload.attention.head=4"], "unknown key workload.attention.head (did you mean workload.attention.heads?"),
        (["+n_trials=4"], "unknown key n_trials (did you mean search.n_trials?"),
        (["profiler=cpu", "profiler.deadline_s=60"], "profiler.deadline_s: not in the profiler config chosen (add "
                                                     "it with +profiler.deadline_s=60)"),
        (["experiment=auto", "experiment.default_cards={costliest: 2}"],
         "experiment.default_cards: experiment=auto has no experiment settings"),
    ],
)
def test_bad_values_and_unknown_keys_are_named(overrides, message):
    with pytest.raises(ConfigError) as info:
        compose_checked(overrides)
    text = str(info.value)
    assert message in text
    assert "\n" not in text and "; " not in text, text  # that problem alone: nothing else is flagged


def test_all_problems_on_one_line():
    with pytest.raises(ConfigError) as info:
        compose_checked(["timing.budget_s=0", "workload.cpu_scale=2", "search.n_trials=abc"])
    text = str(info.value)
    assert "\n" not in text and text.count("; ") == 2
    assert "timing.budget_s=0" in text and "workload.cpu_scale=2" in text and "search.n_trials='abc'" in text


@dataclass
class Planted:
    ratio: float = bounded(0.5, low=2, high=5, high_open=True)
    count: int | None = bounded(None, low=0, low_open=True)
    mode: str = one_of("a", "a", "b")


def test_the_requirement_is_read_from_the_field_metadata():
    planted = settings_of(Planted)
    assert requirement(planted["ratio"]) == "a number in [2, 5)"
    assert requirement(planted["count"]) == "an integer > 0 or null"
    assert requirement(planted["mode"]) == "one of a, b"


def test_a_value_is_checked_against_its_field():
    assert value_problem("search.n_trials", 1) is None
    assert value_problem("search.n_trials", "???") == "search.n_trials: missing; give an integer >= 1"
    assert value_problem("timing.same_band.cuda", 0.5) is None
    assert value_problem("timing.same_band.cuda", 1.0) == "timing.same_band.cuda=1: must be a number in (0, 1)"
    assert value_problem("workload.cast.dst_dtype", "") == "workload.cast.dst_dtype='': must be a non-empty string"
    assert value_problem("profiler.name", 3) is None  # not typed: each backend has keys of its own


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
        (["search.n_trials=abc"], "search.n_trials='abc': must be an integer >= 1"),
        (["experiment=auto", "auto.plan_only=maybe"], "auto.plan_only='maybe': must be true or false"),
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
