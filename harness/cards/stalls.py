"""Warp stalls as a card reads them: the shares of a kernel's stall reasons, the dominant one and what it means.

ncu's `smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio` (warps stalled per issue-active
cycle, kept as `stall_<reason>` under a kernel's `ncu_counters`) break the cycles a warp waits down by
reason. `selected` is the issue cycle itself and `not_selected` an eligible warp that lost the issue slot
to another: neither is a stall, so both are left out of the shares. The rules name the dominant stall of
a kernel that carries them (harness.cards.rules), and the stall_breakdown experiment refines a card by it.
"""

from __future__ import annotations

from typing import Any

from harness.cards.model import Kernel

STALL_PREFIX = "stall_"

# What each warp-state reason of the Nsight Compute profiling guide says about the kernel.
STALL_MEANING: dict[str, str] = {
    "long_scoreboard": "memory latency: waiting on L1TEX results (global, local, texture loads)",
    "lg_throttle": "memory instruction throughput: the local/global load-store queue is full",
    "tex_throttle": "texture/L1TEX queue full",
    "drain": "waiting for memory writes to drain at exit",
    "membar": "memory barriers",
    "mio_throttle": "shared memory / MIO instruction queue full",
    "short_scoreboard": "shared memory or special-function latency (MIO data dependency)",
    "math_pipe_throttle": "a math pipe is oversubscribed (compute-bound on that pipe)",
    "wait": "fixed-latency dependencies: too little instruction-level parallelism",
    "dispatch_stall": "dispatch pipeline interlocks",
    "barrier": "synchronization: warps wait at a CTA barrier",
    "no_instruction": "instruction fetch: instruction cache misses or branches",
    "branch_resolving": "branch target resolution",
    "imc_miss": "immediate constant cache misses",
    "sleeping": "warps sleeping (nanosleep)",
    "misc": "miscellaneous",
}
NOT_A_STALL = ("selected", "not_selected")


def stall_ratios(kernel: Kernel) -> dict[str, float]:
    """Stall reason -> warps stalled per issue-active cycle, the reasons that are stalls only."""
    counters = kernel.extra.get("ncu_counters") or {}
    return {
        name[len(STALL_PREFIX):]: float(value)
        for name, value in counters.items()
        if name.startswith(STALL_PREFIX) and isinstance(value, (int, float)) and not isinstance(value, bool)
        and name[len(STALL_PREFIX):] not in NOT_A_STALL
    }


def stall_shares(kernel: Kernel) -> dict[str, float]:
    """Stall reason -> share of the stall cycles (the ratios normalized), largest first."""
    stalls = stall_ratios(kernel)
    total = sum(stalls.values())
    if total <= 0:
        return {}
    return {reason: value / total for reason, value in sorted(stalls.items(), key=lambda kv: -kv[1])}


def dominant_stall(kernel: Kernel) -> dict[str, Any] | None:
    """The kernel's largest stall reason {reason, ratio, share, meaning}; None without stall counters."""
    shares = stall_shares(kernel)
    if not shares:
        return None
    reason, share = next(iter(shares.items()))
    return {"reason": reason, "ratio": stall_ratios(kernel)[reason], "share": round(share, 3),
            "meaning": STALL_MEANING.get(reason, "no description for this reason")}


def stall_phrase(stall: dict[str, Any]) -> str:
    """'barrier (41% of the stall cycles: synchronization: warps wait at a CTA barrier)'."""
    return f"{stall['reason']} ({stall['share']:.0%} of the stall cycles: {stall['meaning']})"
