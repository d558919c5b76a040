"""scripts/gpu_check.sh without a GPU: its dry run on a small step set (slow), and the parts the device
alone would exercise (every step's device command line, the plan against the deadline, the ncu
preflight, the fixture parse, the step kill, what a killed step still reports, packing) with a fake
`ncu`, fake step programs and synthetic run folders."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from scripts.gpu_check_steps import check as check_module
from scripts.gpu_check_steps import experiment_steps, pytest_steps, runner, table
from scripts.gpu_check_steps.check import Check
from scripts.gpu_check_steps.experiment_steps import PER_OP_KIND, REPRODUCTION, WINS, reproduce_unmet, step_wins
from scripts.gpu_check_steps.model_steps import CAPTURE_MODEL
from scripts.gpu_check_steps.ncu_steps import step_channels_last_ncu, step_ncu_preflight
from scripts.gpu_check_steps.outcome import Outcome, Proc, StepFailed
from scripts.gpu_check_steps.pack import MAX_FILE_BYTES, pack
from scripts.gpu_check_steps.plan import (
    DEFAULT_DEADLINE_S,
    PACK_RESERVE_S,
    Step,
    Work,
    make_plan,
    plan_lines,
    plan_total_s,
)
from scripts.gpu_check_steps.pytest_steps import COVERED_BY_STEPS, PLANTS_DEVICE_VAR, step_gpu_tests
from scripts.gpu_check_steps.run_folder import finished_text, pytest_progress, run_phases, scan_run
from scripts.gpu_check_steps.runner import run_steps, skip_reason
from scripts.gpu_check_steps.table import STEP_NAMES
from tests.processes import alive

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "gpu_check.sh"
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "ncu"


STEPS = {step.name: step for step in table.STEPS}


def _check(tmp_path: Path, **overrides):
    args = argparse.Namespace(dry_run=False, out=str(tmp_path / "out"), work=str(tmp_path / "work"),
                              deadline=overrides.pop("deadline", DEFAULT_DEADLINE_S), steps=None, plan=False,
                              helper=None)
    check = Check(args)
    for key, value in overrides.items():
        setattr(check, key, value)
    return check


def _fake_ncu(tmp_path: Path, body: str) -> str:
    path = tmp_path / "bin" / "ncu"
    path.parent.mkdir(exist_ok=True)
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def _run(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SCRIPT), *args], check=False, capture_output=True, text=True, timeout=timeout, cwd=REPO)


# ---------------------------------------------------------------------------------------------
# The dry run


@pytest.mark.slow
def test_dry_run_of_a_small_step_set(tmp_path: Path) -> None:
    out = tmp_path / "out"
    started = time.monotonic()
    proc = _run("--dry-run", "--steps", "machine,stalls_ncu,fixture,gpu_tests,aa_timing", "--out", str(out),
                "--deadline", "200")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert time.monotonic() - started < 240
    summary = json.loads((out / "summary.json").read_text())
    steps = {s["name"]: s for s in summary["steps"]}
    assert [s["name"] for s in summary["steps"]] == ["machine", "aa_timing", "stalls_ncu", "fixture", "gpu_tests"]
    assert steps["machine"]["status"] == "ok" and steps["aa_timing"]["status"] == "ok"
    assert steps["stalls_ncu"]["status"] == "ok" and steps["stalls_ncu"]["form"] == "cpu"
    assert "needs CUDA" in steps["stalls_ncu"]["note"]
    assert steps["stalls_ncu"]["numbers"]["phases"]["stalls_ncu"]["worker_starts"] == 1
    for name in ("fixture", "gpu_tests"):
        assert steps[name]["status"] == "skipped" and "needs CUDA" in steps[name]["result"]
    assert steps["aa_timing"]["numbers"]["verdict"] in ("SAME", "INCONCLUSIVE")
    assert summary["plan_total_s"] <= 200 and all(p["planned"] for p in summary["plan"] if p["budget_s"])
    files = sorted(p.name for p in out.iterdir())
    assert len(files) <= 8 and {"gpu_check.log", "summary.json", "versions.txt", "runs.tgz"} <= set(files)
    assert all((out / f).stat().st_size < 16 * 2**20 for f in files)
    with tarfile.open(out / "runs.tgz") as archive:
        names = archive.getnames()
    assert "gpu_check/runs/stalls_ncu/baseline.json" in names and "gpu_check/runs/aa_timing.json" in names
    assert not any(name.endswith(".pt") for name in names)
    assert "stalls_ncu" in (out / "gpu_check.log").read_text()


def test_unknown_step_and_the_plan() -> None:
    proc = _run("--steps", "machine,nope")
    assert proc.returncode == 2 and "unknown step" in proc.stderr
    plan = make_plan(table.STEPS, True, DEFAULT_DEADLINE_S)
    for flag in ("--plan", "--list"):
        listing = _run(flag)
        assert listing.returncode == 0 and all(step in listing.stdout for step in STEP_NAMES)
        assert listing.stdout.splitlines()[-1] == f"total {plan_total_s(plan)} s of deadline 420 s"
        assert "not planned" not in listing.stdout and plan_total_s(plan) <= 420


def test_the_check_needs_the_standard_library_only(tmp_path: Path) -> None:
    """It runs on the GPU machine before anything is installed: no site-packages, no PYTHONPATH (the
    harness modules it imports itself, the ncu finder among them, must do with the standard library)."""
    script = str(REPO / "scripts" / "gpu_check.py")
    proc = subprocess.run([sys.executable, "-I", "-S", script, "--plan", "--deadline", "300"], check=False,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    total = plan_total_s(make_plan(table.STEPS, True, 300))
    assert total <= 300 and proc.stdout.splitlines()[-1] == f"total {total} s of deadline 300 s"
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-I", "-S", script, "--dry-run", "--steps", "machine", "--out", str(out),
                           "--work", str(tmp_path / "work")], check=False, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert json.loads((out / "summary.json").read_text())["steps"][0]["status"] == "ok"


def test_a_deadline_too_close_skips_the_steps_and_still_packs(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = _run("--dry-run", "--steps", "aa_timing,wins", "--out", str(out), "--deadline", "5", timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert [s["status"] for s in summary["steps"]] == ["skipped", "skipped"]
    assert all("global deadline" in s["result"] for s in summary["steps"])
    assert (out / "runs.tgz").exists() and summary["pack"]["status"] == "ok"


# ---------------------------------------------------------------------------------------------
# Every step's device command line, and the budgets against the deadline


def _device_commands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, list[tuple[list[str], dict]]]:
    """The commands each step's device form starts, none skipped: ncu that profiles, the wheels
    installed, the files the plants and reproduction_ncu steps need present; nothing is run."""
    plants = tmp_path / "test_plants.py"
    plants.write_text(f"import os\nDEVICE = os.environ.get('{PLANTS_DEVICE_VAR}', 'cpu')\n")
    monkeypatch.setattr(pytest_steps, "PLANTS_TESTS", plants)
    monkeypatch.setattr(experiment_steps, "CARDS_CLI", _cards_cli(tmp_path, with_reproduce=True))
    ncu = _fake_ncu(tmp_path, "echo 'gpu__time_duration.sum  duration'\n")
    check = _check(tmp_path, ncu=ncu)
    kept = check.work / "ncu_reports" / "reproduction" / PER_OP_KIND[0] / "000_baseline_as_reported"
    kept.mkdir(parents=True)
    (kept / "trial.ncu-rep").write_bytes(b"report")
    commands: dict[str, list[tuple[list[str], dict]]] = {}
    current = [""]

    def record(argv, timeout, log=None, env=None, cwd=REPO, echo=False):
        commands.setdefault(current[0], []).append((list(argv), env or check.env()))
        return Proc(1, False, 0.0, "error: not run")

    check.run = record  # type: ignore[method-assign]
    for step in table.STEPS:
        # Each step as the device would find it (the machine step, finding no GPU here, would say otherwise).
        check.cuda, check.dry_run, check.installed, check.ncu_ok = True, False, True, True
        assert skip_reason(check, step) is None, step.name
        current[0] = step.name
        try:
            step.run(check, step, float(step.budget_s))
        except StepFailed:
            pass  # a command that "failed" (nothing ran) ends most steps
    return commands


def _cards_cli(tmp_path: Path, with_reproduce: bool) -> Path:
    """A stand-in for harness/report/cli.py, with or without the reproduce subcommand's parser."""
    cli = tmp_path / "cli.py"
    cli.write_text("sub.add_parser('lint')\n" + ("rep = sub.add_parser(\n    \"reproduce\", help='...')\n"
                                                 if with_reproduce else ""))
    return cli


def _override(argv: list[str], key: str) -> str | None:
    return next((a.split("=", 1)[1] for a in argv if a.startswith(key + "=")), None)


def test_every_step_has_a_device_command_and_the_plan_fits_the_deadline(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    commands = _device_commands(tmp_path, monkeypatch)
    assert set(commands) == set(STEP_NAMES)
    harness = {name: [argv for argv, _ in runs if argv[1:3] == ["-m", "harness"]] for name, runs in commands.items()}
    # An ncu step's budget counts one ncu trial per card and trial it runs (baselines included).
    for name in ("reproduction_ncu", "channels_last_ncu", "stalls_ncu", "conv_kernels_ncu"):
        (argv,) = harness[name]
        assert "profiler=ncu" in argv and "device=cuda" in argv, name
        cards = len(_override(argv, "cards").strip("[]").split(","))
        assert STEPS[name].work.ncu_trials == cards * (1 + int(_override(argv, "search.n_trials") or 0)), name
    # reproduction_ncu: one card per op kind and the five that carry the report's time (the cast is in both), at
    # scale 1 and in each card's own dtype (no dtype override), then the verdicts on its baseline.
    (reproduction,) = harness["reproduction_ncu"]
    assert _override(reproduction, "cards") == "[" + ",".join(dict.fromkeys(PER_OP_KIND + REPRODUCTION)) + "]"
    assert _override(reproduction, "workload.scale") == "1.0" and _override(reproduction, "experiment") == "reprofile"
    assert not any("dtype" in a for a in reproduction) and STEPS["reproduction_ncu"].work.ncu_trials == 8
    # wins: each experiment on its card at scale 1 under the CUDA trace; a traced trial per baseline and trial.
    wins = {_override(argv, "experiment"): argv for argv in harness["wins"]}
    assert set(wins) == {"vae_bf16", "dit_small_m_batching"}
    assert _override(wins["vae_bf16"], "cards") == "[vae-480-conv3d-96to96k333t6-13c157]"
    assert _override(wins["dit_small_m_batching"], "cards") == "[dit-480-linear-m3n30720k5120-c91997]"
    assert "experiment.space.low_precision.dtype=[bfloat16]" in wins["vae_bf16"]
    assert "experiment.space.batched.k=[20]" in wins["dit_small_m_batching"]
    for argv in wins.values():
        assert "profiler=torch_cuda" in argv and _override(argv, "workload.scale") == "1.0" and "device=cuda" in argv
    assert STEPS["wins"].work.trace_trials == sum(1 + int(_override(a, "search.n_trials")) for a in wins.values())
    # chunk_trace: the 480 chunk card of each, one variant that compiles nothing.
    chunks = {_override(argv, "experiment"): argv for argv in harness["chunk_trace"]}
    assert _override(chunks["vae_decode_chunk"], "cards") == "[vae-480-chunk-decode-c9e063]"
    assert _override(chunks["dit_block"], "cards") == "[dit-480-chunk-block-88c34e]"
    assert "+experiment.space={modulation_once: {}}" in chunks["dit_block"]
    assert all(_override(a, "search.n_trials") == "1" and not any("compiled" in x for x in a) for a in chunks.values())
    assert len(harness["chunk_trace"]) == STEPS["chunk_trace"].work.starts == 2
    assert STEPS["chunk_trace"].work.trace_trials == 2 * len(chunks)
    (auto,) = harness["auto_trace"]
    assert _override(auto, "cards") == "[output-480-cast-f18982]" and _override(auto, "search.n_trials") == "1"
    assert all(STEPS[name].work.starts == len(runs) for name, runs in harness.items()
               if name not in ("gpu_tests", "capture"))
    # The capture: its own process, which starts the re-profile run under ncu (its Hydra overrides passed on).
    (capture, _), = commands["capture"]
    assert capture[1:4] == ["-m", "harness.capture", CAPTURE_MODEL] and STEPS["capture"].work.starts == 2
    assert capture[capture.index("--profiler") + 1] == "ncu" and capture[capture.index("--device") + 1] == "cuda"
    assert int(capture[capture.index("--top") + 1]) == STEPS["capture"].work.ncu_trials == 2
    assert any(a.startswith("--override=profiler.keep_dir=") for a in capture)
    # gpu_tests: the files that mark a gpu or ncu test, less the app test reproduction_ncu repeats.
    (pytest_argv, pytest_env), = commands["gpu_tests"]
    assert pytest_argv[pytest_argv.index("-m", 3) + 1] == "gpu or ncu" and "--durations=15" in pytest_argv
    assert "tests/workloads/test_workloads_gpu.py" in pytest_argv and "tests/profile/test_cuda_timing.py" in pytest_argv
    assert "tests/cards" not in pytest_argv and not any(a.startswith("tests/app") for a in pytest_argv)
    assert "tests/app/test_gpu_paths.py::test_ncu_backend_reprofiles_every_op_kind" in COVERED_BY_STEPS
    assert pytest_env["PATH"].split(os.pathsep)[0] == str(tmp_path / "bin")
    (plants_argv, plants_env), = commands["plants"]
    assert plants_env[PLANTS_DEVICE_VAR] == "cuda" and str(tmp_path / "test_plants.py") in plants_argv
    assert commands["ncu_preflight"][0][0][0] == str(tmp_path / "bin" / "ncu")

    plan = make_plan(table.STEPS, True, DEFAULT_DEADLINE_S)
    planned = [p for p in plan if p.planned]
    assert DEFAULT_DEADLINE_S == 420 and plan_total_s(plan) <= 420
    assert sum(p.budget_s for p in planned) + PACK_RESERVE_S == plan_total_s(plan)
    # Every step planned inside the deadline (the first H200 run left four unplanned, and auto_trace never ran).
    assert planned == plan
    # In order of value: the verdicts on the report's cards first, then the wins, a confirmed layout verdict, A/A.
    order = [p.step.name for p in planned]
    assert order[3:7] == ["reproduction_ncu", "wins", "channels_last_ncu", "aa_timing"]
    everything = sum(s.budget_s for s in table.STEPS) + PACK_RESERVE_S
    assert all(p.planned for p in make_plan(table.STEPS, True, everything))
    lines = plan_lines(plan, True, DEFAULT_DEADLINE_S)
    assert lines[-1] == f"total {plan_total_s(plan)} s of deadline 420 s"
    assert all(f" {p.budget_s:5d} s " in line for p, line in zip(plan, lines[1:], strict=False))


@pytest.mark.slow
def test_the_device_forms_harness_commands_compose(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every harness command the device would run is a valid Hydra composition (`--cfg job`, no run)."""
    commands = _device_commands(tmp_path, monkeypatch)
    runs = [(name, argv) for name, found in commands.items() for argv, _ in found if argv[1:3] == ["-m", "harness"]]
    assert len(runs) == 9
    for name, argv in runs:
        proc = subprocess.run([sys.executable, *argv[1:], "--cfg", "job"], check=False, capture_output=True,
                              text=True, timeout=120, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
        assert proc.returncode == 0, f"{name}: {proc.stderr[-1500:]}"
        assert "device: cuda" in proc.stdout, name


def test_a_step_is_planned_only_inside_the_deadline_and_runs_on_saved_time(tmp_path: Path) -> None:
    ran: dict[str, float] = {}

    def quick(check, step, timeout):
        ran[step.name] = timeout
        return Outcome("ok", "done")

    steps = [Step("first", Work(other_s=5), 0, (), quick), Step("big", Work(other_s=100), 0, (), quick),
             Step("last", Work(other_s=5), 0, (), quick)]
    deadline = 5 + 5 + PACK_RESERVE_S + 3
    plan = make_plan(steps, True, deadline)
    assert [p.planned for p in plan] == [True, False, True] and plan_total_s(plan) == deadline - 3
    check = _check(tmp_path, cuda=True, installed=True, deadline=deadline)
    assert run_steps(check, steps) == 0
    records = {r["name"]: r for r in check.summary["steps"]}
    assert records["big"]["status"] == "skipped" and "not planned, it needs 100 s" in records["big"]["result"]
    # The first step may use the 3 s nobody planned for; the last one twice its budget (the big one's time).
    assert 5 < ran["first"] <= 8 and ran["last"] == pytest.approx(10)
    assert records["first"]["planned"] and records["last"]["timeout_s"] > 5


# ---------------------------------------------------------------------------------------------
# What a step finished when it is killed


FAKE_HARNESS = """#!{python}
# Stands in for `python -m harness`: the worker writes one card's baseline, then the run hangs.
import json, shutil, sys, time
from pathlib import Path
run = Path(next(a.split("=", 1)[1] for a in sys.argv if a.startswith("hydra.run.dir=")))
folder = run / "trials" / "{card}"
folder.mkdir(parents=True)
card = {{"primary": "partial_wave_tail", "metrics_source": "cpu_roofline_estimate", "kernels": [{{}}],
        "variant": {{"calls": 1, "per_call_us": 9.5}},
        "report_card": {{"primary": "partial_wave_tail", "summed_kernel_us": 4.75}}}}
(folder / "baseline.json").write_text(json.dumps({{"cards": [card]}}))
time.sleep(1.5)  # two progress ticks: summary.json should have the card while the step still runs
shutil.copyfile("{summary}", "{seen}")
time.sleep(60)
"""


def test_a_killed_step_reports_the_cards_it_finished(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    card = PER_OP_KIND[0]
    check = _check(tmp_path, dry_run=True, requested_dry_run=True, deadline=60)
    fake = tmp_path / "fake_python"
    seen = tmp_path / "seen_summary.json"
    fake.write_text(FAKE_HARNESS.format(python=sys.executable, card=card, summary=check.out / "summary.json",
                                        seen=seen))
    fake.chmod(0o755)
    check.python = str(fake)
    monkeypatch.setattr(runner, "SLACK_FACTOR", 1.0)
    monkeypatch.setattr(check_module, "PROGRESS_EVERY_S", 0.5)
    step = dataclasses.replace(STEPS["reproduction_ncu"], cpu_budget_s=4, unmet=None)
    assert run_steps(check, [step]) == 1
    (record,) = check.summary["steps"]
    assert record["status"] == "timeout" and record["seconds"] < 15
    assert "killed at its time limit" in record["result"]
    # Its baseline measured, the run not through with the card (no best.json, no run.json): not finished.
    assert (f"0 card(s) finished; 1 with only the baseline measured: {card.rsplit('-', 1)[1]} 9.5 us (2.00x report), "
            "partial_wave_tail") in record["result"]
    finished = record["numbers"]["finished"]["runs"]["reproduction_ncu"]
    assert finished["done"] is False and finished["cards"][card]["here_us"] == 9.5
    assert finished["cards"][card]["finished"] is False
    # While the step still ran, summary.json already held the card (it survives a kill of the whole check).
    running = next(s for s in json.loads(seen.read_text())["steps"] if s["name"] == "reproduction_ncu")
    assert running["status"] == "running"
    assert card in running["numbers"]["finished"]["runs"]["reproduction_ncu"]["cards"]
    assert json.loads((check.out / "summary.json").read_text())["steps"][0]["status"] == "timeout"


def test_finished_trials_and_tests_are_read_back(tmp_path: Path) -> None:
    run = tmp_path / "auto" / "dit_gemm_tiles" / "trials" / "dit-480-linear-m1170n5120k5120-b9770e"
    run.mkdir(parents=True)
    base = {"primary": "compute_bound", "variant": {"calls": 1}, "timing": {"median_us": 100.0},
            "report_card": {"primary": "compute_bound", "summed_kernel_us": 80.0}}
    (run / "baseline.json").write_text(json.dumps({"cards": [base]}))
    (run / "trial_0000_cublaslt.json").write_text(
        json.dumps({"cards": [{"variant": {"calls": 2, "per_call_us": 40.0}}]}))
    (run / "tried.json").write_text(json.dumps({"cards": [{"harness": {"variant": "cublaslt"},
                                                           "confirmation": {"verdict": "FASTER", "speedup": 2.5}}]}))
    (run.parents[1] / "run.json").write_text(json.dumps({"phases": {"wall_s": 12.345, "worker_starts": 1}}))
    assert run_phases(tmp_path / "auto") == {"dit_gemm_tiles": {"wall_s": 12.3, "worker_starts": 1}}
    # The card is finished once the sub-run's best.json (rewritten after each card) holds it.
    (run.parents[1] / "best.json").write_text(json.dumps({"cards": [{"id": run.name}]}))
    scanned = scan_run(tmp_path / "auto")
    entry = scanned["cards"]["dit_gemm_tiles/dit-480-linear-m1170n5120k5120-b9770e"]
    assert entry["here_us"] == 100.0 and entry["trials"] == {"0000_cublaslt": 40.0} and entry["finished"] is True
    assert finished_text({"auto": scanned}) == (
        "1 card(s) finished: dit_gemm_tiles/b9770e 100.0 us (1.25x report), "
        "compute_bound (source unrecorded; the report's compute_bound, by ncu), 1 trial(s), cublaslt 2.50x FASTER")
    text = ("tests/a.py::test_one PASSED                [ 33%]\n"
            "tests/a.py::test_two[x-1] FAILED           [ 66%]\n"
            "tests/b.py::test_three SKIPPED (needs CUDA) [100%]\n"
            "FAILED tests/a.py::test_two[x-1] - assert 1 == 2\n")
    assert pytest_progress(text) == {"counts": {"passed": 1, "failed": 1, "skipped": 1},
                                        "failed": ["tests/a.py::test_two[x-1]"]}


# ---------------------------------------------------------------------------------------------
# The side-stream and plants steps


def test_plants_and_reproduction_say_why_they_cannot_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    check = _check(tmp_path, cuda=True, installed=True)
    monkeypatch.setattr(pytest_steps, "PLANTS_TESTS", REPO / "tests" / "app" / "no_such_test_plants.py")
    assert skip_reason(check, STEPS["plants"]) == "tests/app/no_such_test_plants.py missing"
    plants = tmp_path / "test_plants.py"
    plants.write_text("DEVICE = 'cpu'\n")
    monkeypatch.setattr(pytest_steps, "PLANTS_TESTS", plants)
    assert "does not read HARNESS_PLANTS_DEVICE" in skip_reason(check, STEPS["plants"])
    # Until the CLI has `reproduce`, reproduction_ncu is skipped with the reason, like a step whose file is missing.
    monkeypatch.setattr(experiment_steps, "CARDS_CLI", _cards_cli(tmp_path, with_reproduce=False))
    assert "`python -m harness.report reproduce` missing" in skip_reason(check, STEPS["reproduction_ncu"])
    monkeypatch.setattr(experiment_steps, "CARDS_CLI", _cards_cli(tmp_path, with_reproduce=True))
    assert reproduce_unmet() is None


# ---------------------------------------------------------------------------------------------
# The device's paths, with a fake ncu


QUERY = """\
gpu__time_duration.sum                               duration
sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_elapsed  wgmma
"""
PROFILED = """echo '"ID","Kernel Name","gpu__time_duration.sum"'; echo '"","","ns"'; echo '"0","tiny","1,234"'"""


def test_the_check_finds_ncu_where_the_harness_looks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.profile.ncu import command

    root = tmp_path / "nsight-compute"
    for version in ("2024.1.0", "2025.3.1"):
        (root / version).mkdir(parents=True)
        (root / version / "ncu").write_text("#!/bin/sh\n")
        (root / version / "ncu").chmod(0o755)
    monkeypatch.setattr(command, "NCU_INSTALL_ROOT", root)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("NCU_HOME", raising=False)
    check = _check(tmp_path)
    assert check.ncu == str(root / "2025.3.1" / "ncu") and check.summary["ncu"] == check.ncu
    check.ncu = None
    check.cuda, check.installed = True, True
    assert skip_reason(check, STEPS["stalls_ncu"]) == f"needs ncu: {command.searched_for_ncu()}"


def test_preflight_reads_the_chips_metrics_and_swaps_a_missing_one(tmp_path: Path) -> None:
    from harness.profile.ncu.metrics import metrics_for

    names = "\n".join(m for m in metrics_for("report+stalls+bytes") if not m.startswith("sm__pipe_tensor_cycles"))
    listing = tmp_path / "names.txt"
    listing.write_text(names + "\n" + QUERY + "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio\n")
    ncu = _fake_ncu(tmp_path, f"""
case "$1" in
  --query-metrics) sleep 1; cat {listing} ;;
  *) {PROFILED} ;;
esac
""")  # the query outlasts the tiny kernel's run, as a real one does: the sweep after that run spares it
    check = _check(tmp_path, cuda=True, ncu=ncu)
    started = check.start_metric_query()  # as main does, beside machine and install
    outcome = step_ncu_preflight(check, STEPS["ncu_preflight"], 60)  # a bound, not a wait: loaded CI starts slowly
    assert outcome.status == "ok", outcome.result
    assert check.metric_query is started and started.returncode == 0
    assert check.ncu_ok is True and check.metrics_file is not None and check.metrics_file.exists()
    assert outcome.numbers["substituted"] == {
        "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed":
            "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_elapsed"}
    assert outcome.numbers["dropped"] == []
    overrides = check.ncu_overrides(STEPS["stalls_ncu"], "stalls", 60)
    assert f"profiler.available_metrics={check.metrics_file}" in overrides


def test_preflight_does_not_use_the_list_of_a_query_that_failed(tmp_path: Path) -> None:
    from harness.profile.ncu.metrics import metrics_for

    listing = tmp_path / "names.txt"  # the whole list, printed before the query failed
    listing.write_text("\n".join(metrics_for("report+stalls+bytes")) + "\n")
    ncu = _fake_ncu(tmp_path, f"""
case "$1" in
  --query-metrics) cat {listing}; echo '==ERROR== An error occurred while querying metrics.'; exit 1 ;;
  *) {PROFILED} ;;
esac
""")
    check = _check(tmp_path, cuda=True, ncu=ncu)
    outcome = step_ncu_preflight(check, STEPS["ncu_preflight"], 60)  # a bound, not a wait: loaded CI starts slowly
    assert outcome.status == "ok", outcome.result
    assert check.ncu_ok is True and check.metrics_file is None
    assert "metric list not checked (`ncu --query-metrics` exit 1, 0 names)" in outcome.result
    assert outcome.numbers["query_exit"] == 1 and outcome.numbers["chip_metric_names"] == 0
    assert "profiler.available_metrics=auto" in check.ncu_overrides(STEPS["stalls_ncu"], "stalls", 60)


def test_preflight_that_cannot_profile_skips_the_ncu_steps_and_tests(tmp_path: Path) -> None:
    ncu = _fake_ncu(tmp_path, "echo '==ERROR== Failed to initialize the profiler: LibraryNotLoaded'; exit 1\n")
    check = _check(tmp_path, cuda=True, ncu=ncu, installed=True)
    outcome = step_ncu_preflight(check, STEPS["ncu_preflight"], 60)  # a bound, not a wait: loaded CI starts slowly
    assert outcome.status == "failed" and "LibraryNotLoaded" in outcome.result
    for name in ("stalls_ncu", "fixture", "channels_last_ncu", "conv_kernels_ncu"):
        assert "ncu cannot profile here" in skip_reason(check, STEPS[name])
    for name in ("gpu_tests", "aa_timing", "wins", "auto_trace", "chunk_trace"):
        assert skip_reason(check, STEPS[name]) is None
    seen: list[list[str]] = []
    check.run = lambda argv, *a, **k: seen.append(argv) or Proc(0, False, 1.0, "3 passed in 1.0s")  # type: ignore
    gpu_tests = step_gpu_tests(check, STEPS["gpu_tests"], 60)
    assert seen[0][seen[0].index("-m", 3) + 1] == "gpu and not ncu" and "LibraryNotLoaded" in gpu_tests.result
    check.installed = False
    assert "install" in skip_reason(check, STEPS["aa_timing"])


def test_a_step_past_its_time_dies_with_what_it_started(tmp_path: Path) -> None:
    check = _check(tmp_path)
    pids = tmp_path / "pids"
    # A child that starts a grandchild in a session of its own (as ncu does), both sleeping.
    script = (
        "import os, subprocess, sys, time\n"
        "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'], start_new_session=True)\n"
        f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{g.pid}}')\n"
        "print('started', flush=True)\n"
        "time.sleep(120)\n"
    )
    proc = check.run([sys.executable, "-c", script], 3)
    assert proc.timed_out and proc.output == "started\n"
    child, grandchild = (int(p) for p in pids.read_text().split())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(alive(p) for p in (child, grandchild)):
        time.sleep(0.05)
    assert not alive(child) and not alive(grandchild)


def test_fixture_helper_parses_a_report(tmp_path: Path) -> None:
    report = FIXTURES / "report_rtx3080_montecarlo.ncu-rep"
    pytest.importorskip("ncu_report")
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "gpu_check.py"), "--helper", "parse-fixture",
                           str(report), str(report)], check=False, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert found["kernels"] >= 1 and found["fields"] >= 1 and found["agree"] is True


def test_pack_leaves_references_out_and_stays_small(tmp_path: Path) -> None:
    check = _check(tmp_path)
    run = check.work / "runs" / "x" / "trials" / "card"
    run.mkdir(parents=True)
    (run / "baseline.json").write_text("{}")
    (run / "reference.pt").write_bytes(os.urandom(2 * 2**20))
    keep = check.work / "ncu_reports" / "reprofile" / "card" / "000_baseline_as_reported"
    keep.mkdir(parents=True)
    (keep / "trial.ncu-rep").write_bytes(os.urandom(2**20))
    (check.work / "ncu_reports" / "big.ncu-rep").write_bytes(os.urandom(9 * 2**20))
    outcome = pack(check)
    with tarfile.open(check.out / "runs.tgz") as archive:
        names = archive.getnames()
    assert "gpu_check/runs/x/trials/card/baseline.json" in names
    assert "gpu_check/ncu_reports/reprofile/card/000_baseline_as_reported/trial.ncu-rep" in names
    assert not any(n.endswith((".pt", "big.ncu-rep")) for n in names)
    assert (check.out / "runs.tgz").stat().st_size < MAX_FILE_BYTES
    assert any(item.endswith("reference.pt") for item in outcome.numbers["left_out"])


def test_headlines_from_run_folders(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "trials" / "c-842ecd").mkdir(parents=True)
    kernels = [{"kernel": "void cudnn::nchwToNhwcKernel<float>"}, {"kernel": "sm90_xmma_fprop"},
               {"kernel": "void cudnn::nhwcToNchwKernel<float>"}]
    (run / "baseline.json").write_text(json.dumps({"cards": [{"id": "c-842ecd", "kernels": kernels,
                                                              "metrics_source": "ncu"}]}))
    (run / "trials" / "c-842ecd" / "trial_0000_channels_last_3d.json").write_text(
        json.dumps({"cards": [{"kernels": [{"kernel": "sm90_xmma_fprop_nhwc"}], "timing": {"median_us": 1}}]}))
    (run / "diff.json").write_text(json.dumps({"cards": [{"card": "c-842ecd", "before_us": 20.0, "after_us": 10.0,
                                                          "speedup": 1.3, "timing_verdict": "FASTER",
                                                          "verdict": "yes", "class_before": "partial_wave_tail",
                                                          "class_after": "compute_bound"}]}))
    text, numbers = experiment_steps._reprofile_headline(run)
    assert "c-842ecd" in numbers and "(ncu)" in text
    assert "842ecd 10.0 us (0.50x report), compute_bound (ncu; the report's partial_wave_tail, by ncu)" in text
    check = _check(tmp_path)
    check.harness_run = lambda step, name, args, timeout: (Proc(0, False, 1.0, ""), run)  # type: ignore
    outcome = step_channels_last_ncu(check, STEPS["channels_last_ncu"], 30)
    assert outcome.numbers["baseline_conversions"]["kernels"]
    assert outcome.numbers["variant_conversions"]["kernels"] == []
    assert "nchwToNhwcKernel x1, nhwcToNchwKernel x1 (time unknown" in outcome.result
    assert "channels_last_3d: none" in outcome.result
    assert re.search(r"1\.30x FASTER, check yes$", outcome.result)


def test_the_channels_last_step_names_the_h200_convert_tensor_kernels(tmp_path: Path) -> None:
    # The H200 run said "in channels_last_3d: none" while cuDNN ran two convertTensor kernels (74.336 + 4.224 us).
    cards = REPO / "tests" / "fixtures" / "cards"
    run = tmp_path / "run"
    (run / "trials" / "c").mkdir(parents=True)
    shutil.copyfile(cards / "h200_channels_last_baseline.json", run / "baseline.json")
    shutil.copyfile(cards / "h200_channels_last_trial.json", run / "trials" / "c" / "trial_0000_channels_last_3d.json")
    check = _check(tmp_path)
    check.harness_run = lambda step, name, args, timeout: (Proc(0, False, 1.0, ""), run)  # type: ignore
    outcome = step_channels_last_ncu(check, STEPS["channels_last_ncu"], 30)
    assert "in the baseline: nchwToNhwcKernel x2, nhwcToNchwKernel x1 (80.5 us" in outcome.result  # 70.4+3.136+6.976
    assert "in channels_last_3d: convertTensor_kernel x2 (78.6 us" in outcome.result
    assert outcome.numbers["variant_conversions"]["dur_us"] == pytest.approx(74.336 + 4.224)


# ---------------------------------------------------------------------------------------------
# The new steps' results, read back from planted run folders


def _planted_reprofile_run(run: Path, cards: dict[str, tuple[float, float]]) -> None:
    """A reprofile run folder as the harness leaves it: diff.json rows (report and here times), the
    run-level baseline.json, baseline_reproduction.md, and per card its baseline with an ncu cost."""
    rows, base = [], []
    for card, (before, after) in cards.items():
        rows.append({"card": card, "before_us": before, "after_us": after, "class_before": "compute_bound",
                     "class_after": "compute_bound"})
        base.append({"id": card, "metrics_source": "ncu"})
        folder = run / "trials" / card
        folder.mkdir(parents=True)
        (folder / "baseline.json").write_text(json.dumps({"cards": [{
            "primary": "compute_bound", "timing": {"median_us": after}, "variant": {"calls": 1},
            "profiler_settings": {"ncu_cost": {"session": "cold", "wall_s": 7.5, "passes": [9]}}}]}))
    (run / "diff.json").write_text(json.dumps({"cards": rows}))
    (run / "baseline.json").write_text(json.dumps({"cards": base}))
    (run / "best.json").write_text(json.dumps({"cards": base}))
    (run / "baseline_reproduction.md").write_text("| card | here | report |\n")


REPRODUCE_JSON = {"report_device": "H200", "cards": [
    {"card": "dit-480-linear-m4680n5120k5120-8f26a7", "verdict": "REPRODUCED", "families_report": ["nvjet"],
     "families_here": ["nvjet"], "time_ratio": 1.02, "class_report": "compute_bound", "class_here": "compute_bound",
     "class_compared": True, "reason": "same families, time within 15%", "device_here": "NVIDIA H200",
     "dtype_here": "bfloat16"},
    {"card": "output-480-cast-f18982", "verdict": "OTHER_KERNELS", "families_report": ["elementwise_kernel"],
     "families_here": ["vectorized_elementwise_kernel"], "time_ratio": 0.9, "class_report": None,
     "class_here": None, "class_compared": False, "reason": "other kernel families", "device_here": "NVIDIA H200",
     "dtype_here": "float32"},
]}


@pytest.mark.parametrize("exit_code", [0, 2])
def test_reproduction_ncu_puts_each_cards_verdict_in_the_summary_and_the_table(tmp_path: Path, exit_code: int) -> None:
    run = tmp_path / "run"
    _planted_reprofile_run(run, {"dit-480-linear-m4680n5120k5120-8f26a7": (292.0, 297.8),
                                 "output-480-cast-f18982": (29.8, 26.8)})
    check = _check(tmp_path, cuda=True, installed=True, ncu_ok=True)
    check.harness_run = lambda step, name, args, timeout: (Proc(0, False, 1.0, ""), run)  # type: ignore
    seen: list[list[str]] = []
    # As the CLI prints it (indent=1), after a warning line on stderr.
    printed = "UserWarning: something\n" + json.dumps(REPRODUCE_JSON, indent=1) + "\n"

    def fake_run(argv, timeout, log=None, env=None, cwd=REPO, echo=False):
        seen.append(list(argv))
        return Proc(exit_code, False, 1.0, printed if exit_code == 0 else "error: no such report\n")

    check.run = fake_run  # type: ignore[method-assign]
    step = STEPS["reproduction_ncu"]
    if exit_code:
        with pytest.raises(StepFailed) as failed:
            step.run(check, step, 40.0)
        assert "reproduce: exit 2: error: no such report" in failed.value.outcome.result
        assert "2/2 cards measured (ncu)" in failed.value.outcome.result
        return
    outcome = step.run(check, step, 40.0)
    assert seen == [[check.python, "-m", "harness.report", "reproduce", str(run / "baseline.json"), "--json"]]
    assert outcome.status == "ok"
    assert outcome.numbers["verdicts"] == {"dit-480-linear-m4680n5120k5120-8f26a7": "REPRODUCED",
                                           "output-480-cast-f18982": "OTHER_KERNELS"}
    assert outcome.numbers["output-480-cast-f18982"]["reproduce"]["families_here"] == ["vectorized_elementwise_kernel"]
    assert outcome.numbers["report_device"] == "H200"
    assert outcome.numbers["ncu_costs"]["output-480-cast-f18982"]["baseline"]["wall_s"] == 7.5
    assert outcome.result == ("ncu at scale 1: 2/2 cards measured (ncu); reproduce: 1 OTHER_KERNELS, 1 REPRODUCED: "
                              "8f26a7 REPRODUCED 1.02x; f18982 OTHER_KERNELS 0.90x")
    table = (check.out / "reproduction.md").read_text()
    assert "| `dit-480-linear-m4680n5120k5120-8f26a7` | REPRODUCED | 1.02x | nvjet | nvjet | bfloat16 | " \
           "compute_bound -> compute_bound | same families, time within 15% |" in table
    assert "| `output-480-cast-f18982` | OTHER_KERNELS | 0.90x |" in table and "None (not compared)" in table


def test_wins_report_each_confirmed_verdict_and_the_adopted_variant(tmp_path: Path) -> None:
    runs = {}
    for experiment, *_ in WINS:
        runs[experiment] = tmp_path / experiment
        runs[experiment].mkdir()
    # vae_bf16: its best variant FASTER and adopted; dit_small_m_batching: SAME, the baseline kept.
    (runs["vae_bf16"] / "diff.json").write_text(json.dumps({"cards": [{
        "card": "vae-480-conv3d-96to96k333t6-13c157", "before_us": 1800.0, "after_us": 1000.0, "speedup": 1.8,
        "speedup_ci": [1.75, 1.85], "timing_verdict": "FASTER", "adopted": True,
        "variant": {"label": "low_precision(dtype=bfloat16, memory_format=channels_last_3d)"}}]}))
    (runs["dit_small_m_batching"] / "diff.json").write_text(json.dumps({"cards": [{
        "card": "dit-480-linear-m3n30720k5120-c91997", "before_us": 70.0, "after_us": 69.0, "speedup": 1.01,
        "speedup_ci": [0.99, 1.02], "timing_verdict": "SAME", "adopted": False,
        "variant": {"label": "batched(k=20)"}}]}))
    check = _check(tmp_path, cuda=True, installed=True)
    check.harness_run = lambda step, name, args, timeout: (  # type: ignore[method-assign]
        Proc(0, False, 1.0, ""), runs[name[len("wins_"):]])
    outcome = step_wins(check, STEPS["wins"], 40.0)
    assert outcome.status == "ok"
    vae, dit = outcome.numbers["vae_bf16"], outcome.numbers["dit_small_m_batching"]
    assert vae["adopted_variant"] == "low_precision(dtype=bfloat16, memory_format=channels_last_3d)"
    assert vae["verdict"] == "FASTER" and vae["speedup"] == 1.8 and vae["ci"] == [1.75, 1.85]
    assert dit["adopted"] is False and dit["adopted_variant"] is None and dit["verdict"] == "SAME"
    assert outcome.result == (
        "vae_bf16 on 13c157: low_precision(dtype=bfloat16, memory_format=channels_last_3d) 1.80x [1.75, 1.85] FASTER, "
        "adopted low_precision(dtype=bfloat16, memory_format=channels_last_3d); "
        "dit_small_m_batching on c91997: batched(k=20) 1.01x [0.99, 1.02] SAME, the baseline kept")


def test_a_killed_chunk_run_counts_as_its_run_json_does(tmp_path: Path) -> None:
    """The first H200 run's chunk step said "2 card(s) finished" where both run.json files said 0 of 2: it
    counted every card with a measured baseline. Planted as it was: one baseline each, run.json stopped."""
    runs = {}
    for name, card, us in (("chunk_vae_decode_chunk", "vae-480-chunk-decode-c9e063", 105778.0),
                           ("chunk_dit_block", "dit-480-chunk-block-88c34e", 3444.8)):
        run = tmp_path / name
        (run / "trials" / card).mkdir(parents=True)
        (run / "trials" / card / "baseline.json").write_text(json.dumps({"cards": [{
            "primary": "compute_bound", "timing": {"median_us": us}, "variant": {"calls": 1}}]}))
        (run / "run.json").write_text(json.dumps({"cards": [], "stopped": {
            "signal": "SIGTERM", "cards_done": 0, "cards_total": 2, "cards_finished": []}}))
        runs[name] = scan_run(run)
    assert finished_text(runs) == (
        "0 card(s) finished; 2 with only the baseline measured: c9e063 105778.0 us, compute_bound (source "
        "unrecorded; the report's none, by ncu); 88c34e 3444.8 us, compute_bound (source unrecorded; the report's "
        "none, by ncu)")
    # Once run.json lists the card (the run finished it), it counts.
    run = tmp_path / "chunk_dit_block"
    (run / "run.json").write_text(json.dumps({"cards": ["dit-480-chunk-block-88c34e"]}))
    assert finished_text({"dit": scan_run(run)}).startswith("1 card(s) finished: 88c34e 3444.8 us")
