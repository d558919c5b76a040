"""Read a binary `.ncu-rep` report into kernel records.

Two ways, tried in order:
1. the `ncu_report` Python module (PyPI `ncu-report`, or the copy every ncu installation ships in
   its `extras/python` folder), which reads a report without a GPU;
2. `ncu --import REPORT --csv --page raw --print-units base`, parsed like any raw page.

Through the module each kernel also keeps ncu's rule results (harness.profile.ncu.rule_results). Which
ncu wrote the report the module does not say; the report file does, in its session record
(`writer_version`).
"""

from __future__ import annotations

import importlib
import mmap
import os
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from harness.errors import HarnessError
from harness.hardware.ncu_metrics import CACHE_BYTES_METRICS
from harness.profile.ncu.command import export_command, find_ncu
from harness.profile.ncu.metrics import FIELD_SOURCES, STALL_METRIC
from harness.profile.ncu.parse import REPORT, NcuKernelRecord, Value, nvtx_path, parse_text
from harness.profile.ncu.rule_results import from_module
from harness.profile.ncu.runner import run_ncu

# Every metric a report field or a counter-experiment may read; the stall metrics are found by name.
_WANTED: tuple[str, ...] = (
    *(name for source in FIELD_SOURCES.values() for name in source.names()),
    *CACHE_BYTES_METRICS.values(),
    "device__attribute_display_name",
)


class NcuReportError(HarnessError):
    """A report file that cannot be read here; the message names the file and the way out."""


def _extras_dirs() -> list[Path]:
    """Where an ncu installation keeps its copy of the ncu_report module."""
    roots: list[Path] = []
    home = os.environ.get("NCU_HOME")
    if home:
        roots.append(Path(home))
    ncu = find_ncu()
    if ncu:
        # /opt/nvidia/nsight-compute/<v>/ncu; or <cuda>/bin/ncu next to <cuda>/nsight-compute-<v>/.
        folder = Path(ncu).resolve().parent
        roots += [folder, folder.parent, *sorted(folder.parent.glob("nsight-compute*"), reverse=True)]
    return [root / "extras" / "python" for root in roots]


def ncu_report_module() -> ModuleType | None:
    """The ncu_report module: installed, else from an ncu installation's extras/python; None if neither."""
    try:
        return importlib.import_module("ncu_report")
    except ImportError:
        pass
    for folder in _extras_dirs():
        if not (folder / "ncu_report.py").is_file() and not (folder / "ncu_report").is_dir():
            continue
        sys.path.append(str(folder))
        try:
            return importlib.import_module("ncu_report")
        except ImportError:
            sys.path.remove(str(folder))
    return None


def read_report(path: str | os.PathLike[str], *, deadline_s: float = 600.0) -> list[NcuKernelRecord]:
    """Every profiled kernel of a `.ncu-rep`, in report order."""
    target = Path(path)
    if not target.is_file():
        raise NcuReportError(f"{target}: no such report file")
    module = ncu_report_module()
    if module is not None:
        return _read_with_module(module, target)
    ncu = find_ncu()
    if ncu is not None:
        result = run_ncu(export_command(target, ncu=ncu), deadline_s)
        return parse_text(result.stdout)
    raise NcuReportError(
        f"{target}: cannot read a binary ncu report here: `pip install ncu-report` (the ncu_report module), "
        "or put Nsight Compute's ncu on PATH (or set NCU_HOME)"
    )


def _read_with_module(module: ModuleType, target: Path) -> list[NcuKernelRecord]:
    try:
        context = module.load_report(str(target))
    except Exception as exc:  # the module raises its own types; all mean the same to a caller
        raise NcuReportError(f"{target}: ncu_report cannot load it ({exc})") from None
    records: list[NcuKernelRecord] = []
    for range_index in range(context.num_ranges()):
        profiled_range = context.range_by_idx(range_index)
        for action_index in range(profiled_range.num_actions()):
            action = profiled_range.action_by_idx(action_index)
            rules, rule_errors = from_module(action, module)
            records.append(
                NcuKernelRecord(
                    id=len(records),  # ncu's CSV numbers kernels across ranges the same way
                    name=action.name(action.NameBase_DEMANGLED),
                    nvtx_range=_nvtx(action),
                    values=_values(action),
                    source_format=REPORT,
                    rules=rules,
                    rule_errors=rule_errors,
                )
            )
    if not records:
        # load_report accepts any file; a non-report simply has no ranges.
        raise NcuReportError(f"{target}: no profiled kernels in it (not an ncu report, or an empty one)")
    return records


def _values(action: Any) -> dict[str, tuple[Value, str]]:
    names = [*_WANTED, *(name for name in action.metric_names() if STALL_METRIC.match(name))]
    values: dict[str, tuple[Value, str]] = {}
    for name in names:
        metric = action.metric_by_name(name)
        if metric is None:
            continue
        value = metric.value()
        if value is None:
            continue
        values[name] = (value if isinstance(value, str) else float(value), metric.unit())
    return values


def _nvtx(action: Any) -> str | None:
    state = action.nvtx_state()
    if state is None:
        return None
    ranges = []
    for domain_id in state.domains():
        domain = state.domain_by_id(domain_id)
        ranges += [(domain.name(), name) for name in domain.push_pop_ranges()]
    return nvtx_path(ranges)


# The report's session record names the ncu that wrote it as a key and its value, protobuf strings (field 1
# and 2 of one entry): "Nsight Compute Target" -> "2025.3.1.0 (build 36398880) (public-release)". The
# ncu_report module exposes no session data, so the entry is found by its key's bytes.
_WRITER_KEY = b"\x0a\x15Nsight Compute Target\x12"
_VERSION = re.compile(rb"\d{4}\.\d+\.\d+(?:\.\d+)?(?: \(build \d+\))?")


def writer_version(path: str | os.PathLike[str]) -> str | None:
    """The version of the ncu that wrote a `.ncu-rep` ("2025.3.1.0 (build 36398880)"); None when the file does
    not say (every report read here, ncu 2020.2 to 2025.3, does)."""
    try:
        with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            start = data.find(_WRITER_KEY)
            if start < 0:
                return None
            value = start + len(_WRITER_KEY)
            length = data[value]  # a version string is shorter than 128 bytes: a one-byte varint
            found = _VERSION.match(data[value + 1:value + 1 + length]) if length < 128 else None
    except (OSError, ValueError):  # unreadable, or empty (mmap refuses a file of 0 bytes)
        return None
    return found.group().decode() if found else None
