"""Whether this process had to wait for a CPU over an interval, and what others took of the machine (Linux's /proc).

The direct measure of competition is the scheduler's own: /proc/self/task/TID/schedstat gives each thread's time
spent runnable but waiting for a CPU (nanoseconds; the kernel's sched_info). Over an interval, the process's
threads' waiting summed is how much of the work was held back by others (on a quiet 2-core VM a spinning thread
waited 0.002% of 0.5 s; beside one busy loop on the other core 0.07%; beside two, 19%). Beside it, for the record:
/proc/stat's first line (every CPU's time by state, in clock ticks) less this process's own ticks
(/proc/self/stat) is the CPU time other processes took, and its steal column the hypervisor's. Where schedstat is
not kept, competition is judged from those tick counts. Off Linux (no /proc) every figure is None.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01
# /proc/stat's cpu line: user nice system idle iowait irq softirq steal guest guest_nice; guest time is
# already counted in user and nice.
_BUSY = (0, 1, 2, 5, 6)
_STEAL = 7
WAITED_OVER = 0.1  # a tenth of a core's worth of the interval spent waiting for a CPU: the work met competition
STEAL_OVER = 0.1  # a tenth of the machine's CPU time given by the hypervisor to other guests


@dataclass(frozen=True)
class CpuSnapshot:
    wall_s: float  # time.monotonic()
    busy_s: float | None  # every CPU's non-idle time since boot, steal left out; None: unknown here
    steal_s: float | None
    total_s: float | None  # every CPU's time since boot, in every state
    own_s: float | None  # this process's own CPU time, in the same ticks
    waited_s: float | None  # this process's threads' time runnable but waiting for a CPU; None: not kept


@dataclass(frozen=True)
class CpuLoad:
    """Averages over one interval, in cores (1.0: one CPU's worth of the whole interval)."""

    seconds: float
    other_cores: float | None  # CPU time of processes other than this one
    steal_share: float | None  # the share of the machine's CPU time the hypervisor gave to others
    cpus: int
    waited_cores: float | None = None  # this process's threads' waiting for a CPU

    def competing(self, cores_in_use: int, *, over: float = 0.5) -> bool:
        """Whether the measured work met competition: its threads waited more than `WAITED_OVER` of a core's worth
        of the interval for a CPU, or the hypervisor took more than `STEAL_OVER` of the CPU time.

        Where the kernel keeps no wait times, others taking more than `over` of a core beyond the `cores_in_use`
        the work leaves free; the kernel counts that CPU time in whole ticks, each CPU's and this process's apart,
        so a tick per CPU and one more are given to the others' side first (over a 0.1 s round on 2 CPUs, 0.3 of
        a core; an interval of a few ticks shows no competition)."""
        if self.steal_share is not None and self.steal_share > STEAL_OVER:
            return True
        if self.waited_cores is not None:
            return self.waited_cores > WAITED_OVER
        spare = max(self.cpus - cores_in_use, 0)
        slack = (self.cpus + 1) * _TICK_S / self.seconds
        return self.other_cores is not None and self.other_cores - slack > spare + over

    def as_dict(self) -> dict[str, float | int | None]:
        return {"seconds": round(self.seconds, 3), "waited_cores": _rounded(self.waited_cores),
                "other_cores": _rounded(self.other_cores), "steal_share": _rounded(self.steal_share),
                "cpus": self.cpus}


def snapshot() -> CpuSnapshot:
    """The machine's CPU times and this process's, now."""
    wall = time.monotonic()
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
        with open("/proc/self/stat", encoding="ascii", errors="replace") as f:
            own = process_ticks(f.read()) * _TICK_S
    except (OSError, ValueError, IndexError):
        return CpuSnapshot(wall, None, None, None, None, None)
    busy = sum(fields[i] for i in _BUSY if i < len(fields))
    steal = fields[_STEAL] if len(fields) > _STEAL else 0
    return CpuSnapshot(wall, busy * _TICK_S, steal * _TICK_S, sum(fields[:_STEAL + 1]) * _TICK_S, own, _waited_s())


def load_between(before: CpuSnapshot, after: CpuSnapshot) -> CpuLoad:
    """The load over the interval between two snapshots."""
    seconds = max(after.wall_s - before.wall_s, 1e-9)
    cpus = os.cpu_count() or 1
    waited = (max(after.waited_s - before.waited_s, 0.0) / seconds
              if after.waited_s is not None and before.waited_s is not None else None)
    if None in (before.busy_s, after.busy_s, before.own_s, after.own_s):
        return CpuLoad(seconds, None, None, cpus, waited)
    assert before.busy_s is not None and after.busy_s is not None  # for mypy: checked just above
    assert before.own_s is not None and after.own_s is not None
    other = (after.busy_s - before.busy_s) - (after.own_s - before.own_s)
    total = (after.total_s or 0.0) - (before.total_s or 0.0)
    steal = ((after.steal_s or 0.0) - (before.steal_s or 0.0)) / total if total > 0 else 0.0
    return CpuLoad(seconds, max(other, 0.0) / seconds, steal, cpus, waited)


def _waited_s() -> float | None:
    """This process's threads' run-queue waiting since they started (a thread gone since is not counted)."""
    total = 0
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return None
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/schedstat", encoding="ascii") as f:
                total += int(f.read().split()[1])
        except FileNotFoundError:  # the thread ended meanwhile
            continue
        except (OSError, ValueError, IndexError):  # the kernel keeps no sched_info
            return None
    return total / 1e9


def process_ticks(stat: str) -> int:
    """utime + stime (every thread) from a /proc/PID/stat line, in ticks; the command name in parentheses may
    hold spaces and parentheses of its own, so the fields are counted from its last closing one."""
    after_name = stat.rsplit(")", 1)[1].split()
    return int(after_name[11]) + int(after_name[12])  # fields 14 and 15 of proc(5)


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
