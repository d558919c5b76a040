"""Which run a run directory holds: `run_identity.json`, written when a run starts and checked on resume.

Why: `search.resume=true hydra.run.dir=DIR` continues the studies in DIR and rewrites its run-level
files (summary.md, best.json, report.html). With nothing recording what made DIR, a resume with the
default experiment ran into another experiment's folder, overwrote its outputs and mixed two
experiments' trial files in one card folder, with exit 0; and a resume of a folder that did not exist
quietly started a fresh run. The identity is the measurement-relevant configuration (experiment,
report by content, space, correctness settings, workload, timing, device, profiler, cards): a run that
differs from the one recorded in its folder is refused with one line naming the first difference,
before anything is measured, and from `python -m harness` before Hydra writes into the folder.

Each run directory holds the run of one experiment: `experiment=auto` records its own identity (the
cards as selected, the device as configured) and each of its sub-runs `<run>/<experiment>/` the
sub-run's, so no two experiments ever share a folder, nor a `trials/<card>/` folder in it.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from pathlib import Path
from typing import Any, Mapping

from harness.cards.atomic import write_json_atomic
from harness.cards.model import default_report_path
from harness.config.schema import AUTO, is_auto
from harness.errors import HarnessError
from harness.search.storage import RUN_DATABASE

IDENTITY_FILE = "run_identity.json"
# The compared fields, in the order a difference is looked for, each with the config key it comes from.
FIELDS = {"experiment": "experiment", "module": "experiment.module", "report_sha256": "report",
          "space": "experiment.space", "correctness": "experiment", "cards": "cards", "workload": "workload",
          "inputs": "inputs.dir", "timing": "timing", "device": "device", "profiler": "profiler"}
# Fields known only once the run has resolved them (device auto, profiler auto, a cards filter): a
# check made before that (`python -m harness`'s preflight) passes None and skips them.
RESOLVED = ("cards", "device", "profiler")
_ABSENT = object()


class ResumeError(HarnessError):
    """A run directory that this run must not write into; the message (one line) says what to do."""


def report_sha256(path: str | None) -> str:
    """The report a run reads, by content: its path may change (moved, relative), its bytes may not."""
    target = Path(path) if path else default_report_path()
    try:
        return hashlib.sha256(target.read_bytes()).hexdigest()
    except OSError:  # unreadable: loading the report says so, as one line, later
        return "unreadable"


def run_identity(cfg: Mapping[str, Any], *, device: str | None = None, profiler: str | None = None,
                 cards: Any = None) -> dict[str, Any]:
    """The identity of the run `cfg` describes; device, profiler and cards as resolved (None: unknown yet).
    experiment=auto's is its name alone: it has no experiment settings, its sub-runs record theirs."""
    experiment = cfg.get("experiment") or {}
    workload = cfg.get("workload") or {}
    identity = {
        "experiment": run_name(cfg),
        "module": experiment.get("module"),
        "report_sha256": report_sha256(cfg.get("report")),
        "report": cfg.get("report"),  # not compared: where it was read, for the messages
        "space": experiment.get("space") or {},
        # Both spellings of the correctness settings: experiment.tolerance and experiment.correctness.
        "correctness": {k: experiment[k] for k in ("tolerance", "correctness") if k in experiment},
        "cards": cards,
        # workload.dtype only where set: a folder made before it was compared still resumes without it.
        "workload": {k: workload.get(k) for k in ("scale", "cpu_scale", "seed", "attention", "cast")}
        | ({"dtype": workload["dtype"]} if workload.get("dtype") else {}),
        "inputs": (cfg.get("inputs") or {}).get("dir"),
        "timing": cfg.get("timing") or {},
        "device": device,
        "profiler": profiler,
    }
    return json.loads(json.dumps(identity, default=str))  # as it reads back from the file


def run_name(cfg: Mapping[str, Any]) -> str:
    """The experiment a config runs, or auto."""
    return AUTO if is_auto(cfg) else str(cfg["experiment"]["name"])


def read_identity(run_dir: Path) -> dict[str, Any] | None:
    path = run_dir / IDENTITY_FILE
    try:
        identity = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ResumeError(f"{path} is unreadable ({type(exc).__name__}); it records which run made "
                          f"{run_dir}: choose another hydra.run.dir") from None
    if not isinstance(identity, dict) or "experiment" not in identity:
        raise ResumeError(f"{path} is not a run identity; choose another hydra.run.dir")
    return identity


def _leaf_difference(path: str, recorded: Any, current: Any) -> tuple[str, Any, Any] | None:
    """The first (dotted path, recorded, current) where two JSON values differ; None when equal."""
    if isinstance(recorded, dict) and isinstance(current, dict):
        for key in [*recorded, *(k for k in current if k not in recorded)]:
            found = _leaf_difference(f"{path}.{key}", recorded.get(key, _ABSENT), current.get(key, _ABSENT))
            if found:
                return found
        return None
    return None if recorded == current else (path, recorded, current)


def first_difference(recorded: Mapping[str, Any], current: Mapping[str, Any]) -> tuple[str, Any, Any] | None:
    """The first compared field (in FIELDS order) where `current` differs from `recorded`, as a config key."""
    for name, label in FIELDS.items():
        now = current.get(name)
        if name in RESOLVED and now is None:
            continue
        found = _leaf_difference(label, recorded.get(name, _ABSENT), now)
        if found:
            return found
    return None


def _shown(value: Any) -> str:
    if value is _ABSENT:
        return "(absent)"
    text = value if isinstance(value, str) else json.dumps(value, separators=(", ", ": "))
    return text if len(text) <= 100 else text[:97] + "..."


def _refusal(run_dir: Path, difference: tuple[str, Any, Any], resume: bool, made: Mapping[str, Any]) -> str:
    label, recorded, current = difference
    other = "choose another hydra.run.dir"
    if label == "experiment":
        return (f"{run_dir} was made by experiment {recorded}, not {current}; "
                + (f"resume with experiment={recorded} or {other}" if resume
                   else f"{other} (or resume it: experiment={recorded} search.resume=true)"))
    if label == "report":
        source = made.get("report") or "null"  # null: the shipped report
        return (f"{run_dir} was made from another report (sha256 {str(recorded)[:12]}, not {str(current)[:12]}); "
                + (f"resume with report={source} or {other}" if resume else other))
    return (f"{run_dir} was made with {label}={_shown(recorded)}, not {_shown(current)}; "
            + (f"resume with the settings it was made with ({IDENTITY_FILE} there) or {other}" if resume else other))


def _study_experiments(study_file: Path) -> list[str]:
    """The experiments whose studies a run directory's optuna.db holds (a run made before identities)."""
    try:
        with sqlite3.connect(f"file:{study_file}?mode=ro", uri=True) as db:
            names = [row[0] for row in db.execute("SELECT study_name FROM studies")]
    except sqlite3.Error:
        return []
    return sorted({name.split(":", 1)[0] for name in names})


def _inside_auto_run(run_dir: Path) -> bool:
    """A sub-run folder of experiment=auto: made afresh when a resumed auto run reaches it first."""
    try:
        parent = read_identity(run_dir.parent)
    except ResumeError:
        return False
    return parent is not None and parent.get("experiment") == AUTO


def check_run_dir(run_dir: Path, cfg: Mapping[str, Any], *, device: str | None = None,
                  profiler: str | None = None, cards: Any = None) -> dict[str, Any] | None:
    """Refuse (ResumeError) a run directory this run must not write into; return its recorded identity.

    A folder recorded by another run (another experiment, report, space, ... than `cfg`) is refused,
    resumed or not. With search.resume=true and the study in the folder (search.storage null), the
    folder must hold a run: a missing one, or one with neither an identity nor a study, is refused.
    With an external search.storage, a new folder is how another process joins the shared studies.
    """
    resume = bool(cfg["search"].get("resume"))
    recorded = read_identity(run_dir) if run_dir.is_dir() else None
    if recorded is not None:
        difference = first_difference(recorded, run_identity(cfg, device=device, profiler=profiler, cards=cards))
        if difference:
            raise ResumeError(_refusal(run_dir, difference, resume, recorded))
        return recorded
    if not resume or cfg["search"].get("storage"):
        return None
    study_file = run_dir / RUN_DATABASE
    if study_file.exists():  # a run made before run identities were recorded: its studies name it
        experiments = _study_experiments(study_file)
        name = run_name(cfg)
        if experiments and name not in experiments:
            raise ResumeError(f"{run_dir} was made by experiment {experiments[0]} (its studies in "
                              f"{RUN_DATABASE}), not {name}; resume with experiment={experiments[0]} or choose "
                              "another hydra.run.dir")
        return None
    if _inside_auto_run(run_dir):
        return None
    fresh = "pass the hydra.run.dir of the run to resume, or drop search.resume=true to start a new run"
    if not run_dir.exists():
        raise ResumeError(f"search.resume=true: {run_dir} does not exist, so there is nothing to resume; {fresh}")
    raise ResumeError(f"search.resume=true: {run_dir} holds no run to resume (no {IDENTITY_FILE}, no studies); "
                      f"{fresh}")


def claim_run_dir(run_dir: Path, cfg: Mapping[str, Any], *, device: str | None = None,
                  profiler: str | None = None, cards: Any = None) -> dict[str, Any]:
    """`check_run_dir`, then record this run's identity in the folder if none is recorded; the identity.

    Called when a run starts (harness.run.execute.execute, and the auto run in harness.__main__), before
    anything is measured. A resumed run keeps the identity its folder was made with.
    """
    recorded = check_run_dir(run_dir, cfg, device=device, profiler=profiler, cards=cards)
    if recorded is not None:
        return recorded
    identity = run_identity(cfg, device=device, profiler=profiler, cards=cards)
    write_json_atomic(run_dir / IDENTITY_FILE, {**identity, "written_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
    return identity


def resumable(run_dir: Path) -> bool:
    """Whether a run was started in `run_dir` (its identity recorded), so that resuming it is allowed."""
    return (run_dir / IDENTITY_FILE).is_file()
