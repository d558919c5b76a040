"""The report card's own check, judged on a before/after pair.

Each report card's `counter_experiment` ends in the check it asks for ("compare effective vs
executed FLOPs", "compare waves and duration", ...). The experiment's check (checks.CHECKS) answers
what the experiment set out to test; this module answers what the card itself asked, with the
card's own quantity, so that a faster time is never read as the card's hypothesis confirmed when
the quantity it names was not measured, or was only estimated.

Verdicts: "yes" when the named quantity moved the way the card expects and the time was confirmed
FASTER; "no" when either is known not to have ("SAME" or "SLOWER" time, or the quantity did not
move); "not measurable" when a side is unknown (INCONCLUSIVE and UNCONFIRMED times are unknown,
not refuted); "not measurable (estimated)" when the quantity exists only as an estimate on a
side (a CPU roofline's DRAM bytes are arithmetic on tensor sizes, not traffic), numbers still shown.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Callable

from harness.cards.labels import class_source, dominant_kernel, is_estimated, is_report_card
from harness.cards.measures import (
    NO,
    NOT_MEASURABLE,
    YES,
    calls_per_invocation,
    kernel_value,
    stall_verdict,
    sum_metric,
)
from harness.cards.model import Card
from harness.hardware.gpu_peaks import lookup
from harness.hardware.ncu_metrics import CACHE_BYTES_METRICS
from harness.hardware.occupancy import occupancy, waves

NOT_MEASURABLE_ESTIMATED = "not measurable (estimated)"

# The check texts the report's counter_experiments end in, matched whole (case and spacing aside).
CHECK_PATTERNS: dict[str, re.Pattern[str]] = {
    "effective_vs_executed": re.compile(r"compare effective vs\.? executed flops", re.I),
    "waves_and_duration": re.compile(r"compare waves and duration", re.I),
    "lts_bytes": re.compile(r"compare lts bytes", re.I),
    "bytes_and_time_fall": re.compile(r"check bytes and time fall together", re.I),
    "stall_breakdown": re.compile(r"collect stall reasons\b.* and l1tex/lts bytes", re.I),
}

# Executed FLOPs from ncu counters, as raw metric names in a kernel's extra["ncu_counters"]:
# FP32 SASS instructions per thread (an FFMA is two FLOPs) and the tensor path's math ops (taken as
# one per FLOP). No metric set of the ncu backend (METRIC_SETS) requests them yet; before trusting
# the tensor counters on sm_90, check them against a GEMM of known FLOPs on the chip.
SASS_FLOP_WEIGHTS: dict[str, float] = {
    "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum": 2.0,
    "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum": 1.0,
    "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum": 1.0,
}
# sm__ops_path_tensor_src_<types>_dst_<type>.sum; its _sparsity_on/_off halves are not counted twice.
TENSOR_OPS = re.compile(r"^sm__ops_path_tensor_src_[a-z0-9]+(?:_[a-z0-9]+)*_dst_[a-z0-9]+\.sum$")

# Waves computed from a variant's launch are for the report's GPU.
REPORT_GPU = lookup("NVIDIA H200")
# Launch facts as experiments record them (Prepared.facts): the grid under these names, in order.
GRID_FACTS = ("grid", "tiles", "programs")


@dataclass(frozen=True)
class CardCheck:
    text: str  # the report card's own check text (from its counter_experiment), verbatim
    name: str | None  # the judge it maps to; None when the text maps to none
    verdict: str  # yes, no, not measurable, not measurable (estimated)
    detail: str  # the numbers


def card_check_text(report_card: Card) -> str | None:
    """The check part of counter_experiment: after its last "; ", or all of it when it has none."""
    text = report_card.counter_experiment
    if not text or not text.strip():
        return None
    return text.rsplit(";", 1)[-1].strip()


def check_name(text: str | None) -> str | None:
    """The judge a check text maps to, or None."""
    if text is None:
        return None
    plain = " ".join(text.split())
    return next((name for name, pattern in CHECK_PATTERNS.items() if pattern.fullmatch(plain)), None)


def judge_card_check(report_card: Card, before: Card, after: Card, time_verdict: str | None) -> CardCheck:
    """The report card's own check on before/after; `time_verdict` is the pair's timing verdict."""
    text = card_check_text(report_card)
    name = check_name(text)
    if name is None:
        why = "the card proposes no check" if text is None else "no judge for this check text"
        return CardCheck(text or "", None, NOT_MEASURABLE, why)
    verdict, detail = JUDGES[name](before, after, time_verdict)
    return CardCheck(text or "", name, verdict, detail)


# ---------------------------------------------------------------------------------------------
# Shared pieces


def time_fell(time_verdict: str | None) -> bool | None:
    """Confirmed FASTER: True; SAME or SLOWER: False; no verdict, INCONCLUSIVE, UNCONFIRMED: unknown."""
    if time_verdict == "FASTER":
        return True
    return False if time_verdict in ("SAME", "SLOWER") else None


def _both(quantity: bool | None, time_fell: bool | None) -> str:
    """yes when both hold, no when either is known not to, else not measurable."""
    if quantity is False or time_fell is False:
        return NO
    return YES if quantity and time_fell else NOT_MEASURABLE


def _num(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _estimated_sides(before: Card, after: Card, names: tuple[str, ...]) -> list[str]:
    """"before"/"after" for each side whose value of these metrics is an estimate on some kernel."""
    return [side for side, card in (("before", before), ("after", after))
            if any(is_estimated(k, n) and k.metric(n) is not None for k in card.kernels for n in names)]


def _estimate_note(sides: list[str], before: Card, after: Card) -> str:
    cards = {"before": before, "after": after}
    return "; ".join(f"the {side} value is a {class_source(cards[side])}, not a counter reading"
                     for side in sides)


# ---------------------------------------------------------------------------------------------
# Judges: (before, after, time verdict) -> (verdict, detail)


def _bytes_and_time_fall(before: Card, after: Card, time_verdict: str | None) -> tuple[str, str]:
    names = ("dram_read_mb", "dram_write_mb")
    b, a = sum_metric(before, *names), sum_metric(after, *names)
    numbers = f"DRAM read+write per call {_num(b)} -> {_num(a)} MB, time {time_verdict or 'n/a'}"
    estimated = _estimated_sides(before, after, names)
    if estimated:
        return NOT_MEASURABLE_ESTIMATED, f"{numbers}; {_estimate_note(estimated, before, after)}"
    if b is None or a is None:
        return NOT_MEASURABLE, f"{numbers}; DRAM bytes not collected on the side marked n/a"
    fell = a < b
    return _both(fell, time_fell(time_verdict)), f"{numbers} (bytes {'fell' if fell else 'did not fall'})"


def _lts_bytes(before: Card, after: Card, time_verdict: str | None) -> tuple[str, str]:
    b, a = sum_metric(before, "lts_mb"), sum_metric(after, "lts_mb")
    numbers = f"lts bytes per call {_num(b)} -> {_num(a)} MB, time {time_verdict or 'n/a'}"
    estimated = _estimated_sides(before, after, ("lts_mb",))
    if estimated:
        return NOT_MEASURABLE_ESTIMATED, f"{numbers}; {_estimate_note(estimated, before, after)}"
    if b is None or a is None:
        return NOT_MEASURABLE, (f"{numbers}; lts bytes not collected on the side marked n/a (ncu "
                                f"{CACHE_BYTES_METRICS['lts_mb']}, metric set 'bytes')")
    fell = a < b
    return _both(fell, time_fell(time_verdict)), f"{numbers} (lts bytes {'fell' if fell else 'did not fall'})"


def launch_waves(variant: Any) -> tuple[float | None, str]:
    """Waves of a variant's recorded launch on the report's GPU, or None with what is missing.

    Experiments record the grid as "grid", "tiles" (one Triton program per output tile) or
    "programs"; threads as num_warps (top level or in "tile") x 32, else "block_size"; registers
    as "regs_per_thread" and dynamic shared memory as "smem_bytes_compiled" (Triton's compiled
    kernel, known on a GPU only). All four are needed: the occupancy follows from the last three.
    """
    facts = variant if isinstance(variant, dict) else {}
    grid = next((facts[k] for k in GRID_FACTS if isinstance(facts.get(k), int)), None)
    tile_facts = facts.get("tile")
    tile = tile_facts if isinstance(tile_facts, dict) else {}
    warps = facts.get("num_warps") or tile.get("num_warps")
    threads = 32 * warps if isinstance(warps, int) else facts.get("block_size")
    regs, smem = facts.get("regs_per_thread"), facts.get("smem_bytes_compiled")
    found = {"grid": grid, "block": threads, "registers per thread": regs, "shared memory": smem}
    missing = [name for name, value in found.items() if not isinstance(value, int)]
    if missing:
        return None, f"the variant's launch facts lack {', '.join(missing)}"
    assert isinstance(grid, int) and isinstance(threads, int) and isinstance(regs, int) and isinstance(smem, int)
    limits = REPORT_GPU.limits
    assert limits is not None  # the H200's entry has its SM limits
    blocks = occupancy(limits, threads, regs, smem_dynamic_b=smem).blocks_per_sm
    value = waves(grid, blocks, limits.sm_count)
    where = f"{REPORT_GPU.key}, {limits.sm_count} SMs"
    if value is None:
        return None, f"a block of the variant's launch cannot be resident on the {where}"
    return value, (f"computed for the {where}: grid {grid} / ({blocks} blocks per SM x {limits.sm_count})")


def _waves_of(card: Card) -> tuple[float | None, str, bool]:
    """(waves of the dominant kernel, where they came from, whether estimated)."""
    top = dominant_kernel(card)
    value = kernel_value(top, "waves") if top is not None else None
    if top is not None and value is not None:
        return value, "dominant kernel's waves", is_estimated(top, "waves")
    if not isinstance(card.extra.get("variant"), dict):
        return None, "no waves on the dominant kernel" if top else "the dominant kernel is not listed", False
    computed, basis = launch_waves(card.extra["variant"])
    return computed, basis, False


def tail_waste(value: float) -> float:
    """Share of the last wave's SM slots left idle: 1 - waves / ceil(waves)."""
    return 1.0 - value / math.ceil(value)


def _waves_and_duration(before: Card, after: Card, time_verdict: str | None) -> tuple[str, str]:
    (wb, basis_b, est_b), (wa, basis_a, est_a) = _waves_of(before), _waves_of(after)
    waste_b = tail_waste(wb) if wb else None
    waste_a = tail_waste(wa) if wa else None
    numbers = (f"waves {_num(wb, 2)} -> {_num(wa, 2)} (tail waste {_pct(waste_b)} -> {_pct(waste_a)}), "
               f"time {time_verdict or 'n/a'}; before: {basis_b}; after: {basis_a}")
    estimated = [side for side, flag in (("before", est_b), ("after", est_a)) if flag]
    if estimated:
        return NOT_MEASURABLE_ESTIMATED, f"{numbers}; {_estimate_note(estimated, before, after)}"
    if waste_b is None or waste_a is None:
        return NOT_MEASURABLE, numbers
    return _both(waste_a < waste_b, time_fell(time_verdict)), numbers


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0%}"


def executed_over_nominal(card: Card) -> tuple[float | None, str]:
    """Executed / nominal FLOPs per call: ncu instruction counters, else the variant's launch arithmetic."""
    nominal = card.nominal_mac_flops
    counted = _counted_flops(card)
    if counted is not None:
        if not nominal:
            return None, "ncu counters, but no nominal FLOPs to divide by"
        return counted / calls_per_invocation(card) / nominal, "ncu instruction counters"
    variant = card.extra.get("variant")
    ratio = variant.get("executed_over_nominal") if isinstance(variant, dict) else None
    if isinstance(ratio, (int, float)):
        return float(ratio), "the variant's launch configuration"
    return None, "no executed FLOPs (ncu instruction counters not collected; the variant records none)"


def _counted_flops(card: Card) -> float | None:
    """FLOPs the kernels executed by their counters, summed over the op's kernels; None if none counted."""
    total, seen = 0.0, False
    for kernel in card.kernels:
        counters = kernel.extra.get("ncu_counters")
        for name, value in (counters.items() if isinstance(counters, dict) else ()):
            weight = SASS_FLOP_WEIGHTS.get(name, 1.0 if TENSOR_OPS.match(name) else None)
            if weight is not None and isinstance(value, (int, float)):
                total, seen = total + weight * float(value), True
    return total if seen else None


def is_plain_op(card: Card) -> bool:
    """The op as the report ran it: a report card, or a run's baseline."""
    label = card.extra.get("harness")
    return is_report_card(card) or (isinstance(label, dict) and label.get("role") == "baseline")


def _effective_vs_executed(before: Card, after: Card, time_verdict: str | None) -> tuple[str, str]:
    (rb, basis_b), (ra, basis_a) = executed_over_nominal(before), executed_over_nominal(after)
    tail = f"time {time_verdict or 'n/a'}"
    if ra is not None and rb is None and is_plain_op(before) and ra <= 1.0 + 1e-9:
        # Decision: a dense kernel executes at least its op's nominal FLOPs (no Winograd, FFT or
        # Strassen in these ops), so a variant with no padding cannot be above an unknown plain op.
        detail = (f"executed/nominal unknown before (the plain op: taken as >= 1.000) -> {ra:.3f} after "
                  f"({basis_a}), not higher; {tail}")
        return _both(True, time_fell(time_verdict)), detail
    if rb is None or ra is None:
        return NOT_MEASURABLE, (f"executed/nominal {_num(rb)} -> {_num(ra)}; before: {basis_b}; "
                                f"after: {basis_a}; {tail}")
    not_higher = ra <= rb * (1.0 + 1e-9)
    detail = (f"executed/nominal {rb:.3f} ({basis_b}) -> {ra:.3f} ({basis_a}), "
              f"{'not higher' if not_higher else 'higher: the time bought extra executed work'}; {tail}")
    return _both(not_higher, time_fell(time_verdict)), detail


def _stall_breakdown(before: Card, after: Card, time_verdict: str | None) -> tuple[str, str]:
    verdict, detail = stall_verdict(after)
    top = dominant_kernel(after)
    moved = {name: kernel_value(top, name) if top is not None else None for name in CACHE_BYTES_METRICS}
    known = ", ".join(f"{name} {value:.3f}" for name, value in moved.items() if value is not None)
    return verdict, f"{detail}; dominant kernel bytes: {known or 'l1tex/lts bytes not collected'}"


JUDGES: dict[str, Callable[[Card, Card, str | None], tuple[str, str]]] = {
    "effective_vs_executed": _effective_vs_executed,
    "waves_and_duration": _waves_and_duration,
    "lts_bytes": _lts_bytes,
    "bytes_and_time_fall": _bytes_and_time_fall,
    "stall_breakdown": _stall_breakdown,
}
