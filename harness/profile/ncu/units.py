"""Explicit conversion of an ncu value, with the unit ncu printed for it, into a report unit.

ncu scales each value's unit on its own unless told `--print-units base` ("21.06 msecond" next to
"406.24 usecond"), and spells units differently between versions and outputs ("nsecond" in an old
raw page, "ns" in the details page and in the Python report module). Every spelling accepted here
was seen in real ncu output or is a decimal/binary prefix of one; anything else is an error, never
a guess. Byte prefixes are decimal as ncu prints them (1 Kbyte = 1000 bytes); KiB/MiB/GiB are 1024.
"""

from __future__ import annotations

from fractions import Fraction

from harness.errors import HarnessError


class NcuUnitError(HarnessError):
    """A unit this module does not know for the quantity asked for."""


_TIME_IN_NS: dict[str, Fraction] = {
    "nsecond": Fraction(1),
    "ns": Fraction(1),
    "usecond": Fraction(10**3),
    "us": Fraction(10**3),
    "msecond": Fraction(10**6),
    "ms": Fraction(10**6),
    "second": Fraction(10**9),
    "s": Fraction(10**9),
}

_BYTES: dict[str, Fraction] = {
    "byte": Fraction(1),
    "Kbyte": Fraction(10**3),
    "Mbyte": Fraction(10**6),
    "Gbyte": Fraction(10**9),
    "Tbyte": Fraction(10**12),
    "B": Fraction(1),
    "KB": Fraction(10**3),
    "MB": Fraction(10**6),
    "GB": Fraction(10**9),
    "TB": Fraction(10**12),
    "KiB": Fraction(2**10),
    "MiB": Fraction(2**20),
    "GiB": Fraction(2**30),
}

_CYCLES: dict[str, Fraction] = {
    "cycle": Fraction(1),
    "Kcycle": Fraction(10**3),
    "Mcycle": Fraction(10**6),
    "Gcycle": Fraction(10**9),
}


def _per(
    table: dict[str, Fraction], target: Fraction, suffixes: tuple[str, ...] = ("",)
) -> dict[str, Fraction]:
    return {unit + suffix: factor / target for unit, factor in table.items() for suffix in suffixes}


# Report unit (harness.cards.fields.METRIC_UNITS, plus the units of the counter-experiment metrics)
# -> {ncu unit: factor that turns a value in that unit into the report unit}.
ACCEPTED: dict[str, dict[str, Fraction]] = {
    "us": _per(_TIME_IN_NS, Fraction(10**3)),
    "%": {"%": Fraction(1)},
    "waves": {"": Fraction(1)},  # launch__waves_per_multiprocessor carries no unit
    "blocks": {"": Fraction(1)},  # launch__grid_size carries no unit
    "threads": {"": Fraction(1)},  # launch__block_size carries no unit
    "registers/thread": {"register/thread": Fraction(1)},
    # Shared memory per block is printed as "byte/block", "Kbyte/block", ...
    "KB": _per(_BYTES, Fraction(10**3), ("", "/block")),
    "B": _per(_BYTES, Fraction(1), ("", "/block")),
    "cycles": dict(_CYCLES),
    "MB": _per(_BYTES, Fraction(10**6)),
    "blocks/SM": {"block": Fraction(1)},
    # Warps stalled per issue-active cycle (the `.ratio` stall metrics): no unit on the raw page, "inst"
    # from the Python report module, and "ratio" as newer ncu versions print a `.ratio` metric's unit.
    "ratio": {"": Fraction(1), "inst": Fraction(1), "ratio": Fraction(1)},
}


def to_report_unit(value: float, unit: str, target: str, what: str = "value") -> float:
    """`value` in ncu's `unit`, expressed in the report unit `target` (e.g. "nsecond" -> "us")."""
    if target not in ACCEPTED:
        raise NcuUnitError(f"{what}: no conversion into report unit {target!r}")
    factor = ACCEPTED[target].get(unit.strip())
    if factor is None:
        known = ", ".join(repr(u) for u in ACCEPTED[target])
        raise NcuUnitError(
            f"{what}: ncu unit {unit!r} is not known for a quantity in {target} (known: {known}); "
            "re-export with `--print-units base` or add the unit to harness/profile/ncu/units.py"
        )
    return value * factor.numerator / factor.denominator
