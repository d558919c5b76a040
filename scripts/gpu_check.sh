#!/usr/bin/env bash
# Validate the GPU path on one H100/H200 with Nsight Compute, in a few minutes, offline.
#
#   scripts/gpu_check.sh [OUT_DIR]        (default: $OUT, else ./gpu_check_out)
#
# The target has python3 with torch (CUDA), triton, cupy and ncu, but no optuna, hydra-core or omegaconf
# and no network: they are installed from wheels in .whl/, filled beforehand on a networked machine:
#   pip wheel --no-deps -w .whl antlr4-python3-runtime==4.9.3      # published only as a source archive
#   pip download --only-binary=:all: --python-version 3.12 -d .whl \
#       optuna hydra-core omegaconf alembic sqlalchemy colorlog tqdm pyyaml mako greenlet \
#       packaging typing-extensions safetensors pytest hypothesis ncu-report
# Writes to OUT_DIR: gpu_check.log, the run directories (cards, diffs), one small real .ncu-rep and its
# raw CSV export, and nvidia-smi / ncu versions.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR="${1:-${OUT:-gpu_check_out}}"
mkdir -p "$OUT_DIR"
LOG="$OUT_DIR/gpu_check.log"
exec > >(tee -a "$LOG") 2>&1
step() { echo; echo "=== $(date +%T) $*"; }
status=0

step "machine"
nvidia-smi || status=1
command -v ncu && ncu --version || echo "ncu not on PATH"
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0))"

step "install what is missing from .whl/"
if [ -d .whl ]; then
  python3 -m pip install --no-index --find-links .whl --no-deps .whl/*.whl >/dev/null 2>&1 || true
  python3 -m pip install --no-index --find-links .whl --no-deps --no-build-isolation -e . || status=1
else
  echo ".whl/ missing: assuming optuna, hydra-core and omegaconf are installed"
  python3 -m pip install --no-deps --no-build-isolation -e . >/dev/null 2>&1 || true
fi
python3 -c "import optuna, hydra, omegaconf; print('optuna', optuna.__version__, 'hydra', hydra.__version__)" || status=1

step "GPU-marked tests and the ncu/trace parsers"
timeout 120 python3 -m pytest -q -m "gpu or ncu" tests/ 2>&1 | tail -20 || status=1
timeout 60 python3 -m pytest -q tests/profile 2>&1 | tail -5 || status=1

step "one small card per op kind under ncu (baseline re-profile), warp stalls, vae_channels_last"
timeout 120 python3 -m harness experiment=reprofile device=cuda profiler=ncu workload.scale=0.25 \
  profiler.keep_dir="$OUT_DIR/ncu_trial" timing.budget_s=0.2 \
  hydra.run.dir="$OUT_DIR/reprofile_ncu" || status=1
timeout 75 python3 -m harness experiment=stall_breakdown device=cuda profiler=ncu workload.scale=0.25 \
  'cards=[dit-480-linear-m4680n5120k144-500175]' profiler.keep_dir="$OUT_DIR/ncu_stalls" timing.budget_s=0.2 \
  hydra.run.dir="$OUT_DIR/stall_breakdown_ncu" || status=1
timeout 75 python3 -m harness experiment=vae_channels_last device=cuda profiler=ncu workload.scale=0.25 \
  'cards=[vae-480-conv3d-96to3k333t3-842ecd]' timing.budget_s=0.2 \
  hydra.run.dir="$OUT_DIR/vae_channels_last_ncu" || status=1

step "experiment=auto on its default cards under the torch.profiler trace (Triton, CuPy, SDPA, cuBLASLt)"
timeout 150 python3 -m harness experiment=auto device=cuda profiler=torch_cuda workload.scale=0.25 \
  search.n_trials=8 timing.budget_s=0.1 timing.confirm_rounds=2 \
  hydra.run.dir="$OUT_DIR/auto_trace" || status=1

step "keep one real .ncu-rep with its raw CSV export"
REP=$(ls "$OUT_DIR"/ncu_trial/*.ncu-rep 2>/dev/null | head -1)
STALLS=$(ls "$OUT_DIR"/ncu_stalls/*.ncu-rep 2>/dev/null | head -1)
[ -n "$STALLS" ] && { ncu --import "$STALLS" --csv --page raw --print-units base > "$OUT_DIR/stalls_raw_page.csv" || status=1; }
if [ -n "$REP" ]; then
  ncu --import "$REP" --csv --page raw --print-units base > "$OUT_DIR/trial_raw_page.csv" || status=1
  python3 -m harness.cards import-ncu "$REP" --out "$OUT_DIR/imported_cards.json" || status=1
else
  echo "no .ncu-rep was produced"; status=1
fi

step "done (status $status)"
exit $status
