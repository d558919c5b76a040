"""Trial isolation: a persistent worker process measures the variants, so a bad one cannot end the run.

A sweep runs variants nobody has run before; some segfault, raise, run out of memory or hang. The
parent (the Hydra app, which owns Optuna, the storage and the outputs) never calls a variant itself:
one worker child (`python -m harness.worker`, harness/worker/__main__.py) does, and answers each request
with one JSON line on a private pipe. The parent waits for the answer under a deadline (`search.trial_deadline_s`):

- an exception in the variant: the answer says `ExceptionType: message`; the child stays up;
- out of memory (torch.OutOfMemoryError, MemoryError, a CPU allocator's "can't allocate memory"):
  `out of memory: ...`, the child frees the CUDA cache and stays up;
- the child dies (a segfault, the OOM killer, kill -9, os._exit): the parent names the signal or exit
  status and starts a new child for the next request;
- no answer by the deadline: the parent kills the child's process group (SIGKILL) and starts a new one.

The child is started once per process (importing torch costs seconds; one child serves every run of
the process, e.g. experiment=auto's sub-runs, logging to each run's folder) and again only after it
died, was killed, or hit a CUDA error that leaves its context unusable. It is also where the run learns
what it needs of the torch side before measuring (the device, the experiment's variants, the profiler,
the report's chunk cards: harness.descriptions), so the parent never imports torch. The deadline covers every
request: the baseline, each trial, the drift re-time after it and the confirm rounds. It
rebuilds a card's workload from the same spec the ncu child gets and keeps it, with the experiment's
prepared baseline and the correctness reference, until a request for another card comes, so the
trials of one card pay the set-up once. Every output is judged against the workload's float64
reference (harness.correctness), computed once per card when the baseline is measured and saved, with
the baseline's own error e_b and dtype, as trials/<card>/reference.pt; a new child loads it instead of
recomputing it, so the trials after a restart are held to the same standard. The child writes every
card it measures itself (atomically), so what was measured is on disk before the parent hears of it.

The child ignores SIGINT and runs in its own session: Ctrl-C reaches the parent only, which kills
the child. It dies with the parent (PR_SET_PDEATHSIG on Linux, else a watchdog thread). Its stdout
and stderr go to `worker.log` in the run directory (faulthandler writes a crashed child's Python
stack there). `search.worker_memory_limit_gb` caps the child's address space (RLIMIT_AS, Linux, CPU
device only, from its first CPU job on) so a runaway CPU variant fails with an allocation error instead of
taking the machine.
"""

from harness.worker.client import (
    CardSession,
    TrialWorker,
    close_worker,
    quiet_trial_failures,
    warn_unused_memory_limit,
    worker_for,
)
from harness.worker.protocol import TrialFailed, WorkerError, exit_reason, is_out_of_memory, one_line

__all__ = [
    "CardSession",
    "TrialFailed",
    "TrialWorker",
    "WorkerError",
    "close_worker",
    "exit_reason",
    "is_out_of_memory",
    "one_line",
    "quiet_trial_failures",
    "warn_unused_memory_limit",
    "worker_for",
]
