"""harness.cards is pure Python: a diff of two stored runs, lint or show needs no torch, Optuna,
matplotlib or Hydra (what renders pages with them is harness.report)."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import harness.cards

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "optuna", "matplotlib", "hydra")


def test_every_cards_module_imports_without_heavy_libraries():
    modules = [f"harness.cards.{m.name}" for m in pkgutil.iter_modules(harness.cards.__path__)
               if m.name != "__main__"]  # __main__ runs the CLI
    assert "harness.cards.diff" in modules and "harness.cards.cli" in modules
    script = (f"import importlib, json, sys\nfor name in {modules!r}:\n    importlib.import_module(name)\n"
              f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []
