"""Which unit a kernel's duration or byte count was written in, by cross-checks the report carries itself,
calibrated on the report (harness.cards.lint corrects what these settle):

- a duration: `cycles_elapsed / dur_us` is the SM clock in MHz; the report's median clock is the
  reference, and a duration whose clock is off by a power of 1000 was written in ms (or s);
- a byte count: `(dram_read_mb + dram_write_mb) / (dur_us * dram_pct / 100)` is the DRAM peak
  bandwidth; the report's median is the reference, and the one combination of scale factors for
  read and write that lands on it (and no runner-up close to it) is the correction.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Iterable

from harness.cards.model import Card

SCALE_FACTORS = (1.0, 1e3, 1e6)
CLOCK_TOLERANCE = 2.0  # a clock within 2x of the report's median is plausible (boost vs base)
BANDWIDTH_PLAUSIBLE = 2.0  # as read, bytes within 2x of what dram_pct implies need no correction
BANDWIDTH_MATCH = 1.25  # a corrected reading must land within 25% ...
BANDWIDTH_MARGIN = 1.15  # ... and beat the runner-up by at least 15%



# A percentage field holds a share of a peak or of accesses: above the whole it is a counter artefact
# (an H200's lts__t_sector_hit_rate.pct read 101-142% on conv kernels), never a value to classify on.
PERCENT_CEILING = 100.0


def impossible_percent(field: str, value: Any) -> bool:
    """Whether `value` of the metric field `field` is a percentage above 100."""
    found = number(value)
    return field.endswith("_pct") and found is not None and found > PERCENT_CEILING


@dataclass(frozen=True)
class Calibration:
    clock_mhz: float | None
    dram_tb_s: float | None


def number(value: Any) -> float | None:
    """A numeric field's value as a float; None for null, absent or not a number (a bool is not one)."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


# ---------------------------------------------------------------------------------------------
# Calibration from the report itself


def clock_mhz(metrics: dict[str, Any]) -> float | None:
    """The SM clock a kernel's cycles and duration imply (MHz), None without both."""
    cycles, dur = number(metrics.get("cycles_elapsed")), number(metrics.get("dur_us"))
    if cycles is None or not dur:
        return None
    return cycles / dur


def implied_bandwidth(metrics: dict[str, Any], dur_us: float, read: float, write: float) -> float | None:
    """The DRAM peak (TB/s) `read` + `write` MB in `dur_us` at the kernel's dram_pct imply."""
    pct = number(metrics.get("dram_pct"))
    if not pct or not dur_us:
        return None
    return (read + write) / (dur_us * pct / 100.0)  # MB/us == TB/s


def calibrate(cards: Iterable[Card]) -> Calibration:
    """The report's own references: the median clock and the median implied DRAM peak of its kernels."""
    clocks: list[float] = []
    bandwidths: list[float] = []
    for card in cards:
        for kernel in card.kernels:
            if kernel.metrics is None:
                continue
            clock = clock_mhz(kernel.metrics)
            if clock:
                clocks.append(clock)
            read, write = number(kernel.metrics.get("dram_read_mb")), number(kernel.metrics.get("dram_write_mb"))
            dur = number(kernel.metrics.get("dur_us"))
            if read is not None and write is not None and dur:
                bw = implied_bandwidth(kernel.metrics, dur, read, write)
                if bw:
                    bandwidths.append(bw)
    return Calibration(
        clock_mhz=statistics.median(clocks) if clocks else None,
        dram_tb_s=statistics.median(bandwidths) if bandwidths else None,
    )


# ---------------------------------------------------------------------------------------------
# Per-kernel unit checks


def duration_factor(metrics: dict[str, Any], cal: Calibration) -> tuple[float | None, str]:
    """(factor, why): 1 when consistent, the unique fixing factor, or None when ambiguous/unknowable."""
    clock = clock_mhz(metrics)
    if clock is None or cal.clock_mhz is None:
        return 1.0, "no clock cross-check possible"
    fits = [f for f in SCALE_FACTORS if within(clock / f, cal.clock_mhz, CLOCK_TOLERANCE)]
    if fits == [1.0]:
        return 1.0, "clock consistent"
    if len(fits) == 1:
        return fits[0], (
            f"cycles_elapsed/dur_us = {clock:.4g} MHz against the report's {cal.clock_mhz:.0f} MHz; "
            f"x{fits[0]:g} gives {clock / fits[0]:.0f} MHz"
        )
    return None, f"cycles_elapsed/dur_us = {clock:.4g} MHz fits no single unit"


def within(value: float, reference: float, ratio: float) -> bool:
    return value > 0 and reference > 0 and 1 / ratio <= value / reference <= ratio


def byte_factors(
    metrics: dict[str, Any], dur_us: float | None, cal: Calibration
) -> tuple[tuple[float | None, float | None] | None, str]:
    """Scale factors for (read, write): a factor is None where the cross-check cannot decide."""
    read, write = number(metrics.get("dram_read_mb")), number(metrics.get("dram_write_mb"))
    if read is None or write is None or not dur_us or cal.dram_tb_s is None:
        return (1.0, 1.0), "no bandwidth cross-check possible"
    as_read = implied_bandwidth(metrics, dur_us, read, write)
    if as_read is None or (read == 0 and write == 0):
        return (1.0, 1.0), "no bandwidth cross-check possible"
    if within(as_read, cal.dram_tb_s, BANDWIDTH_PLAUSIBLE):
        return (1.0, 1.0), "bandwidth consistent"
    candidates = []
    for fr in SCALE_FACTORS if read else (1.0,):
        for fw in SCALE_FACTORS if write else (1.0,):
            if (fr, fw) == (1.0, 1.0):
                continue
            bw = implied_bandwidth(metrics, dur_us, read * fr, write * fw)
            if bw:
                candidates.append((abs(math.log(bw / cal.dram_tb_s)), (fr, fw), bw))
    candidates.sort()
    found = f"bytes imply {as_read:.4g} TB/s at dram_pct against the report's {cal.dram_tb_s:.2f} TB/s"
    if candidates and candidates[0][0] <= math.log(BANDWIDTH_MATCH):
        runner_up = candidates[1][0] if len(candidates) > 1 else math.inf
        if runner_up - candidates[0][0] >= math.log(BANDWIDTH_MARGIN):
            _, factors, bw = candidates[0]
            return factors, f"{found}; read x{factors[0]:g}, write x{factors[1]:g} gives {bw:.2f} TB/s"
        # Several readings fit: a field on which they all agree is still unambiguous.
        fitting = [c for c in candidates if c[0] <= math.log(BANDWIDTH_MATCH)]

        def agreed_on(i: int) -> float | None:
            return fitting[0][1][i] if len({c[1][i] for c in fitting}) == 1 else None

        agreed = (agreed_on(0), agreed_on(1))
        if any(f not in (None, 1.0) for f in agreed):
            said = ", ".join(f"{field} " + (f"x{f:g}" if f is not None else "undecided (the readings differ)")
                             for field, f in zip(("dram_read_mb", "dram_write_mb"), agreed))
            return agreed, f"{found}; every fitting reading agrees on {said}"
    return None, f"{found}; no unique fix"
