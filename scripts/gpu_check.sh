#!/usr/bin/env bash
# The GPU check: the GPU path end to end on one H100/H200 with Nsight Compute, in one device command of
# at most 10 minutes, offline (a global deadline of 7 minutes; steps ordered by value, each with a budget
# built from what it runs; the planned budgets add up to at most the deadline).
#
#   scripts/gpu_check.sh [--dry-run] [--steps a,b,...] [--out DIR] [--deadline S] [--plan]
#
# On the GPU machine (docs/gpu.md): carry `.whl` (filled by scripts/device_wheels.sh) and run
#   scripts/gpu_check.sh              # writes at most 8 files to $OUT (else ./gpu_check_out)
# Here, on a CPU-only machine, the same with the CUDA/ncu steps skipped and the rest really run:
#   scripts/gpu_check.sh --dry-run
# The steps, their budgets and outputs: scripts/gpu_check.py, which runs them from scripts/gpu_check_steps/
# (standard library only, so it runs before anything is installed); `--plan` prints them and
# `total <sum> s of deadline <deadline> s` last.
# Exit status 0 when no step failed or ran out of time; summary.json has what each step finished, also
# one that was killed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${GPU_CHECK_PYTHON:-}"
if [ -z "$PY" ]; then
  PY=python3
  # A dry run uses this machine's environment (the project's .venv when there is one); on the GPU
  # machine the plain python3 is the one that holds torch.
  for arg in "$@"; do [ "$arg" = "--dry-run" ] && [ -x .venv/bin/python ] && PY=.venv/bin/python; done
fi
export GPU_CHECK_PYTHON="$PY"
exec "$PY" scripts/gpu_check.py "$@"
