"""The base install (`pip install -e .`, no extras) runs: the app in a subprocess, and every process it starts,
cannot find triton, cupy, flash_attn, diffusers, ncu_report or pynvml (tests/app/plain_install/sitecustomize.py,
first on PYTHONPATH), whatever this venv has installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHIM = Path(__file__).resolve().parent / "plain_install"
HIDDEN = ("triton", "cupy", "flash_attn", "flash_attn_interface", "diffusers", "ncu_report", "pynvml")
TINY = ["device=cpu", "workload.cpu_scale=0.08", "timing.budget_s=0.05", "timing.drift_budget_s=0.02",
        "timing.confirm_rounds=1"]


def _env() -> dict[str, str]:
    # The shim first (so `site` imports it), then this checkout, then whatever the caller had.
    paths = [str(SHIM), str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


def _python(cwd: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=cwd, env=_env(), capture_output=True, text=True,
                          timeout=timeout)


def _harness(tmp_path: Path, run_dir: str, *overrides: str) -> subprocess.CompletedProcess:
    return _python(tmp_path, "-m", "harness", f"hydra.run.dir={tmp_path / run_dir}", *overrides)


def test_the_shim_hides_the_optional_packages_as_if_never_installed(tmp_path):
    probe = (
        "import importlib, importlib.util, json\n"
        f"names = {list(HIDDEN)!r}\n"
        "found = {n: importlib.util.find_spec(n) is not None for n in names}\n"
        "imported = []\n"
        "for n in names:\n"
        "    try:\n"
        "        importlib.import_module(n)\n"
        "        imported.append(n)\n"
        "    except ModuleNotFoundError:\n"
        "        pass\n"
        "import torch, harness.api.experiment\n"  # what stays visible: the base install
        "print(json.dumps({'found': found, 'imported': imported,\n"
        "                  'torch': importlib.util.find_spec('torch') is not None}))\n"
    )
    proc = _python(tmp_path, "-c", probe, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen == {"found": {n: False for n in HIDDEN}, "imported": [], "torch": True}


@pytest.mark.slow
def test_auto_plans_without_the_extras_and_leaves_the_chunk_cards_out_with_what_to_install(tmp_path):
    proc = _harness(tmp_path, "plan", "experiment=auto", "auto.plan_only=true")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    plan = json.loads((tmp_path / "plan" / "plan.json").read_text())
    chunks = [e for e in plan["cards"] if e.get("chunk")]
    assert len(chunks) == 4 and len(plan["cards"]) == 73
    assert all("needs diffusers: pip install -e '.[chunk]'" in e["unavailable"] for e in chunks)
    assert not any(e.get("unavailable") for e in plan["cards"] if not e.get("chunk"))
    plan_md = (tmp_path / "plan" / "plan.md").read_text()
    assert ("- left out on this install (the vae_decode workload needs diffusers: pip install -e '.[chunk]'): "
            in plan_md)

    # Selecting only a chunk experiment is a one-line error naming the extra, before any worker starts.
    chunk = _harness(tmp_path, "chunk", "experiment=vae_decode_chunk")
    assert chunk.returncode == 2, chunk.stderr[-2000:]
    errors = [line for line in chunk.stderr.splitlines() if line.startswith("error:")]
    assert errors == [errors[-1]] and "needs diffusers: pip install -e '.[chunk]'" in errors[0]
    assert "Traceback" not in chunk.stderr and "worker process" not in chunk.stderr


@pytest.mark.slow
def test_dit_gemm_tiles_runs_and_its_triton_variant_is_not_drawn_with_the_extra_to_install(tmp_path):
    proc = _harness(tmp_path, "run", "experiment=dit_gemm_tiles", "cards=[dit-480-linear-m3n5120k256-ff7b7c]",
                    "search.n_trials=2", *TINY)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = (tmp_path / "run" / "summary.md").read_text()
    assert "- not drawn: triton_matmul (needs CUDA; device is cpu; needs triton: pip install -e '.[triton]')" in summary
    assert "- not drawn: blas_library (needs CUDA; device is cpu)" in summary
    trials = sorted((tmp_path / "run" / "trials" / "dit-480-linear-m3n5120k256-ff7b7c").glob("trial_*.json"))
    assert len(trials) == 2  # both trials measured a variant the base install runs
