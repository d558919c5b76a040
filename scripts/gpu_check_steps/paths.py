"""Where the check finds the repository, its own entry and the carried wheels, and where it caches."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ENTRY = REPO / "scripts" / "gpu_check.py"  # what the helpers (--helper ...) run in a process of their own
WHEELS = REPO / ".whl"
CACHE = Path(os.environ.get("GPU_CHECK_CACHE", Path.home() / ".cache" / "harness-gpu-check"))


def rel(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)
