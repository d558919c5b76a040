"""scripts/gpu_check.sh without a GPU: its dry run on a small step set (slow), and the parts the device
alone would exercise (the ncu preflight, the fixture parse, the step kill, the deadline, packing)
with a fake `ncu` and synthetic run folders."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from tests.processes import alive

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "gpu_check.sh"
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "ncu"


def _module():
    spec = importlib.util.spec_from_file_location("gpu_check_under_test", REPO / "scripts" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


gc = _module()


def _check(tmp_path: Path, **overrides):
    args = argparse.Namespace(dry_run=False, out=str(tmp_path / "out"), work=str(tmp_path / "work"),
                              deadline=overrides.pop("deadline", 360.0), steps=None, list=False, helper=None)
    check = gc.Check(args)
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
    assert [s["name"] for s in summary["steps"]] == ["machine", "stalls_ncu", "fixture", "gpu_tests", "aa_timing"]
    assert steps["machine"]["status"] == "ok" and steps["aa_timing"]["status"] == "ok"
    assert steps["stalls_ncu"]["status"] == "ok" and steps["stalls_ncu"]["form"] == "cpu"
    assert "needs CUDA" in steps["stalls_ncu"]["note"]
    for name in ("fixture", "gpu_tests"):
        assert steps[name]["status"] == "skipped" and "needs CUDA" in steps[name]["result"]
    assert steps["aa_timing"]["numbers"]["verdict"] in ("SAME", "INCONCLUSIVE")
    files = sorted(p.name for p in out.iterdir())
    assert len(files) <= 8 and {"gpu_check.log", "summary.json", "versions.txt", "runs.tgz"} <= set(files)
    assert all((out / f).stat().st_size < 16 * 2**20 for f in files)
    with tarfile.open(out / "runs.tgz") as archive:
        names = archive.getnames()
    assert "gpu_check/runs/stalls_ncu/baseline.json" in names and "gpu_check/runs/aa_timing.json" in names
    assert not any(name.endswith(".pt") for name in names)
    assert "stalls_ncu" in (out / "gpu_check.log").read_text()


def test_unknown_step_and_list() -> None:
    proc = _run("--steps", "machine,nope")
    assert proc.returncode == 2 and "unknown step" in proc.stderr
    listing = _run("--list")
    assert listing.returncode == 0 and all(step in listing.stdout for step in gc.STEP_NAMES)


def test_a_deadline_too_close_skips_the_steps_and_still_packs(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = _run("--dry-run", "--steps", "aa_timing,reproduction", "--out", str(out), "--deadline", "5", timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert [s["status"] for s in summary["steps"]] == ["skipped", "skipped"]
    assert all("global deadline" in s["result"] for s in summary["steps"])
    assert (out / "runs.tgz").exists() and summary["pack"]["status"] == "ok"


# ---------------------------------------------------------------------------------------------
# The device's paths, with a fake ncu


QUERY = """\
gpu__time_duration.sum                               duration
sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active  wgmma
"""


def test_preflight_reads_the_chips_metrics_and_swaps_a_missing_one(tmp_path: Path) -> None:
    sys.path.insert(0, str(REPO))
    from harness.profile.ncu.metrics import metrics_for

    names = "\n".join(m for m in metrics_for("report+stalls+bytes") if not m.startswith("sm__pipe_tensor_cycles"))
    listing = tmp_path / "names.txt"
    listing.write_text(names + "\n" + QUERY + "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio\n")
    ncu = _fake_ncu(tmp_path, f"""
case "$1" in
  --query-metrics) cat {listing} ;;
  *) echo '"ID","Kernel Name","gpu__time_duration.sum"'; echo '"","","ns"'; echo '"0","tiny","1,234"' ;;
esac
""")
    check = _check(tmp_path, cuda=True, ncu=ncu)
    outcome = gc.step_ncu_preflight(check, gc.STEPS[2], 60)  # a bound, not a wait: loaded CI starts processes slowly
    assert outcome.status == "ok", outcome.result
    assert check.ncu_ok is True and check.metrics_file is not None and check.metrics_file.exists()
    assert outcome.numbers["substituted"] == {
        "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active":
            "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active"}
    assert outcome.numbers["dropped"] == []
    overrides = check.ncu_overrides(gc.STEPS[3], "reprofile", 60)
    assert f"profiler.available_metrics={check.metrics_file}" in overrides


def test_preflight_does_not_use_the_list_of_a_query_that_failed(tmp_path: Path) -> None:
    sys.path.insert(0, str(REPO))
    from harness.profile.ncu.metrics import metrics_for

    listing = tmp_path / "names.txt"  # the whole list, printed before the query failed
    listing.write_text("\n".join(metrics_for("report+stalls+bytes")) + "\n")
    ncu = _fake_ncu(tmp_path, f"""
case "$1" in
  --query-metrics) cat {listing}; echo '==ERROR== An error occurred while querying metrics.'; exit 1 ;;
  *) echo '"ID","Kernel Name","gpu__time_duration.sum"'; echo '"","","ns"'; echo '"0","tiny","1,234"' ;;
esac
""")
    check = _check(tmp_path, cuda=True, ncu=ncu)
    outcome = gc.step_ncu_preflight(check, gc.STEPS[2], 60)  # a bound, not a wait: loaded CI starts processes slowly
    assert outcome.status == "ok", outcome.result
    assert check.ncu_ok is True and check.metrics_file is None
    assert "metric list not checked (`ncu --query-metrics` exit 1, 0 names)" in outcome.result
    assert outcome.numbers["query_exit"] == 1 and outcome.numbers["chip_metric_names"] == 0
    assert "profiler.available_metrics=auto" in check.ncu_overrides(gc.STEPS[3], "reprofile", 60)


def test_preflight_that_cannot_profile_skips_the_ncu_steps_only(tmp_path: Path) -> None:
    ncu = _fake_ncu(tmp_path, "echo '==ERROR== Failed to initialize the profiler: LibraryNotLoaded'; exit 1\n")
    check = _check(tmp_path, cuda=True, ncu=ncu, installed=True)
    outcome = gc.step_ncu_preflight(check, gc.STEPS[2], 60)  # a bound, not a wait: loaded CI starts processes slowly
    assert outcome.status == "failed" and "LibraryNotLoaded" in outcome.result
    steps = {s.name: s for s in gc.STEPS}
    for name in ("reprofile_ncu", "stalls_ncu", "fixture", "channels_last_ncu"):
        assert "ncu cannot profile here" in gc.skip_reason(check, steps[name])
    for name in ("gpu_tests", "aa_timing", "reproduction", "auto_trace"):
        assert gc.skip_reason(check, steps[name]) is None
    check.installed = False
    assert "install" in gc.skip_reason(check, steps["aa_timing"])


def test_a_step_past_its_time_dies_with_what_it_started(tmp_path: Path) -> None:
    check = _check(tmp_path)
    pids = tmp_path / "pids"
    # A child that starts a grandchild in a session of its own (as ncu does), both sleeping.
    script = (
        "import os, subprocess, sys, time\n"
        "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'], start_new_session=True)\n"
        f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{g.pid}}')\n"
        "time.sleep(120)\n"
    )
    proc = check.run([sys.executable, "-c", script], 3)
    assert proc.timed_out
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
    outcome = gc.pack(check)
    with tarfile.open(check.out / "runs.tgz") as archive:
        names = archive.getnames()
    assert "gpu_check/runs/x/trials/card/baseline.json" in names
    assert "gpu_check/ncu_reports/reprofile/card/000_baseline_as_reported/trial.ncu-rep" in names
    assert not any(n.endswith((".pt", "big.ncu-rep")) for n in names)
    assert (check.out / "runs.tgz").stat().st_size < gc.MAX_FILE_BYTES
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
                                                          "verdict": "yes"}]}))
    text, numbers = gc._reprofile_headline(run)
    assert "c-842ecd" in numbers and "0.50x report" in text and "(ncu)" in text
    check = _check(tmp_path)
    check.harness_run = lambda step, name, args, timeout: (gc.Proc(0, False, 1.0, ""), run)  # type: ignore
    outcome = gc.step_channels_last_ncu(check, gc.STEPS[6], 30)
    assert outcome.numbers["baseline_transposes"] and outcome.numbers["variant_transposes"] == []
    assert "nchwToNhwc x1, nhwcToNchw x1" in outcome.result and "channels_last_3d: none" in outcome.result


@pytest.mark.slow
def test_the_device_forms_command_lines_compose(tmp_path: Path) -> None:
    """Every harness command the device would run is a valid Hydra composition (`--cfg job`, no run)."""
    check = _check(tmp_path, cuda=True, ncu="/usr/bin/true", ncu_ok=True, installed=True)
    check.metrics_file = tmp_path / "names.txt"
    captured: dict[str, list[str]] = {}

    def capture(step, name, args, timeout):
        captured[name] = args
        return gc.Proc(1, False, 0.0, "error: not run"), tmp_path / "none"

    check.harness_run = capture  # type: ignore[method-assign]
    for step in gc.STEPS:
        if step.name in ("reprofile_ncu", "stalls_ncu", "channels_last_ncu", "reproduction", "auto_trace"):
            with pytest.raises(gc.StepFailed):
                getattr(gc, f"step_{step.name}")(check, step, 60)
    assert set(captured) == {"reprofile_ncu", "stalls_ncu", "channels_last_ncu", "reproduction", "auto_trace"}
    assert "profiler=ncu" in captured["reprofile_ncu"] and "profiler=torch_cuda" in captured["auto_trace"]
    for name, args in captured.items():
        proc = subprocess.run([sys.executable, "-m", "harness", *args, "--cfg", "job"], check=False, capture_output=True,
                              text=True, timeout=120, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
        assert proc.returncode == 0, f"{name}: {proc.stderr[-1500:]}"
        assert "device: cuda" in proc.stdout, name
