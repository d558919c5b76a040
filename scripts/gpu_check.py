#!/usr/bin/env python3
"""The GPU check: the GPU path end to end in one device command of at most 7 minutes, with no network.

    scripts/gpu_check.sh [--dry-run] [--steps a,b,...] [--out DIR] [--deadline S] [--plan]

Steps, in order of value (`--plan` prints them with their budgets and what each budget is made of),
each recorded in summary.json with its status (ok, failed, timeout, skipped), seconds, one line of
result and its headline numbers:

  machine            nvidia-smi, driver, torch/CUDA/triton/cupy/ncu versions, SM clock -> versions.txt
  install            the wheels of .whl/ (scripts/device_wheels.sh) with --no-index --no-deps --target,
                     every requirement checked (versions too), every module of the project imported
  ncu_preflight      ncu on one tiny kernel (does it profile here at all?) and `ncu --query-metrics`:
                     every metric the harness asks for checked on this chip, a missing one swapped for
                     an alternative or dropped with a note (the harness gets the list)
  reproduction_ncu   experiment=reprofile under ncu at scale 1 on one card per op kind (linear, conv3d,
                     attention, cast) and the five cards that carry the report's time, each built in its own
                     dtype, then `python -m harness.report reproduce` on the baseline: a verdict per card
                     (REPRODUCED, OTHER_KERNELS, OTHER_SPEED, NOT_COMPARABLE) -> reproduction.md
  wins               vae_bf16 (bf16 x memory format) and dit_small_m_batching (batched k=20) on their card at
                     scale 1 under the CUDA trace: each one's confirmed verdict and adopted variant
  channels_last_ncu  vae_channels_last under ncu on one conv3d card, one trial: a confirmed verdict, and
                     which layout conversions (nchwToNhwc, nhwcToNchw, convertTensor, ...) the baseline and the
                     variant run, with their time and bytes
  aa_timing          an A/A pair through the paired-rounds verdict (8 rounds), CUDA events, SM clock per round
  stalls_ncu         experiment=stall_breakdown under ncu on one unresolved card: the dominant warp stall
  fixture            the smallest .ncu-rep and its raw-page CSV into $OUT, both parsed back (future fixtures)
  gpu_tests          the gpu- and ncu-marked tests of the files that hold them (less the ncu app test that
                     reproduction_ncu repeats): Triton, CuPy, SDPA, the CUDA timer and its side-stream check
  plants             tests/app/test_plants.py on CUDA (HARNESS_PLANTS_DEVICE=cuda), where it supports that
  capture            examples/capture_model.py captured, its 2 hottest groups re-profiled under ncu
  conv_kernels_ncu   vae_conv_kernels under ncu on the conv card: cuDNN's kernels and one Triton tile
  chunk_trace        vae_decode_chunk and dit_block on their 480 chunk card at scale 1 under the CUDA trace,
                     one cheap variant each (channels_last_3d; modulation_once: nothing compiled)
  auto_trace         experiment=auto under the CUDA trace on the cast card: stall_breakdown and output_cast
  pack               (always) runs.tgz and summary.json

Budgets. Each step's device budget is built from what it runs (Work: harness starts, ncu trials, traced
trials, confirm rounds, other seconds) at the costs below, measured on the first H200 run; a step is
planned while its budget still fits one global deadline (--deadline, 420 s) less the pack's reserve, in
order of value, so the planned budgets add up to at most the deadline (today every step is planned). A
step that does not fit is not planned: it runs only where the planned ones leave it its whole budget
(steps skipped, or done early). At run time a step gets its budget plus the time the earlier steps saved
(at most twice its budget), less what the later planned steps still need.

Partial results. Each step runs in its own process group, its output going to its log, and is killed
with everything it started (ncu and its target included) when its time is up. Every 10 s of a step,
and when it fails, runs out of time or the check is interrupted, summary.json gets what the step has
done: the cards the run finished (as its run.json counts them: in its best.json, rewritten after each
card) and those with only their baseline measured (time, class, the report's), their trials and
confirmed verdicts, read from the run folder's trials/<card>/ files; for pytest, every test finished.

$OUT (default ./gpu_check_out) gets at most 8 files, each under 16 MiB: gpu_check.log, summary.json,
versions.txt, runs.tgz (every run directory, step log and helper output), reproduction.md, and one small
fixture_<card>.ncu-rep with its fixture_<card>_raw_page.csv.

--dry-run (also what runs on a machine without CUDA): the steps that need CUDA or ncu are skipped
with the reason; the rest really runs: the wheels install as a set (--no-index --no-deps --target) into
a scratch environment of pyenv's Python 3.12 that stands in for the GPU machine's image (the
preinstalled packages the wheels need, from the package index, cached), the torch-free modules import
there; the experiments run on the CPU with this environment (device=cpu profiler=cpu, small scale),
with budgets measured on a 2-core machine; deadlines, partial results and packing as on the device.

Standard library only at import (the harness modules it uses, harness.profile.ncu's finder and probe,
are too): it runs before anything is installed. This file is the entry; the check is the package
scripts/gpu_check_steps/ beside it: the plan and its costs (plan), the step runner (check, runner), what a
run folder holds (run_folder), the steps by family (machine, ncu_steps, experiment_steps, pytest_steps,
model_steps) and their table in order of value (table), the pack (pack) and the command line (cli).
"""

import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent
# The check's package beside this file (a script run with -I does not get its folder on sys.path) and the
# repository (harness.profile.ncu's finder and probe: standard library only), before anything is installed.
sys.path[:0] = [str(SCRIPTS.parent), str(SCRIPTS)]

from gpu_check_steps.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(__doc__.split("\n\n")[0]))
