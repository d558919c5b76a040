"""The run's side of the worker boundary never imports torch (issue 23): what it needs of the torch side
comes from the worker (a Describe request), and the few facts it keeps a torch-free copy of are held equal
to the workloads' originals here."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.boundary.spec import AttentionSettings, CastSettings
from harness.cards.chunk_breakdown import DIT_BLOCK, DIT_SCOPE
from harness.cards.ids import parse_resolution
from harness.workloads.attention import AttentionConfig
from harness.workloads.base import parse_resolution as workloads_parse_resolution
from harness.workloads.cast import CastConfig
from harness.workloads.dit_block import KIND, SCOPE

REPO = Path(__file__).resolve().parents[2]
# `python -m harness` in a process that refuses torch: a meta-path finder installed here, in the parent alone.
# The worker child is started as `python -m harness.trial` and imports torch as it always does. Every attempt
# is refused and its stack printed, so an import the harness would survive (an optional one) fails the test too.
# SQLAlchemy and Alembic are refused as well: a run's own studies are Optuna's journal file, and the database
# layer (0.4-0.6 s of imports before the first trial, and a database's creation) is for database storages only.
REFUSE_TORCH = """
import runpy, sys, traceback

class RefuseTorch:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "sqlalchemy", "alembic"):
            traceback.print_stack()
            raise ImportError(f"{name}: refused to the run's process")
        return None

sys.meta_path.insert(0, RefuseTorch())
sys.argv = ["harness", *sys.argv[1:]]
runpy.run_module("harness", run_name="__main__", alter_sys=True)
"""
TINY = ["workload.cpu_scale=0.05", "timing.budget_s=0.05", "timing.confirm_rounds=1", "search.n_trials=2"]


def _run_without_torch(run_dir: Path, *overrides: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", REFUSE_TORCH, f"hydra.run.dir={run_dir}", *overrides],
                          cwd=REPO, capture_output=True, text=True, timeout=600)


# The run's side (ARCHITECTURE: the process boundary is the spine): every module the app's process imports.
PARENT_MODULES = ("harness.__main__", "harness.run.execute", "harness.run.auto", "harness.run.card_search",
                  "harness.run.state", "harness.run.outputs", "harness.run.provenance", "harness.run.stopping",
                  "harness.run.multirun", "harness.run.selection", "harness.report.recipe", "harness.report.overview",
                  "harness.boundary.framing", "harness.cards.chunk_breakdown", "harness.cards.applied",
                  "harness.config.schema", "harness.config.validate", "harness.search", "harness.run.worker",
                  "harness.report.html", "harness.predict", "harness.predict.command", "harness.run.predictions",
                  "harness.report.calibration")


def test_the_run_side_modules_import_without_torch():
    script = REFUSE_TORCH.split("sys.argv")[0] + f"import importlib\nfor name in {PARENT_MODULES!r}:\n" \
        "    importlib.import_module(name)\nprint('torch' in sys.modules)\n"
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "refused to the run's process" not in done.stderr, done.stderr[-3000:]
    assert done.stdout.strip() == "False"


@pytest.mark.slow
def test_the_default_experiment_runs_with_torch_refused_to_the_parent(tmp_path):
    started = time.monotonic()
    proc = _run_without_torch(tmp_path, *TINY, "cards=[vae-480-conv3d-96to3k333t3-842ecd]")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "refused to the run's process" not in proc.stderr, proc.stderr[-3000:]
    assert (tmp_path / "summary.md").read_text().startswith("# vae_channels_last")
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["environment"]["torch"] and run["phases"]["worker_starts"] == 1  # the worker has torch
    assert len(list((tmp_path / "trials" / "vae-480-conv3d-96to3k333t3-842ecd").glob("trial_*.json"))) == 2
    assert time.monotonic() - started < 300


@pytest.mark.slow
def test_auto_plans_with_torch_refused_to_the_parent(tmp_path):
    proc = _run_without_torch(tmp_path, "experiment=auto", "auto.plan_only=true")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "refused to the run's process" not in proc.stderr, proc.stderr[-3000:]
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert any(e.get("chunk") for e in plan["cards"])  # chunk cards, derived from the report by the worker
    assert "cards have at least one experiment" in (tmp_path / "plan.md").read_text()


def test_the_workloads_settings_and_resolution_parser_are_the_run_sides_own():
    """One definition each, torch-free, read by both sides: no copy to drift."""
    assert AttentionConfig is AttentionSettings and CastConfig is CastSettings
    assert workloads_parse_resolution is parse_resolution


def test_the_dit_blocks_kind_and_scope_are_the_workloads_own():
    assert (DIT_BLOCK, DIT_SCOPE) == (KIND, SCOPE)


def test_the_worker_describes_what_the_run_needs():
    from harness.boundary.framing import read_reply, read_request, reply_line, request_line
    from harness.boundary.replies import Described, ExperimentError
    from harness.boundary.requests import Describe
    from harness.cards.lint import lint_report
    from harness.cards.model import load_report
    from harness.cards.rules import RuleSet, classify_report
    from harness.trial.chunks import add_chunk_cards
    from harness.trial.describe import describe

    report = classify_report(lint_report(load_report()).normalized, RuleSet.from_config(None))
    request = Describe(experiments={"run": ("experiments.vae_channels_last", "vae_channels_last"),
                                    "typo": ("experiments.nope", None)},
                       device="cpu", config={"timing": {"cpu_threads": 1}}, profiler={"name": "auto"},
                       report=report.to_dict())
    received, _ = read_request(request_line(request))  # as it crosses the pipe
    assert received == request and isinstance(received, Describe)
    answer = describe(received)
    described = read_reply(reply_line(answer), Described)
    assert described == answer and described.ok
    facts = described.experiment("run")
    assert facts.name == "vae_channels_last" and facts.baseline_name in facts.variants and facts.applies_to("conv3d")
    with pytest.raises(ExperimentError, match="experiment module 'experiments.nope' not found"):
        described.experiment("typo")
    assert (described.device, described.profiler, described.environment["torch_threads"]) == ("cpu", "cpu", 1)
    derived = [c.id for c in add_chunk_cards(load_report()).cards if c.op_kind in ("vae_decode", "dit_block")]
    assert [c["id"] for c in described.chunk_cards] == derived
    cast = [c for c in report.cards if c.op_kind == "cast"]
    assert cast and set(described.cast_frames) <= {c.id for c in cast}
    assert set(described.cast_frames.values()) <= {9, 12}
    assert set(described.unavailable) <= {c.op_kind for c in report.cards} | {"vae_decode", "dit_block"}
    assert describe(Describe(device="cuda:7")).device_error == (
        "device=cuda:7 but torch sees no CUDA device here; use device=auto or device=cpu")


def test_a_worker_that_cannot_describe_the_run_is_one_error_line():
    from harness.boundary.requests import Describe
    from harness.run.execute import RunError, describe
    from harness.run.worker import TrialWorker

    worker = TrialWorker(startup_timeout_s=0.01)  # no child imports torch that fast
    try:
        with pytest.raises(RunError, match=r"the worker process could not start \(no answer after 0.01 s\)"):
            describe(worker, Describe(device="cpu"), None)
    finally:
        worker.kill()


def test_preflight_starts_the_worker_the_run_then_finds(tmp_path):
    """Once the config is checked the worker child starts importing torch (while the run's own modules import
    and Hydra sets the run up); the run asks for its worker with the same limits and gets that child."""
    from harness.__main__ import preflight
    from harness.config.schema import typed
    from harness.config.validate import compose_checked
    from harness.run import worker as workers

    args = [f"hydra.run.dir={tmp_path / 'run'}", "timing.cpu_threads=1"]
    workers.close_worker()
    try:
        preflight(args)
        started = workers._WORKER
        assert started is not None and started.cpu_threads == 1
        assert started._proc is not None and started._proc.poll() is None  # spawned, not waited for
        assert workers.worker_for(typed(compose_checked(args)[0])) is started
    finally:
        workers.close_worker()
    assert not (tmp_path / "run").exists()  # nothing written before Hydra makes the folder


def test_the_worker_started_ahead_is_the_runs_when_the_limits_agree(tmp_path):
    """`python -m harness` starts the worker child before Hydra composes the config, with the command line's
    limits: preflight keeps it when the composed config asks for the same, and starts another one when not
    (an experiment file or config group of the user's may set them)."""
    from harness.__main__ import preflight
    from harness.run import worker as workers

    run = f"hydra.run.dir={tmp_path / 'run'}"
    workers.close_worker()
    try:
        workers.spawn_ahead([run, "timing.cpu_threads=1"])
        ahead = workers._WORKER
        assert ahead is not None and ahead.cpu_threads == 1 and ahead._proc is not None
        preflight([run, "timing.cpu_threads=1"])
        assert workers._WORKER is ahead and ahead.pid is not None
        # The same command line composing to other limits (here: a config setting the threads, not the args).
        preflight([run, "timing.cpu_threads=2"])
        assert workers._WORKER is not ahead and workers._WORKER.cpu_threads == 2
        assert ahead.pid is None  # the first child was killed, not left importing torch
    finally:
        workers.close_worker()
    # Hydra's options, and a limit that does not read as one, start nothing (preflight then says what is wrong).
    for args in (["--help"], [run, "--cfg", "job"], [run, "timing.cpu_threads=many"]):
        workers.spawn_ahead(args)
        assert workers._WORKER is None, args
