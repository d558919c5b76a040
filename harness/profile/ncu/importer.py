"""Turn any ncu output a user has into report cards: a `.ncu-rep`, or a raw-page or details-page
CSV, with or without the program's output and ncu's log lines around it.

One card per NVTX push/pop range (a kernel outside every range gets a card per kernel name), or
one card per kernel name with group_by="kernel". Classification is left to the classifier.

Every kernel keeps ncu's rule results (`ncu_rules`, harness.profile.ncu.rule_results), and a kernel ncu
failed to profile (metrics it recorded as NaN) keeps why (`ncu_failed`) instead of numbers it lacks.
`cards_from_ncu` lists every launch as its own entry (a trial's range, as the ncu backend reads it);
`import_ncu`, the report a user imports, counts the launches of one kernel and configuration as one entry
(harness.profile.ncu.launch_groups) and names the GPU and the ncu that made it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from harness.cards.fields import NCU_FAILED, SOURCE_NCU
from harness.cards.launches import INVOCATION, INVOCATIONS, launches, per_invocation_value
from harness.cards.model import DEVICE_KEY, Card, Kernel, Report, empty_metrics
from harness.cards.rules import dominant
from harness.errors import HarnessError
from harness.profile.ncu.failures import NcuFailure, detect
from harness.profile.ncu.launch_groups import count_launches
from harness.profile.ncu.parse import NCU_NOTES, REPORT, NcuKernelRecord, counter_metrics, parse_text, report_metrics
from harness.profile.ncu.report_file import read_report, writer_version

GroupBy = Literal["range", "kernel"]

NCU_VERSION_KEY = "ncu_version"  # a report's: the ncu that wrote the imported file
IMPORT_KEY = "ncu_import"  # a report's: what was imported, how, and what the file does not say
DEVICE_METRIC = "device__attribute_display_name"
_RULE_ERROR = "returned an error: "
_REPORT_MAGIC = b"NVR\x00"  # first bytes of every .ncu-rep seen so far
_REPORT_SUFFIXES = (".ncu-rep", ".ncu-repz")


class NcuImportError(HarnessError):
    """ncu output that cannot be turned into cards; the message is one line naming the file."""


def read_records(path: str | os.PathLike[str]) -> list[NcuKernelRecord]:
    """The kernels in an ncu report or CSV file, whichever it is."""
    target = Path(path)
    try:
        with target.open("rb") as handle:
            binary = handle.read(len(_REPORT_MAGIC)) == _REPORT_MAGIC
        data = None if binary or target.name.endswith(_REPORT_SUFFIXES) else target.read_bytes()
    except OSError as exc:
        raise NcuImportError(f"{target}: cannot read ({exc.strerror or exc})") from None
    try:
        if data is None:
            records = read_report(target)
        else:
            records = _records_from_text(data.decode("utf-8", errors="replace"))
    except NcuFailure as exc:
        raise NcuImportError(f"{target}: {exc}") from None
    except ValueError as exc:
        message = str(exc)
        raise NcuImportError(message if message.startswith(str(target)) else f"{target}: {message}") from None
    if not records:
        raise NcuImportError(f"{target}: the ncu table lists no kernels")
    return records


def cards_from_ncu(path: str | os.PathLike[str], group_by: GroupBy = "range") -> list[Card]:
    """Cards (stage "imported", no classification yet) for the kernels of an ncu output file, one entry per
    launch."""
    target = Path(path)
    return [_card(name, kernels) for (_, name), kernels in _groups(target, read_records(target), group_by)]


def import_ncu(path: str | os.PathLike[str], group_by: GroupBy = "range") -> Report:
    """The report `report import-ncu` writes (not classified yet): its cards with the launches of one kernel and
    configuration counted as one entry, and the GPU (`device`) and ncu (`ncu_version`) that made the file."""
    target = Path(path)
    records = read_records(target)
    cards = []
    for (kind, name), kernels in _groups(target, records, group_by):
        counted = count_launches(kernels)
        if kind == "range":
            what = f"everything ncu profiled inside NVTX range {name!r} (ncu keeps no count of the range's passes)"
            cards.append(_card(name, counted, 1, what))
        else:  # a kernel name has no other notion of an invocation than one launch
            cards.append(_card(name, counted, sum(launches(k) for k in counted), "one launch of the kernel"))
    report = Report(cards=cards, source=str(target))
    report.extra.update(_provenance(target, records, group_by))
    return report


def _groups(target: Path, records: list[NcuKernelRecord],
            group_by: GroupBy) -> list[tuple[tuple[str, str], list[Kernel]]]:
    """The records' kernels by card: ("range", NVTX range) or ("kernel", name), in order of first appearance."""
    if group_by not in ("range", "kernel"):
        raise ValueError(f"group_by must be 'range' or 'kernel', got {group_by!r}")
    groups: dict[tuple[str, str], list[Kernel]] = {}
    for record in records:
        if group_by == "range" and record.nvtx_range is not None:
            key = ("range", record.nvtx_range)
        else:
            key = ("kernel", record.name)
        try:
            kernel = _kernel(record)
        except ValueError as exc:
            raise NcuImportError(f"{target}: {exc}") from None
        groups.setdefault(key, []).append(kernel)
    return list(groups.items())


def _provenance(target: Path, records: list[NcuKernelRecord], group_by: GroupBy) -> dict[str, object]:
    """The report's `device` and `ncu_version` where the file says them, and what was imported how."""
    devices = _devices(records)
    version = writer_version(target)  # a CSV has no session record: None
    notes = []
    if len(devices) != 1:
        notes.append(f"device: the kernels name {len(devices)} GPUs ({', '.join(devices)})" if devices else
                     f"device: the file has no {DEVICE_METRIC}; give the GPU with --report-device where asked")
    if version is None:
        notes.append("ncu_version: " + ("the report file names no ncu version" if records[0].source_format == REPORT
                                         else "a CSV export does not say which ncu wrote it"))
    out: dict[str, object] = {IMPORT_KEY: {"file": str(target), "format": records[0].source_format,
                                           "group_by": group_by, "launches": len(records), "notes": notes}}
    if len(devices) == 1:
        out[DEVICE_KEY] = devices[0]
    if version is not None:
        out[NCU_VERSION_KEY] = version
    return out


def _records_from_text(text: str) -> list[NcuKernelRecord]:
    try:
        return parse_text(text)
    except ValueError:
        # A log without a table usually says why: report ncu's own failure instead.
        failure = detect(text)
        if failure is not None:
            raise failure from None
        raise


def _devices(records: list[NcuKernelRecord]) -> list[str]:
    """The GPUs the kernels ran on, by ncu's display name ("NVIDIA A10G"), each once."""
    names = (found[1] for record in records if (found := record.value(DEVICE_METRIC)) is not None)
    return list(dict.fromkeys(name.strip() for name in names if isinstance(name, str) and name.strip()))


def _kernel(record: NcuKernelRecord) -> Kernel:
    # A unit the parser does not know leaves its field None with a note (NCU_NOTES), not a failed import.
    notes: list[str] = []
    metrics = empty_metrics()
    metrics.update(report_metrics(record, notes))
    extra: dict[str, object] = {"metrics_source": SOURCE_NCU, "ncu_id": record.id}
    counters = counter_metrics(record, notes)
    if counters:
        extra["ncu_counters"] = counters
    failed = _failure(record)
    if failed:
        extra[NCU_FAILED] = failed
    if record.rules:
        extra["ncu_rules"] = record.rules
    if notes:
        extra[NCU_NOTES] = notes
    return Kernel(name=record.name, metrics=metrics, extra=extra)


def _failure(record: NcuKernelRecord) -> str | None:
    """Why ncu has no numbers for a launch it failed to profile: the metrics it recorded as NaN, and what its
    rules said they could not find ("Metric launch__block_size not found"); None for a measured launch."""
    unread = record.unread()
    if not unread:
        return None
    named = ", ".join(unread[:6]) + (f" and {len(unread) - 6} more" if len(unread) > 6 else "")
    # "Rule Occupancy returned an error: Metric ... not found" (each comes with a second result, the rule's traceback).
    said = list(dict.fromkeys(error.split(_RULE_ERROR, 1)[1].splitlines()[0].strip()
                              for error in record.rule_errors if _RULE_ERROR in error))
    return (f"ncu recorded no value (NaN) for {len(unread)} of the metrics read here ({named})"
            + (f"; its rules say: {'; '.join(said)}" if said else ""))


def kernel_notes(kernels: list[Kernel]) -> list[str]:
    """The parser's notes of these kernels (fields left null), each once, in order."""
    return list(dict.fromkeys(note for k in kernels for note in k.extra.get(NCU_NOTES) or []))


def _card(name: str, kernels: list[Kernel], invocations: int = 1, invocation: str | None = None) -> Card:
    card = Card(group=f"ncu:{name}", resolution="", stage="imported", op=name, shape_parameters={}, kernels=kernels)
    if invocation is not None:
        card.extra.update({INVOCATIONS: invocations, INVOCATION: invocation})
    durations = [per_invocation_value(card, k, k.metric("dur_us")) for k in kernels]
    # A sum over some kernels only would look like the op's time; leave it unknown instead.
    card.summed_kernel_us = sum(d or 0.0 for d in durations) if all(d is not None for d in durations) else None
    top = dominant(kernels)
    card.dominant_kernel = top.name if top is not None else None
    return card
