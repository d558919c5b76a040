"""Turn any ncu output a user has into report cards: a `.ncu-rep`, or a raw-page or details-page
CSV, with or without the program's output and ncu's log lines around it.

One card per NVTX push/pop range (a kernel outside every range gets a card per kernel name), or
one card per kernel name with group_by="kernel". Classification is left to the classifier.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from harness.cards.fields import SOURCE_NCU
from harness.cards.model import Card, Kernel, empty_metrics
from harness.errors import HarnessError
from harness.profile.ncu.failures import NcuFailure, detect
from harness.profile.ncu.parse import NcuKernelRecord, counter_metrics, parse_text, report_metrics
from harness.profile.ncu.report_file import read_report

GroupBy = Literal["range", "kernel"]

NCU_NOTES = "ncu_notes"  # a kernel's extra: what the parser could not read (a field left null, and why)
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
    """Cards (stage "imported", no classification yet) for the kernels of an ncu output file."""
    if group_by not in ("range", "kernel"):
        raise ValueError(f"group_by must be 'range' or 'kernel', got {group_by!r}")
    target = Path(path)
    groups: dict[tuple[str, str], list[Kernel]] = {}
    for record in read_records(target):
        if group_by == "range" and record.nvtx_range is not None:
            key = ("range", record.nvtx_range)
        else:
            key = ("kernel", record.name)
        try:
            kernel = _kernel(record)
        except ValueError as exc:
            raise NcuImportError(f"{target}: {exc}") from None
        groups.setdefault(key, []).append(kernel)
    return [_card(name, kernels) for (_, name), kernels in groups.items()]


def _records_from_text(text: str) -> list[NcuKernelRecord]:
    try:
        return parse_text(text)
    except ValueError:
        # A log without a table usually says why: report ncu's own failure instead.
        failure = detect(text)
        if failure is not None:
            raise failure from None
        raise


def _kernel(record: NcuKernelRecord) -> Kernel:
    # A unit the parser does not know leaves its field None with a note (NCU_NOTES), not a failed import.
    notes: list[str] = []
    metrics = empty_metrics()
    metrics.update(report_metrics(record, notes))
    extra: dict[str, object] = {"metrics_source": SOURCE_NCU, "ncu_id": record.id}
    counters = counter_metrics(record, notes)
    if counters:
        extra["ncu_counters"] = counters
    if notes:
        extra[NCU_NOTES] = notes
    return Kernel(name=record.name, metrics=metrics, extra=extra)


def kernel_notes(kernels: list[Kernel]) -> list[str]:
    """The parser's notes of these kernels (fields left null), each once, in order."""
    return list(dict.fromkeys(note for k in kernels for note in k.extra.get(NCU_NOTES) or []))


def _card(name: str, kernels: list[Kernel]) -> Card:
    durations = [k.metric("dur_us") for k in kernels]
    timed = [(d, k.name) for d, k in zip(durations, kernels, strict=True) if d is not None]
    return Card(
        group=f"ncu:{name}",
        resolution="",
        stage="imported",
        op=name,
        shape_parameters={},
        kernels=kernels,
        # A sum over some kernels only would look like the op's time; leave it unknown instead.
        summed_kernel_us=sum(d for d, _ in timed) if len(timed) == len(kernels) else None,
        dominant_kernel=max(timed, key=lambda pair: pair[0])[1] if timed else None,
    )
