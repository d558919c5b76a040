"""Parse ncu's CSV text (raw page or details page) into per-kernel records, and read report fields.

Both pages may sit inside other text: ncu's `==PROF==`/`==WARNING==`/`==ERROR==` lines and the
profiled program's own output. ncu quotes every CSV field, so a table line starts with `"`; the
table starts at the header line whose first field is "ID".

- raw page (`--csv --page raw`): one row per kernel, metric names as columns, a units row second,
  instanced values joined by "; ".
- details page (`--csv`, the default page): one row per kernel and metric, with "Section Name",
  "Metric Name" (a display label such as "Duration"), "Metric Unit" and "Metric Value".

Values keep ncu's text until a field is read: thousands separators are removed from numbers, and
anything that is not a single number (instanced values, "n/a", enum names) stays a string. A unit
this module does not know is never guessed: given a list for notes, the field stays None and the
note says which unit (one odd unit must not cost a trial its other fields); without one it raises.
A value ncu recorded as NaN (a metric of a kernel it failed to profile) is no number either: its field
stays None, and the note says so.

The details page also carries ncu's rule results, as rows with a "Rule Name" and no metric; they are
kept on the record (harness.profile.ncu.rule_results).
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass, field
from typing import Any, Iterable

from harness.cards.fields import METRIC_UNITS
from harness.cards.units import impossible_percent
from harness.errors import HarnessError
from harness.hardware.ncu_metrics import CACHE_BYTES_METRICS
from harness.profile.ncu.metrics import FIELD_SOURCES, STALL_METRIC
from harness.profile.ncu.rule_results import ERROR, from_details_row
from harness.profile.ncu.units import NcuUnitError, to_report_unit

RAW = "raw"
DETAILS = "details"
REPORT = "report"  # a binary .ncu-rep read through the ncu_report module

NCU_NOTES = "ncu_notes"  # a kernel's extra: what the parser could not read (a field left null, and why)
DEFAULT_NVTX_DOMAIN = "<default domain>"
_NVTX_RANGE_FIELD = "Push/Pop_Range"
_NVTX_START_END_FIELD = "Start/Stop_Range"  # process-wide ranges: kept as launch info, not grouped on
_DETAILS_COLUMNS = ("Section Name", "Metric Name", "Metric Unit", "Metric Value")
_MISSING = frozenset({"", "n/a"})
# Columns that describe the launch rather than measure it (the raw page's other columns are metrics,
# some without the "unit__counter" form in old ncu versions: "inst_executed").
_LAUNCH_COLUMNS = frozenset(
    {
        "Process ID",
        "Process Name",
        "Host Name",
        "Kernel Time",
        "Context",
        "Stream",
        "Block Size",
        "Grid Size",
        "Device",
        "CC",
    }
)
_NUMBER = re.compile(r"^[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][+-]?\d+)?$")

Value = float | str


class NcuParseError(HarnessError):
    """Text that is not an ncu CSV table, or a table this parser cannot read safely."""


@dataclass(frozen=True)
class NcuKernelRecord:
    id: int
    name: str
    nvtx_range: str | None  # the push/pop range stack, outermost first, joined by "/"
    values: dict[str, tuple[Value, str]]  # metric name (or details-page label) -> (value, ncu unit)
    source_format: str  # RAW, DETAILS or REPORT
    attributes: dict[str, str] = field(default_factory=dict)  # Process ID, Device, CC, ...
    rules: list[dict[str, Any]] = field(default_factory=list)  # ncu's rule results (rule_results' shape)
    rule_errors: list[str] = field(default_factory=list)  # the messages of the rules ncu could not evaluate

    def value(self, *keys: str) -> tuple[str, Value, str] | None:
        """The first of `keys` this kernel carries, with its value and unit."""
        for key in keys:
            if key in self.values:
                value, unit = self.values[key]
                return key, value, unit
        return None

    def unread(self) -> list[str]:
        """The metrics ncu recorded without a value (NaN): what it failed to collect for this kernel."""
        return [key for key, (value, _) in self.values.items() if is_nan(value)]


def is_nan(value: Value) -> bool:
    """ncu's "no value": a float NaN from the report module, "nan" on a CSV page."""
    return value.strip().lower().lstrip("+-") == "nan" if isinstance(value, str) else math.isnan(value)


def nvtx_path(ranges: Iterable[tuple[str, str]]) -> str | None:
    """Join (domain, range) pairs, outermost first, as "outer/inner"; other domains as "domain@range"."""
    names = [rng if domain == DEFAULT_NVTX_DOMAIN else f"{domain}@{rng}" for domain, rng in ranges]
    return "/".join(names) if names else None


def parse_value(cell: str) -> Value:
    """A number (thousands separators removed) when the cell holds exactly one, else the text."""
    text = cell.strip()
    if _NUMBER.match(text):
        return float(text.replace(",", ""))
    return text


def detect_format(text: str) -> str:
    """RAW or DETAILS, from the header of the first ncu CSV table in `text`."""
    header, _ = _table(text)
    return DETAILS if all(column in header for column in _DETAILS_COLUMNS) else RAW


def parse_text(text: str) -> list[NcuKernelRecord]:
    """Every kernel of the first ncu CSV table in `text` (either page), in ncu's order."""
    header, rows = _table(text)
    if all(column in header for column in _DETAILS_COLUMNS):
        return _parse_details(header, rows)
    return _parse_raw(header, rows)


def report_metrics(record: NcuKernelRecord, notes: list[str] | None = None) -> dict[str, float | None]:
    """The report's metric fields in report units, as the report defines them; a field this kernel does
    not carry is None.

    A value ncu gave over the SM's active cycles (FieldSource.active_based) is converted to the
    report's elapsed cycles, and a percentage above 100 is None: each with a line in `notes` where given.
    `notes`: also where a field whose unit is unknown is named (the field is then None); None: such a
    unit raises NcuUnitError."""
    out: dict[str, float | None] = {}
    read_from: dict[str, str] = {}
    for name, source in FIELD_SOURCES.items():
        keys = source.names() + ((source.display,) if source.display else ())
        found = record.value(*keys)
        out[name] = _read(record, found, METRIC_UNITS[name], notes, name)
        if found is not None:
            read_from[name] = found[0]
    said = notes if notes is not None else []
    _to_elapsed(out, read_from, said)
    for name, value in out.items():
        if impossible_percent(name, value):
            said.append(f"{name} left null: ncu's {read_from[name]} read {value:.4g}%, above 100%")
            out[name] = None
    return out


def _to_elapsed(out: dict[str, float | None], read_from: dict[str, str], notes: list[str]) -> None:
    """Active-based readings x sm_cycles_active / cycles_elapsed, the report's elapsed basis."""
    active, elapsed = out.get("sm_cycles_active"), out.get("cycles_elapsed")
    for name, source in FIELD_SOURCES.items():
        value, key = out[name], read_from.get(name)
        if value is None or key not in source.active_based:
            continue
        if active is None or not elapsed:
            out[name] = None
            notes.append(f"{name} left null: ncu gave {key} (over active cycles) and no sm_cycles_active and "
                         "cycles_elapsed to convert it to the report's elapsed basis")
            continue
        out[name] = value * active / elapsed
        notes.append(f"{name}: ncu gave {key} {value:.4g}%; x sm_cycles_active/cycles_elapsed "
                     f"{active / elapsed:.4f} = {out[name]:.4g}%, over elapsed cycles as the report's")


def counter_metrics(record: NcuKernelRecord, notes: list[str] | None = None) -> dict[str, float]:
    """What the unresolved counter-experiment reads, when collected: "stall_<reason>" (warps stalled
    per issue-active cycle, see metrics.STALL_METRIC) and "l1tex_mb"/"lts_mb" (bytes, in MB).
    `notes` as for report_metrics: a counter in an unknown unit is left out, and named there."""
    out: dict[str, float] = {}
    for key in record.values:
        match = STALL_METRIC.match(key)
        if match:
            name = f"stall_{match.group('reason')}"
            stall = _read(record, record.value(key), "ratio", notes, name)
            if stall is not None:
                out[name] = stall
    for name, metric in CACHE_BYTES_METRICS.items():
        moved = _read(record, record.value(metric), "MB", notes, name)
        if moved is not None:
            out[name] = moved
    return out


def _read(
    record: NcuKernelRecord,
    found: tuple[str, Value, str] | None,
    target: str,
    notes: list[str] | None = None,
    field_name: str = "",
) -> float | None:
    if found is None:
        return None
    key, value, unit = found
    what = f"kernel {record.id} ({record.name[:80]}) {key}"
    if is_nan(value):
        if notes is not None:
            notes.append(f"{field_name or key} left null: ncu recorded no value (NaN) for {key}")
        return None
    if isinstance(value, str):
        if value.strip().lower() in _MISSING:
            return None
        raise NcuParseError(f"{what}: value {value!r} is not a single number")
    try:
        return to_report_unit(value, unit, target, what)
    except NcuUnitError as exc:
        if notes is None:
            raise
        notes.append(f"{field_name or key} left null: {exc}")
        return None


# ---------------------------------------------------------------------------------------------
# Tables


def _table(text: str) -> tuple[list[str], list[list[str]]]:
    lines = text.lstrip("\ufeff").splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID",')), None)
    if start is None:
        raise NcuParseError('no ncu CSV table (no header line starting with "ID")')
    # Quoted lines only: the program's output and ncu's ==PROF== lines may follow the table too.
    rows = list(csv.reader(line for line in lines[start:] if line.startswith('"')))
    header = rows[0]
    if len(set(header)) != len(header):
        raise NcuParseError("the ncu CSV header names a column twice")
    # Several processes may each print the header again; keep one.
    return header, [row for row in rows[1:] if row != header]


def _column(header: list[str], name: str) -> int:
    try:
        return header.index(name)
    except ValueError:
        raise NcuParseError(f"the ncu CSV table has no {name!r} column") from None


def _kernel_id(cell: str, line: int) -> int:
    try:
        return int(cell)
    except ValueError:
        raise NcuParseError(f"table row {line}: ID {cell!r} is not a kernel number") from None


def _nvtx_columns(header: list[str]) -> list[int]:
    return [i for i, name in enumerate(header) if _NVTX_RANGE_FIELD in name]


def _nvtx_range(header_name: str, cell: str) -> str | None:
    """The range stack of one NVTX column cell, e.g. `4242  "<default domain>:step:none:..."`.

    The header spells the layout of each quoted entry ("thread Domain:Push/Pop_Range:PL_Type:
    ...:Msg"); the fields after the range name are split off from the right, so a range name may
    itself contain ":".
    """
    layout = header_name.split(" ", 1)[-1].split(":")
    if _NVTX_RANGE_FIELD not in layout:
        raise NcuParseError(f"NVTX column {header_name!r} has no {_NVTX_RANGE_FIELD} field")
    trailing = len(layout) - layout.index(_NVTX_RANGE_FIELD) - 1
    ranges: list[tuple[str, str]] = []
    for entry in re.findall(r'"([^"]*)"', cell):
        head = entry.rsplit(":", trailing)[0]
        domain, sep, rng = head.partition(":")
        if not sep or not rng:
            raise NcuParseError(f"NVTX entry {entry!r} does not match the column layout {header_name!r}")
        ranges.append((domain, rng))
    return nvtx_path(ranges)


def _record_nvtx(header: list[str], row: list[str], columns: list[int]) -> str | None:
    # Real outputs have at most one push/pop column; should a version print more, keep them all.
    paths = [path for i in columns if (path := _nvtx_range(header[i], row[i])) is not None]
    return ";".join(paths) if paths else None


def _parse_raw(header: list[str], rows: list[list[str]]) -> list[NcuKernelRecord]:
    if not rows or rows[0][:1] != [""]:
        raise NcuParseError("raw-page table without its units row (second row, empty ID)")
    units, data = rows[0], [row for row in rows[1:] if row != rows[0]]
    if len(units) != len(header):
        raise NcuParseError(f"the units row has {len(units)} fields, the header {len(header)}")
    id_col, name_col = _column(header, "ID"), _column(header, "Kernel Name")
    nvtx_cols = _nvtx_columns(header)
    identity = {id_col, name_col, *nvtx_cols}
    records = []
    for line, row in enumerate(data, start=3):
        if len(row) != len(header):
            raise NcuParseError(f"table row {line} has {len(row)} fields, the header {len(header)}")
        values: dict[str, tuple[Value, str]] = {}
        attributes: dict[str, str] = {}
        for i, (name, cell) in enumerate(zip(header, row, strict=True)):
            if i in identity:
                continue
            if name in _LAUNCH_COLUMNS or _NVTX_START_END_FIELD in name:
                attributes[name] = cell
            else:
                values[name] = (parse_value(cell), units[i].strip())
        records.append(
            NcuKernelRecord(
                id=_kernel_id(row[id_col], line),
                name=row[name_col],
                nvtx_range=_record_nvtx(header, row, nvtx_cols),
                values=values,
                source_format=RAW,
                attributes=attributes,
            )
        )
    return records


def _parse_details(header: list[str], rows: list[list[str]]) -> list[NcuKernelRecord]:
    id_col, name_col = _column(header, "ID"), _column(header, "Kernel Name")
    section_col, metric_col, unit_col, value_col = (_column(header, c) for c in _DETAILS_COLUMNS)
    nvtx_cols = _nvtx_columns(header)
    identity = {id_col, name_col, *nvtx_cols}
    kernels: dict[int, NcuKernelRecord] = {}
    for line, row in enumerate(rows, start=2):
        if len(row) > len(header):
            raise NcuParseError(f"table row {line} has {len(row)} fields, the header {len(header)}")
        row = row + [""] * (len(header) - len(row))  # metric rows leave the rule columns off
        kernel_id = _kernel_id(row[id_col], line)
        record = kernels.get(kernel_id)
        if record is None:
            attributes = {header[i]: row[i] for i in range(section_col) if i not in identity}
            record = NcuKernelRecord(
                id=kernel_id,
                name=row[name_col],
                nvtx_range=_record_nvtx(header, row, nvtx_cols),
                values={},
                source_format=DETAILS,
                attributes=attributes,
            )
            kernels[kernel_id] = record
        elif record.name != row[name_col]:
            raise NcuParseError(f"table row {line}: kernel {kernel_id} changes its name")
        label = row[metric_col]
        if not label:  # a rule's row: advice text, no value
            _add_rule(record, dict(zip(header, row)))
            continue
        # The same label can appear in two sections ("Memory Throughput" in % and in byte/s);
        # the first keeps the plain label, later ones are qualified by their section.
        key = label if label not in record.values else f"{row[section_col]} / {label}"
        record.values[key] = (parse_value(row[value_col]), row[unit_col].strip())
    return list(kernels.values())


def _add_rule(record: NcuKernelRecord, row: dict[str, str]) -> None:
    if not row.get("Rule Name"):
        return
    found = from_details_row(row)
    record.rules.append(found)
    if found["message_type"] == ERROR and row.get("Rule Description"):
        record.rule_errors.append(row["Rule Description"])
