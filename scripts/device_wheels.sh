#!/usr/bin/env bash
# Fill .whl/ (git-ignored) with exactly the wheels the GPU machine lacks, as pinned in
# scripts/device_wheels.lock, for CPython 3.12 x86-64 manylinux (at most 30 MiB), and check the set:
# one version each, every requirement carried or preinstalled there (scripts/gpu_machine_preinstalled.txt),
# tags that install there. Needs the package index (a networked machine); a second run only checks
# (well under a second). Then carry `.whl` with scripts/gpu_check.sh (docs/gpu.md).
#
#   scripts/device_wheels.sh                 # fill and check
#   scripts/device_wheels.sh check           # check only
#   scripts/device_wheels.sh lock [--write]  # derive the list again from pyproject (see device_wheels.py)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=python3
[ -x .venv/bin/python ] && PY=.venv/bin/python
exec "$PY" scripts/device_wheels.py "${@:-fill}"
