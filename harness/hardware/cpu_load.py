"""What other processes and the hypervisor took of this machine's CPUs over an interval (Linux's /proc).

/proc/stat's first line is every CPU's time since boot by state, in clock ticks; /proc/PID/stat gives a
process's own user and system ticks (all its threads). Between two snapshots, the CPU time of processes other
than the ones watched is the machine's busy time less theirs; the hypervisor's is the steal column. Both
are in the same tick-based accounting, so they subtract without a clock mismatch. Off Linux (no /proc) a
snapshot knows nothing and every figure is None.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Sequence

_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01
# /proc/stat's cpu line: user nice system idle iowait irq softirq steal guest guest_nice; guest time is
# already counted in user and nice.
_BUSY = (0, 1, 2, 5, 6)
_STEAL = 7


@dataclass(frozen=True)
class CpuSnapshot:
    wall_s: float  # time.monotonic()
    busy_s: float | None  # every CPU's non-idle time since boot, steal left out; None: unknown here
    steal_s: float | None
    total_s: float | None  # every CPU's time since boot, in every state
    watched_s: float | None  # the watched processes' own CPU time


@dataclass(frozen=True)
class CpuLoad:
    """Averages over one interval, in cores (1.0: one CPU busy the whole interval)."""

    seconds: float
    other_cores: float | None  # processes other than the watched ones
    steal_share: float | None  # the share of the machine's CPU time the hypervisor gave to others
    cpus: int

    def competing(self, cores_in_use: int, *, over: float = 0.5, steal_over: float = 0.1) -> bool:
        """Whether others took more than `over` of a core beyond the `cores_in_use` the watched work leaves
        free, or the hypervisor more than `steal_over` of the CPU time: a measurement then ran against them.

        The kernel counts CPU time in whole ticks, each CPU's and the watched processes' apart, so an interval's
        figure may be off by a tick per CPU and one more: that much is given to the others' side before judging
        (over a 0.1 s round on 2 CPUs, 0.3 of a core; an interval of a few ticks can show no competition)."""
        spare = max(self.cpus - cores_in_use, 0)
        slack = (self.cpus + 1) * _TICK_S / self.seconds
        return ((self.other_cores is not None and self.other_cores - slack > spare + over)
                or (self.steal_share is not None and self.steal_share > steal_over))

    def as_dict(self) -> dict[str, float | int | None]:
        return {"seconds": round(self.seconds, 3), "other_cores": _rounded(self.other_cores),
                "steal_share": _rounded(self.steal_share), "cpus": self.cpus}


def snapshot(pids: Sequence[int | None] = (None,)) -> CpuSnapshot:
    """The machine's CPU times and the watched processes' (None: this process), now."""
    wall = time.monotonic()
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
        watched = sum(_process_ticks(pid) for pid in pids)
    except (OSError, ValueError, IndexError):
        return CpuSnapshot(wall, None, None, None, None)
    busy = sum(fields[i] for i in _BUSY if i < len(fields))
    steal = fields[_STEAL] if len(fields) > _STEAL else 0
    return CpuSnapshot(wall, busy * _TICK_S, steal * _TICK_S, sum(fields[:_STEAL + 1]) * _TICK_S,
                       watched * _TICK_S)


def load_between(before: CpuSnapshot, after: CpuSnapshot) -> CpuLoad:
    """The load over the interval between two snapshots of the same processes."""
    seconds = max(after.wall_s - before.wall_s, 1e-9)
    cpus = os.cpu_count() or 1
    if None in (before.busy_s, after.busy_s, before.watched_s, after.watched_s):
        return CpuLoad(seconds, None, None, cpus)
    assert before.busy_s is not None and after.busy_s is not None  # for mypy: checked just above
    assert before.watched_s is not None and after.watched_s is not None
    other = (after.busy_s - before.busy_s) - (after.watched_s - before.watched_s)
    total = (after.total_s or 0.0) - (before.total_s or 0.0)
    steal = ((after.steal_s or 0.0) - (before.steal_s or 0.0)) / total if total > 0 else 0.0
    return CpuLoad(seconds, max(other, 0.0) / seconds, steal, cpus)


def _process_ticks(pid: int | None) -> int:
    with open(f"/proc/{'self' if pid is None else pid}/stat", encoding="ascii", errors="replace") as f:
        return process_ticks(f.read())


def process_ticks(stat: str) -> int:
    """utime + stime (every thread) from a /proc/PID/stat line, in ticks; the command name in parentheses may
    hold spaces and parentheses of its own, so the fields are counted from its last closing one."""
    after_name = stat.rsplit(")", 1)[1].split()
    return int(after_name[11]) + int(after_name[12])  # fields 14 and 15 of proc(5)


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
