"""The pack: runs.tgz (every run folder, step log and helper output, within the size a returned file may have)."""

from __future__ import annotations

import tarfile
from pathlib import Path

from .check import Check
from .outcome import Outcome

MAX_OUT_FILES = 8
MAX_FILE_BYTES = 15 * 2**20  # under the 16 MiB a returned file may weigh
REPORTS_BYTES = 8 * 2**20  # the kept .ncu-rep files that go into runs.tgz


def pack(check: Check) -> Outcome:
    """runs.tgz: run directories, step logs, helper outputs. The float64 references (*.pt) stay out;
    kept reports (*.ncu-rep) go in, smallest first, while they add up to at most REPORTS_BYTES; if the
    archive still weighs over MAX_FILE_BYTES, only the logs, JSON and Markdown go in."""
    files = sorted(p for p in check.work.rglob("*") if p.is_file() and p.relative_to(check.work).parts[0] != "site")
    chosen = [p for p in files if p.suffix not in (".pt", ".ncu-rep")]
    used = 0
    for report in sorted((p for p in files if p.suffix == ".ncu-rep"), key=lambda p: p.stat().st_size):
        if used + report.stat().st_size <= REPORTS_BYTES:
            chosen.append(report)
            used += report.stat().st_size
    target = check.out / "runs.tgz"
    tmp = target.with_name("runs.tgz.tmp")

    def write(paths: list[Path]) -> None:
        with tarfile.open(tmp, "w:gz") as archive:
            for path in paths:
                archive.add(path, arcname=str(Path("gpu_check") / path.relative_to(check.work)))

    write(chosen)
    if tmp.stat().st_size > MAX_FILE_BYTES:
        chosen = [p for p in chosen if p.suffix in (".log", ".json", ".md", ".txt") and p.stat().st_size < 2**20]
        write(chosen)
    tmp.replace(target)
    left_out = [str(p.relative_to(check.work)) for p in files if p not in chosen]
    return Outcome("ok", f"runs.tgz {target.stat().st_size / 2**20:.2f} MiB, {len(chosen)} files"
                         + (f"; left out {len(left_out)} (float64 references *.pt, reports over the budget)"
                            if left_out else ""),
                   {"bytes": target.stat().st_size, "files": len(chosen), "left_out": left_out[:50]})
