"""The table of steps, in order of value: each with what its device form runs (its budget), its CPU form's
budget, what it needs and the function that runs it."""

from __future__ import annotations

from .experiment_steps import REPRODUCTION_NCU, WINS, reproduce_unmet, step_aa_timing, step_reproduction_ncu, step_wins
from .machine import step_install, step_machine
from .model_steps import CAPTURE_TOP, CHUNK_EXPERIMENTS, step_auto_trace, step_capture, step_chunk_trace
from .ncu_steps import (
    step_channels_last_ncu,
    step_conv_kernels_ncu,
    step_fixture,
    step_ncu_preflight,
    step_stalls_ncu,
)
from .paths import rel
from .plan import CHUNK_SETUP_S, Step, Work
from .pytest_steps import PLANTS_DEVICE_VAR, PLANTS_TESTS, plants_unmet, step_gpu_tests, step_plants

# Each device budget from the first H200 run (its step seconds in the comments); CPU budgets measured on 2 cores
# (reproduction_ncu 40.5 s, wins 41.1 s in the dry run of 2026-12-04).
STEPS = [
    Step("machine", Work(other_s=7, other="nvidia-smi, ncu --version, one python importing torch (6.8 s)"), 15, (),
         step_machine, "versions, driver, clocks -> versions.txt"),
    Step("install", Work(other_s=7, other="pip --no-deps of 11 wheels, the requirement check, the import sweep "
                                          "(6.6 s)"),
         90, (), step_install, "the carried wheels, requirements, imports"),
    # `ncu --query-metrics` took 16 s of this step's 16.8 s: started with the check, it runs beside machine and
    # install (13.4 s), so what is left of it and the tiny kernel's 2.3 s remain.
    Step("ncu_preflight", Work(other_s=6, other="ncu on one tiny kernel (2.3 s), the rest of `ncu --query-metrics`"),
         0, ("cuda", "ncu"), step_ncu_preflight, "tiny kernel under ncu, metric list"),
    Step("reproduction_ncu", Work(starts=1, ncu_trials=len(REPRODUCTION_NCU), other_s=2,
                                  other="python -m harness.report reproduce"),
         50, ("cuda", "ncu", "harness"), step_reproduction_ncu,
         "one card per op kind and the report's five under ncu, each with its reproduce verdict", reproduce_unmet),
    Step("wins", Work(starts=len(WINS), trace_trials=sum(1 + trials for *_, trials in WINS), confirms=len(WINS)),
         50, ("cuda", "harness"), step_wins, "vae_bf16 and dit_small_m_batching at scale 1: verdicts, adopted"),
    Step("channels_last_ncu", Work(starts=1, ncu_trials=2, confirms=1), 50, ("cuda", "ncu", "harness"),
         step_channels_last_ncu, "vae_channels_last under ncu, one trial: a confirmed verdict, the layout conversions"),
    Step("aa_timing", Work(other_s=10, other="one python: torch, two workloads, 8 paired rounds (9.2 s)"), 25,
         ("cuda", "harness"), step_aa_timing, "A/A pair of 8 rounds, SM clock"),
    Step("stalls_ncu", Work(starts=1, ncu_trials=1), 45, ("cuda", "ncu", "harness"), step_stalls_ncu,
         "stall_breakdown under ncu"),
    Step("fixture", Work(other_s=2, other="ncu --import of one report, both parsed back (1.3 s)"), 0,
         ("cuda", "ncu", "harness"), step_fixture, "one .ncu-rep + raw page into $OUT"),
    # 88.3 s with the ncu app test (a harness run of about 5 ncu baselines, ~34 s at the costs above) and the
    # collection of all of tests/; without both, an estimate until its --durations say.
    Step("gpu_tests", Work(other_s=50, other="pytest: the gpu unit tests (Triton and torch.compile compiles)"),
         0, ("cuda", "harness"), step_gpu_tests, "gpu- and ncu-marked tests"),
    Step("plants", Work(other_s=42, other=f"pytest {rel(PLANTS_TESTS)}: one worker, a trial per plant (40.8 s)"),
         0, ("cuda", "harness"), step_plants, f"the planted mistakes on CUDA ({PLANTS_DEVICE_VAR}=cuda)",
         plants_unmet),
    # The capture's own process (torch, the model, its forwards) counts as one start, its re-profile run as another;
    # 42.2 s with 3 groups: 2 starts and 3 ncu trials left 9.8 s (the forwards, the replays' set-up).
    Step("capture", Work(starts=2, ncu_trials=CAPTURE_TOP, ncu_cold=1, other_s=9.8,
                         other="the example model's forwards, the replays' set-up"), 20, ("cuda", "harness"),
         step_capture, "a model captured: its hot ops replayed and re-profiled (ncu)"),
    Step("conv_kernels_ncu", Work(starts=1, ncu_trials=2, confirms=1), 55, ("cuda", "ncu", "harness"),
         step_conv_kernels_ncu, "vae_conv_kernels under ncu: cuDNN's kernels, a Triton tile"),
    Step("chunk_trace", Work(starts=len(CHUNK_EXPERIMENTS), trace_trials=2 * len(CHUNK_EXPERIMENTS),
                             confirms=len(CHUNK_EXPERIMENTS), other_s=CHUNK_SETUP_S * len(CHUNK_EXPERIMENTS),
                             other="the chunks' set-up (a VAE decoder chunk, a DiT block: 13.2 s each)"), 80,
         ("cuda", "harness"), step_chunk_trace, "the chunk experiments under the CUDA trace: op breakdown"),
    # Two sub-runs, each with its worker: stall_breakdown's baseline; output_cast's baseline and one trial.
    Step("auto_trace", Work(starts=1, trace_trials=3, confirms=1, other_s=3.5,
                            other="the second sub-run's worker start"), 60, ("cuda", "harness"), step_auto_trace,
         "experiment=auto under the CUDA trace"),
]
STEP_NAMES = [s.name for s in STEPS]
