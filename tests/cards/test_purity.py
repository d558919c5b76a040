"""harness.cards is pure Python, and so is the command line over report files (harness.report.cli): a diff of
two stored runs, lint or show needs no torch, Optuna, matplotlib or Hydra (only `diff --html`, the page,
imports matplotlib). The hardware tables below it
(harness.hardware: occupancy, GPU peaks, ncu metric names) are too, and neither reaches into the
profiler's package (harness.profile)."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import harness.cards
import harness.hardware

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "optuna", "matplotlib", "hydra")


def test_every_cards_module_imports_without_heavy_libraries():
    modules = [f"harness.cards.{m.name}" for m in pkgutil.iter_modules(harness.cards.__path__)
               if m.name != "__main__"]  # __main__ runs the CLI
    assert "harness.cards.diff" in modules and "harness.cards.lint" in modules
    script = (f"import importlib, json, sys\nfor name in {modules!r}:\n    importlib.import_module(name)\n"
              f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


def _loaded_after_importing(modules: list[str]) -> list[str]:
    """The modules a fresh interpreter holds after importing `modules`."""
    script = (f"import importlib, json, sys\nfor name in {modules!r}:\n    importlib.import_module(name)\n"
              "print(json.dumps(sorted(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _modules_of(package) -> list[str]:
    return [f"{package.__name__}.{m.name}" for m in pkgutil.iter_modules(package.__path__) if m.name != "__main__"]


def test_cards_and_hardware_import_no_profiler_module():
    hardware = _modules_of(harness.hardware)
    assert {"harness.hardware.occupancy", "harness.hardware.gpu_peaks", "harness.hardware.ncu_metrics"} <= set(hardware)
    loaded = _loaded_after_importing(["harness.cards", *_modules_of(harness.cards), "harness.hardware", *hardware])
    assert [m for m in loaded if m == "harness.profile" or m.startswith("harness.profile.")] == []


def test_hardware_imports_no_torch_and_nothing_of_the_harness_but_its_errors():
    loaded = _loaded_after_importing(["harness.hardware", *_modules_of(harness.hardware)])
    assert [m for m in HEAVY if m in loaded] == []
    harness_modules = {m for m in loaded if m == "harness" or m.startswith("harness.")}
    assert {m for m in harness_modules if not m.startswith("harness.hardware")} <= {"harness", "harness.errors"}


def test_the_report_command_line_imports_no_heavy_library_until_a_page_is_asked_for():
    loaded = _loaded_after_importing(["harness.report", "harness.report.cli"])
    assert [m for m in HEAVY if m in loaded] == []
    assert "harness.report.html" not in loaded and "harness.profile.ncu.importer" not in loaded
