"""The chip's metric list (`ncu --query-metrics`) kept on disk, so a harness start reads it back instead of
asking ncu again (about 14 s on the H200, for a list that does not change between runs on one machine).

The key is what decides the list: the GPU models, the driver, and the ncu that answered (its version line
and resolved path). The GPUs and the driver are read from /proc/driver/nvidia (no CUDA call, no process),
else from `nvidia-smi`; with neither, or an ncu whose version is unknown, nothing is cached. Only a trusted
answer is stored: the caller stores a query that exited 0 and names gpu__time_duration.sum (the rule for
using it at all). The file is `<cache dir>/ncu_metrics-<sha256 of the key>.txt` (the cache dir is
`$HARNESS_CACHE_DIR` or `~/.cache/harness`, as for the CPU's peaks): the key as JSON on its first line, then
one name a line. Delete it to ask ncu again.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import warnings
from pathlib import Path
from typing import Any

from harness.profile.cpu_peaks import cache_dir

PROC_NVIDIA = Path("/proc/driver/nvidia")
SMI_DEADLINE_S = 20.0
# The driver's version in /proc/driver/nvidia/version: "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15 ..."
_DRIVER = re.compile(r"\s(\d+\.\d+(?:\.\d+)*)\s")


def _from_proc() -> tuple[list[str], str] | None:
    try:
        version = (PROC_NVIDIA / "version").read_text(encoding="utf-8", errors="replace")
        infos = sorted((PROC_NVIDIA / "gpus").glob("*/information"))
        models = [line.split(":", 1)[1].strip() for info in infos
                  for line in info.read_text(encoding="utf-8", errors="replace").splitlines()
                  if line.startswith("Model:")]
    except OSError:
        return None
    first = version.splitlines()[0] if version else ""
    found = _DRIVER.search(first + " ")
    return (sorted(models), found.group(1)) if models and found else None


def _from_smi() -> tuple[list[str], str] | None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run([smi, "--query-gpu=name,driver_version", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=SMI_DEADLINE_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    rows = [[cell.strip() for cell in line.split(",")] for line in out.stdout.splitlines() if line.strip()]
    if out.returncode != 0 or not rows or any(len(row) != 2 or not all(row) for row in rows):
        return None
    return sorted(row[0] for row in rows), rows[0][1]


def cache_key(ncu: str, version_line: str) -> dict[str, Any] | None:
    """What the list depends on, or None when it cannot be told (then nothing is cached)."""
    if not version_line.lower().startswith("version"):  # "unknown (...)": not an ncu we can name
        return None
    gpus = _from_proc() or _from_smi()
    if gpus is None:
        return None
    resolved = shutil.which(ncu) or ncu
    return {"gpus": gpus[0], "driver": gpus[1], "ncu": version_line, "ncu_path": os.path.realpath(resolved)}


def cache_file(key: dict[str, Any]) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return cache_dir() / f"ncu_metrics-{digest}.txt"


def load(key: dict[str, Any]) -> set[str] | None:
    """The names cached for `key`, or None (no file, another key in it, unreadable)."""
    try:
        head, _, body = cache_file(key).read_text(encoding="utf-8").partition("\n")
        if json.loads(head) != key:
            return None
    except (OSError, ValueError):
        return None
    names = set(body.split())
    return names or None


def store(key: dict[str, Any], names: set[str]) -> None:
    """Write the names for `key` (whole or not at all); a cache that cannot be written is warned about."""
    path = cache_file(key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=path.parent, delete=False,
                                         prefix=path.name, suffix=".part") as handle:
            handle.write(json.dumps(key, sort_keys=True) + "\n" + "\n".join(sorted(names)) + "\n")
        os.replace(handle.name, path)
    except OSError as exc:
        warnings.warn(f"ncu metric list not cached in {path}: {exc}", stacklevel=2)
