"""The pytest steps: the gpu- and ncu-marked tests (less what a step of the check already runs) and the planted
mistakes on CUDA; a killed pytest still says which tests it finished (-v)."""

from __future__ import annotations

import os
import re

from .check import Check
from .outcome import Outcome, StepFailed
from .paths import REPO, rel
from .plan import Step
from .run_folder import pytest_progress
from .texts import last_line

# Files other engineers' steps run; each step is skipped, saying so, while its file is missing.
PLANTS_TESTS = REPO / "tests" / "app" / "test_plants.py"
PLANTS_DEVICE_VAR = "HARNESS_PLANTS_DEVICE"
# gpu_tests leaves out what a step of the check already runs (each with the step that does).
COVERED_BY_STEPS = {
    # experiment=reprofile under ncu, one card per op kind: reproduction_ncu's run, on more cards at scale 1.
    "tests/app/test_gpu_paths.py::test_ncu_backend_reprofiles_every_op_kind": "reproduction_ncu",
}
GPU_MARK = re.compile(r"\bmark\.(gpu|ncu)\b")


def _gpu_test_files() -> list[str]:
    """The test files outside tests/app that mark a test gpu or ncu, read from the source: collecting only
    them, not all of tests/ (5.7 s against 14.1 s on a 2-core CPU)."""
    return [rel(p) for p in sorted((REPO / "tests").rglob("test_*.py"))
            if "app" not in p.relative_to(REPO / "tests").parts[:1] and GPU_MARK.search(p.read_text(errors="replace"))]


def _ncu_marked_app_tests() -> list[str]:
    """The ncu-marked tests of tests/app as node ids, read from the source: tests/app's other tests run
    whole experiments on the CPU (CI's business), so the app modules are not collected whole."""
    found = []
    for path in sorted((REPO / "tests" / "app").glob("test_*.py")):
        for name in re.findall(r"@pytest\.mark\.ncu\s*\n(?:\s*@.*\n)*\s*def (test_\w+)", path.read_text()):
            found.append(f"{rel(path)}::{name}")
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
    line = last_line(proc.output, r"passed|failed|error|skipped|no tests ran")
    counts = {key: int(n) for n, key in re.findall(r"(\d+) (passed|failed|skipped|error|errors|deselected)", line)}
    if proc.timed_out:
        raise StepFailed(f"pytest killed at {timeout:.0f} s{note}", "timeout", counts)
    status = "ok" if proc.returncode == 0 else "failed"
    failed = [ln.strip() for ln in proc.output.splitlines() if ln.startswith(("FAILED", "ERROR"))][:5]
    return Outcome(status, line + note + (("; " + "; ".join(failed)) if failed else ""), {**counts, "failed": failed})


def plants_unmet() -> str | None:
    if not PLANTS_TESTS.is_file():
        return f"{rel(PLANTS_TESTS)} missing"
    if PLANTS_DEVICE_VAR not in PLANTS_TESTS.read_text(errors="replace"):
        return f"{rel(PLANTS_TESTS)} does not read {PLANTS_DEVICE_VAR}: it runs on the CPU only (CI runs it there)"
    return None


def step_plants(check: Check, step: Step, timeout: float) -> Outcome:
    """The adversarial suite on CUDA: every planted mistake refused with its own reason, the honest twins
    kept. -v so that a killed run still says which plants it finished."""
    argv = [check.python, "-m", "pytest", "-v", rel(PLANTS_TESTS), "-p", "no:cacheprovider", "-o", "addopts=-ra"]
    proc = check.run(argv, timeout, log=check.work / "logs" / f"{step.name}.log",
                     env=check.env(**{PLANTS_DEVICE_VAR: "cuda"}))
    line = last_line(proc.output, r"passed|failed|error|skipped|no tests ran")
    numbers = pytest_progress(proc.output)
    if proc.timed_out:
        raise StepFailed(f"pytest killed at {timeout:.0f} s", "timeout", numbers)
    failed = numbers.get("failed") or []
    return Outcome("ok" if proc.returncode == 0 else "failed",
                   line + (("; " + "; ".join(failed[:3])) if failed else ""), numbers)
