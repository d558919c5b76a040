"""Which report files `python -m harness.report diff` reads when it is given run folders.

A run folder as the before side is its baseline (baseline.json: each card re-profiled as the report has it), as
the after side its best (best.json: each card's adopted variant, the baseline where none was adopted). One folder
alone is that run's baseline against its best; two folders, the first's baseline against the second's best (a
second round against the first's start). A folder holding runs one level down (an `experiment=auto` run's
sub-runs, a multirun's jobs) is an error naming them. The diff says which files it read.
"""

from __future__ import annotations

from pathlib import Path

from harness.errors import HarnessError

SIDE_FILES = {"before": ("baseline.json", "its baseline"), "after": ("best.json", "its best: the adopted variants")}


class SideError(HarnessError):
    """A diff side that is neither a report file nor a run folder; one line, with what to pass."""


def resolve_side(path: str | Path, side: str) -> tuple[Path, str]:
    """The report file `path` names for `side` ("before" or "after"), and how the diff names it."""
    path = Path(path)
    if not path.is_dir():
        return path, str(path)
    name, what = SIDE_FILES[side]
    found = path / name
    if found.is_file():
        return found, f"{found} ({what})"
    runs = sorted(p.parent.name for p in path.glob(f"*/{name}"))
    if runs:
        raise SideError(f"{path}: no {name} here, but in the runs it holds (an experiment=auto folder's sub-runs, a "
                        "multirun's jobs); give one of them: " + ", ".join(str(path / run) for run in runs))
    raise SideError(f"{path}: a folder with no {name}: give a run folder (its baseline.json is the before side, its "
                    "best.json the after side) or a report file")


def resolve_sides(before: str, after: str | None) -> tuple[tuple[Path, str], tuple[Path, str]]:
    """Both sides; `after` None: `before` must be a run folder, read as its baseline against its best."""
    if after is None and not Path(before).is_dir():
        raise SideError(f"{before}: one argument must be a run folder (its baseline against its best); give AFTER "
                        "to diff two report files")
    return resolve_side(before, "before"), resolve_side(after if after is not None else before, "after")
